//! `just bench`: drives the daemon over HTTP against the real `claude` CLI and the mock Messages
//! API, and reports min / median / p95 for cold, warm and prewarmed turns, a warm turn sent
//! straight to a raw CLI process (the floor), a raw process's first turn (idle, warmed, claimed),
//! an in-process MCP tool call round trip, twice as many threads as pool slots used round-robin
//! (hit rate), a cold turn step by step beside the Python SDK's flags, CPU per warm turn of the
//! standard and lean profiles, warm turns among idle processes, the walls on and off (a spare's
//! first turn, a cold and a warm turn, side by side), concurrency scaling at 1, 4
//! and 16 threads, the RSS of warm processes, clustering (two nodes on one real PostgreSQL: a warm
//! turn forwarded to the owner next to one sent to it directly, and failover after the owner dies),
//! threads on git worktrees of a repository of 10,000 files (creation, first turns) and, when `python3` is there, the official Python `claude-agent-sdk` on the same CLI and mock (in separate runs, then turn by turn with Harness).
//! All figures come from this one run; ratios are printed beside absolute times.
//!
//! Writes `target/bench/report.md` and `target/bench/latency.png` (plotters).
//!
//! Env: `BENCH_SAMPLES` (turn samples per scenario, default 20), `BENCH_TOOL_CALLS` (default 1000),
//! `BENCH_SCALING_TURNS` (turns per thread in the scaling runs, default 10), `BENCH_OVERLOAD_CAPACITY`
//! (pool size of the run with twice as many threads, default 16), `BENCH_SDK=0` skips the
//! Python SDK, `BENCH_FONT` a TTF file for the chart's text, `BENCH_ONLY=cluster` (or
//! `workspaces`, `schemas`, `door`, `webhooks`, `callers`, `files`, `scale`, `retention`, `traces`, `gateway`, `first-turn`, `bursts`, `cold`, `crowd`, `walls`, `profiles`, `sdk`) runs only that section and prints it (no files written). Without PostgreSQL (see `pg-test`) the
//! clustering section says why it was skipped.

mod bursts;
mod callers;
mod chart;
mod cluster;
mod cold;
mod crowd;
mod door;
mod files;
mod first_turn;
mod gateway;
mod overload;
mod profile;
mod report;
mod retention;
mod scale;
mod schemas;
mod sdk;
mod traces;
mod walls;
mod webhooks;
mod workspaces;

use report::{render_report, Report};

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use claude_cli::protocol;
use claude_cli::{SdkMcpServer, SpawnOptions};
use harness_tests::cli::{claude_bin, cli_env};
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::mcp::{Route, SERVER_NAME};
use plugin_contract::ThreadId;

/// Timed samples of one scenario.
#[derive(Clone, Debug, Default)]
pub struct Series {
    pub name: String,
    pub samples: Vec<Duration>,
}

