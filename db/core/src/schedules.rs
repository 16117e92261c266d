//! The operations on `schedules` and `schedule_runs`: a prompt sent on a cron, and the history of
//! its runs. A tick is claimed by moving `next_run_at` forward from the value the claimer read,
//! in the transaction that writes the run ([`ScheduleQueries::claim_tick`]): of two nodes that
//! read the same tick, one writes it.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;
use serde::{Deserialize, Serialize};

use crate::{MessageId, MessageStatus, StoreError};

/// What a tick does while the schedule's previous run still runs.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(rename_all = "snake_case")]
pub enum Overlap {
    /// Nothing: the tick is recorded as skipped.
    Skip,
    /// Its message waits in the thread's line behind the running one.
    Queue,
}

/// What a schedule does about the ticks that passed while no node ran it.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(rename_all = "snake_case")]
pub enum CatchUp {
    /// They are recorded as one skipped run.
    Skip,
    /// One run stands for all of them.
    Once,
}

/// Why a run happened.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(rename_all = "snake_case")]
pub enum RunTrigger {
    /// A tick of the cron, on time.
    Cron,
    /// `POST /api/schedules/{id}/run`.
    Manual,
    /// The ticks missed while no node ran the schedule.
    CatchUp,
}

/// How a run went, as the schedule saw it; the turn's own outcome is its message's status.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, sqlx::Type, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
#[sqlx(rename_all = "snake_case")]
pub enum RunStatus {
    /// Its message was sent (or is being sent).
    Started,
    /// Nothing was sent: `reason` says why.
    Skipped,
    /// The message could not be sent: `reason` says why.
    Failed,
}

/// The stored names of the schedule enums (what the migration's CHECK lists).
macro_rules! stored_names {
    ($($ty:ident { $($variant:ident => $name:literal),+ })+) => {
        $(impl $ty {
            pub fn as_str(self) -> &'static str {
                match self {
                    $($ty::$variant => $name,)+
                }
            }
        })+
    };
}

stored_names! {
    Overlap { Skip => "skip", Queue => "queue" }
    CatchUp { Skip => "skip", Once => "once" }
    RunTrigger { Cron => "cron", Manual => "manual", CatchUp => "catch_up" }
    RunStatus { Started => "started", Skipped => "skipped", Failed => "failed" }
}

/// A schedule as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleRow {
    /// `sch_…`.
    pub id: String,
    pub name: Option<String>,
    /// Five fields, or six with seconds first.
    pub cron: String,
    /// An IANA time zone the cron is read in.
    pub timezone: String,
    /// The thread every run talks to; `None`: a fresh thread per run, from `template`.
    pub thread_id: Option<ThreadId>,
    /// What each run's fresh thread is made from (the daemon's own JSON type).
    pub template: Option<serde_json::Value>,
    pub prompt: String,
    /// The tenant of whoever created it; its runs act for that tenant. `None`: the operator's.
    pub tenant: Option<String>,
    /// The API key that created it: its runs act as that key (its budget, turns at once, rate
    /// and revocation). `None`: the operator, or another caller with no key.
    pub created_by: Option<String>,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub enabled: bool,
    /// The next tick due.
    pub next_run_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// A schedule to create, or what an update leaves of one.
#[derive(Clone, Copy, Debug)]
pub struct NewSchedule<'a> {
    pub name: Option<&'a str>,
    pub cron: &'a str,
    pub timezone: &'a str,
    pub thread_id: Option<&'a ThreadId>,
    pub template: Option<&'a serde_json::Value>,
    pub prompt: &'a str,
    /// The creator's tenant (kept by an update as it was).
    pub tenant: Option<&'a str>,
    /// The API key that created it (kept by an update as it was).
    pub created_by: Option<&'a str>,
    pub overlap: Overlap,
    pub catch_up: CatchUp,
    pub enabled: bool,
    /// A [`crate::now_text`]-style time.
    pub next_run_at: &'a str,
}

/// A run to record.
#[derive(Clone, Copy, Debug)]
pub struct NewRun<'a> {
    pub trigger: RunTrigger,
    /// The tick it stands for (a manual run: when it was asked for).
    pub due_at: &'a str,
    pub status: RunStatus,
    pub reason: Option<&'a str>,
    /// The node that ran it.
    pub node: &'a str,
}

/// A run as stored, with its message's status (the turn's outcome) when it has a message.
#[derive(Clone, Debug, PartialEq)]
pub struct ScheduleRunRow {
    pub id: i64,
    pub schedule_id: String,
    pub trigger: RunTrigger,
    pub due_at: DateTime<Utc>,
    pub status: RunStatus,
    pub reason: Option<String>,
    pub thread_id: Option<ThreadId>,
    pub message_id: Option<MessageId>,
    pub message_status: Option<MessageStatus>,
    pub node: String,
    pub created_at: DateTime<Utc>,
}

/// The run a user message was sent for, as a turn's end names it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunRef {
    pub schedule_id: String,
    pub run_id: i64,
}

