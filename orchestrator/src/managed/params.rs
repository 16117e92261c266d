//! What clients send to make or change agents, environments and sessions, typed so that the
//! document states every bound the door checks (the SDKs' field names; what Harness does not
//! serve is stated as empty or `null`: `skills`, `multiagent`, `resources`,
//! `vault_ids`, packages, hosts).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::openapi::schema::{ArrayBuilder, ObjectBuilder, Schema, SchemaType, Type};
use utoipa::openapi::RefOr;
use utoipa::ToSchema;

use super::wire::PermissionPolicy;
use crate::api::doc::NOT_BLANK;

/// The API's bounds on metadata: at most 16 keys, each 1 to 64 characters, each value at most
/// 512.
pub const METADATA_KEYS: usize = 16;

/// A model: an id, or `{id, speed?, effort?}`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum ModelParam {
    Id(String),
    Config {
        #[schema(
            min_length = 1,
            max_length = 200,
            pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
        )]
        id: String,
        speed: Option<String>,
        #[schema(value_type = Option<Object>)]
        effort: Option<Value>,
    },
}

/// A built-in tool of the agent toolset, by the API's name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolName {
    Bash,
    Edit,
    Read,
    Write,
    Glob,
    Grep,
    WebFetch,
    WebSearch,
}

impl ToolName {
    pub fn as_str(self) -> &'static str {
        match self {
            ToolName::Bash => "bash",
            ToolName::Edit => "edit",
            ToolName::Read => "read",
            ToolName::Write => "write",
            ToolName::Glob => "glob",
            ToolName::Grep => "grep",
            ToolName::WebFetch => "web_fetch",
            ToolName::WebSearch => "web_search",
        }
    }
}

/// The defaults of the toolset's tools.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct ToolDefaultsParam {
    pub enabled: Option<bool>,
    pub permission_policy: Option<PermissionPolicy>,
}

/// One tool of the toolset, as a client sets it.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct ToolConfigParam {
    pub name: ToolName,
    pub enabled: Option<bool>,
    pub permission_policy: Option<PermissionPolicy>,
}

/// One tool of an MCP server, as a client sets it (by the server's name for it).
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct McpToolConfigParam {
    #[schema(min_length = 1, max_length = 128)]
    pub name: String,
    pub enabled: Option<bool>,
    pub permission_policy: Option<PermissionPolicy>,
}

/// An MCP server an agent connects to: `{type: "url", name, url}`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpServerParam {
    Url {
        /// Unique among the agent's servers; the model calls its tools `mcp__NAME__TOOL`, so
        /// letters, digits, `-` and `_` (no `__`, not at either end), at most 48, and neither
        /// `harness` nor `custom` (Harness's own servers).
        #[schema(
            pattern = r"^[a-zA-Z0-9-]+(_[a-zA-Z0-9-]+)*$",
            min_length = 1,
            max_length = 48
        )]
        name: String,
        /// `http://` or `https://`; reached from the session's walls (a `limited` environment
        /// reaches the model only).
        #[schema(min_length = 1, pattern = r"^[Hh][Tt][Tt][Pp][Ss]?://")]
        url: String,
    },
}

/// A tool of an agent: the agent toolset, an MCP server's tools, or a custom tool.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type")]
pub enum ToolParam {
    #[serde(rename = "agent_toolset_20260401")]
    Toolset {
        default_config: Option<ToolDefaultsParam>,
        configs: Option<Vec<ToolConfigParam>>,
    },
    /// The tools of the agent's MCP server `mcp_server_name` (each server has one):
    /// `default_config` (default: enabled, `always_ask`) and `configs` by tool name.
    #[serde(rename = "mcp_toolset")]
    McpToolset {
        #[schema(min_length = 1)]
        mcp_server_name: String,
        default_config: Option<ToolDefaultsParam>,
        configs: Option<Vec<McpToolConfigParam>>,
    },
    /// A tool the client runs: the model's call to it is an `agent.custom_tool_use`, and the
    /// session waits for the client's `user.custom_tool_result`. Each name once per agent; the
    /// model calls it `mcp__custom__NAME`, which the Messages API bounds to 64 characters (so a
    /// name has at most 51).
    #[serde(rename = "custom")]
    Custom {
        #[schema(pattern = r"^[a-zA-Z0-9_-]{1,64}$", min_length = 1, max_length = 51)]
        name: String,
        description: String,
        /// A JSON Schema (draft 2020-12) of the tool's input, `type: "object"`; the Messages
        /// API's rules for a tool's schema hold (no top-level `oneOf`, `anyOf` or `allOf`; a
        /// `$ref` only into `$defs`).
        #[schema(schema_with = input_schema)]
        input_schema: serde_json::Map<String, Value>,
    },
}

