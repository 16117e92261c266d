//! Threads as a whole: creating one (its profile checked, its workspace made, a spare taken),
//! forking, archiving, its budget within its profile's ceiling, and its workspace's diff.

use std::path::PathBuf;

use tracing::{info, warn};

use plugin_contract::ThreadId;

use super::{Pipeline, PipelineError};
use crate::api::events::{ThreadArchived, ThreadDeleted, ThreadEvent};
use crate::launch::AgentProfile;
use crate::pool::WorktreeKey;
use crate::store::{NewThread, ThreadRow, Workspace};
use crate::workspace::{DiffSummary, Plan, WorkspaceError, WorkspaceRequest, WorktreeDisposition};

/// An archived thread, and what became of its worktree.
pub struct Archived {
    pub thread: ThreadRow,
    pub worktree: Option<WorktreeDisposition>,
}

impl Pipeline {
    /// Creates a thread. A parked spare, when there is one, becomes its process: the thread takes
    /// the id the spare was started for, so its first turn finds a warm process. With a
    /// `workspace`, the thread works there (see [`crate::workspace`]): a worktree thread takes a
    /// spare parked in a worktree of its repository when one fits, or gets a worktree made for it.
    pub async fn create_thread(
        &self,
        mut new: NewThread,
        workspace: Option<&WorkspaceRequest>,
    ) -> Result<ThreadRow, PipelineError> {
        validate_names(new.title.as_deref(), new.model.as_deref())?;
        let profile = self
            .inner
            .parts
            .pool
            .profile(new.profile.as_deref())
            .map_err(|err| {
                PipelineError::InvalidInput(format!("{err}; GET /api/profiles lists them"))
            })?;
        let profile = &*profile;
        new.max_budget_usd = within_ceiling(profile, new.max_budget_usd)?;
        if new.model.is_some() {
            check_overridable(profile, "model")?;
        }
        if workspace.is_some() {
            check_overridable(profile, "workspace")?;
        }
        // The caller's, else the profile's own default.
        if let Some(request) = workspace.or(profile.default_workspace()) {
            let plan = self.inner.parts.workspaces.plan(request).await?;
            return self.create_in_workspace(new, profile, plan).await;
        }
        let spare = if new.id.is_none() {
            self.inner.parts.pool.take_spare(&new).await
        } else {
            None
        };
        new.id = new.id.or_else(|| spare.clone());
        let created = self.inner.parts.store.create_thread(new).await;
        match (&created, &spare) {
            (Err(_), Some(thread)) => self.inner.parts.pool.forget(thread).await,
            (Ok(thread), _) => self.claim(&thread.id).await,
            (Err(_), None) => {}
        }
        created.map_err(PipelineError::from)
    }

    /// Creates a thread on the workspace `plan`: a worktree thread takes a parked worktree
    /// spare of its profile and repository when one is on its base, and the pair keeps a spare
    /// for its next thread.
    async fn create_in_workspace(
        &self,
        mut new: NewThread,
        profile: &AgentProfile,
        plan: Plan,
    ) -> Result<ThreadRow, PipelineError> {
        let (workspaces, pool) = (&self.inner.parts.workspaces, &self.inner.parts.pool);
        let worktree = match plan {
            Plan::Worktree(worktree) => worktree,
            Plan::Path(path) => {
                new.workspace = Some(Workspace::Path { path });
                let created = self.inner.parts.store.create_thread(new).await?;
                self.claim(&created.id).await;
                return Ok(created);
            }
        };
        let key = WorktreeKey {
            profile: profile.name().to_owned(),
            repo: worktree.repo.clone(),
        };
        let spare = match new.id {
            None if worktree.on_default_branch() => {
                pool.take_worktree_spare(&new, &key, &worktree.commit).await
            }
            _ => None,
        };
        let (id, prepared) = match spare {
            Some((id, parked)) => {
                let adopted = workspaces.adopt(&id, &worktree, parked);
                (id, adopted)
            }
            None => {
                let id = new.id.clone().unwrap_or_else(ThreadId::generate);
                let made = workspaces.make_worktree(&id, &worktree).await?;
                (id, made)
            }
        };
        new.id = Some(id.clone());
        new.workspace = Some(prepared.clone());
        let created = self.inner.parts.store.create_thread(new).await;
        match &created {
            Ok(thread) => {
                self.claim(&thread.id).await;
                pool.worktree_used(&key, &worktree.commit);
            }
            Err(_) => {
                pool.forget(&id).await;
                workspaces.discard(&prepared).await;
            }
        }
        created.map_err(PipelineError::from)
    }

