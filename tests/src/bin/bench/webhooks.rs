//! Webhook delivery latency (issue #27): warm turns on one thread with one endpoint, an
//! in-process receiver; for each turn, from the moment its outcome was written (the payload's
//! `timestamp`) to the moment the signed request arrived.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use axum::routing::post;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::config::WebhookEndpoint;
use orchestrator::webhooks::Signer;

use crate::{ms, Series};

pub struct Outcome {
    latency: Series,
}

/// `samples` warm turns; the latency of each turn's `turn.finished`.
pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let arrived: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let seen = arrived.clone();
    // A receiver of the bench's, not an API of the daemon's: nothing to document.
    #[allow(clippy::disallowed_methods)]
    let app = axum::Router::new().route(
        "/hooks",
        post(move |body: axum::body::Bytes| {
            let seen = seen.clone();
            async move {
                let now = chrono::Utc::now();
                let payload: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let ended = payload["timestamp"]
                    .as_str()
                    .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok());
                if let Some(ended) = ended {
                    let took = (now - ended.with_timezone(&chrono::Utc))
                        .to_std()
                        .unwrap_or_default();
                    seen.lock().expect("not poisoned").push(took);
                }
                axum::http::StatusCode::NO_CONTENT
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}/hooks", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    let secret = Signer::generate_secret();
    let daemon = TestDaemon::start(mock, |c| {
        c.webhooks.allow_private_targets = true;
        c.webhooks.endpoints = vec![WebhookEndpoint {
            url,
            secret: Some(secret),
            secrets: Vec::new(),
            events: Vec::new(),
        }];
    })
    .await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm-up").await;
    for i in 0..samples {
        daemon.reply(&thread, &format!("turn {i}")).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while arrived.lock().expect("not poisoned").len() < samples + 1 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "every webhook arrives within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    daemon.stop().await;
    let mut latency = Series::new("webhook delivery after the turn's end");
    latency.samples = arrived
        .lock()
        .expect("not poisoned")
        .iter()
        .skip(1)
        .copied()
        .collect();
    latency.samples.first().context("samples")?;
    Ok(Outcome { latency })
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    let mut sorted = outcome.latency.samples.clone();
    sorted.sort_unstable();
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    writeln!(out, "## Webhooks\n")?;
    writeln!(
        out,
        "{} warm turns, one endpoint on this machine: from a turn's outcome being written to \
         its signed `turn.finished` arriving.\n",
        sorted.len()
    )?;
    writeln!(out, "| | p50 | p99 |\n|---|---|---|")?;
    writeln!(
        out,
        "| {} | {:.1} ms | {:.1} ms |",
        outcome.latency.name,
        ms(at(0.5)),
        ms(at(0.99))
    )
}
