//! [`Daemon::build`](super::Daemon::build)'s layers, bottom up, one function each: the
//! [`storage`] (the database, made this node's, what an earlier run left recovered), the
//! [`bus`] (webhooks, events), the [`processes`] (approvals, tools, gateway, launcher, pool),
//! the [`pipeline`] (and the gateway served with its parts), the [`doors`] (cluster, re-drive,
//! schedules, `/mcp`, metrics, the listener's bounds, OAuth). Each takes the layers below it
//! and returns its own parts as a value.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use plugin_contract::Plugin;

use super::StartError;
use crate::approvals::policy::Policy;
use crate::approvals::Approvals;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::events::EventBus;
use crate::gateway::Gateway;
use crate::http::mcp_endpoint::threads::ThreadsPlugin;
use crate::http::mcp_endpoint::McpEndpoint;
use crate::launch::Launcher;
use crate::mcp::{McpAdapter, ToolRegistry};
use crate::metrics::{GatewayMetrics, Metrics};
use crate::pipeline::{Pipeline, PipelineParts, PipelineSettings, ThrottleSettings};
use crate::pool::{AdmissionSettings, Pool, PoolSettings};
use crate::store::{EndCause, Store, ThreadRow, Workspace};
use crate::webhooks::Webhooks;
use crate::workspace::Workspaces;

/// The database, opened and ready for this node.
pub(super) struct Storage {
    pub store: Store,
    /// This node's id (`"local"` without clustering).
    pub node: String,
    /// `cluster.advertise` is set: the database is shared, so what is pending may be a peer's.
    pub clustered: bool,
}

/// Opens the store (running migrations), joins the cluster and makes the store the node's
/// before any part gets a clone of it; alone, denies the permissions an earlier run left
/// pending.
pub(super) async fn storage(config: &Config) -> Result<Storage, StartError> {
    crate::private_fs::create_dir(&config.data_dir).map_err(StartError::Dirs)?;
    let db_path = config.db_path();
    if db_path != ":memory:" && !crate::store::is_postgres_url(&db_path) {
        private_sqlite_files(&db_path)?;
    }
    let clustered = config.cluster.advertise.is_some();
    if clustered && !crate::store::is_postgres_url(&db_path) {
        return Err(StartError::Cluster(
            "cluster.advertise (--advertise, HARNESS_ADVERTISE) needs a PostgreSQL database (db = \"postgres://…\"): the nodes share their threads through it".into(),
        ));
    }
    let store = Store::open(&db_path).await?;
    let token = config.auth_token.as_deref().filter(|t| !t.is_empty());
    warn_keys_without_token(config, &store).await;
    if clustered && !store.join_cluster(token).await? {
        return Err(StartError::Cluster(
            "this node's token is not the one the cluster's nodes share (the database holds \
             the hash of another, or of none): give every node the same HARNESS_TOKEN; to \
             change it, stop every node and `DELETE FROM cluster_credential`"
                .into(),
        ));
    }
    // A node's store holds its leases: every write of a thread's turn checks them.
    let store = match &config.cluster.advertise {
        Some(advertise) => {
            let url = match advertise.as_str() {
                "auto" => format!("http://{}", config.bind),
                url => url.to_owned(),
            };
            store.as_node(url, config.cluster.lease_ttl)
        }
        None => store,
    };
    if !clustered {
        let denied = store
            .deny_pending_permissions("the daemon stopped before anyone answered")
            .await?;
        if denied > 0 {
            warn!(
                permissions = denied,
                "Denied tool permissions left pending by an earlier run."
            );
        }
    }
    let node = store.node_id().unwrap_or("local").to_owned();
    Ok(Storage {
        store,
        node,
        clustered,
    })
}

/// Creates the SQLite database file (and its journal files, when there) private, before SQLite
/// creates it: its journal files take the database file's mode.
fn private_sqlite_files(db_path: &str) -> Result<(), StartError> {
    for suffix in ["", "-wal", "-shm"] {
        let path = PathBuf::from(format!("{db_path}{suffix}"));
        if suffix.is_empty() || path.exists() {
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent).map_err(StartError::Dirs)?;
            }
            crate::private_fs::create_file(&path).map_err(StartError::Dirs)?;
        }
    }
    Ok(())
}

/// The event bus and the webhooks it hands turn ends to.
pub(super) struct Bus {
    pub webhooks: Webhooks,
    pub events: EventBus,
}

