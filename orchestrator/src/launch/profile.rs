//! [`AgentProfile`]: one kind of agent as the launcher runs it: the options, environment and
//! external MCP servers of its processes, built once from `[claude]` and its `[profiles.NAME]`
//! table. The built-in `standard` and `lean` are `[claude]` itself on either feature set.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use claude_cli::{ExternalMcpServers, SpawnOptions};
use serde::Serialize;
use serde_json::json;

use super::{child_env, contained_tools, session_settings};
use crate::config::{Config, ConfigError, Profile, ProfileConfig, WorkspaceRequest, OVERRIDABLE};
use crate::environment;
use crate::mcp::SERVER_NAME;

/// One profile, ready to start processes.
#[derive(Clone, Debug)]
pub struct AgentProfile {
    info: ProfileInfo,
    /// The workspace of its threads when a caller gives none.
    workspace: Option<WorkspaceRequest>,
    base: SpawnOptions,
    default_model: Option<String>,
    env: Vec<(String, String)>,
    /// Where its model requests go, kept out of `env` (`gateway.enabled`); `None`: its
    /// children talk to the API themselves.
    upstream: Option<std::sync::Arc<crate::gateway::Upstream>>,
    external: Option<ExternalMcpServers>,
    /// Its sub-agents (`initialize.agents`).
    agents: Option<serde_json::Value>,
    /// What bounds each turn of its processes.
    limits: super::TurnLimits,
    /// The tools its threads' client runs (an agent's custom tools), served as the MCP server
    /// `custom`; `None`: it has none.
    client_tools: Option<std::sync::Arc<crate::mcp::ClientTools>>,
}

/// What `GET /api/profiles` shows of a profile: what it runs with, never a secret.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProfileInfo {
    pub name: String,
    pub description: Option<String>,
    /// `standard` or `lean`: the CLI feature set.
    pub base: String,
    /// The model of its threads that name none; `null`: the CLI's own default.
    pub model: Option<String>,
    /// The model its CLI's sub-agents run on; `null`: the CLI's choice.
    pub subagent_model: Option<String>,
    /// `--tools`; `null`: the CLI's default set.
    pub builtin_tools: Option<String>,
    pub allowed_tools: Vec<String>,
    pub permission_mode: Option<String>,
    /// Most tool calls in one turn.
    pub max_tool_calls: u32,
    /// Its external MCP servers: name and command (their environments are not shown).
    pub mcp_servers: Vec<McpServerInfo>,
    /// Its sub-agents' names.
    pub agents: Vec<String>,
    /// What a caller may choose per thread.
    pub overridable: Vec<String>,
    /// Most USD each of its threads may cost (default and ceiling of `maxBudgetUsd`).
    pub max_budget_usd: Option<f64>,
    /// The profile of threads that ask for none.
    pub default: bool,
}

#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct McpServerInfo {
    pub name: String,
    /// Its command (stdio), or its URL (HTTP).
    pub command: String,
    pub args: Vec<String>,
}

