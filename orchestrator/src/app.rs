//! The daemon's shared state ([`App`]), how it is built from a [`Config`], and its lifecycle:
//! [`start`] binds and serves, [`Running::stop`] shuts down within the grace period.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use plugin_contract::{ContextProvider, Delegate, DelegateReply, Invoker, Plugin, ThreadId};

use crate::config::Config;
use crate::events::EventBus;
use crate::invoker::ClaudeCliInvoker;
use crate::mcp::{McpAdapter, ToolRegistry, ToolServices};
use crate::metrics::Metrics;
use crate::pipeline::{self, NewMessage, ThreadQueues};
use crate::store::{NewThread, Store};

/// Cheap to clone; every handler and task holds one.
#[derive(Clone)]
pub struct App {
    inner: Arc<AppState>,
}

struct AppState {
    config: Config,
    store: Store,
    invoker: Arc<ClaudeCliInvoker>,
    adapter: Arc<McpAdapter>,
    context_providers: Vec<Arc<dyn ContextProvider>>,
    queues: Arc<ThreadQueues>,
    events: EventBus,
    /// What `/metrics` shows; this daemon's own registry.
    metrics: Metrics,
    /// Every turn runs in a tracked task, so shutdown can wait for them.
    tasks: TaskTracker,
    /// Cancelled when shutdown begins.
    shutdown: CancellationToken,
}

/// A start-up failure, shown to the operator.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot open the database: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("plugin tools are invalid: {0}")]
    Tools(#[from] crate::mcp::schema::SchemaError),
    #[error("cannot prepare the CLI directories: {0}")]
    Dirs(std::io::Error),
    #[error("cannot bind {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
}

/// The plugins every daemon loads. The one place plugin crates are listed.
pub fn default_plugins(config: &Config) -> Vec<Arc<dyn Plugin>> {
    vec![
        Arc::new(harness_plugin_time::TimePlugin),
        Arc::new(harness_plugin_delegation::DelegationPlugin::new(
            config.tools.delegation_max_depth,
            config.tools.delegation_timeout,
        )),
        Arc::new(harness_plugin_context::ContextPlugin),
    ]
}

impl App {
    /// Opens the store (running migrations), recovers interrupted turns, loads the plugins.
    pub async fn build(config: Config, plugins: Vec<Arc<dyn Plugin>>) -> Result<App, StartError> {
        crate::private_fs::create_dir(&config.data_dir).map_err(StartError::Dirs)?;
        let db_path = config.db_path();
        if db_path != ":memory:" {
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
        let store = Store::open(&config.db_path()).await?;
        let recovered = store
            .interrupt_pending("the daemon stopped before this turn finished")
            .await?;
        if recovered > 0 {
            warn!(
                messages = recovered,
                "Marked messages left pending by an earlier run as interrupted."
            );
        }
        let registry = Arc::new(ToolRegistry::load(&plugins, config.tools.timeout)?);
        let adapter = Arc::new(McpAdapter::new(registry, store.clone()));
        let invoker =
            Arc::new(ClaudeCliInvoker::new(&config, adapter.clone()).map_err(StartError::Dirs)?);
        let metrics = Metrics::new(invoker.pool(), adapter.metrics(), store.metrics());
        let context_providers = plugins
            .iter()
            .filter_map(|p| p.context_provider())
            .collect();
        let inner = Arc::new_cyclic(|weak: &Weak<AppState>| {
            adapter.bind(ToolServices {
                store: Arc::new(store.clone()),
                invoker: invoker.clone() as Arc<dyn Invoker>,
                delegate: Arc::new(AppDelegate { app: weak.clone() }),
            });
            AppState {
                events: EventBus::start(store.clone()),
                metrics,
                config,
                store,
                invoker,
                adapter,
                context_providers,
                queues: Arc::default(),
                tasks: TaskTracker::new(),
                shutdown: CancellationToken::new(),
            }
        });
        Ok(App { inner })
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }
    pub fn store(&self) -> &Store {
        &self.inner.store
    }
    pub fn invoker(&self) -> &Arc<ClaudeCliInvoker> {
        &self.inner.invoker
    }
    pub fn adapter(&self) -> &Arc<McpAdapter> {
        &self.inner.adapter
    }
    pub fn context_providers(&self) -> &[Arc<dyn ContextProvider>] {
        &self.inner.context_providers
    }
    pub fn queues(&self) -> &Arc<ThreadQueues> {
        &self.inner.queues
    }
    pub fn events(&self) -> &EventBus {
        &self.inner.events
    }
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }
    pub fn tasks(&self) -> &TaskTracker {
        &self.inner.tasks
    }
    pub fn is_shutting_down(&self) -> bool {
        self.inner.shutdown.is_cancelled()
    }
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// Stops taking turns, lets running ones finish within the grace period, then kills every
    /// child process and marks what did not finish as interrupted.
    pub async fn shutdown(&self, grace: Duration) {
        self.inner.shutdown.cancel();
        self.inner.tasks.close();
        if tokio::time::timeout(grace, self.inner.tasks.wait())
            .await
            .is_err()
        {
            warn!(?grace, "Grace period over; killing what is left.");
        }
        self.inner.invoker.pool().shutdown().await;
        // The turns cut short end at once now; let them record how (and queued ones that they
        // never started) before what is left is marked and the store closes.
        if tokio::time::timeout(Duration::from_secs(2), self.inner.tasks.wait())
            .await
            .is_err()
        {
            warn!("Some turns did not record their end after their processes were killed.");
        }
        match self
            .inner
            .store
            .interrupt_pending("the daemon shut down before this turn finished")
            .await
        {
            Ok(0) => {}
            Ok(n) => warn!(
                messages = n,
                "Turns cut short by shutdown were marked interrupted."
            ),
            Err(err) => warn!(error = %err, "Could not mark unfinished turns."),
        }
    }
}

