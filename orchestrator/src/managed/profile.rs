//! An agent at one version, in an environment, is a profile made over the API: the same
//! `[profiles.NAME]` table an operator writes ([`ProfileConfig`]), built by the same machinery
//! (`launch::AgentProfile`, `approvals::policy::Policy`), made once under a name that says what
//! it is ([`profile_name`]), so each session's thread names its profile as any thread does.
//!
//! What maps to what:
//! - `model.id` → the profile's model; `system` → appended to the CLI's own system prompt (the
//!   CLI's tool instructions stay).
//! - The agent toolset's tools → the CLI's built-in tools (`bash` → `Bash`, …, `web_search` →
//!   `WebSearch`); a disabled tool is not given. `always_allow` → allowed without asking;
//!   `always_ask` → held for a person ([`crate::approvals`], `ask`), answered with a
//!   `user.tool_confirmation`.
//! - A custom tool → a tool of the MCP server `custom` ([`crate::mcp::client`]), which the
//!   model calls `mcp__custom__NAME`, allowed without asking: the call waits for the client's
//!   `user.custom_tool_result`.
//! - An MCP server (`{type: "url", name, url}`) → an HTTP MCP server of the profile
//!   ([`McpServerConfig`] with its `url`), whose tools the model calls `mcp__NAME__TOOL`; its
//!   `mcp_toolset` → the approvals as the agent toolset's: `always_allow` → allowed without
//!   asking (the whole server when it is the default, `mcp__NAME`; else the tool), `always_ask`
//!   → held for a person; a tool with `enabled: false` → the CLI's disallowed `mcp__NAME__TOOL`,
//!   a server whose default is disabled → not connected, and `mcp__NAME` disallowed. What the
//!   CLI cannot express is refused when the agent is made ([`check_mcp`]): one tool enabled of
//!   a server disabled by default, one tool asked of a server allowed by default (the rules
//!   allow by prefix; nothing excepts a tool from one).
//! - A `cloud` environment's networking → the walls' network: `unrestricted` → `open`, `limited`
//!   → `none` (the model gateway only). Walls allow ports, not hosts: `allowed_hosts`, MCP
//!   servers and package managers through a limited network are refused when the environment
//!   is made.
//! - What the daemon's configuration bounds (budgets, walls, the gateway, containment) bounds
//!   these profiles as any other: an MCP server's URL is reached only when the environment's
//!   walls let the CLI reach it.

use plugin_contract::ToolSpec;

use crate::approvals::policy::Policy;
use crate::config::ProfileConfig;
use crate::config::{ApprovalMode, ApprovalRule, ApprovalsConfig, Config, McpServerConfig};
use crate::config::{Network, RuleDecision};
use crate::mcp::schema::SchemaError;
use crate::mcp::ClientTools;
use crate::pool::Pool;

use super::error::ManagedError;
use super::params::McpToolConfigParam;
use super::params::{ToolConfigParam, ToolDefaultsParam};
use super::wire::{AgentBody, EnvironmentBody, EnvironmentConfig, Networking, PermissionPolicy};
use super::wire::{McpToolConfig, Tool, ToolConfig, ToolDefaults};

/// Most MCP servers an agent has (the API's bound).
pub const MCP_SERVERS: usize = 20;

/// The longest name of an agent's MCP server: `mcp__NAME__` leaves a tool's name at least 9 of
/// the Messages API's 64 characters.
pub const MCP_SERVER_NAME: usize = 48;

/// The agent toolset's tools: the API's name and the CLI's.
pub const TOOLSET: [(&str, &str); 8] = [
    ("bash", "Bash"),
    ("edit", "Edit"),
    ("read", "Read"),
    ("write", "Write"),
    ("glob", "Glob"),
    ("grep", "Grep"),
    ("web_fetch", "WebFetch"),
    ("web_search", "WebSearch"),
];

/// The name of the profile of `agent` at `version` in an environment of `network`.
pub fn profile_name(agent: &str, version: i64, network: Network) -> String {
    let network = match network {
        Network::None => "none",
        Network::Web => "web",
        Network::Open => "open",
    };
    format!("{agent}-v{version}-{network}")
}

