//! More active threads than pool slots: the pool keeps a warm set instead of thrashing, a process
//! that went idle a moment ago is not pushed out for a newcomer, the newcomer waits its turn, and
//! every reply is right, in order, with never more processes than the capacity.

use std::time::Duration;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::eventually;

use crate::support;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_used_in_a_loop_beyond_capacity_keep_a_warm_set() {
    const CAPACITY: u64 = 3;
    const THREADS: usize = 6;
    const ROUNDS: usize = 3;
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.max_capacity = CAPACITY;
        // The spare lives inside the capacity.
        c.pool.spares = 1;
        // Shorter than the time between a thread's turns here (five other turns).
        c.pool.evict_grace = Duration::from_millis(300);
    })
    .await;
    let mut threads = Vec::new();
    for _ in 0..THREADS {
        threads.push(daemon.create_thread().await);
    }
    for round in 0..ROUNDS {
        for (t, thread) in threads.iter().enumerate() {
            let text = format!("round {round} thread {t}");
            assert_eq!(daemon.reply(thread, &text).await, format!("echo: {text}"));
        }
    }

    let counts = daemon.counts();
    // Plain LRU pushes out each process just before its thread comes round again: no hits at
    // all. Keeping the processes expected back soonest gives about (capacity - 1) of every
    // THREADS turns once each thread's rhythm is known (from the second round).
    assert!(
        counts.hits >= 2,
        "hits {} misses {}: the pool thrashed",
        counts.hits,
        counts.misses
    );
    assert!(
        counts.live_peak <= CAPACITY,
        "{} processes at once, capacity {CAPACITY} (spare included)",
        counts.live_peak
    );
    for (t, thread) in threads.iter().enumerate() {
        let sent: Vec<String> = (0..ROUNDS)
            .map(|round| format!("round {round} thread {t}"))
            .collect();
        support::assert_echoed_in_order(&daemon, thread, &sent).await;
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_waits_for_a_process_that_went_idle_a_moment_ago() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.max_capacity = 1;
        c.pool.evict_grace = Duration::from_secs(2);
        // Long enough that only the end of the grace lets the newcomer in.
        c.pool.slot_wait = Duration::from_secs(60);
    })
    .await;
    let regular = daemon.create_thread().await;
    daemon.reply(&regular, "first").await;
    let pid = daemon.pid_of(&regular).expect("a process");

    let newcomer = daemon.create_thread().await;
    let waiting = tokio::spawn({
        let client = daemon.client().clone();
        let newcomer = newcomer.clone();
        async move { client.reply(&newcomer, "let me in").await }
    });
    eventually(
        Duration::from_secs(30),
        "the newcomer waits for a slot",
        || daemon.counts().slot_waiting == 1,
    )
    .await
    .unwrap();
    // The regular's next turn finds its process: the newcomer did not push it out.
    assert_eq!(daemon.reply(&regular, "second").await, "echo: second");
    assert_eq!(daemon.pid_of(&regular), Some(pid), "still the same process");

    // Once the regular's process has been idle for the grace, the newcomer gets its slot.
    assert_eq!(waiting.await.unwrap(), "echo: let me in");
    let counts = daemon.counts();
    assert_eq!(counts.slot_waits, 1);
    assert_eq!(
        counts.slot_waits_expired, 0,
        "let in by the grace, not the bound"
    );
    assert!(
        counts.slot_wait_ms >= 1000,
        "waited {} ms",
        counts.slot_wait_ms
    );
    assert_eq!(counts.evictions.capacity, 1);
    assert_eq!(
        daemon.pid_of(&regular),
        None,
        "the regular's process made room"
    );
    let (_, pool) = daemon.get("/api/pool").await;
    assert_eq!(pool["stats"]["slotWaits"], 1, "{pool}");
    assert!(pool["hitRate"].as_f64().is_some(), "{pool}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_waits_no_longer_than_the_slot_wait() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.max_capacity = 1;
        // The regular would be protected for a minute; the newcomer waits a second at most.
        c.pool.evict_grace = Duration::from_secs(60);
        c.pool.slot_wait = Duration::from_secs(1);
    })
    .await;
    let regular = daemon.create_thread().await;
    daemon.reply(&regular, "first").await;
    let newcomer = daemon.create_thread().await;
    assert_eq!(
        daemon.reply(&newcomer, "let me in").await,
        "echo: let me in"
    );
    let counts = daemon.counts();
    assert_eq!((counts.slot_waits, counts.slot_waits_expired), (1, 1));
    assert!(
        counts.slot_wait_ms >= 1000,
        "waited {} ms",
        counts.slot_wait_ms
    );
    let metrics = crate::metrics::scrape(&daemon).await;
    assert!(
        metrics.contains("harness_pool_slot_waits_expired_total 1"),
        "{metrics}"
    );
    daemon.stop().await;
}