/// Starts the event bus (its writer on `background`); alone, ends the turns an earlier run left
/// pending, before any turn runs.
pub(super) async fn bus(
    config: &Config,
    storage: &Storage,
    background: &TaskTracker,
) -> Result<Bus, StartError> {
    let webhooks = Webhooks::new(&config.webhooks, storage.store.clone(), &storage.node)
        .map_err(StartError::Webhooks)?;
    let events = EventBus::start(storage.store.clone(), background, Some(webhooks.clone()));
    // A shared database holds the peers' running turns too: what a dead node left pending is
    // not ours to end: the node that takes a thread over ends them (`Cluster::take`).
    if !storage.clustered {
        let recovered = events
            .end_left_pending(
                EndCause::Crash,
                "the daemon stopped before this turn finished",
            )
            .await?;
        if recovered > 0 {
            warn!(
                messages = recovered,
                "Ended the turns an earlier run left pending (interrupted)."
            );
        }
    }
    Ok(Bus { webhooks, events })
}

/// What runs the CLI processes, and what they reach while they run.
pub(super) struct Processes {
    pub approvals: Approvals,
    pub mcp: Arc<McpAdapter>,
    /// Bound, not yet served: it is served with the pipeline's parts.
    pub gateway: Option<(Gateway, tokio::net::TcpListener)>,
    pub workspaces: Workspaces,
    pub pool: Pool,
}

/// The approvals' policies, the tools and the MCP adapter, the gateway (bound before the
/// launcher: every child is given its address), the launcher, the workspaces and the pool.
pub(super) async fn processes(
    config: &Config,
    plugins: &[Arc<dyn Plugin>],
    store: &Store,
    bus: &Bus,
    background: &TaskTracker,
) -> Result<Processes, StartError> {
    let policies = policies(config)?;
    // The CLI runs some reads and commands without asking: each profile's deny rules go to
    // its processes' own matcher too.
    let cli_denies: BTreeMap<String, Vec<String>> = policies
        .iter()
        .map(|(name, policy)| (name.clone(), policy.cli_deny_rules()))
        .collect();
    let approvals = Approvals::new(
        policies,
        config.approvals.timeout,
        store.clone(),
        bus.events.clone(),
    );
    let registry = Arc::new(ToolRegistry::load(plugins, config.tools.timeout)?);
    let mcp = Arc::new(McpAdapter::new(registry, store.clone()));
    let gateway = if config.gateway.enabled {
        let bound = Gateway::bind(&config.gateway).await;
        Some(bound.map_err(|error| StartError::Bind {
            addr: config.gateway.listen,
            error,
        })?)
    } else {
        None
    };
    // The CLI's limit on a call to our MCP server must clear the longest tool's own bound,
    // which the tools declare (delegation's comes from `[plugins.delegation]`).
    let mut launcher = Launcher::new(
        config,
        mcp.manifest(),
        mcp.registry().longest_timeout(),
        &cli_denies,
    )
    .map_err(StartError::Dirs)?;
    if let Some((gateway, _)) = &gateway {
        launcher = launcher.with_gateway(gateway.clone());
    }
    if let Some(sandbox) = sandbox(config)? {
        launcher = launcher.with_sandbox(sandbox);
    }
    let workspaces = Workspaces::new(config).map_err(StartError::Dirs)?;
    prune_worktrees(store, &workspaces, background);
    let pool = Pool::new(
        pool_settings(config),
        launcher,
        workspaces.clone(),
        mcp.clone(),
        store.clone(),
    );
    Ok(Processes {
        approvals,
        mcp,
        gateway,
        workspaces,
        pool,
    })
}

/// Each profile's approval policy, walled (auto-allowing what its walls hold) when its sandbox
/// says so.
fn policies(config: &Config) -> Result<BTreeMap<String, Policy>, StartError> {
    let mut policies = BTreeMap::new();
    for name in config.profile_names() {
        let own = config.profiles.get(&name).map(|p| p.sandbox.clone());
        let auto_allow = config.sandbox.enabled
            && config
                .sandbox
                .of(&own.unwrap_or_default())
                .auto_allow
                .unwrap_or(false);
        let policy = Policy::new(&config.approvals_of(&name))
            .map_err(|err| StartError::Approvals(format!("profiles.{name}: {err}")))?
            .walled(auto_allow);
        policies.insert(name, policy);
    }
    Ok(policies)
}

/// `[pool]`, as the pool takes it.
fn pool_settings(config: &Config) -> PoolSettings {
    PoolSettings {
        idle_ttl: config.pool.idle_ttl,
        capacity: config.pool.max_capacity,
        max_memory: config
            .pool
            .max_memory_mb
            .map(|mb| mb.saturating_mul(1024 * 1024)),
        prewarm_evicts_after: config.pool.prewarm_evicts_after,
        spares: config.pool.spares,
        workspace_spares: config.pool.workspace_spares,
        admission: AdmissionSettings {
            evict_grace: config.pool.evict_grace,
            slot_wait: config.pool.slot_wait,
        },
    }
}

