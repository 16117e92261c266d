//! The one place the daemon is put together, in dependency order, and its lifecycle: [`start`]
//! builds and serves, [`Running::stop`] shuts down within the grace period, [`run`] does both
//! around a shutdown signal. `build.rs` holds the build, a function per layer (storage, bus,
//! processes, pipeline, doors).
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

mod build;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use plugin_contract::Plugin;

use crate::cluster::Cluster;
use crate::config::Config;
use crate::events::EventBus;
use crate::http::mcp_endpoint::McpEndpoint;
use crate::http::ApiState;
use crate::mcp::McpAdapter;
use crate::metrics::Metrics;
use crate::pipeline::Pipeline;
use crate::pool::Pool;
use crate::store::{EndCause, Store};

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
    /// Each goal's loop.
    pub goals: crate::goals::Goals,
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
    /// builds every part in dependency order, a layer at a time (`build.rs`).
    pub async fn build(
        config: Config,
        plugins: Vec<Arc<dyn Plugin>>,
    ) -> Result<Daemon, StartError> {
        // Before anything is created: a settings table meant for no plugin is a typo.
        config.check_plugin_tables(plugins.iter().map(|p| p.name()))?;
        let storage = build::storage(&config).await?;
        let background = TaskTracker::new();
        let bus = build::bus(&config, &storage, &background).await?;
        let mut processes =
            build::processes(&config, &plugins, &storage.store, &bus, &background).await?;
        let pipeline = build::pipeline(&config, &plugins, &storage.store, &bus, &processes)?;
        let gateway_metrics = crate::metrics::GatewayMetrics::default();
        let gateway_stop = build::serve_gateway(
            processes.gateway.take(),
            &storage.store,
            &bus,
            &pipeline,
            &gateway_metrics,
            &background,
        );
        let doors = build::doors(
            &config,
            &plugins,
            &storage,
            &bus,
            &processes,
            &pipeline,
            &gateway_metrics,
        )?;
        Ok(Daemon {
            config: Arc::new(config),
            store: storage.store,
            pool: processes.pool,
            pipeline,
            mcp: processes.mcp,
            mcp_endpoint: doors.mcp_endpoint,
            threads: doors.threads,
            goals: doors.goals,
            metrics: doors.metrics,
            cluster: doors.cluster,
            door: doors.door,
            events: bus.events,
            webhooks: bus.webhooks,
            schedules: doors.schedules,
            redrive: doors.redrive,
            oauth: doors.oauth,
            background,
            gateway_stop,
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
            goals: self.goals.clone(),
            metrics: self.metrics.clone(),
            config: self.config.clone(),
            cluster: self.cluster.clone(),
            streams: self.door.streams.clone(),
            webhooks: self.webhooks.clone(),
            schedules: self.schedules.clone(),
            oauth: self.oauth.clone(),
            router: Arc::default(),
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

/// Builds the daemon, binds, and serves until [`Running::stop`].
/// With `cluster.advertise = "auto"` the node advertises the address it bound (tests bind port
/// 0, so it is known only then): the listener is bound before the daemon is built.
pub async fn start(
    mut config: Config,
    plugins: Vec<Arc<dyn Plugin>>,
) -> Result<Running, StartError> {
    let grace = config.shutdown_grace;
    let (listener, addr) = bind(&mut config).await?;
    let daemon = Daemon::build(config, plugins).await?;
    // No thread's tree reaches the daemon's API, whatever its network.
    daemon.pool.launcher().wall_plan().close_port(addr.port());
    info!(%addr, "Harness listening.");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let abort = CancellationToken::new();
    let done = tokio::spawn(
        daemon
            .clone()
            .serve(listener, stop_rx, abort.clone(), grace),
    );
    Ok(Running {
        addr,
        daemon,
        stop: Some(stop_tx),
        abort,
        done,
    })
}

/// Binds `config.bind` and settles what depends on the address it got: the advertised address
/// (`cluster.advertise = "auto"`) and the audience of the daemon's tokens (`oauth.public_url`),
/// fixed here, never taken from a request's `Host`.
async fn bind(config: &mut Config) -> Result<(tokio::net::TcpListener, SocketAddr), StartError> {
    let addr = config.bind;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Bind { addr, error })?;
    let addr = listener
        .local_addr()
        .map_err(|error| StartError::Bind { addr, error })?;
    if config.cluster.advertise.as_deref() == Some("auto") {
        config.cluster.advertise = Some(format!("http://{addr}"));
    }
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
    Ok((listener, addr))
}

impl Daemon {
    /// Serves until `stop` (graceful, within `grace`) or `abort` (as a node that dies): starts
    /// the background work, then the HTTP listener.
    async fn serve(
        self,
        listener: tokio::net::TcpListener,
        stop: tokio::sync::oneshot::Receiver<()>,
        abort: CancellationToken,
        grace: Duration,
    ) {
        let stopping: CancellationToken = self.pipeline.stopping().clone();
        self.spawn_upkeep(&stopping);
        // The leases outlive the pipeline's stop: turns finishing in the grace period still
        // hold theirs.
        let heartbeat_stop = CancellationToken::new();
        self.spawn_background_work(&stopping, &heartbeat_stop).await;
        let router = crate::http::router(self.api_state());
        let (http, door) = (self.config.http.clone(), self.door.clone());
        let server = tokio::spawn(async move {
            crate::http::serve::serve(listener, router, &http, &door, stopping).await;
        });
        tokio::select! {
            biased;
            _ = abort.cancelled() => {
                warn!("Aborting: no lease released, no turn ended.");
                heartbeat_stop.cancel();
                server.abort();
                // As a process killed with SIGKILL: nothing more reaches the database, so
                // what ran is found pending by the next start or by the node taking over.
                self.store.close().await;
                self.pipeline.stopping().cancel();
                self.pool.shutdown().await;
                self.gateway_stop.cancel();
                return;
            }
            _ = stop => {}
        }
        info!("Shutting down.");
        self.shutdown(grace).await;
        self.gateway_stop.cancel();
        heartbeat_stop.cancel();
        if let Some(cluster) = &self.cluster {
            cluster.release().await;
        }
        // Connections still open after the grace period (a stuck SSE client) do not hold us.
        let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
        self.store.close().await;
        info!("Stopped.");
    }

    /// The pool's upkeep until `stopping`: its maintenance every 500 ms, and the live
    /// processes' memory, read off the request path for `/api/pool` and `/metrics`.
    fn spawn_upkeep(&self, stopping: &CancellationToken) {
        let (pool, stop) = (self.pool.clone(), stopping.clone());
        self.background.spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = tick.tick() => pool.run_maintenance().await,
                    _ = stop.cancelled() => break,
                }
            }
        });
        let (sampled, stop) = (self.pool.clone(), stopping.clone());
        self.background.spawn(async move {
            let mut tick = tokio::time::interval(crate::pool::MEMORY_SAMPLE_EVERY);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let pool = sampled.clone();
                        let _ = tokio::task::spawn_blocking(move || pool.sample_memory()).await;
                    }
                    _ = stop.cancelled() => break,
                }
            }
        });
    }

    /// The work the daemon starts itself: the heartbeat and the webhook deliveries (until
    /// `heartbeat_stop`, through the grace period: turns ending in it are announced too), the
    /// re-drive of cut turns (before anything sent from now on; on a cluster, also those of
    /// peers that die later), the schedules, the MCP event webhooks and streams and the
    /// retention pass (until `stopping`).
    async fn spawn_background_work(
        &self,
        stopping: &CancellationToken,
        heartbeat_stop: &CancellationToken,
    ) {
        if let Some(cluster) = &self.cluster {
            cluster.spawn_heartbeat(&self.background, heartbeat_stop.clone());
        }
        self.webhooks
            .start(&self.background, heartbeat_stop.clone());
        // Before a re-drive: a session's turn runs on the profile its agent makes.
        let approvals = self.pipeline.approvals();
        let made =
            crate::managed::make_profiles(&self.store, &self.pool, approvals, &self.config).await;
        if let Err(err) = made {
            warn!(error = %err, "The sessions' profiles could not be listed.");
        }
        self.redrive.sweep().await;
        // After the re-drive: a goal waits for its cut turn's new run.
        match self.goals.resume().await {
            Ok(0) => {}
            Ok(goals) => info!(goals, "Unfinished goals taken up again."),
            Err(err) => warn!(error = %err, "The unfinished goals could not be listed."),
        }
        if let Some(cluster) = &self.cluster {
            let every = cluster.lease_ttl() / 3;
            self.redrive
                .spawn(&self.background, every, stopping.clone());
        }
        self.schedules.start(&self.background, stopping.clone());
        if let Some(events) = self.mcp_endpoint.events() {
            events.start(&self.background, stopping.clone());
        }
        crate::retention::Retention::new(
            self.store.clone(),
            &self.config.audit,
            &self.config.retention,
        )
        .unused_oauth_clients(self.config.oauth.unused_client_ttl)
        .spawn(&self.background, stopping.clone());
    }
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
