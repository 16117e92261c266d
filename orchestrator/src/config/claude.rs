//! `[claude]`: how the `claude` children are started.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

/// How `claude` children are started.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClaudeConfig {
    /// The CLI binary (env `HARNESS_CLAUDE_BIN`); looked up on PATH when not a path.
    pub bin: PathBuf,
    /// When `bin` names no program: use the CLI installed under `<data_dir>/cli`, or install the
    /// pinned one there with npm on start (`harness serve` only). Off: the daemon refuses to
    /// start, saying what to install.
    pub install: bool,
    /// `CLAUDE_CONFIG_DIR` of every child, owned by the daemon so concurrent CLIs never share
    /// (and corrupt) the user's `~/.claude.json`. Default `<data_dir>/claude`.
    pub config_dir: Option<PathBuf>,
    /// Working directory of every child. Default `<data_dir>/work`.
    pub workdir: Option<PathBuf>,
    /// Model for threads that name none; `None` lets the CLI choose.
    pub default_model: Option<String>,
    /// `--system-prompt`; `None` keeps the CLI's own Claude Code prompt.
    pub system_prompt: Option<String>,
    /// `--append-system-prompt`.
    pub append_system_prompt: Option<String>,
    /// `--tools` (the built-in tool set): `None` = the CLI default, `""` = no built-in tools.
    pub builtin_tools: Option<String>,
    /// Added to `--allowedTools` next to the harness MCP server.
    pub allowed_tools: Vec<String>,
    /// `--permission-mode`.
    pub permission_mode: Option<String>,
    /// `CLAUDE_CODE_MAX_RETRIES` of the children: the CLI's default of 10 holds a failing turn for
    /// about three minutes.
    pub max_retries: u32,
    /// `ENABLE_TOOL_SEARCH`: false (the default) puts our tool schemas inline in every request
    /// instead of deferring them behind the CLI's ToolSearch tool.
    pub tool_search: bool,
    /// Extra environment for children, on top of the variables `pass_env` lets through.
    pub env: BTreeMap<String, String>,
    /// Variables of the daemon's own environment that children inherit: names, or prefixes
    /// ending in `*`. Nothing else reaches the CLI or the tools it runs (not `HARNESS_TOKEN`, not
    /// unrelated secrets).
    pub pass_env: Vec<String>,
    /// The CLI's auto-memory (notes the model writes for itself and reads back in later
    /// sessions). Off by default: a note one thread writes must not steer another. When on, each
    /// thread still has its own memory folder, since each has its own working directory.
    pub auto_memory: bool,
    /// `lean` turns off CLI features a service rarely needs, for less CPU per turn: the CLI's
    /// built-in tools (unless `builtin_tools` is set), token deltas (`text_delta` events), and
    /// the features [`crate::launch::LEAN_SWITCHES`] lists (CLAUDE.md files, attachments, file
    /// checkpoints, bundled skills, telemetry, …).
    pub profile: Profile,
    /// The CLI's own scheduling tools (`CronCreate`, `ScheduleWakeup`, `Monitor`, background
    /// `Agent` and `Bash` tasks), off by default. On, each turn they make the CLI start is
    /// recorded as a turn of the thread (origin `cli`), charged to its budgets before it runs
    /// on, and a process with pending crons or background tasks is not evicted. The tools that
    /// reach other sessions stay off either way.
    pub scheduling_tools: bool,
    /// Managed settings (policy) for every child, as `managed-settings.json` would hold them
    /// (`disableSideloadFlags`, `permissions.disableBypassPermissionsMode`, …), delivered in
    /// each process's `initialize` request instead of the machine's policy folder. The CLI
    /// enforces them: a start they refuse fails as a policy refusal (403), a mode they narrow
    /// is reported as the mode in effect.
    pub managed_settings: Option<serde_json::Map<String, serde_json::Value>>,
}

/// How much of the CLI's feature set the children run with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Profile {
    #[default]
    Standard,
    Lean,
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        Self {
            bin: PathBuf::from("claude"),
            install: true,
            config_dir: None,
            workdir: None,
            default_model: None,
            system_prompt: None,
            append_system_prompt: None,
            builtin_tools: None,
            allowed_tools: Vec::new(),
            permission_mode: None,
            max_retries: 2,
            tool_search: false,
            env: BTreeMap::new(),
            pass_env: DEFAULT_PASS_ENV.iter().map(|v| (*v).to_owned()).collect(),
            auto_memory: false,
            profile: Profile::Standard,
            scheduling_tools: false,
            managed_settings: None,
        }
    }
}

/// What children inherit from the daemon's environment by default: what the CLI needs to run
/// (paths, locale, time zone, proxies and CA bundles) and its credentials (`ANTHROPIC_*`,
/// `CLAUDE_CODE_*`).
pub const DEFAULT_PASS_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TERM",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "NODE_EXTRA_CA_CERTS",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "ANTHROPIC_*",
    "CLAUDE_CODE_*",
];