/// Off the start path (a scan of every thread and a git run per repository need not hold up
/// the listener): the records of worktrees removed by hand since the last run go, and so do the
/// parked worktrees of spares a daemon that did not stop cleanly left.
fn prune_worktrees(store: &Store, workspaces: &Workspaces, background: &TaskTracker) {
    let (pruning, pruned) = (store.clone(), workspaces.clone());
    let started = std::time::SystemTime::now();
    background.spawn(async move {
        match pruning.list_threads().await {
            Ok(threads) => {
                pruned.prune(worktree_repos(&threads)).await;
                pruned
                    .remove_orphans(&worktree_folders(&threads), started)
                    .await;
            }
            Err(err) => warn!(error = %err, "Could not list the threads to prune worktrees."),
        }
    });
}

/// Builds the pipeline over the processes and the bus, and sets it serving the CLI-started turns
/// (`claude.scheduling_tools`) and the walls' breaches (recorded on their thread).
pub(super) fn pipeline(
    config: &Config,
    plugins: &[Arc<dyn Plugin>],
    store: &Store,
    bus: &Bus,
    processes: &Processes,
) -> Result<Pipeline, StartError> {
    let pipeline = Pipeline::new(PipelineParts {
        traces: crate::traces::Traces::start(&config.otel)?,
        workspaces: processes.workspaces.clone(),
        files: crate::files::Files::new(store.clone(), config.files.clone()),
        store: store.clone(),
        pool: processes.pool.clone(),
        mcp: processes.mcp.clone(),
        events: bus.events.clone(),
        approvals: processes.approvals.clone(),
        context: plugins
            .iter()
            .filter_map(|p| p.context_provider())
            .collect(),
        settings: PipelineSettings {
            max_message_chars: config.max_message_chars,
            queue_limit: config.turn.queue_limit,
            turn_timeout: config.turn.timeout,
            throttle: ThrottleSettings {
                enabled: config.rate_limit.enabled,
                max: config.rate_limit.max_turns(&config.pool),
                min: config.rate_limit.min_concurrent_turns,
                cooldown: config.rate_limit.cooldown,
            },
        },
        budgets: crate::budget::Budgets {
            daily_usd: config.budget.daily_usd,
            turn_estimate_usd: config.budget.turn_estimate_usd,
            ledger: Default::default(),
        },
    });
    pipeline.serve_cli_turns();
    pipeline.serve_breaches();
    Ok(pipeline)
}

/// Serves the bound gateway (if any) with the bus and the pipeline's budgets, throttle and
/// traces, until the returned token is cancelled: after the pool stops, so turns finishing in
/// the grace period still reach the model.
pub(super) fn serve_gateway(
    gateway: Option<(Gateway, tokio::net::TcpListener)>,
    store: &Store,
    bus: &Bus,
    pipeline: &Pipeline,
    metrics: &GatewayMetrics,
    background: &TaskTracker,
) -> CancellationToken {
    let stop = CancellationToken::new();
    if let Some((gateway, listener)) = gateway {
        let served = crate::gateway::Served {
            store: store.clone(),
            events: bus.events.clone(),
            budgets: pipeline.budgets().clone(),
            throttle: pipeline.throttle().clone(),
            traces: pipeline.traces().clone(),
            metrics: metrics.clone(),
        };
        background.spawn(gateway.serve(listener, served, stop.clone()));
    }
    stop
}

/// What reaches the pipeline from outside: the cluster, the re-drive sweep, the schedules,
/// `/mcp`, the metrics, the listener's bounds and OAuth.
pub(super) struct Doors {
    pub cluster: Option<Cluster>,
    pub redrive: crate::redrive::Redrive,
    pub schedules: crate::schedules::Schedules,
    pub mcp_endpoint: Arc<McpEndpoint>,
    /// Every thread operation, behind `/api` and `/mcp` alike.
    pub threads: crate::service::ThreadService,
    /// Each goal's loop, over the thread service.
    pub goals: crate::goals::Goals,
    pub metrics: Arc<Metrics>,
    pub door: crate::http::serve::Door,
    pub oauth: Option<Arc<crate::oauth::ResourceServer>>,
}