impl Series {
    fn new(name: impl Into<String>) -> Series {
        Series {
            name: name.into(),
            samples: Vec::new(),
        }
    }
    fn sorted(&self) -> Vec<Duration> {
        let mut s = self.samples.clone();
        s.sort();
        s
    }
    pub fn min(&self) -> Duration {
        self.sorted().first().copied().unwrap_or_default()
    }
    pub fn median(&self) -> Duration {
        let s = self.sorted();
        s.get(s.len() / 2).copied().unwrap_or_default()
    }
    pub fn p95(&self) -> Duration {
        self.quantile(0.95)
    }
    pub fn p99(&self) -> Duration {
        self.quantile(0.99)
    }
    /// The sample at quantile `q` (nearest rank).
    fn quantile(&self, q: f64) -> Duration {
        let s = self.sorted();
        let i = ((s.len() as f64) * q).ceil() as usize;
        s.get(i.saturating_sub(1).min(s.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    }
    pub fn max(&self) -> Duration {
        self.sorted().last().copied().unwrap_or_default()
    }
}

/// One concurrency level: `threads` threads, each sending turns back to back.
#[derive(Clone, Debug)]
pub struct Scaling {
    pub threads: usize,
    pub turns: usize,
    pub wall: Duration,
    pub latency: Series,
    /// CPU (user + system) of every CLI process of the run, per turn, in ms.
    pub cli_cpu_ms: f64,
    /// CPU of this process (daemon, mock and client) per turn, in ms.
    pub bench_cpu_ms: f64,
}

impl Scaling {
    pub fn turns_per_sec(&self) -> f64 {
        self.turns as f64 / self.wall.as_secs_f64()
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `target/bench` at the workspace root, where `just bench` promises its output.
fn bench_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if std::env::var("BENCH_ROLE").as_deref() == Ok("mock") {
        return files::serve_mock().await;
    }
    let samples = env_usize("BENCH_SAMPLES", 20).max(1);
    let tool_calls = env_usize("BENCH_TOOL_CALLS", 1000).max(1);
    let scaling_turns = env_usize("BENCH_SCALING_TURNS", 10).max(1);
    let dir = bench_dir();
    std::fs::create_dir_all(&dir)?;
    let dir = dir.canonicalize()?;
    let load_before = load_average();
    let mock = MockApi::start().await;
    // Failovers each wait for a lease to expire: a few are enough.
    let failovers = samples.min(3);
    // One section alone: `$what` for the log, its outcome rendered by `$render`.
    macro_rules! alone {
        ($what:expr, $run:expr, $render:expr) => {{
            eprintln!("bench: only {}, {samples} samples", $what);
            let outcome = $run.await?;
            let mut out = String::new();
            ($render)(&mut out, &outcome)?;
            println!("{out}");
            return Ok(());
        }};
    }
    match std::env::var("BENCH_ONLY").ok().as_deref() {
        None | Some("") => {}
        Some("cluster") => {
            eprintln!("bench: only clustering, {samples} samples, {failovers} failovers");
            let outcome = cluster::run(&mock, samples, failovers).await?;
            let mut out = String::new();
            cluster::render(&mut out, &outcome, None)?;
            println!("{out}");
            return Ok(());
        }
        Some("workspaces") => alone!(
            "workspaces",
            workspaces::run(&mock, samples),
            workspaces::render
        ),
        Some("door") => alone!("the door", door::run(&mock, samples), door::render),
        Some("webhooks") => alone!("webhooks", webhooks::run(&mock, samples), webhooks::render),
        Some("callers") => alone!(
            "callers",
            callers::run(&mock, samples * 25),
            callers::render
        ),
        Some("files") => alone!("images", files::run(samples), files::render),
        Some("scale") => alone!(
            "the hundred thousand threads",
            scale::run(&mock, samples),
            scale::render
        ),
        Some("sdk") => {
            eprintln!("bench: only Harness beside the Python SDK, same tools");
            println!("{}", sdk::side_by_side(&dir, &mock, samples).await?);
            return Ok(());
        }
        Some("first-turn") => {
            let run = first_turn::run(&mock, &dir, samples);
            let render =
                |out: &mut String, f: &first_turn::FirstTurns| first_turn::render(out, f, None);
            alone!("a process's first turn", run, render)
        }
        Some("profiles") => alone!(
            "CPU per warm turn by profile",
            profile::run(&mock, samples.max(10)),
            profile::render
        ),
        Some("bursts") => alone!(
            "bursts of new threads",
            bursts::run(&mock, samples),
            bursts::render
        ),
        Some("traces") => alone!("traces", traces::run(&mock, samples), traces::render),
        Some("gateway") => alone!(
            "the model gateway",
            gateway::run(&mock, samples),
            gateway::render
        ),
        Some("retention") => alone!(
            "retention",
            retention::run(&mock, samples),
            retention::render
        ),
        Some("schemas") => alone!("output schemas", schemas::run(&mock), schemas::render),
        Some("crowd") => alone!(
            "warm turns among idle processes",
            crowd::run(&mock, samples),
            crowd::render
        ),
        Some("cold") => alone!("a cold turn", cold::run(&mock, &dir, samples), cold::render),
        Some("walls") => alone!("the walls' cost", walls::run(&mock, samples), walls::render),
        Some(other) => {
            bail!(
                "BENCH_ONLY={other}: only `cluster`, `workspaces`, `schemas`, `door`, `webhooks`, `callers`, `files`, `scale`, `retention`, `traces`, `gateway`, `first-turn`, `bursts`, `cold`, `crowd`, `walls`, `profiles` or `sdk` runs alone"
            )
        }
    }
    let daemon = TestDaemon::start(&mock, |c| c.pool.max_capacity = 64).await;
    eprintln!(
        "bench: {samples} samples per scenario, daemon at {}",
        daemon.base
    );

    // Cold: a new thread each time, so every turn spawns a process; archived after its turn, so
    // that no idle process is left to share the CPU with the next one ("Warm turns among idle
    // processes" prices that), as the SDK's fresh query() leaves none. Prewarmed and spare first
    // turns below likewise.
    eprintln!("bench: cold turns");
    let mut cold = Series::new("cold turn (spawn + turn)");
    for i in 0..samples {
        let thread = daemon.create_thread().await;
        let t = Instant::now();
        daemon.reply(&thread, &format!("cold {i}")).await;
        cold.samples.push(t.elapsed());
        archive(&daemon, thread).await?;
    }

    // Warm: one thread, one unmeasured turn first.
    eprintln!("bench: warm turns");
    let mut warm = Series::new("warm turn (daemon)");
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm-up").await;
    let cli_pid = daemon
        .pid_of(&thread)
        .context("the warm thread's process")?;
    let cpu_before = (cpu_ms(&cli_pid.to_string()), cpu_ms("self"));
    for i in 0..samples {
        let t = Instant::now();
        daemon.reply(&thread, &format!("warm {i}")).await;
        warm.samples.push(t.elapsed());
    }
    let cpu = CpuPerTurn {
        cli_ms: (cpu_ms(&cli_pid.to_string()) - cpu_before.0) / samples as f64,
        bench_ms: (cpu_ms("self") - cpu_before.1) / samples as f64,
    };

    // Prewarmed: prewarm, wait until the process is ready, then the first turn.
    eprintln!("bench: prewarmed turns");
    let mut prewarmed = Series::new("first turn after prewarm");
    for i in 0..samples {
        let thread = daemon.create_thread().await;
        let (status, body) = daemon
            .post("/api/prewarm", json!({"threadId": thread}))
            .await;
        if status != 202 {
            bail!("prewarm failed: {body}");
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while daemon.pid_of(&thread).is_none() {
            if Instant::now() > deadline {
                bail!("prewarm did not finish");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let t = Instant::now();
        daemon.reply(&thread, &format!("prewarmed {i}")).await;
        prewarmed.samples.push(t.elapsed());
        archive(&daemon, thread).await?;
    }

    // A model switch on the warm thread: set_model in place, alternating two models.
    eprintln!("bench: model switches");
    let mut switched = Series::new("model switch on a warm process");
    let spawns_before = daemon.spawns();
    for i in 0..samples {
        let model = if i % 2 == 0 {
            "claude-bench-a"
        } else {
            "claude-bench-b"
        };
        let t = Instant::now();
        let (status, body) = daemon
            .post(
                &format!("/api/threads/{thread}/messages"),
                json!({"content": format!("switch {i}"), "model": model}),
            )
            .await;
        if status != 200 {
            bail!("model switch turn failed: {body}");
        }
        switched.samples.push(t.elapsed());
    }
    if daemon.spawns() != spawns_before {
        bail!("a model switch started a process");
    }

    // The floor: our own minimal driver on a raw CLI process with the same argv and tools.
    eprintln!("bench: raw CLI turns");
    let (_, tools) = daemon.get("/api/tools").await;
    let raw = raw_cli_warm_turns(&daemon, &mock, tools["tools"].clone(), samples).await?;

    // In-process tool call round trip through the MCP adapter (control request in → reply out).
    eprintln!("bench: {tool_calls} adapter round trips");
    let tool = adapter_round_trips(&daemon, tool_calls).await;
    let daemon_view = from_metrics(&daemon).await?;
    daemon.stop().await;

    // First turns of new threads with a spare parked, on a daemon of its own (the one above runs
    // without spares, so that its cold figures are spawns).
    eprintln!("bench: first turns on a parked spare");
    let daemon = TestDaemon::start(&mock, |c| {
        c.pool.max_capacity = 64;
        c.pool.spares = 1;
    })
    .await;
    let mut spare = Series::new("first turn of a new thread (spare parked)");
    for i in 0..samples {
        let deadline = Instant::now() + Duration::from_secs(60);
        while daemon.counts().spares_parked == 0 {
            if Instant::now() > deadline {
                bail!("no spare was parked");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let thread = daemon.create_thread().await;
        let t = Instant::now();
        daemon.reply(&thread, &format!("spare {i}")).await;
        spare.samples.push(t.elapsed());
        archive(&daemon, thread).await?;
    }
    if daemon.counts().spares_claimed != samples as u64 {
        bail!("not every first turn took a spare: {:?}", daemon.counts());
    }
    daemon.stop().await;

    eprintln!("bench: a cold turn, step by step");
    let cold_steps = cold::run(&mock, &dir, samples.min(10)).await?;

    // The CLI's own first-turn cost, on raw processes.
    eprintln!("bench: first turns on raw CLI processes");
    let first_turns = first_turn::run(&mock, &dir, samples.min(8)).await?;

    // Twice as many threads as slots, round-robin.
    let capacity = env_usize("BENCH_OVERLOAD_CAPACITY", 16).max(1) as u64;
    eprintln!(
        "bench: {} threads round-robin on {capacity} slots",
        capacity * 2
    );
    let overload = overload::run(&mock, capacity, 5).await?;

    // CPU per warm turn, standard and lean profiles.
    eprintln!("bench: CPU per warm turn by profile");
    let profiles = profile::run(&mock, samples.max(10)).await?;

    // Scaling on a daemon of its own, so the 40-odd idle processes above do not share the CPU.
    let daemon = TestDaemon::start(&mock, |c| c.pool.max_capacity = 64).await;
    let mut scaling = Vec::new();
    for threads in [1, 4, 16] {
        eprintln!("bench: {threads} concurrent threads x {scaling_turns} turns");
        scaling.push(concurrent_turns(&daemon, threads, scaling_turns).await?);
    }
    let rss = warm_memory(&daemon, "rssBytes").await;
    let pss = warm_memory(&daemon, "pssBytes").await;
    let private = warm_memory(&daemon, "privateBytes").await;
    daemon.stop().await;

    eprintln!("bench: warm turns among idle processes");
    let crowd = crowd::run(&mock, samples).await?;

    // The walls on and off, side by side.
    eprintln!("bench: the walls' cost");
    let walls = walls::run(&mock, samples).await?;

    // Two nodes on one PostgreSQL: forwarded vs local warm turns, then failovers.
    eprintln!("bench: clustering, {failovers} failovers");
    let cluster = cluster::run(&mock, samples, failovers).await?;

    // Threads on worktrees of a repository of 10,000 files.
    eprintln!("bench: workspaces");
    let workspaces = workspaces::run(&mock, samples.min(10)).await?;

    // Answers while connections are held.
    eprintln!("bench: the door");
    let door = door::run(&mock, samples.min(10)).await?;

    // Webhooks: from a turn's end to its delivery.
    eprintln!("bench: webhooks");
    let webhooks = webhooks::run(&mock, samples).await?;

    // What telling callers apart costs a request.
    eprintln!("bench: callers");
    let callers = callers::run(&mock, samples * 25).await?;

    // A hundred thousand threads.
    eprintln!("bench: a hundred thousand threads");
    let scale = scale::run(&mock, samples).await?;

    // What a turn leaves in the database, before and after retention.
    eprintln!("bench: retention");
    let retention = retention::run(&mock, samples).await?;

    // New threads in bursts.
    eprintln!("bench: bursts of new threads");
    let bursts = bursts::run(&mock, samples).await?;

    // What a trace per turn costs.
    eprintln!("bench: traces");
    let traces = traces::run(&mock, samples).await?;
    eprintln!("bench: the model gateway");
    let gateway = gateway::run(&mock, samples).await?;

    // What images cost the daemon.
    eprintln!("bench: images");
    let files = files::run(samples).await?;

    // What output schemas cost the daemon's memory.
    eprintln!("bench: output schemas");
    let schemas = schemas::run(&mock).await?;

    // The Python SDK, on the same CLI binary and the same mock.
    let sdk = if std::env::var("BENCH_SDK").is_ok_and(|v| v == "0") {
        sdk::Outcome::Skipped("BENCH_SDK=0".into())
    } else {
        eprintln!("bench: Python claude-agent-sdk");
        sdk::measure(&dir, &mock, samples, &tools["tools"]).await
    };
    // The like-for-like warm figure: the same turns, alternating.
    let turn_by_turn = match &sdk {
        sdk::Outcome::Measured { .. } => sdk::side_by_side(&dir, &mock, samples)
            .await
            .unwrap_or_else(|err| format!("_Turn by turn: not measured: {err:#}._\n")),
        sdk::Outcome::Skipped(_) => String::new(),
    };

    let load = format!("{load_before} at the start, {} at the end", load_average());
    let report = render_report(Report {
        samples,
        load: &load,
        cold: &cold,
        warm: &warm,
        prewarmed: &prewarmed,
        spare: &spare,
        switched: &switched,
        overload: &overload,
        first_turns: &first_turns,
        cold_steps: &cold_steps,
        crowd: &crowd,
        walls: &walls,
        profiles: &profiles,
        cpu: &cpu,
        raw: &raw,
        tool: &tool,
        scaling: &scaling,
        rss: &rss,
        pss: &pss,
        private: &private,
        cluster: &cluster,
        workspaces: &workspaces,
        schemas: &schemas,
        door: &door,
        webhooks: &webhooks,
        callers: &callers,
        files: &files,
        scale: &scale,
        retention: &retention,
        traces: &traces,
        gateway: &gateway,
        bursts: &bursts,
        sdk: &sdk,
        turn_by_turn: &turn_by_turn,
        daemon_view: &daemon_view,
    })?;

    let mut distributions = vec![&cold, &spare, &prewarmed, &switched, &warm, &raw];
    if let sdk::Outcome::Measured { fresh, warm, .. } = &sdk {
        distributions.push(fresh);
        distributions.push(warm);
    }
    let png = dir.join("latency.png");
    let chart_note = match chart::draw(&png, &distributions, &scaling) {
        Ok(()) => "![latency distributions and scaling](latency.png)\n".to_owned(),
        Err(err) => {
            eprintln!("bench: no chart: {err:#}");
            format!("_No chart: {err:#}._\n")
        }
    };
    let report = report.replace("{chart}", &chart_note);
    println!("{report}");
    std::fs::write(dir.join("report.md"), report)?;
    eprintln!(
        "wrote {} and {}",
        dir.join("report.md").display(),
        png.display()
    );
    Ok(())
}

/// The 1-minute load average from `/proc/loadavg`, or `?`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// What the first daemon's `/metrics` says after the latency runs: pool counters, its own view
/// of turn time, and the mean time of each store call (from the histograms' sum and count).
/// CPU time per warm turn, from `/proc/<pid>/stat`.
struct CpuPerTurn {
    cli_ms: f64,
    bench_ms: f64,
}

/// User + system CPU time of `/proc/<pid>` (`self` for this process) in ms; 0 when unreadable.
/// Linux reports it in clock ticks of 1/100 s (USER_HZ) whatever the kernel's own tick.
pub fn cpu_ms(pid: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // The command name may hold spaces; fields after it are space-separated.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    // After `)`: state is field 0, so utime (field 14 of the whole line) is index 11, stime 12.
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) * 10.0
}

async fn from_metrics(daemon: &TestDaemon) -> anyhow::Result<String> {
    let text = reqwest::get(format!("{}/metrics", daemon.base))
        .await?
        .text()
        .await?;
    let value = |series: &str| -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
    };
    let count = |series: &str| value(series).map_or("?".into(), |v| format!("{v}"));
    let mean_ms = |base: &str, labels: &str| -> Option<(f64, f64)> {
        let sum = value(&format!("{base}_sum{labels}"))?;
        let n = value(&format!("{base}_count{labels}"))?;
        (n > 0.0).then(|| (n, sum / n * 1000.0))
    };
    let mut out = String::new();
    writeln!(
        out,
        "- pool counters from `/metrics` after these runs: {} hits, {} misses, {} prewarms, {} spawns",
        count("harness_pool_hits_total"),
        count("harness_pool_misses_total"),
        count("harness_pool_prewarms_total"),
        count("harness_pool_spawns_total"),
    )?;
    let turn = |start: &str| {
        mean_ms(
            "harness_turn_duration_seconds",
            &format!("{{start=\"{start}\"}}"),
        )
        .map_or("?".into(), |(n, ms)| {
            format!("{ms:.1} ms mean over {n} turns")
        })
    };
    writeln!(
        out,
        "- the daemon's own turn time (`harness_turn_duration_seconds`, no HTTP): warm {}; cold, first turns after prewarm included, {}",
        turn("warm"),
        turn("cold"),
    )?;
    let mut calls: Vec<(String, f64, f64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("harness_sqlite_query_duration_seconds_count{query=\"")?;
            let query = rest.split('"').next()?.to_owned();
            let labels = format!("{{query=\"{query}\"}}");
            let (n, ms) = mean_ms("harness_sqlite_query_duration_seconds", &labels)?;
            Some((query, n, ms))
        })
        .collect();
    calls.sort_by(|a, b| b.2.total_cmp(&a.2));
    let calls: Vec<String> = calls
        .iter()
        .map(|(q, n, ms)| format!("`{q}` {ms:.2} ms ({n})"))
        .collect();
    writeln!(
        out,
        "- store calls, mean time (count), from `harness_sqlite_query_duration_seconds`: {}",
        calls.join(", ")
    )?;
    Ok(out)
}

/// `threads` threads, each warmed with one untimed turn, then `turns` turns per thread back to
/// back, every thread at once.
async fn concurrent_turns(
    daemon: &TestDaemon,
    threads: usize,
    turns: usize,
) -> anyhow::Result<Scaling> {
    let mut ids = Vec::new();
    for _ in 0..threads {
        ids.push(daemon.create_thread().await);
    }
    futures::future::join_all(ids.iter().map(|id| daemon.reply(id, "scaling warm-up"))).await;
    let pids: Vec<String> = ids
        .iter()
        .filter_map(|id| daemon.pid_of(id))
        .map(|pid| pid.to_string())
        .collect();
    let cli_cpu = || pids.iter().map(|pid| cpu_ms(pid)).sum::<f64>();
    let cpu_before = (cli_cpu(), cpu_ms("self"));
    let started = Instant::now();
    let per_thread = futures::future::join_all(ids.iter().map(|id| async move {
        let mut times = Vec::with_capacity(turns);
        for i in 0..turns {
            let t = Instant::now();
            daemon.reply(id, &format!("scaling {i}")).await;
            times.push(t.elapsed());
        }
        times
    }))
    .await;
    let wall = started.elapsed();
    let mut latency = Series::new(format!("{threads} threads"));
    latency.samples = per_thread.into_iter().flatten().collect();
    let turns = latency.samples.len();
    Ok(Scaling {
        threads,
        turns,
        wall,
        latency,
        cli_cpu_ms: (cli_cpu() - cpu_before.0) / turns.max(1) as f64,
        bench_cpu_ms: (cpu_ms("self") - cpu_before.1) / turns.max(1) as f64,
    })
}

/// `field` (`rssBytes`, `pssBytes`, `privateBytes`) of every live process as `/api/pool`
/// reports it, in MiB, smallest first.
pub async fn warm_memory(daemon: &TestDaemon, field: &str) -> Vec<f64> {
    let (_, pool) = daemon.get("/api/pool").await;
    let mut mib: Vec<f64> = pool["processes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p[field].as_u64())
        .map(|bytes| bytes as f64 / (1024.0 * 1024.0))
        .collect();
    mib.sort_by(f64::total_cmp);
    mib
}

/// Archives `thread`, which lets its process go: a measured first turn leaves no idle process
/// behind to share the CPU with the next.
async fn archive(daemon: &TestDaemon, thread: String) -> anyhow::Result<()> {
    let thread = ThreadId::from_string(thread);
    let archived = daemon.daemon().pipeline.archive_thread(&thread).await;
    archived.map_err(|err| anyhow::anyhow!("archiving {thread}: {err}"))?;
    Ok(())
}

/// A `claude` command for a raw process driven by the bench itself: stream-json with `options`,
/// the mock's environment, piped stdin and stdout, killed when dropped.
pub fn raw_cli(
    bin: &Path,
    mock: &MockApi,
    options: &SpawnOptions,
    config_dir: &Path,
    workdir: &Path,
) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(bin);
    command
        .args(protocol::cli_args(options, None))
        .envs(cli_env(&mock.url()))
        .env("CLAUDE_CONFIG_DIR", config_dir)
        .env_remove("CLAUDECODE")
        .current_dir(workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Spawns the CLI with the daemon's argv, answers its MCP handshake with the daemon's tool list,
/// and times warm turns written straight to stdin.
async fn raw_cli_warm_turns(
    daemon: &TestDaemon,
    mock: &MockApi,
    tools: Value,
    samples: usize,
) -> anyhow::Result<Series> {
    let bin = tokio::task::spawn_blocking(claude_bin).await??;
    let options = SpawnOptions {
        builtin_tools: Some(String::new()),
        allowed_tools: vec![format!("mcp__{SERVER_NAME}")],
        ..Default::default()
    };
    // The same declaration as the daemon's, without a manifest: the floor answers the handshake.
    let initialize = protocol::initialize_request(
        &[SdkMcpServer {
            name: SERVER_NAME.to_owned(),
            timeout_ms: 150_000,
            manifest: None,
        }],
        protocol::Hooks::default(),
        None,
        None,
    );
    let config_dir = daemon.data_dir().join("raw-claude");
    let workdir = daemon.data_dir().join("raw-work");
    std::fs::create_dir_all(&config_dir)?;
    std::fs::create_dir_all(&workdir)?;
    let mut child = raw_cli(&bin, mock, &options, &config_dir, &workdir)
        .env("ENABLE_TOOL_SEARCH", "false")
        .env("CLAUDE_CODE_MAX_RETRIES", "2")
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    stdin
        .write_all(format!("{}\n", protocol::control_request("req_1", &initialize)).as_bytes())
        .await?;
    let mut series = Series::new("warm turn (raw CLI floor)");
    for i in 0..=samples {
        let took = cold::raw_turn(&mut stdin, &mut lines, &format!("raw {i}"), &tools).await?;
        // The first turn is the warm-up.
        if i > 0 {
            series.samples.push(took);
        }
    }
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    Ok(series)
}

async fn adapter_round_trips(daemon: &TestDaemon, calls: usize) -> Series {
    let parts = daemon.daemon();
    let thread = ThreadId::from_string(daemon.create_thread().await);
    let mut series = Series::new("MCP tools/call round trip (adapter)");
    for i in 0..calls {
        let message = json!({"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
            "params": {"name": "time__current_time", "arguments": {}}});
        let t = Instant::now();
        let reply = match parts.mcp.route(&thread, SERVER_NAME, message) {
            Route::Call(call) => {
                let ctx = parts.pipeline.tool_context(Some(thread.clone()));
                parts.mcp.call(call, ctx).await
            }
            Route::Reply(reply) | Route::Listed(reply) => reply,
        };
        series.samples.push(t.elapsed());
        assert!(
            reply["result"]["isError"].is_null(),
            "tool call failed: {reply}"
        );
    }
    series
}
