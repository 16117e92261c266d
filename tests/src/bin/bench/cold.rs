//! A cold turn broken down (#32), side by side with the Python SDK's own flags: raw processes
//! driven by our own minimal driver, one started as the daemon starts a new thread's process
//! (its argv, environment, folder, `initialize` with our manifest, through the model gateway:
//! `Launcher::spec`, `Launcher::launch` and `Launch::command`, replayed), the other as `claude-agent-sdk` 0.2.187
//! starts a fresh `query()` with the bench's options (`sdk_bench.py`: the CLI's system prompt,
//! no built-in tools, the in-process server `harness` declared with `--mcp-config` and handshaken
//! over the control channel, no settings files, partial messages). Each process's steps are
//! timed from its spawn, and then a few warm turns on each, back to back; next to them, the
//! daemon's own cold turn (a new thread's message, no spare) and warm turns over HTTP in the same
//! run, and what the daemon adds to the raw process. The daemon's start is also replayed with one
//! of its additions left out each (the session mirror, its settings, our MCP manifest), to price
//! each. Variants interleave. Last, warm turns in a round robin of the daemon's thread and a raw
//! process of each flavour: each turn comes after a pause (the other two's turns), as when
//! threads share the CPU, which costs the daemon more than back to back (its tasks and the
//! store's threads have gone to sleep).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdin, ChildStdout};

use claude_cli::protocol;
use harness_tests::cli::{claude_bin, cli_env, stray_cli_env};
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::launch::ProcessSpec;
use plugin_contract::ThreadId;

use crate::{ms, Series};

/// Turns after the first on each process, back to back (the warm row).
const WARM_TURNS: usize = 5;

/// The steps of one cold turn, each from the process's spawn.
#[derive(Default)]
struct Steps {
    /// `initialize` answered.
    initialized: Duration,
    /// The CLI's MCP handshake over the control channel answered (`tools/list`), when it ran one.
    handshake: Option<Duration>,
    /// The user message written.
    sent: Duration,
    /// The `system/init` line, the turn's first.
    init_line: Duration,
    /// The `result`.
    result: Duration,
    /// The same process's next turns, back to back: message to `result`.
    warm: Vec<Duration>,
}

/// One row of the table: a step's series in a column.
type Step = fn(&Column) -> &Series;

/// One flavour's steps over all its samples.
#[derive(Default)]
pub struct Column {
    initialized: Series,
    handshake: Series,
    waited: Series,
    to_init_line: Series,
    to_result: Series,
    total: Series,
    warm: Series,
}

impl Column {
    fn push(&mut self, s: Steps) {
        self.initialized.samples.push(s.initialized);
        if let Some(handshake) = s.handshake {
            self.handshake.samples.push(handshake);
        }
        self.waited
            .samples
            .push(s.sent.saturating_sub(s.initialized));
        self.to_init_line
            .samples
            .push(s.init_line.saturating_sub(s.sent));
        self.to_result
            .samples
            .push(s.result.saturating_sub(s.init_line));
        self.total.samples.push(s.result);
        self.warm.samples.extend(s.warm);
    }
}

/// What a variant of the daemon's start leaves out, to price each of its additions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Without {
    Nothing,
    Mirror,
    Settings,
    Manifest,
}

impl Without {
    const ALL: [Without; 4] = [
        Without::Nothing,
        Without::Mirror,
        Without::Settings,
        Without::Manifest,
    ];

    fn header(self) -> &'static str {
        match self {
            Without::Nothing => "daemon's flags",
            Without::Mirror => "… without `--session-mirror`",
            Without::Settings => "… without `--settings` (deny rules, hooks off)",
            Without::Manifest => "… without our MCP manifest (handshake over the channel)",
        }
    }
}

