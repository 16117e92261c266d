//! [`TurnPlan`]: a turn as a value, built once before it runs (its thread's row, its message,
//! whom it acts for and the key that sent it, what it is charged to, its process's spec, its
//! bounds, its fence and its trace) and handed whole to the task that runs it
//! ([`super::turn`]), with its [`Source`]: a message (sent now, or a cut one run again) that
//! waits in its thread's line and checks out a process, or a turn the CLI started by itself on
//! the thread's warm process.

use std::time::Duration;

use opentelemetry::KeyValue;

use plugin_contract::UserContent;

use super::conclude::Started;
use super::runtime::QueueTicket;
use super::{Nesting, NewMessage, Pipeline};
use crate::budget::{Budgets, Charge};
use crate::caller::Caller;
use crate::launch::ProcessSpec;
use crate::pool::{Adopted, Lease};
use crate::store::{Fence, KeyRow, MessageRow, StoreError, ThreadRow};
use crate::traces::TurnTrace;
use crate::turn_error::TurnError;

/// One turn, as it will run.
pub(super) struct TurnPlan {
    /// The thread's row as the turn was accepted (read again only when it waited behind another
    /// turn, which may have changed it).
    pub(super) thread: ThreadRow,
    /// The user message it answers, stored.
    pub(super) user: MessageRow,
    /// What goes to the CLI: the message's content (a re-driven one's with the notice of its
    /// cut).
    pub(super) content: UserContent,
    /// Whom it acts for: a child it delegates to acts for the same caller.
    pub(super) caller: Caller,
    /// No person attends it (a schedule's run): a permission left to a person is denied.
    pub(super) unattended: bool,
    /// The API key that sent it: its turns at once and its daily budget.
    pub(super) key: Option<KeyRow>,
    /// What it is charged to.
    pub(super) charge: Charge,
    /// What the message asked of its process; the spec is built from them.
    pub(super) asked: Asked,
    /// The spec of the process it checks out (`Err`: the thread's profile is gone).
    pub(super) spec: Result<ProcessSpec, TurnError>,
    /// Its total time bound, from when it starts.
    pub(super) timeout: Duration,
    /// This node's lease on the thread, when clustered: the turn's writes carry it.
    pub(super) fence: Option<Fence>,
    /// The message's `clientMessageId`: its caller may withdraw it while it waits in line.
    pub(super) client_message_id: Option<String>,
    pub(super) trace: TurnTrace,
}

/// What a message asks of its turn's process beyond the thread's own.
#[derive(Clone, Debug, Default)]
pub(super) struct Asked {
    /// The model (else the thread's).
    pub(super) model: Option<String>,
    pub(super) permission_mode: Option<String>,
    pub(super) mcp_servers: Option<Vec<String>>,
}

impl Asked {
    /// The model a turn on `thread` asks for: the message's, else the thread's.
    fn model_on(&self, thread: &ThreadRow) -> Option<String> {
        self.model.clone().or(thread.model.clone())
    }
}

/// What started a turn, and how it gets its process.
pub(super) enum Source {
    /// A message from the API, `/mcp`, a delegation or a schedule.
    Message(InLine),
    /// A message a cut left `interrupted`, run again (`redrive.rs`).
    Redrive(InLine),
    /// A turn the CLI started by itself on the thread's warm process (`cli_turn.rs`), taken
    /// over on its lease.
    Cli { lease: Lease, adopted: Adopted },
}

/// A message's turn: its place in the thread's line, and whether it runs inside another turn's
/// tool call.
pub(super) struct InLine {
    pub(super) ticket: QueueTicket,
    pub(super) nesting: Nesting,
}

impl Source {
    pub(super) fn started(&self) -> Started {
        match self {
            Source::Message(_) | Source::Redrive(_) => Started::ByMessage,
            Source::Cli { .. } => Started::ByCli,
        }
    }
}

impl TurnPlan {
    /// The model the turn asks for: the message's, else the thread's.
    pub(super) fn model(&self) -> Option<String> {
        self.asked.model_on(&self.thread)
    }
}

impl Pipeline {
    /// What a turn of `thread` sent by `caller` is charged to, and the key that sent it.
    pub(super) async fn charge(
        &self,
        thread: &ThreadRow,
        caller: &Caller,
    ) -> Result<(Option<KeyRow>, Charge), StoreError> {
        let key = self.inner.keys.of(caller).await?;
        let charge = Budgets::charge(&self.inner.parts.store, thread.clone())
            .await?
            .with_key(key.as_ref());
        Ok((key, charge))
    }

    /// The plan of message `user`'s turn, sent as `msg` says to `thread`.
    pub(super) fn plan(
        &self,
        thread: ThreadRow,
        user: MessageRow,
        msg: NewMessage,
        (key, charge): (Option<KeyRow>, Charge),
    ) -> TurnPlan {
        let trace = self.inner.parts.traces.turn(
            msg.traceparent.as_deref(),
            thread.id.as_str(),
            user.id.as_str(),
        );
        trace.content("gen_ai.input.messages", "user", &user.content);
        let asked = Asked {
            model: msg.model,
            permission_mode: msg.permission_mode,
            mcp_servers: msg.mcp_servers,
        };
        let spec = self.spec_of(&thread, &asked, &trace);
        TurnPlan {
            thread,
            user,
            content: msg.content,
            caller: msg.caller,
            unattended: msg.unattended,
            key,
            charge,
            asked,
            spec,
            timeout: msg
                .timeout
                .unwrap_or(self.inner.parts.settings.turn_timeout),
            fence: msg.fence,
            client_message_id: msg.client_message_id,
            trace,
        }
    }

    /// The plan of a turn the CLI started by itself on `thread`'s process, its message `user`
    /// stored: it acts for the CLI, charged to the thread (and whoever delegated to it).
    pub(super) async fn cli_plan(&self, user: MessageRow) -> Result<TurnPlan, StoreError> {
        let thread = self
            .inner
            .parts
            .store
            .require_thread(&user.thread_id)
            .await?;
        let caller = Caller::cli();
        let (key, charge) = self.charge(&thread, &caller).await?;
        // Its own trace: nothing outside started it.
        let trace = self
            .inner
            .parts
            .traces
            .turn(None, thread.id.as_str(), user.id.as_str());
        trace.set([KeyValue::new("harness.origin", "cli")]);
        // The thread's, as its process was started.
        let spec = self.spec_of(&thread, &Asked::default(), &trace);
        Ok(TurnPlan {
            content: user.user_content(),
            thread,
            user,
            caller,
            unattended: false,
            key,
            charge,
            asked: Asked::default(),
            spec,
            timeout: self.inner.parts.settings.turn_timeout,
            fence: None,
            client_message_id: None,
            trace,
        })
    }

    /// The spec of the process a turn of `thread` checks out: the thread's, with what its
    /// message asked for.
    pub(super) fn spec_of(
        &self,
        thread: &ThreadRow,
        asked: &Asked,
        trace: &TurnTrace,
    ) -> Result<ProcessSpec, TurnError> {
        let model = asked.model_on(thread);
        let mut spec = self
            .inner
            .parts
            .pool
            .spec(thread, model)
            .map_err(|err| TurnError::ProfileUnavailable(err.to_string()))?;
        if asked.permission_mode.is_some() {
            spec.options
                .permission_mode
                .clone_from(&asked.permission_mode);
        }
        spec.mcp_servers.clone_from(&asked.mcp_servers);
        spec.traceparent = trace.traceparent();
        Ok(spec)
    }
}