    /// Archives the thread: a running turn is interrupted (what waits for a person denied), its
    /// process let go, and its worktree dealt with as `workspaces.on_archive` says; then
    /// `thread_archived` on its stream. It takes no more messages; nothing of it is deleted.
    /// Archiving again changes nothing (and reports no worktree, nor another event).
    pub async fn archive_thread(&self, thread: &ThreadId) -> Result<Archived, PipelineError> {
        let before = self.inner.parts.store.require_thread(thread).await?;
        if before.archived_at.is_some() {
            return Ok(Archived {
                thread: before,
                worktree: None,
            });
        }
        self.interrupt(thread).await?;
        let row = self.inner.parts.store.archive_thread(thread).await?;
        self.inner.parts.pool.evict_thread(thread).await;
        // After the interrupted turn's end, so the stream says the thread is archived last.
        self.inner.runtime.after_recorded(thread).await;
        let archived = ThreadEvent::ThreadArchived(ThreadArchived::default());
        (self.inner.parts.events)
            .emit_and_wait(thread, None, archived)
            .await;
        let worktree = self
            .inner
            .parts
            .workspaces
            .archive(row.workspace.as_deref())
            .await?;
        info!(thread_id = %thread, ?worktree, "Thread archived.");
        Ok(Archived {
            thread: row,
            worktree,
        })
    }

    /// Deletes the thread and everything of it: a running turn is interrupted first and its
    /// process let go; `thread_deleted` goes to the streams open on it; then its rows
    /// (messages, events, tool calls, permissions, outcomes, transcripts, webhooks, schedules,
    /// tags), the files only it named, its CLI project and its own folder; a worktree goes as
    /// `workspaces.on_archive` says. Its children are deleted too with `cascade`, else kept,
    /// with no parent. The rows removed, by table (the children's added in).
    pub async fn delete_thread(
        &self,
        thread: &ThreadId,
        cascade: bool,
    ) -> Result<crate::store::DeletedRows, PipelineError> {
        let row = self.inner.parts.store.require_thread(thread).await?;
        let mut removed = Vec::new();
        if cascade {
            for child in self.inner.parts.store.children(thread).await? {
                let rows = Box::pin(self.delete_thread(&child, true)).await?;
                add_rows(&mut removed, rows);
            }
        }
        self.interrupt(thread).await?;
        self.inner.parts.pool.evict_thread(thread).await;
        // The interrupted turn records its end before its rows go; the streams open on the
        // thread hear of the delete before its events go too.
        self.inner.runtime.after_recorded(thread).await;
        let deleted = ThreadEvent::ThreadDeleted(ThreadDeleted::default());
        (self.inner.parts.events)
            .emit_and_wait(thread, None, deleted)
            .await;
        let rows = self.inner.parts.store.delete_thread(thread).await?;
        add_rows(&mut removed, rows);
        if let Err(err) = self.inner.parts.pool.forget_folders(&row) {
            warn!(thread_id = %thread, error = %err, "Could not remove the deleted thread's folders.");
        }
        self.inner
            .parts
            .workspaces
            .archive(row.workspace.as_deref())
            .await?;
        info!(thread_id = %thread, ?removed, "Thread deleted.");
        Ok(removed)
    }

    /// Sets (or with `None` removes) the thread's own budget, within its profile's ceiling.
    pub async fn set_thread_budget(
        &self,
        thread: &ThreadId,
        usd: Option<f64>,
    ) -> Result<(), PipelineError> {
        let row = self.inner.parts.store.require_thread(thread).await?;
        let profile = &*self.inner.parts.pool.profile(row.profile.as_deref())?;
        if let (None, Some(ceiling)) = (usd, profile.max_budget_usd()) {
            return Err(PipelineError::InvalidInput(format!(
                "maxBudgetUsd: the profile `{}` caps each thread at {ceiling} USD; it cannot be \
                 removed",
                profile.name()
            )));
        }
        let usd = within_ceiling(profile, usd)?;
        Ok(self
            .inner
            .parts
            .store
            .set_thread_budget(thread, usd)
            .await?)
    }

    /// The thread's changes against its workspace's base, as a patch (`text/x-diff`).
    pub async fn diff_patch(&self, thread: &ThreadId) -> Result<String, PipelineError> {
        let (dir, base) = self.diff_base(thread).await?;
        let patch = crate::workspace::diff::patch(&dir, &base).await;
        Ok(patch.map_err(WorkspaceError::from)?)
    }

    /// The thread's changes against its workspace's base, file by file.
    pub async fn diff_summary(&self, thread: &ThreadId) -> Result<DiffSummary, PipelineError> {
        let (dir, base) = self.diff_base(thread).await?;
        let summary = crate::workspace::diff::summary(&dir, &base).await;
        Ok(summary.map_err(WorkspaceError::from)?)
    }

    async fn diff_base(&self, thread: &ThreadId) -> Result<(PathBuf, String), PipelineError> {
        let thread = self.inner.parts.store.require_thread(thread).await?;
        let workspaces = &self.inner.parts.workspaces;
        let workspace = thread.workspace.as_deref();
        if let Some(workspace) = workspace {
            workspaces.ready(workspace).await?;
        }
        Ok(workspaces.base_of(workspace).await?)
    }

