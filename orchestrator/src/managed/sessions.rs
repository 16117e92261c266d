//! `/v1/sessions`: a session is a thread, made through the thread service with the profile of
//! its agent's pinned version in its environment (`profile::make`). Its status, usage and
//! archive come from the thread: `running` while a message of it is pending, `terminated` once
//! archived, else `idle`.

use std::path::Path;

use axum::extract::{Path as UrlPath, Query, State};
use axum::{Extension, Json};
use serde::Deserialize;

use plugin_contract::ThreadId;

use super::agents;
use super::environments;
use super::error::ManagedError;
use super::lists::{limit_of, Body};
use super::params::{
    AgentRef, Amount, BudgetParam, Checkout, CreateSession, Order, ResourceParam, UpdateSession,
};
use super::wire::{check_metadata, patch_metadata, Deleted, Session, SessionAgent, SessionBody};
use super::wire::{OutcomeEvaluation, SessionPage, SessionStats, SessionUsage};
use super::{ids, profile, ManagedState, TAG};
use crate::api::threads::CreateThread;
use crate::caller::Caller;
use crate::store::{ManagedKind, NewSession, SessionFilter, SessionRow};

/// Creates a session: its thread, on the agent's version it pins, in its environment; then
/// sends its `initial_events`.
#[utoipa::path(post, path = "/sessions", operation_id = "createSession", tag = TAG,
    request_body = CreateSession,
    responses((status = 200, description = "The session.", body = Session)))]
pub async fn create(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Body(params): Body<CreateSession>,
) -> Result<Json<Session>, ManagedError> {
    let (agent_id, version) = match params.agent.clone() {
        AgentRef::Id(id) => (id, None),
        AgentRef::Pinned { id, version, .. } => (id, version),
    };
    let agent = agents::visible(&state, &caller, &agent_id, version).await?;
    let environment = environments::visible(&state, &caller, &params.environment_id).await?;
    if agent.archived_at.is_some() {
        return Err(ManagedError::invalid(format!(
            "agent {agent_id} is archived"
        )));
    }
    if environment.archived_at.is_some() {
        return Err(ManagedError::invalid(format!(
            "environment {} is archived",
            environment.id
        )));
    }
    let (files, repository) =
        resources_of(&state, &caller, params.resources.unwrap_or_default()).await?;
    if params.vault_ids.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(ManagedError::invalid(
            "vault_ids: not supported: Harness keeps credentials in its own configuration",
        ));
    }
    let metadata = params.metadata.unwrap_or_default();
    check_metadata(&metadata).map_err(ManagedError::invalid)?;
    let body = agents::body_of(&agent)?;
    let network = profile::network_of(&environments::body_of(&environment)?);
    let approvals = state.pipeline.approvals();
    let profile = profile::make(
        &state.pool,
        approvals,
        &state.config,
        (&agent.id, agent.version, &body),
        network,
    )?;
    let created = state
        .threads
        .create(
            &caller,
            CreateThread {
                title: params.title.clone(),
                profile: Some(profile),
                max_budget_usd: params.budget.as_ref().map(budget_of).transpose()?,
                workspace: repository.as_ref().map(Repository::workspace),
                ..CreateThread::default()
            },
        )
        .await?;
    let thread = created.thread.id;
    // The repository's worktree when there is one, else the thread's own folder.
    let folder = match &created.thread.workspace {
        Some(workspace) => workspace.path().to_path_buf(),
        None => crate::launch::thread_workdir(&state.config.claude_workdir(), &thread),
    };
    let mut resources = put(&state, &folder, files).await?;
    resources.extend(repository.map(|r| r.shown()));
    let stored = serde_json::to_string(&SessionBody {
        metadata,
        resources,
        network,
    })
    .map_err(|err| ManagedError::invalid(err.to_string()))?;
    let row = state
        .store
        .insert_session(NewSession {
            thread_id: &thread,
            agent_id: &agent.id,
            agent_version: agent.version,
            environment_id: &environment.id,
            body: &stored,
        })
        .await?;
    if let Some(events) = params.initial_events.filter(|e| !e.is_empty()) {
        super::session_events::send_all(&state, &caller, &row, events, None).await?;
    }
    Ok(Json(shown(&state, &row).await?))
}

