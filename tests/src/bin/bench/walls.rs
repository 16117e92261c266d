//! What the walls cost (#45): a thread's first turn on a parked spare, a cold turn and a warm
//! turn, each on a daemon with the walls on and on one with them off, side by side in one run.
//! The two sides take turns sample by sample (which goes first alternates), so the machine's
//! drift falls on both; each row's ratio is the median of the per-pair ratios.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::eventually;

use crate::{archive, ms, Series};

/// One scenario: its samples with the walls off and on, paired by index.
pub struct Row {
    name: &'static str,
    off: Series,
    on: Series,
}

impl Row {
    fn new(name: &'static str) -> Row {
        Row {
            name,
            off: Series::new("walls off"),
            on: Series::new("walls on"),
        }
    }

    /// The samples of side 0 (walls off) or 1 (on).
    fn side(&mut self, side: usize) -> &mut Vec<Duration> {
        if side == 0 {
            &mut self.off.samples
        } else {
            &mut self.on.samples
        }
    }

    /// The median of on ÷ off, pair by pair.
    fn ratio(&self) -> f64 {
        let mut ratios: Vec<f64> = self
            .on
            .samples
            .iter()
            .zip(&self.off.samples)
            .map(|(on, off)| on.as_secs_f64() / off.as_secs_f64().max(1e-9))
            .collect();
        ratios.sort_by(f64::total_cmp);
        ratios.get(ratios.len() / 2).copied().unwrap_or(0.0)
    }
}

pub struct Outcome {
    rows: Vec<Row>,
    /// What holds the limits on the walled daemons (`cgroup-v1` or `watch`).
    limits: String,
}

/// A daemon with the walls `on` or off, `spares` parked.
async fn daemon(mock: &MockApi, on: bool, spares: usize) -> TestDaemon {
    TestDaemon::start(mock, |c| {
        c.sandbox.enabled = on;
        c.pool.spares = spares;
        c.pool.max_capacity = 16;
    })
    .await
}

/// A new thread's first turn on `daemon`, once a spare is parked for it.
async fn spare_turn(daemon: &TestDaemon, i: usize) -> anyhow::Result<Duration> {
    eventually(Duration::from_secs(60), "a spare is parked", || {
        daemon.counts().spares_parked >= 1
    })
    .await?;
    let thread = daemon.create_thread().await;
    let at = Instant::now();
    daemon.reply(&thread, &format!("spare {i}")).await;
    let took = at.elapsed();
    archive(daemon, thread).await?;
    Ok(took)
}

/// A new thread's first turn on `daemon`, which parks no spare: a spawn, then the turn.
async fn cold_turn(daemon: &TestDaemon, i: usize) -> anyhow::Result<Duration> {
    let thread = daemon.create_thread().await;
    let at = Instant::now();
    daemon.reply(&thread, &format!("cold {i}")).await;
    let took = at.elapsed();
    archive(daemon, thread).await?;
    Ok(took)
}

async fn warm_turn(daemon: &TestDaemon, thread: &str, i: usize) -> Duration {
    let at = Instant::now();
    daemon.reply(thread, &format!("warm {i}")).await;
    at.elapsed()
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let cold = [daemon(mock, false, 0).await, daemon(mock, true, 0).await];
    let spares = [daemon(mock, false, 1).await, daemon(mock, true, 1).await];
    let limits = spares[1]
        .daemon()
        .pool
        .launcher()
        .sandbox()
        .map(|sandbox| sandbox.status().limits.to_owned())
        .unwrap_or_default();
    let mut rows = [
        Row::new("first turn on a parked spare"),
        Row::new("cold turn (spawn + turn)"),
        Row::new("warm turn"),
    ];
    let mut warm = Vec::new();
    for daemon in &cold {
        let thread = daemon.create_thread().await;
        daemon.reply(&thread, "warm-up").await;
        warm.push(thread);
    }
    for i in 0..samples {
        // Which side goes first alternates.
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let took = spare_turn(&spares[side], i).await?;
            rows[0].side(side).push(took);
            let took = cold_turn(&cold[side], i).await?;
            rows[1].side(side).push(took);
        }
    }
    // Warm turns in a loop of their own, the two threads taking turns: no spawn in between.
    for i in 0..samples * 3 {
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in order {
            let took = warm_turn(&cold[side], &warm[side], i).await;
            rows[2].side(side).push(took);
        }
    }
    for daemon in cold.into_iter().chain(spares) {
        daemon.stop().await;
    }
    Ok(Outcome {
        rows: rows.into_iter().collect(),
        limits,
    })
}

pub fn render(out: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(out, "## What the walls cost\n")?;
    writeln!(
        out,
        "Each scenario on a daemon with `[sandbox]` on (limits held by {}) and on one with it off, \
         sample by sample in turn; the ratio is the median of on ÷ off per pair (goal: under \
         1.05).\n",
        o.limits
    )?;
    writeln!(
        out,
        "| scenario | walls off (median, min) | walls on (median, min) | on ÷ off |\n|---|---|---|---|"
    )?;
    for row in &o.rows {
        writeln!(
            out,
            "| {} | {:.1} ms, {:.1} ms | {:.1} ms, {:.1} ms | {:.3} |",
            row.name,
            ms(row.off.median()),
            ms(row.off.min()),
            ms(row.on.median()),
            ms(row.on.min()),
            row.ratio()
        )?;
    }
    writeln!(out)
}
