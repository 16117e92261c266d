//! `/v1/environments`: where a session runs. A `cloud` environment is Harness's own walls
//! (`profile::network_of`): `unrestricted` networking is the walls' `open`, `limited` without
//! hosts their `none` (the model gateway only). Walls allow ports, not hosts, and Harness
//! installs no packages: `allowed_hosts`, `allow_mcp_servers`, `allow_package_managers` and
//! packages are refused with a message that says so; `self_hosted` too.

use axum::extract::{Path, Query, State};
use axum::{Extension, Json};

use super::error::ManagedError;
use super::lists::{limit_of, list_rows, page_of, Body, ListQuery};
use super::params::{ConfigParam, CreateEnvironment, NetworkingParam, UpdateEnvironment};
use super::wire::{check_metadata, patch_metadata, Deleted, Environment, EnvironmentBody};
use super::wire::{EnvironmentConfig, Networking, Packages, Page};
use super::{ids, owner_of, sees, ManagedState, TAG};
use crate::caller::Caller;
use crate::store::{ManagedKind, ManagedRow, ManagedUpdate, NewManaged};

/// Creates an environment.
#[utoipa::path(post, path = "/environments", operation_id = "createEnvironment", tag = TAG,
    request_body = CreateEnvironment,
    responses((status = 200, description = "The environment.", body = Environment)))]
pub async fn create(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Body(params): Body<CreateEnvironment>,
) -> Result<Json<Environment>, ManagedError> {
    let empty = EnvironmentBody {
        name: params.name.clone(),
        description: None,
        config: config_of(None)?,
        metadata: Default::default(),
    };
    let change = UpdateEnvironment {
        name: Some(params.name),
        description: Some(params.description),
        config: params.config,
        metadata: params
            .metadata
            .map(|m| m.into_iter().map(|(k, v)| (k, Some(v))).collect()),
        scope: params.scope,
    };
    let body = changed(empty, change)?;
    let text =
        serde_json::to_string(&body).map_err(|err| ManagedError::invalid(err.to_string()))?;
    let id = ids::generate("env");
    let row = state
        .store
        .insert_managed(NewManaged {
            id: &id,
            kind: ManagedKind::Environment,
            owner: owner_of(&caller),
            body: &text,
        })
        .await?;
    Ok(Json(shown(&row)?))
}

/// An environment.
#[utoipa::path(get, path = "/environments/{environment_id}", operation_id = "getEnvironment", tag = TAG,
    params(("environment_id" = String, Path, description = "`env_…`")),
    responses((status = 200, description = "The environment.", body = Environment)))]
pub async fn retrieve(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Environment>, ManagedError> {
    Ok(Json(shown(&visible(&state, &caller, &id).await?)?))
}

/// Changes an environment; its sessions keep the walls they started with.
#[utoipa::path(post, path = "/environments/{environment_id}", operation_id = "updateEnvironment", tag = TAG,
    params(("environment_id" = String, Path, description = "`env_…`")),
    request_body = UpdateEnvironment,
    responses((status = 200, description = "The environment.", body = Environment)))]
pub async fn update(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Body(params): Body<UpdateEnvironment>,
) -> Result<Json<Environment>, ManagedError> {
    let row = visible(&state, &caller, &id).await?;
    let body = changed(body_of(&row)?, params)?;
    let text =
        serde_json::to_string(&body).map_err(|err| ManagedError::invalid(err.to_string()))?;
    match (state.store)
        .update_managed(ManagedKind::Environment, &id, None, &text)
        .await?
    {
        ManagedUpdate::Updated(row) | ManagedUpdate::Unchanged(row) => Ok(Json(shown(&row)?)),
        ManagedUpdate::Archived => Err(ManagedError::invalid(format!(
            "environment {id} is archived: it does not change"
        ))),
        ManagedUpdate::Conflict { .. } | ManagedUpdate::NotFound => Err(not_found(&id)),
    }
}

/// The caller's environments, newest first.
#[utoipa::path(get, path = "/environments", operation_id = "listEnvironments", tag = TAG,
    params(ListQuery),
    responses((status = 200, description = "A page of environments.", body = inline(Page<Environment>))))]
pub async fn list(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<ListQuery>,
) -> Result<Json<Page<Environment>>, ManagedError> {
    let rows = list_rows(&state, &caller, ManagedKind::Environment, &query).await?;
    let (rows, next_page) = page_of(rows, limit_of(query.limit)?);
    let data = rows.iter().map(shown).collect::<Result<_, _>>()?;
    Ok(Json(Page { data, next_page }))
}

/// Archives an environment: new sessions cannot use it.
#[utoipa::path(post, path = "/environments/{environment_id}/archive", operation_id = "archiveEnvironment", tag = TAG,
    params(("environment_id" = String, Path, description = "`env_…`")),
    responses((status = 200, description = "The environment, archived.", body = Environment)))]