pub struct Breakdown {
    sdk: Column,
    /// The daemon's start as it is, then with one of its additions left out each.
    variants: Vec<(Without, Column)>,
    /// The daemon's own cold turns: a new thread's message to its reply, no spare.
    daemon: Series,
    /// The daemon's own turns after those, back to back.
    daemon_warm: Series,
    /// The daemon's flags, values of the long ones left out.
    argv: String,
    /// Warm turns in a round robin: the daemon's thread over HTTP, a raw process with the
    /// daemon's flags, one with the SDK's; each turn after the other two's.
    round: [Series; 3],
}

/// The host's answer to the CLI's control request `v`, as a line: our MCP server's handshake
/// with `tools` for `mcp_message`, empty for anything else (the `Stop` hook).
pub fn host_answer(v: &Value, tools: &Value) -> String {
    let id = v["request_id"].as_str().unwrap_or_default();
    let msg = &v["request"]["message"];
    let answer = if v["request"]["subtype"] == "mcp_message" {
        let reply = match msg["method"].as_str() {
            Some("initialize") => json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                "serverInfo": {"name": "harness", "version": "0"}}}),
            Some("tools/list") => {
                json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": tools}})
            }
            _ => json!({"jsonrpc": "2.0", "result": {}}),
        };
        json!({"mcp_response": reply})
    } else {
        json!({})
    };
    protocol::control_response(id, &Ok(answer)).to_string()
}

/// One turn on a raw process: `text` written, the CLI's control requests answered
/// ([`host_answer`]) until its `result`; how long that took.
pub async fn raw_turn(
    stdin: &mut ChildStdin,
    lines: &mut Lines<BufReader<ChildStdout>>,
    text: &str,
    tools: &Value,
) -> anyhow::Result<Duration> {
    let message = protocol::user_turn(&text.into(), &uuid::Uuid::new_v4().to_string());
    let at = Instant::now();
    stdin.write_all(format!("{message}\n").as_bytes()).await?;
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await??
            .context("the CLI exited")?;
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if v["type"] == "control_request" {
            let out = host_answer(&v, tools);
            stdin.write_all(format!("{out}\n").as_bytes()).await?;
        }
        if v["type"] == "result" {
            return Ok(at.elapsed());
        }
    }
}

/// A raw process past its first turn, kept for more.
struct Driven {
    child: tokio::process::Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    /// What the process needs while it lives: its folder (the SDK's flags), its token at the
    /// model gateway (the daemon's).
    _keep: Box<dyn std::any::Any + Send>,
}

impl Driven {
    async fn turn(&mut self, text: &str, tools: &Value) -> anyhow::Result<Duration> {
        raw_turn(&mut self.stdin, &mut self.lines, text, tools).await
    }
}

/// [`WARM_TURNS`] more turns on a process past its first, back to back; then it goes.
async fn warm_turns(
    (mut steps, mut driven): (Steps, Driven),
    tools: &Value,
) -> anyhow::Result<Steps> {
    for i in 0..WARM_TURNS {
        steps
            .warm
            .push(driven.turn(&format!("warm {i}"), tools).await?);
    }
    drop(driven.stdin);
    let _ = driven.child.kill().await;
    Ok(steps)
}

