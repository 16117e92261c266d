//! `[profiles.NAME]`: named kinds of agent. A profile is `[claude]` with what it sets replaced:
//! its prompt, its tools, its permission mode, its model, its own external MCP servers. The
//! built-in `standard` and `lean` are `[claude]` itself on either feature set; `claude.profile`
//! names the one threads get when they ask for none.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;

use super::{ApprovalMode, ApprovalRule, ApprovalsConfig, Config, ConfigError, Profile};

/// What a caller may choose per thread, when its profile lets it (`overridable`).
pub const OVERRIDABLE: &[&str] = &["model", "workspace", "permissionMode", "mcpServers"];

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileConfig {
    /// What `GET /api/profiles` says of it.
    pub description: Option<String>,
    /// The CLI feature set it starts from (`standard` or `lean`, as `claude.profile`); default
    /// `standard`.
    pub base: Option<Profile>,
    /// `--system-prompt`; unset: `claude.system_prompt`.
    pub system_prompt: Option<String>,
    /// `--append-system-prompt`; unset: `claude.append_system_prompt`.
    pub append_system_prompt: Option<String>,
    /// `--tools`, the built-in tools; unset: `claude.builtin_tools`.
    pub builtin_tools: Option<String>,
    /// Tools that run without asking, beside Harness's own and the profile's MCP servers';
    /// unset: `claude.allowed_tools`.
    pub allowed_tools: Option<Vec<String>>,
    /// Tools taken away from the model, beside those containment always takes.
    pub disallowed_tools: Vec<String>,
    /// `--permission-mode`; unset: `claude.permission_mode`.
    pub permission_mode: Option<String>,
    /// The model of its threads that name none; unset: `claude.default_model`.
    pub model: Option<String>,
    /// `--fallback-model`: the model the CLI turns to when the main one is overloaded.
    pub fallback_model: Option<String>,
    /// The model the CLI's sub-agents (its `Agent` tool) run on
    /// ([`crate::launch::SUBAGENT_MODEL_ENV`]); unset: the CLI's choice (the thread's model, or
    /// what the sub-agent's definition names).
    pub subagent_model: Option<String>,
    /// Most tool calls in one turn; unset: `turn.max_tool_calls`.
    pub max_tool_calls: Option<u32>,
    /// `--effort`: `low`, `medium`, `high`, `xhigh` or `max`.
    pub effort: Option<String>,
    /// Plugin folders (skills, commands, agents) its processes load (`--plugin-dir`).
    pub plugin_dirs: Vec<PathBuf>,
    /// External MCP servers its processes get (stdio), by name: their tools are
    /// `mcp__NAME__…`, allowed without asking. They reach a process over its control channel,
    /// never its command line.
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// What a caller may choose per thread (of [`OVERRIDABLE`]); default: all of it. A field not
    /// listed is refused with 422 when a caller sends it.
    pub overridable: Option<Vec<String>>,
    /// Its own approvals: `mode` and `rules` replace `[approvals]`'s when set (the timeout is
    /// the daemon's).
    pub approvals: ProfileApprovals,
    /// The workspace of its threads when the caller gives none (`{path}` or `{repo, worktree,
    /// baseRef?, branch?}`, as `POST /api/threads` takes it); checked against
    /// `workspaces.roots` like any other.
    pub workspace: Option<super::WorkspaceRequest>,
    /// Most USD each of its threads may cost: the default of `maxBudgetUsd`, and its ceiling
    /// (a caller's higher one is refused).
    pub max_budget_usd: Option<f64>,
    /// Sub-agents its model can hand work to with the CLI's `Agent` tool, by name (declared in
    /// each process's `initialize`).
    pub agents: BTreeMap<String, AgentConfig>,
    /// Its threads' walls (`[profiles.NAME.sandbox]`): limits, network, `auto_allow`; unset:
    /// `[sandbox]`'s.
    pub sandbox: super::ProfileSandbox,
}

/// One sub-agent of a profile, as the CLI's `initialize.agents` takes it.
#[derive(Clone, Debug, Default, Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// When the model should use it.
    pub description: String,
    /// Its system prompt.
    pub prompt: String,
    /// The tools it may use; unset: the profile's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// Its model; unset: the CLI's choice.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProfileApprovals {
    pub mode: Option<ApprovalMode>,
    pub rules: Option<Vec<ApprovalRule>>,
}

impl Config {
    /// The approvals of threads of profile `name`: `[approvals]` with what the profile's
    /// `approvals` table sets replaced (the built-in profiles: `[approvals]` itself).
    pub fn approvals_of(&self, name: &str) -> ApprovalsConfig {
        let mut approvals = self.approvals.clone();
        if let Some(own) = self.profiles.get(name).map(|p| &p.approvals) {
            if let Some(mode) = own.mode {
                approvals.mode = mode;
            }
            if let Some(rules) = &own.rules {
                approvals.rules.clone_from(rules);
            }
        }
        approvals
    }

    /// The variables of the daemon's environment its MCP servers take secrets from
    /// (`env:NAME`): kept out of the live environment with the daemon's own
    /// (`crate::environment::keep_secrets`).
    pub fn secret_env_names(&self) -> Vec<String> {
        self.profiles
            .values()
            .flat_map(|profile| profile.mcp_servers.values())
            .flat_map(|server| server.secrets.values())
            .filter_map(|source| source.strip_prefix("env:"))
            .map(str::to_owned)
            .collect()
    }

