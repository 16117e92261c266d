//! The events of a thread's stream: [`ThreadEvent`], one variant per kind, each with its payload
//! type. The bus (`crate::events`) takes a `ThreadEvent`, stores `kind` and `data` as it
//! serializes, and the OpenAPI document derives the SSE schemas from the same enum, so a kind's
//! name, payload and documentation are one thing and cannot drift.
//!
//! The CLI's own events (`text_delta` … `rate_limit`) carry `claude_cli`'s payload types as they
//! are; the daemon's (`message_received`, `turn_*`, `process_ready`, `model_request_*`,
//! `permission_*`, `thread_*`) are defined here.

use chrono::{DateTime, Utc};
use plugin_contract::SessionStart;
use serde::Serialize;
use utoipa::ToSchema;

use super::Message;
use crate::budget::BudgetExceeded;
use crate::store::{
    Announcement, EndCause, Ending, EventRow, MessageId, MessageStatus, Origin, RunRef, TurnKey,
};

mod transcript;
mod webhooks;

pub use transcript::{TranscriptAtRisk, TranscriptRepaired, TranscriptUnrepaired};
pub use webhooks::{WebhookEvent, WebhookKind, WebhookSchemas};

/// One event of a thread: the SSE `event:` name is its `kind`, the `data:` line holds `data`.
/// Every turn ends with exactly one of `turn_finished` and `turn_failed`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum ThreadEvent {
    /// A message was stored and queued.
    MessageReceived(MessageReceived),
    /// A schedule sent the message that follows (`POST /api/schedules`).
    ScheduleRunStarted(ScheduleRunStarted),
    /// A turn that a crash, a shutdown or a takeover cut runs again by itself (the thread's
    /// `onInterrupt` is `retry`); its `turn_started` follows.
    TurnRedriven(TurnRedriven),
    /// The message's turn began (before a process is found or started).
    TurnStarted(TurnStarted),
    /// A process took the turn.
    ProcessReady(ProcessReady),
    /// The CLI runs the turn in another permission mode than the one asked for (managed
    /// settings narrowed it): both, as the CLI reported them.
    PermissionModeNarrowed(PermissionModeNarrowed),
    /// The model gateway took a `POST /v1/messages` of the thread's process (`[gateway]`);
    /// its `model_request_finished` follows, with the same `requestId`.
    ModelRequestStarted(ModelRequestStarted),
    /// A model request's response ended: streamed to its end, cut, or refused; what it used.
    ModelRequestFinished(ModelRequestFinished),
    /// A piece of the reply as the API streams it (not under `claude.profile = "lean"`).
    TextDelta(claude_cli::TextDelta),
    /// A complete text block of the reply.
    AssistantText(claude_cli::AssistantText),
    /// A complete thinking block (extended thinking): what the model reasoned before it
    /// answered; empty when the API redacted it.
    AssistantThinking(claude_cli::AssistantThinking),
    /// The model called a tool.
    ToolCallStarted(claude_cli::ToolCallStarted),
    /// A tool result went back to the model.
    ToolCallFinished(claude_cli::ToolCallFinished),
    /// The CLI is retrying a failed Messages API request.
    ApiRetry(claude_cli::ApiRetry),
    /// The API's rate-limit state changed (OAuth logins only; with an API key the CLI reports
    /// pressure as `api_retry`).
    RateLimit(claude_cli::RateLimit),
    /// The model refused and the CLI asked another: the reply comes from `fallbackModel`.
    ModelRefusalFallback(claude_cli::ModelRefusalFallback),
    /// The CLI's memory brought files into the turn (its auto memory on, `claude.auto_memory`).
    MemoryRecall(claude_cli::MemoryRecall),
    /// Transcript entries of the turn could not be stored: the session's stored transcript
    /// (which restores it) misses them until a `transcript_repaired`.
    TranscriptAtRisk(TranscriptAtRisk),
    /// The held transcript entries were stored: the stored transcript is whole again.
    TranscriptRepaired(TranscriptRepaired),
    /// A session's stored transcript misses entries no one can write any more: it was not
    /// resumed; the turn ran in a fresh session with the history injected.
    TranscriptUnrepaired(TranscriptUnrepaired),
    /// The turn waits for the concurrency limit, lowered while the API pushes back
    /// (`rate_limit.*`); sent once, before the wait. The turn goes on in arrival order.
    TurnThrottled(TurnThrottled),
    /// The CLI asks whether a tool may run and a person is to answer (`approvals.mode = "ask"`).
    PermissionRequested(PermissionRequested),
    /// A tool permission was decided.
    PermissionDecided(PermissionDecided),
    /// A tool the client runs (a custom tool of the Managed Agents API) waits for the client's
    /// result, then has it (or was cancelled).
    ClientToolCall(ClientToolCall),
    /// The thread's walls stopped a process of its tree: its memory or process limit was
    /// reached (`[sandbox]`).
    LimitReached(LimitReached),
    /// A goal was set: the thread works on its description until its grader is satisfied
    /// (`crate::goals`).
    GoalSet(GoalSet),
    /// The goal's grader began grading an iteration's work.
    GoalGradingStarted(GoalGradingStarted),
    /// An iteration of the goal ended: graded, or cut before its grade. Unless the result is
    /// `needs_revision`, the goal is over.
    GoalGraded(GoalGraded),
    /// The turn ended with a reply. Exactly one of this and `turn_failed` ends every turn.
    TurnFinished(TurnFinished),
    /// The turn ended without a reply.
    TurnFailed(TurnFailed),
    /// The thread was archived: its process stopped; it takes no message until unarchived.
    ThreadArchived(ThreadArchived),
    /// The thread is being deleted: its last event, seen only by streams open at the time (its
    /// rows, this one too, go with it).
    ThreadDeleted(ThreadDeleted),
    /// Never stored: the first frame of a replay that starts before what retention removed
    /// (`retention.events_max_age`). Events up to `compactedThrough` (its `id`) are gone; the
    /// thread's stored messages (`GET /api/threads/{id}`) hold every turn they were about.
    LogCompacted(LogCompacted),
}

