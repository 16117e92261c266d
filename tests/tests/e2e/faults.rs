//! Fault injection: every turn ends, with the truth. Each test breaks one thing (the API hangs,
//! stalls, fails or drops the connection; the CLI is killed or stops without a `result`; the user
//! interrupts) and checks the message's final status and error text, that no process is left
//! behind, and that the next message on the thread works.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::process_exists;

use crate::support::{self, SseClient};

/// A thread that already had one good turn, so "the next message works" also shows the thread
/// kept its history across the fault.
async fn thread_with_history(daemon: &TestDaemon) -> (String, u32) {
    let thread = daemon.create_thread().await;
    assert_eq!(
        daemon.reply(&thread, "remember the word marmalade").await,
        "echo: remember the word marmalade"
    );
    let pid = daemon.pid_of(&thread).expect("a live process after turn 1");
    (thread, pid)
}

/// After a fault: the failed message is stored with `status` and an error containing `needle`,
/// the old process is gone, and the next message gets a correct reply with the history.
async fn assert_recovers(
    daemon: &TestDaemon,
    mock: &MockApi,
    thread: &str,
    failed: &str,
    status: &str,
    needle: &str,
    old_pid: u32,
) {
    let stored = support::user_message(daemon, thread, failed).await;
    assert_eq!(stored["status"], status, "{stored}");
    let error = stored["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(needle),
        "stored error {error:?} lacks {needle:?}"
    );
    assert!(
        support::messages(daemon, thread)
            .await
            .iter()
            .all(|m| m["replyTo"] != stored["id"]),
        "a failed turn has no reply"
    );
    assert!(
        !process_exists(old_pid),
        "the failed turn's process {old_pid} was killed and reaped"
    );

    let next = format!("next after {status}");
    let reply = daemon.reply(thread, &next).await;
    assert!(
        reply.starts_with("echo: ") && reply.ends_with(&next),
        "{reply}"
    );
    let last = mock.message_requests().last().cloned().expect("a request");
    assert!(
        last.all_text().contains("remember the word marmalade"),
        "the thread's history survived: {}",
        last.all_text()
    );
    let pid = daemon.pid_of(thread).expect("a live process again");
    assert_ne!(pid, old_pid);
}

