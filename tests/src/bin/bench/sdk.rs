//! The official Python `claude-agent-sdk`, timed on the same `claude` binary and the same mock as
//! Harness: a venv under `target/bench/venv` (pip, from PyPI), then `sdk_bench.py` (written next
//! to it) prints its timings as JSON. Any failure on the way becomes [`Outcome::Skipped`] with the
//! reason, and the rest of the report goes on.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, Context};
use serde_json::{json, Value};

use harness_tests::cli::{claude_bin, cli_env, stray_cli_env};
use harness_tests::mock::MockApi;

use super::Series;

/// The SDK release measured: the one whose bundled CLI is the version Harness is built for.
/// `BENCH_SDK_SPEC` overrides it (any pip requirement).
const SDK_SPEC: &str = "claude-agent-sdk==0.2.187";

const SCRIPT: &str = include_str!("sdk_bench.py");

const INSTALL_TIMEOUT: Duration = Duration::from_secs(900);
const RUN_TIMEOUT: Duration = Duration::from_secs(900);

pub enum Outcome {
    Measured {
        version: String,
        fresh: Series,
        warm: Series,
    },
    Skipped(String),
}

/// The SDK's figures with `tools` (Harness's, from `GET /api/tools`) served by its in-process
/// MCP server, so both sides show the model the same tools.
pub async fn measure(dir: &Path, mock: &MockApi, samples: usize, tools: &Value) -> Outcome {
    match run(dir, mock, samples, tools).await {
        Ok(outcome) => outcome,
        Err(err) => {
            eprintln!("bench: Python SDK not measured: {err:#}");
            Outcome::Skipped(format!("{err:#}"))
        }
    }
}

async fn run(dir: &Path, mock: &MockApi, samples: usize, tools: &Value) -> anyhow::Result<Outcome> {
    if command("python3", &["--version"], Duration::from_secs(30))
        .await
        .is_err()
    {
        return Ok(Outcome::Skipped("`python3` is not available".into()));
    }
    let venv = dir.join("venv");
    let python = venv.join("bin").join("python");
    if !python.is_file() {
        let venv_arg = venv.to_string_lossy().into_owned();
        command("python3", &["-m", "venv", &venv_arg], INSTALL_TIMEOUT)
            .await
            .context("creating the venv")?;
    }
    let python_arg = python.to_string_lossy().into_owned();
    let spec = std::env::var("BENCH_SDK_SPEC").unwrap_or_else(|_| SDK_SPEC.to_owned());
    eprintln!("bench: pip install {spec} into {}", venv.display());
    command(
        &python_arg,
        &[
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &spec,
        ],
        INSTALL_TIMEOUT,
    )
    .await
    .with_context(|| format!("pip install {spec} failed"))?;

    let script = dir.join("sdk_bench.py");
    std::fs::write(&script, SCRIPT)?;
    let work = tempfile::tempdir_in(dir)?;
    let config_dir = work.path().join("claude");
    let cwd = work.path().join("work");
    std::fs::create_dir_all(&config_dir)?;
    std::fs::create_dir_all(&cwd)?;
    let cli = tokio::task::spawn_blocking(claude_bin).await??;
    let mut env: serde_json::Map<String, Value> = cli_env(&mock.url())
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    env.insert("CLAUDE_CONFIG_DIR".into(), json!(config_dir));
    env.insert("ENABLE_TOOL_SEARCH".into(), json!("false"));
    env.insert("CLAUDE_CODE_MAX_RETRIES".into(), json!("2"));
    let config = json!({"cli": cli, "cwd": cwd, "env": env, "samples": samples, "tools": tools});
    let out = command(
        &python_arg,
        &[&script.to_string_lossy(), &config.to_string()],
        RUN_TIMEOUT,
    )
    .await
    .context("the SDK script failed")?;
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .context("the SDK script printed no JSON")?;
    let result: Value = serde_json::from_str(line)?;
    let series = |key: &str, name: &str| -> anyhow::Result<Series> {
        let samples = result[key]
            .as_array()
            .with_context(|| format!("no {key} in {line}"))?
            .iter()
            .filter_map(Value::as_f64)
            .map(|ms| Duration::from_secs_f64(ms / 1000.0))
            .collect();
        Ok(Series {
            name: name.to_owned(),
            samples,
        })
    };
    Ok(Outcome::Measured {
        version: result["sdk_version"].as_str().unwrap_or("?").to_owned(),
        fresh: series("fresh_ms", "Python SDK: fresh query() per message")?,
        warm: series("warm_ms", "Python SDK: warm ClaudeSDKClient turn")?,
    })
}

