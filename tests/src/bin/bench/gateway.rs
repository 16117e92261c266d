//! What the model gateway costs (issue #31): warm turns on a daemon whose children talk to the
//! mock through the gateway next to one whose children talk to it directly, alternating, so both
//! see the same machine; then the time to a response's first byte, one streamed request straight
//! to the mock against one through the gateway (with a live process's token), alternating.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use serde_json::json;

use crate::{ms, Series};

pub struct Outcome {
    turns: [Series; 2],
    first_byte: [Series; 2],
}

/// The token and the gateway's address the thread's process got.
fn child_credentials(pid: u32) -> anyhow::Result<(String, String)> {
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    let get = |name: &str| {
        environ
            .split(|b| *b == 0)
            .filter_map(|entry| std::str::from_utf8(entry).ok())
            .find_map(|entry| entry.strip_prefix(name)?.strip_prefix('='))
            .map(str::to_owned)
            .with_context(|| format!("{name} in the child's environment"))
    };
    Ok((get("ANTHROPIC_BASE_URL")?, get("ANTHROPIC_API_KEY")?))
}

/// From sending a streamed message request to its response's first body byte.
async fn first_byte(client: &reqwest::Client, url: &str, key: &str) -> anyhow::Result<Duration> {
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 16, "stream": true,
        "messages": [{"role": "user", "content": "first byte"}],
    });
    let at = Instant::now();
    let response = client
        .post(format!("{url}/v1/messages"))
        .header("x-api-key", key)
        .header("anthropic-version", "2023-06-01")
        .json(&body)
        .send()
        .await?
        .error_for_status()?;
    let mut chunks = response.bytes_stream();
    chunks.next().await.context("a first chunk")??;
    let took = at.elapsed();
    while chunks.next().await.is_some() {}
    Ok(took)
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let direct = TestDaemon::start(mock, |c| c.gateway.enabled = false).await;
    let through = TestDaemon::start(mock, |_| {}).await;
    let daemons = [&direct, &through];
    let threads = [direct.create_thread().await, through.create_thread().await];
    for (daemon, thread) in daemons.iter().zip(&threads) {
        daemon.reply(thread, "warm-up").await;
    }
    let mut turns = [
        Series::new("warm turn, children straight to the API"),
        Series::new("warm turn, children through the gateway"),
    ];
    for round in 0..samples * 5 {
        for (i, daemon) in daemons.iter().enumerate() {
            let at = Instant::now();
            daemon.reply(&threads[i], &format!("turn {round}")).await;
            turns[i].samples.push(at.elapsed());
        }
    }
    let pid = through
        .pid_of(&threads[1])
        .context("the thread's process")?;
    let (gateway, token) = child_credentials(pid)?;
    let client = reqwest::Client::new();
    let mut first = [
        Series::new("first byte, straight to the API"),
        Series::new("first byte, through the gateway"),
    ];
    let routes = [(mock.url(), "sk-test".to_owned()), (gateway, token)];
    for _ in 0..samples * 10 {
        for (i, (url, key)) in routes.iter().enumerate() {
            first[i].samples.push(first_byte(&client, url, key).await?);
        }
    }
    through.stop().await;
    direct.stop().await;
    Ok(Outcome {
        turns,
        first_byte: first,
    })
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    writeln!(out, "## What the model gateway costs\n")?;
    writeln!(out, "| | median | p95 |\n|---|---|---|")?;
    for series in outcome.turns.iter().chain(&outcome.first_byte) {
        writeln!(
            out,
            "| {} | {:.2} ms | {:.2} ms |",
            series.name,
            ms(series.median()),
            ms(series.p95()),
        )?;
    }
    let [direct, through] = &outcome.turns;
    let [straight, gateway] = &outcome.first_byte;
    writeln!(
        out,
        "\nA warm turn through the gateway: {:.3}× one straight to the API (goal ≤ 1.05×). Time to the first byte: {:.2} ms added at the median.\n",
        ms(through.median()) / ms(direct.median()).max(f64::EPSILON),
        ms(gateway.median()) - ms(straight.median()),
    )?;
    Ok(())
}
