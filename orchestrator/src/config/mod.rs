//! Settings: defaults, overridden by a TOML file, overridden by env vars and flags. The flags and
//! their env vars are one clap struct, [`ServeArgs`], merged over the file by [`Config::load`].
//!
//! Every field has a default so that `harness serve` works with no file at all. The configuration
//! table of `docs/configuration.md` mirrors this file.
//!
//! Plugins' settings are not here: each `[plugins.NAME]` table is kept as it is
//! ([`Config::plugins`]) and handed to that plugin's constructor, which parses it into settings
//! of its own (`plugin_contract::settings`). The core reads no key inside; it only refuses a
//! table no loaded plugin owns ([`Config::check_plugin_tables`]). What the core must know of a
//! plugin's bounds it learns from the plugin: a tool's timeout from its `ToolSpec`, a delegated
//! turn's bound from each `Delegate::delegate` call.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use plugin_contract::settings::secs;
use plugin_contract::PluginTable;
use serde::Deserialize;

/// The whole configuration of the daemon.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the HTTP API listens. Not loopback → `auth_token` or OAuth (`[oauth]`) is required.
    pub bind: SocketAddr,
    /// Directory for the database, the CLI config dir and the CLI's working directory.
    pub data_dir: PathBuf,
    /// SQLite database file (`:memory:` for tests), or a `postgres://` URL, which selects
    /// PostgreSQL. Default `<data_dir>/harness.db`. Never logged: a URL may hold a password.
    pub db: Option<String>,
    /// Bearer token the API requires when set (env `HARNESS_TOKEN`). Never taken from a command
    /// line flag, where `ps` would show it.
    pub auth_token: Option<String>,
    /// A file holding the bearer token (flag `--token-file`, env `HARNESS_TOKEN_FILE`); read at
    /// start-up, surrounding white space trimmed. Wins over `auth_token`.
    pub auth_token_file: Option<PathBuf>,
    /// `text` or `json` log lines.
    pub log_format: LogFormat,
    /// Largest accepted request body, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// Longest accepted message content, in characters (422 beyond).
    pub max_message_chars: usize,
    /// How long running turns may take to finish after SIGINT/SIGTERM before children are killed.
    #[serde(with = "secs")]
    pub shutdown_grace: Duration,
    pub http: HttpConfig,
    pub claude: ClaudeConfig,
    pub pool: PoolConfig,
    pub turn: TurnConfig,
    pub tools: ToolsConfig,
    pub approvals: ApprovalsConfig,
    pub budget: BudgetConfig,
    pub rate_limit: RateLimitConfig,
    pub cluster: ClusterConfig,
    pub workspaces: WorkspacesConfig,
    pub webhooks: WebhooksConfig,
    pub schedules: SchedulesConfig,
    pub audit: AuditConfig,
    pub retention: RetentionConfig,
    pub files: FilesConfig,
    pub threads: ThreadsConfig,
    pub oauth: OAuthConfig,
    pub otel: OtelConfig,
    pub gateway: GatewayConfig,
    pub sandbox: SandboxConfig,
    /// `[profiles.NAME]`: named kinds of agent a thread can be created as (see
    /// [`ProfileConfig`]); `standard` and `lean` are built in.
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// `[plugins.NAME]`: one table per plugin, by plugin name, opaque to the core. The binary's
    /// plugin list hands each to its plugin's constructor, which refuses a key it does not know;
    /// a table for a plugin that is not loaded stops start-up ([`Config::check_plugin_tables`]).
    pub plugins: BTreeMap<String, PluginTable>,
}

