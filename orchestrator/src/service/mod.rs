//! The thread service: every thread operation a door offers, once. `/api`'s handlers and `/mcp`'s
//! `threads__*` tools are adapters over it (extract, call, answer), and so will be the next doors.
//! Each HTTP operation is one row of `http::operations`; the tools' schemas derive from the same
//! types as `/api`'s bodies (`http::mcp_endpoint::schemas`).
//!
//! Each operation takes its caller explicitly ([`Caller`]) and answers with the API types
//! ([`crate::api`], [`crate::api::threads`]) or one [`ServiceError`], which each door maps to its
//! own words. A thread the caller does not see is answered as one that does not exist.
//!
//! What needs the thread's process runs on the node that owns the thread. `/api` reaches the
//! owner before its handler runs (`http::routing::to_owner`, by the operation's row in
//! `http::operations`) and hands the service the lease's [`Fence`]; a door that cannot forward a
//! whole request (a tool call) asks [`ThreadService::send_and_wait`], which forwards the message
//! to the owner's `/api` the same way and follows its outcome ([`owner`]).
//!
//! A door that hands out a handle for a turn instead of waiting for it (MCP tasks, A2A) starts
//! and reads it through [`turns`]; a person's answer to a permission goes through it too.
//!
//! Not here: the event stream, diffs and files (one door each, for now), and the turn itself
//! ([`Pipeline`]).

mod error;
mod owner;
pub mod turns;

use plugin_contract::ThreadId;
use tracing::info;

use crate::api::pages::{self, MessagePage, ThreadFilters, ThreadPage};
use crate::api::threads::{
    ArchiveReply, CreateThread, CreatedThread, ForkThread, Interrupted, ModelRequestList,
    OutcomeList, PatchThread, PostMessage, ThreadWithMessages, Warming, MAX_TAGS, MAX_TAG_CHARS,
};
use crate::api::{self, Reply};
use crate::budget::validate_usd;
use crate::caller::Caller;
use crate::cluster::Cluster;
use crate::pipeline::{Accepted, NewMessage, Pipeline, PipelineError, Stopped, TurnReply};
use crate::store::{Fence, MessageId, NewThread, Store, StoreError, ThreadChange, ThreadRow};
use crate::webhooks::Webhooks;
pub use error::ServiceError;
pub use turns::{TurnState, TurnView};

/// The thread operations, over the pipeline and the store. Cheap to clone.
#[derive(Clone)]
pub struct ThreadService {
    pipeline: Pipeline,
    store: Store,
    /// Checks a thread's own webhook endpoint (`callbackUrl`) before it is kept.
    webhooks: Webhooks,
    /// This node among several; `None`: a single node, where every operation runs here.
    cluster: Option<Cluster>,
    /// `threads.delete_children`: whether deleting a thread deletes its children too.
    cascade_delete: bool,
}

/// A message for [`ThreadService::send`]: the body a door took, and where it runs.
pub struct SendMessage {
    pub thread: ThreadId,
    pub body: PostMessage,
    /// This node's lease on the thread, when clustered (the door reached the owner already).
    pub fence: Option<Fence>,
    /// The caller's trace (W3C `traceparent`), which the turn continues.
    pub traceparent: Option<String>,
}

/// How a message sent with [`ThreadService::send_and_wait`] ended, wherever its turn ran.
pub struct Sent {
    pub thread: ThreadId,
    /// The user message.
    pub message: MessageId,
    /// A repeat of a `clientMessageId` already seen: this is the first run's outcome.
    pub duplicate: bool,
    /// The reply, or how the turn ended without one.
    pub outcome: Result<TurnReply, PipelineError>,
}

impl ThreadService {
    pub fn new(
        pipeline: Pipeline,
        store: Store,
        webhooks: Webhooks,
        cluster: Option<Cluster>,
        cascade_delete: bool,
    ) -> ThreadService {
        ThreadService {
            pipeline,
            store,
            webhooks,
            cluster,
            cascade_delete,
        }
    }