async fn stop_and_check_no_orphans(daemon: TestDaemon) {
    let pids = daemon.live_pids();
    daemon.stop().await;
    for pid in pids {
        assert!(!process_exists(pid), "process {pid} outlived the daemon");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_api_hits_the_idle_timeout() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.turn.idle_timeout = Duration::from_secs(3)).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    mock.once_when_prompt_contains("HANG-ME", Reply::Hang);

    let started = Instant::now();
    let (status, body) = daemon.send(&thread, "HANG-ME").await;
    let took = started.elapsed();
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "turn_timeout");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("sent nothing for 3s"), "{text}");
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert_recovers(
        &daemon,
        &mock,
        &thread,
        "HANG-ME",
        "error",
        "sent nothing for 3s",
        pid,
    )
    .await;
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_stalls_mid_message_hits_the_idle_timeout() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.turn.idle_timeout = Duration::from_secs(3)).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    mock.once_when_prompt_contains("STALL-ME", Reply::StallAfterStart);

    let (status, body) = daemon.send(&thread, "STALL-ME").await;
    assert_eq!(status, 504, "{body}");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("sent nothing for 3s"), "{text}");
    assert!(
        support::stored_events(&daemon, &thread)
            .await
            .iter()
            .any(|e| e.kind == "process_ready"),
        "the turn had started before it stalled"
    );
    assert_recovers(
        &daemon,
        &mock,
        &thread,
        "STALL-ME",
        "error",
        "sent nothing for 3s",
        pid,
    )
    .await;
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_keeps_talking_hits_the_total_timeout() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.turn.idle_timeout = Duration::from_secs(60);
        c.turn.timeout = Duration::from_secs(4);
    })
    .await;
    let (thread, pid) = thread_with_history(&daemon).await;
    // Output every 300 ms for 30 s: never idle, always too long.
    let chunks: Vec<String> = (0..100).map(|i| format!("c{i} ")).collect();
    mock.once_when_prompt_contains(
        "TALK-FOREVER",
        Reply::slow_text(chunks, Duration::from_millis(300)),
    );

    let started = Instant::now();
    let (status, body) = daemon.send(&thread, "TALK-FOREVER").await;
    let took = started.elapsed();
    assert_eq!(status, 504, "{body}");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains("did not finish within 4s"), "{text}");
    assert!(took >= Duration::from_secs(4), "{took:?}");
    assert!(
        support::stored_events(&daemon, &thread)
            .await
            .iter()
            .filter(|e| e.kind == "text_delta")
            .count()
            >= 3,
        "text was flowing, so only the total timeout could end it"
    );
    assert_recovers(
        &daemon,
        &mock,
        &thread,
        "TALK-FOREVER",
        "error",
        "did not finish within 4s",
        pid,
    )
    .await;
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_killed_mid_turn_fails_the_turn_at_once() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    let chunks: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    mock.once_when_prompt_contains(
        "KILL-ME",
        Reply::slow_text(chunks, Duration::from_millis(250)),
    );

    let before = support::last_event_id(&daemon, &thread).await;
    let send = async {
        let answer = daemon.send(&thread, "KILL-ME").await;
        (answer, Instant::now())
    };
    let kill = async {
        support::wait_for_event(
            &daemon,
            &thread,
            "text_delta",
            before,
            Duration::from_secs(20),
        )
        .await;
        assert_eq!(
            daemon.pid_of(&thread),
            Some(pid),
            "the warm process runs it"
        );
        support::signal(pid, Signal::SIGKILL);
        Instant::now()
    };
    let (((status, body), answered), killed) = tokio::join!(send, kill);
    // The answer came after the kill, and says the CLI died: the turn did not wait for a
    // timeout (idle 60 s, total 120 s here), which would answer 504 `turn_timeout`.
    assert!(answered >= killed, "the turn ended before the kill");
    assert_eq!(status, 502, "{body}");
    assert_eq!(body["error"]["code"], "cli_died");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        text.contains("exited mid-turn") && text.contains("signal: 9"),
        "{text}"
    );
    assert_recovers(
        &daemon,
        &mock,
        &thread,
        "KILL-ME",
        "error",
        "signal: 9",
        pid,
    )
    .await;
    stop_and_check_no_orphans(daemon).await;
}

/// `status` with `CLAUDE_CODE_MAX_RETRIES=2`: three requests, two `api_retry` events, then the
/// CLI's own reason. The daemon sends the turn once.
async fn api_error_fails_with_the_cli_reason(status: u16) {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.claude.max_retries = 2).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    let needle = format!("FAIL-{status}");
    mock.when_prompt_contains(&needle, Reply::error(status));

    let (code, body) = daemon.send(&thread, &needle).await;
    assert_eq!(code, 502, "{body}");
    assert_eq!(body["error"]["code"], "cli_error");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    // The CLI words it `API Error: 529 …`, or `API Error: Repeated 529 Overloaded errors …`
    // outside a sandbox: both say the status.
    let reason = "API Error";
    assert!(
        text.contains(reason) && text.contains(&status.to_string()),
        "{text}"
    );
    // The CLI names its endpoint, the daemon's upstream; clients do not see it.
    let port = mock.url().rsplit(':').next().unwrap_or_default().to_owned();
    assert!(
        !text.contains(&port) && !text.contains("127.0.0.1"),
        "{text}"
    );

    let tries = mock
        .message_requests()
        .iter()
        .filter(|r| r.last_user_text().contains(&needle))
        .count();
    assert_eq!(
        tries, 3,
        "one request plus the CLI's two retries, none from us"
    );
    let message_id = body["error"]["messageId"].as_str().expect("messageId");
    let retries: Vec<serde_json::Value> = support::stored_events(&daemon, &thread)
        .await
        .into_iter()
        .filter(|e| e.kind == "api_retry")
        .map(|e| {
            assert_eq!(e.message_id.as_ref().map(|m| m.as_str()), Some(message_id));
            e.data
        })
        .collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!(retries[0]["attempt"], 1);
    assert_eq!(retries[1]["attempt"], 2);
    assert!(retries
        .iter()
        .all(|r| r["status"] == status && r["max_retries"] == 2));
    let failed = support::stored_events(&daemon, &thread)
        .await
        .into_iter()
        .rfind(|e| e.kind == "turn_failed")
        .expect("a turn_failed event");
    assert_eq!(failed.data["status"], "error");
    assert!(failed.data["error"]
        .as_str()
        .unwrap_or_default()
        .contains(reason));

    mock.reset();
    assert_recovers(&daemon, &mock, &thread, &needle, "error", reason, pid).await;
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_500_fails_with_the_cli_reason_after_its_retries() {
    api_error_fails_with_the_cli_reason(500).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_529_fails_with_the_cli_reason_after_its_retries() {
    api_error_fails_with_the_cli_reason(529).await;
}

/// Straight to the API, the CLI sees the connection drop (an `api_retry` with no HTTP status,
/// `Connection dropped`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_is_retried_by_the_cli_then_reported() {
    dropped_connections(false, serde_json::Value::Null, "Connection dropped").await;
}