/// Who may talk to the listener, and how long a connection may hold it.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// `Host` names accepted beside the bound address (and `localhost` on a loopback or
    /// wildcard bind), so that a DNS-rebinding page cannot reach the daemon under a name of its
    /// own. Case-insensitive, port ignored; `"*"` accepts any.
    pub allowed_hosts: Vec<String>,
    /// Browser origins (`https://app.example.com`) allowed to call the API across origins; they
    /// also get CORS headers. Any other `Origin` is refused (403). `"*"` allows any.
    pub allowed_origins: Vec<String>,
    /// How long a client has to send a request's head, counted from the connection's start or
    /// the end of the previous response (so it also closes idle keep-alive connections), and
    /// again its body.
    #[serde(with = "secs")]
    pub read_timeout: Duration,
    /// Most connections open at once (lowered to what the open-file limit allows); past it the
    /// oldest connection serving nothing (a head not finished, an idle keep-alive) is closed to
    /// make room.
    pub max_connections: usize,
    /// Most long-lived streams (`GET …/events`) at once, and at most half the connections;
    /// past it a stream gets 503, so streams alone cannot take every connection.
    pub max_streams: usize,
}
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PoolConfig {
    /// A warm process unused this long is killed.
    #[serde(with = "secs")]
    pub idle_ttl: Duration,
    /// Most live `claude` processes at once; a new one first pushes out the idle one expected
    /// back last (see `evict_grace`), or waits for one to finish its turn.
    pub max_capacity: u64,
    /// Most private memory (MiB, from `smaps_rollup`) the live processes may hold together: a
    /// new one starts only while their sum and one more of their average stay under it, else
    /// it pushes out idle ones as for `max_capacity`. Unset: `max_capacity` alone bounds them.
    pub max_memory_mb: Option<u64>,
    /// An idle process expected back within this (it went idle a moment ago, or its thread's
    /// turns come this close together) is not pushed out for a newcomer until the newcomer has
    /// waited `slot_wait`.
    #[serde(with = "secs")]
    pub evict_grace: Duration,
    /// Longest a spawn waits in line (arrival order) for an unprotected process before it pushes
    /// out a protected one.
    #[serde(with = "secs")]
    pub slot_wait: Duration,
    /// A prewarm pushes out only processes idle at least this long; when the pool is full of
    /// processes used more recently, the prewarm is skipped (a guess must not evict real work).
    #[serde(with = "secs")]
    pub prewarm_evicts_after: Duration,
    /// Processes kept started ahead of need, each in the folder of a thread id reserved for the
    /// next thread created: a new thread on the default model takes one as its process, as if
    /// prewarmed. They count against `max_capacity` and take about 120 MiB of private memory each; 0 turns them
    /// off.
    pub spares: usize,
    /// How many (profile, repository) pairs keep a spare parked for their next worktree thread:
    /// the pairs whose worktree threads were created last. A spare holds a process (against
    /// `max_capacity`) and a worktree of the repository at its `HEAD`, detached, which a new
    /// thread on that base takes as its own (its branch made there), so its creation skips the
    /// checkout and its first turn is warm. 0 turns them off.
    pub workspace_spares: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TurnConfig {
    /// No output from the CLI for this long (while no tool call is running) fails the turn.
    #[serde(with = "secs")]
    pub idle_timeout: Duration,
    /// Bound on a whole turn.
    #[serde(with = "secs")]
    pub timeout: Duration,
    /// Bound on spawn → ready (the CLI's `initialize` reply and MCP handshake).
    #[serde(with = "secs")]
    pub ready_timeout: Duration,
    /// Most messages waiting behind a running turn on one thread (429 beyond).
    pub queue_limit: usize,
    /// Most tool calls in one turn; the turn is stopped past it (a looping model). The CLI also
    /// gets `--max-turns` one above it, so a loop of built-in tools stops too.
    pub max_tool_calls: u32,
    /// On a thread with `onInterrupt: "retry"`: most times one message is run again after a
    /// crash, a shutdown or a takeover cut it.
    pub redrive_attempts: u32,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Per tool call, unless the tool sets its own.
    #[serde(with = "secs")]
    pub timeout: Duration,
}

/// The adaptive limit on turns running at once (`crate::throttle`): halved when the Messages
/// API pushes back (429/529 retries, a rejected rate limit, a turn ended by a 429/529), raised by
/// one after `limit` turns in a row went through.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RateLimitConfig {
    /// False keeps the limit at `max_concurrent_turns` (the signals are still counted).
    pub enabled: bool,
    /// The starting limit and its ceiling. Default: `pool.max_capacity`, since more turns than
    /// processes cannot run anyway.
    pub max_concurrent_turns: Option<usize>,
    /// The floor of the limit; at least 1, so turns always go on.
    pub min_concurrent_turns: usize,
    /// At most one decrease per window: the turns in flight when the API starts refusing all
    /// report it within the CLI's retry delays (≈0.5 s, then ≈1 s), and that is one overload,
    /// not one per turn.
    #[serde(with = "secs")]
    pub cooldown: Duration,
}