    /// A new thread, owned by the caller's tenant; with a `callbackUrl`, the secret its
    /// callbacks are signed with, this once.
    pub async fn create(
        &self,
        caller: &Caller,
        body: CreateThread,
    ) -> Result<CreatedThread, ServiceError> {
        if let Some(schema) = &body.output_schema {
            crate::mcp::schema::OutputSchema::compile(schema)
                .map_err(|err| ServiceError::Invalid(err.to_string()))?;
        }
        if let Some(budget) = body.max_budget_usd {
            validate_usd(budget, "maxBudgetUsd").map_err(ServiceError::Invalid)?;
        }
        if let Some(url) = &body.callback_url {
            self.webhooks
                .check_callback(url)
                .map_err(|err| ServiceError::Invalid(format!("callbackUrl: {err}")))?;
        }
        let new = NewThread {
            title: body.title,
            model: body.model,
            output_schema: body.output_schema,
            max_budget_usd: body.max_budget_usd,
            profile: body.profile,
            on_interrupt: body.on_interrupt.unwrap_or_default(),
            // The creator's tenant owns it.
            tenant: caller.tenant.clone(),
            ..NewThread::default()
        };
        let thread = self
            .pipeline
            .create_thread(new, body.workspace.as_ref())
            .await?;
        let callback_secret = match &body.callback_url {
            Some(url) => {
                let secret = crate::webhooks::Signer::generate_secret();
                self.store
                    .set_thread_callback(&thread.id, url, &secret)
                    .await?;
                Some(secret)
            }
            None => None,
        };
        info!(thread_id = %thread.id, callback = body.callback_url.is_some(), "Thread created.");
        Ok(CreatedThread {
            thread: api::Thread::from(thread),
            callback_url: body.callback_url,
            callback_secret,
        })
    }

    /// A new thread with `parentId` set that carries the thread's history and forks its CLI
    /// session.
    pub async fn fork(
        &self,
        caller: &Caller,
        parent: &ThreadId,
        body: ForkThread,
    ) -> Result<api::Thread, ServiceError> {
        self.check(caller, parent).await?;
        let thread = self.pipeline.fork_thread(parent, body.title).await?;
        Ok(api::Thread::from(thread))
    }

    /// The thread alone.
    pub async fn thread(
        &self,
        caller: &Caller,
        id: &ThreadId,
    ) -> Result<api::Thread, ServiceError> {
        Ok(self.visible(caller, id).await?.into())
    }

    /// The thread, what its turns cost, its tags, and its last page of messages, oldest first.
    pub async fn get(
        &self,
        caller: &Caller,
        id: &ThreadId,
    ) -> Result<ThreadWithMessages, ServiceError> {
        let thread = self.visible(caller, id).await?;
        let usage = self.store.thread_usage(id).await?;
        let mut page = pages::messages(&self.store, id, None, pages::DEFAULT_LIMIT).await?;
        page.messages.reverse();
        let callback = self.store.thread_callback(id).await?;
        let tags = self.store.tags_of(std::slice::from_ref(id)).await?;
        Ok(ThreadWithMessages {
            thread: thread.into(),
            callback_url: callback.map(|c| c.url),
            usage,
            tags: tags.into_iter().map(|(_, tag)| tag).collect(),
            messages: page.messages,
            messages_cursor: page.next_cursor,
        })
    }

    /// The threads the caller sees, a page at a time.
    pub async fn list(
        &self,
        caller: &Caller,
        filters: &ThreadFilters,
    ) -> Result<ThreadPage, ServiceError> {
        Ok(pages::threads(&self.store, caller, filters).await?)
    }

    /// A page of the thread's messages, newest first: `limit` of them (checked), older than the
    /// cursor `before`.
    pub async fn messages(
        &self,
        caller: &Caller,
        id: &ThreadId,
        limit: Option<i64>,
        before: Option<&str>,
    ) -> Result<MessagePage, ServiceError> {
        self.visible(caller, id).await?;
        let limit = pages::limit(limit)?;
        Ok(pages::messages(&self.store, id, before, limit).await?)
    }

    /// Stores the message and queues its turn here; [`Accepted::finish`] waits for the reply.
    /// The door has reached the thread's owner already (`message.fence`).
    pub async fn send(
        &self,
        caller: &Caller,
        message: SendMessage,
    ) -> Result<Accepted, ServiceError> {
        self.check(caller, &message.thread).await?;
        Ok(self
            .pipeline
            .accept_message(new_message(caller, message))
            .await?)
    }