/// Drives one started process to the end of its first turn, answering its control requests as
/// its host would (MCP with `tools`, the `Stop` hook empty); `wait_handshake`: the message waits
/// for the MCP handshake unless the CLI took a manifest, as the daemon's pool does. The steps,
/// and the process for more turns, with `keep`.
async fn first_turn(
    mut child: tokio::process::Child,
    keep: Box<dyn std::any::Any + Send>,
    initialize: Value,
    tools: &Value,
    wait_handshake: bool,
    spawned: Instant,
) -> anyhow::Result<(Steps, Driven)> {
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let line = protocol::control_request("req_1", &initialize);
    stdin.write_all(format!("{line}\n").as_bytes()).await?;
    let mut steps = Steps::default();
    let mut sent = false;
    let mut must_wait = wait_handshake;
    let message = protocol::user_turn(&"cold".into(), &uuid::Uuid::new_v4().to_string());
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await??
            .context("the CLI exited")?;
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        match v["type"].as_str() {
            Some("control_response") if v["response"]["request_id"] == "req_1" => {
                anyhow::ensure!(v["response"]["subtype"] == "success", "refused: {v}");
                steps.initialized = spawned.elapsed();
                let parked = &v["response"]["response"]["sdk_mcp_manifests_parked"];
                must_wait &= parked[orchestrator::mcp::SERVER_NAME] != "parked";
            }
            Some("control_request") => {
                if v["request"]["message"]["method"] == "tools/list" && steps.handshake.is_none() {
                    steps.handshake = Some(spawned.elapsed());
                    must_wait = false;
                }
                let out = host_answer(&v, tools);
                stdin.write_all(format!("{out}\n").as_bytes()).await?;
            }
            Some("system") if v["subtype"] == "init" => steps.init_line = spawned.elapsed(),
            Some("result") if steps.result.is_zero() => {
                steps.result = spawned.elapsed();
                break;
            }
            _ => {}
        }
        if !sent && steps.initialized > Duration::ZERO && !must_wait {
            stdin.write_all(format!("{message}\n").as_bytes()).await?;
            steps.sent = spawned.elapsed();
            sent = true;
        }
    }
    Ok((
        steps,
        Driven {
            child,
            stdin,
            lines,
            _keep: keep,
        },
    ))
}

/// The spec of a new thread's process, as the daemon's pool would build it.
async fn new_thread_spec(daemon: &TestDaemon) -> anyhow::Result<ProcessSpec> {
    let parts = daemon.daemon();
    let id = ThreadId::from_string(daemon.create_thread().await);
    let row = parts.store.require_thread(&id).await?;
    Ok(parts.pool.launcher().spec(&row, None)?)
}

/// The daemon's flags for a new thread, with the values of the long ones left out.
async fn argv(daemon: &TestDaemon) -> anyhow::Result<String> {
    let spec = new_thread_spec(daemon).await?;
    let args = protocol::cli_args(&spec.options, None);
    let shown: Vec<String> = args
        .iter()
        .map(|a| match a.split_once('=') {
            Some((flag, value)) if value.len() > 24 => format!("{flag}=…"),
            _ => a.clone(),
        })
        .collect();
    Ok(shown.join(" "))
}

/// A process started as the daemon starts a new thread's, but `without` one of its additions,
/// past its first turn.
async fn daemon_argv(
    daemon: &TestDaemon,
    tools: &Value,
    without: Without,
) -> anyhow::Result<(Steps, Driven)> {
    let mut spec = new_thread_spec(daemon).await?;
    // The token at the gateway lives as long as `pass`, the walled tree as long as `tree`: kept
    // with the process.
    let orchestrator::launch::Launched {
        mut launch,
        pass,
        tree,
    } = daemon.daemon().pool.launcher().launch(&spec)?;
    match without {
        Without::Nothing => {}
        Without::Mirror => spec.options.session_mirror = false,
        Without::Settings => spec.options.settings = None,
        Without::Manifest => launch
            .sdk_mcp_servers
            .iter_mut()
            .for_each(|s| s.manifest = None),
    }
    let spawned = Instant::now();
    let child = launch
        .command(&spec.options, None)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let initialize = protocol::initialize_request(
        &launch.sdk_mcp_servers,
        launch.hooks,
        launch.agents.as_ref(),
        launch.managed_settings.as_ref(),
    );
    first_turn(
        child,
        Box::new((pass, tree)),
        initialize,
        tools,
        true,
        spawned,
    )
    .await
}