impl ThreadEvent {
    /// Its kind: the SSE event name, and what the store files it under.
    pub fn kind(&self) -> EventKind {
        match self {
            ThreadEvent::MessageReceived(_) => EventKind::MessageReceived,
            ThreadEvent::ScheduleRunStarted(_) => EventKind::ScheduleRunStarted,
            ThreadEvent::TurnRedriven(_) => EventKind::TurnRedriven,
            ThreadEvent::TurnStarted(_) => EventKind::TurnStarted,
            ThreadEvent::ProcessReady(_) => EventKind::ProcessReady,
            ThreadEvent::PermissionModeNarrowed(_) => EventKind::PermissionModeNarrowed,
            ThreadEvent::ModelRequestStarted(_) => EventKind::ModelRequestStarted,
            ThreadEvent::ModelRequestFinished(_) => EventKind::ModelRequestFinished,
            ThreadEvent::TextDelta(_) => EventKind::TextDelta,
            ThreadEvent::AssistantText(_) => EventKind::AssistantText,
            ThreadEvent::AssistantThinking(_) => EventKind::AssistantThinking,
            ThreadEvent::ToolCallStarted(_) => EventKind::ToolCallStarted,
            ThreadEvent::ToolCallFinished(_) => EventKind::ToolCallFinished,
            ThreadEvent::ApiRetry(_) => EventKind::ApiRetry,
            ThreadEvent::RateLimit(_) => EventKind::RateLimit,
            ThreadEvent::ModelRefusalFallback(_) => EventKind::ModelRefusalFallback,
            ThreadEvent::MemoryRecall(_) => EventKind::MemoryRecall,
            ThreadEvent::TranscriptAtRisk(_) => EventKind::TranscriptAtRisk,
            ThreadEvent::TranscriptRepaired(_) => EventKind::TranscriptRepaired,
            ThreadEvent::TranscriptUnrepaired(_) => EventKind::TranscriptUnrepaired,
            ThreadEvent::TurnThrottled(_) => EventKind::TurnThrottled,
            ThreadEvent::PermissionRequested(_) => EventKind::PermissionRequested,
            ThreadEvent::PermissionDecided(_) => EventKind::PermissionDecided,
            ThreadEvent::ClientToolCall(_) => EventKind::ClientToolCall,
            ThreadEvent::LimitReached(_) => EventKind::LimitReached,
            ThreadEvent::GoalSet(_) => EventKind::GoalSet,
            ThreadEvent::GoalGradingStarted(_) => EventKind::GoalGradingStarted,
            ThreadEvent::GoalGraded(_) => EventKind::GoalGraded,
            ThreadEvent::TurnFinished(_) => EventKind::TurnFinished,
            ThreadEvent::TurnFailed(_) => EventKind::TurnFailed,
            ThreadEvent::ThreadArchived(_) => EventKind::ThreadArchived,
            ThreadEvent::ThreadDeleted(_) => EventKind::ThreadDeleted,
            ThreadEvent::LogCompacted(_) => EventKind::LogCompacted,
        }
    }

