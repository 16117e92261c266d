//! The API's objects as the SDKs read and send them: agents, environments, sessions, pages and
//! what creates or changes each. Field names, optionality and `type` tags follow the SDKs
//! (`anthropic` 2.10.0, `@anthropic-ai/sdk` 1.10.0): a field they require is always present,
//! `null` when empty.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;

/// A page of a list: the SDKs ask for the next one with `page=<next_page>` while it is not null.
#[derive(Debug, Serialize, ToSchema)]
pub struct Page<T> {
    pub data: Vec<T>,
    pub next_page: Option<String>,
}

/// A page of sessions, which can also be walked back.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionPage {
    pub data: Vec<Session>,
    pub next_page: Option<String>,
    pub prev_page: Option<String>,
}

/// The model of an agent: `{id}`, as a bare string in a request.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelConfig {
    pub id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speed: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub effort: Option<Value>,
}

/// A permission policy: `always_allow` or `always_ask`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum PermissionPolicy {
    AlwaysAllow,
    AlwaysAsk,
}

/// One built-in tool of the agent toolset, resolved.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolConfig {
    pub name: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub enabled: bool,
    pub permission_policy: PermissionPolicy,
}

/// The defaults of the agent toolset's tools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolDefaults {
    pub enabled: bool,
    pub permission_policy: PermissionPolicy,
}

/// A tool of an agent, as the API shows it: the agent toolset with every field resolved, or a
/// custom tool (one the client runs) as given.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type")]
pub enum Tool {
    #[serde(rename = "agent_toolset_20260401")]
    Toolset {
        default_config: ToolDefaults,
        configs: Vec<ToolConfig>,
    },
    /// The tools of the agent's MCP server `mcp_server_name`: its defaults resolved (the API's:
    /// enabled, `always_ask`), and the tools configured by name, each resolved.
    #[serde(rename = "mcp_toolset")]
    McpToolset {
        mcp_server_name: String,
        default_config: ToolDefaults,
        configs: Vec<McpToolConfig>,
    },
    #[serde(rename = "custom")]
    Custom {
        name: String,
        description: String,
        #[schema(value_type = Object)]
        input_schema: Value,
    },
}

/// An MCP server an agent connects to, over HTTP: `{type: "url", name, url}`. Its tools are
/// the model's `mcp__NAME__TOOL`, as the agent's `mcp_toolset` for it configures them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpServer {
    /// Always `url`.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: String,
    pub name: String,
    pub url: String,
}

/// One tool of an MCP server, resolved from its toolset's defaults.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct McpToolConfig {
    pub name: String,
    pub enabled: bool,
    pub permission_policy: PermissionPolicy,
}

/// An agent at one version.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Agent {
    /// Always `agent`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub name: String,
    pub version: i64,
    pub description: Option<String>,
    pub system: Option<String>,
    pub model: ModelConfig,
    pub tools: Vec<Tool>,
    pub mcp_servers: Vec<McpServer>,
    #[schema(value_type = Vec<Object>)]
    pub skills: Vec<Value>,
    pub metadata: BTreeMap<String, String>,
    #[schema(value_type = Object)]
    pub execution_identity: Value,
    /// Agents that work together: not served (`null`).
    #[schema(value_type = Option<Object>)]
    pub multiagent: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

/// What an agent is made of, as stored (`managed_objects.body`): everything but its id, version
/// and times.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgentBody {
    pub name: String,
    pub description: Option<String>,
    pub system: Option<String>,
    pub model: ModelConfig,
    pub tools: Vec<Tool>,
    /// Absent in what was stored before agents had MCP servers.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
    pub metadata: BTreeMap<String, String>,
}

/// How an environment's sessions reach the network.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Networking {
    Unrestricted {},
    Limited {
        #[serde(default)]
        allowed_hosts: Vec<String>,
        #[serde(default)]
        allow_mcp_servers: bool,
        #[serde(default)]
        allow_package_managers: bool,
    },
}

/// Packages installed in an environment's sessions (Harness installs none: every list must be
/// empty).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Packages {
    #[serde(rename = "type", default = "packages")]
    pub kind: String,
    #[serde(default)]
    pub apt: Vec<String>,
    #[serde(default)]
    pub cargo: Vec<String>,
    #[serde(default)]
    pub gem: Vec<String>,
    #[serde(default)]
    pub go: Vec<String>,
    #[serde(default)]
    pub npm: Vec<String>,
    #[serde(default)]
    pub pip: Vec<String>,
}

fn packages() -> String {
    "packages".into()
}

/// An environment's configuration: `cloud`, Harness's own walls.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EnvironmentConfig {
    Cloud {
        networking: Networking,
        packages: Packages,
    },
}