/// A new schedule's id (`sch_` + 32 hex digits).
pub fn new_schedule_id() -> String {
    format!("sch_{}", uuid::Uuid::new_v4().simple())
}

#[allow(async_fn_in_trait)]
pub trait ScheduleQueries {
    async fn create_schedule(
        &self,
        id: &str,
        new: NewSchedule<'_>,
    ) -> Result<ScheduleRow, StoreError>;

    /// The schedule, unless deleted.
    async fn schedule(&self, id: &str) -> Result<Option<ScheduleRow>, StoreError>;

    /// Every schedule not deleted, oldest first.
    async fn list_schedules(&self) -> Result<Vec<ScheduleRow>, StoreError>;

    /// Writes `new` over the schedule; `None` when there is none (or it was deleted).
    async fn update_schedule(
        &self,
        id: &str,
        new: NewSchedule<'_>,
    ) -> Result<Option<ScheduleRow>, StoreError>;

    /// Marks the schedule deleted (its runs stay); false when there was none.
    async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError>;

    /// The enabled schedules whose next tick is due at `now`, at most `limit`, most overdue first.
    async fn due_schedules(&self, now: &str, limit: u32) -> Result<Vec<ScheduleRow>, StoreError>;

    /// Moves the schedule's next tick from `seen` (the value the caller read) to `next` and
    /// records `run`, in one transaction: the run's id, or `None` (nothing written) when
    /// another node moved it first, the schedule was paused or deleted, or the tick has a run.
    async fn claim_tick(
        &self,
        schedule: &str,
        seen: &str,
        next: &str,
        run: NewRun<'_>,
    ) -> Result<Option<i64>, StoreError>;

    /// Records a run outside the cron (a manual one): its id.
    async fn record_run(&self, schedule: &str, run: NewRun<'_>) -> Result<i64, StoreError>;

    /// The run's thread and message, once its message is stored.
    async fn run_sent(
        &self,
        run: i64,
        thread: &ThreadId,
        message: &MessageId,
    ) -> Result<(), StoreError>;

    /// The run failed to send: why.
    async fn run_failed(
        &self,
        run: i64,
        thread: Option<&ThreadId>,
        reason: &str,
    ) -> Result<(), StoreError>;

    /// The schedule's runs, newest first, at most `limit`.
    async fn schedule_runs(
        &self,
        schedule: &str,
        limit: u32,
    ) -> Result<Vec<ScheduleRunRow>, StoreError>;

    /// The schedule's newest started run whose turn is still `pending`, if any.
    async fn running_run(&self, schedule: &str) -> Result<Option<i64>, StoreError>;
}

/// `schedule_queries!(Backend)`: the [`ScheduleQueries`] of a database crate's `Backend`, calling
/// the functions of the same names in the invoking module.
#[macro_export]
macro_rules! schedule_queries {
    ($backend:ty) => {
        impl $crate::ScheduleQueries for $backend {
            async fn create_schedule(
                &self,
                id: &str,
                new: NewSchedule<'_>,
            ) -> Result<ScheduleRow, StoreError> {
                create_schedule(self.pool(), id, new).await
            }

            async fn schedule(&self, id: &str) -> Result<Option<ScheduleRow>, StoreError> {
                schedule(self.pool(), id).await
            }

            async fn list_schedules(&self) -> Result<Vec<ScheduleRow>, StoreError> {
                list_schedules(self.pool()).await
            }

            async fn update_schedule(
                &self,
                id: &str,
                new: NewSchedule<'_>,
            ) -> Result<Option<ScheduleRow>, StoreError> {
                update_schedule(self.pool(), id, new).await
            }

            async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
                delete_schedule(self.pool(), id).await
            }

            async fn due_schedules(
                &self,
                now: &str,
                limit: u32,
            ) -> Result<Vec<ScheduleRow>, StoreError> {
                due_schedules(self.pool(), now, limit).await
            }

            async fn claim_tick(
                &self,
                schedule: &str,
                seen: &str,
                next: &str,
                run: NewRun<'_>,
            ) -> Result<Option<i64>, StoreError> {
                claim_tick(self.pool(), schedule, seen, next, run).await
            }

            async fn record_run(&self, schedule: &str, run: NewRun<'_>) -> Result<i64, StoreError> {
                record_run(self.pool(), schedule, run).await
            }

            async fn run_sent(
                &self,
                run: i64,
                thread: &ThreadId,
                message: &MessageId,
            ) -> Result<(), StoreError> {
                run_sent(self.pool(), run, thread, message).await
            }

            async fn run_failed(
                &self,
                run: i64,
                thread: Option<&ThreadId>,
                reason: &str,
            ) -> Result<(), StoreError> {
                run_failed(self.pool(), run, thread, reason).await
            }

            async fn schedule_runs(
                &self,
                schedule: &str,
                limit: u32,
            ) -> Result<Vec<ScheduleRunRow>, StoreError> {
                schedule_runs(self.pool(), schedule, limit).await
            }

            async fn running_run(&self, schedule: &str) -> Result<Option<i64>, StoreError> {
                running_run(self.pool(), schedule).await
            }
        }
    };
}
