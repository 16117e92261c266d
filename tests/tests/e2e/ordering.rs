//! One thread, many messages: strict arrival order, replies linked to their questions, a bounded
//! queue, and a retried `clientMessageId` that never runs twice.

use std::time::Duration;

use futures::future::join_all;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::{eventually_async, process_exists};

use crate::support;

/// Polls until the thread's user messages have all left `pending`.
async fn wait_until_settled(daemon: &TestDaemon, thread: &str, users: usize) -> Vec<Value> {
    eventually_async(
        Duration::from_secs(60),
        "every message has finished",
        || async {
            let all = support::messages(daemon, thread).await;
            let done: Vec<&Value> = all.iter().filter(|m| m["role"] == "user").collect();
            done.len() == users && done.iter().all(|m| m["status"] != "pending")
        },
    )
    .await
    .unwrap_or_else(|err| panic!("{err}"));
    support::messages(daemon, thread).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_posted_at_once_run_in_arrival_order_and_answer_their_own_question() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}/messages?wait=false");
    // A slow first answer, so the others pile up behind it.
    mock.once_when_prompt_contains(
        "question 0",
        Reply::slow_text(["echo: ", "question ", "0"], Duration::from_millis(300)),
    );

    let posts = (0..6).map(|i| daemon.post(&path, json!({"content": format!("question {i}")})));
    let accepted = join_all(posts).await;
    for (status, body) in &accepted {
        assert_eq!(*status, 202, "{body}");
        assert_eq!(body["status"], "accepted");
    }

    let all = wait_until_settled(&daemon, &thread, 6).await;
    let mut questions: Vec<&Value> = all.iter().filter(|m| m["role"] == "user").collect();
    questions.sort_by_key(|m| m["seq"].as_i64());
    let arrival: Vec<String> = questions
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect();
    let asked: Vec<String> = mock
        .message_requests()
        .iter()
        .map(|r| r.last_user_text())
        .collect();
    assert_eq!(
        asked, arrival,
        "the CLI got the messages in arrival (seq) order"
    );
    let accepted_ids: Vec<&Value> = accepted.iter().map(|(_, b)| &b["messageId"]).collect();
    for question in &questions {
        assert!(accepted_ids.contains(&&question["id"]));
        assert_eq!(question["status"], "done", "{question}");
        let replies: Vec<&Value> = all
            .iter()
            .filter(|m| m["replyTo"] == question["id"])
            .collect();
        assert_eq!(replies.len(), 1, "one reply per question");
        assert_eq!(
            replies[0]["content"].as_str().unwrap_or_default(),
            format!("echo: {}", question["content"].as_str().unwrap_or_default()),
            "the reply answers its own question"
        );
    }
    // Turns follow one another on the stream too: each starts after the previous one ended.
    let kinds: Vec<String> = support::stored_events(&daemon, &thread)
        .await
        .into_iter()
        .filter(|e| e.kind == "turn_started" || support::is_terminal_kind(&e.kind))
        .map(|e| {
            format!(
                "{} {}",
                e.kind,
                e.message_id
                    .map(|m| m.as_str().to_owned())
                    .unwrap_or_default()
            )
        })
        .collect();
    let expected: Vec<String> = questions
        .iter()
        .flat_map(|q| {
            let id = q["id"].as_str().unwrap_or_default();
            [format!("turn_started {id}"), format!("turn_finished {id}")]
        })
        .collect();
    assert_eq!(kinds, expected);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_refuses_with_429_and_keeps_nothing() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.turn.queue_limit = 2).await;
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}/messages?wait=false");
    let chunks: Vec<String> = (0..8).map(|i| format!("c{i} ")).collect();
    mock.once_when_prompt_contains(
        "running",
        Reply::slow_text(chunks, Duration::from_millis(250)),
    );

    // One running plus two waiting fill it.
    for text in ["running", "waiting 1", "waiting 2"] {
        let (status, body) = daemon.post(&path, json!({"content": text})).await;
        assert_eq!(status, 202, "{text}: {body}");
    }
    let (status, body) = daemon.post(&path, json!({"content": "one too many"})).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "queue_full");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("already has 2 messages waiting") && text.contains("retry later"),
        "{text}"
    );

    let all = wait_until_settled(&daemon, &thread, 3).await;
    assert!(
        all.iter().all(|m| m["content"] != "one too many"),
        "a refused message is not stored"
    );
    assert!(all
        .iter()
        .filter(|m| m["role"] == "user")
        .all(|m| m["status"] == "done"));
    // Room again once the queue drained.
    assert_eq!(
        daemon.reply(&thread, "now there is room").await,
        "echo: now there is room"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_while_the_first_is_running_runs_once_and_gets_the_same_reply() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}/messages");
    mock.once_when_prompt_contains(
        "only once",
        Reply::slow_text(["echo: ", "only ", "once"], Duration::from_millis(500)),
    );
    let body = json!({"content": "only once", "clientMessageId": "retry-7"});

    let first = daemon.post(&path, body.clone());
    let retry = async {
        // The client timed out and retries while the turn is still running.
        mock.wait_for_requests(1, Duration::from_secs(30))
            .await
            .unwrap();
        let (_, running) = daemon.get(&format!("/api/threads/{thread}")).await;
        assert_eq!(running["messages"][0]["status"], "pending", "still running");
        daemon.post(&path, body.clone()).await
    };
    let ((s1, b1), (s2, b2)) = tokio::join!(first, retry);
    assert_eq!((s1.as_u16(), s2.as_u16()), (200, 200), "{b1} {b2}");
    assert_eq!(b1["message"]["content"], "echo: only once");
    assert_eq!(
        b2["message"], b1["message"],
        "the retry gets the first run's reply"
    );
    assert_eq!(b2["userMessageId"], b1["userMessageId"]);

    // After it finished: the same answer again, and `?wait=false` says it is a duplicate.
    let (s3, b3) = daemon.post(&path, body.clone()).await;
    assert_eq!((s3.as_u16(), &b3["message"]), (200, &b1["message"]));
    let (s4, b4) = daemon
        .post(&format!("{path}?wait=false"), body.clone())
        .await;
    assert_eq!(s4, 202, "{b4}");
    assert_eq!(
        (&b4["duplicate"], &b4["messageId"]),
        (&json!(true), &b1["userMessageId"])
    );

    let runs = mock
        .message_requests()
        .iter()
        .filter(|r| r.last_user_text().contains("only once"))
        .count();
    assert_eq!(runs, 1, "the turn ran once");
    assert_eq!(support::messages(&daemon, &thread).await.len(), 2);
    let pids = daemon.live_pids();
    daemon.stop().await;
    assert!(pids.iter().all(|p| !process_exists(*p)));
}
