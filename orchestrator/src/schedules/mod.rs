//! Schedules: a prompt sent on a cron, to one thread or to a fresh thread per run, by whichever
//! node claims the tick. The cron expressions are [`cron`]'s (no IO).
//!
//! - **One run per tick.** Every `schedules.poll` a node reads the schedules that are due and
//!   claims each tick by moving `next_run_at` forward from the value it read, in the transaction
//!   that records the run (`Store::claim_tick`; a unique index on the tick backs it): of the
//!   nodes that read one tick, one runs it. A schedule bound to a thread is claimed only by the
//!   node holding (or taking) that thread's lease, so its message is sent where the thread runs.
//! - **Downtime.** When more than the due tick passed (nobody ran the schedule for a while), the
//!   missed ticks make one run (`catch_up = "once"`, trigger `catch_up`) or one skipped record
//!   (`"skip"`), never one run each; the next tick is then the first after now.
//! - **Overlap.** While the previous run's turn is still `pending`, `overlap = "skip"` records
//!   the tick as skipped; `"queue"` sends it (it waits in the thread's line).
//! - **Unattended.** A run's message is sent with `NewMessage::unattended`: a tool permission
//!   that the thread's profile does not settle by its rules is denied, never left waiting for a
//!   person; budgets apply as to any message.
//! - **As its maker.** A run acts as the API key that made the schedule (`created_by`): the
//!   key's daily budget, turns at once and rate apply to it as to the key's own messages, and a
//!   run of a revoked key's schedule pauses the schedule and records why. A schedule the operator
//!   (or a caller with no key) made acts for the schedule (`schedule:<id>`) in its tenant.
//! - Each run is recorded (`GET /api/schedules/{id}/runs`: trigger, thread, message, outcome),
//!   announced on the thread's stream (`schedule_run_started`), and to webhooks
//!   (`schedule.run_started`; `schedule.run_finished` is written with the turn's end).
//!
//! A node that dies between claiming a tick and storing its message leaves that run `started`
//! with no message: the tick is not run again.

pub mod cron;

use std::sync::Arc;

use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use plugin_contract::ThreadId;

use crate::api::events::{ScheduleRunStarted, ThreadEvent};
use crate::api::schedules::ThreadTemplate;
use crate::caller::{Caller, CallerId};
use crate::cluster::Cluster;
use crate::config::SchedulesConfig;
use crate::events::EventBus;
use crate::pipeline::{NewMessage, Pipeline, PipelineError};
use crate::store::{
    time_text, CatchUp, Fence, NewRun, NewThread, Overlap, RunStatus, RunTrigger, ScheduleRow,
    Store, StoreError,
};
use cron::Cron;

/// Schedules a node reads per poll.
const DUE_BATCH: u32 = 64;

/// The schedules' runner on this node. Cheap to clone.
#[derive(Clone)]
pub struct Schedules {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    pipeline: Pipeline,
    events: EventBus,
    cluster: Option<Cluster>,
    node: String,
    config: SchedulesConfig,
}

/// Why a manual run could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("schedule {0} not found")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a tick of a due schedule does.
#[derive(Debug, PartialEq, Eq)]
struct Tick {
    /// The tick the run stands for.
    due: DateTime<Utc>,
    trigger: RunTrigger,
    /// The ticks it stands for that passed unrun (0: it is on time).
    missed: u32,
    /// The next tick after now.
    next: Option<DateTime<Utc>>,
}

impl Schedules {
    pub fn new(
        store: Store,
        pipeline: Pipeline,
        events: EventBus,
        cluster: Option<Cluster>,
        node: String,
        config: SchedulesConfig,
    ) -> Schedules {
        Schedules {
            inner: Arc::new(Inner {
                store,
                pipeline,
                events,
                cluster,
                node,
                config,
            }),
        }
    }

