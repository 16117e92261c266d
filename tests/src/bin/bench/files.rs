//! What images cost the daemon (issue #26), not the model: a warm turn carrying a 5 MB image,
//! sent as base64 in the message and as a reference to a file uploaded before, next to a text
//! turn, alternating on one warm thread; then 100 uploads of 5 MB, each different, with the
//! daemon's RSS read after each.
//!
//! The mock Messages API runs in a child process (this binary again, `BENCH_ROLE=mock`), so this
//! process is the daemon and the HTTP client only: its CPU time and RSS are the daemon's (the
//! client sends bytes serialized before the clock starts). The CLI is a child too, not counted.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};

use harness_tests::media::{b64, padded_png};
use harness_tests::mock::MockApi;

use crate::{cpu_ms, ms, Series};

const IMAGE_BYTES: usize = 5 * 1024 * 1024;
const UPLOADS: usize = 100;

/// One kind of turn: its latency and what it cost this process.
pub struct Kind {
    pub series: Series,
    pub cpu_ms: Vec<f64>,
}

pub struct Outcome {
    kinds: Vec<Kind>,
    rss_before_mb: f64,
    rss_after_turns_mb: f64,
    upload_rss_mb: Vec<f64>,
    upload_ms: Series,
}

/// `BENCH_ROLE=mock`: serves the mock until stdin closes, after printing its URL.
pub async fn serve_mock() -> anyhow::Result<()> {
    let mock = MockApi::start().await;
    println!("{}", mock.url());
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while lines.next_line().await?.is_some() {}
    Ok(())
}

pub async fn run(samples: usize) -> anyhow::Result<Outcome> {
    let mut mock = tokio::process::Command::new(std::env::current_exe()?)
        .env("BENCH_ROLE", "mock")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut out = BufReader::new(mock.stdout.take().context("the mock's stdout")?).lines();
    let url = out.next_line().await?.context("the mock's URL")?;

    let dir = tempfile::tempdir()?;
    let claude = tokio::task::spawn_blocking(harness_tests::cli::claude_bin).await??;
    let config = harness_tests::daemon::test_config_at(&url, dir.path(), claude);
    let plugins = harness::plugins(&config).map_err(|e| anyhow::anyhow!("{e}"))?;
    let running = orchestrator::server::start(config, plugins).await?;
    let base = format!("http://{}", running.addr);
    let http = reqwest::Client::new();

    let thread: Value = http
        .post(format!("{base}/api/threads"))
        .json(&json!({}))
        .send()
        .await?
        .json()
        .await?;
    let messages = format!(
        "{base}/api/threads/{}/messages",
        thread["id"].as_str().context("a thread id")?
    );
    let image = padded_png(IMAGE_BYTES, 7);
    let uploaded: Value = http
        .post(format!("{base}/api/files"))
        .header("content-type", "image/png")
        .body(image.clone())
        .send()
        .await?
        .json()
        .await?;
    let file_id = uploaded["id"].as_str().context("a file id")?.to_owned();
    // Serialized once: the clock times the daemon, not this client's JSON encoder.
    let bodies = [
        ("text turn", json!({"content": "describe it"})),
        (
            "5 MB image, base64 in the message",
            json!({"content": [
                {"type": "text", "text": "describe it"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(&image)}},
            ]}),
        ),
        (
            "5 MB image, an uploaded file's id",
            json!({"content": [
                {"type": "text", "text": "describe it"},
                {"type": "image", "source": {"type": "file", "fileId": file_id}},
            ]}),
        ),
    ]
    .map(|(name, body)| (name, axum::body::Bytes::from(body.to_string())));
    drop(image);
    let mut kinds: Vec<Kind> = bodies
        .iter()
        .map(|(name, _)| Kind {
            series: Series::new(*name),
            cpu_ms: Vec::new(),
        })
        .collect();
    let rss_before_mb = crate::schemas::rss_mib();
    // The first round warms the process and the caches up.
    for round in 0..samples + 1 {
        for (kind, (_, body)) in kinds.iter_mut().zip(&bodies) {
            let cpu = cpu_ms("self");
            let started = Instant::now();
            let answer = http
                .post(&messages)
                .header("content-type", "application/json")
                .body(body.clone())
                .send()
                .await?;
            anyhow::ensure!(answer.status().is_success(), "{}", answer.status());
            answer.bytes().await?;
            if round > 0 {
                kind.series.samples.push(started.elapsed());
                kind.cpu_ms.push(cpu_ms("self") - cpu);
            }
        }
    }
    let rss_after_turns_mb = crate::schemas::rss_mib();

    let mut upload_rss_mb = Vec::with_capacity(UPLOADS);
    let mut upload_ms = Series::new("upload of 5 MB");
    for i in 0..UPLOADS {
        // Each different, so each is stored.
        let body = padded_png(IMAGE_BYTES, (i % 251) as u8 ^ 0x5a);
        let started = Instant::now();
        let answer = http
            .post(format!("{base}/api/files"))
            .header("content-type", "image/png")
            .body(body)
            .send()
            .await?;
        anyhow::ensure!(answer.status().is_success(), "{}", answer.status());
        answer.bytes().await?;
        upload_ms.samples.push(started.elapsed());
        upload_rss_mb.push(crate::schemas::rss_mib());
    }
    running.stop().await;
    drop(mock);
    Ok(Outcome {
        kinds,
        rss_before_mb,
        rss_after_turns_mb,
        upload_rss_mb,
        upload_ms,
    })
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    writeln!(out, "## Images\n")?;
    let samples = outcome.kinds.first().map_or(0, |k| k.series.samples.len());
    writeln!(
        out,
        "{samples} warm turns of each kind on one thread, alternating; CPU is this process's \
         (the daemon and a client sending pre-serialized bodies; the mock runs in another \
         process), per turn. The ratio is against the text turn's median.\n"
    )?;
    writeln!(
        out,
        "| turn | median | p95 | CPU per turn (mean) | ratio (time) |\n|---|---|---|---|---|"
    )?;
    let base = outcome.kinds.first().map_or(0.0, |k| ms(k.series.median()));
    for kind in &outcome.kinds {
        // `/proc` counts CPU in 10 ms ticks: the mean over every turn, not a median of ticks.
        let cpu = kind.cpu_ms.iter().sum::<f64>() / kind.cpu_ms.len().max(1) as f64;
        writeln!(
            out,
            "| {} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2}× |",
            kind.series.name,
            ms(kind.series.median()),
            ms(kind.series.p95()),
            cpu,
            ms(kind.series.median()) / base.max(f64::EPSILON)
        )?;
    }
    let peak = outcome
        .upload_rss_mb
        .iter()
        .copied()
        .fold(0.0_f64, f64::max);
    let last = outcome.upload_rss_mb.last().copied().unwrap_or_default();
    writeln!(
        out,
        "\nRSS: {:.0} MiB before the turns, {:.0} MiB after them. {} uploads of 5 MB ({} MB in \
         all, each stored): upload median {:.1} ms, p95 {:.1} ms; RSS peak {:.0} MiB, {:.0} MiB \
         after the last (growth {:.0} MiB for {} MB uploaded).\n",
        outcome.rss_before_mb,
        outcome.rss_after_turns_mb,
        outcome.upload_rss_mb.len(),
        outcome.upload_rss_mb.len() * 5,
        ms(outcome.upload_ms.median()),
        ms(outcome.upload_ms.p95()),
        peak,
        last,
        peak - outcome.rss_after_turns_mb,
        outcome.upload_rss_mb.len() * 5,
    )
}
