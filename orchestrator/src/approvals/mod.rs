//! Tool approvals: every permission the CLI would ask a person for (`can_use_tool`, since children
//! run with `--permission-prompt-tool stdio`), and every shell command of a skill the CLI is about
//! to run (its `PreSkillShellCommand` hook, asked as a `Bash` call of the command with input
//! `{"command", "skill"}`: `pool::lease::PermissionRequest`), is decided here, by [`policy`]
//! (Harness's own tools, the rules, the mode) or, in `ask` mode, by a person answering over the
//! API within `approvals.timeout`. [`policy`] does no IO; `shell.rs` and `paths.rs` read the
//! `Bash(…)` and path rules.
//!
//! **Invariants:** every request is stored with its decision and who made it, and counted; a
//! request is decided exactly once (the one who takes it out of the waiting map decides, stores,
//! then wakes the turn); a refusal is a message the model reads, never a failed turn; nothing
//! waits for a person past an interrupt, a shutdown or the end of its turn.

mod paths;
pub mod policy;
mod shell;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use tokio::sync::oneshot;
use tracing::{info, warn};

use plugin_contract::ThreadId;

use crate::api::events::{PermissionDecided, PermissionRequested, ThreadEvent};
use crate::events::EventBus;
use crate::metrics::ApprovalMetrics;
use crate::store::{MessageId, NewPermission, PermissionRow, Store, StoreError};
use crate::sync::lock;
use policy::{DecidedBy, Policy, ThreadRules, Verdict};

/// One permission request of a running turn: a `can_use_tool`, or a skill's shell command as a
/// `Bash` call.
#[derive(Clone, Debug)]
pub struct Request {
    pub request_id: String,
    pub thread: ThreadId,
    pub message: Option<MessageId>,
    pub tool_name: String,
    pub input: Value,
    pub tool_use_id: Option<String>,
    /// The folder the asking process works in (its spec's): where relative paths and relative
    /// path rules are anchored.
    pub cwd: PathBuf,
    /// The asking process's profile, whose approvals decide.
    pub profile: String,
    /// No person attends the turn (a schedule's run): what would wait for one is denied.
    pub unattended: bool,
}

/// A person's answer (`POST /api/threads/{id}/permissions/{requestId}`).
#[derive(Clone, Debug)]
pub struct Answer {
    pub allow: bool,
    pub message: Option<String>,
    /// What the tool runs with instead of the model's input (allow only).
    pub updated_input: Option<Value>,
    /// Allow it always on this thread: the narrowest rules that name the request
    /// ([`Policy::rules_for`]) are added to the thread with the decision (allow only).
    pub always: bool,
    /// Who answered.
    pub by: crate::caller::Caller,
}

