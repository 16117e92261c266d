//! Schedules as clients see them: [`Schedule`] (with the [`ThreadTemplate`] a fresh thread per run
//! is made from) and [`ScheduleRun`].

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;
use serde::{Deserialize, Serialize};

use crate::config::WorkspaceRequest;
use crate::store::{
    CatchUp, MessageId, MessageStatus, OnInterrupt, Overlap, RunStatus, RunTrigger, ScheduleRow,
    ScheduleRunRow,
};

/// What each run's fresh thread is made of (`POST /api/threads` takes the same fields).
#[derive(Clone, Debug, Default, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ThreadTemplate {
    #[schema(max_length = 500)]
    pub title: Option<String>,
    pub profile: Option<String>,
    pub workspace: Option<WorkspaceRequest>,
    pub on_interrupt: Option<OnInterrupt>,
}

/// A schedule: `prompt` sent on `cron` (read in `timezone`) to `threadId`, or to a fresh thread
/// made from `thread` at each run.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Schedule {
    /// `sch_…`.
    pub id: String,
    pub name: Option<String>,
    /// Five fields (minute first), or six with seconds first.
    pub cron: String,
    /// The IANA time zone the cron is read in.
    pub timezone: String,
    #[schema(value_type = Option<String>)]
    pub thread_id: Option<ThreadId>,
    pub thread: Option<ThreadTemplate>,
    pub prompt: String,
    /// While the previous run still runs: `skip` the tick, or `queue` the message behind it.
    pub overlap: Overlap,
    /// Ticks missed while no node ran: `once` (one run for all), or `skip` (recorded, not run).
    pub catch_up: CatchUp,
    /// False while paused.
    pub enabled: bool,
    /// The next tick.
    pub next_run_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl From<ScheduleRow> for Schedule {
    fn from(row: ScheduleRow) -> Self {
        Schedule {
            id: row.id,
            name: row.name,
            cron: row.cron,
            timezone: row.timezone,
            thread_id: row.thread_id,
            thread: row.template.and_then(|t| serde_json::from_value(t).ok()),
            prompt: row.prompt,
            overlap: row.overlap,
            catch_up: row.catch_up,
            enabled: row.enabled,
            next_run_at: row.next_run_at,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// One run of a schedule (or a tick it skipped).
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRun {
    pub id: i64,
    pub schedule_id: String,
    /// `cron` (a tick on time), `manual` (`POST …/run`) or `catch_up` (ticks missed while no
    /// node ran the schedule).
    pub trigger: RunTrigger,
    /// The tick it stands for (a manual run: when it was asked for).
    pub due_at: DateTime<Utc>,
    /// `started` (its message was sent), `skipped` or `failed` (see `reason`).
    pub status: RunStatus,
    pub reason: Option<String>,
    #[schema(value_type = Option<String>)]
    pub thread_id: Option<ThreadId>,
    pub message_id: Option<MessageId>,
    /// The turn's outcome: its message's status (`pending` while it runs).
    pub outcome: Option<MessageStatus>,
    /// The node that ran it.
    pub node: String,
    pub created_at: DateTime<Utc>,
}

impl From<ScheduleRunRow> for ScheduleRun {
    fn from(row: ScheduleRunRow) -> Self {
        ScheduleRun {
            id: row.id,
            schedule_id: row.schedule_id,
            trigger: row.trigger,
            due_at: row.due_at,
            status: row.status,
            reason: row.reason,
            thread_id: row.thread_id,
            message_id: row.message_id,
            outcome: row.message_status,
            node: row.node,
            created_at: row.created_at,
        }
    }
}