/// A process started as `claude-agent-sdk` starts a fresh `query()` with the bench's options,
/// past its first turn; its folder goes with the process.
async fn sdk_argv(mock: &MockApi, dir: &Path, tools: &Value) -> anyhow::Result<(Steps, Driven)> {
    let bin = tokio::task::spawn_blocking(claude_bin).await??;
    let work = tempfile::tempdir_in(dir)?;
    let config_dir = work.path().join("claude");
    std::fs::create_dir_all(&config_dir)?;
    let servers = json!({"mcpServers": {"harness": {"type": "sdk", "name": "harness"}}});
    let mut command = tokio::process::Command::new(bin);
    command
        .args(["--output-format", "stream-json", "--verbose", "--tools", ""])
        .args(["--allowedTools", "mcp__harness", "--mcp-config"])
        .arg(servers.to_string())
        .args(["--include-partial-messages", "--setting-sources="])
        .args(["--input-format", "stream-json"]);
    for key in stray_cli_env() {
        command.env_remove(key);
    }
    let spawned = Instant::now();
    let child = command
        .envs(cli_env(&mock.url()))
        .env("CLAUDE_CONFIG_DIR", &config_dir)
        .env("ENABLE_TOOL_SEARCH", "false")
        .env("CLAUDE_CODE_MAX_RETRIES", "2")
        .env("CLAUDE_CODE_ENTRYPOINT", "sdk-py")
        .current_dir(work.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let initialize = json!({"subtype": "initialize", "hooks": null});
    first_turn(child, Box::new(work), initialize, tools, false, spawned).await
}

pub async fn run(mock: &MockApi, dir: &Path, samples: usize) -> anyhow::Result<Breakdown> {
    let daemon = TestDaemon::start(mock, |c| c.pool.max_capacity = 64).await;
    let (_, tools) = daemon.get("/api/tools").await;
    let tools = &tools["tools"];
    let mut outcome = Breakdown {
        sdk: Column::default(),
        variants: Without::ALL
            .iter()
            .map(|w| (*w, Column::default()))
            .collect(),
        daemon: Series::new("the daemon: a new thread's message to its reply"),
        daemon_warm: Series::default(),
        argv: argv(&daemon).await?,
        round: Default::default(),
    };
    // One of each first, unmeasured: the binary's pages in the cache for all.
    warm_turns(sdk_argv(mock, dir, tools).await?, tools).await?;
    warm_turns(daemon_argv(&daemon, tools, Without::Nothing).await?, tools).await?;
    for i in 0..samples {
        outcome
            .sdk
            .push(warm_turns(sdk_argv(mock, dir, tools).await?, tools).await?);
        for (without, column) in &mut outcome.variants {
            let driven = daemon_argv(&daemon, tools, *without).await?;
            column.push(warm_turns(driven, tools).await?);
        }
        let thread = daemon.create_thread().await;
        let at = Instant::now();
        daemon.reply(&thread, &format!("cold {i}")).await;
        outcome.daemon.samples.push(at.elapsed());
        for j in 0..WARM_TURNS {
            let at = Instant::now();
            daemon.reply(&thread, &format!("warm {j}")).await;
            outcome.daemon_warm.samples.push(at.elapsed());
        }
    }
    // The round robin, after two unmeasured rounds.
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    let (_, mut ours) = daemon_argv(&daemon, tools, Without::Nothing).await?;
    let (_, mut sdks) = sdk_argv(mock, dir, tools).await?;
    for i in 0..samples * WARM_TURNS + 2 {
        let at = Instant::now();
        daemon.reply(&thread, &format!("round {i}")).await;
        let took = [
            at.elapsed(),
            ours.turn(&format!("round {i}"), tools).await?,
            sdks.turn(&format!("round {i}"), tools).await?,
        ];
        if i >= 2 {
            for (series, took) in outcome.round.iter_mut().zip(took) {
                series.samples.push(took);
            }
        }
    }
    daemon.stop().await;
    Ok(outcome)
}

pub fn render(out: &mut String, b: &Breakdown) -> std::fmt::Result {
    writeln!(out, "## A cold turn, step by step\n")?;
    writeln!(
        out,
        "Raw processes driven by the bench: one started exactly as the daemon starts a new thread's \
         (argv, environment, `initialize` with our MCP manifest, through the model gateway), the \
         same with one of its additions left out each, and one with the flags `claude-agent-sdk` \
         0.2.187 passes for a fresh `query()` with the same tools (its MCP server declared with \
         `--mcp-config` and handshaken over the control channel). Each step from the process's \
         spawn; medians of {} each, interleaved. The daemon's flags: `{}`.\n",
        b.daemon.samples.len(),
        b.argv
    )?;
    let mut columns: Vec<(&str, &Column)> = vec![("SDK's flags", &b.sdk)];
    columns.extend(b.variants.iter().map(|(w, c)| (w.header(), c)));
    let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
    writeln!(out, "| step | {} |", names.join(" | "))?;
    writeln!(out, "|---|{}", "---|".repeat(columns.len()))?;
    let cell = |s: &Series| {
        if s.samples.is_empty() {
            "none".to_owned()
        } else {
            format!("{:.1} ms", ms(s.median()))
        }
    };
    let rows: [(&str, Step); 7] = [
        ("spawn → `initialize` answered", |c| &c.initialized),
        ("spawn → MCP handshake answered (`tools/list`)", |c| {
            &c.handshake
        }),
        ("`initialize` answered → message written", |c| &c.waited),
        ("message → `system/init`", |c| &c.to_init_line),
        ("`system/init` → `result`", |c| &c.to_result),
        ("**spawn → `result`**", |c| &c.total),
        ("the next turns, back to back (warm)", |c| &c.warm),
    ];
    for (name, series) in rows {
        let cells: Vec<String> = columns.iter().map(|(_, c)| cell(series(c))).collect();
        writeln!(out, "| {name} | {} |", cells.join(" | "))?;
    }
    let sdk = ms(b.sdk.total.median()).max(f64::EPSILON);
    let raw = b.as_is().map_or(0.0, |c| ms(c.total.median()));
    writeln!(
        out,
        "\n- The daemon's flags / the SDK's (spawn → `result`, median): **{:.2}×**",
        raw / sdk
    )?;
    for (without, column) in &b.variants {
        if *without != Without::Nothing {
            writeln!(
                out,
                "- {}: {:+.0} ms against the daemon's flags",
                without.header().trim_start_matches("… "),
                ms(column.total.median()) - raw
            )?;
        }
    }
    let raw_warm = b.as_is().map_or(0.0, |c| ms(c.warm.median()));
    writeln!(
        out,
        "- Warm: the daemon's flags / the SDK's: **{:.2}×**; the daemon's own warm turn (over \
         HTTP) {:.1} ms, {:+.1} ms on its raw process",
        raw_warm / ms(b.sdk.warm.median()).max(f64::EPSILON),
        ms(b.daemon_warm.median()),
        ms(b.daemon_warm.median()) - raw_warm
    )?;
    let [over_http, ours, sdks] = b.round.each_ref().map(|s| ms(s.median()));
    writeln!(
        out,
        "- Warm, in a round robin (each turn after the other two's, as when threads share the \
         CPU): the daemon over HTTP {over_http:.1} ms, a raw process with its flags {ours:.1} ms, \
         one with the SDK's {sdks:.1} ms: the daemon's flags / the SDK's **{:.2}×**, the daemon \
         {:+.1} ms on its raw process",
        ours / sdks.max(f64::EPSILON),
        over_http - ours
    )?;
    writeln!(
        out,
        "- The daemon's own cold turn (a new thread's message to its reply over HTTP, no spare): \
         {:.0} ms (p95 {:.0}); the daemon adds **{:+.0} ms** to its raw process (storing the \
         message and reply, the pool's slot, the process's tasks, the HTTP round trip)\n",
        ms(b.daemon.median()),
        ms(b.daemon.p95()),
        ms(b.daemon.median()) - raw
    )?;
    Ok(())
}

impl Breakdown {
    /// The daemon's start as it is.
    fn as_is(&self) -> Option<&Column> {
        self.variants
            .iter()
            .find(|(w, _)| *w == Without::Nothing)
            .map(|(_, c)| c)
    }
}