impl Default for RateLimitConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_concurrent_turns: None,
            min_concurrent_turns: 1,
            cooldown: Duration::from_secs(2),
        }
    }
}

impl RateLimitConfig {
    /// The ceiling: `max_concurrent_turns`, else the pool's capacity.
    pub fn max_turns(&self, pool: &PoolConfig) -> usize {
        self.max_concurrent_turns
            .unwrap_or_else(|| usize::try_from(pool.max_capacity).unwrap_or(usize::MAX))
    }
}

/// Who decides whether a child may use a tool the CLI would ask a person about (a `Bash` command
/// that writes, a `Write`, a read outside the thread's folder).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApprovalsConfig {
    /// What happens to a request no rule matches (flag `--approvals`, env `HARNESS_APPROVALS`).
    pub mode: ApprovalMode,
    /// Decide without asking, before the mode: a matching deny rule refuses wherever it stands
    /// in the list, then a matching allow rule allows (the CLI's own order: deny, then allow).
    /// Harness's own tools are allowed whatever the rules say. What each rule matches (a `Bash`
    /// command part by part, paths after `..` is resolved) is in `approvals::policy`.
    pub rules: Vec<ApprovalRule>,
    /// How long a person has to answer in `ask` mode; then the request is denied.
    #[serde(with = "secs")]
    pub timeout: Duration,
}

impl Default for ApprovalsConfig {
    fn default() -> Self {
        Self {
            mode: ApprovalMode::Deny,
            rules: Vec::new(),
            timeout: Duration::from_secs(300),
        }
    }
}

/// The policy for requests no rule decides.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalMode {
    /// Refused, with a message the model reads; nothing runs on the host.
    #[default]
    Deny,
    /// Held for a person to answer over the API (`approvals.timeout`).
    Ask,
    /// Allowed.
    Allow,
}

/// `tool = "Bash(git status:*)"`, `decision = "allow"`: the CLI's own rule syntax.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRule {
    pub tool: String,
    pub decision: RuleDecision,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuleDecision {
    Allow,
    Deny,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            bind: SocketAddr::from(([127, 0, 0, 1], 7878)),
            data_dir: paths::default_data_dir(),
            db: None,
            auth_token: None,
            auth_token_file: None,
            log_format: LogFormat::Text,
            max_body_bytes: 1024 * 1024,
            max_message_chars: 200_000,
            shutdown_grace: Duration::from_secs(30),
            http: HttpConfig::default(),
            claude: ClaudeConfig::default(),
            pool: PoolConfig::default(),
            turn: TurnConfig::default(),
            tools: ToolsConfig::default(),
            approvals: ApprovalsConfig::default(),
            budget: BudgetConfig::default(),
            rate_limit: RateLimitConfig::default(),
            cluster: ClusterConfig::default(),
            workspaces: WorkspacesConfig::default(),
            webhooks: WebhooksConfig::default(),
            schedules: SchedulesConfig::default(),
            audit: AuditConfig::default(),
            retention: RetentionConfig::default(),
            files: FilesConfig::default(),
            threads: ThreadsConfig::default(),
            oauth: OAuthConfig::default(),
            otel: OtelConfig::default(),
            gateway: GatewayConfig::default(),
            sandbox: SandboxConfig::default(),
            profiles: BTreeMap::new(),
            plugins: BTreeMap::new(),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            allowed_hosts: Vec::new(),
            allowed_origins: Vec::new(),
            read_timeout: Duration::from_secs(30),
            max_connections: 1024,
            max_streams: 512,
        }
    }
}

impl Default for PoolConfig {
    fn default() -> Self {
        Self {
            idle_ttl: Duration::from_secs(8 * 60),
            max_capacity: 16,
            max_memory_mb: None,
            evict_grace: Duration::from_secs(2),
            slot_wait: Duration::from_secs(3),
            prewarm_evicts_after: Duration::from_secs(120),
            spares: 1,
            workspace_spares: 1,
        }
    }
}

