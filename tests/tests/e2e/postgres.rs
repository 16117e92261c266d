//! The daemon on PostgreSQL (`db = "postgres://…"`): a real server from `pg-test`, two turns of
//! one thread through the real CLI, then a restart that finds the thread where it left it.

use reqwest::StatusCode;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use super::support::stored_events;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_on_postgres_are_stored_there_and_survive_a_restart() {
    let url = pg_test::database_url().await.expect("a test PostgreSQL");
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.db = Some(url.clone())).await;
    assert_eq!(daemon.daemon().store.backend(), "postgres");
    let thread = daemon.create_thread().await;
    let first = daemon.reply(&thread, "first").await;
    let second = daemon.reply(&thread, "second").await;
    assert!(!first.is_empty() && !second.is_empty());

    let (status, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let messages: Vec<(i64, String, String)> = body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .map(|m| {
            (
                m["seq"].as_i64().expect("seq"),
                m["role"].as_str().expect("role").to_owned(),
                m["status"].as_str().expect("status").to_owned(),
            )
        })
        .collect();
    let expected: Vec<(i64, String, String)> =
        [(1, "user"), (2, "assistant"), (3, "user"), (4, "assistant")]
            .into_iter()
            .map(|(seq, role)| (seq, role.to_owned(), "done".to_owned()))
            .collect();
    assert_eq!(messages, expected, "{body}");
    assert!(body["cliSessionId"].is_string(), "{body}");

    let events = stored_events(&daemon, &thread).await;
    let finished = events.iter().filter(|e| e.kind == "turn_finished").count();
    assert_eq!(finished, 2, "{events:?}");
    assert!(events.windows(2).all(|w| w[0].id < w[1].id), "{events:?}");
    // Nothing went to a SQLite file in the data directory.
    assert!(!daemon.data_dir().join("harness.db").exists());

    let daemon = daemon.restart().await;
    let (status, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["messages"].as_array().map(Vec::len), Some(4), "{body}");
    let third = daemon.reply(&thread, "third").await;
    assert!(!third.is_empty());
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(body["messages"][5]["seq"], 6, "{body}");
    daemon.stop().await;
}