/// The walls' network of an environment.
pub fn network_of(environment: &EnvironmentBody) -> Network {
    match &environment.config {
        EnvironmentConfig::Cloud {
            networking: Networking::Unrestricted {},
            ..
        } => Network::Open,
        EnvironmentConfig::Cloud {
            networking: Networking::Limited { .. },
            ..
        } => Network::None,
    }
}

/// Makes (once) the profile of `agent` at `version` in an environment of `network`, with its
/// approvals; its name.
pub fn make(
    pool: &Pool,
    approvals: &crate::approvals::Approvals,
    config: &Config,
    (agent_id, version, agent): (&str, i64, &AgentBody),
    network: Network,
) -> Result<String, ManagedError> {
    let name = profile_name(agent_id, version, network);
    let (table, allow) = table_of(agent, network);
    // The operator's deny rules hold for every agent.
    let mut rules: Vec<ApprovalRule> = (config.approvals.rules.iter())
        .filter(|rule| rule.decision == RuleDecision::Deny)
        .cloned()
        .collect();
    rules.extend(allow);
    let approvals_config = ApprovalsConfig {
        mode: ApprovalMode::Ask,
        rules,
        ..config.approvals.clone()
    };
    let policy = Policy::new(&approvals_config)
        .map_err(|err| ManagedError::invalid(format!("the agent's tools: {err}")))?;
    let client_tools = std::sync::Arc::new(client_tools(agent)?);
    pool.make_profile(&name, &table, &policy.cli_deny_rules(), client_tools)
        .map_err(|err| ManagedError::invalid(format!("the agent cannot run here: {err}")))?;
    approvals.add_policy(&name, policy);
    Ok(name)
}

/// The profile table of `agent` in an environment of `network`, and its approval rules.
fn table_of(agent: &AgentBody, network: Network) -> (ProfileConfig, Vec<ApprovalRule>) {
    let mut builtin = Vec::new();
    let mut allowed = Vec::new();
    for tool in &agent.tools {
        let Tool::Toolset { configs, .. } = tool else {
            continue;
        };
        for config in configs.iter().filter(|c| c.enabled) {
            let Some((_, cli)) = TOOLSET.iter().find(|(api, _)| *api == config.name) else {
                continue;
            };
            builtin.push(cli.to_string());
            if config.permission_policy == PermissionPolicy::AlwaysAllow {
                allowed.push(cli.to_string());
            }
        }
    }
    let mut rules: Vec<ApprovalRule> = allowed
        .iter()
        .map(|tool| ApprovalRule {
            tool: tool.clone(),
            decision: RuleDecision::Allow,
        })
        .collect();
    if agent.tools.iter().any(|t| matches!(t, Tool::Custom { .. })) {
        // The client's tools are the client's to run: nobody is asked first (the CLI names the
        // whole server; a rule of approvals, its tools).
        let server = format!("mcp__{}", crate::mcp::CLIENT_SERVER);
        rules.push(ApprovalRule {
            tool: format!("{server}__*"),
            decision: RuleDecision::Allow,
        });
        allowed.push(server);
    }
    let mut servers = std::collections::BTreeMap::new();
    let mut disallowed = Vec::new();
    for (name, default_config, configs) in toolsets(agent) {
        let server = format!("mcp__{name}");
        if !default_config.enabled {
            // Not connected, and named disallowed should another door give it.
            disallowed.push(server);
            continue;
        }
        let Some(spec) = agent.mcp_servers.iter().find(|s| &s.name == name) else {
            continue;
        };
        servers.insert(
            name.clone(),
            McpServerConfig {
                url: Some(spec.url.clone()),
                ..McpServerConfig::default()
            },
        );
        for config in configs {
            let tool = format!("{server}__{}", config.name);
            if !config.enabled {
                disallowed.push(tool);
            } else if config.permission_policy == PermissionPolicy::AlwaysAllow
                && default_config.permission_policy == PermissionPolicy::AlwaysAsk
            {
                rules.push(ApprovalRule {
                    tool: tool.clone(),
                    decision: RuleDecision::Allow,
                });
                allowed.push(tool);
            }
        }
        if default_config.permission_policy == PermissionPolicy::AlwaysAllow {
            rules.push(ApprovalRule {
                tool: format!("{server}__*"),
                decision: RuleDecision::Allow,
            });
            allowed.push(server);
        }
    }
    let mut table = ProfileConfig {
        description: agent.description.clone(),
        append_system_prompt: agent.system.clone(),
        builtin_tools: Some(builtin.join(",")),
        allowed_tools: Some(allowed),
        model: Some(agent.model.id.clone()),
        mcp_servers: servers,
        disallowed_tools: disallowed,
        ..ProfileConfig::default()
    };
    table.sandbox.network = Some(network);
    // A tool the agent asks for is asked, walls or not.
    table.sandbox.auto_allow = Some(false);
    (table, rules)
}

