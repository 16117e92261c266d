//! `just bench`: drives the daemon over HTTP against the real `claude` CLI and the mock Messages
//! API, and prints min / median / p95 for cold, warm and prewarmed turns, a warm turn sent straight
//! to a raw CLI process (the floor), and an in-process MCP tool call round trip. All figures come
//! from this one run; ratios are printed beside absolute times. Also writes
//! `target/bench/report.md`.
//!
//! Env: `BENCH_SAMPLES` (turn samples per scenario, default 20), `BENCH_TOOL_CALLS` (default 1000).

use std::fmt::Write as _;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use harness_tests::cli::{claude_bin, cli_env};
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::invoker::process::ControlHandler;
use orchestrator::invoker::protocol::{self, SpawnOptions};
use plugin_contract::ThreadId;

#[derive(Clone)]
struct Series {
    name: &'static str,
    samples: Vec<Duration>,
}

impl Series {
    fn sorted(&self) -> Vec<Duration> {
        let mut s = self.samples.clone();
        s.sort();
        s
    }
    fn min(&self) -> Duration {
        self.sorted().first().copied().unwrap_or_default()
    }
    fn median(&self) -> Duration {
        let s = self.sorted();
        s.get(s.len() / 2).copied().unwrap_or_default()
    }
    fn p95(&self) -> Duration {
        let s = self.sorted();
        let i = ((s.len() as f64) * 0.95).ceil() as usize;
        s.get(i.saturating_sub(1).min(s.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let samples: usize = std::env::var("BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let tool_calls: usize = std::env::var("BENCH_TOOL_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.pool.max_capacity = 64).await;
    eprintln!(
        "bench: {samples} samples per scenario, daemon at {}",
        daemon.base
    );

    // Cold: a new thread each time, so every turn spawns a process.
    let mut cold = Series {
        name: "cold turn (spawn + turn)",
        samples: Vec::new(),
    };
    for i in 0..samples {
        let thread = daemon.create_thread().await;
        let t = Instant::now();
        daemon.reply(&thread, &format!("cold {i}")).await;
        cold.samples.push(t.elapsed());
    }

    // Warm: one thread, one unmeasured turn first.
    let mut warm = Series {
        name: "warm turn (daemon)",
        samples: Vec::new(),
    };
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm-up").await;
    for i in 0..samples {
        let t = Instant::now();
        daemon.reply(&thread, &format!("warm {i}")).await;
        warm.samples.push(t.elapsed());
    }

    // Prewarmed: prewarm, wait until the process is ready, then the first turn.
    let mut prewarmed = Series {
        name: "first turn after prewarm",
        samples: Vec::new(),
    };
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
    }

    // The floor: our own minimal driver on a raw CLI process with the same argv and tools.
    let (_, tools) = daemon.get("/api/tools").await;
    let raw = raw_cli_warm_turns(&daemon, &mock, tools["tools"].clone(), samples).await?;

    // In-process tool call round trip through the MCP adapter (control request in → reply out).
    let tool = adapter_round_trips(&daemon, tool_calls).await;

    daemon.stop().await;
    let all = [
        cold.clone(),
        warm.clone(),
        prewarmed.clone(),
        raw.clone(),
        tool.clone(),
    ];
    let mut table = String::new();
    writeln!(table, "| scenario | n | min ms | median ms | p95 ms |")?;
    writeln!(table, "|---|---|---|---|---|")?;
    for s in &all {
        writeln!(
            table,
            "| {} | {} | {:.3} | {:.3} | {:.3} |",
            s.name,
            s.samples.len(),
            ms(s.min()),
            ms(s.median()),
            ms(s.p95())
        )?;
    }
    let cold_over_warm = ms(cold.median()) / ms(warm.median());
    let warm_over_raw = ms(warm.median()) / ms(raw.median());
    let prewarm_over_warm = ms(prewarmed.median()) / ms(warm.median());
    let mut ratios = String::new();
    writeln!(
        ratios,
        "- cold / warm (median): {cold_over_warm:.1}x (target >= 10x)"
    )?;
    writeln!(
        ratios,
        "- daemon warm / raw CLI warm (median): {warm_over_raw:.2}x (target <= 1.15x)"
    )?;
    writeln!(
        ratios,
        "- first turn after prewarm / warm (median): {prewarm_over_warm:.2}x"
    )?;
    writeln!(
        ratios,
        "- tool call round trip median: {:.3} ms (target < 1 ms)",
        ms(tool.median())
    )?;
    println!("{table}\n{ratios}");

    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench");
    std::fs::create_dir_all(&dir)?;
    let report = format!(
        "# Harness bench\n\nAll figures from one run: real `claude` {} against the local mock Messages API \
         (which answers in ~1 ms, so these are CLI + daemon overheads, not model latency).\n\n{table}\n{ratios}",
        harness_tests::cli::CLI_VERSION
    );
    std::fs::write(dir.join("report.md"), report)?;
    eprintln!("wrote {}", dir.join("report.md").display());
    Ok(())
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
        mcp_timeout_ms: 150_000,
        ..Default::default()
    };
    let config_dir = daemon.data_dir().join("raw-claude");
    let workdir = daemon.data_dir().join("raw-work");
    std::fs::create_dir_all(&config_dir)?;
    std::fs::create_dir_all(&workdir)?;
    let mut child = tokio::process::Command::new(bin)
        .args(protocol::cli_args(&options, None))
        .envs(cli_env(&mock.url()))
        .env("CLAUDE_CONFIG_DIR", &config_dir)
        .env("ENABLE_TOOL_SEARCH", "false")
        .env("CLAUDE_CODE_MAX_RETRIES", "2")
        .env_remove("CLAUDECODE")
        .current_dir(&workdir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().context("stdin")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    stdin
        .write_all(
            format!(
                "{}\n",
                protocol::control_request("req_1", json!({"subtype": "initialize"}))
            )
            .as_bytes(),
        )
        .await?;
    let mut series = Series {
        name: "warm turn (raw CLI floor)",
        samples: Vec::new(),
    };
    for i in 0..=samples {
        let line = protocol::user_turn(&format!("raw {i}"), &uuid::Uuid::new_v4().to_string());
        let t = Instant::now();
        stdin.write_all(format!("{line}\n").as_bytes()).await?;
        loop {
            let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
                .await??
                .context("CLI exited")?;
            let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            match v["type"].as_str() {
                Some("control_request") => {
                    let id = v["request_id"].as_str().unwrap_or_default();
                    let msg = &v["request"]["message"];
                    let reply = match msg["method"].as_str() {
                        Some("initialize") => json!({"jsonrpc": "2.0", "id": msg["id"], "result": {
                            "protocolVersion": "2025-11-25", "capabilities": {"tools": {}},
                            "serverInfo": {"name": "harness", "version": "0"}}}),
                        Some("tools/list") => {
                            json!({"jsonrpc": "2.0", "id": msg["id"], "result": {"tools": tools}})
                        }
                        _ => json!({"jsonrpc": "2.0", "result": {}}),
                    };
                    let out = protocol::control_success(id, json!({"mcp_response": reply}));
                    stdin.write_all(format!("{out}\n").as_bytes()).await?;
                }
                Some("result") => break,
                _ => {}
            }
        }
        // The first turn is the warm-up.
        if i > 0 {
            series.samples.push(t.elapsed());
        }
    }
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    Ok(series)
}

async fn adapter_round_trips(daemon: &TestDaemon, calls: usize) -> Series {
    let adapter: Arc<dyn ControlHandler> = daemon.app().adapter().clone();
    let thread = ThreadId::from_string(daemon.create_thread().await);
    let mut series = Series {
        name: "MCP tools/call round trip (adapter)",
        samples: Vec::with_capacity(calls),
    };
    for i in 0..calls {
        let message = json!({"jsonrpc": "2.0", "id": i + 2, "method": "tools/call",
            "params": {"name": "time__current_time", "arguments": {}}});
        let t = Instant::now();
        let reply = adapter.mcp_message(&thread, "harness", message).await;
        series.samples.push(t.elapsed());
        assert!(
            reply["result"]["isError"].is_null(),
            "tool call failed: {reply}"
        );
    }
    series
}
