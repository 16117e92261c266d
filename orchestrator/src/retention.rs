//! What the store lets go of as it ages, and when it gives the space back: one task per daemon,
//! which every `retention.interval` removes the audit entries past `audit.keep_days` and the
//! events of turns older than `retention.events_max_age` and the OAuth clients that registered
//! longer than `oauth.unused_client_ttl` ago and never got a token (`crate::oauth::registration`),
//! and every `retention.vacuum_every` vacuums the database.
//!
//! Events go a whole turn at a time: a thread's log is cut at the end of its last turn that
//! ended before the age, and the cut is recorded with the removal (`threads.
//! events_compacted_through`), so a replay from before it starts with `log_compacted` rather
//! than skipping silently (`http::threads::events`). The turns themselves (messages, outcomes,
//! usage, tool calls) are never compacted. On PostgreSQL every node runs the task; the removals
//! are the same whoever runs them.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::config::{AuditConfig, RetentionConfig};
use crate::store::{time_text, Store};

/// Threads whose logs are compacted in one transaction.
const COMPACT_BATCH: usize = 100;

/// What one sweep removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sweep {
    pub audit_entries: u64,
    pub events: u64,
    pub oauth_clients: u64,
    pub vacuumed: bool,
}

/// The retention task's settings and the store it tends.
#[derive(Clone)]
pub struct Retention {
    store: Store,
    audit_keep_days: u32,
    config: RetentionConfig,
    /// `oauth.unused_client_ttl`; `None`: unused clients are not looked for.
    unused_oauth_clients: Option<Duration>,
}

impl Retention {
    pub fn new(store: Store, audit: &AuditConfig, config: &RetentionConfig) -> Retention {
        Retention {
            store,
            audit_keep_days: audit.keep_days,
            config: config.clone(),
            unused_oauth_clients: None,
        }
    }

    /// Also deletes the registered OAuth clients unused for longer than `ttl`.
    pub fn unused_oauth_clients(self, ttl: Duration) -> Retention {
        Retention {
            unused_oauth_clients: Some(ttl),
            ..self
        }
    }

    /// Runs a pass at once and then every `interval` until `stop`.
    pub fn spawn(self, tasks: &TaskTracker, stop: CancellationToken) {
        tasks.spawn(async move {
            let mut tick = tokio::time::interval(self.config.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut vacuumed = Instant::now();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stop.cancelled() => break,
                }
                let vacuum = !self.config.vacuum_every.is_zero()
                    && vacuumed.elapsed() >= self.config.vacuum_every;
                let pass = self.sweep(vacuum).await;
                if pass.vacuumed {
                    vacuumed = Instant::now();
                }
            }
        });
    }

    /// One pass: the audit purge, the compaction, the unused OAuth clients, and a vacuum when
    /// `vacuum`. A step that fails is logged and tried again at the next pass.
    pub async fn sweep(&self, vacuum: bool) -> Sweep {
        let mut pass = Sweep::default();
        if self.audit_keep_days > 0 {
            let cutoff = ago(Duration::from_secs(
                u64::from(self.audit_keep_days) * 86_400,
            ));
            match self.store.purge_audit(&cutoff).await {
                Ok(n) => pass.audit_entries = n,
                Err(err) => warn!(error = %err, "Could not purge the audit log."),
            }
        }
        if !self.config.events_max_age.is_zero() {
            let cutoff = ago(self.config.events_max_age);
            match self.store.compact_events(&cutoff, COMPACT_BATCH).await {
                Ok(n) => pass.events = n,
                Err(err) => warn!(error = %err, "Could not compact the event logs."),
            }
        }
        if let Some(ttl) = self.unused_oauth_clients {
            match self.store.delete_unused_oauth_clients(&ago(ttl)).await {
                Ok(n) => pass.oauth_clients = n,
                Err(err) => warn!(error = %err, "Could not delete the unused OAuth clients."),
            }
        }
        if vacuum {
            match self.store.vacuum().await {
                Ok(()) => pass.vacuumed = true,
                Err(err) => warn!(error = %err, "Could not vacuum the database."),
            }
        }
        if pass != Sweep::default() {
            info!(
                audit_entries = pass.audit_entries,
                events = pass.events,
                oauth_clients = pass.oauth_clients,
                vacuumed = pass.vacuumed,
                "Retention pass."
            );
        }
        pass
    }
}