impl Default for TurnConfig {
    fn default() -> Self {
        Self {
            idle_timeout: Duration::from_secs(120),
            timeout: Duration::from_secs(30 * 60),
            ready_timeout: Duration::from_secs(30),
            queue_limit: 32,
            max_tool_calls: 200,
            redrive_attempts: 3,
        }
    }
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(120),
        }
    }
}

/// The flags of `harness serve`, each with its env var; each one given wins over the file. The
/// token itself has no flag (`ps` shows flags): it comes from `HARNESS_TOKEN` or a token file.
#[derive(Clone, Debug, Default, clap::Args)]
pub struct ServeArgs {
    /// TOML config file.
    #[arg(long, env = "HARNESS_CONFIG")]
    pub config: Option<PathBuf>,
    /// Address for the HTTP API [default: 127.0.0.1:7878].
    #[arg(long, env = "HARNESS_BIND")]
    pub bind: Option<SocketAddr>,
    /// SQLite database file, or a postgres:// URL for PostgreSQL (give a URL with a password
    /// through HARNESS_DB or the TOML file: `ps` shows flags) [default: <data-dir>/harness.db].
    #[arg(long, env = "HARNESS_DB")]
    pub db: Option<String>,
    /// The claude CLI binary [default: claude on PATH].
    #[arg(long, env = "HARNESS_CLAUDE_BIN")]
    pub claude_bin: Option<PathBuf>,
    /// Data directory [default: $XDG_DATA_HOME/harness or ~/.local/share/harness].
    #[arg(long, env = "HARNESS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// A file holding the bearer token the API requires (required when binding beyond
    /// loopback, unless OAuth is on). The token may also come from the HARNESS_TOKEN variable.
    #[arg(long, env = "HARNESS_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// Log lines as `text` or `json`.
    #[arg(long, env = "HARNESS_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Tool permissions no rule decides: `deny` (default), `ask` (a person answers over the
    /// API) or `allow`.
    #[arg(long, env = "HARNESS_APPROVALS", value_enum)]
    pub approvals: Option<ApprovalMode>,
    /// Most USD all turns of a UTC day may cost together; then messages get 402.
    #[arg(long, env = "HARNESS_BUDGET_DAILY_USD")]
    pub budget_daily_usd: Option<f64>,
    /// This node's URL for its peers (`auto`: the bound address); turns clustering on
    /// (PostgreSQL only).
    #[arg(long, env = "HARNESS_ADVERTISE")]
    pub advertise: Option<String>,
    /// Seconds a thread's lease outlives its owner's last heartbeat.
    #[arg(long, env = "HARNESS_LEASE_TTL", value_parser = parse_seconds)]
    pub lease_ttl: Option<Duration>,
}

/// A flag's seconds as a `Duration`: a clear error for what is not a non-negative number that
/// fits (`-1`, `inf`, `1e30`), never a panic.
fn parse_seconds(text: &str) -> Result<Duration, String> {
    let secs: f64 = text
        .parse()
        .map_err(|_| format!("`{text}` is not a number of seconds"))?;
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("`{text}` is not a non-negative number of seconds that fits"))
}

/// A configuration that cannot be used. Shown to the operator at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("invalid config file {path}: {error}")]
    Parse {
        path: PathBuf,
        error: toml::de::Error,
    },
    #[error(
        "bind address {0} is not loopback: set an auth token (HARNESS_TOKEN or auth_token) or an OAuth issuer (oauth.issuer) first"
    )]
    TokenRequired(SocketAddr),
    #[error("invalid setting: {0}")]
    Invalid(String),
    /// A `[plugins.NAME]` table whose plugin is not loaded: a misspelt name, most likely, whose
    /// settings would otherwise be ignored.
    #[error("[plugins.{name}]: no plugin `{name}` is loaded (loaded: {})", loaded.join(", "))]
    UnknownPlugin { name: String, loaded: Vec<String> },
    #[error("cannot read the token file {path}: {error}")]
    TokenFile {
        path: PathBuf,
        error: std::io::Error,
    },
}

impl Config {
    /// Defaults, then the file (if any), then `HARNESS_TOKEN`, then the flags; then the token
    /// file; then every path made absolute ([`Config::absolute_paths`]); then checks the result.
    pub fn load(args: &ServeArgs) -> Result<Config, ConfigError> {
        let token = crate::environment::var("HARNESS_TOKEN").filter(|t| !t.is_empty());
        Self::load_with(args, token)
    }

