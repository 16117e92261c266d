//! The one place the daemon is put together, in dependency order, and its lifecycle: [`start`]
//! builds and serves, [`Running::stop`] shuts down within the grace period, [`run`] does both
//! around a shutdown signal.
//!
//! Build order: store (migrations, crash recovery) → event bus → tools and the MCP adapter →
//! launcher and pool → pipeline → the MCP endpoint's tools → metrics → HTTP router and listener. Each part gets the parts
//! it uses and nothing else; nothing is wired after construction. With clustering the store is
//! made the node's ([`Store::as_node`](crate::store::Store::as_node)) before any part gets a
//! clone of it; with `cluster.advertise = "auto"` the listener is bound first, so the node
//! advertises the address it got.
//!
//! Shutdown: stop accepting and start no queued turn → let running turns finish up to the grace
//! period → kill every child → let the killed turns record their end → mark what is left
//! `interrupted` (with clustering only the threads this node holds: on a shared database other
//! pending turns are peers') → stop the heartbeat and release this node's leases. A second
//! signal kills at once.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use plugin_contract::Plugin;

use crate::approvals::policy::Policy;
use crate::approvals::Approvals;
use crate::cluster::Cluster;
use crate::config::Config;
use crate::events::EventBus;
use crate::http::mcp_endpoint::threads::ThreadsPlugin;
use crate::http::mcp_endpoint::McpEndpoint;
use crate::http::ApiState;
use crate::launch::Launcher;
use crate::mcp::{McpAdapter, ToolRegistry};
use crate::metrics::Metrics;
use crate::pipeline::{Pipeline, PipelineParts, PipelineSettings, ThrottleSettings};
use crate::pool::{AdmissionSettings, Pool, PoolSettings};
use crate::store::{EndCause, Store};
use crate::workspace::Workspaces;