pub async fn archive(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Environment>, ManagedError> {
    visible(&state, &caller, &id).await?;
    let row = (state.store)
        .archive_managed(ManagedKind::Environment, &id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(shown(&row)?))
}

/// Deletes an environment.
#[utoipa::path(delete, path = "/environments/{environment_id}", operation_id = "deleteEnvironment", tag = TAG,
    params(("environment_id" = String, Path, description = "`env_…`")),
    responses((status = 200, description = "Deleted.", body = Deleted)))]
pub async fn delete(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<Deleted>, ManagedError> {
    visible(&state, &caller, &id).await?;
    if !(state.store)
        .delete_managed(ManagedKind::Environment, &id)
        .await?
    {
        return Err(not_found(&id));
    }
    Ok(Json(Deleted {
        id,
        kind: "environment_deleted",
    }))
}

/// The environment `id` when `caller` sees it; else what one that does not exist gets.
pub async fn visible(
    state: &ManagedState,
    caller: &Caller,
    id: &str,
) -> Result<ManagedRow, ManagedError> {
    (state.store)
        .managed(ManagedKind::Environment, id, None)
        .await?
        .filter(|row| sees(caller, &row.owner))
        .ok_or_else(|| not_found(id))
}

fn not_found(id: &str) -> ManagedError {
    ManagedError::not_found(format!("environment {id} not found"))
}

/// The stored body of an environment row.
pub fn body_of(row: &ManagedRow) -> Result<EnvironmentBody, ManagedError> {
    super::error::stored(&row.body, format_args!("environment {}", row.id))
}

fn shown(row: &ManagedRow) -> Result<Environment, ManagedError> {
    let body = body_of(row)?;
    Ok(Environment {
        kind: "environment",
        id: row.id.clone(),
        name: body.name,
        description: body.description,
        config: body.config,
        metadata: body.metadata,
        created_at: row.created_at,
        updated_at: row.updated_at,
        archived_at: row.archived_at,
    })
}

/// `body` with what `params` sets; checked against what the walls can hold.
fn changed(
    mut body: EnvironmentBody,
    params: UpdateEnvironment,
) -> Result<EnvironmentBody, ManagedError> {
    if let Some(name) = params.name {
        body.name = name;
    }
    if body.name.trim().is_empty() || body.name.chars().count() > 256 {
        return Err(ManagedError::invalid(
            "name: 1 to 256 characters, not blank",
        ));
    }
    if let Some(description) = params.description {
        body.description = description.filter(|d| !d.is_empty());
    }
    if let Some(config) = params.config {
        body.config = config_of(Some(config))?;
    }
    if let Some(patch) = params.metadata {
        patch_metadata(&mut body.metadata, patch).map_err(ManagedError::invalid)?;
    }
    check_metadata(&body.metadata).map_err(ManagedError::invalid)?;
    Ok(body)
}

/// A request's `config` (`None`: the default, unrestricted): `cloud`, with what the walls can
/// hold.
fn config_of(config: Option<ConfigParam>) -> Result<EnvironmentConfig, ManagedError> {
    let (networking, packages) = match config {
        Some(ConfigParam::Cloud {
            networking,
            packages,
        }) => (networking, packages.unwrap_or_default()),
        None => (None, Default::default()),
    };
    let networking = match networking {
        None | Some(NetworkingParam::Unrestricted {}) => Networking::Unrestricted {},
        Some(NetworkingParam::Limited {
            allowed_hosts,
            allow_mcp_servers,
            allow_package_managers,
        }) => {
            let hosts = allowed_hosts.unwrap_or_default();
            if !hosts.is_empty()
                || allow_mcp_servers == Some(true)
                || allow_package_managers == Some(true)
            {
                return Err(ManagedError::invalid(
                    "config.networking: Harness's walls allow ports, not hosts: a limited \
                     network reaches the model only (no allowed_hosts, MCP servers or package \
                     managers); use unrestricted for more",
                ));
            }
            Networking::Limited {
                allowed_hosts: Vec::new(),
                allow_mcp_servers: false,
                allow_package_managers: false,
            }
        }
    };
    let lists = [
        &packages.apt,
        &packages.cargo,
        &packages.gem,
        &packages.go,
        &packages.npm,
        &packages.pip,
    ];
    if lists
        .iter()
        .any(|list| list.as_ref().is_some_and(|l| !l.is_empty()))
    {
        return Err(ManagedError::invalid(
            "config.packages: Harness installs no packages into a session; give the host what \
             its threads need",
        ));
    }
    Ok(EnvironmentConfig::Cloud {
        networking,
        packages: Packages {
            kind: "packages".into(),
            ..Packages::default()
        },
    })
}