    /// [`Config::load`] with the token variable's value passed in.
    pub fn load_with(args: &ServeArgs, env_token: Option<String>) -> Result<Config, ConfigError> {
        let mut config = match args.config.as_deref() {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|error| ConfigError::Read {
                    path: path.to_owned(),
                    error,
                })?;
                Self::from_toml(&text).map_err(|error| ConfigError::Parse {
                    path: path.to_owned(),
                    error,
                })?
            }
            None => Config::default(),
        };
        if env_token.is_some() {
            config.auth_token = env_token;
        }
        config.apply(args);
        config.read_token_file()?;
        config.absolute_paths()?;
        config.validate()?;
        Ok(config)
    }

    /// Replaces `auth_token` with the contents of `auth_token_file`, when one is named.
    pub fn read_token_file(&mut self) -> Result<(), ConfigError> {
        let Some(path) = &self.auth_token_file else {
            return Ok(());
        };
        let token_error = |error| ConfigError::TokenFile {
            path: path.clone(),
            error,
        };
        let text = std::fs::read_to_string(path).map_err(token_error)?;
        let token = text.trim();
        if token.is_empty() {
            return Err(token_error(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "the file is empty",
            )));
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            if let Ok(meta) = std::fs::metadata(path) {
                if meta.permissions().mode() & 0o077 != 0 {
                    tracing::warn!(path = %path.display(), "The token file is readable by other users; chmod 600 it.");
                }
            }
        }
        self.auth_token = Some(token.to_owned());
        Ok(())
    }

    /// The file's settings over the defaults. A key that has moved is refused with a message
    /// saying where it went ([`MOVED_KEYS`]), not serde's bare "unknown field".
    pub fn from_toml(text: &str) -> Result<Config, toml::de::Error> {
        toml::from_str(text).map_err(|error| moved_key(text).unwrap_or(error))
    }

    /// Refuses a `[plugins.NAME]` table no plugin in `loaded` (the names of the plugins the
    /// daemon runs) owns.
    pub fn check_plugin_tables<'a>(
        &self,
        loaded: impl IntoIterator<Item = &'a str>,
    ) -> Result<(), ConfigError> {
        let loaded: Vec<&str> = loaded.into_iter().collect();
        match self
            .plugins
            .keys()
            .find(|name| !loaded.contains(&name.as_str()))
        {
            Some(name) => Err(ConfigError::UnknownPlugin {
                name: name.clone(),
                loaded: loaded.iter().map(|n| (*n).to_owned()).collect(),
            }),
            None => Ok(()),
        }
    }

    /// The flags that were given, over whatever is set.
    pub fn apply(&mut self, args: &ServeArgs) {
        let args = args.clone();
        if let Some(v) = args.bind {
            self.bind = v;
        }
        if let Some(v) = args.db {
            self.db = Some(v);
        }
        if let Some(v) = args.claude_bin {
            self.claude.bin = v;
        }
        if let Some(v) = args.data_dir {
            self.data_dir = v;
        }
        if let Some(v) = args.token_file {
            self.auth_token_file = Some(v);
        }
        if let Some(v) = args.log_format {
            self.log_format = v;
        }
        if let Some(v) = args.approvals {
            self.approvals.mode = v;
        }
        if let Some(v) = args.budget_daily_usd {
            self.budget.daily_usd = Some(v);
        }
        if let Some(v) = args.advertise {
            self.cluster.advertise = Some(v);
        }
        if let Some(v) = args.lease_ttl {
            self.cluster.lease_ttl = v;
        }
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        let token_set = self.auth_token.as_deref().is_some_and(|t| !t.is_empty());
        if !self.bind.ip().is_loopback() && !token_set && !self.oauth.enabled() {
            return Err(ConfigError::TokenRequired(self.bind));
        }
        self.oauth.check().map_err(ConfigError::Invalid)?;
        self.gateway.check().map_err(ConfigError::Invalid)?;
        let profile_walls: Vec<(&str, &ProfileSandbox)> = self
            .profiles
            .iter()
            .map(|(name, profile)| (name.as_str(), &profile.sandbox))
            .collect();
        self.sandbox
            .check(&profile_walls)
            .map_err(ConfigError::Invalid)?;
        crate::budget::validate_usd(self.budget.turn_estimate_usd, "budget.turn_estimate_usd")
            .map_err(ConfigError::Invalid)?;
        if let Some(daily) = self.budget.daily_usd {
            crate::budget::validate_usd(daily, "budget.daily_usd").map_err(ConfigError::Invalid)?;
        }
        profiles::check(&self.profiles)?;
        if self.pool.max_capacity == 0 {
            return Err(ConfigError::Invalid(
                "pool.max_capacity must be at least 1".into(),
            ));
        }
        if self.http.max_streams == 0 {
            return Err(ConfigError::Invalid(
                "http.max_streams must be at least 1".into(),
            ));
        }
        if self.http.max_connections == 0 {
            return Err(ConfigError::Invalid(
                "http.max_connections must be at least 1".into(),
            ));
        }
        if self.turn.max_tool_calls == 0 {
            return Err(ConfigError::Invalid(
                "turn.max_tool_calls must be at least 1".into(),
            ));
        }
        let max_turns = self.rate_limit.max_turns(&self.pool);
        if self.rate_limit.min_concurrent_turns == 0
            || max_turns < self.rate_limit.min_concurrent_turns
        {
            return Err(ConfigError::Invalid(format!(
                "rate_limit.min_concurrent_turns must be at least 1 and at most max_concurrent_turns ({max_turns})"
            )));
        }
        if self.cluster.advertise.is_some() {
            if !crate::store::is_postgres_url(&self.db_path()) {
                return Err(ConfigError::Invalid(
                    "cluster.advertise (--advertise) needs a PostgreSQL database (db = \"postgres://…\"): nodes share their threads through it".into(),
                ));
            }
            if self.cluster.lease_ttl < Duration::from_secs(1) {
                return Err(ConfigError::Invalid(
                    "cluster.lease_ttl must be at least 1 second".into(),
                ));
            }
        }
        if self.turn.queue_limit == 0 {
            return Err(ConfigError::Invalid(
                "turn.queue_limit must be at least 1".into(),
            ));
        }
        self.retention.check()
    }
}