impl AgentProfile {
    /// `name`'s profile: `[claude]` with what `table` sets replaced (`None`: a built-in, on the
    /// feature set `base`).
    pub fn build(
        config: &Config,
        name: &str,
        table: Option<&ProfileConfig>,
        base: Profile,
        longest_tool_call: Duration,
        approval_denies: &[String],
        daemon_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<AgentProfile, ConfigError> {
        let empty = ProfileConfig::default();
        let table = table.unwrap_or(&empty);
        let mut own = config.clone();
        let claude = &mut own.claude;
        claude.profile = table.base.unwrap_or(base);
        let replace = |field: &mut Option<String>, value: &Option<String>| {
            if value.is_some() {
                field.clone_from(value);
            }
        };
        replace(&mut claude.system_prompt, &table.system_prompt);
        replace(
            &mut claude.append_system_prompt,
            &table.append_system_prompt,
        );
        replace(&mut claude.builtin_tools, &table.builtin_tools);
        replace(&mut claude.permission_mode, &table.permission_mode);
        replace(&mut claude.default_model, &table.model);
        if let Some(allowed) = &table.allowed_tools {
            claude.allowed_tools.clone_from(allowed);
        }
        if let Some(max) = table.max_tool_calls {
            own.turn.max_tool_calls = max;
        }
        let mut base = base_options(&own, &config.claude_config_dir(), approval_denies);
        base.disallowed_tools
            .extend(table.disallowed_tools.iter().cloned());
        base.fallback_model.clone_from(&table.fallback_model);
        base.effort.clone_from(&table.effort);
        base.plugin_dirs = table
            .plugin_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        let (servers, listed) = external_servers(table, daemon_env)?;
        base.allowed_tools
            .extend(listed.iter().map(|s| format!("mcp__{}", s.name)));
        let overridable = table
            .overridable
            .clone()
            .unwrap_or_else(|| OVERRIDABLE.iter().map(|f| (*f).to_owned()).collect());
        let mut env = child_env(&own, longest_tool_call, environment::vars().into_iter());
        if let Some(model) = &table.subagent_model {
            env.push((super::SUBAGENT_MODEL_ENV.to_owned(), model.clone()));
        }
        let upstream = own
            .gateway
            .enabled
            .then(|| std::sync::Arc::new(crate::gateway::Upstream::take_from(&mut env)));
        Ok(AgentProfile {
            info: ProfileInfo {
                name: name.to_owned(),
                description: table.description.clone(),
                base: match own.claude.profile {
                    Profile::Standard => "standard".into(),
                    Profile::Lean => "lean".into(),
                },
                model: own.claude.default_model.clone(),
                subagent_model: table.subagent_model.clone(),
                builtin_tools: base.builtin_tools.clone(),
                allowed_tools: base.allowed_tools.clone(),
                permission_mode: base.permission_mode.clone(),
                max_tool_calls: own.turn.max_tool_calls,
                max_budget_usd: table.max_budget_usd,
                mcp_servers: listed,
                agents: table.agents.keys().cloned().collect(),
                overridable,
                default: false,
            },
            env,
            upstream,
            default_model: own.claude.default_model.clone(),
            external: (!servers.is_empty()).then(|| ExternalMcpServers(servers.into())),
            workspace: table.workspace.clone(),
            limits: super::TurnLimits {
                max_tool_calls: own.turn.max_tool_calls,
                idle_timeout: own.turn.idle_timeout,
            },
            agents: (!table.agents.is_empty()).then(|| json!(table.agents)),
            base,
            client_tools: None,
        })
    }

    /// The profile with `tools` its threads' client runs (none when empty).
    pub fn with_client_tools(self, tools: std::sync::Arc<crate::mcp::ClientTools>) -> Self {
        AgentProfile {
            client_tools: (!tools.is_empty()).then_some(tools),
            ..self
        }
    }

    /// The profile without `tools` among those its CLI runs without asking (a made profile's
    /// MCP server, which its table allows or not: a configured profile's are allowed whole).
    pub fn asking_for(mut self, tools: &[String]) -> Self {
        self.base.allowed_tools.retain(|t| !tools.contains(t));
        self
    }

    /// The tools its threads' client runs, when it has any.
    pub fn client_tools(&self) -> Option<&std::sync::Arc<crate::mcp::ClientTools>> {
        self.client_tools.as_ref()
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    /// What bounds each turn of its processes.
    pub fn limits(&self) -> super::TurnLimits {
        self.limits
    }

    /// The options of its processes on `model` (its default when `None`).
    pub fn options(&self, model: Option<String>) -> SpawnOptions {
        SpawnOptions {
            model: model.or_else(|| self.default_model.clone()),
            ..self.base.clone()
        }
    }

    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// Where its model requests go when the gateway is on.
    pub fn upstream(&self) -> Option<&std::sync::Arc<crate::gateway::Upstream>> {
        self.upstream.as_ref()
    }

    /// Its external MCP servers, only those named in `only` when given; `None` when it has
    /// none.
    pub fn external_mcp_servers(&self, only: Option<&[String]>) -> Option<ExternalMcpServers> {
        let all = self.external.as_ref()?.0.as_object()?;
        let chosen = all
            .iter()
            .filter(|(name, _)| only.is_none_or(|only| only.contains(name)))
            .map(|(name, server)| (name.clone(), server.clone()))
            .collect::<serde_json::Map<_, _>>();
        Some(ExternalMcpServers(chosen.into()))
    }

    /// The external MCP servers of a turn that asks for `names` only, as its process spec
    /// holds them (sorted, each once; `None` when that is all of the profile's), or why it may
    /// not: a name the profile has no server of. A caller only narrows the set.
    pub fn mcp_selection(&self, names: &[String]) -> Result<Option<Vec<String>>, String> {
        let own: Vec<&String> = self.info.mcp_servers.iter().map(|s| &s.name).collect();
        if let Some(unknown) = names.iter().find(|name| !own.contains(name)) {
            let own: Vec<&str> = own.iter().map(|s| s.as_str()).collect();
            return Err(format!(
                "the profile `{}` has no MCP server `{unknown}` (its servers: [{}])",
                self.info.name,
                own.join(", ")
            ));
        }
        let mut chosen = names.to_vec();
        chosen.sort();
        chosen.dedup();
        Ok((chosen.len() < own.len()).then_some(chosen))
    }

    pub fn agents(&self) -> Option<&serde_json::Value> {
        self.agents.as_ref()
    }

    /// Why a turn may not run in permission mode `mode` on this profile, if it may not: only
    /// modes that let the model do no more than the profile's own (`plan` < `default` <
    /// `acceptEdits` < `bypassPermissions`; `dontAsk` with `plan`), so a caller narrows, never
    /// widens.
    pub fn refuses_mode(&self, mode: &str) -> Option<String> {
        let rank = |mode: &str| match mode {
            "plan" | "dontAsk" => Some(0),
            "default" => Some(1),
            "acceptEdits" => Some(2),
            "bypassPermissions" => Some(3),
            _ => None,
        };
        let own = self.base.permission_mode.as_deref().unwrap_or("default");
        match (rank(mode), rank(own)) {
            (None, _) => Some(format!(
                "`{mode}` is not a permission mode (plan, dontAsk, default, acceptEdits, \
                 bypassPermissions)"
            )),
            (Some(asked), Some(allowed)) if asked <= allowed => None,
            _ => Some(format!(
                "`{mode}` would let the model do more than the profile `{}` allows (`{own}`)",
                self.info.name
            )),
        }
    }

    /// Whether a caller may choose `field` (one of [`OVERRIDABLE`]) for a thread of this profile.
    pub fn allows(&self, field: &str) -> bool {
        self.info.overridable.iter().any(|f| f == field)
    }

    /// The workspace of its threads when a caller gives none.
    pub fn default_workspace(&self) -> Option<&WorkspaceRequest> {
        self.workspace.as_ref()
    }

    /// Most USD each of its threads may cost.
    pub fn max_budget_usd(&self) -> Option<f64> {
        self.info.max_budget_usd
    }

    pub fn info(&self) -> &ProfileInfo {
        &self.info
    }

    pub(super) fn mark_default(&mut self) {
        self.info.default = true;
    }
}

/// `table`'s external MCP servers as the CLI takes them (`--mcp-config`), and as
/// `GET /api/profiles` shows them.
fn external_servers(
    table: &ProfileConfig,
    daemon_env: &dyn Fn(&str) -> Option<String>,
) -> Result<
    (
        serde_json::Map<String, serde_json::Value>,
        Vec<McpServerInfo>,
    ),
    ConfigError,
> {
    let mut servers = serde_json::Map::new();
    let mut listed = Vec::new();
    for (server, spec) in &table.mcp_servers {
        let env = spec.resolved(daemon_env)?;
        let (config, shown) = match &spec.url {
            Some(url) => (
                json!({"type": "http", "url": url, "headers": env}),
                url.clone(),
            ),
            None => (
                json!({"type": "stdio", "command": spec.command, "args": spec.args, "env": env}),
                spec.command.display().to_string(),
            ),
        };
        servers.insert(server.clone(), config);
        listed.push(McpServerInfo {
            name: server.clone(),
            command: shown,
            args: spec.args.clone(),
        });
    }
    Ok((servers, listed))
}

/// The options every process of a profile shares (`config.claude` is the profile's).
fn base_options(config: &Config, config_dir: &Path, approval_denies: &[String]) -> SpawnOptions {
    let mut allowed_tools = vec![format!("mcp__{SERVER_NAME}")];
    allowed_tools.extend(config.claude.allowed_tools.iter().cloned());
    SpawnOptions {
        model: None,
        fallback_model: None,
        effort: None,
        plugin_dirs: Vec::new(),
        system_prompt: config.claude.system_prompt.clone(),
        append_system_prompt: config.claude.append_system_prompt.clone(),
        builtin_tools: match config.claude.profile {
            Profile::Standard => config.claude.builtin_tools.clone(),
            Profile::Lean => config.claude.builtin_tools.clone().or(Some(String::new())),
        },
        allowed_tools,
        disallowed_tools: contained_tools(config).map(|t| (*t).to_owned()).collect(),
        permission_mode: config.claude.permission_mode.clone(),
        max_turns: Some(config.turn.max_tool_calls.saturating_add(1)),
        settings: Some(session_settings(config, config_dir, approval_denies).to_string()),
        no_partial_messages: config.claude.profile == Profile::Lean,
        // Every permission the CLI would ask a person for comes to `approvals` instead.
        permission_prompt_tool: Some("stdio".to_owned()),
        json_schema: None,
        fork_session: false,
        // Every transcript write comes to the pool, which stores it: the database, not this
        // machine's config dir, is what a resume relies on.
        session_mirror: true,
    }
}

/// Every profile of `config`: the built-in `standard` and `lean`, then each `[profiles.NAME]`;
/// the one `claude.profile` names is the default.
pub fn all(
    config: &Config,
    longest_tool_call: Duration,
    approval_denies: &BTreeMap<String, Vec<String>>,
    daemon_env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, AgentProfile>, ConfigError> {
    let denies_of = |name: &str| approval_denies.get(name).map_or(&[][..], Vec::as_slice);
    let mut profiles = BTreeMap::new();
    for (name, base) in [("standard", Profile::Standard), ("lean", Profile::Lean)] {
        let profile = AgentProfile::build(
            config,
            name,
            None,
            base,
            longest_tool_call,
            denies_of(name),
            daemon_env,
        )?;
        profiles.insert(name.to_owned(), profile);
    }
    for (name, table) in &config.profiles {
        let profile = AgentProfile::build(
            config,
            name,
            Some(table),
            Profile::Standard,
            longest_tool_call,
            denies_of(name),
            daemon_env,
        )?;
        profiles.insert(name.clone(), profile);
    }
    let default = default_name(config);
    if let Some(profile) = profiles.get_mut(default) {
        profile.mark_default();
    }
    Ok(profiles)
}

/// The profile of threads that ask for none: `claude.profile`.
pub fn default_name(config: &Config) -> &'static str {
    match config.claude.profile {
        Profile::Standard => "standard",
        Profile::Lean => "lean",
    }
}