/// The agent's custom tools, compiled; why one cannot be served (its input schema not a JSON
/// Schema the Messages API takes, a name given twice).
pub fn client_tools(agent: &AgentBody) -> Result<ClientTools, ManagedError> {
    let specs = agent.tools.iter().filter_map(|tool| match tool {
        Tool::Custom {
            name,
            description,
            input_schema,
        } => Some(ToolSpec {
            name: name.clone(),
            description: description.clone(),
            input_schema: input_schema.clone(),
            output_schema: None,
            timeout: None,
        }),
        Tool::Toolset { .. } | Tool::McpToolset { .. } => None,
    });
    ClientTools::compile(specs).map_err(|err| {
        let message = match err {
            SchemaError::Duplicate { name, .. } => {
                format!("tools: the custom tool name `{name}` is given twice")
            }
            SchemaError::BadName { tool, reason, .. } => {
                format!("tools: the custom tool name `{tool}`: {reason}")
            }
            SchemaError::NameTooLong {
                tool, model_name, ..
            } => format!(
                "tools: the custom tool name `{tool}`: the model calls it `{model_name}`, over \
                 the Messages API's 64 characters (a name has at most 51)"
            ),
            other => {
                // Its display names the tool as a plugin's; the API names it by itself.
                let text = other.to_string();
                let said = text
                    .split_once("`: ")
                    .map_or(text.as_str(), |(_, rest)| rest);
                let tool = match &other {
                    SchemaError::InvalidSchema { tool, .. }
                    | SchemaError::NotApiSafe { tool, .. }
                    | SchemaError::Compile { tool, .. } => tool.as_str(),
                    _ => "",
                };
                format!(
                    "tools: the custom tool `{tool}`: its input_schema cannot be served: {said}"
                )
            }
        };
        ManagedError::invalid(message)
    })
}

/// The agent toolset as stored: every tool resolved from the request's defaults and configs
/// (the API's default: every tool enabled, run without asking).
pub fn resolve_toolset(defaults: Option<&ToolDefaultsParam>, given: &[ToolConfigParam]) -> Tool {
    let default_enabled = defaults.and_then(|d| d.enabled).unwrap_or(true);
    let default_policy = defaults
        .and_then(|d| d.permission_policy)
        .unwrap_or(PermissionPolicy::AlwaysAllow);
    let configs = TOOLSET
        .iter()
        .map(|(api, _)| {
            let own = given.iter().rev().find(|c| c.name.as_str() == *api);
            ToolConfig {
                name: (*api).to_owned(),
                kind: (*api).to_owned(),
                enabled: own.and_then(|c| c.enabled).unwrap_or(default_enabled),
                permission_policy: own
                    .and_then(|c| c.permission_policy)
                    .unwrap_or(default_policy),
            }
        })
        .collect();
    Tool::Toolset {
        default_config: ToolDefaults {
            enabled: default_enabled,
            permission_policy: default_policy,
        },
        configs,
    }
}

