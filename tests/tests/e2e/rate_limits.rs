//! Backing off under rate limits: while the mock API answers 529, the daemon lowers how many turns
//! run at once (`harness_turn_concurrency_limit` in `/metrics`, the `limit` of `turn_throttled`
//! events), raises it again once turns go through, and every message ends `done` or `error` with
//! the CLI's reason: none is lost or left `pending`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::join_all;
use serde_json::Value;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::eventually_async;

use crate::metrics::{scrape, value};
use crate::support;

/// Pool capacity, and so the limit's ceiling and starting value.
const CAPACITY: u64 = 4;
/// More threads than the limit, so some turns wait from the start.
const THREADS: usize = 6;
/// Messages each thread sends one after another while the API is overloaded.
const DURING_OUTAGE: usize = 2;

const LIMIT: &str = "harness_turn_concurrency_limit";

async fn limit(daemon: &TestDaemon) -> f64 {
    value(&scrape(daemon).await, LIMIT).expect("the limit gauge is exported")
}

/// Every stored `turn_throttled` event of these threads.
async fn throttled_events(daemon: &TestDaemon, threads: &[String]) -> Vec<Value> {
    let mut found = Vec::new();
    for thread in threads {
        found.extend(
            support::stored_events(daemon, thread)
                .await
                .into_iter()
                .filter(|e| e.kind == "turn_throttled")
                .map(|e| e.data),
        );
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_drops_under_529s_recovers_after_and_no_message_is_lost() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.max_capacity = CAPACITY;
        // One retry: a turn meets the outage twice, then fails with the CLI's reason.
        c.claude.max_retries = 1;
        c.rate_limit.cooldown = Duration::from_millis(500);
    })
    .await;
    assert_eq!(
        limit(&daemon).await,
        CAPACITY as f64,
        "starts at the ceiling"
    );
    let threads: Vec<String> = join_all((0..THREADS).map(|_| daemon.create_thread())).await;

    // The limit over time, for the failure message and the log.
    let started = Instant::now();
    let trace: Mutex<Vec<(u128, f64)>> = Mutex::new(Vec::new());
    let finished = AtomicBool::new(false);
    let sampler = async {
        while !finished.load(Ordering::SeqCst) {
            let now = limit(&daemon).await;
            {
                let mut trace = trace.lock().expect("trace lock");
                if trace.last().map(|(_, l)| *l) != Some(now) {
                    trace.push((started.elapsed().as_millis(), now));
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };

    let outage = Mutex::new(Some(mock.fail_while(529)));
    // What each send got: (thread, text) → (HTTP status, body).
    let answers: Mutex<BTreeMap<(usize, String), (u16, Value)>> = Mutex::default();
    let send_all = |texts: Vec<(usize, String)>| {
        let (daemon, threads, answers) = (&daemon, &threads, &answers);
        async move {
            let mut by_thread: BTreeMap<usize, Vec<String>> = BTreeMap::new();
            for (t, text) in texts {
                by_thread.entry(t).or_default().push(text);
            }
            join_all(by_thread.into_iter().map(|(t, texts)| async move {
                for text in texts {
                    let (status, body) = daemon.send(&threads[t], &text).await;
                    answers
                        .lock()
                        .expect("answers lock")
                        .insert((t, text), (status.as_u16(), body));
                }
            }))
            .await;
        }
    };
    let during: Vec<(usize, String)> = (0..THREADS)
        .flat_map(|t| (0..DURING_OUTAGE).map(move |m| (t, format!("thread {t} outage {m}"))))
        .collect();

    let work = async {
        let overloaded = async {
            // The outage lasts until the limit went down, a turn waited under the lowered limit,
            // and a turn failed for good; then the API recovers while turns are still queued.
            eventually_async(
                Duration::from_secs(90),
                "the limit drops, a turn waits under it and one fails",
                || async {
                    let text = scrape(&daemon).await;
                    let dropped = value(&text, LIMIT).is_some_and(|l| l < CAPACITY as f64);
                    let failed =
                        value(&text, r#"harness_turns_total{outcome="error"}"#).unwrap_or(0.0);
                    let lowered_wait = throttled_events(&daemon, &threads)
                        .await
                        .iter()
                        .any(|e| e["limit"].as_f64().is_some_and(|l| l < CAPACITY as f64));
                    dropped && failed >= 1.0 && lowered_wait
                },
            )
            .await
            .unwrap_or_else(|err| panic!("{err}; limit over time {:?}", trace.lock()));
            if let Some(outage) = outage.lock().expect("outage lock").take() {
                outage.end();
            }
        };
        tokio::time::timeout(
            Duration::from_secs(150),
            futures::future::join(send_all(during.clone()), overloaded),
        )
        .await
        .expect("every message sent during the outage is answered");
        let lowest = trace
            .lock()
            .expect("trace lock")
            .iter()
            .map(|(_, l)| *l)
            .fold(f64::MAX, f64::min);

        // The API answers again: turns go through and the limit climbs back to the ceiling.
        let mut round = 0;
        eventually_async(
            Duration::from_secs(120),
            "the limit is back at the ceiling",
            || {
                round += 1;
                let texts: Vec<(usize, String)> = (0..THREADS)
                    .map(|t| (t, format!("thread {t} recovery {round}")))
                    .collect();
                let send = send_all(texts);
                let daemon = &daemon;
                async move {
                    if limit(daemon).await >= CAPACITY as f64 {
                        return true;
                    }
                    send.await;
                    limit(daemon).await >= CAPACITY as f64
                }
            },
        )
        .await
        .unwrap_or_else(|err| panic!("{err}; limit over time {:?}", trace.lock()));
        finished.store(true, Ordering::SeqCst);
        lowest
    };
    let ((), lowest) = tokio::join!(sampler, work);
    let trace = trace.into_inner().expect("trace lock");
    eprintln!("limit over time (ms since the outage began, limit): {trace:?}");
    assert!(lowest < CAPACITY as f64, "{trace:?}");

    // Every message ended: a reply, or a failure naming the API's 529. None pending, none lost.
    let answers = answers.into_inner().expect("answers lock");
    let mut failed = 0;
    for ((t, text), (status, body)) in &answers {
        match status {
            200 => assert_eq!(body["message"]["content"], format!("echo: {text}")),
            502 => {
                failed += 1;
                let error = body["error"]["message"].as_str().unwrap_or_default();
                assert!(error.contains("529"), "thread {t} {text:?}: {error}");
            }
            other => panic!("thread {t} {text:?}: HTTP {other} {body}"),
        }
    }
    assert!(failed >= 1, "some turn met the outage to its end");
    for (t, thread) in threads.iter().enumerate() {
        let users: Vec<Value> = support::messages(&daemon, thread)
            .await
            .into_iter()
            .filter(|m| m["role"] == "user")
            .collect();
        let sent = answers.keys().filter(|(at, _)| *at == t).count();
        assert_eq!(users.len(), sent, "thread {t}: every message stored once");
        for user in &users {
            match user["status"].as_str() {
                Some("done") => {}
                Some("error") => {
                    let error = user["error"].as_str().unwrap_or_default();
                    assert!(
                        error.contains("API Error") && error.contains("529"),
                        "{user}"
                    );
                }
                _ => panic!("thread {t}: a message did not end: {user}"),
            }
        }
    }

    // The stream said why turns waited, and the operator's series agree.
    let throttled = throttled_events(&daemon, &threads).await;
    assert!(throttled.iter().all(|e| e["position"].as_u64() >= Some(1)
        && e["limit"].as_u64() >= Some(1)
        && e["messageId"].is_string()));
    let text = scrape(&daemon).await;
    assert!(value(&text, r#"harness_api_retries_total{status="529"}"#) >= Some(1.0));
    assert!(value(&text, "harness_turn_concurrency_decreases_total") >= Some(1.0));
    assert_eq!(
        value(&text, "harness_turns_throttled_total"),
        Some(throttled.len() as f64),
        "one turn_throttled event per throttled turn"
    );
    assert_eq!(value(&text, LIMIT), Some(CAPACITY as f64));
    eventually_async(Duration::from_secs(10), "no turn holds a place", || async {
        let text = scrape(&daemon).await;
        value(&text, "harness_turns_running") == Some(0.0)
            && value(&text, "harness_turns_throttled_waiting") == Some(0.0)
    })
    .await
    .unwrap();
    daemon.stop().await;
}
