//! Warm turns among idle processes (#32): what a daemon's warm processes cost while they wait.
//! An idle `claude` process is not free: its runtime collects garbage on a timer (Bun's, every
//! second), which gives memory back but takes CPU from the turns that run. On a daemon of its own
//! for each setting of that timer (the default, and `BUN_GC_TIMER_DISABLE=1` through
//! `claude.env`), one thread's warm turns alone, then the same among [`IDLE`] threads' idle
//! processes; the idle processes' own CPU over [`WATCH`], and the live processes' private memory.
//! This is also why the full bench's first rows (cold turns that each leave a process behind,
//! then warm turns among them) are slower than a fresh `query()` of the SDK, whose processes exit.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use crate::{cpu_ms, ms, Series};

/// Idle processes around the measured thread.
const IDLE: usize = 20;

/// How long the idle processes' CPU is watched, with nothing else running.
const WATCH: Duration = Duration::from_secs(20);

pub struct Row {
    name: &'static str,
    alone: Series,
    among: Series,
    /// Mean CPU of one idle process, in % of a core.
    idle_cpu: f64,
    /// Median private memory of the live processes after the idle watch, MiB.
    private_mib: f64,
}

pub struct Outcome {
    rows: Vec<Row>,
}

async fn measure(
    mock: &MockApi,
    name: &'static str,
    timer_off: bool,
    samples: usize,
) -> anyhow::Result<Row> {
    let daemon = TestDaemon::start(mock, |c| {
        c.pool.max_capacity = 64;
        if timer_off {
            c.claude
                .env
                .insert("BUN_GC_TIMER_DISABLE".into(), "1".into());
        }
    })
    .await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm-up").await;
    let mut alone = Series::new("alone");
    for i in 0..samples {
        let at = Instant::now();
        daemon.reply(&thread, &format!("alone {i}")).await;
        alone.samples.push(at.elapsed());
    }
    let mut idle = Vec::new();
    for i in 0..IDLE {
        let other = daemon.create_thread().await;
        daemon.reply(&other, &format!("then idle {i}")).await;
        idle.extend(daemon.pid_of(&other));
    }
    let mut among = Series::new("among idle processes");
    for i in 0..samples {
        let at = Instant::now();
        daemon.reply(&thread, &format!("among {i}")).await;
        among.samples.push(at.elapsed());
    }
    let before: Vec<f64> = idle.iter().map(|pid| cpu_ms(&pid.to_string())).collect();
    tokio::time::sleep(WATCH).await;
    let spent: f64 = idle
        .iter()
        .zip(before)
        .map(|(pid, before)| cpu_ms(&pid.to_string()) - before)
        .sum();
    let idle_cpu = 100.0 * spent / (WATCH.as_secs_f64() * 1000.0) / idle.len().max(1) as f64;
    let private = crate::warm_memory(&daemon, "privateBytes").await;
    daemon.stop().await;
    Ok(Row {
        name,
        alone,
        among,
        idle_cpu,
        private_mib: private.get(private.len() / 2).copied().unwrap_or(0.0),
    })
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let mut rows = Vec::new();
    for (name, timer_off) in [
        ("the runtime's defaults", false),
        ("`BUN_GC_TIMER_DISABLE=1` in `claude.env`", true),
    ] {
        rows.push(measure(mock, name, timer_off, samples).await?);
    }
    Ok(Outcome { rows })
}

pub fn render(out: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(out, "## Warm turns among idle processes\n")?;
    writeln!(
        out,
        "One thread's warm turns alone, then among {IDLE} other threads' idle processes (each \
         after one turn); then the idle processes' CPU over {} s with nothing running, and the \
         live processes' private memory after it. A daemon of its own per row.\n",
        WATCH.as_secs()
    )?;
    writeln!(
        out,
        "| setting | warm turn alone | among {IDLE} idle | p95 among idle | CPU of one idle process | private memory per process |\n|---|---|---|---|---|---|"
    )?;
    for r in &o.rows {
        writeln!(
            out,
            "| {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} % of a core | {:.0} MiB |",
            r.name,
            ms(r.alone.median()),
            ms(r.among.median()),
            ms(r.among.p95()),
            r.idle_cpu,
            r.private_mib
        )?;
    }
    writeln!(
        out,
        "\n- The runtime's GC timer is what gives an idle process's memory back, and what makes \
         it cost CPU while it waits: a trade for the operator (`claude.env`), not a default.\n"
    )
}