/// An MCP server's toolset as stored: its defaults resolved (the API's: enabled, `always_ask`)
/// and each configured tool resolved from them (the last config of a name wins).
pub fn resolve_mcp_toolset(
    server: &str,
    defaults: Option<&ToolDefaultsParam>,
    given: &[McpToolConfigParam],
) -> Tool {
    let default_config = ToolDefaults {
        enabled: defaults.and_then(|d| d.enabled).unwrap_or(true),
        permission_policy: defaults
            .and_then(|d| d.permission_policy)
            .unwrap_or(PermissionPolicy::AlwaysAsk),
    };
    let mut configs: Vec<McpToolConfig> = Vec::new();
    for config in given {
        let resolved = McpToolConfig {
            name: config.name.clone(),
            enabled: config.enabled.unwrap_or(default_config.enabled),
            permission_policy: (config.permission_policy)
                .unwrap_or(default_config.permission_policy),
        };
        match configs.iter_mut().find(|c| c.name == config.name) {
            Some(earlier) => *earlier = resolved,
            None => configs.push(resolved),
        }
    }
    Tool::McpToolset {
        mcp_server_name: server.to_owned(),
        default_config,
        configs,
    }
}

/// Why the agent's MCP servers and toolsets cannot be served: a bound of the API (at most 20
/// servers, names unique, a URL `http(s)://`, each server referenced by one `mcp_toolset`, none
/// naming an unknown server), a name the model could not call `mcp__NAME__TOOL` by, or what
/// the CLI cannot express (see the module's map).
pub fn check_mcp(agent: &AgentBody) -> Result<(), ManagedError> {
    let invalid = |message: String| Err(ManagedError::invalid(message));
    if agent.mcp_servers.len() > MCP_SERVERS {
        return invalid(format!("mcp_servers: at most {MCP_SERVERS}"));
    }
    for (i, server) in agent.mcp_servers.iter().enumerate() {
        let name = &server.name;
        let well_formed = !name.is_empty()
            && name.len() <= MCP_SERVER_NAME
            && (name.chars()).all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !name.contains("__")
            && !name.starts_with('_')
            && !name.ends_with('_');
        if !well_formed {
            return invalid(format!(
                "mcp_servers[{i}].name `{name}`: 1 to {MCP_SERVER_NAME} letters, digits, `-` or \
                 `_`, without `__` and not starting or ending in `_` (the model calls its tools \
                 mcp__NAME__TOOL)"
            ));
        }
        if name == crate::mcp::CLIENT_SERVER || name == crate::mcp::adapter::SERVER_NAME {
            return invalid(format!(
                "mcp_servers[{i}].name `{name}`: Harness's own server has that name"
            ));
        }
        if agent.mcp_servers[..i].iter().any(|s| &s.name == name) {
            return invalid(format!("mcp_servers: the name `{name}` is given twice"));
        }
        let parsed = reqwest::Url::parse(&server.url).ok();
        let web = parsed
            .as_ref()
            .is_some_and(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some());
        if !web {
            return invalid(format!(
                "mcp_servers[{i}].url: an http:// or https:// URL, not `{}`",
                server.url
            ));
        }
    }
    let mut referenced: Vec<&str> = Vec::new();
    for (name, default_config, configs) in toolsets(agent) {
        if !agent.mcp_servers.iter().any(|s| &s.name == name) {
            return invalid(format!(
                "tools: the mcp_toolset of `{name}` names no server of mcp_servers"
            ));
        }
        if referenced.contains(&name.as_str()) {
            return invalid(format!(
                "tools: the MCP server `{name}` has two mcp_toolsets; give it one"
            ));
        }
        referenced.push(name);
        for config in configs {
            let tool_name = &config.name;
            if tool_name.is_empty() || tool_name.chars().count() > 128 {
                return invalid(format!(
                    "tools: the mcp_toolset of `{name}`: a tool's name is 1 to 128 characters"
                ));
            }
            if config.enabled && !default_config.enabled {
                return invalid(format!(
                    "tools: the mcp_toolset of `{name}`: Harness cannot enable the tool \
                     `{tool_name}` of a server disabled by default; enable the default and \
                     disable the tools not wanted"
                ));
            }
            let asked = config.enabled && config.permission_policy == PermissionPolicy::AlwaysAsk;
            if asked && default_config.permission_policy == PermissionPolicy::AlwaysAllow {
                return invalid(format!(
                    "tools: the mcp_toolset of `{name}`: Harness cannot ask for the tool \
                     `{tool_name}` of a server allowed by default; make the default always_ask \
                     and allow the tools to run without asking"
                ));
            }
        }
    }
    if let Some(unused) =
        (agent.mcp_servers.iter()).find(|s| !referenced.contains(&s.name.as_str()))
    {
        return invalid(format!(
            "mcp_servers: the server `{}` is referenced by no mcp_toolset of tools",
            unused.name
        ));
    }
    Ok(())
}