    /// The payload as stored and sent (`data`).
    pub fn data(&self) -> serde_json::Value {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut event)) => event.remove("data").unwrap_or_default(),
            // Every payload is a struct of plain values; serializing one cannot fail.
            _ => serde_json::Value::Null,
        }
    }
}

impl From<claude_cli::TurnEvent> for ThreadEvent {
    fn from(event: claude_cli::TurnEvent) -> Self {
        use claude_cli::TurnEvent;
        match event {
            TurnEvent::TextDelta(e) => ThreadEvent::TextDelta(e),
            TurnEvent::AssistantText(e) => ThreadEvent::AssistantText(e),
            TurnEvent::AssistantThinking(e) => ThreadEvent::AssistantThinking(e),
            TurnEvent::ToolCallStarted(e) => ThreadEvent::ToolCallStarted(e),
            TurnEvent::ToolCallFinished(e) => ThreadEvent::ToolCallFinished(e),
            TurnEvent::ApiRetry(e) => ThreadEvent::ApiRetry(e),
            TurnEvent::RateLimit(e) => ThreadEvent::RateLimit(e),
            TurnEvent::ModelRefusalFallback(e) => ThreadEvent::ModelRefusalFallback(e),
            TurnEvent::MemoryRecall(e) => ThreadEvent::MemoryRecall(e),
            TurnEvent::MirrorError(e) => ThreadEvent::TranscriptAtRisk(e.into()),
        }
    }
}

/// Every kind of event, by name: the SSE `event:` names `docs/events.md` lists. Each is the tag of
/// one [`ThreadEvent`] variant ([`ThreadEvent::kind`]); the tests hold the two lists together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    MessageReceived,
    ScheduleRunStarted,
    TurnRedriven,
    TurnStarted,
    ProcessReady,
    PermissionModeNarrowed,
    ModelRequestStarted,
    ModelRequestFinished,
    TextDelta,
    AssistantText,
    AssistantThinking,
    ToolCallStarted,
    ToolCallFinished,
    ApiRetry,
    RateLimit,
    ModelRefusalFallback,
    MemoryRecall,
    TranscriptAtRisk,
    TranscriptRepaired,
    TranscriptUnrepaired,
    TurnThrottled,
    PermissionRequested,
    PermissionDecided,
    ClientToolCall,
    LimitReached,
    GoalSet,
    GoalGradingStarted,
    GoalGraded,
    TurnFinished,
    TurnFailed,
    ThreadArchived,
    ThreadDeleted,
    LogCompacted,
}

