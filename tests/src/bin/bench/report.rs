//! The bench report: `target/bench/report.md`, from the figures one run measured.

use super::*;

pub(super) struct Report<'a> {
    pub(super) samples: usize,
    pub(super) load: &'a str,
    pub(super) cold: &'a Series,
    pub(super) warm: &'a Series,
    pub(super) prewarmed: &'a Series,
    pub(super) spare: &'a Series,
    pub(super) switched: &'a Series,
    pub(super) overload: &'a overload::Overload,
    pub(super) first_turns: &'a first_turn::FirstTurns,
    pub(super) cold_steps: &'a cold::Breakdown,
    pub(super) crowd: &'a crowd::Outcome,
    pub(super) walls: &'a walls::Outcome,
    pub(super) profiles: &'a profile::Profiles,
    pub(super) cpu: &'a CpuPerTurn,
    pub(super) raw: &'a Series,
    pub(super) tool: &'a Series,
    pub(super) scaling: &'a [Scaling],
    pub(super) rss: &'a [f64],
    pub(super) pss: &'a [f64],
    pub(super) private: &'a [f64],
    pub(super) cluster: &'a cluster::Outcome,
    pub(super) workspaces: &'a workspaces::Outcome,
    pub(super) schemas: &'a schemas::Outcome,
    pub(super) door: &'a door::Outcome,
    pub(super) webhooks: &'a webhooks::Outcome,
    pub(super) callers: &'a callers::Outcome,
    pub(super) files: &'a files::Outcome,
    pub(super) scale: &'a scale::Outcome,
    pub(super) retention: &'a retention::Outcome,
    pub(super) traces: &'a traces::Outcome,
    pub(super) gateway: &'a gateway::Outcome,
    pub(super) bursts: &'a bursts::Outcome,
    pub(super) sdk: &'a sdk::Outcome,
    /// [`sdk::side_by_side`]'s section, when the SDK was measured.
    pub(super) turn_by_turn: &'a str,
    pub(super) daemon_view: &'a str,
}

pub(crate) fn row(table: &mut String, s: &Series, base: Option<&Series>) -> std::fmt::Result {
    let ratio = match base {
        Some(b) if ms(b.median()) > 0.0 => format!("{:.2}x", ms(s.median()) / ms(b.median())),
        _ => "-".into(),
    };
    writeln!(
        table,
        "| {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {ratio} |",
        s.name,
        s.samples.len(),
        ms(s.min()),
        ms(s.median()),
        ms(s.p95()),
        ms(s.max()),
    )
}

