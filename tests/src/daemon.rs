//! A real daemon for end-to-end tests: `orchestrator::server::start` on 127.0.0.1:0 with a temp data
//! directory, the real `claude` CLI, and the mock Messages API.

use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::Value;

use orchestrator::config::Config;
use orchestrator::metrics::PoolCounts;
use orchestrator::server::{self, Daemon, Running};
use plugin_contract::Plugin;

use crate::cli::{claude_bin, cli_env};
use crate::client::ApiClient;
use crate::mock::MockApi;

pub struct TestDaemon {
    running: Option<Running>,
    pub base: String,
    pub config: Config,
    /// Plugins loaded next to [`harness::plugins`]; kept for [`TestDaemon::restart`].
    extra_plugins: Vec<Arc<dyn Plugin>>,
    /// Talks to this daemon; the request methods below are its, kept here so tests say
    /// `daemon.reply(…)`.
    client: ApiClient,
    /// Keeps the data directory alive for restarts; removed on drop.
    _dir: Arc<tempfile::TempDir>,
}

/// A config for tests: temp data dir, port 0, the real CLI pointed at `mock`, no built-in tools
/// (smaller requests), short timeouts so failures show quickly.
pub fn test_config(mock: &MockApi, dir: &std::path::Path, claude: std::path::PathBuf) -> Config {
    test_config_at(&mock.url(), dir, claude)
}

/// [`test_config`] for a Messages API at `api_url` (a mock in another process, say).
pub fn test_config_at(api_url: &str, dir: &std::path::Path, claude: std::path::PathBuf) -> Config {
    let mut config = Config {
        bind: "127.0.0.1:0".parse().expect("literal address"),
        data_dir: dir.to_path_buf(),
        shutdown_grace: Duration::from_secs(5),
        ..Default::default()
    };
    config.claude.bin = claude;
    config.claude.env = cli_env(api_url).into_iter().collect();
    config.claude.builtin_tools = Some(String::new());
    config.turn.idle_timeout = Duration::from_secs(60);
    // Tests count processes and spawns; the ones about spares turn them on.
    config.pool.spares = 0;
    config.pool.workspace_spares = 0;
    config.turn.timeout = Duration::from_secs(120);
    config
}

impl TestDaemon {
    /// Starts a daemon; `tweak` adjusts the test config first.
    pub async fn start(mock: &MockApi, tweak: impl FnOnce(&mut Config)) -> TestDaemon {
        Self::start_with_plugins(mock, Vec::new(), tweak).await
    }

    /// Starts a daemon that loads `extra` plugins after the default ones (the probe plugin, say);
    /// `tweak` adjusts the test config first. `HARNESS_TEST_DB=postgres` puts every daemon on a
    /// fresh PostgreSQL database (`pg-test`) instead of SQLite.
    pub async fn start_with_plugins(
        mock: &MockApi,
        extra: Vec<Arc<dyn Plugin>>,
        tweak: impl FnOnce(&mut Config),
    ) -> TestDaemon {
        crate::util::init_tracing();
        let dir = Arc::new(tempfile::tempdir().expect("temp dir"));
        // The first call may run npm for a few seconds: keep it off the async workers.
        let claude = tokio::task::spawn_blocking(claude_bin)
            .await
            .expect("installer task")
            .expect("the claude CLI is installed by test support");
        let mut config = test_config(mock, dir.path(), claude);
        if std::env::var("HARNESS_TEST_DB").as_deref() == Ok("postgres") {
            // The whole suite on PostgreSQL: a fresh database per daemon (a test's own `db`
            // still wins).
            let url = pg_test::database_url().await.expect("a test PostgreSQL");
            config.db = Some(url);
        }
        tweak(&mut config);
        Self::start_with(config, extra, dir).await
    }

    async fn start_with(
        config: Config,
        extra_plugins: Vec<Arc<dyn Plugin>>,
        dir: Arc<tempfile::TempDir>,
    ) -> TestDaemon {
        let mut plugins = harness::plugins(&config).expect("the plugins' settings are valid");
        plugins.extend(extra_plugins.iter().cloned());
        let running = server::start(config.clone(), plugins)
            .await
            .expect("daemon starts");
        let base = format!("http://{}", running.addr);
        TestDaemon {
            running: Some(running),
            client: ApiClient::new(base.clone()),
            base,
            config,
            extra_plugins,
            _dir: dir,
        }
    }

    /// Stops gracefully and starts again on the same data directory (and a new port).
    pub async fn restart(self) -> TestDaemon {
        self.restart_after(|_| {}).await
    }

    /// Like [`TestDaemon::restart`], running `between` on the data directory while no daemon
    /// runs (to wipe a folder, say).
    pub async fn restart_after(mut self, between: impl FnOnce(&std::path::Path)) -> TestDaemon {
        if let Some(running) = self.running.take() {
            running.stop().await;
        }
        between(&self.config.data_dir);
        let config = self.config.clone();
        let extra = std::mem::take(&mut self.extra_plugins);
        Self::start_with(config, extra, self._dir.clone()).await
    }