impl EventKind {
    pub const ALL: [EventKind; 33] = [
        EventKind::MessageReceived,
        EventKind::ScheduleRunStarted,
        EventKind::TurnRedriven,
        EventKind::TurnStarted,
        EventKind::ProcessReady,
        EventKind::PermissionModeNarrowed,
        EventKind::ModelRequestStarted,
        EventKind::ModelRequestFinished,
        EventKind::TextDelta,
        EventKind::AssistantText,
        EventKind::AssistantThinking,
        EventKind::ToolCallStarted,
        EventKind::ToolCallFinished,
        EventKind::ApiRetry,
        EventKind::RateLimit,
        EventKind::ModelRefusalFallback,
        EventKind::MemoryRecall,
        EventKind::TranscriptAtRisk,
        EventKind::TranscriptRepaired,
        EventKind::TranscriptUnrepaired,
        EventKind::TurnThrottled,
        EventKind::PermissionRequested,
        EventKind::PermissionDecided,
        EventKind::ClientToolCall,
        EventKind::LimitReached,
        EventKind::GoalSet,
        EventKind::GoalGradingStarted,
        EventKind::GoalGraded,
        EventKind::TurnFinished,
        EventKind::TurnFailed,
        EventKind::ThreadArchived,
        EventKind::ThreadDeleted,
        EventKind::LogCompacted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::MessageReceived => "message_received",
            EventKind::ScheduleRunStarted => "schedule_run_started",
            EventKind::TurnRedriven => "turn_redriven",
            EventKind::TurnStarted => "turn_started",
            EventKind::ProcessReady => "process_ready",
            EventKind::PermissionModeNarrowed => "permission_mode_narrowed",
            EventKind::ModelRequestStarted => "model_request_started",
            EventKind::ModelRequestFinished => "model_request_finished",
            EventKind::TextDelta => "text_delta",
            EventKind::AssistantText => "assistant_text",
            EventKind::AssistantThinking => "assistant_thinking",
            EventKind::ToolCallStarted => "tool_call_started",
            EventKind::ToolCallFinished => "tool_call_finished",
            EventKind::ApiRetry => "api_retry",
            EventKind::RateLimit => "rate_limit",
            EventKind::ModelRefusalFallback => "model_refusal_fallback",
            EventKind::MemoryRecall => "memory_recall",
            EventKind::TranscriptAtRisk => "transcript_at_risk",
            EventKind::TranscriptRepaired => "transcript_repaired",
            EventKind::TranscriptUnrepaired => "transcript_unrepaired",
            EventKind::TurnThrottled => "turn_throttled",
            EventKind::PermissionRequested => "permission_requested",
            EventKind::PermissionDecided => "permission_decided",
            EventKind::ClientToolCall => "client_tool_call",
            EventKind::LimitReached => "limit_reached",
            EventKind::GoalSet => "goal_set",
            EventKind::GoalGradingStarted => "goal_grading_started",
            EventKind::GoalGraded => "goal_graded",
            EventKind::TurnFinished => "turn_finished",
            EventKind::TurnFailed => "turn_failed",
            EventKind::ThreadArchived => "thread_archived",
            EventKind::ThreadDeleted => "thread_deleted",
            EventKind::LogCompacted => "log_compacted",
        }
    }

    /// The kind a stored name stands for; `None` for a name this daemon does not know.
    pub fn parse(name: &str) -> Option<EventKind> {
        EventKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }

    /// True for the two kinds that end a turn.
    pub fn is_terminal(self) -> bool {
        matches!(self, EventKind::TurnFinished | EventKind::TurnFailed)
    }
}

/// `limit_reached`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitReached {
    /// `memory` or `processes`.
    pub limit: String,
    /// The limit: MiB for memory, tasks for processes.
    pub max: u64,
    /// The process stopped, with everything below it.
    pub pid: u32,
    /// Its command name.
    pub command: String,
    /// True when it was the thread's CLI itself: its turn ended, and the next starts a fresh
    /// process.
    pub process_stopped: bool,
    /// What the stopped process was told (on its standard error, which its tool shows the
    /// model).
    pub message: String,
}

impl From<walls::Breach> for LimitReached {
    fn from(breach: walls::Breach) -> Self {
        LimitReached {
            limit: breach.limit.as_str().to_owned(),
            max: breach.max,
            pid: breach.pid,
            command: breach.command,
            process_stopped: breach.root,
            message: breach.message,
        }
    }
}

/// `goal_set`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GoalSet {
    pub goal_id: String,
    /// The task.
    pub description: String,
    /// What the grader holds the work to (Markdown).
    pub rubric: String,
    /// How many iterations may be graded.
    pub max_iterations: i64,
}