    /// With clustering, a new thread belongs to the node that created it (its spare, if it got
    /// one, is here): the lease is taken before anyone hears of the thread. Should that fail, the
    /// thread's first request takes it.
    async fn claim(&self, thread: &ThreadId) {
        if let Err(err) = crate::events::claim_lease(&self.inner.parts.store, None, thread).await {
            tracing::warn!(thread_id = %thread, error = %err, "Could not take the new thread's lease; its first request will.");
        }
    }

    /// A new thread that continues `parent`'s conversation apart from it: its history, and its
    /// CLI session forked on the first turn (`--resume=<id> --fork-session`). When the CLI no
    /// longer has the parent's session, the fork's first turn starts fresh with the history
    /// injected.
    pub async fn fork_thread(
        &self,
        parent: &ThreadId,
        title: Option<String>,
    ) -> Result<ThreadRow, PipelineError> {
        let parent_row = self.inner.parts.store.require_thread(parent).await?;
        if let Some(crate::store::Workspace::Worktree { .. }) = parent_row.workspace.as_deref() {
            return Err(PipelineError::InvalidInput(
                "a thread on a worktree cannot be forked: two threads would share its working tree; create a thread with its own worktree of the repository instead".into(),
            ));
        }
        let fork = self.inner.parts.store.fork_thread(parent, title).await?;
        self.claim(&fork.id).await;
        if let Some(session) = &fork.forked_session {
            let from = self.inner.parts.pool.spec(&parent_row, None)?;
            let to = self.inner.parts.pool.spec(&fork, None)?;
            match self.inner.parts.pool.copy_session(&from, &to, session) {
                Ok(true) => {}
                Ok(false) => {
                    info!(thread_id = %fork.id, parent_id = %parent, "The parent's CLI session is gone; the fork's history will be injected.");
                }
                Err(err) => {
                    tracing::warn!(thread_id = %fork.id, error = %err, "Could not copy the parent's CLI session; the fork's history will be injected.");
                }
            }
        }
        info!(thread_id = %fork.id, parent_id = %parent, "Thread forked.");
        Ok(fork)
    }
}

/// Refuses a caller's choice of `field` that `profile` keeps for itself (`overridable`).
pub(super) fn check_overridable(profile: &AgentProfile, field: &str) -> Result<(), PipelineError> {
    if profile.allows(field) {
        return Ok(());
    }
    Err(PipelineError::InvalidInput(format!(
        "the profile `{}` does not let a caller choose `{field}`",
        profile.name()
    )))
}

/// A thread budget within `profile`'s ceiling: the ceiling when none is asked for, the one asked
/// for when it is no higher, else refused (a caller never widens what the profile allows).
fn within_ceiling(
    profile: &AgentProfile,
    asked: Option<f64>,
) -> Result<Option<f64>, PipelineError> {
    match (asked, profile.max_budget_usd()) {
        (Some(asked), Some(ceiling)) if asked > ceiling => {
            Err(PipelineError::InvalidInput(format!(
                "maxBudgetUsd: {asked} is over the {ceiling} USD the profile `{}` allows a thread",
                profile.name()
            )))
        }
        (None, ceiling) => Ok(ceiling),
        (asked, _) => Ok(asked),
    }
}

/// Longest thread title, in characters (the same on `/api` and `/mcp`).
const MAX_TITLE_CHARS: usize = 500;
/// Longest model name, in characters: a model is a short identifier on the CLI's command line.
const MAX_MODEL_CHARS: usize = 200;

/// A title or model name as a caller sent it: bounded, and a model not empty (the same rule on
/// `/api` and `/mcp`).
pub(super) fn validate_names(
    title: Option<&str>,
    model: Option<&str>,
) -> Result<(), PipelineError> {
    if let Some(title) = title {
        let chars = title.chars().count();
        if chars > MAX_TITLE_CHARS {
            return Err(PipelineError::InvalidInput(format!(
                "title is {chars} characters; the limit is {MAX_TITLE_CHARS}"
            )));
        }
    }
    if let Some(model) = model {
        let chars = model.chars().count();
        if model.trim().is_empty() || chars > MAX_MODEL_CHARS {
            return Err(PipelineError::InvalidInput(format!(
                "model must be 1 to {MAX_MODEL_CHARS} characters (got {chars})"
            )));
        }
    }
    Ok(())
}

/// `more` added to `into`, table by table.
fn add_rows(into: &mut crate::store::DeletedRows, more: crate::store::DeletedRows) {
    for (table, n) in more {
        match into.iter_mut().find(|(t, _)| *t == table) {
            Some((_, total)) => *total += n,
            None => into.push((table, n)),
        }
    }
}
