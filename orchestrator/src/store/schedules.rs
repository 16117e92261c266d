//! Schedules and their runs (`crate::schedules` works them); the facade of
//! `harness_db::ScheduleQueries`.

use plugin_contract::ThreadId;

use super::{
    on_db, Db, MessageId, NewRun, NewSchedule, ScheduleQueries, ScheduleRow, ScheduleRunRow, Store,
    StoreError,
};

impl Store {
    pub async fn create_schedule(
        &self,
        id: &str,
        new: NewSchedule<'_>,
    ) -> Result<ScheduleRow, StoreError> {
        let _timer = self.metrics.time("create_schedule");
        on_db!(self, db => db.create_schedule(id, new).await)
    }

    /// The schedule, unless deleted.
    pub async fn schedule(&self, id: &str) -> Result<Option<ScheduleRow>, StoreError> {
        let _timer = self.metrics.time("schedule");
        on_db!(self, db => db.schedule(id).await)
    }

    pub async fn list_schedules(&self) -> Result<Vec<ScheduleRow>, StoreError> {
        let _timer = self.metrics.time("list_schedules");
        on_db!(self, db => db.list_schedules().await)
    }

    /// Writes `new` over the schedule; `None` when there is none.
    pub async fn update_schedule(
        &self,
        id: &str,
        new: NewSchedule<'_>,
    ) -> Result<Option<ScheduleRow>, StoreError> {
        let _timer = self.metrics.time("update_schedule");
        on_db!(self, db => db.update_schedule(id, new).await)
    }

    /// Marks it deleted (its runs stay); false when there was none.
    pub async fn delete_schedule(&self, id: &str) -> Result<bool, StoreError> {
        let _timer = self.metrics.time("delete_schedule");
        on_db!(self, db => db.delete_schedule(id).await)
    }

    /// The enabled schedules due at `now`, most overdue first.
    pub async fn due_schedules(
        &self,
        now: &str,
        limit: u32,
    ) -> Result<Vec<ScheduleRow>, StoreError> {
        let _timer = self.metrics.time("due_schedules");
        on_db!(self, db => db.due_schedules(now, limit).await)
    }

    /// Claims the tick `seen` of `schedule` (moving it to `next`) with its run; `None` when
    /// another node claimed it first.
    pub async fn claim_tick(
        &self,
        schedule: &str,
        seen: &str,
        next: &str,
        run: NewRun<'_>,
    ) -> Result<Option<i64>, StoreError> {
        let _timer = self.metrics.time("claim_tick");
        on_db!(self, db => db.claim_tick(schedule, seen, next, run).await)
    }

    /// Records a run outside the cron; its id.
    pub async fn record_run(&self, schedule: &str, run: NewRun<'_>) -> Result<i64, StoreError> {
        let _timer = self.metrics.time("record_run");
        on_db!(self, db => db.record_run(schedule, run).await)
    }

    pub async fn run_sent(
        &self,
        run: i64,
        thread: &ThreadId,
        message: &MessageId,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("run_sent");
        on_db!(self, db => db.run_sent(run, thread, message).await)
    }

    pub async fn run_failed(
        &self,
        run: i64,
        thread: Option<&ThreadId>,
        reason: &str,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("run_failed");
        on_db!(self, db => db.run_failed(run, thread, reason).await)
    }

    /// The schedule's runs, newest first.
    pub async fn schedule_runs(
        &self,
        schedule: &str,
        limit: u32,
    ) -> Result<Vec<ScheduleRunRow>, StoreError> {
        let _timer = self.metrics.time("schedule_runs");
        on_db!(self, db => db.schedule_runs(schedule, limit).await)
    }

