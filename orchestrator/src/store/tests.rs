use chrono::{DateTime, SecondsFormat, Utc};
use sqlx::SqlitePool;

use super::*;

/// The usage migration rebuilds `messages` (for the `refused` status): a database from before
/// it keeps every message, its reply links, the permissions that point at messages, and its
/// foreign keys.
#[tokio::test]
async fn the_usage_migration_keeps_messages_and_what_points_at_them() {
    use std::borrow::Cow;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.db");
    let old = SqlitePoolOptions::new()
        .max_connections(1)
        .connect_with(
            SqliteConnectOptions::new()
                .filename(&path)
                .create_if_missing(true)
                .foreign_keys(true),
        )
        .await
        .unwrap();
    let before = sqlx::migrate::Migrator {
        migrations: Cow::Owned(MIGRATOR.migrations[..4].to_vec()),
        ..sqlx::migrate::Migrator::DEFAULT
    };
    before.run(&old).await.unwrap();
    sqlx::raw_sql(
        "INSERT INTO threads (id, created_at, updated_at) VALUES ('t', 'x', 'x');
         INSERT INTO messages (id, thread_id, seq, role, content, status, created_at, updated_at)
             VALUES ('q', 't', 1, 'user', 'hi', 'done', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
         INSERT INTO messages (id, thread_id, seq, role, content, status, reply_to, created_at, updated_at)
             VALUES ('a', 't', 2, 'assistant', 'yo', 'done', 'q', '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z');
         INSERT INTO permissions (id, thread_id, message_id, tool_name, input, status, created_at)
             VALUES ('p', 't', 'q', 'Bash', '{}', 'allowed', 'x');",
    )
    .execute(&old)
    .await
    .unwrap();
    old.close().await;

    let store = Store::open(path.to_str().unwrap()).await.unwrap();
    let thread = ThreadId::from_string("t");
    let messages = store.list_messages(&thread).await.unwrap();
    let ids: Vec<_> = messages.iter().map(|m| m.id.as_str()).collect();
    assert_eq!(ids, ["q", "a"]);
    assert_eq!(
        messages[1].reply_to.as_ref().map(MessageId::as_str),
        Some("q")
    );
    let pointing: Vec<(String,)> =
        sqlx::query_as("SELECT message_id FROM permissions WHERE id = 'p'")
            .fetch_all(store.sqlite_pool())
            .await
            .unwrap();
    assert_eq!(pointing, [("q".to_owned(),)]);
    let broken: Vec<(String,)> = sqlx::query_as("SELECT \"table\" FROM pragma_foreign_key_check")
        .fetch_all(store.sqlite_pool())
        .await
        .unwrap();
    assert!(broken.is_empty(), "{broken:?}");
    // The reply link is still a foreign key, now on the new table.
    let dangling = sqlx::raw_sql(
        "INSERT INTO messages (id, thread_id, seq, role, content, status, reply_to, created_at, updated_at)
             VALUES ('b', 't', 3, 'assistant', 'x', 'done', 'nope', 'x', 'x')",
    )
    .execute(store.sqlite_pool())
    .await;
    assert!(dangling.is_err());
    // And the new status is allowed.
    store
        .fail_turn(
            TurnKey {
                thread: &ThreadId::from_string("t"),
                message: &MessageId::from_string("q"),
            },
            MessageStatus::Refused,
            "budget",
            None,
            None,
            None,
        )
        .await
        .unwrap();
}

/// A fresh migrated in-memory store.
pub(crate) async fn memory_store() -> Store {
    Store::open(":memory:").await.unwrap()
}

/// A fresh migrated store on PostgreSQL: a new database on this test process's server
/// (`pg_test`). `None` only when `HARNESS_TEST_PG=skip` is set and no server can start;
/// otherwise a server that cannot start fails the test with the reason.
pub(crate) async fn pg_store() -> Option<Store> {
    if std::env::var("HARNESS_TEST_PG").as_deref() == Ok("skip") && !pg_test::available() {
        eprintln!("HARNESS_TEST_PG=skip and no PostgreSQL: skipping the PostgreSQL variant");
        return None;
    }
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    Some(Store::open(&url).await.unwrap())
}

/// The SQLite openers the store's tests choose from: a store and what keeps it alive.
pub(crate) async fn sqlite_memory() -> (Store, Option<tempfile::TempDir>) {
    (memory_store().await, None)
}

/// A file database (with WAL and a pool of several connections), for tests of concurrency.
pub(crate) async fn sqlite_file() -> (Store, Option<tempfile::TempDir>) {
    let (store, dir) = file_store().await;
    (store, Some(dir))
}

/// Runs a store test on both databases: `async fn name(store: sqlite_memory) { … }` makes
/// the tests `name::sqlite` (the store from the named opener) and `name::postgres` (a fresh
/// database from [`pg_store`]).
/// Every table the migrations create, by name (the same on both databases).
const TABLES: [&str; 31] = [
    "api_keys",
    "audit_log",
    "caller_usage_days",
    "cluster_credential",
    "delegations",
    "events",
    "files",
    "goals",
    "leases",
    "managed_agent_versions",
    "managed_objects",
    "managed_sessions",
    "messages",
    "model_requests",
    "oauth_clients",
    "oauth_codes",
    "oauth_tokens",
    "permissions",
    "schedule_runs",
    "schedules",
    "thread_callbacks",
    "thread_rules",
    "thread_tags",
    "threads",
    "tool_calls",
    "transcript_entries",
    "turn_outcomes",
    "usage_days",
    "webhook_attempts",
    "webhook_deliveries",
    "webhook_events",
];

macro_rules! store_tests {
    ($($(#[$meta:meta])* async fn $name:ident($store:ident: $sqlite:ident) $body:block)*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[tokio::test]
            async fn sqlite() {
                let ($store, _kept) = $crate::store::tests::$sqlite().await;
                $body
            }

            #[tokio::test]
            async fn postgres() {
                let Some($store) = $crate::store::tests::pg_store().await else {
                    return;
                };
                $body
            }
        }
    )*};
}
pub(crate) use store_tests;

/// A turn of `thread` that cost `cost_usd`: a question and its reply, stored.
pub(crate) async fn spend(store: &Store, thread: &ThreadId, cost_usd: f64) {
    let question = store
        .insert_user_message(
            NewUserMessage {
                thread_id: thread.clone(),
                content: "hi".into(),
                client_message_id: None,
                model: None,
                origin: crate::store::Origin::User,
                caller: None,
            },
            None,
        )
        .await
        .unwrap();
    let usage = crate::store::Usage {
        cost_usd,
        input_tokens: 10,
        ..Default::default()
    };
    store
        .complete_turn(
            question.message().turn_key(),
            "hello",
            None,
            None,
            None,
            Some(&usage),
            None,
        )
        .await
        .unwrap();
}

/// The turn of message `message` in `thread`, one the store may not have.
pub(super) fn turn_of<'a>(thread: &'a ThreadId, message: &'a MessageId) -> TurnKey<'a> {
    TurnKey { thread, message }
}

/// SQL the store does not offer, for tests on either database (no parameters: tests write
/// their values into the text).
impl Store {
    /// The SQLite pool, for tests of SQLite itself. Panics on PostgreSQL.
    pub(crate) fn sqlite_pool(&self) -> &SqlitePool {
        match &self.db {
            Db::Sqlite(db) => db.pool(),
            Db::Postgres(_) => panic!("a SQLite test got a PostgreSQL store"),
        }
    }

    pub(crate) async fn test_execute(&self, sql: &str) {
        match &self.db {
            Db::Sqlite(db) => sqlx::raw_sql(sql).execute(db.pool()).await.map(drop),
            Db::Postgres(db) => sqlx::raw_sql(sql).execute(db.pool()).await.map(drop),
        }
        .unwrap();
    }

    pub(crate) async fn test_count(&self, sql: &str) -> i64 {
        match &self.db {
            Db::Sqlite(db) => sqlx::query_scalar(sql).fetch_one(db.pool()).await,
            Db::Postgres(db) => sqlx::query_scalar(sql).fetch_one(db.pool()).await,
        }
        .unwrap()
    }

    pub(crate) async fn test_text(&self, sql: &str) -> String {
        match &self.db {
            Db::Sqlite(db) => sqlx::query_scalar(sql).fetch_one(db.pool()).await,
            Db::Postgres(db) => sqlx::query_scalar(sql).fetch_one(db.pool()).await,
        }
        .unwrap()
    }
}

/// A fresh migrated file store in a temp dir (kept alive by the returned guard).
pub(crate) async fn file_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested/dir/harness.db");
    let store = Store::open(path.to_str().unwrap()).await.unwrap();
    (store, dir)
}

