//! CPU per warm turn under `claude.profile = "standard"` and `"lean"`, each on a daemon of its own
//! with the CLI's built-in tools left to the profile (the daemon's defaults), measured back to back
//! in this run; beside them, `lean` with each candidate switch that is not (yet) in it, so every
//! switch is priced by measurement before it is taken in. Each row also gives the warm turn's
//! median time and the process's private memory after its turns (`/api/pool`).

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Context;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::config::Profile;

use crate::{cpu_ms, ms, Series};

/// Turns before the measured ones: the runtime compiles the turn's code over the first ones (its
/// JIT), which is not what a warm turn costs in the long run.
const WARM_UP: usize = 20;

/// The size of the large message each variant's process also gets (three turns, the median).
const BIG: usize = 100_000;

/// A profile as measured: its name in the report, the profile, and extra environment.
struct Variant {
    name: &'static str,
    profile: Profile,
    env: &'static [(&'static str, &'static str)],
}

const VARIANTS: [Variant; 3] = [
    Variant {
        name: "standard",
        profile: Profile::Standard,
        env: &[],
    },
    Variant {
        name: "lean",
        profile: Profile::Lean,
        env: &[],
    },
    Variant {
        name: "lean + `BUN_JSC_useJIT=0` (measured, not taken: see below)",
        profile: Profile::Lean,
        env: &[("BUN_JSC_useJIT", "0")],
    },
];

/// One variant's figures: the least disturbed of its runs.
#[derive(Clone, Copy)]
struct Figures {
    cli_ms: f64,
    bench_ms: f64,
    median_ms: f64,
    /// A turn whose message is [`BIG`] bytes.
    big_ms: f64,
    private_mib: f64,
}

pub struct Profiles {
    turns: usize,
    rows: Vec<(&'static str, Figures)>,
}

async fn measure(mock: &MockApi, variant: &Variant, turns: usize) -> anyhow::Result<Figures> {
    let daemon = TestDaemon::start(mock, |c| {
        c.claude.profile = variant.profile;
        c.claude.builtin_tools = None;
        for (key, value) in variant.env {
            c.claude.env.insert((*key).to_owned(), (*value).to_owned());
        }
    })
    .await;
    let thread = daemon.create_thread().await;
    for i in 0..WARM_UP {
        daemon.reply(&thread, &format!("warm-up {i}")).await;
    }
    let pid = daemon.pid_of(&thread).context("the thread's process")?;
    let before = (cpu_ms(&pid.to_string()), cpu_ms("self"));
    let mut times = Series::default();
    for i in 0..turns {
        let at = Instant::now();
        daemon.reply(&thread, &format!("profile {i}")).await;
        times.samples.push(at.elapsed());
    }
    let cli_ms = (cpu_ms(&pid.to_string()) - before.0) / turns as f64;
    let bench_ms = (cpu_ms("self") - before.1) / turns as f64;
    let big = "lorem ipsum ".repeat(BIG / 12);
    let mut big_times = Series::default();
    for _ in 0..3 {
        let at = Instant::now();
        daemon.reply(&thread, &big).await;
        big_times.samples.push(at.elapsed());
    }
    let (_, pool) = daemon.get("/api/pool").await;
    let private = pool["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|p| p["pid"] == pid)
        .and_then(|p| p["privateBytes"].as_u64())
        .context("the process's private memory in /api/pool")?;
    daemon.stop().await;
    Ok(Figures {
        cli_ms,
        bench_ms,
        median_ms: ms(times.median()),
        big_ms: ms(big_times.median()),
        private_mib: private as f64 / (1024.0 * 1024.0),
    })
}

/// Alternates the variants three times and keeps each one's smallest figures (the least
/// disturbed by anything else on the machine).
pub async fn run(mock: &MockApi, turns: usize) -> anyhow::Result<Profiles> {
    let mut best: Vec<Option<Figures>> = vec![None; VARIANTS.len()];
    for _ in 0..3 {
        for (variant, best) in VARIANTS.iter().zip(&mut best) {
            let f = measure(mock, variant, turns).await?;
            *best = Some(match *best {
                None => f,
                Some(b) => Figures {
                    cli_ms: b.cli_ms.min(f.cli_ms),
                    bench_ms: b.bench_ms.min(f.bench_ms),
                    median_ms: b.median_ms.min(f.median_ms),
                    big_ms: b.big_ms.min(f.big_ms),
                    private_mib: b.private_mib.min(f.private_mib),
                },
            });
        }
    }
    let rows = VARIANTS
        .iter()
        .zip(best)
        .filter_map(|(v, f)| Some((v.name, f?)))
        .collect();
    Ok(Profiles { turns, rows })
}

pub fn render(out: &mut String, p: &Profiles) -> std::fmt::Result {
    writeln!(out, "## CPU per warm turn by profile\n")?;
    writeln!(
        out,
        "Each profile on a daemon of its own with the CLI's built-in tools as the profile leaves \
         them, {} warm turns after {WARM_UP} unmeasured ones (so the runtime's JIT has compiled \
         the turn's code), three times each, alternating; the smallest of the three. User + \
         system time from `/proc`; private memory from `/api/pool` after the turns (one process \
         alone: the CLI binary's pages count as private here, shared when several run).\n",
        p.turns
    )?;
    writeln!(
        out,
        "| profile | CLI ms / turn | bench process ms / turn | warm turns/s per core | warm turn median | a {} KB message's turn | private memory |",
        BIG / 1000
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for (name, f) in &p.rows {
        writeln!(
            out,
            "| {name} | {:.1} | {:.1} | {:.0} | {:.1} ms | {:.1} ms | {:.0} MiB |",
            f.cli_ms,
            f.bench_ms,
            1000.0 / (f.cli_ms + f.bench_ms).max(0.001),
            f.median_ms,
            f.big_ms,
            f.private_mib
        )?;
    }
    writeln!(out)?;
    let standard = p.rows.first().map_or(0.0, |(_, f)| f.cli_ms).max(0.001);
    for (name, f) in p.rows.iter().skip(1) {
        writeln!(
            out,
            "- {name} saves **{:.0}%** of the CLI's CPU per warm turn against standard (goal for lean >= 15%)",
            100.0 * (1.0 - f.cli_ms / standard)
        )?;
    }
    writeln!(
        out,
        "- The runtime's JIT off gives private memory back but makes turns slower, a large \
         message's most; lean keeps the JIT.\n"
    )
}