    /// Looks for due ticks every `schedules.poll` until `stop` (when `schedules.enabled`).
    pub fn start(&self, tasks: &TaskTracker, stop: CancellationToken) {
        if !self.inner.config.enabled {
            info!("Schedules are not run on this node (schedules.enabled = false).");
            return;
        }
        let schedules = self.clone();
        let every = self
            .inner
            .config
            .poll
            .max(std::time::Duration::from_millis(50));
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => schedules.run_due().await,
                    _ = stop.cancelled() => break,
                }
            }
        });
    }

    /// Runs (or skips) every tick that is due now.
    pub async fn run_due(&self) {
        let now = Utc::now();
        let due = match self
            .inner
            .store
            .due_schedules(&time_text(now), DUE_BATCH)
            .await
        {
            Ok(due) => due,
            Err(err) => {
                warn!(error = %err, "Could not read the schedules that are due.");
                return;
            }
        };
        for schedule in due {
            if self.inner.pipeline.is_shutting_down() {
                return;
            }
            if let Err(err) = self.tick(&schedule, now).await {
                warn!(schedule_id = %schedule.id, error = %err, "A schedule's tick failed.");
            }
        }
    }

    /// Claims and runs the due tick of `schedule`, unless another node did.
    async fn tick(&self, schedule: &ScheduleRow, now: DateTime<Utc>) -> Result<(), StoreError> {
        let inner = &self.inner;
        let tick = match Cron::parse(&schedule.cron, &schedule.timezone) {
            Ok(cron) => tick_of(&cron, schedule.next_run_at, now),
            Err(err) => {
                // Checked when it was written; a zone database that lost the zone, say.
                warn!(schedule_id = %schedule.id, error = %err, "A schedule's cron no longer parses; it is paused.");
                return self.pause_broken(schedule).await;
            }
        };
        let fence = match self.place(schedule).await? {
            Place::Here(fence) => fence,
            Place::Elsewhere => return Ok(()),
        };
        let skipped = if tick.trigger == RunTrigger::CatchUp && schedule.catch_up == CatchUp::Skip {
            Some(format!(
                "{} ticks passed while no node ran the schedule (catchUp: skip)",
                tick.missed + 1
            ))
        } else if schedule.overlap == Overlap::Skip {
            inner
                .store
                .running_run(&schedule.id)
                .await?
                .map(|run| format!("run {run} still runs (overlap: skip)"))
        } else {
            None
        };
        let due = time_text(tick.due);
        let run = NewRun {
            trigger: tick.trigger,
            due_at: &due,
            status: match skipped {
                Some(_) => RunStatus::Skipped,
                None => RunStatus::Started,
            },
            reason: skipped.as_deref(),
            node: &inner.node,
        };
        // A cron with no tick left is paused once this one is claimed.
        let next = tick.next.unwrap_or(schedule.next_run_at);
        let seen = time_text(schedule.next_run_at);
        let Some(run_id) = inner
            .store
            .claim_tick(&schedule.id, &seen, &time_text(next), run)
            .await?
        else {
            debug!(schedule_id = %schedule.id, due = %due, "Another node claimed the tick.");
            return Ok(());
        };
        if tick.next.is_none() {
            self.pause_broken(schedule).await?;
        }
        match skipped {
            Some(reason) => {
                info!(schedule_id = %schedule.id, run_id, %reason, "Schedule tick skipped.")
            }
            None => self.send(schedule, run_id, tick.trigger, fence).await,
        }
        Ok(())
    }

    /// Runs `id` now (`POST /api/schedules/{id}/run`), paused or not; the run's id.
    pub async fn run_now(&self, id: &str, fence: Option<Fence>) -> Result<i64, RunError> {
        let inner = &self.inner;
        let schedule = inner
            .store
            .schedule(id)
            .await?
            .ok_or_else(|| RunError::NotFound(id.to_owned()))?;
        let now = time_text(Utc::now());
        let run_id = inner
            .store
            .record_run(
                id,
                NewRun {
                    trigger: RunTrigger::Manual,
                    due_at: &now,
                    status: RunStatus::Started,
                    reason: None,
                    node: &inner.node,
                },
            )
            .await?;
        self.send(&schedule, run_id, RunTrigger::Manual, fence)
            .await;
        Ok(run_id)
    }

    /// Sends the run's message (to its thread, or to a thread made for it) and records which;
    /// a failure is recorded as the run's.
    async fn send(
        &self,
        schedule: &ScheduleRow,
        run_id: i64,
        trigger: RunTrigger,
        fence: Option<Fence>,
    ) {
        let inner = &self.inner;
        let caller = match self.maker(schedule).await {
            Ok(caller) => caller,
            Err(reason) => return self.failed(run_id, None, &reason).await,
        };
        let (thread, fence) = match &schedule.thread_id {
            Some(thread) => (thread.clone(), fence),
            None => match self.fresh_thread(schedule).await {
                Ok(made) => made,
                Err(err) => return self.failed(run_id, None, &err.to_string()).await,
            },
        };
        let msg = NewMessage {
            thread_id: thread.clone(),
            content: schedule.prompt.clone().into(),
            client_message_id: Some(format!("schedule-run-{run_id}")),
            model: None,
            permission_mode: None,
            mcp_servers: None,
            timeout: None,
            fence,
            unattended: true,
            caller,
            traceparent: None,
        };
        let message_id = match inner.pipeline.accept_message(msg).await {
            Ok(accepted) => accepted.message_id,
            Err(PipelineError::BudgetExceeded {
                message_id,
                exceeded,
            }) => {
                let _ = inner.store.run_sent(run_id, &thread, &message_id).await;
                return self
                    .failed(run_id, Some(&thread), &exceeded.to_string())
                    .await;
            }
            Err(err) => return self.failed(run_id, Some(&thread), &err.to_string()).await,
        };
        if let Err(err) = inner.store.run_sent(run_id, &thread, &message_id).await {
            warn!(schedule_id = %schedule.id, run_id, error = %err, "Could not record a run's message.");
        }
        inner.events.emit(
            &thread,
            Some(&message_id),
            ThreadEvent::ScheduleRunStarted(ScheduleRunStarted {
                schedule_id: schedule.id.clone(),
                run_id,
                message_id: message_id.clone(),
                trigger,
            }),
        );
        info!(schedule_id = %schedule.id, run_id, thread_id = %thread, message_id = %message_id, ?trigger, "Schedule run started.");
    }

    /// Who a run of `schedule` acts as: the key that made it, when a key did. `Err` says why it
    /// cannot run now: the key is revoked (the schedule is paused) or its rate is spent.
    async fn maker(&self, schedule: &ScheduleRow) -> Result<Caller, String> {
        let Some(id) = &schedule.created_by else {
            return Ok(Caller::schedule(&schedule.id, schedule.tenant.clone()));
        };
        let keys = self.inner.pipeline.keys();
        let key = match self.inner.store.key(id).await {
            Ok(key) => key.filter(|key| key.revoked_at.is_none()),
            Err(err) => {
                return Err(format!(
                    "could not read the key that made the schedule: {err}"
                ))
            }
        };
        let Some(key) = key else {
            let reason =
                format!("the key that made the schedule ({id}) is revoked; the schedule is paused");
            if let Err(err) = self.pause_broken(schedule).await {
                warn!(schedule_id = %schedule.id, error = %err, "Could not pause a revoked key's schedule.");
            }
            return Err(reason);
        };
        if let Err(wait) = keys.admit(&key) {
            return Err(format!(
                "the rate of the key that made the schedule ({id}: rpm {}) is spent for {} s",
                key.rpm.unwrap_or_default(),
                wait.as_secs_f64().ceil()
            ));
        }
        Ok(Caller::acting_for(Some(CallerId {
            subject: key.id,
            tenant: schedule.tenant.clone(),
        })))
    }

    /// A thread made from the schedule's template, held by this node.
    async fn fresh_thread(
        &self,
        schedule: &ScheduleRow,
    ) -> Result<(ThreadId, Option<Fence>), PipelineError> {
        let template: ThreadTemplate = schedule
            .template
            .clone()
            .map(serde_json::from_value)
            .transpose()
            .map_err(|err| PipelineError::InvalidInput(format!("thread template: {err}")))?
            .unwrap_or_default();
        let title = template.title.clone().or_else(|| {
            Some(format!(
                "{} run",
                schedule.name.as_deref().unwrap_or(&schedule.id)
            ))
        });
        let thread = self
            .inner
            .pipeline
            .create_thread(
                NewThread {
                    title,
                    profile: template.profile.clone(),
                    on_interrupt: template.on_interrupt.unwrap_or_default(),
                    tenant: schedule.tenant.clone(),
                    ..NewThread::default()
                },
                template.workspace.as_ref(),
            )
            .await?;
        let fence = match &self.inner.cluster {
            Some(cluster) => cluster.take(&thread.id).await?,
            None => None,
        };
        Ok((thread.id, fence))
    }

    async fn failed(&self, run_id: i64, thread: Option<&ThreadId>, reason: &str) {
        warn!(run_id, %reason, "A schedule's run could not send its message.");
        if let Err(err) = self.inner.store.run_failed(run_id, thread, reason).await {
            warn!(run_id, error = %err, "Could not record a failed run.");
        }
    }

    /// Where a tick of `schedule` runs: a thread's schedule runs where its thread does.
    async fn place(&self, schedule: &ScheduleRow) -> Result<Place, StoreError> {
        let (Some(cluster), Some(thread)) = (&self.inner.cluster, &schedule.thread_id) else {
            return Ok(Place::Here(None));
        };
        Ok(match cluster.take(thread).await? {
            Some(fence) => Place::Here(Some(fence)),
            None => Place::Elsewhere,
        })
    }

    async fn pause_broken(&self, schedule: &ScheduleRow) -> Result<(), StoreError> {
        let next = time_text(schedule.next_run_at);
        let paused = crate::store::NewSchedule {
            enabled: false,
            ..as_new(schedule, &next)
        };
        self.inner
            .store
            .update_schedule(&schedule.id, paused)
            .await
            .map(|_| ())
    }
}