/// Keys that left the core's config: `(table, key, where it is now)`. A file that still sets
/// one is refused with a message naming the new place.
pub const MOVED_KEYS: &[(&str, &str, &str)] = &[
    (
        "tools",
        "delegation_max_depth",
        "[plugins.delegation] max_depth",
    ),
    (
        "tools",
        "delegation_timeout",
        "[plugins.delegation] timeout",
    ),
];

/// The error for the first key of [`MOVED_KEYS`] that `text` sets, if it sets one.
fn moved_key(text: &str) -> Option<toml::de::Error> {
    let file: toml::Table = text.parse().ok()?;
    MOVED_KEYS.iter().find_map(|(table, key, now)| {
        file.get(*table)?.as_table()?.get(*key)?;
        Some(serde::de::Error::custom(format!(
            "`{table}.{key}` has moved: set it as {now}"
        )))
    })
}

mod audit;
mod budget;
mod claude;
mod cluster;
mod gateway;
mod oauth;
mod paths;
mod profiles;
mod retention;
mod sandbox;
mod schedules;
mod threads;
mod webhooks;
mod workspaces;

pub use crate::files::FilesConfig;
pub use crate::traces::OtelConfig;
pub use audit::AuditConfig;
pub use budget::BudgetConfig;
pub use claude::{ClaudeConfig, Profile, DEFAULT_PASS_ENV};
pub use cluster::ClusterConfig;
pub use gateway::{FirstParty, GatewayConfig, Price};
pub use oauth::OAuthConfig;
pub use profiles::{AgentConfig, McpServerConfig, ProfileApprovals, ProfileConfig, OVERRIDABLE};
pub use retention::RetentionConfig;
pub use sandbox::{Network, ProfileSandbox, SandboxConfig};
pub use schedules::SchedulesConfig;
pub use threads::{DeleteChildren, ThreadsConfig};
pub use webhooks::{WebhookEndpoint, WebhooksConfig};
pub use workspaces::{OnArchive, WorkspaceRequest, WorkspacesConfig};

#[cfg(test)]
mod tests;