/// `POST /v1/agents`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateAgent {
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub name: String,
    #[schema(schema_with = model_schema)]
    pub model: ModelParam,
    pub description: Option<String>,
    #[schema(max_length = 100000)]
    pub system: Option<String>,
    #[schema(max_items = 128)]
    pub tools: Option<Vec<ToolParam>>,
    /// At most 20, names unique; each referenced by one `mcp_toolset` of `tools`.
    #[schema(max_items = 20)]
    pub mcp_servers: Option<Vec<McpServerParam>>,
    #[schema(schema_with = none_served)]
    pub skills: Option<Vec<Value>>,
    #[schema(schema_with = metadata_schema)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Taken and shown as `service_account`: a session runs as the daemon does.
    #[schema(value_type = Option<Object>)]
    pub execution_identity: Option<Value>,
    #[schema(schema_with = null_only)]
    pub multiagent: Option<Value>,
}

/// `POST /v1/agents/{id}`: a new version with what is given; `null` or `""` clears a field
/// that can be cleared; `metadata` is merged (a key set to `null` is removed).
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct UpdateAgent {
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub name: Option<String>,
    #[schema(schema_with = model_schema)]
    pub model: Option<ModelParam>,
    #[serde(default, deserialize_with = "crate::api::threads::present")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::api::threads::present")]
    #[schema(value_type = Option<String>, max_length = 100000)]
    pub system: Option<Option<String>>,
    #[serde(default, deserialize_with = "crate::api::threads::present")]
    #[schema(value_type = Option<Vec<ToolParam>>, max_items = 128)]
    pub tools: Option<Option<Vec<ToolParam>>>,
    /// Replaces the servers (`null` or `[]` clears them).
    #[serde(default, deserialize_with = "crate::api::threads::present")]
    #[schema(value_type = Option<Vec<McpServerParam>>, max_items = 20)]
    pub mcp_servers: Option<Option<Vec<McpServerParam>>>,
    #[schema(schema_with = none_served)]
    pub skills: Option<Vec<Value>>,
    #[schema(schema_with = metadata_patch_schema)]
    pub metadata: Option<BTreeMap<String, Option<String>>>,
    #[schema(value_type = Option<Object>)]
    pub execution_identity: Option<Value>,
    #[schema(schema_with = null_only)]
    pub multiagent: Option<Value>,
    /// The version this changes; another is refused (`409`).
    #[serde(default, deserialize_with = "integral")]
    #[schema(minimum = 1)]
    pub version: Option<i64>,
}

/// How an environment reaches the network: `unrestricted`, or `limited` to the model alone
/// (walls allow ports, not hosts).
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum NetworkingParam {
    Unrestricted {},
    Limited {
        #[schema(schema_with = none_served)]
        allowed_hosts: Option<Vec<String>>,
        #[schema(schema_with = never)]
        allow_mcp_servers: Option<bool>,
        #[schema(schema_with = never)]
        allow_package_managers: Option<bool>,
    },
}

/// Packages to install: Harness installs none.
#[derive(Clone, Debug, Default, Deserialize, ToSchema)]
pub struct PackagesParam {
    #[schema(schema_with = none_served)]
    pub apt: Option<Vec<String>>,
    #[schema(schema_with = none_served)]
    pub cargo: Option<Vec<String>>,
    #[schema(schema_with = none_served)]
    pub gem: Option<Vec<String>>,
    #[schema(schema_with = none_served)]
    pub go: Option<Vec<String>>,
    #[schema(schema_with = none_served)]
    pub npm: Option<Vec<String>>,
    #[schema(schema_with = none_served)]
    pub pip: Option<Vec<String>>,
}

/// An environment's configuration: `cloud`, Harness's walls.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ConfigParam {
    Cloud {
        networking: Option<NetworkingParam>,
        packages: Option<PackagesParam>,
    },
}