/// A start-up failure, shown to the operator.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the database: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("plugin tools are invalid: {0}")]
    Tools(#[from] crate::mcp::schema::SchemaError),
    #[error("invalid approvals setting: {0}")]
    Approvals(String),
    /// A setting only the loaded plugins can judge: a `[plugins.NAME]` table no plugin owns.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error("cannot prepare the data directories: {0}")]
    Dirs(std::io::Error),
    /// `cluster.advertise` on a database nodes cannot share (SQLite).
    #[error("{0}")]
    Cluster(String),
    #[error("invalid webhooks setting: {0}")]
    Webhooks(String),
    #[error(transparent)]
    Traces(#[from] crate::traces::TracesError),
    /// The walls cannot be raised here and `sandbox.enabled` is not `false`.
    #[error("{0}; the daemon does not start without walls unless [sandbox] enabled = false")]
    Sandbox(walls::Unavailable),
    #[error("cannot bind {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
}

/// The daemon's parts, built. Cheap to clone.
#[derive(Clone)]
pub struct Daemon {
    pub config: Arc<Config>,
    pub store: Store,
    pub pool: Pool,
    pub pipeline: Pipeline,
    pub mcp: Arc<McpAdapter>,
    /// `/mcp`: the plugin tools and the threads for outside MCP clients.
    pub mcp_endpoint: Arc<McpEndpoint>,
    /// Every thread operation, behind `/api` and `/mcp` alike.
    pub threads: crate::service::ThreadService,
    pub metrics: Arc<Metrics>,
    /// This node's place among several (`cluster.advertise`); `None`: a single node.
    pub cluster: Option<Cluster>,
    /// The listener's bounds (connections, streams), set from the open-file limit.
    pub door: crate::http::serve::Door,
    /// The event bus, which also ends turns.
    pub events: EventBus,
    /// The webhook endpoints and their dispatcher.
    pub webhooks: crate::webhooks::Webhooks,
    /// The schedules' runner.
    pub schedules: crate::schedules::Schedules,
    /// The sweep that runs cut turns again.
    pub redrive: crate::redrive::Redrive,
    /// Access tokens of the OAuth issuer (`[oauth]`); `None`: no OAuth.
    pub oauth: Option<Arc<crate::oauth::ResourceServer>>,
    /// Background tasks that live as long as the daemon (the event writer, pool maintenance).
    background: TaskTracker,
    /// Stops the model gateway, once the children are gone.
    gateway_stop: CancellationToken,
}

impl Daemon {
    /// Opens the store (running migrations), recovers interrupted turns, loads the plugins, and
    /// builds every part in dependency order.
    pub async fn build(
        config: Config,
        plugins: Vec<Arc<dyn Plugin>>,
    ) -> Result<Daemon, StartError> {
        // Before anything is created: a settings table meant for no plugin is a typo.
        config.check_plugin_tables(plugins.iter().map(|p| p.name()))?;
        crate::private_fs::create_dir(&config.data_dir).map_err(StartError::Dirs)?;
        let db_path = config.db_path();
        if db_path != ":memory:" && !crate::store::is_postgres_url(&db_path) {
            // Before SQLite creates it: its journal files take the database file's mode.
            for suffix in ["", "-wal", "-shm"] {
                let path = std::path::PathBuf::from(format!("{db_path}{suffix}"));
                if suffix.is_empty() || path.exists() {
                    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                        std::fs::create_dir_all(parent).map_err(StartError::Dirs)?;
                    }
                    crate::private_fs::create_file(&path).map_err(StartError::Dirs)?;
                }
            }
        }
        let clustered = config.cluster.advertise.is_some();
        if clustered && !crate::store::is_postgres_url(&db_path) {
            return Err(StartError::Cluster(
                "cluster.advertise (--advertise, HARNESS_ADVERTISE) needs a PostgreSQL database (db = \"postgres://…\"): the nodes share their threads through it".into(),
            ));
        }
        let store = Store::open(&db_path).await?;
        let token = config.auth_token.as_deref().filter(|t| !t.is_empty());
        warn_keys_without_token(&config, &store).await;
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
        let mut policies = std::collections::BTreeMap::new();
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
        // The CLI runs some reads and commands without asking: each profile's deny rules go to
        // its processes' own matcher too.
        let cli_denies: std::collections::BTreeMap<String, Vec<String>> = policies
            .iter()
            .map(|(name, policy)| (name.clone(), policy.cli_deny_rules()))
            .collect();
        let background = TaskTracker::new();
        let node = store.node_id().unwrap_or("local").to_owned();
        let webhooks = crate::webhooks::Webhooks::new(&config.webhooks, store.clone(), &node)
            .map_err(StartError::Webhooks)?;
        let events = EventBus::start(store.clone(), &background, Some(webhooks.clone()));
        // A shared database holds the peers' running turns too: what a dead node left pending
        // is not ours to end: the node that takes a thread over ends them (`Cluster::take`).
        // Here, before any turn runs, each ends with its outcome and `turn_failed`.
        if !clustered {
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
        let approvals = Approvals::new(
            policies,
            config.approvals.timeout,
            store.clone(),
            events.clone(),
        );
        let registry = Arc::new(ToolRegistry::load(&plugins, config.tools.timeout)?);
        let mcp = Arc::new(McpAdapter::new(registry, store.clone()));
        // Bound before the launcher: every child is given its address.
        let gateway = if config.gateway.enabled {
            let bound = crate::gateway::Gateway::bind(&config.gateway).await;
            Some(bound.map_err(|error| StartError::Bind {
                addr: config.gateway.listen,
                error,
            })?)
        } else {
            None
        };
        // The CLI's limit on a call to our MCP server must clear the longest tool's own bound,
        // which the tools declare (delegation's comes from `[plugins.delegation]`).
        let launcher = Launcher::new(
            &config,
            mcp.manifest(),
            mcp.registry().longest_timeout(),
            &cli_denies,
        )
        .map_err(StartError::Dirs)?;
        let launcher = match &gateway {
            Some((gateway, _)) => launcher.with_gateway(gateway.clone()),
            None => launcher,
        };
        let launcher = match sandbox(&config)? {
            Some(sandbox) => launcher.with_sandbox(sandbox),
            None => launcher,
        };
        let workspaces = Workspaces::new(&config).map_err(StartError::Dirs)?;
        // Off the start path (a scan of every thread and a git run per repository need not hold
        // up the listener): the records of worktrees removed by hand since the last run go, and
        // so do the parked worktrees of spares a daemon that did not stop cleanly left.
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
        let pool = Pool::new(
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
            },
            launcher,
            workspaces.clone(),
            mcp.clone(),
            store.clone(),
        );
        let traces = crate::traces::Traces::start(&config.otel)?;
        let pipeline = Pipeline::new(PipelineParts {
            traces,
            workspaces,
            files: crate::files::Files::new(store.clone(), config.files.clone()),
            store: store.clone(),
            pool: pool.clone(),
            mcp: mcp.clone(),
            events: events.clone(),
            approvals: approvals.clone(),
            context: plugins
                .iter()
                .filter_map(|p| p.context_provider())
                .collect(),
            settings: PipelineSettings {
                max_message_chars: config.max_message_chars,
                queue_limit: config.turn.queue_limit,
                idle_timeout: config.turn.idle_timeout,
                turn_timeout: config.turn.timeout,
                max_tool_calls: config.turn.max_tool_calls,
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
        // Turns the CLI starts by itself (`claude.scheduling_tools`) run through the pipeline.
        pipeline.serve_cli_turns();
        // What the walls stop is recorded on its thread.
        pipeline.serve_breaches();
        let gateway_metrics = crate::metrics::GatewayMetrics::default();
        // Stopped after the pool: turns finishing in the grace period still reach the model.
        let gateway_stop = CancellationToken::new();
        if let Some((gateway, listener)) = gateway {
            let served = crate::gateway::Served {
                store: store.clone(),
                budgets: pipeline.budgets().clone(),
                throttle: pipeline.throttle().clone(),
                traces: pipeline.traces().clone(),
                metrics: gateway_metrics.clone(),
            };
            background.spawn(gateway.serve(listener, served, gateway_stop.clone()));
        }
        let cluster = Cluster::of(
            store.clone(),
            pool.clone(),
            webhooks.clone(),
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
            events.clone(),
            cluster.clone(),
            node.clone(),
            config.schedules.clone(),
        );
        let threads = crate::service::ThreadService::new(
            pipeline.clone(),
            store.clone(),
            webhooks.clone(),
            cluster.clone(),
            config.threads.cascade_delete(),
        );
        let mcp_endpoint = Arc::new(McpEndpoint::new(
            &plugins,
            ThreadsPlugin::new(threads.clone(), config.turn.timeout),
            mcp.clone(),
            pipeline.clone(),
            cluster.clone(),
            config.tools.timeout,
            store.clone(),
        )?);
        let metrics = Arc::new(Metrics::new(
            pool.metrics(),
            mcp.metrics(),
            store.metrics(),
            pipeline.metrics(),
            approvals.metrics(),
            pipeline.throttle_metrics(),
            &gateway_metrics,
        ));
        let door = crate::http::serve::Door::open(&config.http);
        let oauth = crate::oauth::ResourceServer::new(&config.oauth, &store).map(Arc::new);
        Ok(Daemon {
            gateway_stop,
            door,
            oauth,
            events,
            webhooks,
            config: Arc::new(config),
            store,
            pool,
            pipeline,
            mcp,
            mcp_endpoint,
            threads,
            metrics,
            cluster,
            background,
            schedules,
            redrive,
        })
    }

    /// What the HTTP handlers use.
    pub fn api_state(&self) -> ApiState {
        ApiState {
            pipeline: self.pipeline.clone(),
            store: self.store.clone(),
            pool: self.pool.clone(),
            mcp: self.mcp.clone(),
            mcp_endpoint: self.mcp_endpoint.clone(),
            threads: self.threads.clone(),
            metrics: self.metrics.clone(),
            config: self.config.clone(),
            cluster: self.cluster.clone(),
            streams: self.door.streams.clone(),
            webhooks: self.webhooks.clone(),
            schedules: self.schedules.clone(),
            oauth: self.oauth.clone(),
        }
    }

    /// Stops taking turns, lets running ones finish within the grace period, then kills every
    /// child process and marks what did not finish as interrupted.
    pub async fn shutdown(&self, grace: Duration) {
        if !self.pipeline.stop(grace).await {
            warn!(?grace, "Grace period over; killing what is left.");
        }
        self.pool.shutdown().await;
        // The turns cut short end at once now; let them record how (and queued ones that they
        // never started) before what is left is marked and the store closes.
        if !self.pipeline.wait_turns(Duration::from_secs(2)).await {
            warn!("Some turns did not record their end after their processes were killed.");
        }
        self.end_unfinished("the daemon shut down before this turn finished")
            .await;
        self.pipeline.send_traces().await;
    }

    /// Kills every child at once, without a grace period (a second signal).
    pub async fn kill_now(&self) {
        self.pipeline.stopping().cancel();
        self.pool.shutdown().await;
        self.end_unfinished("the daemon was stopped before this turn finished")
            .await;
    }

    /// Ends what is still pending (on a shared database, only on this node's threads: the
    /// peers' pending turns are running).
    async fn end_unfinished(&self, reason: &str) {
        match self
            .events
            .end_left_pending(EndCause::Shutdown, reason)
            .await
        {
            Ok(0) => {}
            Ok(n) => warn!(
                messages = n,
                "Turns cut short by shutdown were ended (interrupted)."
            ),
            Err(err) => warn!(error = %err, "Could not end unfinished turns."),
        }
    }
}

/// A daemon serving HTTP.
pub struct Running {
    pub addr: SocketAddr,
    pub daemon: Daemon,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    /// Cancelled by [`Running::abort`].
    abort: CancellationToken,
    done: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Stops like a node that dies (`kill -9`, for tests of clustering): the listener closes,
    /// every child is killed, and nothing is recorded: no lease released, no turn marked.
    pub async fn abort(mut self) {
        self.abort.cancel();
        let _ = (&mut self.done).await;
    }

    /// Graceful shutdown; returns when every child is gone.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.done).await;
    }
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

/// Builds the daemon, binds, and serves until [`Running::stop`].
/// With `cluster.advertise = "auto"` the node advertises the address it bound (tests bind port
/// 0, so it is known only then): the listener is bound before the daemon is built.
pub async fn start(
    mut config: Config,
    plugins: Vec<Arc<dyn Plugin>>,
) -> Result<Running, StartError> {
    let addr = config.bind;
    let grace = config.shutdown_grace;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Bind { addr, error })?;
    let addr = listener
        .local_addr()
        .map_err(|error| StartError::Bind { addr, error })?;
    if config.cluster.advertise.as_deref() == Some("auto") {
        config.cluster.advertise = Some(format!("http://{addr}"));
    }
    // The audience of the daemon's tokens is fixed here, never taken from a request's `Host`.
    if config.oauth.enabled() && config.oauth.public_url.is_none() {
        if addr.ip().is_unspecified() {
            return Err(StartError::Config(crate::config::ConfigError::Invalid(
                format!(
                    "oauth.public_url must be set when the daemon binds {addr}: it names the \
                 audience of its tokens"
                ),
            )));
        }
        config.oauth.public_url = Some(format!("http://{addr}"));
    }
    let daemon = Daemon::build(config, plugins).await?;
    // No thread's tree reaches the daemon's API, whatever its network.
    daemon.pool.launcher().wall_plan().close_port(addr.port());
    info!(%addr, "Harness listening.");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let abort = CancellationToken::new();
    let aborted = abort.clone();
    let serving = daemon.clone();
    let done = tokio::spawn(async move {
        let stopping: CancellationToken = serving.pipeline.stopping().clone();
        let pool = serving.pool.clone();
        let maintenance_stop = stopping.clone();
        serving.background.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = tick.tick() => pool.run_maintenance().await,
                    _ = maintenance_stop.cancelled() => break,
                }
            }
        });
        // The live processes' memory, read off the request path for `/api/pool` and `/metrics`.
        let (sampled, sampling_stop) = (serving.pool.clone(), stopping.clone());
        serving.background.spawn(async move {
            let mut tick = tokio::time::interval(crate::pool::MEMORY_SAMPLE_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let pool = sampled.clone();
                        let _ = tokio::task::spawn_blocking(move || pool.sample_memory()).await;
                    }
                    _ = sampling_stop.cancelled() => break,
                }
            }
        });
        // The leases outlive the pipeline's stop: turns finishing in the grace period still
        // hold theirs.
        let heartbeat_stop = CancellationToken::new();
        if let Some(cluster) = &serving.cluster {
            cluster.spawn_heartbeat(&serving.background, heartbeat_stop.clone());
        }
        // Deliveries go on through the grace period (turns ending in it are announced too).
        serving
            .webhooks
            .start(&serving.background, heartbeat_stop.clone());
        // Cut turns run again before anything sent from now on; on a cluster, also those of
        // peers that die later.
        serving.redrive.sweep().await;
        if let Some(cluster) = &serving.cluster {
            let every = cluster.lease_ttl() / 3;
            let stop = stopping.clone();
            serving.redrive.spawn(&serving.background, every, stop);
        }
        serving
            .schedules
            .start(&serving.background, stopping.clone());
        crate::retention::Retention::new(
            serving.store.clone(),
            &serving.config.audit,
            &serving.config.retention,
        )
        .unused_oauth_clients(serving.config.oauth.unused_client_ttl)
        .spawn(&serving.background, stopping.clone());
        let router = crate::http::router(serving.api_state());
        let http = serving.config.http.clone();
        let door = serving.door.clone();
        let server = tokio::spawn(async move {
            crate::http::serve::serve(listener, router, &http, &door, stopping).await;
        });
        tokio::select! {
            biased;
            _ = aborted.cancelled() => {
                warn!("Aborting: no lease released, no turn ended.");
                heartbeat_stop.cancel();
                server.abort();
                // As a process killed with SIGKILL: nothing more reaches the database, so
                // what ran is found pending by the next start or by the node taking over.
                serving.store.close().await;
                serving.pipeline.stopping().cancel();
                serving.pool.shutdown().await;
                serving.gateway_stop.cancel();
                return;
            }
            _ = stop_rx => {}
        }
        info!("Shutting down.");
        serving.shutdown(grace).await;
        serving.gateway_stop.cancel();
        heartbeat_stop.cancel();
        if let Some(cluster) = &serving.cluster {
            cluster.release().await;
        }
        // Connections still open after the grace period (a stuck SSE client) do not hold us.
        let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
        serving.store.close().await;
        info!("Stopped.");
    });
    Ok(Running {
        addr,
        daemon,
        stop: Some(stop_tx),
        abort,
        done,
    })
}