pub(super) fn render_report(r: Report<'_>) -> anyhow::Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "# Harness bench\n\nAll figures from one run of `just bench`: the real `claude` {} against the \
         local mock Messages API, which answers in about 1 ms, so these are CLI and daemon overheads, \
         not model latency. {} samples per turn scenario; times in ms, measured by an HTTP client \
         on the same machine ({} cores; 1-minute load average {}: anything else running shows up \
         in these figures).\n",
        harness_tests::cli::CLI_VERSION,
        r.samples,
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        r.load,
    )?;

    writeln!(out, "## Turn latency\n")?;
    writeln!(
        out,
        "| scenario | n | min | median | p95 | max | median / warm |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for s in [r.cold, r.spare, r.prewarmed, r.switched, r.warm, r.raw] {
        row(&mut out, s, Some(r.warm))?;
    }
    writeln!(out)?;
    let ratio = |a: &Series, b: &Series| ms(a.median()) / ms(b.median());
    writeln!(
        out,
        "- cold / warm (median): **{:.1}x** ({:.1} ms vs {:.1} ms; target >= 10x)",
        ratio(r.cold, r.warm),
        ms(r.cold.median()),
        ms(r.warm.median())
    )?;
    writeln!(
        out,
        "- daemon warm / raw CLI warm (median): **{:.2}x** ({:.1} ms vs {:.1} ms; target <= 1.15x)",
        ratio(r.warm, r.raw),
        ms(r.warm.median()),
        ms(r.raw.median())
    )?;
    writeln!(
        out,
        "- first turn after prewarm / warm (median): **{:.2}x**; prewarm saves {:.0} ms of the cold \
         turn's {:.0} ms ({:.0}%)",
        ratio(r.prewarmed, r.warm),
        ms(r.cold.median()) - ms(r.prewarmed.median()),
        ms(r.cold.median()),
        100.0 * (1.0 - ratio(r.prewarmed, r.cold)),
    )?;
    writeln!(
        out,
        "- first turn of a new thread with a spare parked / warm (median): **{:.2}x** (goal <= 1.5x); \
         / cold: **{:.2}x**",
        ratio(r.spare, r.warm),
        ratio(r.spare, r.cold),
    )?;
    writeln!(
        out,
        "- model switch on a warm process / warm (median): **{:.2}x** (goal <= 2x), no process \
         started",
        ratio(r.switched, r.warm),
    )?;
    writeln!(
        out,
        "- CPU per warm turn (user + system, from `/proc`): the CLI {:.1} ms; this bench process \
         (the daemon, the mock API and the HTTP client together, so an upper bound on the \
         daemon's share) {:.1} ms; that is about {:.0} warm turns/s per core",
        r.cpu.cli_ms,
        r.cpu.bench_ms,
        1000.0 / (r.cpu.cli_ms + r.cpu.bench_ms).max(0.001),
    )?;
    writeln!(
        out,
        "- MCP `tools/call` round trip through the adapter ({} calls): min {:.3} ms, median {:.3} ms, \
         p95 {:.3} ms (target < 1 ms)",
        r.tool.samples.len(),
        ms(r.tool.min()),
        ms(r.tool.median()),
        ms(r.tool.p95())
    )?;
    writeln!(out, "{}", r.daemon_view)?;

    writeln!(out, "{{chart}}")?;

    writeln!(out, "## Concurrency scaling\n")?;
    writeln!(
        out,
        "Each thread is warmed with one untimed turn, then every thread sends its turns back to back, \
         all threads at once, on a fresh daemon. CPU is user + system time from `/proc`, of the \
         threads' CLI processes and of this process; the last column is what the machine's cores \
         could run at that CPU per turn.\n"
    )?;
    writeln!(
        out,
        "| threads | turns | wall s | turns/s | vs 1 thread | median ms | p95 ms | median vs 1 thread | CLI CPU ms / turn | bench CPU ms / turn | turns/s the CPU allows |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    if let Some(one) = r.scaling.first() {
        for s in r.scaling {
            writeln!(
                out,
                "| {} | {} | {:.2} | {:.1} | {:.2}x | {:.1} | {:.1} | {:.2}x | {:.1} | {:.1} | {:.1} |",
                s.threads,
                s.turns,
                s.wall.as_secs_f64(),
                s.turns_per_sec(),
                s.turns_per_sec() / one.turns_per_sec(),
                ms(s.latency.median()),
                ms(s.latency.p95()),
                ms(s.latency.median()) / ms(one.latency.median()),
                s.cli_cpu_ms,
                s.bench_cpu_ms,
                cores * 1000.0 / (s.cli_cpu_ms + s.bench_cpu_ms).max(0.001),
            )?;
        }
    }
    writeln!(out)?;

    cold::render(&mut out, r.cold_steps)?;
    first_turn::render(&mut out, r.first_turns, Some(r.warm))?;
    overload::render(&mut out, r.overload, r.warm)?;
    profile::render(&mut out, r.profiles)?;
    crowd::render(&mut out, r.crowd)?;
    walls::render(&mut out, r.walls)?;
    cluster::render(&mut out, r.cluster, Some(r.cold))?;
    workspaces::render(&mut out, r.workspaces)?;
    schemas::render(&mut out, r.schemas)?;
    door::render(&mut out, r.door)?;
    webhooks::render(&mut out, r.webhooks)?;
    callers::render(&mut out, r.callers)?;
    files::render(&mut out, r.files)?;
    scale::render(&mut out, r.scale)?;
    retention::render(&mut out, r.retention)?;
    traces::render(&mut out, r.traces)?;
    gateway::render(&mut out, r.gateway)?;
    bursts::render(&mut out, r.bursts)?;

    writeln!(out, "## Memory\n")?;
    match (r.rss.first(), r.rss.get(r.rss.len() / 2), r.rss.last()) {
        (Some(min), Some(median), Some(max)) => writeln!(
            out,
            "RSS of the {} live processes on the scaling daemon after its runs, each warm (`VmRSS` via \
             `/api/pool`): min \
             {min:.1} MiB, median {median:.1} MiB, max {max:.1} MiB; about {:.1} warm threads per GiB.\n",
            r.rss.len(),
            1024.0 / median,
        )?,
        _ => writeln!(out, "No RSS figures: `/api/pool` listed no process.\n")?,
    }
    let median = |v: &[f64]| v.get(v.len() / 2).copied();
    if let (Some(pss), Some(private)) = (median(r.pss), median(r.private)) {
        writeln!(
            out,
            "RSS counts the pages the processes share (the CLI's binary) in full, in each. By \
             `/proc/<pid>/smaps_rollup` (`pssBytes`, `privateBytes` in `/api/pool`): median PSS \
             {pss:.1} MiB, median private {private:.1} MiB; about {:.1} warm threads per GiB of \
             private memory.\n",
            1024.0 / private.max(0.001),
        )?;
    }

    writeln!(out, "## Python `claude-agent-sdk`, same CLI, same mock\n")?;
    match r.sdk {
        sdk::Outcome::Skipped(why) => writeln!(out, "Not measured: {why}.\n")?,
        sdk::Outcome::Measured {
            version,
            fresh,
            warm,
        } => {
            writeln!(
                out,
                "`claude-agent-sdk` {version} from PyPI in `target/bench/venv`, run with `cli_path` set to \
                 the same `claude` binary as Harness, the Claude Code system prompt, no built-in tools and \
                 one in-process MCP server (as Harness). A fresh `query()` per message pays a spawn \
                 each time; a `ClaudeSDKClient` keeps one process for several turns.\n"
            )?;
            writeln!(
                out,
                "| scenario | n | min | median | p95 | max | median / Harness warm |"
            )?;
            writeln!(out, "|---|---|---|---|---|---|---|")?;
            for s in [fresh, warm, r.cold, r.warm] {
                row(&mut out, s, Some(r.warm))?;
            }
            writeln!(out)?;
            writeln!(
                out,
                "- Harness cold turn / SDK fresh `query()` (median): **{:.2}x** ({:.1} ms vs {:.1} ms)",
                ratio(r.cold, fresh),
                ms(r.cold.median()),
                ms(fresh.median())
            )?;
            writeln!(
                out,
                "- Harness warm turn / SDK warm client turn (median): **{:.2}x** ({:.1} ms vs {:.1} ms)",
                ratio(r.warm, warm),
                ms(r.warm.median()),
                ms(warm.median())
            )?;
            writeln!(
                out,
                "- SDK fresh `query()` / Harness warm turn (median): **{:.1}x**: what keeping the process \
                 warm per thread saves a service that would call `query()` per message\n",
                ratio(fresh, r.warm)
            )?;
        }
    }
    out.push_str(r.turn_by_turn);
    Ok(out)
}