    /// The schedule's newest run whose turn is still under way.
    pub async fn running_run(&self, schedule: &str) -> Result<Option<i64>, StoreError> {
        let _timer = self.metrics.time("running_run");
        on_db!(self, db => db.running_run(schedule).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::{
        CatchUp, Inserted, NewRun, NewSchedule, NewThread, NewUserMessage, Origin, Overlap,
        RunStatus, RunTrigger,
    };

    fn run<'a>(due: &'a str, node: &'a str) -> NewRun<'a> {
        NewRun {
            trigger: RunTrigger::Cron,
            due_at: due,
            status: RunStatus::Started,
            reason: None,
            node,
        }
    }

    store_tests! {
        /// Of two nodes that read the same tick, one claims it; a paused or deleted schedule's
        /// tick is claimed by none; a run shows its message's status once sent.
        async fn a_tick_is_claimed_once(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap().id;
            let (t1, t2, t3) = (
                "2026-03-01T10:00:00.000000Z",
                "2026-03-01T10:00:02.000000Z",
                "2026-03-01T10:00:04.000000Z",
            );
            let new = NewSchedule {
                name: Some("every two seconds"),
                cron: "*/2 * * * * *",
                timezone: "UTC",
                thread_id: Some(&thread),
                template: None,
                prompt: "tick",
                overlap: Overlap::Skip,
                catch_up: CatchUp::Once,
                enabled: true,
                next_run_at: t1,
                tenant: Some("acme"),
                created_by: Some("key_1"),
            };
            let schedule = store.create_schedule("sch_1", new).await.unwrap();
            assert_eq!(schedule.tenant.as_deref(), Some("acme"));
            assert_eq!(schedule.created_by.as_deref(), Some("key_1"));
            assert_eq!(schedule.next_run_at.to_rfc3339(), "2026-03-01T10:00:00+00:00");
            assert_eq!(store.due_schedules(t1, 10).await.unwrap().len(), 1);
            assert!(store.due_schedules("2026-03-01T09:59:59.000000Z", 10).await.unwrap().is_empty());

            let first = store.claim_tick("sch_1", t1, t2, run(t1, "node_a")).await.unwrap();
            let second = store.claim_tick("sch_1", t1, t2, run(t1, "node_b")).await.unwrap();
            assert!(first.is_some());
            assert_eq!(second, None, "the tick was claimed already");
            let again = store.claim_tick("sch_1", t2, t3, run(t1, "node_b")).await.unwrap();
            assert_eq!(again, None, "a tick with a run is not run twice");
            assert_eq!(store.schedule("sch_1").await.unwrap().unwrap().next_run_at.to_rfc3339(),
                       "2026-03-01T10:00:02+00:00", "nothing of the refused claim stayed");

            let Inserted::New(message) = store
                .insert_user_message(
                    NewUserMessage {
                        thread_id: thread.clone(),
                        content: "tick".into(),
                        client_message_id: None,
                        model: None,
                        origin: Origin::User,
                        caller: None,
                    },
                    None,
                )
                .await
                .unwrap()
            else {
                panic!("a new message")
            };
            let run_id = first.unwrap();
            store.run_sent(run_id, &thread, &message.id).await.unwrap();
            assert_eq!(store.running_run("sch_1").await.unwrap(), Some(run_id));
            let runs = store.schedule_runs("sch_1", 10).await.unwrap();
            assert_eq!(runs.len(), 1);
            assert_eq!(runs[0].node, "node_a");
            assert_eq!(runs[0].message_status, Some(crate::store::MessageStatus::Pending));

            let paused = NewSchedule { enabled: false, next_run_at: t2, ..new };
            store.update_schedule("sch_1", paused).await.unwrap().unwrap();
            assert_eq!(store.claim_tick("sch_1", t2, t3, run(t2, "node_a")).await.unwrap(), None);
            assert!(store.due_schedules(t3, 10).await.unwrap().is_empty());
            assert!(store.delete_schedule("sch_1").await.unwrap());
            assert!(!store.delete_schedule("sch_1").await.unwrap());
            assert_eq!(store.schedule("sch_1").await.unwrap(), None);
            assert_eq!(store.schedule_runs("sch_1", 10).await.unwrap().len(), 1, "runs stay");
        }
    }
}