/// Whether the agent asks before running the CLI tool `name` (`Bash`, …, or
/// `mcp__SERVER__TOOL` of one of its MCP servers).
pub fn asks(agent: &AgentBody, name: &str) -> bool {
    agent.tools.iter().any(|tool| match tool {
        Tool::Toolset { configs, .. } => configs.iter().any(|c| {
            c.permission_policy == PermissionPolicy::AlwaysAsk
                && TOOLSET
                    .iter()
                    .any(|(api, cli)| *api == c.name && *cli == name)
        }),
        Tool::McpToolset {
            mcp_server_name,
            default_config,
            configs,
        } => {
            let Some(tool) = (name.strip_prefix("mcp__"))
                .and_then(|rest| rest.strip_prefix(mcp_server_name.as_str()))
                .and_then(|rest| rest.strip_prefix("__"))
            else {
                return false;
            };
            let policy = match configs.iter().find(|c| c.name == tool) {
                Some(config) => config.permission_policy,
                None => default_config.permission_policy,
            };
            policy == PermissionPolicy::AlwaysAsk
        }
        Tool::Custom { .. } => false,
    })
}

/// The agent's `mcp_toolset`s: each server's name, its defaults and its tools' configs.
fn toolsets(
    agent: &AgentBody,
) -> impl Iterator<
    Item = (
        &String,
        &super::wire::ToolDefaults,
        &Vec<super::wire::McpToolConfig>,
    ),
