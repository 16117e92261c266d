//! New threads in bursts (issue #32): spares follow demand. On a daemon with `pool.spares = 1`,
//! each new thread's first turn (creation to reply) is timed: alone, one at a time, each on a
//! parked spare (the floor); in a burst of five at once; in a second burst of five 15 s later;
//! and in a steady stream of one every 2 s.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use crate::{ms, Series};

pub struct Outcome {
    floor: Series,
    first: Series,
    second: Series,
    stream: Series,
}

/// A new thread and its first turn: how long from asking for the thread to the reply.
async fn first_turn(daemon: &TestDaemon) -> Duration {
    let at = Instant::now();
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    at.elapsed()
}

async fn burst(daemon: &TestDaemon, name: &str) -> Series {
    let mut series = Series::new(name);
    series.samples = futures::future::join_all((0..5).map(|_| first_turn(daemon))).await;
    series
}

async fn spare_parked(daemon: &TestDaemon) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while daemon.counts().spares_parked == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let daemon = TestDaemon::start(mock, |c| {
        c.pool.spares = 1;
        c.pool.max_capacity = 32;
    })
    .await;
    let mut floor = Series::new("alone, on a parked spare (the floor)");
    for _ in 0..samples.min(10) {
        spare_parked(&daemon).await;
        // Let the replacement finish starting: nothing else runs.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        floor.samples.push(first_turn(&daemon).await);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let first = burst(&daemon, "first burst of 5 at once").await;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let second = burst(&daemon, "second burst of 5, 15 s later").await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let mut stream = Series::new("a stream of one every 2 s");
    for _ in 0..10 {
        let at = Instant::now();
        stream.samples.push(first_turn(&daemon).await);
        tokio::time::sleep(Duration::from_secs(2).saturating_sub(at.elapsed())).await;
    }
    daemon.stop().await;
    Ok(Outcome {
        floor,
        first,
        second,
        stream,
    })
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    writeln!(out, "## New threads in bursts: spares that follow demand\n")?;
    writeln!(
        out,
        "A new thread's first turn, from creating it to the reply (`pool.spares = 1`, spares then follow the bursts).\n"
    )?;
    writeln!(
        out,
        "| new threads | median | slowest | slowest ÷ floor median |\n|---|---|---|---|"
    )?;
    let floor = ms(outcome.floor.median()).max(f64::EPSILON);
    for series in [
        &outcome.floor,
        &outcome.first,
        &outcome.second,
        &outcome.stream,
    ] {
        let slowest = series.samples.iter().max().copied().unwrap_or_default();
        writeln!(
            out,
            "| {} | {:.0} ms | {:.0} ms | {:.2}× |",
            series.name,
            ms(series.median()),
            ms(slowest),
            ms(slowest) / floor,
        )?;
    }
    writeln!(out)?;
    Ok(())
}