/// `POST /v1/environments`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateEnvironment {
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub name: String,
    pub description: Option<String>,
    pub config: Option<ConfigParam>,
    #[schema(schema_with = metadata_schema)]
    pub metadata: Option<BTreeMap<String, String>>,
    pub scope: Option<String>,
}

/// `POST /v1/environments/{id}`.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct UpdateEnvironment {
    #[schema(
        min_length = 1,
        max_length = 256,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub name: Option<String>,
    #[serde(default, deserialize_with = "crate::api::threads::present")]
    #[schema(value_type = Option<String>)]
    pub description: Option<Option<String>>,
    pub config: Option<ConfigParam>,
    #[schema(schema_with = metadata_patch_schema)]
    pub metadata: Option<BTreeMap<String, Option<String>>>,
    pub scope: Option<String>,
}

/// The agent a session runs: `agent_…` (its latest version), or `{type: "agent", id,
/// version?}`.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum AgentRef {
    Id(String),
    Pinned {
        #[serde(rename = "type")]
        kind: Option<AgentKind>,
        #[schema(min_length = 1)]
        id: String,
        #[serde(default, deserialize_with = "integral")]
        #[schema(minimum = 1)]
        version: Option<i64>,
    },
}

/// `agent`: the only kind of agent reference served (not `agent_with_overrides`).
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AgentKind {
    Agent,
}

/// A cost in USD: `{amount, currency: "USD"}`, the amount a decimal string or a number.
#[derive(Clone, Debug, Deserialize, ToSchema)]
pub struct Cost {
    #[schema(value_type = String, pattern = r"^[0-9]+(\.[0-9]+)?$")]
    pub amount: Amount,
    pub currency: Currency,
}

/// A decimal amount, as the API writes it (a string) or as a number.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum Amount {
    Text(String),
    Number(f64),
}

#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
pub enum Currency {
    #[serde(rename = "USD")]
    Usd,
}

/// The order of a list by creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Order {
    Asc,
    Desc,
}

/// What a stream previews (`event_deltas[]`): `agent.message`.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
pub enum Previewed {
    #[serde(rename = "agent.message")]
    AgentMessage,
}

/// The one order of a session's events: oldest first.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum OldestFirst {
    Asc,
}

/// A session's budget: a limit on its list cost.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum BudgetParam {
    Limit { max_list_cost: Cost },
}

/// `POST /v1/sessions`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CreateSession {
    pub agent: AgentRef,
    #[schema(min_length = 1)]
    pub environment_id: String,
    #[schema(
        min_length = 1,
        max_length = 200,
        pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]"
    )]
    pub title: Option<String>,
    #[schema(schema_with = metadata_schema)]
    pub metadata: Option<BTreeMap<String, String>>,
    /// Files put in the session's folder before it starts.
    #[schema(max_items = 100)]
    pub resources: Option<Vec<ResourceParam>>,
    #[schema(schema_with = none_served)]
    pub vault_ids: Option<Vec<String>>,
    pub budget: Option<BudgetParam>,
    /// Sent once the session is made, in order.
    pub initial_events: Option<Vec<super::events::EventParams>>,
}

/// What a session starts with: a file uploaded before (`POST /v1/files`), put in the session's
/// folder at `mount_path` (below the folder; default `/mnt/session/uploads/<file_id>`); or a git
/// repository under `workspaces.roots` (an absolute path or a `file://` URL), of which the
/// session works in a worktree of its own.
#[derive(Clone, Debug, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResourceParam {
    File {
        #[schema(min_length = 1)]
        file_id: String,
        #[schema(min_length = 1, pattern = r"^[^\x00]*$")]
        mount_path: Option<String>,
    },
    GithubRepository {
        #[schema(min_length = 1, pattern = r"^[^\x00]*$")]
        url: String,
        /// A branch or a commit the worktree starts from; default the repository's `HEAD`.
        checkout: Option<Checkout>,
        #[schema(min_length = 1, pattern = r"^[^\x00]*$")]
        mount_path: Option<String>,
        /// Refused: Harness clones nothing.
        authorization_token: Option<String>,
    },
}

/// Where a repository's worktree starts.
#[derive(Clone, Debug, Deserialize, Serialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Checkout {
    Branch {
        #[schema(min_length = 1, pattern = r"^[^\x00]*$")]
        name: String,
    },
    Commit {
        #[schema(min_length = 1, pattern = r"^[^\x00]*$")]
        sha: String,
    },
}