/// `goal_grading_started`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GoalGradingStarted {
    pub goal_id: String,
    /// From 0.
    pub iteration: i64,
    /// The grader's thread: a child of this one, in a context of its own.
    #[schema(value_type = String)]
    pub grader_thread_id: plugin_contract::ThreadId,
}

/// `goal_graded`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GoalGraded {
    pub goal_id: String,
    pub iteration: i64,
    pub result: GoalResult,
    /// The grader's word, or why the iteration ended without one.
    pub explanation: String,
    /// False when the iteration ended before its grading began (interrupted, failed).
    pub graded: bool,
    /// What the grading cost (zero when it did not run).
    pub usage: GoalUsage,
}

/// How an iteration of a goal ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GoalResult {
    /// Every criterion holds: the goal is met.
    Satisfied,
    /// Some do not: the next iteration revises the work.
    NeedsRevision,
    /// Some do not, and no iteration is left.
    MaxIterationsReached,
    /// The rubric cannot be met, or the work or its grading failed.
    Failed,
    /// Someone interrupted it.
    Interrupted,
}

impl GoalResult {
    pub fn as_str(self) -> &'static str {
        match self {
            GoalResult::Satisfied => "satisfied",
            GoalResult::NeedsRevision => "needs_revision",
            GoalResult::MaxIterationsReached => "max_iterations_reached",
            GoalResult::Failed => "failed",
            GoalResult::Interrupted => "interrupted",
        }
    }

    /// Whether the goal is over.
    pub fn is_final(self) -> bool {
        self != GoalResult::NeedsRevision
    }
}

/// Tokens a goal's grading used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GoalUsage {
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cache_read_tokens: i64,
    pub cache_write_tokens: i64,
}

/// `log_compacted`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct LogCompacted {
    /// The id of the newest event removed; the events after it follow.
    pub compacted_through: i64,
}

/// `message_received`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageReceived {
    pub message_id: MessageId,
    /// The message's text.
    pub content: String,
    /// A message sent as blocks: its blocks, images and documents as file references
    /// (`fileId`, media type, size), never their bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocks: Option<Vec<claude_cli::ContentBlock>>,
    pub client_message_id: Option<String>,
    /// `cli` for a turn the CLI started by itself (`claude.scheduling_tools`); its content says
    /// what started it.
    pub origin: Origin,
}

/// `schedule_run_started`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRunStarted {
    pub schedule_id: String,
    pub run_id: i64,
    pub message_id: MessageId,
    pub trigger: crate::store::RunTrigger,
}

/// `turn_redriven`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnRedriven {
    pub message_id: MessageId,
    /// This run of the message, from 2 (the first re-drive).
    pub attempt: u32,
    /// What cut the previous run: `crash`, `shutdown` or `takeover`.
    pub cause: EndCause,
}

/// `turn_started`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnStarted {
    pub message_id: MessageId,
    pub origin: Origin,
    /// For origin `cli`: why the CLI started the turn (`schedule_wakeup`: a cron,
    /// `loop_wakeup`: a `ScheduleWakeup`, `task_notification`: a background task finished).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// `process_ready`.
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct ProcessReady {
    pub start: ProcessStart,
    pub pid: Option<u32>,
}

/// `permission_mode_narrowed`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionModeNarrowed {
    /// The mode the turn asked for (the message's `permissionMode`, else the profile's, else
    /// `default`).
    pub asked: String,
    /// The mode the CLI says is in effect (`system/init`, or its answer to
    /// `set_permission_mode`).
    pub in_effect: String,
}

/// How the process that took a turn came to be.
#[derive(Clone, Copy, Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ProcessStart {
    /// It served this thread before: the CLI holds the history.
    Warm,
    /// Started with `--resume`: the CLI loaded the history from its transcript.
    Resumed,
    /// An empty CLI session (the history is put into the prompt); `resume_failed`: the thread
    /// had a session the CLI could no longer load.
    Fresh { resume_failed: bool },
}

