//! `/v1/agents`: agents as data, versioned. Each change makes a new version; a session runs on
//! the version it pinned. The agent toolset and custom tools are served (a custom tool's input
//! schema checked as a plugin tool's is, [`profile::client_tools`]), and so are MCP servers with
//! their `mcp_toolset`s ([`profile::check_mcp`]); skills are refused with a message that says so.

use axum::extract::{Path, Query, State};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::Value;

use super::error::ManagedError;
use super::lists::{limit_of, list_rows, page_of, Body, ListQuery};
use super::params::{CreateAgent, McpServerParam, ModelParam, ToolParam, UpdateAgent};
use super::wire::{check_metadata, patch_metadata, Agent, AgentBody, McpServer, ModelConfig};
use super::wire::{Page, Tool};
use super::{ids, owner_of, profile, sees, ManagedState, TAG};
use crate::caller::Caller;
use crate::store::{ManagedKind, ManagedRow, ManagedUpdate, NewManaged};

/// Creates an agent at version 1.
#[utoipa::path(post, path = "/agents", operation_id = "createAgent", tag = TAG,
    request_body = CreateAgent,
    responses((status = 200, description = "The agent.", body = Agent)))]
pub async fn create(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Body(params): Body<CreateAgent>,
) -> Result<Json<Agent>, ManagedError> {
    let body = new_body(params)?;
    let text =
        serde_json::to_string(&body).map_err(|err| ManagedError::invalid(err.to_string()))?;
    let id = ids::generate("agent");
    let row = state
        .store
        .insert_managed(NewManaged {
            id: &id,
            kind: ManagedKind::Agent,
            owner: owner_of(&caller),
            body: &text,
        })
        .await?;
    Ok(Json(shown(&row)?))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionQuery {
    /// That version; default the latest.
    pub version: Option<i64>,
}

/// An agent: its latest version, or `version`.
#[utoipa::path(get, path = "/agents/{agent_id}", operation_id = "getAgent", tag = TAG,
    params(("agent_id" = String, Path, description = "`agent_…`"), VersionQuery),
    responses((status = 200, description = "The agent.", body = Agent)))]
pub async fn retrieve(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(query): Query<VersionQuery>,
) -> Result<Json<Agent>, ManagedError> {
    let row = visible(&state, &caller, &id, query.version).await?;
    Ok(Json(shown(&row)?))
}

/// Changes an agent: a new version (`version`, when given, must be the latest).
#[utoipa::path(post, path = "/agents/{agent_id}", operation_id = "updateAgent", tag = TAG,
    params(("agent_id" = String, Path, description = "`agent_…`")),
    request_body = UpdateAgent,
    responses((status = 200, description = "The agent at its new version.", body = Agent)))]
pub async fn update(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(params): Body<UpdateAgent>,
) -> Result<Json<Agent>, ManagedError> {
    let row = visible(&state, &caller, &id, None).await?;
    let expected = params.version;
    let body = changed_body(body_of(&row)?, params)?;
    let text =
        serde_json::to_string(&body).map_err(|err| ManagedError::invalid(err.to_string()))?;
    let update = state
        .store
        .update_managed(ManagedKind::Agent, &id, expected, &text)
        .await?;
    match update {
        ManagedUpdate::Updated(row) | ManagedUpdate::Unchanged(row) => Ok(Json(shown(&row)?)),
        ManagedUpdate::Conflict { current } => Err(ManagedError::conflict(format!(
            "agent {id} is at version {current}, not {}",
            expected.unwrap_or_default()
        ))),
        ManagedUpdate::Archived => Err(ManagedError::invalid(format!(
            "agent {id} is archived: it does not change"
        ))),
        ManagedUpdate::NotFound => Err(not_found(&id)),
    }
}

/// The caller's agents, newest first.
#[utoipa::path(get, path = "/agents", operation_id = "listAgents", tag = TAG,
    params(ListQuery),
    responses((status = 200, description = "A page of agents.", body = inline(Page<Agent>))))]