/// An environment.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Environment {
    /// Always `environment`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub config: EnvironmentConfig,
    pub metadata: BTreeMap<String, String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

/// What an environment is made of, as stored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentBody {
    pub name: String,
    pub description: Option<String>,
    pub config: EnvironmentConfig,
    pub metadata: BTreeMap<String, String>,
}

/// `{id, type}`: what a delete answers.
#[derive(Debug, Serialize, ToSchema)]
pub struct Deleted {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

/// The agent a session runs: the agent at its pinned version.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct SessionAgent {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub version: i64,
    pub name: String,
    pub description: Option<String>,
    pub system: Option<String>,
    pub model: ModelConfig,
    pub tools: Vec<Tool>,
    pub mcp_servers: Vec<McpServer>,
    #[schema(value_type = Vec<Object>)]
    pub skills: Vec<Value>,
    #[schema(value_type = Object)]
    pub execution_identity: Value,
}

/// A session's token counts and cost.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct SessionUsage {
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cache_read_input_tokens: Option<i64>,
    #[schema(value_type = Option<Object>)]
    pub list_cost: Option<Value>,
}

/// How long a session has run.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct SessionStats {
    pub active_seconds: Option<f64>,
    pub duration_seconds: Option<f64>,
}

/// A session: a thread, with the agent it runs and the environment it runs in.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct Session {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    /// `idle`, `running` or `terminated`.
    pub status: &'static str,
    pub agent: SessionAgent,
    pub environment_id: String,
    pub title: Option<String>,
    pub metadata: BTreeMap<String, String>,
    #[schema(value_type = Vec<Object>)]
    pub resources: Vec<Value>,
    /// Each outcome set on the session (a goal, `crate::goals`), oldest first.
    pub outcome_evaluations: Vec<OutcomeEvaluation>,
    pub stats: SessionStats,
    pub usage: SessionUsage,
    pub vault_ids: Vec<String>,
    /// Its budget, `{type: "limit", max_list_cost}`; `null`: none of its own.
    #[schema(value_type = Option<Object>)]
    pub budget: Option<Value>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub archived_at: Option<DateTime<Utc>>,
}

/// What a session keeps beside its thread (`managed_sessions.body`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SessionBody {
    pub metadata: BTreeMap<String, String>,
    #[serde(default)]
    pub resources: Vec<Value>,
    /// The walls' network of its environment when it was made (its profile's).
    #[serde(default = "open")]
    pub network: crate::config::Network,
}

fn open() -> crate::config::Network {
    crate::config::Network::Open
}

/// Applies a metadata patch: a key set to `null` is removed. At most 16 keys, each up to 64
/// characters, each value up to 512.
pub fn patch_metadata(
    stored: &mut BTreeMap<String, String>,
    patch: BTreeMap<String, Option<String>>,
) -> Result<(), String> {
    for (key, value) in patch {
        match value {
            Some(value) => stored.insert(key, value),
            None => stored.remove(&key),
        };
    }
    check_metadata(stored)
}

/// The API's bounds on metadata.
pub fn check_metadata(metadata: &BTreeMap<String, String>) -> Result<(), String> {
    if metadata.len() > super::params::METADATA_KEYS {
        return Err("metadata: at most 16 keys".into());
    }
    for (key, value) in metadata {
        if key.is_empty() || key.chars().count() > 64 {
            return Err(format!("metadata: key {key:?} is not 1 to 64 characters"));
        }
        if value.chars().count() > 512 {
            return Err(format!("metadata.{key}: a value is at most 512 characters"));
        }
    }
    Ok(())
}

/// An outcome of a session: where its goal is (`crate::goals`).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct OutcomeEvaluation {
    /// `outcome_evaluation`.
    #[serde(rename = "type")]
    #[schema(value_type = String)]
    pub kind: &'static str,
    pub outcome_id: String,
    pub description: String,
    /// The last iteration, from 0.
    pub iteration: i64,
    /// `running` while it is worked on, `evaluating` while it is graded, then `satisfied`,
    /// `max_iterations_reached`, `failed` or `interrupted`.
    pub result: String,
    /// The grader's last explanation.
    pub explanation: Option<String>,
    pub completed_at: Option<DateTime<Utc>>,
}

impl OutcomeEvaluation {
    pub fn of(goal: crate::store::GoalRow) -> OutcomeEvaluation {
        let result = match (goal.finished_at, goal.state.as_str()) {
            (Some(_), _) => goal.state,
            (None, "grading") => "evaluating".to_owned(),
            (None, _) => "running".to_owned(),
        };
        OutcomeEvaluation {
            kind: "outcome_evaluation",
            outcome_id: goal.id,
            description: goal.description,
            iteration: goal.iteration,
            result,
            explanation: goal.explanation,
            completed_at: goal.finished_at,
        }
    }
}
