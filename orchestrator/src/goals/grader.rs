//! The grader: for each graded iteration, a child thread of the goal's thread with a context of
//! its own, in the same working folder, on the same profile and model, whose one turn answers
//! in [`verdict_schema`]. Its turns count against the goal thread's budgets, as a delegated
//! child's do.

use std::path::PathBuf;

use serde_json::{json, Value};

use plugin_contract::{ThreadId, UserContent};

use crate::api::events::{GoalResult, GoalUsage};
use crate::api::threads::PostMessage;
use crate::caller::Caller;
use crate::pipeline::{Pipeline, PipelineError};
use crate::service::{ServiceError, ThreadService};
use crate::store::{GoalRow, MessageRow, NewThread, OnInterrupt, Store, Workspace};

/// What the grader said of an iteration, and what saying it cost.
#[derive(Debug)]
pub(super) struct Verdict {
    pub result: GoalResult,
    pub explanation: String,
    pub usage: GoalUsage,
}

/// Why there is no verdict.
#[derive(Debug, thiserror::Error)]
pub(super) enum GradeError {
    /// The grader's turn ended without a reply.
    #[error("{0}")]
    Turn(PipelineError),
    #[error("{0}")]
    Service(ServiceError),
    /// Its reply is not a verdict.
    #[error("{0}")]
    Verdict(String),
}

impl From<ServiceError> for GradeError {
    fn from(err: ServiceError) -> Self {
        match err {
            ServiceError::Pipeline(err) => GradeError::Turn(err),
            other => GradeError::Service(other),
        }
    }
}

pub(super) struct Grader {
    pipeline: Pipeline,
    store: Store,
    /// Where threads without a workspace work (`launch::thread_workdir`).
    threads_dir: PathBuf,
}

impl Grader {
    pub fn new(pipeline: Pipeline, store: Store, threads_dir: PathBuf) -> Grader {
        Grader {
            pipeline,
            store,
            threads_dir,
        }
    }

    /// A new grader thread for `goal`'s current iteration.
    pub async fn start(&self, goal: &GoalRow) -> Result<ThreadId, GradeError> {
        let parent = self
            .store
            .require_thread(&goal.thread_id)
            .await
            .map_err(|err| GradeError::Service(err.into()))?;
        // The work is in the thread's folder: the grader reads it there.
        let folder = match parent.workspace.as_deref() {
            Some(workspace) => workspace.path().to_path_buf(),
            None => crate::launch::thread_workdir(&self.threads_dir, &parent.id),
        };
        let new = NewThread {
            title: Some(format!("grader of {} ({})", goal.id, goal.iteration)),
            model: parent.model,
            parent_id: Some(parent.id.clone()),
            output_schema: Some(verdict_schema()),
            workspace: Some(Workspace::Path { path: folder }),
            profile: parent.profile,
            tenant: parent.tenant,
            on_interrupt: OnInterrupt::Mark,
            ..NewThread::default()
        };
        let grader = self
            .pipeline
            .create_thread(new, None)
            .await
            .map_err(GradeError::Turn)?;
        self.store
            .record_delegation(&grader.id, &parent.id)
            .await
            .map_err(|err| GradeError::Service(err.into()))?;
        Ok(grader.id)
    }

    /// The grader's verdict on the work; `reply`: what the thread last said of it, when known.
    pub async fn grade(
        &self,
        threads: &ThreadService,
        goal: &GoalRow,
        grader: &ThreadId,
        caller: &Caller,
        reply: Option<String>,
    ) -> Result<Verdict, GradeError> {
        let body = PostMessage {
            content: UserContent::Text(grade_prompt(goal, reply.as_deref())),
            client_message_id: Some(grading_id(goal)),
            model: None,
            permission_mode: None,
            mcp_servers: None,
        };
        let sent = threads
            .send_and_wait(caller, grader.clone(), body, None)
            .await?;
        let reply = sent.outcome.map_err(GradeError::Turn)?;
        verdict(&reply.message)
    }
}

/// The `clientMessageId` of the grader's message for the goal's current iteration: what stops
/// it, queued or running.
pub(super) fn grading_id(goal: &GoalRow) -> String {
    format!("grade:{}:{}", goal.id, goal.iteration)
}

/// The schema of the grader's answer.
pub(super) fn verdict_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "result": {"type": "string", "enum": ["satisfied", "needs_revision", "failed"]},
            "explanation": {"type": "string"}
        },
        "required": ["result", "explanation"],
        "additionalProperties": false
    })
}

/// The verdict in the grader's reply, and what the reply cost.
fn verdict(reply: &MessageRow) -> Result<Verdict, GradeError> {
    let output = reply
        .structured_output
        .as_ref()
        .ok_or_else(|| GradeError::Verdict("the grader gave no verdict".into()))?;
    let result = match output.get("result").and_then(Value::as_str) {
        Some("satisfied") => GoalResult::Satisfied,
        Some("needs_revision") => GoalResult::NeedsRevision,
        Some("failed") => GoalResult::Failed,
        other => {
            return Err(GradeError::Verdict(format!(
                "the grader's result {other:?} is not a verdict"
            )))
        }
    };
    let explanation = output
        .get("explanation")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let tokens = |n: Option<i64>| n.unwrap_or(0);
    let usage = GoalUsage {
        input_tokens: tokens(reply.input_tokens),
        output_tokens: tokens(reply.output_tokens),
        cache_read_tokens: tokens(reply.cache_read_tokens),
        cache_write_tokens: tokens(reply.cache_write_tokens),
    };
    Ok(Verdict {
        result,
        explanation,
        usage,
    })
}

/// What the grader is asked.
fn grade_prompt(goal: &GoalRow, reply: Option<&str>) -> String {
    let said = match reply {
        Some(reply) if !reply.trim().is_empty() => {
            format!("\n\nThe agent's last message about its work:\n\n{reply}")
        }
        _ => String::new(),
    };
    format!(
        "You are grading work another agent did in this working directory, against a rubric. \
         Inspect the files; change nothing.\n\nThe task:\n\n{}\n\nThe rubric:\n\n{}{said}\n\n\
         Answer with `satisfied` when every criterion holds, `needs_revision` with what fails \
         and how to fix it when some do not, or `failed` when the rubric cannot be met. Your \
         explanation says which criteria passed and which failed.",
        goal.description, goal.rubric
    )
}