pub async fn list(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Agent>>, ManagedError> {
    let rows = list_rows(&state, &caller, ManagedKind::Agent, &query).await?;
    let limit = limit_of(query.limit)?;
    let (rows, next_page) = page_of(rows, limit);
    let data = rows.iter().map(shown).collect::<Result<_, _>>()?;
    Ok(Json(Page { data, next_page }))
}

/// Archives an agent: new sessions cannot use it; its sessions go on.
#[utoipa::path(post, path = "/agents/{agent_id}/archive", operation_id = "archiveAgent", tag = TAG,
    params(("agent_id" = String, Path, description = "`agent_…`")),
    responses((status = 200, description = "The agent, archived.", body = Agent)))]
pub async fn archive(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Agent>, ManagedError> {
    visible(&state, &caller, &id, None).await?;
    let row = state
        .store
        .archive_managed(ManagedKind::Agent, &id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(shown(&row)?))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct VersionsQuery {
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    pub page: Option<String>,
}

/// An agent's versions, newest first.
#[utoipa::path(get, path = "/agents/{agent_id}/versions", operation_id = "listAgentVersions", tag = TAG,
    params(("agent_id" = String, Path, description = "`agent_…`"), VersionsQuery),
    responses((status = 200, description = "A page of versions.", body = inline(Page<Agent>))))]
pub async fn versions(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(query): Query<VersionsQuery>,
) -> Result<Json<Page<Agent>>, ManagedError> {
    visible(&state, &caller, &id, None).await?;
    let limit = limit_of(query.limit)?;
    let before = match &query.page {
        Some(page) => Some(
            ids::parse_version(page)
                .ok_or_else(|| ManagedError::invalid("page: not a cursor this list gave"))?,
        ),
        None => None,
    };
    let mut rows = state.store.agent_versions(&id, before, limit + 1).await?;
    let more = rows.len() > usize::try_from(limit).unwrap_or(usize::MAX);
    rows.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_page = more
        .then(|| rows.last().map(|row| ids::before_version(row.version)))
        .flatten();
    let data = rows.iter().map(shown).collect::<Result<_, _>>()?;
    Ok(Json(Page { data, next_page }))
}

/// The agent `id` (at `version`) when `caller` sees it; else what one that does not exist gets.
pub async fn visible(
    state: &ManagedState,
    caller: &Caller,
    id: &str,
    version: Option<i64>,
) -> Result<ManagedRow, ManagedError> {
    state
        .store
        .managed(ManagedKind::Agent, id, version)
        .await?
        .filter(|row| sees(caller, &row.owner))
        .ok_or_else(|| match version {
            Some(v) => ManagedError::not_found(format!("agent {id} has no version {v}")),
            None => not_found(id),
        })
}

fn not_found(id: &str) -> ManagedError {
    ManagedError::not_found(format!("agent {id} not found"))
}

/// The stored body of an agent row.
pub fn body_of(row: &ManagedRow) -> Result<AgentBody, ManagedError> {
    super::error::stored(&row.body, format_args!("agent {}", row.id))
}

/// An agent row as the API shows it.
pub fn shown(row: &ManagedRow) -> Result<Agent, ManagedError> {
    let body = body_of(row)?;
    Ok(Agent {
        kind: "agent",
        id: row.id.clone(),
        name: body.name,
        version: row.version,
        description: body.description,
        system: body.system,
        model: body.model,
        tools: body.tools,
        mcp_servers: body.mcp_servers,
        skills: Vec::new(),
        metadata: body.metadata,
        execution_identity: serde_json::json!({"type": "service_account"}),
        multiagent: None,
        created_at: row.created_at,
        updated_at: row.updated_at,
        archived_at: row.archived_at,
    })
}

/// A new agent's body from its request.
fn new_body(params: CreateAgent) -> Result<AgentBody, ManagedError> {
    let empty = AgentBody {
        name: params.name.clone(),
        description: None,
        system: None,
        model: model_of(&params.model)?,
        tools: Vec::new(),
        mcp_servers: Vec::new(),
        metadata: Default::default(),
    };
    let change = UpdateAgent {
        name: Some(params.name),
        model: None,
        description: Some(params.description),
        system: Some(params.system),
        tools: Some(params.tools),
        mcp_servers: Some(params.mcp_servers),
        skills: params.skills,
        metadata: params
            .metadata
            .map(|m| m.into_iter().map(|(k, v)| (k, Some(v))).collect()),
        execution_identity: params.execution_identity,
        multiagent: params.multiagent,
        version: None,
    };
    changed_body(empty, change)
}