    /// Sends the message where the thread runs (here, or with clustering at its owner) and
    /// waits for how its turn ended.
    pub async fn send_and_wait(
        &self,
        caller: &Caller,
        thread: ThreadId,
        body: PostMessage,
        traceparent: Option<String>,
    ) -> Result<Sent, ServiceError> {
        self.check(caller, &thread).await?;
        let fence = match &self.cluster {
            None => None,
            Some(cluster) => match self.at_owner(cluster, caller, &thread, &body).await? {
                owner::Placed::Here(fence) => Some(fence),
                owner::Placed::There(sent) => return Ok(*sent),
            },
        };
        let message = SendMessage {
            thread: thread.clone(),
            body,
            fence,
            traceparent,
        };
        let accepted = self.send(caller, message).await?;
        let (message, duplicate) = (accepted.message_id.clone(), accepted.duplicate);
        Ok(Sent {
            thread,
            message,
            duplicate,
            outcome: accepted.finish().await,
        })
    }

    /// Interrupts the running turn; with `client` (a `clientMessageId`), only that message's,
    /// withdrawn instead while it still waits in line.
    pub async fn interrupt(
        &self,
        caller: &Caller,
        id: &ThreadId,
        client: Option<&str>,
    ) -> Result<Interrupted, ServiceError> {
        self.check(caller, id).await?;
        let (interrupted, withdrawn) = match client {
            Some(client) => {
                self.store.require_thread(id).await?;
                match self.pipeline.stop_message(id, client).await? {
                    Stopped::Withdrawn => (false, true),
                    Stopped::Interrupted => (true, false),
                    Stopped::Neither => (false, false),
                }
            }
            None => (self.pipeline.interrupt(id).await?, false),
        };
        Ok(Interrupted {
            thread_id: id.clone(),
            interrupted,
            withdrawn,
        })
    }

    /// Changes the thread: its budget, title, tags, or whether it is archived; the fields absent
    /// stay.
    pub async fn update(
        &self,
        caller: &Caller,
        id: &ThreadId,
        body: PatchThread,
    ) -> Result<ThreadWithMessages, ServiceError> {
        let title = body.title.as_ref().map(|t| t.as_deref());
        if let Some(Some(title)) = title {
            if title.trim().is_empty() || title.chars().count() > 200 {
                return Err(ServiceError::Invalid(
                    "title is 1 to 200 characters, not blank".into(),
                ));
            }
        }
        let tags = body.tags.map(check_tags).transpose()?;
        self.check(caller, id).await?;
        self.store.require_thread(id).await?;
        if let Some(budget) = body.max_budget_usd {
            if let Some(usd) = budget {
                validate_usd(usd, "maxBudgetUsd").map_err(ServiceError::Invalid)?;
            }
            self.pipeline.set_thread_budget(id, budget).await?;
            info!(thread_id = %id, max_budget_usd = ?budget, "Thread budget set.");
        }
        let change = ThreadChange {
            title,
            tags: tags.as_deref(),
            unarchive: body.archived == Some(false),
        };
        if change.title.is_some() || change.tags.is_some() || change.unarchive {
            self.store.change_thread(id, &change).await?;
        }
        if body.archived == Some(true) {
            self.pipeline.archive_thread(id).await?;
        }
        self.get(caller, id).await
    }

    /// Archives the thread (see `Pipeline::archive_thread`).
    pub async fn archive(
        &self,
        caller: &Caller,
        id: &ThreadId,
    ) -> Result<ArchiveReply, ServiceError> {
        self.check(caller, id).await?;
        let archived = self.pipeline.archive_thread(id).await?;
        Ok(ArchiveReply {
            thread: archived.thread.into(),
            worktree: archived.worktree,
        })
    }

    /// Deletes the thread and everything of it, its children too when
    /// `threads.delete_children` is `cascade`.
    pub async fn delete(&self, caller: &Caller, id: &ThreadId) -> Result<(), ServiceError> {
        self.check(caller, id).await?;
        self.pipeline.delete_thread(id, self.cascade_delete).await?;
        Ok(())
    }

    /// Starts the thread's process here, in the background.
    pub async fn prewarm(
        &self,
        caller: &Caller,
        id: &ThreadId,
        model: Option<String>,
    ) -> Result<Warming, ServiceError> {
        self.check(caller, id).await?;
        self.pipeline.prewarm(id, model).await?;
        Ok(Warming {
            thread_id: id.clone(),
            status: "warming",
        })
    }