/// Runs a program to completion within `limit`, with the developer's Claude/Anthropic variables
/// removed; returns its stdout, or an error with the tail of its stderr.
async fn command(program: &str, args: &[&str], limit: Duration) -> anyhow::Result<String> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for key in stray_cli_env() {
        cmd.env_remove(key);
    }
    let output = tokio::time::timeout(limit, cmd.output())
        .await
        .with_context(|| format!("`{program}` did not finish within {limit:?}"))?
        .with_context(|| format!("cannot run `{program}`"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(8).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "`{program}` exited with {}: {}",
            output.status,
            tail.join(" / ")
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `BENCH_ONLY=sdk`: Harness and the SDK side by side with the same tools: Harness's warm turns
/// before and after the SDK's run (so both halves of the machine's day are in its figure), its
/// cold turns (a new thread each, no spare), then the SDK's fresh `query()` and warm client.
pub async fn side_by_side(dir: &Path, mock: &MockApi, samples: usize) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    use std::time::Instant;

    let daemon = harness_tests::daemon::TestDaemon::start(mock, |c| c.pool.max_capacity = 64).await;
    let (_, tools) = daemon.get("/api/tools").await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm-up").await;
    let mut warm = Series::new("Harness warm turn");
    let mut cold = Series::new("Harness cold turn (new thread, no spare)");
    warm_turns(&daemon, &thread, samples, &mut warm).await;
    for i in 0..samples {
        let fresh = daemon.create_thread().await;
        let at = Instant::now();
        daemon.reply(&fresh, &format!("cold {i}")).await;
        cold.samples.push(at.elapsed());
    }
    let sdk = measure(dir, mock, samples, &tools["tools"]).await;
    warm_turns(&daemon, &thread, samples, &mut warm).await;
    daemon.stop().await;
    let mut out = String::new();
    writeln!(out, "## Harness and the Python SDK, same tools\n")?;
    writeln!(out, "| turn | median | p95 |\n|---|---|---|")?;
    let row = |out: &mut String, s: &Series| {
        writeln!(
            out,
            "| {} | {:.1} ms | {:.1} ms |",
            s.name,
            super::ms(s.median()),
            super::ms(s.p95())
        )
    };
    row(&mut out, &warm)?;
    row(&mut out, &cold)?;
    match &sdk {
        Outcome::Measured {
            version,
            fresh,
            warm: sdk_warm,
        } => {
            row(&mut out, fresh)?;
            row(&mut out, sdk_warm)?;
            writeln!(
                out,
                "\nclaude-agent-sdk {version}, {} MCP tools on both sides. Warm: Harness {:.2}× the SDK's client. Cold: Harness {:.2}× the SDK's fresh query().\n",
                tools["tools"].as_array().map_or(0, Vec::len),
                super::ms(warm.median()) / super::ms(sdk_warm.median()).max(f64::EPSILON),
                super::ms(cold.median()) / super::ms(fresh.median()).max(f64::EPSILON),
            )?;
        }
        Outcome::Skipped(why) => writeln!(out, "\nThe SDK was not measured: {why}\n")?,
    }
    Ok(out)
}

async fn warm_turns(
    daemon: &harness_tests::daemon::TestDaemon,
    thread: &str,
    samples: usize,
    series: &mut Series,
) {
    for i in 0..samples {
        let at = std::time::Instant::now();
        daemon.reply(thread, &format!("warm {i}")).await;
        series.samples.push(at.elapsed());
    }
}