    /// Every profile's name: the built-in `standard` and `lean`, then each `[profiles.NAME]`.
    pub fn profile_names(&self) -> Vec<String> {
        let mut names = vec!["standard".to_owned(), "lean".to_owned()];
        names.extend(self.profiles.keys().cloned());
        names
    }
}

/// One external MCP server: a program the CLI starts over stdio (`command`), or one it reaches
/// over Streamable HTTP (`url`).
#[derive(Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpServerConfig {
    pub command: PathBuf,
    pub args: Vec<String>,
    /// Plain settings for its environment (not secrets: they are shown by `GET /api/profiles`
    /// by name only, but live in the config file).
    pub env: BTreeMap<String, String>,
    /// An HTTP server's URL (instead of `command`).
    pub url: Option<String>,
    /// Plain headers of an HTTP server's requests.
    pub headers: BTreeMap<String, String>,
    /// Its secrets: each read at start-up from `env:NAME` (the daemon's environment) or
    /// `file:/path` (a file's content, trailing white space trimmed), and given as an
    /// environment variable (stdio) or a header (`Authorization = "file:…"`, HTTP). Never
    /// shown, logged or put on a command line.
    pub secrets: BTreeMap<String, String>,
}

impl std::fmt::Debug for McpServerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("url", &self.url)
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field("secrets", &self.secrets.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl McpServerConfig {
    /// The server's environment (stdio) or headers (HTTP): `env` or `headers`, then each secret
    /// read from where it says.
    pub fn resolved(
        &self,
        daemon_env: impl Fn(&str) -> Option<String>,
    ) -> Result<BTreeMap<String, String>, ConfigError> {
        let mut env = if self.url.is_some() {
            self.headers.clone()
        } else {
            self.env.clone()
        };
        for (name, source) in &self.secrets {
            let value = if let Some(var) = source.strip_prefix("env:") {
                daemon_env(var).ok_or_else(|| {
                    ConfigError::Invalid(format!(
                        "MCP server secret {name}: the daemon's environment has no {var}"
                    ))
                })?
            } else if let Some(path) = source.strip_prefix("file:") {
                std::fs::read_to_string(path)
                    .map_err(|err| {
                        ConfigError::Invalid(format!(
                            "MCP server secret {name}: cannot read {path}: {err}"
                        ))
                    })?
                    .trim_end()
                    .to_owned()
            } else {
                return Err(ConfigError::Invalid(format!(
                    "MCP server secret {name}: say where it comes from with `env:NAME` or \
                     `file:/path`"
                )));
            };
            env.insert(name.clone(), value);
        }
        Ok(env)
    }
}

/// Checks the profiles' names and fields (the secrets are read when the launcher is built).
pub fn check(profiles: &BTreeMap<String, ProfileConfig>) -> Result<(), ConfigError> {
    for (name, profile) in profiles {
        let well_formed = !name.is_empty()
            && name.len() <= 64
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !well_formed {
            return Err(ConfigError::Invalid(format!(
                "profiles.{name}: a profile name is 1 to 64 letters, digits, `-` or `_`"
            )));
        }
        if name == "standard" || name == "lean" {
            return Err(ConfigError::Invalid(format!(
                "profiles.{name}: `standard` and `lean` are built in (they are `[claude]`); \
                 give yours another name"
            )));
        }
        if let Some(usd) = profile.max_budget_usd {
            crate::budget::validate_usd(usd, &format!("profiles.{name}.max_budget_usd"))
                .map_err(ConfigError::Invalid)?;
        }
        if let Some(effort) = &profile.effort {
            if !["low", "medium", "high", "xhigh", "max"].contains(&effort.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "profiles.{name}.effort: `{effort}` is not low, medium, high, xhigh or max"
                )));
            }
        }
        if let Some(dir) = profile.plugin_dirs.iter().find(|d| !d.is_absolute()) {
            return Err(ConfigError::Invalid(format!(
                "profiles.{name}.plugin_dirs: {} is not an absolute path",
                dir.display()
            )));
        }
        if profile.max_tool_calls == Some(0) {
            return Err(ConfigError::Invalid(format!(
                "profiles.{name}.max_tool_calls must be at least 1"
            )));
        }
        for field in profile.overridable.iter().flatten() {
            if !OVERRIDABLE.contains(&field.as_str()) {
                return Err(ConfigError::Invalid(format!(
                    "profiles.{name}.overridable: `{field}` is not one of {OVERRIDABLE:?}"
                )));
            }
        }
        for (server, config) in &profile.mcp_servers {
            let well_formed = !server.is_empty()
                && server
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            if !well_formed || server == "harness" {
                return Err(ConfigError::Invalid(format!(
                    "profiles.{name}.mcp_servers.{server}: a server name is letters, digits, \
                     `-` or `_`, and not `harness` (Harness's own)"
                )));
            }
            let has_command = !config.command.as_os_str().is_empty();
            if has_command == config.url.is_some() {
                return Err(ConfigError::Invalid(format!(
                    "profiles.{name}.mcp_servers.{server}: give `command` (stdio) or `url` \
                     (HTTP), one of them"
                )));
            }
        }
    }
    Ok(())
}