/// A file to put in a new session's folder: the file (the caller's), and where it goes.
struct Mounted {
    file: crate::store::FileRow,
    mount_path: String,
}

/// A repository a new session works in a worktree of: its folder under the roots, as the API
/// named it.
struct Repository {
    path: String,
    url: String,
    checkout: Option<Checkout>,
    mount_path: String,
}

impl Repository {
    /// `url`: an absolute path or a `file://` URL; anything else is refused (Harness clones
    /// nothing). Whether it lies under the roots is the thread's workspace check.
    fn of(
        url: String,
        checkout: Option<Checkout>,
        mount_path: Option<String>,
        token: Option<String>,
    ) -> Result<Repository, ManagedError> {
        if token.is_some() {
            return Err(ManagedError::invalid(
                "resources: authorization_token: Harness clones nothing; a repository is one under workspaces.roots",
            ));
        }
        let path = url.strip_prefix("file://").unwrap_or(&url);
        if !path.starts_with('/') {
            return Err(ManagedError::invalid(format!(
                "resources: {url}: Harness clones nothing; name a git repository under workspaces.roots by its path or a file:// URL"
            )));
        }
        let name = path
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("repo");
        let mount_path = mount_path.unwrap_or_else(|| format!("/workspace/{name}"));
        Ok(Repository {
            path: path.to_owned(),
            url,
            checkout,
            mount_path,
        })
    }

    /// The thread's workspace: a worktree of the repository, from the checkout.
    fn workspace(&self) -> crate::config::WorkspaceRequest {
        crate::config::WorkspaceRequest {
            repo: Some(self.path.clone()),
            worktree: Some(true),
            base_ref: self.checkout.as_ref().map(|c| match c {
                Checkout::Branch { name } => name.clone(),
                Checkout::Commit { sha } => sha.clone(),
            }),
            ..Default::default()
        }
    }

    /// The resource as the API shows it (the token never).
    fn shown(self) -> serde_json::Value {
        let now = chrono::Utc::now();
        serde_json::json!({
            "type": "github_repository",
            "id": "sesrsc_repository",
            "url": self.url,
            "checkout": self.checkout,
            "mount_path": self.mount_path,
            "created_at": now,
            "updated_at": now,
        })
    }
}

/// The session's `resources`, checked before anything is made: each file the caller's, each
/// mount path in the session's folder; at most one repository.
async fn resources_of(
    state: &ManagedState,
    caller: &Caller,
    resources: Vec<ResourceParam>,
) -> Result<(Vec<Mounted>, Option<Repository>), ManagedError> {
    let mut mounted = Vec::with_capacity(resources.len());
    let mut repository = None;
    for resource in resources {
        let (file_id, mount_path) = match resource {
            ResourceParam::File {
                file_id,
                mount_path,
            } => (file_id, mount_path),
            ResourceParam::GithubRepository {
                url,
                checkout,
                mount_path,
                authorization_token,
            } => {
                if repository.is_some() {
                    return Err(ManagedError::invalid(
                        "resources: one repository a session: it works in a worktree of it",
                    ));
                }
                repository = Some(Repository::of(
                    url,
                    checkout,
                    mount_path,
                    authorization_token,
                )?);
                continue;
            }
        };
        let file = (state.pipeline.files())
            .visible(caller, &file_id)
            .await
            .map_err(super::files::file_error)?;
        let mount_path = mount_path.unwrap_or_else(|| format!("/mnt/session/uploads/{file_id}"));
        super::files::mount(Path::new("/"), &mount_path)?;
        mounted.push(Mounted { file, mount_path });
    }
    Ok((mounted, repository))
}

