//! The official Python `claude-agent-sdk`, timed on the same `claude` binary and the same mock as
//! Harness: a venv under `target/bench/venv` (pip, from PyPI), then `sdk_bench.py` (written next
//! to it) prints its timings as JSON. Any failure on the way becomes [`Outcome::Skipped`] with the
//! reason, and the rest of the report goes on. [`side_by_side`] runs the script turn by turn,
//! alternating its turns with Harness's: after [`measure`] in the full run, alone with
//! `BENCH_ONLY=sdk`.

use std::path::{Path, PathBuf};
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

/// The python of the venv with the SDK installed, the script written next to it, and the
/// script's config (`samples`, `tools`, the CLI's folders under `work`); `None` when there is no
/// `python3`.
async fn prepare(
    dir: &Path,
    mock: &MockApi,
    samples: usize,
    tools: &Value,
    work: &Path,
) -> anyhow::Result<Option<(String, PathBuf, Value)>> {
    if command("python3", &["--version"], Duration::from_secs(30))
        .await
        .is_err()
    {
        return Ok(None);
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
    let config_dir = work.join("claude");
    let cwd = work.join("work");
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
    Ok(Some((python_arg, script, config)))
}

async fn run(dir: &Path, mock: &MockApi, samples: usize, tools: &Value) -> anyhow::Result<Outcome> {
    let work = tempfile::tempdir_in(dir)?;
    let Some((python, script, config)) = prepare(dir, mock, samples, tools, work.path()).await?
    else {
        return Ok(Outcome::Skipped("`python3` is not available".into()));
    };
    let out = command(
        &python,
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

/// The SDK script in its turn-by-turn mode: one `ClaudeSDKClient` kept, and each command on its
/// stdin (`warm`: a turn on the client; `fresh`: a new `query()`) answered with its time.
struct TurnByTurn {
    child: tokio::process::Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    version: String,
    _work: tempfile::TempDir,
}

impl TurnByTurn {
    async fn start(
        dir: &Path,
        mock: &MockApi,
        tools: &Value,
    ) -> anyhow::Result<Option<TurnByTurn>> {
        use tokio::io::AsyncBufReadExt;
        let work = tempfile::tempdir_in(dir)?;
        let Some((python, script, mut config)) = prepare(dir, mock, 0, tools, work.path()).await?
        else {
            return Ok(None);
        };
        config["turn_by_turn"] = json!(true);
        let mut cmd = tokio::process::Command::new(python);
        cmd.arg(script)
            .arg(config.to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        for key in stray_cli_env() {
            cmd.env_remove(key);
        }
        let mut child = cmd.spawn().context("starting the SDK script")?;
        let stdin = child.stdin.take().context("stdin")?;
        let stdout = child.stdout.take().context("stdout")?;
        let mut session = TurnByTurn {
            child,
            stdin,
            lines: tokio::io::BufReader::new(stdout).lines(),
            version: String::new(),
            _work: work,
        };
        let ready = session.answer().await?;
        session.version = ready["sdk_version"].as_str().unwrap_or("?").to_owned();
        Ok(Some(session))
    }

    async fn answer(&mut self) -> anyhow::Result<Value> {
        let line = tokio::time::timeout(RUN_TIMEOUT, self.lines.next_line())
            .await
            .context("the SDK script did not answer")??
            .context("the SDK script exited")?;
        let answer: Value = serde_json::from_str(&line)
            .with_context(|| format!("the SDK script printed {line}"))?;
        if let Some(error) = answer.get("error") {
            bail!("the SDK script failed: {error}");
        }
        Ok(answer)
    }

    /// One `warm` or `fresh` turn, as the script timed it.
    async fn turn(&mut self, what: &str) -> anyhow::Result<Duration> {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(format!("{what}\n").as_bytes()).await?;
        let answer = self.answer().await?;
        let ms = answer["ms"].as_f64().context("no `ms` in the answer")?;
        Ok(Duration::from_secs_f64(ms / 1000.0))
    }

    async fn stop(mut self) {
        drop(self.stdin);
        let _ = tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await;
    }
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

/// `BENCH_ONLY=sdk`, and the full run after [`measure`]: Harness and the SDK side by side with the same tools, turn by turn: a
/// Harness warm turn, then one of the SDK's warm client, and so on (each side's conversation as
/// long as the other's: a turn's cost grows with it); then a Harness cold turn (a new thread, no
/// spare), then a fresh `query()`, and so on. Alternating puts both in the same moments of the
/// machine's day.
pub async fn side_by_side(dir: &Path, mock: &MockApi, samples: usize) -> anyhow::Result<String> {
    use std::fmt::Write as _;
    use std::time::Instant;

    let daemon = harness_tests::daemon::TestDaemon::start(mock, |c| c.pool.max_capacity = 64).await;
    let (_, tools) = daemon.get("/api/tools").await;
    let Some(mut sdk) = TurnByTurn::start(dir, mock, &tools["tools"]).await? else {
        bail!("`python3` is not available");
    };
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm-up").await;
    sdk.turn("warm").await?;
    let mut warm = Series::new("Harness warm turn");
    let mut sdk_warm = Series::new("Python SDK: warm ClaudeSDKClient turn");
    let mut cold = Series::new("Harness cold turn (new thread, no spare)");
    let mut fresh = Series::new("Python SDK: fresh query() per message");
    for i in 0..samples {
        let at = Instant::now();
        daemon.reply(&thread, &format!("warm {i}")).await;
        warm.samples.push(at.elapsed());
        sdk_warm.samples.push(sdk.turn("warm").await?);
    }
    for i in 0..samples {
        let new = daemon.create_thread().await;
        let at = Instant::now();
        daemon.reply(&new, &format!("cold {i}")).await;
        cold.samples.push(at.elapsed());
        fresh.samples.push(sdk.turn("fresh").await?);
    }
    let version = sdk.version.clone();
    sdk.stop().await;
    daemon.stop().await;
    let mut out = String::new();
    writeln!(
        out,
        "## Harness and the Python SDK, same tools, turn by turn\n"
    )?;
    writeln!(out, "| turn | median | p95 |\n|---|---|---|")?;
    for s in [&warm, &sdk_warm, &cold, &fresh] {
        writeln!(
            out,
            "| {} | {:.1} ms | {:.1} ms |",
            s.name,
            super::ms(s.median()),
            super::ms(s.p95())
        )?;
    }
    writeln!(
        out,
        "\nclaude-agent-sdk {version}, {} MCP tools on both sides, alternating. Warm: Harness {:.2}× the SDK's client. Cold: Harness {:.2}× the SDK's fresh query().\n",
        tools["tools"].as_array().map_or(0, Vec::len),
        super::ms(warm.median()) / super::ms(sdk_warm.median()).max(f64::EPSILON),
        super::ms(cold.median()) / super::ms(fresh.median()).max(f64::EPSILON),
    )?;
    Ok(out)
}
