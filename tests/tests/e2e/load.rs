//! A small load run (the figures come from `tests/src/bin/load.rs`): more threads than pool slots,
//! all at once. Every reply is right and in order, the pool never holds more processes than its
//! capacity, and no process outlives the daemon. Nothing here is timed.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::process_exists;

use crate::support;

const THREADS: usize = 6;
const MESSAGES: usize = 3;
const CAPACITY: u64 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_threads_than_slots_stay_correct_ordered_and_bounded() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.pool.max_capacity = CAPACITY).await;
    let threads: Vec<String> = join_all((0..THREADS).map(|_| daemon.create_thread())).await;

    let done = AtomicBool::new(false);
    let seen = Mutex::new(BTreeSet::new());
    let sample = || {
        let live = daemon.live_pids();
        seen.lock()
            .expect("sampler lock")
            .extend(live.iter().copied());
        live.len()
    };
    let sampler = async {
        let (mut peak, mut api_peak) = (0, 0);
        while !done.load(Ordering::SeqCst) {
            peak = peak.max(sample());
            let (_, pool) = daemon.get("/api/pool").await;
            api_peak = api_peak.max(pool["processes"].as_array().map_or(0, Vec::len));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (peak, api_peak)
    };
    let daemon_ref = &daemon;
    let work = async {
        let per_thread = threads.iter().enumerate().map(|(t, thread)| async move {
            for m in 0..MESSAGES {
                let text = format!("thread {t} message {m}");
                assert_eq!(
                    daemon_ref.reply(thread, &text).await,
                    format!("echo: {text}")
                );
            }
        });
        tokio::time::timeout(Duration::from_secs(120), join_all(per_thread))
            .await
            .expect("the load run finishes");
        done.store(true, Ordering::SeqCst);
    };
    let ((peak, api_peak), ()) = tokio::join!(sampler, work);
    assert!(
        peak <= CAPACITY as usize,
        "{peak} live processes, capacity {CAPACITY}"
    );
    assert!(api_peak <= CAPACITY as usize, "/api/pool showed {api_peak}");
    assert!(peak >= 2, "the run was concurrent (peak {peak})");

    for (t, thread) in threads.iter().enumerate() {
        let sent: Vec<String> = (0..MESSAGES)
            .map(|m| format!("thread {t} message {m}"))
            .collect();
        support::assert_echoed_in_order(&daemon, thread, &sent).await;
    }
    let evictions = daemon.counts().evictions.capacity;
    assert!(
        evictions >= (THREADS as u64 - CAPACITY),
        "{evictions} capacity evictions"
    );

    daemon.stop().await;
    let seen = seen.into_inner().expect("sampler lock");
    let left: Vec<u32> = seen.into_iter().filter(|p| process_exists(*p)).collect();
    assert!(left.is_empty(), "orphans: {left:?}");
}