/// Writes each file into `folder` at its mount path; the resources as the API shows them.
async fn put(
    state: &ManagedState,
    folder: &Path,
    files: Vec<Mounted>,
) -> Result<Vec<serde_json::Value>, ManagedError> {
    let mut shown = Vec::with_capacity(files.len());
    for (index, Mounted { file, mount_path }) in files.into_iter().enumerate() {
        let bytes = (state.store)
            .file_data(&file.id)
            .await?
            .ok_or_else(|| ManagedError::not_found(format!("file {} not found", file.id)))?;
        let path = super::files::mount(folder, &mount_path)?;
        let written = async {
            if let Some(parent) = path.parent() {
                tokio::fs::create_dir_all(parent).await?;
            }
            tokio::fs::write(&path, &bytes).await
        };
        written.await.map_err(|err| {
            ManagedError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                format!(
                    "the file {} could not be put at {mount_path}: {err}",
                    file.id
                ),
            )
        })?;
        let now = chrono::Utc::now();
        shown.push(serde_json::json!({
            "type": "file",
            "id": format!("sesrsc_{index}_{}", file.id.trim_start_matches("file_")),
            "file_id": file.id,
            "mount_path": mount_path,
            "created_at": now,
            "updated_at": now,
        }));
    }
    Ok(shown)
}

/// A session's budget as the thread's `maxBudgetUsd`.
fn budget_of(budget: &BudgetParam) -> Result<f64, ManagedError> {
    let BudgetParam::Limit { max_list_cost } = budget;
    let amount = match &max_list_cost.amount {
        Amount::Text(text) => text.parse::<f64>().ok(),
        Amount::Number(usd) => Some(*usd),
    };
    amount
        .filter(|usd| usd.is_finite() && *usd >= 0.0)
        .ok_or_else(|| ManagedError::invalid("budget.max_list_cost.amount: a number of USD"))
}

/// A session.
#[utoipa::path(get, path = "/sessions/{session_id}", operation_id = "getSession", tag = TAG,
    params(("session_id" = String, Path, description = "`sesn_…`")),
    responses((status = 200, description = "The session.", body = Session)))]
pub async fn retrieve(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Session>, ManagedError> {
    let row = visible(&state, &caller, &id).await?;
    Ok(Json(shown(&state, &row).await?))
}

/// Changes a session's title or metadata.
#[utoipa::path(post, path = "/sessions/{session_id}", operation_id = "updateSession", tag = TAG,
    params(("session_id" = String, Path, description = "`sesn_…`")),
    request_body = UpdateSession,
    responses((status = 200, description = "The session.", body = Session)))]
pub async fn update(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
    Body(params): Body<UpdateSession>,
) -> Result<Json<Session>, ManagedError> {
    let row = visible(&state, &caller, &id).await?;
    if let Some(title) = params.title {
        let patch = crate::api::threads::PatchThread {
            title: Some(title),
            ..Default::default()
        };
        state.threads.update(&caller, &row.thread_id, patch).await?;
    }
    let mut row = row;
    if let Some(patch) = params.metadata {
        let mut body = body_of(&row)?;
        patch_metadata(&mut body.metadata, patch).map_err(ManagedError::invalid)?;
        let text =
            serde_json::to_string(&body).map_err(|err| ManagedError::invalid(err.to_string()))?;
        row = state
            .store
            .update_session(&row.thread_id, &text)
            .await?
            .ok_or_else(|| not_found(&id))?;
    }
    let row = state
        .store
        .session(&row.thread_id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(shown(&state, &row).await?))
}

#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SessionQuery {
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    pub page: Option<String>,
    #[serde(default)]
    pub include_archived: bool,
    pub agent_id: Option<String>,
    pub agent_version: Option<i64>,
    /// By creation: `desc` (the default) or `asc`.
    #[param(inline)]
    pub order: Option<Order>,
}

/// The caller's sessions.
#[utoipa::path(get, path = "/sessions", operation_id = "listSessions", tag = TAG,
    params(SessionQuery),
    responses((status = 200, description = "A page of sessions.", body = SessionPage)))]
