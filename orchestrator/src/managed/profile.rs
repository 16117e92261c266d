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
//! - A `cloud` environment's networking → the walls' network: `unrestricted` → `open`, `limited`
//!   → `none` (the model gateway only). Walls allow ports, not hosts: `allowed_hosts`, MCP
//!   servers and package managers through a limited network are refused when the environment
//!   is made.
//! - What the daemon's configuration bounds (budgets, walls, the gateway, containment) bounds
//!   these profiles as any other.

use plugin_contract::ToolSpec;

use crate::approvals::policy::Policy;
use crate::config::{ApprovalMode, ApprovalRule, ApprovalsConfig, Config, ProfileConfig};
use crate::config::{Network, RuleDecision};
use crate::mcp::schema::SchemaError;
use crate::mcp::ClientTools;
use crate::pool::Pool;

use super::error::ManagedError;
use super::params::{ToolConfigParam, ToolDefaultsParam};
use super::wire::{AgentBody, EnvironmentBody, EnvironmentConfig, Networking, PermissionPolicy};
use super::wire::{Tool, ToolConfig, ToolDefaults};

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
    let mut table = ProfileConfig {
        description: agent.description.clone(),
        append_system_prompt: agent.system.clone(),
        builtin_tools: Some(builtin.join(",")),
        allowed_tools: Some(allowed),
        model: Some(agent.model.id.clone()),
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
        Tool::Toolset { .. } => None,
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

/// Whether the agent asks before running the CLI tool `name` (`Bash`, …).
pub fn asks(agent: &AgentBody, name: &str) -> bool {
    agent.tools.iter().any(|tool| {
        let Tool::Toolset { configs, .. } = tool else {
            return false;
        };
        configs.iter().any(|c| {
            c.permission_policy == PermissionPolicy::AlwaysAsk
                && TOOLSET
                    .iter()
                    .any(|(api, cli)| *api == c.name && *cli == name)
        })
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
}
