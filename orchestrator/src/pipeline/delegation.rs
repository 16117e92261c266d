//! Delegation: a child thread whose one turn runs through this same pipeline, nested in the
//! parent's tool call (its place under the concurrency limit is the parent's).

use std::time::Duration;

use tracing::info;

use plugin_contract::{Delegate, DelegateReply, ThreadId, UserContent};

use super::{Nesting, NewMessage, Pipeline};
use crate::caller::Caller;
use crate::store::{Claim, NewThread, OnInterrupt};

/// Delegation: a child thread whose one turn runs through this same pipeline.
#[async_trait::async_trait]
impl Delegate for Pipeline {
    async fn delegate(
        &self,
        parent: &ThreadId,
        prompt: UserContent,
        model: Option<String>,
        // The delegation plugin's setting: the daemon holds no delegation settings.
        timeout: Duration,
    ) -> Result<DelegateReply, String> {
        self.delegate_child(parent, prompt, model, timeout, None)
            .await
    }
}

/// The delegate a traced tool call gets: its child's turn is traced under the call's span.
pub(super) struct TracedDelegate {
    pub(super) pipeline: Pipeline,
    pub(super) traceparent: Option<String>,
}

#[async_trait::async_trait]
impl Delegate for TracedDelegate {
    async fn delegate(
        &self,
        parent: &ThreadId,
        prompt: UserContent,
        model: Option<String>,
        timeout: Duration,
    ) -> Result<DelegateReply, String> {
        self.pipeline
            .delegate_child(parent, prompt, model, timeout, self.traceparent.clone())
            .await
    }
}

impl Pipeline {
    async fn delegate_child(
        &self,
        parent: &ThreadId,
        prompt: UserContent,
        model: Option<String>,
        timeout: Duration,
        traceparent: Option<String>,
    ) -> Result<DelegateReply, String> {
        if self.is_shutting_down() {
            return Err("the daemon is shutting down".into());
        }
        // The depth limit is the delegation plugin's policy; this only runs the child.
        let store = &self.inner.parts.store;
        let parent_thread = store
            .require_thread(parent)
            .await
            .map_err(|e| e.to_string())?;
        let child = self
            .create_thread(
                NewThread {
                    title: Some(format!("delegated from {parent}")),
                    model: model.clone().or(parent_thread.model),
                    parent_id: Some(parent.clone()),
                    id: None,
                    output_schema: None,
                    // None of its own: its turns count against the parent's budget (and
                    // those of whoever delegated to the parent), recorded below.
                    max_budget_usd: None,
                    // Its own folder: a child never shares its parent's working tree.
                    workspace: None,
                    // The same kind of agent as its parent.
                    profile: parent_thread.profile,
                    // Its parent's tenant owns it.
                    tenant: parent_thread.tenant,
                    // Its parent's turn, cut with it, runs again and delegates anew.
                    on_interrupt: OnInterrupt::Mark,
                },
                None,
            )
            .await
            .map_err(|e| e.to_string())?;
        store
            .record_delegation(&child.id, parent)
            .await
            .map_err(|e| e.to_string())?;
        // The child runs where its parent runs: this node took its lease when it was created.
        let fence = match crate::events::claim_lease(store, None, &child.id).await {
            Ok(Claim::Held { fence, .. }) => Some(fence),
            Ok(Claim::Unclustered) => None,
            Ok(Claim::Elsewhere { .. }) => {
                return Err(format!("thread {} is held by another node", child.id))
            }
            Err(err) => return Err(err.to_string()),
        };
        let (caller, unattended) = (self.inner.runtime)
            .acting(parent)
            // A turn the CLI started by itself.
            .unwrap_or_else(|| (Caller::cli(), false));
        info!(parent = %parent, child = %child.id, caller = %caller.subject, "Delegating to a child thread.");
        // Nested: the parent holds a place under the concurrency limit and waits for this turn.
        let child_message = NewMessage {
            thread_id: child.id.clone(),
            content: prompt,
            client_message_id: None,
            model: None,
            permission_mode: None,
            mcp_servers: None,
            timeout: Some(timeout),
            fence,
            // The child acts for its parent's caller; nobody attends the child of a turn nobody
            // attends.
            unattended,
            caller,
            traceparent,
        };
        let reply = async {
            self.accept(child_message, Nesting::InToolCall)
                .await?
                .finish()
                .await
        }
        .await
        .map_err(|e| e.to_string())?;
        Ok(DelegateReply {
            child_thread_id: child.id,
            text: reply.message.content,
        })
    }
}