    /// How each run of the thread's user message `message` ended, oldest first.
    pub async fn outcomes(
        &self,
        caller: &Caller,
        id: &ThreadId,
        message: &MessageId,
    ) -> Result<OutcomeList, ServiceError> {
        self.user_message(caller, id, message).await?;
        let rows = self.store.outcomes_of(message).await?;
        Ok(OutcomeList {
            outcomes: rows.into_iter().map(api::Outcome::from).collect(),
        })
    }

    /// The model requests of the turns of the thread's user message `message`, oldest first.
    pub async fn model_requests(
        &self,
        caller: &Caller,
        id: &ThreadId,
        message: &MessageId,
    ) -> Result<ModelRequestList, ServiceError> {
        self.user_message(caller, id, message).await?;
        let rows = self.store.model_requests_of(message).await?;
        Ok(ModelRequestList {
            model_requests: rows.into_iter().map(api::ModelRequest::from).collect(),
        })
    }

    /// The thread `id`, when the caller sees it.
    async fn visible(&self, caller: &Caller, id: &ThreadId) -> Result<ThreadRow, ServiceError> {
        Ok(visible_thread(&self.store, caller, id).await?)
    }

    /// `Ok` when the caller may reach the thread: one who sees every thread always may (the
    /// operation answers for a thread that is not there); another only for a thread of its own.
    async fn check(&self, caller: &Caller, id: &ThreadId) -> Result<(), ServiceError> {
        if caller.sees_all() {
            return Ok(());
        }
        self.visible(caller, id).await.map(drop)
    }

    /// `Ok` when the thread has a user message `message`; 404 otherwise.
    async fn user_message(
        &self,
        caller: &Caller,
        id: &ThreadId,
        message: &MessageId,
    ) -> Result<(), ServiceError> {
        self.check(caller, id).await?;
        let row = self.store.get_message(message).await?;
        if !row.is_some_and(|m| &m.thread_id == id && m.role == crate::store::Role::User) {
            return Err(ServiceError::NotFound(format!(
                "thread {id} has no user message {message}"
            )));
        }
        Ok(())
    }
}

/// The thread `id`, when `caller` sees it; else [`StoreError::ThreadNotFound`], as for a
/// thread that does not exist. The one answer to "may this caller reach this thread", for every
/// door.
pub async fn visible_thread(
    store: &Store,
    caller: &Caller,
    id: &ThreadId,
) -> Result<ThreadRow, StoreError> {
    match store.get_thread(id).await? {
        Some(thread) if caller.sees(thread.tenant.as_deref()) => Ok(thread),
        _ => Err(StoreError::ThreadNotFound(id.clone())),
    }
}

/// The pipeline's message for `message`, sent by `caller`.
fn new_message(caller: &Caller, message: SendMessage) -> NewMessage {
    let SendMessage {
        thread,
        body,
        fence,
        traceparent,
    } = message;
    NewMessage {
        traceparent,
        thread_id: thread,
        content: body.content,
        client_message_id: body.client_message_id,
        model: body.model,
        permission_mode: body.permission_mode,
        mcp_servers: body.mcp_servers,
        timeout: None,
        fence,
        unattended: false,
        caller: caller.clone(),
    }
}

/// Tags trimmed, each 1 to 64 characters, at most 20, without repeats.
fn check_tags(tags: Vec<String>) -> Result<Vec<String>, ServiceError> {
    let mut out: Vec<String> = Vec::new();
    for tag in tags {
        let tag = tag.trim().to_owned();
        if tag.is_empty() || tag.chars().count() > MAX_TAG_CHARS {
            return Err(ServiceError::Invalid(format!(
                "a tag is 1 to {MAX_TAG_CHARS} characters, not {tag:?}"
            )));
        }
        if !out.contains(&tag) {
            out.push(tag);
        }
    }
    if out.len() > MAX_TAGS {
        return Err(ServiceError::Invalid(format!(
            "a thread has at most {MAX_TAGS} tags"
        )));
    }
    Ok(out)
}

impl From<TurnReply> for Reply {
    fn from(reply: TurnReply) -> Self {
        Reply {
            message: reply.message.into(),
            thread_id: reply.thread_id,
            session_id: reply.session_id,
            user_message_id: reply.user_message_id,
        }
    }
}
