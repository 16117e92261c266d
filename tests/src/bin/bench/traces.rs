//! What a trace per turn costs (issue #29): warm turns on a daemon with `otel.endpoint` set (its
//! spans sent to a sink in this process that answers 200 and counts what it got) next to one
//! without, alternating, so both see the same machine.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use crate::{ms, Series};

pub struct Outcome {
    off: Series,
    on: Series,
    exports: u64,
    bytes: u64,
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let (exports, bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (count, size) = (exports.clone(), bytes.clone());
    let sink = axum::Router::new().fallback(move |body: axum::body::Bytes| {
        let (count, size) = (count.clone(), size.clone());
        async move {
            count.fetch_add(1, Ordering::Relaxed);
            size.fetch_add(body.len() as u64, Ordering::Relaxed);
            ""
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let endpoint = format!("http://{}/v1/traces", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, sink).await });
    let off = TestDaemon::start(mock, |_| {}).await;
    let on = TestDaemon::start(mock, move |c| c.otel.endpoint = Some(endpoint)).await;
    let threads = [off.create_thread().await, on.create_thread().await];
    off.reply(&threads[0], "warm-up").await;
    on.reply(&threads[1], "warm-up").await;
    let mut series = [
        Series::new("warm turn, traces off"),
        Series::new("warm turn, traces on"),
    ];
    for round in 0..samples * 5 {
        for (i, daemon) in [&off, &on].into_iter().enumerate() {
            let at = Instant::now();
            daemon.reply(&threads[i], &format!("turn {round}")).await;
            series[i].samples.push(at.elapsed());
        }
    }
    on.stop().await;
    off.stop().await;
    let [off, on] = series;
    Ok(Outcome {
        off,
        on,
        exports: exports.load(Ordering::Relaxed),
        bytes: bytes.load(Ordering::Relaxed),
    })
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    writeln!(out, "## What a trace per turn costs\n")?;
    writeln!(out, "| turn | median | p95 |\n|---|---|---|")?;
    for series in [&outcome.off, &outcome.on] {
        writeln!(
            out,
            "| {} | {:.1} ms | {:.1} ms |",
            series.name,
            ms(series.median()),
            ms(series.p95()),
        )?;
    }
    let turns = outcome.on.samples.len().max(1) as f64;
    writeln!(
        out,
        "\nWith traces: {:.2}× the median without. The sink got {} exports, {:.0} bytes of spans per turn.\n",
        ms(outcome.on.median()) / ms(outcome.off.median()).max(f64::EPSILON),
        outcome.exports,
        outcome.bytes as f64 / (turns + 1.0),
    )?;
    Ok(())
}