/// Why an answer was refused. The API answers 404 and 409.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    #[error("thread {thread} has no permission request {request_id}")]
    NotFound {
        thread: ThreadId,
        request_id: String,
    },
    #[error("permission request {request_id} was already decided: {status} by {decided_by}")]
    AlreadyDecided {
        request_id: String,
        status: String,
        decided_by: String,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The decision of one request, as it goes to the store, the stream and the CLI.
struct Decision {
    allow: bool,
    by: DecidedBy,
    /// The rule, the mode, the person's message; for a denial, what the model reads.
    reason: String,
    updated_input: Option<Value>,
    /// The caller whose answer it was, for a person's decision.
    answered_by: Option<String>,
    /// A person allowed it always: the waiting request's rules go to the thread.
    always: bool,
}

struct Waiting {
    thread: ThreadId,
    tool_name: String,
    /// What allowing it always adds to the thread ([`Policy::rules_for`]).
    rules: Vec<String>,
    tx: oneshot::Sender<Decision>,
}

/// The approvals of one daemon. Cheap to clone.
#[derive(Clone)]
pub struct Approvals {
    inner: Arc<Inner>,
}

struct Inner {
    /// Each profile's policy, by profile name (`Config::approvals_of`).
    policies: BTreeMap<String, Policy>,
    /// The policies of profiles made while the daemon runs ([`Approvals::add_policy`]).
    made: Mutex<BTreeMap<String, Policy>>,
    timeout: Duration,
    store: Store,
    events: EventBus,
    metrics: ApprovalMetrics,
    /// Requests waiting for a person, by request id.
    waiting: Mutex<HashMap<String, Waiting>>,
}

impl Approvals {
    /// `policies`: each profile's, by name; a request of a profile with none is denied.
    pub fn new(
        policies: BTreeMap<String, Policy>,
        timeout: Duration,
        store: Store,
        events: EventBus,
    ) -> Approvals {
        Approvals {
            inner: Arc::new(Inner {
                policies,
                made: Mutex::default(),
                timeout,
                store,
                events,
                metrics: ApprovalMetrics::default(),
                waiting: Mutex::default(),
            }),
        }
    }

    /// Adds the policy of the profile `name`, made while the daemon runs; a profile that has
    /// one keeps it (a made profile does not change).
    pub fn add_policy(&self, name: &str, policy: Policy) {
        if !self.inner.policies.contains_key(name) {
            lock(&self.inner.made)
                .entry(name.to_owned())
                .or_insert(policy);
        }
    }

    pub fn metrics(&self) -> &ApprovalMetrics {
        &self.inner.metrics
    }

    /// Decides `request` (waiting for a person in `ask` mode) and returns the CLI's answer:
    /// `{"behavior": "allow", "updatedInput"}` or `{"behavior": "deny", "message"}`.
    pub async fn decide(&self, request: Request) -> Value {
        // The policy matches absolute paths.
        let cwd = std::path::absolute(&request.cwd).unwrap_or_else(|_| request.cwd.clone());
        let policy = match self.inner.policies.get(&request.profile) {
            Some(policy) => Some(policy.clone()),
            None => lock(&self.inner.made).get(&request.profile).cloned(),
        };
        let thread_rules = match &policy {
            Some(policy) => self.thread_rules(policy, &request.thread).await,
            None => ThreadRules::default(),
        };
        let (tool, input) = (&request.tool_name, &request.input);
        let verdict = policy
            .as_ref()
            .map(|policy| policy.decide_in(tool, input, &cwd, &thread_rules));
        let verdict = verdict.unwrap_or_else(|| Verdict::Deny {
            by: DecidedBy::Policy,
            reason: format!(
                "the thread's profile `{}` has no approvals",
                request.profile
            ),
        });
        let decision = match verdict {
            Verdict::Allow { by, reason } => self.settled(&request, true, by, reason).await,
            Verdict::Deny { by, reason } => {
                let reason = refusal(&request.tool_name, by, &reason, self.inner.timeout);
                self.settled(&request, false, by, reason).await
            }
            Verdict::Ask if request.unattended => {
                let reason = "nobody attends this turn (a schedule's run): the profile's rules \
                              allow it or nothing does";
                let timeout = self.inner.timeout;
                let reason = refusal(&request.tool_name, DecidedBy::Policy, reason, timeout);
                self.settled(&request, false, DecidedBy::Policy, reason)
                    .await
            }
            Verdict::Ask => {
                let rules = policy.map_or_else(Vec::new, |p| p.rules_for(tool, input, &cwd));
                self.ask(&request, rules).await
            }
        };
        cli_answer(&request.input, decision)
    }

    /// The rules people added to `thread`, as `policy` reads them; none when they cannot be
    /// read (the request is then decided as if the thread had none: asked, not allowed).
    async fn thread_rules(&self, policy: &Policy, thread: &ThreadId) -> ThreadRules {
        let stored = match self.inner.store.thread_rules(thread).await {
            Ok(rows) => rows.into_iter().map(|row| row.rule).collect::<Vec<_>>(),
            Err(err) => {
                warn!(error = %err, thread_id = %thread, "Could not read the thread's rules; deciding without them.");
                return ThreadRules::default();
            }
        };
        let (rules, bad) = policy.thread_rules(&stored);
        for err in bad {
            warn!(thread_id = %thread, error = %err, "A stored thread rule does not parse; left out.");
        }
        rules
    }

    /// A decision made without a person: stored, published and counted.
    async fn settled(
        &self,
        request: &Request,
        allow: bool,
        by: DecidedBy,
        reason: String,
    ) -> Decision {
        let status = if allow { "allowed" } else { "denied" };
        if let Err(err) = self
            .inner
            .store
            .record_permission(
                new_permission(request),
                status,
                Some(by.as_str()),
                Some(&reason),
            )
            .await
        {
            warn!(error = %err, request_id = %request.request_id, "Could not record a permission decision.");
        }
        let decision = Decision {
            allow,
            by,
            reason,
            updated_input: None,
            answered_by: None,
            always: false,
        };
        self.published(
            &request.thread,
            &request.request_id,
            &request.tool_name,
            &decision,
        );
        decision
    }

    /// Holds the request for a person until an answer, the timeout, an interrupt or shutdown.
    /// `rules`: what allowing it always adds to the thread.
    async fn ask(&self, request: &Request, rules: Vec<String>) -> Decision {
        let (tx, rx) = oneshot::channel();
        let id = request.request_id.clone();
        lock(&self.inner.waiting).insert(
            id.clone(),
            Waiting {
                thread: request.thread.clone(),
                tool_name: request.tool_name.clone(),
                rules,
                tx,
            },
        );
        self.pending_changed();
        // Taken out of the map if this future is dropped (the turn ended) before a decision.
        let guard = WaitGuard {
            approvals: self.clone(),
            id: id.clone(),
        };
        if let Err(err) = self
            .inner
            .store
            .record_permission(new_permission(request), "pending", None, None)
            .await
        {
            warn!(error = %err, request_id = %id, "Could not store a permission request; denying it.");
            self.settle(
                &id,
                denial(DecidedBy::Policy, "the request could not be stored".into()),
            )
            .await;
        } else {
            self.inner.events.emit(
                &request.thread,
                request.message.as_ref(),
                ThreadEvent::PermissionRequested(PermissionRequested {
                    request_id: id.clone(),
                    tool_name: request.tool_name.clone(),
                    input: request.input.clone(),
                    tool_use_id: request.tool_use_id.clone(),
                }),
            );
            info!(thread_id = %request.thread, request_id = %id, tool = %request.tool_name, "Waiting for a person to approve a tool.");
        }
        let mut rx = rx;
        let decision = tokio::select! {
            decision = &mut rx => decision.ok(),
            _ = tokio::time::sleep(self.inner.timeout) => {
                let reason = refusal(&request.tool_name, DecidedBy::Timeout, "", self.inner.timeout);
                self.settle(&id, denial(DecidedBy::Timeout, reason)).await;
                rx.await.ok()
            }
        };
        drop(guard);
        decision.unwrap_or_else(|| denial(DecidedBy::Interrupt, interrupted(&request.tool_name)))
    }

    /// Takes the request out of the waiting map and, when this call took it, stores, publishes
    /// and delivers `decision`. False when someone else decided it first (or it is unknown).
    async fn settle(&self, id: &str, mut decision: Decision) -> bool {
        let Some(waiting) = lock(&self.inner.waiting).remove(id) else {
            return false;
        };
        self.pending_changed();
        let status = if decision.allow { "allowed" } else { "denied" };
        let rules = if decision.allow && decision.always {
            decision.reason = always_reason(&decision.reason, &waiting.rules);
            waiting.rules.as_slice()
        } else {
            &[]
        };
        if let Err(err) = self
            .inner
            .store
            .decide_permission(
                &waiting.thread,
                id,
                crate::store::Decided {
                    status,
                    decided_by: decision.by.as_str(),
                    answered_by: decision.answered_by.as_deref(),
                    reason: Some(&decision.reason),
                    rules,
                },
            )
            .await
        {
            warn!(error = %err, request_id = %id, "Could not record a permission decision.");
        }
        self.published(&waiting.thread, id, &waiting.tool_name, &decision);
        let _ = waiting.tx.send(decision);
        true
    }

    fn published(&self, thread: &ThreadId, id: &str, tool: &str, decision: &Decision) {
        let verdict = if decision.allow { "allow" } else { "deny" };
        self.inner.metrics.decided(verdict, decision.by.as_str());
        info!(thread_id = %thread, request_id = %id, tool, decision = verdict, by = decision.by.as_str(), "Tool permission decided.");
        self.inner.events.emit(
            thread,
            None,
            ThreadEvent::PermissionDecided(PermissionDecided {
                request_id: id.to_owned(),
                tool_name: tool.to_owned(),
                decision: verdict.to_owned(),
                decided_by: decision.by.as_str().to_owned(),
                reason: Some(decision.reason.clone()),
            }),
        );
    }

    fn pending_changed(&self) {
        let pending = lock(&self.inner.waiting).len();
        self.inner.metrics.set_pending(pending);
    }

    /// A person's answer to a pending request of `thread`; the stored request, decided.
    pub async fn answer(
        &self,
        thread: &ThreadId,
        request_id: &str,
        answer: Answer,
    ) -> Result<PermissionRow, AnswerError> {
        let ours = lock(&self.inner.waiting)
            .get(request_id)
            .is_some_and(|w| &w.thread == thread);
        let decision = if answer.allow {
            Decision {
                allow: true,
                by: DecidedBy::Person,
                reason: answer
                    .message
                    .unwrap_or_else(|| "allowed by a person".into()),
                updated_input: answer.updated_input,
                answered_by: Some(answer.by.subject),
                always: answer.always,
            }
        } else {
            let reason = answer
                .message
                .unwrap_or_else(|| "A person denied this tool use; it was not run.".into());
            Decision {
                answered_by: Some(answer.by.subject),
                ..denial(DecidedBy::Person, reason)
            }
        };
        let settled = ours && self.settle(request_id, decision).await;
        let row = self.inner.store.permission(thread, request_id).await?;
        match row {
            Some(row) if settled => Ok(row),
            Some(row) => Err(AnswerError::AlreadyDecided {
                request_id: request_id.to_owned(),
                status: row.status,
                decided_by: row.decided_by.unwrap_or_else(|| "nobody yet".into()),
            }),
            None => Err(AnswerError::NotFound {
                thread: thread.clone(),
                request_id: request_id.to_owned(),
            }),
        }
    }

    /// Denies what `thread` waits for (an interrupt); `None` denies every thread's (shutdown).
    pub async fn deny_waiting(&self, thread: Option<&ThreadId>) {
        let ids: Vec<(String, String)> = lock(&self.inner.waiting)
            .iter()
            .filter(|(_, w)| thread.is_none_or(|t| &w.thread == t))
            .map(|(id, w)| (id.clone(), w.tool_name.clone()))
            .collect();
        for (id, tool) in ids {
            self.settle(&id, denial(DecidedBy::Interrupt, interrupted(&tool)))
                .await;
        }
    }
}

/// Takes a request out of the waiting map when the turn waiting on it goes away undecided, and
/// records it as denied.
struct WaitGuard {
    approvals: Approvals,
    id: String,
}

impl Drop for WaitGuard {
    fn drop(&mut self) {
        if !lock(&self.approvals.inner.waiting).contains_key(&self.id) {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        let (approvals, id) = (self.approvals.clone(), self.id.clone());
        tokio::spawn(async move {
            let reason = "the turn ended before anyone answered".to_owned();
            approvals
                .settle(&id, denial(DecidedBy::Interrupt, reason))
                .await;
        });
    }
}

fn denial(by: DecidedBy, reason: String) -> Decision {
    Decision {
        allow: false,
        by,
        reason,
        updated_input: None,
        answered_by: None,
        always: false,
    }
}

/// A person's reason for allowing a request always: what it added to the thread, or that no
/// rule could name the request, so it was allowed this once.
fn always_reason(reason: &str, rules: &[String]) -> String {
    if rules.is_empty() {
        format!(
            "{reason}; no rule names this request exactly, so it was allowed once and will be \
             asked again"
        )
    } else {
        format!(
            "{reason}; allowed always on this thread: {}",
            rules.join(", ")
        )
    }
}

fn new_permission(request: &Request) -> NewPermission<'_> {
    NewPermission {
        request_id: &request.request_id,
        thread_id: &request.thread,
        message_id: request.message.as_ref(),
        tool_use_id: request.tool_use_id.as_deref(),
        tool_name: &request.tool_name,
        input: &request.input,
    }
}

/// What the model reads when a tool is refused without a person.
fn refusal(tool: &str, by: DecidedBy, reason: &str, timeout: Duration) -> String {
    match by {
        DecidedBy::Rule => {
            format!("Harness refused `{tool}` ({reason}); it was not run.")
        }
        DecidedBy::Timeout => format!(
            "Nobody approved `{tool}` within {} s (approvals.timeout); it was not run.",
            timeout.as_secs()
        ),
        _ => format!(
            "Harness refused `{tool}`: tools that need approval are denied ({reason}); it was \
             not run. The operator can allow it with an approvals rule or approvals.mode."
        ),
    }
}

fn interrupted(tool: &str) -> String {
    format!("The turn was interrupted before `{tool}` was approved; it was not run.")
}

/// The `can_use_tool` response the CLI expects.
fn cli_answer(input: &Value, decision: Decision) -> Value {
    if decision.allow {
        json!({"behavior": "allow",
               "updatedInput": decision.updated_input.unwrap_or_else(|| input.clone())})
    } else {
        json!({"behavior": "deny", "message": decision.reason})
    }
}