#[tokio::test]
async fn memory_store_is_migrated_and_keeps_data_on_one_connection() {
    let store = memory_store().await;
    // PRAGMA settings stay run-time queries: sqlx cannot describe their result type
    // (`query!` may see a column of type NULL; the `pragma_*` functions have no column
    // metadata), so these checks name the type themselves.
    let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(store.sqlite_pool())
        .await
        .unwrap();
    assert_eq!(fk, 1);
    let tables = sqlx::query_scalar!(
        r#"SELECT name AS "name!" FROM sqlite_master
               WHERE type = 'table' AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%'
                 AND name NOT LIKE 'thread_search%'
               ORDER BY name"#
    )
    .fetch_all(store.sqlite_pool())
    .await
    .unwrap();
    // The search index (FTS5 and its own tables) is SQLite's; PostgreSQL indexes the columns.
    assert_eq!(tables, TABLES);
    assert_eq!(store.sqlite_pool().size(), 1);

    // Data written through one clone is seen through another: the same single database.
    let thread = store.create_thread(NewThread::default()).await.unwrap();
    let clone = store.clone();
    assert!(clone.get_thread(&thread.id).await.unwrap().is_some());
    assert!(store.integrity_ok().await.unwrap());
}

#[tokio::test]
async fn file_store_uses_wal_and_creates_its_directory() {
    let (store, dir) = file_store().await;
    assert!(dir.path().join("nested/dir/harness.db").is_file());
    // PRAGMA settings stay run-time queries: sqlx cannot describe their result type.
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.sqlite_pool())
        .await
        .unwrap();
    assert_eq!(mode, "wal");
    let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(store.sqlite_pool())
        .await
        .unwrap();
    assert_eq!(fk, 1);
    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(store.sqlite_pool())
        .await
        .unwrap();
    assert_eq!(sync, 1, "synchronous NORMAL");
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(store.sqlite_pool())
        .await
        .unwrap();
    assert_eq!(busy, 5000);
    assert!(store.integrity_ok().await.unwrap());
}