pub async fn list(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Query(query): Query<SessionQuery>,
) -> Result<Json<SessionPage>, ManagedError> {
    let limit = limit_of(query.limit)?;
    let descending = query.order != Some(Order::Asc);
    let after = match &query.page {
        Some(page) => {
            let (at, id) = ids::parse_keyset(page)
                .ok_or_else(|| ManagedError::invalid("page: not a cursor this list gave"))?;
            Some((at, ThreadId::from_string(id)))
        }
        None => None,
    };
    let mut rows = state
        .store
        .list_sessions(SessionFilter {
            tenant: if caller.sees_all() {
                None
            } else {
                caller.tenant.as_deref()
            },
            agent_id: query.agent_id.as_deref(),
            agent_version: query.agent_version,
            include_archived: query.include_archived,
            descending,
            after,
            limit: limit + 1,
        })
        .await?;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_page = more
        .then(|| {
            rows.last()
                .map(|r| ids::keyset(r.created_at, r.thread_id.as_str()))
        })
        .flatten();
    let mut data = Vec::with_capacity(rows.len());
    for row in &rows {
        data.push(shown(&state, row).await?);
    }
    Ok(Json(SessionPage {
        data,
        next_page,
        prev_page: None,
    }))
}

/// Archives a session: its thread is archived (its process stops; it takes no more events).
#[utoipa::path(post, path = "/sessions/{session_id}/archive", operation_id = "archiveSession", tag = TAG,
    params(("session_id" = String, Path, description = "`sesn_…`")),
    responses((status = 200, description = "The session, archived.", body = Session)))]
pub async fn archive(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Session>, ManagedError> {
    let row = visible(&state, &caller, &id).await?;
    state.threads.archive(&caller, &row.thread_id).await?;
    let row = state
        .store
        .session(&row.thread_id)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(shown(&state, &row).await?))
}

/// Deletes a session and its thread.
#[utoipa::path(delete, path = "/sessions/{session_id}", operation_id = "deleteSession", tag = TAG,
    params(("session_id" = String, Path, description = "`sesn_…`")),
    responses((status = 200, description = "Deleted.", body = Deleted)))]