/// The store's time text for `age` before now.
fn ago(age: Duration) -> String {
    let age = chrono::Duration::from_std(age).unwrap_or(chrono::Duration::MAX);
    let cutoff = chrono::Utc::now()
        .checked_sub_signed(age)
        .unwrap_or(chrono::DateTime::<chrono::Utc>::MIN_UTC);
    time_text(cutoff)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::store::tests::{spend, store_tests};
    use crate::store::{NewThread, NewUserMessage, Origin};

    /// A retention with `events_max_age` and no audit purge.
    fn retention(store: &Store, events_max_age: Duration) -> Retention {
        let config = RetentionConfig {
            events_max_age,
            ..RetentionConfig::default()
        };
        Retention::new(store.clone(), &AuditConfig { keep_days: 0 }, &config)
    }

    store_tests! {
        async fn compaction_cuts_whole_turns_older_than_the_age(store: sqlite_memory) {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let other = store.create_thread(NewThread::default()).await.unwrap().id;
            spend(&store, &t, 0.01).await;
            let question = store.list_messages(&t).await.unwrap()[0].id.clone();
            let outcome = store.outcomes_of(&question).await.unwrap().remove(0);
            let first_end = outcome.event_id;
            let cutoff = time_text(outcome.created_at + chrono::Duration::microseconds(1));
            spend(&store, &t, 0.01).await;
            // A turn still running: its events are past every end.
            let running = store
                .insert_user_message(
                    NewUserMessage {
                        thread_id: t.clone(),
                        content: "still going".into(),
                        client_message_id: None,
                        model: None,
                        origin: Origin::User,
                        caller: None,
                    },
                    None,
                )
                .await
                .unwrap();
            let running_id = running.message().id.clone();
            let open = store
                .append_event(&t, Some(&running_id), "text_delta", &json!({"text": "x"}))
                .await
                .unwrap();
            store.append_event(&other, None, "note", &json!(null)).await.unwrap();
            let before = store.events_after(&t, 0, 100).await.unwrap();

            // Only the first turn ended before the cut-off.
            let removed = store.compact_events(&cutoff, 1).await.unwrap();
            let left = store.events_after(&t, 0, 100).await.unwrap();
            assert_eq!(store.compacted_through(&t).await.unwrap(), first_end);
            assert_eq!(removed as usize, before.iter().filter(|e| e.id <= first_end).count());
            assert!(removed > 0);
            assert!(left.iter().all(|e| e.id > first_end), "{left:?}");
            assert_eq!(left.len() + removed as usize, before.len());
            assert_eq!(store.compact_events(&cutoff, 1).await.unwrap(), 0, "done once");

            // Every ended turn: the running one keeps its event, the other thread its own.
            let all = retention(&store, Duration::from_nanos(1)).sweep(false).await;
            let left = store.events_after(&t, 0, 100).await.unwrap();
            assert_eq!(left.iter().map(|e| e.id).collect::<Vec<_>>(), vec![open.id]);
            assert_eq!(all.events as usize, before.len() - 1 - removed as usize);
            assert!(store.compacted_through(&t).await.unwrap() < open.id);
            assert_eq!(store.events_after(&other, 0, 100).await.unwrap().len(), 1);
            assert_eq!(store.compacted_through(&other).await.unwrap(), 0);
            // The turns themselves stay.
            let messages = store.list_messages(&t).await.unwrap();
            assert_eq!(messages.len(), 5);
            let mut outcomes = 0;
            for message in &messages {
                outcomes += store.outcomes_of(&message.id).await.unwrap().len();
            }
            assert_eq!(outcomes, 2, "both ends are kept");
        }
    }

    store_tests! {
        /// The vacuum and the size run on each database as checked statements (`VACUUM` outside
        /// a transaction on PostgreSQL, through a prepared statement).
        async fn a_pass_vacuums_and_the_size_is_read(store: sqlite_memory) {
            let pass = retention(&store, Duration::from_secs(3600)).sweep(true).await;
            assert!(pass.vacuumed);
            store.vacuum().await.unwrap();
            assert!(store.bytes_used().await.unwrap() > 0);
        }
    }

    store_tests! {
        /// #46: a client that registered and never got a token goes once older than
        /// `oauth.unused_client_ttl`; a younger one and one that got a token stay.
        async fn unused_oauth_clients_go_once_old(store: sqlite_memory) {
            let uris = vec!["http://127.0.0.1:9/cb".to_owned()];
            for id in ["hc_old", "hc_used", "hc_young"] {
                store.create_oauth_client(id, None, &uris).await.unwrap();
            }
            store
                .test_execute(
                    "UPDATE oauth_clients SET created_at = '2000-01-01T00:00:00.000000Z'
                     WHERE id IN ('hc_old', 'hc_used')",
                )
                .await;
            store
                .create_oauth_token(crate::store::NewToken {
                    hash: "r1",
                    kind: "refresh",
                    family: "f1",
                    client_id: "hc_used",
                    tenant: "acme",
                    scopes: "threads:read",
                    resource: None,
                    expires_at: "2999-01-01T00:00:00.000000Z",
                })
                .await
                .unwrap();
            let day = Duration::from_secs(24 * 3600);
            let pass = retention(&store, Duration::ZERO).sweep(false).await;
            assert_eq!(pass.oauth_clients, 0, "not asked to");
            let pass = retention(&store, Duration::ZERO)
                .unused_oauth_clients(day)
                .sweep(false)
                .await;
            assert_eq!(pass.oauth_clients, 1);
            assert_eq!(store.oauth_client("hc_old").await.unwrap(), None);
            assert!(store.oauth_client("hc_used").await.unwrap().is_some());
            assert!(store.oauth_client("hc_young").await.unwrap().is_some());
        }
    }

    /// A SQLite file from before retention (no auto-vacuum) is rewritten once, then given back
    /// its free pages incrementally; each vacuum shrinks the file.
    #[tokio::test]
    async fn vacuum_converts_an_old_file_and_then_shrinks_it_incrementally() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        let path = path.to_str().unwrap();
        {
            let old = sqlx::SqlitePool::connect(&format!("sqlite://{path}?mode=rwc"))
                .await
                .unwrap();
            sqlx::raw_sql("CREATE TABLE kept (x INTEGER)")
                .execute(&old)
                .await
                .unwrap();
            old.close().await;
        }
        let store = Store::open(path).await.unwrap();
        let auto_vacuum = || async {
            sqlx::query_scalar::<_, i64>("PRAGMA auto_vacuum")
                .fetch_one(store.sqlite_pool())
                .await
                .unwrap()
        };
        assert_eq!(auto_vacuum().await, 0);
        let file_size = || std::fs::metadata(path).unwrap().len();
        let retention = retention(&store, Duration::from_nanos(1));
        for round in 0..2 {
            let t = store.create_thread(NewThread::default()).await.unwrap().id;
            let bulk = json!({"text": "x".repeat(4000)});
            for _ in 0..300 {
                store
                    .append_event(&t, None, "text_delta", &bulk)
                    .await
                    .unwrap();
            }
            spend(&store, &t, 0.0).await;
            store.vacuum().await.unwrap();
            let (full, used) = (file_size(), store.bytes_used().await.unwrap());
            let pass = retention.sweep(true).await;
            assert!(
                pass.events >= 300 && pass.vacuumed,
                "round {round}: {pass:?}"
            );
            assert_eq!(
                auto_vacuum().await,
                2,
                "incremental from the first vacuum on"
            );
            let (small, fewer) = (file_size(), store.bytes_used().await.unwrap());
            assert!(
                small + 1_000_000 < full,
                "round {round}: {full} → {small} bytes"
            );
            assert!(
                fewer + 1_000_000 < used,
                "round {round}: {used} → {fewer} bytes used"
            );
        }
    }
}