/// A `postgres://` URL opens PostgreSQL with the same tables; opening it again (a restart)
/// finds the migrations applied and the data kept.
#[tokio::test]
async fn postgres_store_is_migrated_and_persists_across_reopen() {
    if pg_store().await.is_none() {
        return;
    }
    // The test server trusts loopback, so any password opens it.
    let url = pg_test::database_url()
        .await
        .unwrap()
        .replace("postgres@", "postgres:s3cret-pw@");
    assert!(is_postgres_url(&url));
    let store = Store::open(&url).await.unwrap();
    assert_eq!(store.backend(), "postgres");
    assert!(!format!("{store:?}").contains("s3cret-pw"));
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::TEXT FROM information_schema.tables
         WHERE table_schema = 'public' AND table_name NOT LIKE '\\_sqlx%'
         ORDER BY table_name",
    )
    .fetch_all(match &store.db {
        Db::Postgres(db) => db.pool(),
        Db::Sqlite(_) => unreachable!(),
    })
    .await
    .unwrap();
    assert_eq!(tables, TABLES);
    // A daemon frozen mid-transaction cannot hold its locks for good.
    let idle_limit: String = sqlx::query_scalar("SHOW idle_in_transaction_session_timeout")
        .fetch_one(match &store.db {
            Db::Postgres(db) => db.pool(),
            Db::Sqlite(_) => unreachable!(),
        })
        .await
        .unwrap();
    assert_eq!(idle_limit, PG_IDLE_IN_TRANSACTION);
    assert_eq!(
        PG_MIGRATOR.migrations.len(),
        MIGRATOR.migrations.len(),
        "migration N is the same change on both databases"
    );
    let thread = store
        .create_thread(NewThread {
            title: Some("kept".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(store.integrity_ok().await.unwrap());
    store.close().await;

    let reopened = Store::open(&url.replace("postgres://", "postgresql://"))
        .await
        .unwrap();
    let got = reopened.require_thread(&thread.id).await.unwrap();
    assert_eq!(got.title.as_deref(), Some("kept"));
}

#[test]
fn a_postgres_url_is_logged_without_its_password() {
    let options: PgConnectOptions =
        "postgresql://harness:s3cret-pw@db.internal:6543/threads?sslmode=require"
            .parse()
            .unwrap();
    assert_eq!(
        PgLocation::of(&options).to_string(),
        "postgres://harness@db.internal:6543/threads"
    );
}

#[test]
fn only_postgres_urls_select_postgres() {
    assert!(is_postgres_url("postgres://u:secret@db.example/harness"));
    assert!(is_postgres_url("postgresql://localhost/harness"));
    for sqlite in [
        ":memory:",
        "/var/lib/harness.db",
        "postgres.db",
        "sqlite://x.db",
    ] {
        assert!(!is_postgres_url(sqlite), "{sqlite}");
    }
}

#[tokio::test]
async fn file_store_persists_across_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("harness.db");
    let path = path.to_str().unwrap();
    let store = Store::open(path).await.unwrap();
    let thread = store
        .create_thread(NewThread {
            id: None,
            title: Some("kept".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    store.close().await;

    let reopened = Store::open(path).await.unwrap();
    let got = reopened.require_thread(&thread.id).await.unwrap();
    assert_eq!(got.title.as_deref(), Some("kept"));
}

store_tests! {
    async fn closed_store_reports_db_error(store: sqlite_memory) {
        store.close().await;
        let err = store.list_threads().await.unwrap_err();
        assert!(matches!(err, StoreError::Db(_)), "{err:?}");
    }
}

store_tests! {
    async fn thread_store_impl_serves_plugins(store: sqlite_memory) {
        use plugin_contract::ThreadStore;

        let parent = store.create_thread(NewThread::default()).await.unwrap();
        let child = store
            .create_thread(NewThread {
                id: None,
                title: Some("child".into()),
                model: Some("haiku".into()),
                parent_id: Some(parent.id.clone()),
                output_schema: None,
                max_budget_usd: None,
                workspace: None,
                profile: None,
                on_interrupt: crate::store::OnInterrupt::Mark,
                tenant: None,
            })
            .await
            .unwrap();
        let question = store
            .insert_user_message(
                NewUserMessage {
                    thread_id: child.id.clone(),
                    content: "ping".into(),
                    client_message_id: None,
                    model: None,
                    origin: crate::store::Origin::User,
                    caller: None,
                },
                None,
            )
            .await
            .unwrap();
        store
            .complete_turn(question.message().turn_key(), "pong", None, None, None, None, None)
            .await
            .unwrap();

        let plugin_view: std::sync::Arc<dyn ThreadStore> = std::sync::Arc::new(store.clone());
        let info = plugin_view.thread(&child.id).await.unwrap().unwrap();
        assert_eq!(
            info,
            ThreadInfo {
                id: child.id.clone(),
                title: Some("child".into()),
                model: Some("haiku".into()),
                parent_id: Some(parent.id.clone()),
            }
        );
        assert_eq!(
            plugin_view
                .thread(&ThreadId::from_string("thr_nope"))
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            plugin_view.history(&child.id).await.unwrap(),
            [
                HistoryMessage {
                    role: "user".into(),
                    content: "ping".into()
                },
                HistoryMessage {
                    role: "assistant".into(),
                    content: "pong".into()
                },
            ]
        );

        store.close().await;
        let err = plugin_view.thread(&child.id).await.unwrap_err();
        assert!(err.starts_with("database error"), "{err}");
    }
}

#[test]
fn enums_round_trip_through_their_stored_strings() {
    for status in [
        MessageStatus::Pending,
        MessageStatus::Done,
        MessageStatus::Error,
        MessageStatus::Interrupted,
    ] {
        assert_eq!(status.as_str().parse::<MessageStatus>().unwrap(), status);
        assert_eq!(
            serde_json::to_value(status).unwrap(),
            serde_json::Value::String(status.as_str().into())
        );
    }
    for role in [Role::User, Role::Assistant] {
        assert_eq!(role.as_str().parse::<Role>().unwrap(), role);
    }
    let err = "Done".parse::<MessageStatus>().unwrap_err();
    assert_eq!(err.to_string(), "unknown message status `Done`");
    assert!("system".parse::<Role>().is_err());
}

#[test]
fn message_ids_are_prefixed_and_unique() {
    let a = MessageId::generate();
    let b = MessageId::generate();
    assert!(a.as_str().starts_with("msg_"));
    assert_eq!(a.as_str().len(), 4 + 32);
    assert_ne!(a, b);
    assert_eq!(MessageId::from_string("msg_x").to_string(), "msg_x");
    assert_eq!(
        serde_json::to_value(&a).unwrap(),
        serde_json::json!(a.as_str())
    );
}

#[tokio::test]
async fn enums_are_stored_as_their_strings() {
    let store = memory_store().await;
    for status in [
        MessageStatus::Pending,
        MessageStatus::Done,
        MessageStatus::Error,
        MessageStatus::Interrupted,
    ] {
        let row = sqlx::query!(
            r#"SELECT ?1 AS "text!: String", ?1 AS "back!: MessageStatus""#,
            status
        )
        .fetch_one(store.sqlite_pool())
        .await
        .unwrap();
        assert_eq!((row.text.as_str(), row.back), (status.as_str(), status));
    }
    for role in [Role::User, Role::Assistant] {
        let row = sqlx::query!(r#"SELECT ?1 AS "text!: String", ?1 AS "back!: Role""#, role)
            .fetch_one(store.sqlite_pool())
            .await
            .unwrap();
        assert_eq!((row.text.as_str(), row.back), (role.as_str(), role));
    }
}

/// Decodes `text` the way the store reads its timestamp columns.
async fn stored_time(store: &Store, text: &str) -> Result<DateTime<Utc>, StoreError> {
    Ok(
        sqlx::query_scalar!(r#"SELECT ?1 AS "t!: DateTime<Utc>""#, text)
            .fetch_one(store.sqlite_pool())
            .await?,
    )
}

#[tokio::test]
async fn stored_times_have_fixed_width_and_parse_back() {
    let store = memory_store().await;
    let text = now_text();
    assert_eq!(text.len(), "2024-01-01T00:00:00.000000Z".len());
    assert!(text.ends_with('Z'));
    let parsed = stored_time(&store, &text).await.unwrap();
    assert_eq!(parsed.to_rfc3339_opts(SecondsFormat::Micros, true), text);
    assert!(matches!(
        stored_time(&store, "yesterday").await,
        Err(StoreError::Corrupt(_))
    ));
}

#[test]
fn errors_display_what_users_see() {
    let id = ThreadId::from_string("thr_1");
    assert_eq!(
        StoreError::ThreadNotFound(id).to_string(),
        "thread thr_1 not found"
    );
    let db = StoreError::from(sqlx::Error::RowNotFound);
    assert!(db.to_string().starts_with("database error: "), "{db}");
}

store_tests! {
    async fn a_threads_budget_tree_holds_what_it_delegated_and_not_its_forks(store: sqlite_memory) {
        let thread = |parent: Option<&ThreadRow>| NewThread {
            parent_id: parent.map(|p| p.id.clone()),
            ..NewThread::default()
        };
        let root = store.create_thread(thread(None)).await.unwrap();
        let child = store.create_thread(thread(Some(&root))).await.unwrap();
        let grandchild = store.create_thread(thread(Some(&child))).await.unwrap();
        let fork = store.create_thread(thread(Some(&root))).await.unwrap();
        store.record_delegation(&child.id, &root.id).await.unwrap();
        store.record_delegation(&grandchild.id, &child.id).await.unwrap();
        // Again: nothing changes.
        store.record_delegation(&child.id, &root.id).await.unwrap();
        for (thread, cost_usd) in [(&root, 0.01), (&child, 0.02), (&grandchild, 0.04), (&fork, 0.08)] {
            spend(&store, &thread.id, cost_usd).await;
        }
        for (thread, expected) in [(&root, 0.07), (&child, 0.06), (&grandchild, 0.04), (&fork, 0.08)] {
            let got = store.tree_cost_usd(&thread.id).await.unwrap();
            assert!((got - expected).abs() < 1e-9, "{}: {got} != {expected}", thread.id);
        }
        assert_eq!(
            store.delegators(&grandchild.id).await.unwrap(),
            vec![child.id.clone(), root.id.clone()]
        );
        assert!(store.delegators(&root.id).await.unwrap().is_empty());
        assert!(store.delegators(&fork.id).await.unwrap().is_empty());
    }
}

store_tests! {
    async fn the_first_node_sets_the_clusters_credential_and_the_others_must_match(store: sqlite_memory) {
        assert!(store.join_cluster(Some("secret")).await.unwrap(), "the first sets it");
        assert!(store.join_cluster(Some("secret")).await.unwrap());
        assert!(!store.join_cluster(None).await.unwrap(), "no token is not the token");
        assert!(!store.join_cluster(Some("other")).await.unwrap());
        assert!(!store.join_cluster(Some("")).await.unwrap());
    }
}

/// A stored reply (`msg_2`, the answer to `msg_1` of `thr_1`) saying `content` at `at`, every
/// other field empty: for tests that show one.
pub(crate) fn reply_row(content: &str, at: DateTime<Utc>) -> MessageRow {
    MessageRow {
        id: MessageId::from_string("msg_2"),
        thread_id: ThreadId::from_string("thr_1"),
        seq: 2,
        role: Role::Assistant,
        content: content.into(),
        status: MessageStatus::Done,
        error: None,
        client_message_id: None,
        reply_to: Some(MessageId::from_string("msg_1")),
        model: None,
        origin: Origin::User,
        caller_subject: None,
        caller_tenant: None,
        structured_output: None,
        blocks: None,
        input_tokens: None,
        output_tokens: None,
        cache_read_tokens: None,
        cache_write_tokens: None,
        cost_usd: None,
        api_ms: None,
        created_at: at,
        updated_at: at,
    }
}