impl From<SessionStart> for ProcessStart {
    fn from(start: SessionStart) -> Self {
        match start {
            SessionStart::Warm => ProcessStart::Warm,
            SessionStart::Resumed => ProcessStart::Resumed,
            SessionStart::Fresh { resume_failed } => ProcessStart::Fresh { resume_failed },
        }
    }
}

/// `model_request_started`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequestStarted {
    /// The gateway's id of the request (`mreq_…`), which its `model_request_finished` names.
    pub request_id: String,
    /// The model the request asks for.
    pub model: Option<String>,
}

/// `model_request_finished`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRequestFinished {
    /// The `requestId` of its `model_request_started`.
    pub request_id: String,
    /// The model that answered, as the response names it; else the one asked for.
    pub model: Option<String>,
    /// The HTTP status answered: the upstream's, 402 when a budget refused the request, 502 when
    /// the Messages API could not be reached.
    pub status: u16,
    /// True when the status is not a success, or the response was cut before its end.
    pub is_error: bool,
    /// The tokens the response reported (0 when it reported none).
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cache_read_tokens: u64,
    pub cache_write_tokens: u64,
    /// From the request's arrival to its response's end.
    pub duration_ms: u64,
}

/// `thread_archived`.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ThreadArchived {}

/// `thread_deleted`.
#[derive(Clone, Debug, Default, Serialize, ToSchema)]
pub struct ThreadDeleted {}

/// `turn_throttled`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnThrottled {
    pub message_id: MessageId,
    /// The concurrency limit now.
    pub limit: u64,
    /// Turns running now.
    pub running: u64,
    /// Place in the line, from 1.
    pub position: u64,
}

/// `permission_requested`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequested {
    /// The id to answer at `POST /api/threads/{id}/permissions/{requestId}`.
    pub request_id: String,
    pub tool_name: String,
    pub input: serde_json::Value,
    pub tool_use_id: Option<String>,
}

/// `permission_decided`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionDecided {
    pub request_id: String,
    pub tool_name: String,
    /// `allow` or `deny`.
    pub decision: String,
    /// `rule`, `person`, `timeout`, `policy` or `interrupt`.
    pub decided_by: String,
    pub reason: Option<String>,
}

/// `client_tool_call`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClientToolCall {
    /// The model's id of the call (its `tool_call_started`'s).
    pub tool_use_id: String,
    /// As the model called it: `mcp__custom__NAME`.
    pub name: String,
    pub state: ClientToolState,
    /// What the client answered (MCP content blocks, as the model reads them), once `answered`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<serde_json::Value>,
    /// Whether the client answered with an error, once `answered`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
}

/// Where a `client_tool_call` is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ClientToolState {
    /// It waits for the client's result; the turn goes on once it comes.
    Waiting,
    /// The client's result went to the model.
    Answered,
    /// The CLI gave up on the call (an interrupt) before the client answered.
    Cancelled,
}

/// `turn_finished`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnFinished {
    /// The user message the turn answered.
    pub message_id: MessageId,
    /// The stored reply.
    pub reply: Box<Message>,
}

/// `turn_failed`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnFailed {
    pub message_id: MessageId,
    /// `error`, `interrupted`, or `refused` (a budget is spent; nothing reached the model).
    pub status: MessageStatus,
    /// What ended it: `error`, `refused`, `withdrawn` (its caller withdrew it while it waited;
    /// it never ran), `interrupted` (someone interrupted it), `shutdown`, `crash` (found at the
    /// next start), or `takeover` (another node took the thread over).
    pub cause: EndCause,
    pub error: String,
    /// With `refused`: which budget, its limit and what was spent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetExceeded>,
}

/// What an ending's announcement needs besides the ending ([`Ending`]): the turn it names, and
/// who hears of it beyond the thread's stream (the schedule run the message was sent for, the
/// thread's own endpoint). Read before the ending's transaction (`crate::events` reads `run` and
/// `callback` first).
#[derive(Clone, Copy, Debug)]
pub struct Audience<'a> {
    pub turn: TurnKey<'a>,
    /// The schedule run the message was sent for, if any.
    pub run: Option<&'a RunRef>,
    /// The thread has its own webhook endpoint (`callbackUrl`), which hears every type.
    pub callback: bool,
}