    /// Like [`TestDaemon::restart`], running `sql` (statements whose results are not read) on
    /// the daemon's database while no daemon runs: to make the store fail for real (a trigger
    /// that refuses a table's inserts), say. (A schema changed beside a running daemon can leave
    /// its SQLite connections answering "no such table".)
    pub async fn restart_with_sql(mut self, sql: &str) -> TestDaemon {
        if let Some(running) = self.running.take() {
            running.stop().await;
        }
        let url = self.config.db_path();
        let done = if self.on_postgres() {
            let pool = sqlx::PgPool::connect(&url)
                .await
                .expect("PostgreSQL reachable");
            let done = sqlx::raw_sql(sql).execute(&pool).await.map(drop);
            pool.close().await;
            done
        } else {
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&url);
            let pool = sqlx::SqlitePool::connect_with(options)
                .await
                .expect("the SQLite file opens");
            let done = sqlx::raw_sql(sql).execute(&pool).await.map(drop);
            pool.close().await;
            done
        };
        done.unwrap_or_else(|err| panic!("{sql}: {err}"));
        let config = self.config.clone();
        let extra = std::mem::take(&mut self.extra_plugins);
        Self::start_with(config, extra, self._dir.clone()).await
    }

    /// Dies like `kill -9` ([`TestDaemon::abort`]: nothing ended, nothing released) and starts
    /// again on the same data directory: what it left pending is found at start-up.
    pub async fn crash_and_restart(mut self) -> TestDaemon {
        if let Some(running) = self.running.take() {
            running.abort().await;
        }
        let config = self.config.clone();
        let extra = std::mem::take(&mut self.extra_plugins);
        Self::start_with(config, extra, self._dir.clone()).await
    }

    /// The running daemon's parts.
    pub fn daemon(&self) -> &Daemon {
        &self.running.as_ref().expect("daemon is running").daemon
    }

    /// The pool's counters now.
    pub fn counts(&self) -> PoolCounts {
        self.daemon().pool.counts()
    }

    /// The folder `thread`'s process works in (where its commands write, unless it has a
    /// workspace).
    pub fn thread_folder(&self, thread: &str) -> std::path::PathBuf {
        orchestrator::launch::thread_workdir(
            &self.config.claude_workdir(),
            &plugin_contract::ThreadId::from_string(thread),
        )
    }

    pub fn data_dir(&self) -> std::path::PathBuf {
        self.config.data_dir.clone()
    }

    /// True when the daemon's database is PostgreSQL (`HARNESS_TEST_DB=postgres`, or a test's
    /// own `db`).
    pub fn on_postgres(&self) -> bool {
        orchestrator::store::is_postgres_url(&self.config.db_path())
    }

    pub async fn stop(mut self) {
        if let Some(running) = self.running.take() {
            running.stop().await;
        }
    }

    /// Stops like a node that dies (`kill -9`): children killed, the listener closed, and no
    /// lease released, no turn marked (`Running::abort`).
    pub async fn abort(mut self) {
        if let Some(running) = self.running.take() {
            running.abort().await;
        }
    }

    /// Starts one node of a cluster: on the PostgreSQL database `url` (shared with its peers),
    /// with its own data directory, advertising the address it binds, leases lasting `ttl`.
    pub async fn start_node(
        mock: &MockApi,
        url: &str,
        ttl: Duration,
        tweak: impl FnOnce(&mut Config),
    ) -> TestDaemon {
        Self::start(mock, |c| {
            c.db = Some(url.to_owned());
            c.cluster.advertise = Some("auto".into());
            c.cluster.lease_ttl = ttl;
            tweak(c);
        })
        .await
    }

    /// The HTTP client for this daemon (a new one after [`TestDaemon::restart`]: a new port).
    pub fn client(&self) -> &ApiClient {
        &self.client
    }

    /// [`ApiClient::get`].
    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.client.get(path).await
    }

    /// [`ApiClient::post`].
    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.client.post(path, body).await
    }

    /// [`ApiClient::patch`].
    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.client.patch(path, body).await
    }

    /// [`ApiClient::delete`].
    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        self.client.delete(path).await
    }

    /// [`ApiClient::post_raw`]: raw bytes with a JSON content type.
    pub async fn post_raw(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        self.client.post_raw(path, body).await
    }

    /// [`ApiClient::create_thread`].
    pub async fn create_thread(&self) -> String {
        self.client.create_thread().await
    }

    /// [`ApiClient::send`]: sends a message and returns the whole response.
    pub async fn send(&self, thread: &str, text: &str) -> (StatusCode, Value) {
        self.client.send(thread, text).await
    }

    /// [`ApiClient::reply`]: the reply text; panics unless the turn succeeded.
    pub async fn reply(&self, thread: &str, text: &str) -> String {
        self.client.reply(thread, text).await
    }

    pub fn spawns(&self) -> u64 {
        self.counts().spawns
    }

    pub fn live_pids(&self) -> Vec<u32> {
        self.daemon().pool.live_pids()
    }

    /// The pid of the thread's live process.
    pub fn pid_of(&self, thread: &str) -> Option<u32> {
        self.daemon()
            .pool
            .snapshot()
            .into_iter()
            .find(|p| p.thread_id.as_str() == thread)
            .map(|p| p.pid)
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        // A test that panicked before `stop`: kill the children so none outlive the test.
        if let Some(running) = self.running.take() {
            for pid in running.daemon.pool.live_pids() {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
    }
}