/// Through the model gateway, a connection the API drops is the gateway's 502 (`api_error`, no
/// upstream address in it), which the CLI retries the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_connection_behind_the_gateway_is_a_502_the_cli_retries() {
    let text = "the model gateway could not reach the Messages API";
    dropped_connections(true, json!(502), text).await;
}

async fn dropped_connections(gateway: bool, retry_status: serde_json::Value, reason: &str) {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.max_retries = 2;
        c.gateway.enabled = gateway;
    })
    .await;
    let (thread, pid) = thread_with_history(&daemon).await;
    let tries = |needle: &str| {
        mock.message_requests()
            .iter()
            .filter(|r| r.last_user_text().contains(needle))
            .count()
    };

    // Once: the CLI retries on its own (an `api_retry` with no HTTP status) and the turn works.
    mock.once_when_prompt_contains("DROP-ONCE", Reply::DropConnection);
    assert_eq!(daemon.reply(&thread, "DROP-ONCE").await, "echo: DROP-ONCE");
    assert_eq!(
        tries("DROP-ONCE"),
        2,
        "the dropped request and the CLI's retry"
    );
    let retries: Vec<serde_json::Value> = support::stored_events(&daemon, &thread)
        .await
        .into_iter()
        .filter(|e| e.kind == "api_retry")
        .map(|e| e.data)
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    assert_eq!(retries[0]["status"], retry_status);
    assert_eq!(
        daemon.pid_of(&thread),
        Some(pid),
        "a retried turn keeps its process"
    );

    // Every time: after its retries the CLI gives up, and so does the turn.
    mock.when_prompt_contains("DROP-ALWAYS", Reply::DropConnection);
    let (status, body) = daemon.send(&thread, "DROP-ALWAYS").await;
    assert_eq!(status, 502, "{body}");
    let text = body["error"]["message"].as_str().unwrap_or_default();
    assert!(text.contains(reason), "{text}");
    assert!(!text.contains(&mock.url()), "{text}");
    assert_eq!(
        tries("DROP-ALWAYS"),
        3,
        "one request plus two retries, none from us"
    );
    mock.reset();
    assert_recovers(&daemon, &mock, &thread, "DROP-ALWAYS", "error", reason, pid).await;
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_that_exits_without_a_result_ends_the_turn_on_the_stream() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    let chunks: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    mock.once_when_prompt_contains(
        "SIGTERM-ME",
        Reply::slow_text(chunks, Duration::from_millis(250)),
    );
    let mut sse = SseClient::connect(&daemon.base, &thread, None).await;
    // The first turn's events are history; skip to the end of it.
    sse.until(Duration::from_secs(10), support::is_terminal)
        .await
        .expect("the first turn's events are replayed");

    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "SIGTERM-ME"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let message_id = body["messageId"].as_str().expect("messageId").to_owned();
    sse.until(Duration::from_secs(20), |e| e.kind == "text_delta")
        .await
        .expect("the turn streams");
    // SIGTERM mid-turn: the CLI exits 143 at once and writes no `result`.
    support::signal(pid, Signal::SIGTERM);
    let events = sse
        .until(Duration::from_secs(5), support::is_terminal)
        .await
        .expect("a terminal event arrives although the CLI never sent a result");
    let last = events.last().expect("at least the terminal event");
    assert_eq!(last.kind, "turn_failed");
    assert_eq!(last.data["messageId"], message_id);
    assert_eq!(last.data["data"]["status"], "error");
    let error = last.data["data"]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("exited mid-turn") && error.contains("143"),
        "{error}"
    );
    assert!(
        events.iter().all(|e| e.kind != "turn_finished"),
        "{events:?}"
    );
    assert_recovers(
        &daemon,
        &mock,
        &thread,
        "SIGTERM-ME",
        "error",
        "exit status: 143",
        pid,
    )
    .await;
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_stops_the_turn_and_keeps_the_process() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    let chunks: Vec<String> = (0..40).map(|i| format!("w{i} ")).collect();
    mock.once_when_prompt_contains(
        "STOP-ME",
        Reply::slow_text(chunks, Duration::from_millis(250)),
    );

    let before = support::last_event_id(&daemon, &thread).await;
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "STOP-ME"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    support::wait_for_event(
        &daemon,
        &thread,
        "text_delta",
        before,
        Duration::from_secs(20),
    )
    .await;
    let (status, body) = daemon
        .post(&format!("/api/threads/{thread}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["interrupted"], true);
    harness_tests::util::eventually_async(
        Duration::from_secs(5),
        "the message ends as interrupted",
        || async {
            support::user_message(&daemon, &thread, "STOP-ME").await["status"] == "interrupted"
        },
    )
    .await
    .unwrap();
    let stored = support::user_message(&daemon, &thread, "STOP-ME").await;
    assert_eq!(stored["error"], "the turn was interrupted");
    assert_eq!(daemon.pid_of(&thread), Some(pid), "the process stays");

    let reply = daemon.reply(&thread, "are you still there?").await;
    assert!(reply.ends_with("are you still there?"), "{reply}");
    assert_eq!(
        daemon.pid_of(&thread),
        Some(pid),
        "the same process served it"
    );
    assert_eq!(daemon.spawns(), 1);
    // Nothing is running now: a second interrupt is a no-op.
    let (status, body) = daemon
        .post(&format!("/api/threads/{thread}/interrupt"), json!({}))
        .await;
    assert_eq!(
        (status.as_u16(), &body["interrupted"]),
        (200, &json!(false))
    );
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_sent_before_the_cli_started_the_turn_is_not_lost() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    let chunks: Vec<String> = (0..20).map(|i| format!("w{i} ")).collect();
    mock.once_when_prompt_contains(
        "STOP-AT-ONCE",
        Reply::slow_text(chunks, Duration::from_millis(250)),
    );
    let (status, body) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "STOP-AT-ONCE"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    // Interrupt as soon as the turn is on the process: usually before the CLI has started it
    // (it answers such an interrupt with `still_queued` and would run the turn anyway).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = daemon
            .post(&format!("/api/threads/{thread}/interrupt"), json!({}))
            .await;
        assert_eq!(status, 200, "{body}");
        if body["interrupted"] == true {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the turn never became interruptible"
        );
        tokio::task::yield_now().await;
    }
    harness_tests::util::eventually_async(Duration::from_secs(10), "the message ends", || async {
        support::user_message(&daemon, &thread, "STOP-AT-ONCE").await["status"] != "pending"
    })
    .await
    .unwrap();
    let stored = support::user_message(&daemon, &thread, "STOP-AT-ONCE").await;
    assert_eq!(stored["status"], "interrupted", "{stored}");
    assert_eq!(daemon.pid_of(&thread), Some(pid));
    // Stopped before its API request went out, the slow reply is still scripted; and the CLI
    // sends the interrupted text again with the next one.
    mock.reset();
    let reply = daemon.reply(&thread, "still there?").await;
    assert!(reply.ends_with("still there?"), "{reply}");
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_cuts_the_running_turn_and_starts_no_queued_one() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.shutdown_grace = Duration::from_secs(1)).await;
    let (thread, pid) = thread_with_history(&daemon).await;
    mock.once_when_prompt_contains("HANG-AT-SHUTDOWN", Reply::Hang);
    let path = format!("/api/threads/{thread}/messages?wait=false");
    for text in ["HANG-AT-SHUTDOWN", "QUEUED-AT-SHUTDOWN"] {
        let (status, body) = daemon.post(&path, json!({"content": text})).await;
        assert_eq!(status, 202, "{body}");
    }
    mock.wait_for_requests(2, Duration::from_secs(20))
        .await
        .unwrap();
    let old = daemon.daemon().pool.clone();

    let daemon = daemon.restart().await;
    assert!(
        !process_exists(pid),
        "the running turn's process was killed"
    );
    let spawns = old.counts().spawns;
    assert_eq!(spawns, 1, "no process was started for the queued message");
    let cut = support::user_message(&daemon, &thread, "HANG-AT-SHUTDOWN").await;
    assert_eq!(cut["status"], "interrupted", "{cut}");
    assert_eq!(
        cut["error"], "the daemon is shutting down",
        "the turn recorded its own end (not the final sweep's \"before this turn finished\")"
    );
    let queued = support::user_message(&daemon, &thread, "QUEUED-AT-SHUTDOWN").await;
    assert_eq!(queued["status"], "interrupted", "{queued}");
    assert_eq!(queued["error"], "the daemon is shutting down");
    assert!(mock
        .message_requests()
        .iter()
        .all(|r| !r.last_user_text().contains("QUEUED-AT-SHUTDOWN")));
    let reply = daemon.reply(&thread, "after the restart").await;
    assert!(reply.ends_with("after the restart"), "{reply}");
    stop_and_check_no_orphans(daemon).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_during_a_cold_start_stops_the_turn() {
    let mock = MockApi::start().await;
    // A CLI that takes three seconds to start: the interrupt lands while it starts.
    let dir = tempfile::tempdir().expect("temp dir");
    let real = tokio::task::spawn_blocking(harness_tests::cli::claude_bin)
        .await
        .expect("installer task")
        .expect("the claude CLI is installed by test support");
    let slow = dir.path().join("slow-claude");
    let pid_file = dir.path().join("slow-claude.pid");
    std::fs::write(
        &slow,
        format!(
            "#!/bin/sh\necho $$ > '{}'\nsleep 3\nexec '{}' \"$@\"\n",
            pid_file.display(),
            real.display()
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(&slow, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod the wrapper");
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.bin = slow.clone();
        // The wrapper writes its pid beside itself, where the walls let it.
        c.sandbox.read_write.push(dir.path().to_path_buf());
    })
    .await;
    let thread = daemon.create_thread().await;
    let mut events = SseClient::connect(&daemon.base, &thread, None).await;
    let (status, accepted) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "never reaches the model"}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    events
        .until(Duration::from_secs(30), |e| e.kind == "turn_started")
        .await
        .expect("the turn started");
    harness_tests::util::eventually(Duration::from_secs(30), "the CLI is starting", || {
        std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n'))
    })
    .await
    .unwrap();
    let (status, body) = daemon
        .post(&format!("/api/threads/{thread}/interrupt"), json!({}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["interrupted"], true, "{body}");
    let end = events
        .until(Duration::from_secs(30), |e| {
            support::is_terminal_kind(&e.kind)
        })
        .await
        .expect("the turn ended")
        .pop()
        .expect("the terminal event");
    assert_eq!(end.kind, "turn_failed", "{end:?}");
    assert_eq!(end.data["data"]["status"], "interrupted", "{end:?}");
    let message = support::user_message(&daemon, &thread, "never reaches the model").await;
    assert_eq!(message["status"], "interrupted", "{message}");
    assert!(
        mock.message_requests().is_empty(),
        "nothing reached the API"
    );
    // The half-started process (the wrapper, or the CLI it execs into under the same pid) was
    // killed with the cancelled start.
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("the wrapper wrote its pid")
        .trim()
        .parse()
        .expect("a pid");
    harness_tests::util::eventually(Duration::from_secs(10), "the starting CLI is gone", || {
        !process_exists(pid)
    })
    .await
    .unwrap();
    stop_and_check_no_orphans(daemon).await;
}