impl<'a> Audience<'a> {
    /// The audience of `turn`'s ending, of a message sent for no schedule, on a thread without
    /// its own endpoint.
    pub fn of(turn: TurnKey<'a>) -> Self {
        Audience {
            turn,
            run: None,
            callback: false,
        }
    }
}

/// The event that announces an ending, as the values the ending's transaction writes
/// (`harness_db::OutcomeQueries`): `turn_finished` with the reply (which the transaction adds,
/// once stored), else `turn_failed`; `budget` names what refused the turn. Without webhook
/// events: `crate::events::announce` adds those an endpoint wants.
pub fn announce(
    ending: &Ending<'_>,
    audience: &Audience<'_>,
    budget: Option<&BudgetExceeded>,
) -> Announcement {
    let message = audience.turn.message;
    let (kind, data, reply_key) = match (ending.cause, ending.reply) {
        (EndCause::Done, Some(_)) => (
            EventKind::TurnFinished,
            // `TurnFinished` but for its `reply`; a test holds the two together.
            serde_json::json!({ "messageId": message }),
            Some(TURN_FINISHED_REPLY),
        ),
        (cause, _) => {
            let event = ThreadEvent::TurnFailed(TurnFailed {
                message_id: message.clone(),
                status: cause.status(),
                cause,
                error: ending.error_text().unwrap_or_default().to_owned(),
                budget: budget.cloned(),
            });
            (event.kind(), event.data(), None)
        }
    };
    Announcement {
        kind: kind.as_str(),
        data,
        reply_key,
        webhooks: Vec::new(),
    }
}

/// The field of `turn_finished` that holds the reply ([`TurnFinished::reply`]).
const TURN_FINISHED_REPLY: &str = "reply";

/// One frame of `GET /api/threads/{id}/events`: the `data:` line's JSON. The frame's `event:` is
/// `kind` and its `id:` is `id` (send it back as `Last-Event-ID` to resume). The document pins
/// `kind` and `data` per kind (`ThreadEvent`'s variants).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamEvent {
    /// Monotonic across the daemon: the SSE id.
    pub id: i64,
    /// The SSE event name.
    #[schema(value_type = EventKind)]
    pub kind: String,
    /// The user message whose turn produced the event, if any.
    pub message_id: Option<MessageId>,
    /// The kind's payload (see each `…Event` schema).
    pub data: serde_json::Value,
    pub at: DateTime<Utc>,
}

