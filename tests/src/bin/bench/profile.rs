//! CPU per warm turn under `claude.profile = "standard"` and `"lean"`, each on a daemon of its own
//! with the CLI's built-in tools left to the profile (the daemon's defaults), measured back to back
//! in this run.

use std::fmt::Write as _;

use anyhow::Context;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::config::Profile;

use crate::cpu_ms;

pub struct Profiles {
    turns: usize,
    /// (CLI ms, bench process ms) per warm turn.
    standard: (f64, f64),
    lean: (f64, f64),
}

async fn cpu_per_turn(
    mock: &MockApi,
    profile: Profile,
    turns: usize,
) -> anyhow::Result<(f64, f64)> {
    let daemon = TestDaemon::start(mock, |c| {
        c.claude.profile = profile;
        c.claude.builtin_tools = None;
    })
    .await;
    let thread = daemon.create_thread().await;
    for i in 0..3 {
        daemon.reply(&thread, &format!("warm-up {i}")).await;
    }
    let pid = daemon
        .pid_of(&thread)
        .context("the thread's process")?
        .to_string();
    let before = (cpu_ms(&pid), cpu_ms("self"));
    for i in 0..turns {
        daemon.reply(&thread, &format!("profile {i}")).await;
    }
    let per_turn = (
        (cpu_ms(&pid) - before.0) / turns as f64,
        (cpu_ms("self") - before.1) / turns as f64,
    );
    daemon.stop().await;
    Ok(per_turn)
}

/// Alternates the two profiles three times and keeps each one's smallest figure (the least
/// disturbed by anything else on the machine).
pub async fn run(mock: &MockApi, turns: usize) -> anyhow::Result<Profiles> {
    let (mut standard, mut lean) = ((f64::MAX, f64::MAX), (f64::MAX, f64::MAX));
    for _ in 0..3 {
        let s = cpu_per_turn(mock, Profile::Standard, turns).await?;
        let l = cpu_per_turn(mock, Profile::Lean, turns).await?;
        standard = (standard.0.min(s.0), standard.1.min(s.1));
        lean = (lean.0.min(l.0), lean.1.min(l.1));
    }
    Ok(Profiles {
        turns,
        standard,
        lean,
    })
}

pub fn render(out: &mut String, p: &Profiles) -> std::fmt::Result {
    writeln!(out, "## CPU per warm turn by profile\n")?;
    writeln!(
        out,
        "Each profile on a daemon of its own with the CLI's built-in tools as the profile leaves \
         them, {} warm turns, three times each, alternating; the smallest of the three. User + system time \
         from `/proc`.\n",
        p.turns
    )?;
    writeln!(
        out,
        "| `claude.profile` | CLI ms / turn | bench process ms / turn | warm turns/s per core |"
    )?;
    writeln!(out, "|---|---|---|---|")?;
    for (name, (cli, bench)) in [("standard", p.standard), ("lean", p.lean)] {
        writeln!(
            out,
            "| {name} | {cli:.1} | {bench:.1} | {:.0} |",
            1000.0 / (cli + bench).max(0.001)
        )?;
    }
    writeln!(
        out,
        "\n- lean saves **{:.0}%** of the CLI's CPU per warm turn (goal >= 15%)\n",
        100.0 * (1.0 - p.lean.0 / p.standard.0.max(0.001))
    )
}