/// Delegation: runs a child thread through the same pipeline. Holds the app weakly, because the
/// app owns the tools that own this.
struct AppDelegate {
    app: Weak<AppState>,
}

#[async_trait::async_trait]
impl Delegate for AppDelegate {
    async fn delegate(
        &self,
        parent: &ThreadId,
        prompt: String,
        model: Option<String>,
    ) -> Result<DelegateReply, String> {
        let inner = self.app.upgrade().ok_or("the daemon is shutting down")?;
        let app = App { inner };
        // The depth limit is the delegation plugin's policy; this only runs the child.
        let parent_thread = app
            .store()
            .require_thread(parent)
            .await
            .map_err(|e| e.to_string())?;
        let child = app
            .store()
            .create_thread(NewThread {
                title: Some(format!("delegated from {parent}")),
                model: model.clone().or(parent_thread.model),
                parent_id: Some(parent.clone()),
            })
            .await
            .map_err(|e| e.to_string())?;
        info!(parent = %parent, child = %child.id, "Delegating to a child thread.");
        let reply = pipeline::handle_message(
            &app,
            NewMessage {
                thread_id: child.id.clone(),
                content: prompt,
                client_message_id: None,
                model: None,
                timeout: Some(app.config().tools.delegation_timeout),
            },
        )
        .await
        .map_err(|e| e.to_string())?;
        Ok(DelegateReply {
            child_thread_id: child.id,
            text: reply.message.content,
        })
    }
}

/// A daemon serving HTTP.
pub struct Running {
    pub addr: SocketAddr,
    pub app: App,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::task::JoinHandle<()>,
}

impl Running {
    /// Graceful shutdown; returns when every child is gone.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = (&mut self.done).await;
    }
}

/// Builds the app, binds, and serves until [`Running::stop`].
pub async fn start(config: Config, plugins: Vec<Arc<dyn Plugin>>) -> Result<Running, StartError> {
    let addr = config.bind;
    let grace = config.shutdown_grace;
    let app = App::build(config, plugins).await?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|error| StartError::Bind { addr, error })?;
    let addr = listener
        .local_addr()
        .map_err(|error| StartError::Bind { addr, error })?;
    info!(%addr, "Harness listening.");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let serving = app.clone();
    let done = tokio::spawn(async move {
        let token = serving.shutdown_token().clone();
        let maintenance = serving.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tokio::select! {
                    _ = tick.tick() => maintenance.invoker().pool().run_maintenance().await,
                    _ = maintenance.shutdown_token().cancelled() => break,
                }
            }
        });
        let router = crate::http::router(serving.clone());
        let http = serving.config().http.clone();
        let server = tokio::spawn(async move {
            crate::http::serve::serve(listener, router, &http, token).await;
        });
        let _ = stop_rx.await;
        info!("Shutting down.");
        serving.shutdown(grace).await;
        // Connections still open after the grace period (a stuck SSE client) do not hold us.
        let _ = tokio::time::timeout(Duration::from_secs(2), server).await;
        serving.store().close().await;
        info!("Stopped.");
    });
    Ok(Running {
        addr,
        app,
        stop: Some(stop_tx),
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
    shutdown: impl Future<Output = ()>,
    force: impl Future<Output = ()>,
) -> Result<Stopped, StartError> {
    let running = start(config.clone(), default_plugins(&config)).await?;
    shutdown.await;
    let app = running.app.clone();
    tokio::select! {
        _ = running.stop() => Ok(Stopped::Gracefully),
        _ = force => {
            warn!("Second signal: stopping now, without the grace period.");
            app.inner.shutdown.cancel();
            app.invoker().pool().shutdown().await;
            if let Err(err) = app
                .store()
                .interrupt_pending("the daemon was stopped before this turn finished")
                .await
            {
                warn!(error = %err, "Could not mark unfinished turns.");
            }
            Ok(Stopped::Forced)
        }
    }
}