impl From<EventRow> for StreamEvent {
    fn from(row: EventRow) -> Self {
        StreamEvent {
            id: row.id,
            kind: row.kind,
            message_id: row.message_id,
            data: row.data,
            at: row.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::BudgetKind;
    use plugin_contract::ThreadId;

    fn samples() -> Vec<ThreadEvent> {
        let id = MessageId::from_string("msg_1");
        vec![
            ThreadEvent::MessageReceived(MessageReceived {
                message_id: id.clone(),
                content: "hi".into(),
                blocks: None,
                client_message_id: None,
                origin: Origin::User,
            }),
            ThreadEvent::TurnFailed(TurnFailed {
                message_id: id.clone(),
                status: MessageStatus::Refused,
                cause: EndCause::Refused,
                error: "spent".into(),
                budget: Some(BudgetExceeded {
                    budget: BudgetKind::Daily,
                    limit_usd: 1.0,
                    spent_usd: 1.5,
                }),
            }),
            ThreadEvent::ProcessReady(ProcessReady {
                start: SessionStart::Fresh {
                    resume_failed: true,
                }
                .into(),
                pid: Some(7),
            }),
            ThreadEvent::from(claude_cli::TurnEvent::TextDelta(claude_cli::TextDelta {
                text: "Hel".into(),
            })),
        ]
    }

    #[test]
    fn the_serialized_kind_is_the_events_kind_and_data_is_its_payload() {
        for event in samples() {
            let json = serde_json::to_value(&event).expect("serializes");
            assert_eq!(json["kind"], event.kind().as_str(), "{json}");
            assert_eq!(json["data"], event.data(), "{json}");
            assert!(event.data().is_object(), "{json}");
        }
    }

    #[test]
    fn payloads_keep_their_documented_field_names() {
        let data: Vec<_> = samples().iter().map(ThreadEvent::data).collect();
        assert_eq!(data[0]["messageId"], "msg_1");
        assert_eq!(data[0]["clientMessageId"], serde_json::Value::Null);
        assert_eq!(data[1]["budget"]["limitUsd"], 1.0);
        assert_eq!(data[2]["start"]["kind"], "fresh");
        assert_eq!(data[2]["start"]["resume_failed"], true);
        assert_eq!(data[3]["text"], "Hel");
    }

    /// What an ending with a reply writes, once the transaction adds the stored reply, is the
    /// documented `turn_finished`; one without is `turn_failed`.
    #[test]
    fn an_endings_announcement_is_its_terminal_event() {
        let (thread, id) = (
            ThreadId::from_string("thr_1"),
            MessageId::from_string("msg_1"),
        );
        let at = DateTime::parse_from_rfc3339("2026-01-01T00:00:00.000001Z")
            .unwrap()
            .with_timezone(&Utc);
        let reply = crate::store::MessageRow {
            id: MessageId::from_string("msg_2"),
            thread_id: thread.clone(),
            seq: 2,
            role: crate::store::Role::Assistant,
            content: "hello".into(),
            status: MessageStatus::Done,
            error: None,
            client_message_id: None,
            reply_to: Some(id.clone()),
            model: Some("m".into()),
            origin: Origin::User,
            caller_subject: None,
            caller_tenant: None,
            structured_output: Some(serde_json::json!({"a": 1})),
            blocks: None,
            input_tokens: Some(3),
            output_tokens: Some(4),
            cache_read_tokens: Some(0),
            cache_write_tokens: Some(0),
            cost_usd: Some(0.5),
            api_ms: Some(9),
            created_at: at,
            updated_at: at,
        };
        let turn = TurnKey {
            thread: &thread,
            message: &id,
        };
        let ending = Ending {
            cause: EndCause::Done,
            error: None,
            reply: Some(crate::store::NewReply {
                id: &reply.id,
                text: &reply.content,
                model: None,
                structured_output: None,
            }),
            session: None,
            usage: None,
        };
        let announcement = announce(&ending, &Audience::of(turn), None);
        let finished = ThreadEvent::TurnFinished(TurnFinished {
            message_id: id.clone(),
            reply: Box::new(reply.clone().into()),
        });
        assert_eq!(announcement.kind, finished.kind().as_str());
        assert_eq!(announcement.data_with(Some(&reply)), finished.data());

        let failed = Ending::failed(EndCause::Takeover, "gone");
        let announcement = announce(&failed, &Audience::of(turn), None);
        assert_eq!(announcement.kind, "turn_failed");
        assert_eq!(announcement.data_with(None), announcement.data);
        assert_eq!(
            announcement.data,
            serde_json::json!({"messageId": "msg_1", "status": "interrupted", "cause": "takeover", "error": "gone"})
        );
    }

    #[test]
    fn every_kind_parses_back_from_its_name_and_unknown_names_do_not() {
        for kind in EventKind::ALL {
            assert_eq!(EventKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(EventKind::parse("turn_done"), None);
    }

    #[test]
    fn serialized_names_are_the_documented_ones() {
        let doc =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/events.md"))
                .expect("docs/events.md");
        // The first cell of each row of the event table: "| `turn_started` | … |".
        let listed: Vec<&str> = doc
            .lines()
            .filter_map(|l| l.strip_prefix("| `")?.split_once("` |"))
            .map(|(name, _)| name)
            .collect();
        assert!(!listed.is_empty(), "docs/events.md has an event table");
        for kind in EventKind::ALL {
            let name = serde_json::to_value(kind).expect("serializes");
            assert_eq!(name, kind.as_str(), "{kind:?}");
            assert!(
                listed.contains(&kind.as_str()),
                "the event list of docs/events.md lacks {}",
                kind.as_str()
            );
        }
    }
}