/// Where a tick runs.
enum Place {
    /// On this node, with its lease on the schedule's thread (when clustered).
    Here(Option<Fence>),
    /// On the node holding the schedule's thread: it claims the tick.
    Elsewhere,
}

/// The row as a write of itself, with `next_run_at` as `next` (stored form).
pub fn as_new<'a>(schedule: &'a ScheduleRow, next: &'a str) -> crate::store::NewSchedule<'a> {
    crate::store::NewSchedule {
        name: schedule.name.as_deref(),
        cron: &schedule.cron,
        timezone: &schedule.timezone,
        thread_id: schedule.thread_id.as_ref(),
        template: schedule.template.as_ref(),
        prompt: &schedule.prompt,
        tenant: schedule.tenant.as_deref(),
        created_by: schedule.created_by.as_deref(),
        overlap: schedule.overlap,
        catch_up: schedule.catch_up,
        enabled: schedule.enabled,
        next_run_at: next,
    }
}

/// What the due tick `due` of `cron` does at `now`: on time when the tick after it is still
/// ahead; else it stands for every tick since, up to the last one before now (`catch_up`).
fn tick_of(cron: &Cron, due: DateTime<Utc>, now: DateTime<Utc>) -> Tick {
    let next = cron.next_after(now);
    match cron.next_after(due) {
        Some(after) if after <= now => {
            let last = cron.last_at_or_before(now).unwrap_or(after);
            // Counted only for the log line and the skip's reason: a bounded walk.
            let missed = (0..1000)
                .scan(due, |t, _| {
                    *t = cron.next_after(*t)?;
                    (*t < last).then_some(())
                })
                .count();
            Tick {
                due: last,
                trigger: RunTrigger::CatchUp,
                missed: u32::try_from(missed + 1).unwrap_or(u32::MAX),
                next,
            }
        }
        _ => Tick {
            due,
            trigger: RunTrigger::Cron,
            missed: 0,
            next,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a time")
            .with_timezone(&Utc)
    }

    #[test]
    fn a_tick_found_before_the_next_is_on_time() {
        let cron = Cron::parse("*/2 * * * * *", "UTC").expect("parses");
        let tick = tick_of(
            &cron,
            at("2026-03-01T10:00:02Z"),
            at("2026-03-01T10:00:03.5Z"),
        );
        assert_eq!(
            tick,
            Tick {
                due: at("2026-03-01T10:00:02Z"),
                trigger: RunTrigger::Cron,
                missed: 0,
                next: Some(at("2026-03-01T10:00:04Z")),
            }
        );
    }

    #[test]
    fn ticks_missed_over_downtime_make_one_catch_up_for_the_last() {
        let cron = Cron::parse("*/2 * * * * *", "UTC").expect("parses");
        // Due at :02; found at :11, after :04 … :10 passed too.
        let tick = tick_of(
            &cron,
            at("2026-03-01T10:00:02Z"),
            at("2026-03-01T10:00:11Z"),
        );
        assert_eq!(tick.trigger, RunTrigger::CatchUp);
        assert_eq!(tick.due, at("2026-03-01T10:00:10Z"));
        assert_eq!(tick.missed, 4, "{tick:?}");
        assert_eq!(tick.next, Some(at("2026-03-01T10:00:12Z")));
    }
}