/// `body` with what `params` sets; checked.
fn changed_body(mut body: AgentBody, params: UpdateAgent) -> Result<AgentBody, ManagedError> {
    refuse_unserved(&params)?;
    if let Some(name) = params.name {
        body.name = name;
    }
    if body.name.trim().is_empty() || body.name.chars().count() > 256 {
        return Err(ManagedError::invalid(
            "name: 1 to 256 characters, not blank",
        ));
    }
    if let Some(model) = &params.model {
        body.model = model_of(model)?;
    }
    if let Some(description) = params.description {
        body.description = description.filter(|d| !d.is_empty());
    }
    if let Some(system) = params.system {
        body.system = system.filter(|s| !s.is_empty());
    }
    if body
        .system
        .as_ref()
        .is_some_and(|s| s.chars().count() > 100_000)
    {
        return Err(ManagedError::invalid("system: at most 100,000 characters"));
    }
    if let Some(tools) = params.tools {
        body.tools = tools.unwrap_or_default().iter().map(tool_of).collect();
        // A custom tool its sessions could not serve is refused now, not at a session's start.
        profile::client_tools(&body)?;
    }
    if let Some(servers) = params.mcp_servers {
        body.mcp_servers = (servers.unwrap_or_default().into_iter())
            .map(|McpServerParam::Url { name, url }| McpServer {
                kind: "url".into(),
                name,
                url,
            })
            .collect();
    }
    profile::check_mcp(&body)?;
    if let Some(patch) = params.metadata {
        patch_metadata(&mut body.metadata, patch).map_err(ManagedError::invalid)?;
    }
    check_metadata(&body.metadata).map_err(ManagedError::invalid)?;
    Ok(body)
}

/// What Harness does not serve yet, refused by name rather than dropped.
fn refuse_unserved(params: &UpdateAgent) -> Result<(), ManagedError> {
    let given = |list: &Option<Vec<Value>>| list.as_ref().is_some_and(|l| !l.is_empty());
    if given(&params.skills) {
        return Err(ManagedError::invalid(
            "skills: not supported by Harness's Managed Agents API; a profile's plugin_dirs \
             carry skills",
        ));
    }
    if params.multiagent.as_ref().is_some_and(|m| !m.is_null()) {
        return Err(ManagedError::invalid(
            "multiagent: not supported by Harness's Managed Agents API",
        ));
    }
    Ok(())
}

/// A request's model.
fn model_of(model: &ModelParam) -> Result<ModelConfig, ManagedError> {
    let model = match model {
        ModelParam::Id(id) => ModelConfig {
            id: id.clone(),
            speed: None,
            effort: None,
        },
        ModelParam::Config { id, speed, effort } => ModelConfig {
            id: id.clone(),
            speed: speed.clone(),
            effort: effort.clone(),
        },
    };
    if model.id.trim().is_empty() || model.id.chars().count() > 200 {
        return Err(ManagedError::invalid("model: an id of 1 to 200 characters"));
    }
    Ok(model)
}

/// A request's tool, resolved.
fn tool_of(tool: &ToolParam) -> Tool {
    match tool {
        ToolParam::Toolset {
            default_config,
            configs,
        } => profile::resolve_toolset(
            default_config.as_ref(),
            configs.as_deref().unwrap_or_default(),
        ),
        ToolParam::McpToolset {
            mcp_server_name,
            default_config,
            configs,
        } => profile::resolve_mcp_toolset(
            mcp_server_name,
            default_config.as_ref(),
            configs.as_deref().unwrap_or_default(),
        ),
        ToolParam::Custom {
            name,
            description,
            input_schema,
        } => Tool::Custom {
            name: name.clone(),
            description: description.clone(),
            input_schema: Value::Object(input_schema.clone()),
        },
    }
}