/// How [`run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// Running turns had the grace period to finish.
    Gracefully,
    /// `force` resolved during the grace period: every child was killed at once.
    Forced,
}

/// Runs until `shutdown` resolves, then shuts down gracefully, unless `force` resolves first
/// (a second signal): then every child is killed at once and what was running is marked
/// interrupted, to be retried.
pub async fn run(
    config: Config,
    plugins: Vec<Arc<dyn Plugin>>,
    shutdown: impl Future<Output = ()>,
    force: impl Future<Output = ()>,
) -> Result<Stopped, StartError> {
    let running = start(config, plugins).await?;
    shutdown.await;
    let daemon = running.daemon.clone();
    tokio::select! {
        _ = running.stop() => Ok(Stopped::Gracefully),
        _ = force => {
            warn!("Second signal: stopping now, without the grace period.");
            daemon.kill_now().await;
            Ok(Stopped::Forced)
        }
    }
}

/// The repositories (still there) that hold the worktree of some thread.
/// The folders of the threads' worktrees.
fn worktree_folders(threads: &[crate::store::ThreadRow]) -> Vec<std::path::PathBuf> {
    threads
        .iter()
        .filter_map(|t| match t.workspace.as_deref() {
            Some(crate::store::Workspace::Worktree { path, .. }) => Some(path.clone()),
            _ => None,
        })
        .collect()
}

fn worktree_repos(
    threads: &[crate::store::ThreadRow],
) -> std::collections::BTreeSet<&std::path::Path> {
    threads
        .iter()
        .filter_map(|t| match t.workspace.as_deref() {
            Some(crate::store::Workspace::Worktree { repo, .. }) => Some(repo.as_path()),
            _ => None,
        })
        .filter(|repo| repo.is_dir())
        .collect()
}