/// `POST /v1/sessions/{id}`: its title and metadata.
#[derive(Debug, Default, Deserialize, ToSchema)]
pub struct UpdateSession {
    #[serde(default, deserialize_with = "crate::api::threads::present")]
    #[schema(value_type = Option<String>, min_length = 1, max_length = 200, pattern = r"[^\t-\r \u0085\u00A0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]")]
    pub title: Option<Option<String>>,
    #[schema(schema_with = metadata_patch_schema)]
    pub metadata: Option<BTreeMap<String, Option<String>>>,
}

/// An integer, written as JSON Schema counts one: `3` or `3.0`.
pub fn integral<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: TryFrom<i64>,
{
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let whole = number.as_i64().or_else(|| {
        number
            .as_f64()
            .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
            .map(|f| f as i64)
    });
    whole
        .and_then(|n| T::try_from(n).ok())
        .map(Some)
        .ok_or_else(|| D::Error::custom(format!("{number} is not an integer in range")))
}

/// A model: an id of 1 to 200 characters, not blank, or `{id, speed?, effort?}` with one.
fn model_schema() -> RefOr<Schema> {
    use utoipa::openapi::schema::OneOfBuilder;
    let id = || {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .min_length(Some(1))
            .max_length(Some(200))
            .pattern(Some(NOT_BLANK))
    };
    let config = ObjectBuilder::new()
        .property("id", id())
        .required("id")
        .property(
            "speed",
            ObjectBuilder::new().schema_type(SchemaType::from_iter([Type::String, Type::Null])),
        )
        .property("effort", ObjectBuilder::new());
    let one_of = OneOfBuilder::new()
        .item(id())
        .item(config)
        .description(Some("A model id, or {id, speed?, effort?}."))
        .build();
    RefOr::T(Schema::OneOf(one_of))
}

/// A custom tool's input schema: `{type: "object", properties?, required?, …}`.
fn input_schema() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Object)
        .property(
            "type",
            ObjectBuilder::new()
                .schema_type(Type::String)
                .enum_values(Some(["object"])),
        )
        .required("type")
        .property(
            "properties",
            ObjectBuilder::new()
                .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
                .additional_properties(Some(ObjectBuilder::new().schema_type(Type::Object))),
        )
        .property(
            "required",
            ArrayBuilder::new()
                .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
                .items(ObjectBuilder::new().schema_type(Type::String)),
        )
        .description(Some(
            "A JSON Schema (draft 2020-12) of type object, checked against the meta-schema and \
             the Messages API's rules for a tool's schema.",
        ))
        .build()
        .into()
}

/// A list Harness does not serve: empty, or `null`.
fn none_served() -> RefOr<Schema> {
    ArrayBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Array, Type::Null]))
        .description(Some("Not served by Harness: empty or null."))
        .max_items(Some(0))
        .build()
        .into()
}

/// A field Harness does not serve: `null` (or absent).
fn null_only() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(Type::Null)
        .description(Some("Not served by Harness: null or absent."))
        .build()
        .into()
}

/// A flag Harness does not serve: `false`, or `null`.
fn never() -> RefOr<Schema> {
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Boolean, Type::Null]))
        .description(Some("Not served by Harness: false or null."))
        .enum_values(Some([Value::Bool(false), Value::Null]))
        .build()
        .into()
}

/// Metadata: at most 16 keys of 1 to 64 characters, each value at most 512.
fn metadata_schema() -> RefOr<Schema> {
    metadata_of(
        ObjectBuilder::new()
            .schema_type(Type::String)
            .max_length(Some(512)),
    )
}

/// A metadata patch: as [`metadata_schema`], a value `null` removing its key.
fn metadata_patch_schema() -> RefOr<Schema> {
    let value = ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::String, Type::Null]))
        .max_length(Some(512));
    metadata_of(value)
}

fn metadata_of(value: ObjectBuilder) -> RefOr<Schema> {
    let key = ObjectBuilder::new()
        .schema_type(Type::String)
        .min_length(Some(1))
        .max_length(Some(64));
    ObjectBuilder::new()
        .schema_type(SchemaType::from_iter([Type::Object, Type::Null]))
        .description(Some(
            "At most 16 keys of 1 to 64 characters, each value at most 512 characters.",
        ))
        .property_names(Some(key))
        .additional_properties(Some(value))
        .max_properties(Some(METADATA_KEYS))
        .build()
        .into()
}
