//! What the CLI itself spends on a process's first turn, with our own minimal driver (no daemon):
//! a fresh process left idle after its `initialize`, the same warmed with `get_context_usage`
//! while idle (what the pool does to spares and prewarmed processes), and a spare started with
//! `--await-claim` and claimed into a folder just before its turn (the CLI's own spares, which
//! the pool does not use), and one that ran a warm-up turn before it went idle (what a gateway
//! answering that turn locally could give a spare, #31: the mock answers here, no slower than a
//! local answer). Each figure is from the message (or the claim) to the `result`, next to the
//! same process's second turn. Runs interleave the variants.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use claude_cli::{protocol, SpawnOptions};
use harness_tests::cli::claude_bin;
use harness_tests::mock::MockApi;

use crate::{ms, raw_cli, Series};

/// How long each process sits idle before its first turn, as a parked spare would.
const IDLE: Duration = Duration::from_millis(1000);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    Idle,
    Warmed,
    Claimed,
    WarmedUp,
}

impl Variant {
    const ALL: [Variant; 4] = [
        Variant::Idle,
        Variant::Warmed,
        Variant::Claimed,
        Variant::WarmedUp,
    ];

    fn name(self) -> &'static str {
        match self {
            Variant::Idle => "fresh process, idle",
            Variant::Warmed => "fresh process, get_context_usage while idle",
            Variant::Claimed => "--await-claim spare, claim + turn",
            Variant::WarmedUp => "fresh process, one warm-up turn before idle",
        }
    }
}

pub struct FirstTurns {
    rows: Vec<(Variant, Series, Series)>,
}

struct Raw {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    requests: u32,
}

impl Raw {
    async fn spawn(mock: &MockApi, dir: &Path, await_claim: bool) -> anyhow::Result<Raw> {
        let bin = tokio::task::spawn_blocking(claude_bin).await??;
        let options = SpawnOptions {
            builtin_tools: Some(String::new()),
            ..Default::default()
        };
        let workdir = dir.join("work");
        std::fs::create_dir_all(&workdir)?;
        let mut child = raw_cli(&bin, mock, &options, &dir.join("config"), &workdir)
            .args(await_claim.then_some("--await-claim"))
            .spawn()?;
        let mut raw = Raw {
            stdin: child.stdin.take().context("stdin")?,
            lines: BufReader::new(child.stdout.take().context("stdout")?).lines(),
            child,
            requests: 0,
        };
        raw.request(protocol::initialize_request(
            &[],
            protocol::Hooks::default(),
            None,
            None,
        ))
        .await?;
        Ok(raw)
    }

    async fn next(&mut self) -> anyhow::Result<Value> {
        let line = tokio::time::timeout(Duration::from_secs(60), self.lines.next_line())
            .await??
            .context("the CLI exited")?;
        Ok(serde_json::from_str(&line).unwrap_or(Value::Null))
    }

    async fn request(&mut self, request: Value) -> anyhow::Result<()> {
        self.requests += 1;
        let id = format!("req_{}", self.requests);
        let line = protocol::control_request(&id, &request);
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        loop {
            let v = self.next().await?;
            if v["type"] == "control_response" && v["response"]["request_id"] == id.as_str() {
                anyhow::ensure!(v["response"]["subtype"] == "success", "refused: {v}");
                return Ok(());
            }
        }
    }

    async fn turn(&mut self, text: &str) -> anyhow::Result<()> {
        let line = protocol::user_turn(&text.into(), &uuid::Uuid::new_v4().to_string());
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        while self.next().await?["type"] != "result" {}
        Ok(())
    }
}

/// One process of `variant`: (first turn, second turn).
async fn measure(
    mock: &MockApi,
    dir: &Path,
    variant: Variant,
) -> anyhow::Result<(Duration, Duration)> {
    let mut raw = Raw::spawn(mock, dir, variant == Variant::Claimed).await?;
    if variant == Variant::Warmed {
        raw.request(json!({"subtype": "get_context_usage"})).await?;
    }
    if variant == Variant::WarmedUp {
        raw.turn("warm-up").await?;
    }
    tokio::time::sleep(IDLE).await;
    let started = Instant::now();
    if variant == Variant::Claimed {
        let cwd = dir.join("claimed");
        std::fs::create_dir_all(&cwd)?;
        raw.request(json!({"subtype": "claim_session", "cwd": cwd, "sdk_mcp_servers": []}))
            .await?;
    }
    raw.turn("first").await?;
    let first = started.elapsed();
    let started = Instant::now();
    raw.turn("second").await?;
    let second = started.elapsed();
    drop(raw.stdin);
    let _ = raw.child.kill().await;
    Ok((first, second))
}

pub async fn run(mock: &MockApi, dir: &Path, samples: usize) -> anyhow::Result<FirstTurns> {
    let mut rows: Vec<(Variant, Series, Series)> = Variant::ALL
        .iter()
        .map(|v| {
            (
                *v,
                Series::new(format!("first turn: {}", v.name())),
                Series::new(format!("second turn: {}", v.name())),
            )
        })
        .collect();
    for i in 0..samples {
        for (variant, first, second) in &mut rows {
            let dir = dir.join(format!("first-turn-{i}-{}", *variant as u8));
            let (a, b) = measure(mock, &dir, *variant).await?;
            first.samples.push(a);
            second.samples.push(b);
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    Ok(FirstTurns { rows })
}

/// `warm`: the daemon's warm turn, for the floor's ratio (`None` when only this section ran).
pub fn render(out: &mut String, f: &FirstTurns, warm: Option<&Series>) -> std::fmt::Result {
    writeln!(out, "## A process's first turn, inside the CLI\n")?;
    writeln!(
        out,
        "Our own minimal driver on a raw CLI process (no daemon, no MCP server), idle {} ms \
         after its `initialize`; each row from the message (or the claim) to the `result`, and \
         the same process's second turn.\n",
        IDLE.as_millis()
    )?;
    writeln!(
        out,
        "| process | n | first turn median | p95 | second turn median | first / second |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|")?;
    for (variant, first, second) in &f.rows {
        writeln!(
            out,
            "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2}x |",
            variant.name(),
            first.samples.len(),
            ms(first.median()),
            ms(first.p95()),
            ms(second.median()),
            ms(first.median()) / ms(second.median()).max(0.001),
        )?;
    }
    let floor = f
        .rows
        .iter()
        .filter(|(variant, _, _)| *variant != Variant::WarmedUp)
        .map(|(_, first, _)| ms(first.median()))
        .fold(f64::MAX, f64::min);
    let Some(warm) = warm else {
        return writeln!(out);
    };
    writeln!(
        out,
        "\n- the fastest first turn the CLI gives here is **{:.1}x** a daemon warm turn: the floor \
         under any first turn, spare or prewarm (goal for a new thread: <= 1.5x)\n",
        floor / ms(warm.median()).max(0.001)
    )
}