pub async fn delete(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Deleted>, ManagedError> {
    let row = visible(&state, &caller, &id).await?;
    state.threads.delete(&caller, &row.thread_id).await?;
    Ok(Json(Deleted {
        id,
        kind: "session_deleted",
    }))
}

/// Makes the profiles of every live session, at the daemon's start: their threads' turns may run
/// from any door (or be re-driven) before the door sees them. How many were made; a session
/// whose agent cannot be made is logged and skipped.
pub async fn make_profiles(
    store: &crate::store::Store,
    pool: &crate::pool::Pool,
    approvals: &crate::approvals::Approvals,
    config: &crate::config::Config,
) -> Result<usize, crate::store::StoreError> {
    let mut made = 0;
    let mut after = None;
    loop {
        let page = store
            .list_sessions(SessionFilter {
                tenant: None,
                agent_id: None,
                agent_version: None,
                include_archived: false,
                descending: false,
                after: after.clone(),
                limit: 200,
            })
            .await?;
        for row in &page {
            match remake(store, pool, approvals, config, row).await {
                Ok(()) => made += 1,
                Err(err) => tracing::warn!(thread_id = %row.thread_id, error = %err.message,
                    "A session's profile could not be made; its turns are refused."),
            }
        }
        match page.last() {
            Some(last) if page.len() == 200 => {
                after = Some((last.created_at, last.thread_id.clone()))
            }
            _ => return Ok(made),
        }
    }
}

/// Makes the session's profile when this daemon has not yet (it started since the session was
/// made, and the start could not).
pub async fn ensure_profile(state: &ManagedState, row: &SessionRow) -> Result<(), ManagedError> {
    let approvals = state.pipeline.approvals();
    remake(&state.store, &state.pool, approvals, &state.config, row).await
}

/// Makes (once) the profile of the session `row`: its agent's pinned version in its
/// environment's network, as made when the session was.
async fn remake(
    store: &crate::store::Store,
    pool: &crate::pool::Pool,
    approvals: &crate::approvals::Approvals,
    config: &crate::config::Config,
    row: &SessionRow,
) -> Result<(), ManagedError> {
    let network = body_of(row)?.network;
    let name = profile::profile_name(&row.agent_id, row.agent_version, network);
    if pool.profile(Some(&name)).is_ok() {
        return Ok(());
    }
    let agent = store
        .managed(ManagedKind::Agent, &row.agent_id, Some(row.agent_version))
        .await?
        .ok_or_else(|| ManagedError::not_found(format!("agent {} not found", row.agent_id)))?;
    let body = agents::body_of(&agent)?;
    let version = (agent.id.as_str(), agent.version, &body);
    profile::make(pool, approvals, config, version, network).map(drop)
}

/// The session `id` when `caller` sees it; else what one that does not exist gets.
pub async fn visible(
    state: &ManagedState,
    caller: &Caller,
    id: &str,
) -> Result<SessionRow, ManagedError> {
    let thread = ids::thread_of(id).ok_or_else(|| not_found(id))?;
    state
        .store
        .session(&thread)
        .await?
        .filter(|row| caller.sees_all() || row.tenant == caller.tenant)
        .ok_or_else(|| not_found(id))
}

fn not_found(id: &str) -> ManagedError {
    ManagedError::not_found(format!("session {id} not found"))
}

/// What the session keeps beside its thread.
fn body_of(row: &SessionRow) -> Result<SessionBody, ManagedError> {
    super::error::stored(&row.body, format_args!("session of {}", row.thread_id))
}

/// A session as the API shows it.
pub async fn shown(state: &ManagedState, row: &SessionRow) -> Result<Session, ManagedError> {
    let agent = state
        .store
        .managed(ManagedKind::Agent, &row.agent_id, Some(row.agent_version))
        .await?
        .ok_or_else(|| ManagedError::not_found(format!("agent {} not found", row.agent_id)))?;
    let agent = agents::shown(&agent)?;
    let pending = state.store.pending_turns(Some(&row.thread_id)).await?;
    let goals = state.store.goals_of(&row.thread_id).await?;
    // A goal under way keeps the session running between its turns too.
    let working = !pending.is_empty() || goals.iter().any(|g| g.finished_at.is_none());
    let status = match (row.archived_at, working) {
        (Some(_), _) => "terminated",
        (None, true) => "running",
        (None, false) => "idle",
    };
    let usage = state.store.thread_usage(&row.thread_id).await?;
    let thread = state.store.require_thread(&row.thread_id).await?;
    let body = body_of(row)?;
    Ok(Session {
        kind: "session",
        id: ids::session_of(&row.thread_id),
        status,
        agent: SessionAgent {
            kind: "agent",
            id: agent.id,
            version: agent.version,
            name: agent.name,
            description: agent.description,
            system: agent.system,
            model: agent.model,
            tools: agent.tools,
            mcp_servers: agent.mcp_servers,
            skills: agent.skills,
            execution_identity: agent.execution_identity,
        },
        environment_id: row.environment_id.clone(),
        title: row.title.clone(),
        metadata: body.metadata,
        resources: body.resources,
        outcome_evaluations: goals.into_iter().map(OutcomeEvaluation::of).collect(),
        stats: SessionStats {
            active_seconds: Some(usage.api_ms as f64 / 1000.0),
            duration_seconds: Some(
                (row.updated_at - row.created_at).num_milliseconds() as f64 / 1000.0,
            ),
        },
        usage: SessionUsage {
            input_tokens: Some(usage.input_tokens),
            output_tokens: Some(usage.output_tokens),
            cache_read_input_tokens: Some(usage.cache_read_tokens),
            list_cost: Some(serde_json::json!({
                "amount": format!("{:.6}", usage.cost_usd),
                "currency": "USD",
            })),
        },
        vault_ids: Vec::new(),
        budget: thread.max_budget_usd.map(|usd| {
            serde_json::json!({
                "type": "limit",
                "max_list_cost": {"amount": format!("{usd:.2}"), "currency": "USD"},
            })
        }),
        created_at: row.created_at,
        updated_at: row.updated_at,
        archived_at: row.archived_at,
    })
}