> {
    agent.tools.iter().filter_map(|tool| match tool {
        Tool::McpToolset {
            mcp_server_name,
            default_config,
            configs,
        } => Some((mcp_server_name, default_config, configs)),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::managed::wire::ModelConfig;

    fn agent(tools: Vec<Tool>) -> AgentBody {
        AgentBody {
            name: "a".into(),
            description: None,
            system: None,
            model: ModelConfig {
                id: "m".into(),
                speed: None,
                effort: None,
            },
            tools,
            mcp_servers: Vec::new(),
            metadata: Default::default(),
        }
    }

    fn custom(name: &str, input_schema: serde_json::Value) -> Tool {
        Tool::Custom {
            name: name.into(),
            description: "d".into(),
            input_schema,
        }
    }

    #[test]
    fn custom_tools_are_served_on_their_own_server_without_asking() {
        let object = json!({"type": "object", "properties": {"city": {"type": "string"}}});
        let body = agent(vec![
            resolve_toolset(None, &[]),
            custom("get_weather", object),
        ]);
        let tools = client_tools(&body).expect("served");
        assert_eq!(tools.list().len(), 1);
        let (table, rules) = table_of(&body, Network::Open);
        let allowed = table.allowed_tools.unwrap_or_default();
        assert!(allowed.contains(&"mcp__custom".to_owned()), "{allowed:?}");
        let approvals = ApprovalsConfig {
            rules,
            ..ApprovalsConfig::default()
        };
        let policy = Policy::with_home(&approvals, None).expect("the rules parse");
        let verdict = policy.decide(
            "mcp__custom__get_weather",
            &json!({}),
            std::path::Path::new("/"),
        );
        assert!(
            matches!(verdict, crate::approvals::policy::Verdict::Allow { .. }),
            "{verdict:?}"
        );
        assert!(!asks(&body, "mcp__custom__get_weather"));
        let (table, _) = table_of(&agent(vec![resolve_toolset(None, &[])]), Network::Open);
        assert!(!table
            .allowed_tools
            .unwrap_or_default()
            .contains(&"mcp__custom".to_owned()));
    }

    #[test]
    fn a_custom_tool_that_cannot_be_served_is_refused_by_what_is_wrong() {
        let object = json!({"type": "object"});
        let cases = [
            (
                vec![custom("a", object.clone()), custom("a", object.clone())],
                "tools: the custom tool name `a` is given twice",
            ),
            (
                vec![custom(
                    "a",
                    json!({"type": "object", "properties": {"n": {"type": 5}}}),
                )],
                "tools: the custom tool `a`: its input_schema cannot be served: the input schema \
                 is not a valid JSON Schema",
            ),
            (
                vec![custom(&"x".repeat(52), object)],
                "over the Messages API's 64 characters",
            ),
        ];
        for (tools, expected) in cases {
            let err = client_tools(&agent(tools)).expect_err(expected);
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(err.message.contains(expected), "{}", err.message);
        }
    }

    fn server(name: &str, url: &str) -> crate::managed::wire::McpServer {
        crate::managed::wire::McpServer {
            kind: "url".into(),
            name: name.into(),
            url: url.into(),
        }
    }

    fn mcp_config(name: &str, enabled: Option<bool>, ask: Option<bool>) -> McpToolConfigParam {
        McpToolConfigParam {
            name: name.into(),
            enabled,
            permission_policy: ask.map(|ask| {
                if ask {
                    PermissionPolicy::AlwaysAsk
                } else {
                    PermissionPolicy::AlwaysAllow
                }
            }),
        }
    }

    fn defaults(enabled: Option<bool>, ask: Option<bool>) -> ToolDefaultsParam {
        let config = mcp_config("", enabled, ask);
        ToolDefaultsParam {
            enabled: config.enabled,
            permission_policy: config.permission_policy,
        }
    }

    fn verdict(rules: Vec<ApprovalRule>, tool: &str) -> crate::approvals::policy::Verdict {
        let approvals = ApprovalsConfig {
            rules,
            ..ApprovalsConfig::default()
        };
        let policy = Policy::with_home(&approvals, None).expect("the rules parse");
        policy.decide(tool, &json!({}), std::path::Path::new("/"))
    }

    #[test]
    fn an_mcp_toolset_resolves_to_the_apis_defaults() {
        let Tool::McpToolset {
            default_config,
            configs,
            ..
        } = resolve_mcp_toolset("peer", None, &[mcp_config("now", None, Some(false))])
        else {
            panic!("a toolset");
        };
        assert!(default_config.enabled);
        assert_eq!(
            default_config.permission_policy,
            PermissionPolicy::AlwaysAsk
        );
        assert_eq!(
            configs,
            [McpToolConfig {
                name: "now".into(),
                enabled: true,
                permission_policy: PermissionPolicy::AlwaysAllow
            }]
        );
    }

    #[test]
    fn an_mcp_server_allowed_by_default_is_an_http_server_run_without_asking() {
        let mut body = agent(vec![resolve_mcp_toolset(
            "peer",
            Some(&defaults(None, Some(false))),
            &[mcp_config("off", Some(false), None)],
        )]);
        body.mcp_servers = vec![server("peer", "http://127.0.0.1:9/mcp")];
        check_mcp(&body).expect("served");
        let (table, rules) = table_of(&body, Network::Open);
        let peer = &table.mcp_servers["peer"];
        assert_eq!(peer.url.as_deref(), Some("http://127.0.0.1:9/mcp"));
        assert!(table
            .allowed_tools
            .unwrap_or_default()
            .contains(&"mcp__peer".to_owned()));
        assert_eq!(table.disallowed_tools, ["mcp__peer__off"]);
        assert!(matches!(
            verdict(rules, "mcp__peer__now"),
            crate::approvals::policy::Verdict::Allow { .. }
        ));
        assert!(!asks(&body, "mcp__peer__now"));
    }

    #[test]
    fn an_mcp_server_asked_by_default_asks_but_for_the_tools_it_allows() {
        let mut body = agent(vec![resolve_mcp_toolset(
            "peer",
            None,
            &[mcp_config("ok", None, Some(false))],
        )]);
        body.mcp_servers = vec![server("peer", "https://example.com/mcp")];
        check_mcp(&body).expect("served");
        let (table, rules) = table_of(&body, Network::Open);
        let allowed = table.allowed_tools.unwrap_or_default();
        assert!(!allowed.contains(&"mcp__peer".to_owned()), "{allowed:?}");
        assert!(allowed.contains(&"mcp__peer__ok".to_owned()), "{allowed:?}");
        assert!(asks(&body, "mcp__peer__now"));
        assert!(!asks(&body, "mcp__peer__ok"));
        assert!(!asks(&body, "mcp__other__now"));
        assert!(matches!(
            verdict(rules.clone(), "mcp__peer__ok"),
            crate::approvals::policy::Verdict::Allow { .. }
        ));
        assert!(!matches!(
            verdict(rules, "mcp__peer__now"),
            crate::approvals::policy::Verdict::Allow { .. }
        ));
        // Disabled by default: not connected, the whole server disallowed.
        let mut body = agent(vec![resolve_mcp_toolset(
            "peer",
            Some(&defaults(Some(false), None)),
            &[],
        )]);
        body.mcp_servers = vec![server("peer", "https://example.com/mcp")];
        let (table, _) = table_of(&body, Network::Open);
        assert!(table.mcp_servers.is_empty());
        assert_eq!(table.disallowed_tools, ["mcp__peer"]);
    }

    #[test]
    fn mcp_servers_and_toolsets_that_cannot_be_served_are_refused_by_what_is_wrong() {
        let toolset = |name: &str| resolve_mcp_toolset(name, None, &[]);
        let url = "http://h/mcp";
        let cases = [
            (
                vec![server("a", url)],
                vec![],
                "`a` is referenced by no mcp_toolset",
            ),
            (vec![], vec![toolset("a")], "names no server of mcp_servers"),
            (
                vec![server("a", url)],
                vec![toolset("a"), toolset("a")],
                "has two mcp_toolsets",
            ),
            (
                vec![server("a", url), server("a", url)],
                vec![toolset("a")],
                "`a` is given twice",
            ),
            (
                vec![server("a", "ftp://h/")],
                vec![toolset("a")],
                "an http:// or https:// URL",
            ),
            (
                vec![server("a", "nope")],
                vec![toolset("a")],
                "an http:// or https:// URL",
            ),
            (
                vec![server("a__b", url)],
                vec![toolset("a__b")],
                "without `__`",
            ),
            (
                vec![server("a b", url)],
                vec![toolset("a b")],
                "letters, digits",
            ),
            (
                vec![server(&"x".repeat(49), url)],
                vec![toolset(&"x".repeat(49))],
                "1 to 48",
            ),
            (
                vec![server("custom", url)],
                vec![toolset("custom")],
                "Harness's own",
            ),
            (
                vec![server("a", url)],
                vec![resolve_mcp_toolset(
                    "a",
                    Some(&defaults(Some(false), None)),
                    &[mcp_config("t", Some(true), None)],
                )],
                "cannot enable the tool `t`",
            ),
            (
                vec![server("a", url)],
                vec![resolve_mcp_toolset(
                    "a",
                    Some(&defaults(None, Some(false))),
                    &[mcp_config("t", None, Some(true))],
                )],
                "cannot ask for the tool `t`",
            ),
        ];
        for (servers, tools, expected) in cases {
            let mut body = agent(tools);
            body.mcp_servers = servers;
            let err = check_mcp(&body).expect_err(expected);
            assert_eq!(err.status, axum::http::StatusCode::BAD_REQUEST);
            assert!(err.message.contains(expected), "{}", err.message);
        }
        let mut body = agent(vec![]);
        body.mcp_servers = (0..21).map(|i| server(&format!("s{i}"), url)).collect();
        assert!(check_mcp(&body).unwrap_err().message.contains("at most 20"));
    }
}