/// Builds what the pipeline is reached through, each over the layers below.
pub(super) fn doors(
    config: &Config,
    plugins: &[Arc<dyn Plugin>],
    storage: &Storage,
    bus: &Bus,
    processes: &Processes,
    pipeline: &Pipeline,
    gateway_metrics: &GatewayMetrics,
) -> Result<Doors, StartError> {
    let store = &storage.store;
    let (pool, mcp) = (&processes.pool, &processes.mcp);
    let cluster = Cluster::of(
        store.clone(),
        pool.clone(),
        bus.webhooks.clone(),
        config.auth_token.clone(),
    );
    let redrive = crate::redrive::Redrive::new(
        store.clone(),
        pipeline.clone(),
        cluster.clone(),
        config.turn.redrive_attempts,
    );
    let schedules = crate::schedules::Schedules::new(
        store.clone(),
        pipeline.clone(),
        bus.events.clone(),
        cluster.clone(),
        storage.node.clone(),
        config.schedules.clone(),
    );
    let threads = crate::service::ThreadService::new(
        pipeline.clone(),
        store.clone(),
        bus.webhooks.clone(),
        cluster.clone(),
        config.threads.cascade_delete(),
    );
    let goals = crate::goals::Goals::new(
        threads.clone(),
        pipeline.clone(),
        store.clone(),
        cluster.clone(),
        config.claude_workdir(),
    );
    let door = crate::http::serve::Door::open(&config.http);
    let mcp_endpoint = Arc::new(
        McpEndpoint::new(
            plugins,
            ThreadsPlugin::new(threads.clone(), config.turn.timeout),
            mcp.clone(),
            pipeline.clone(),
            config.tools.timeout,
            store.clone(),
            door.streams.clone(),
        )?
        .with_events(crate::http::mcp_endpoint::events::Events::new(
            store.clone(),
            bus.webhooks.clone(),
            mcp.metrics().clone(),
            door.streams.clone(),
        )),
    );
    let metrics = Arc::new(Metrics::new(
        pool.metrics(),
        mcp.metrics(),
        store.metrics(),
        pipeline.metrics(),
        processes.approvals.metrics(),
        pipeline.throttle_metrics(),
        gateway_metrics,
    ));
    Ok(Doors {
        cluster,
        redrive,
        schedules,
        mcp_endpoint,
        threads,
        goals,
        metrics,
        door,
        oauth: crate::oauth::ResourceServer::new(&config.oauth, store).map(Arc::new),
    })
}

/// Says so at every start when API keys are live but nothing makes a caller use one: with no
/// operator token and no OAuth, a request without credentials is the operator, so a key's
/// tenant, scopes and limits hold back only those who choose to send it.
async fn warn_keys_without_token(config: &Config, store: &Store) {
    let token_set = config.auth_token.as_deref().is_some_and(|t| !t.is_empty());
    if token_set || config.oauth.enabled() {
        return;
    }
    let live = match store.list_keys().await {
        Ok(keys) => keys.iter().filter(|k| k.revoked_at.is_none()).count(),
        Err(err) => {
            warn!(error = %err, "Could not count the API keys.");
            return;
        }
    };
    if live > 0 {
        warn!(
            keys = live,
            "API keys are live but no operator token is set (HARNESS_TOKEN, auth_token): a request without a key is the operator, so keys isolate no tenant; set a token (SECURITY.md)."
        );
    }
}

/// The machine's walls for every child (`[sandbox]`): `None` when they are off, which the log
/// says at every start; an error when they are on and the kernel cannot hold them.
fn sandbox(config: &Config) -> Result<Option<Arc<walls::Sandbox>>, StartError> {
    if !config.sandbox.enabled {
        warn!("[sandbox] enabled = false: threads' commands run with no walls; only the approvals stand between them and everything this daemon's user can reach (SECURITY.md).");
        return Ok(None);
    }
    static DAEMONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let name = format!(
        "{}-{}",
        std::process::id(),
        DAEMONS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    let sandbox =
        walls::Sandbox::probe(&name, config.sandbox.cgroups).map_err(StartError::Sandbox)?;
    let status = sandbox.status();
    info!(landlock_abi = status.landlock_abi, limits = status.limits, note = ?status.limits_note, "Walls on: each thread's process tree is sandboxed.");
    Ok(Some(Arc::new(sandbox)))
}

/// The folders of the threads' worktrees.
fn worktree_folders(threads: &[ThreadRow]) -> Vec<PathBuf> {
    threads
        .iter()
        .filter_map(|t| match t.workspace.as_deref() {
            Some(Workspace::Worktree { path, .. }) => Some(path.clone()),
            _ => None,
        })
        .collect()
}

/// The repositories (still there) that hold the worktree of some thread.
fn worktree_repos(threads: &[ThreadRow]) -> BTreeSet<&Path> {
    threads
        .iter()
        .filter_map(|t| match t.workspace.as_deref() {
            Some(Workspace::Worktree { repo, .. }) => Some(repo.as_path()),
            _ => None,
        })
        .filter(|repo| repo.is_dir())
        .collect()
}
