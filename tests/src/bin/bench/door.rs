//! The door (issue #24): `/healthz` and a warm turn while 2,000 event streams are asked for (the
//! daemon holds `http.max_streams` of them and refuses the rest) and 1,100 half-sent request
//! heads are held, next to the same with nothing held. Fresh connections each time, as a new
//! client would come.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::json;
use tokio::io::AsyncWriteExt;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use crate::{ms, Series};

const STREAMS: usize = 2_000;
const HEADS: usize = 1_100;

pub struct Outcome {
    healthz_idle: Series,
    healthz_held: Series,
    turn_idle: Series,
    turn_held: Series,
    streams_held: usize,
}

/// `/healthz` and a warm turn on `thread`, each on a new connection.
async fn probe(daemon: &TestDaemon, thread: &str) -> anyhow::Result<(Duration, Duration)> {
    let fresh = || {
        reqwest::Client::builder()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(30))
            .build()
    };
    let t = Instant::now();
    let health = fresh()?
        .get(format!("{}/healthz", daemon.base))
        .send()
        .await?;
    let healthz = t.elapsed();
    ensure!(
        health.status() == 200,
        "/healthz answered {}",
        health.status()
    );
    let t = Instant::now();
    let reply = fresh()?
        .post(format!("{}/api/threads/{thread}/messages", daemon.base))
        .json(&json!({"content": "still there?"}))
        .send()
        .await?;
    let turn = t.elapsed();
    ensure!(
        reply.status() == 200,
        "the turn answered {}",
        reply.status()
    );
    Ok((healthz, turn))
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let daemon = TestDaemon::start(mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm up").await;
    let mut out = Outcome {
        healthz_idle: Series::new("/healthz, nothing held"),
        healthz_held: Series::new(format!(
            "/healthz, {STREAMS} streams asked, {HEADS} heads held"
        )),
        turn_idle: Series::new("warm turn, nothing held"),
        turn_held: Series::new(format!(
            "warm turn, {STREAMS} streams asked, {HEADS} heads held"
        )),
        streams_held: 0,
    };
    for _ in 0..samples {
        let (healthz, turn) = probe(&daemon, &thread).await?;
        out.healthz_idle.samples.push(healthz);
        out.turn_idle.samples.push(turn);
    }
    let http = reqwest::Client::new();
    let url = format!("{}/api/threads/{thread}/events", daemon.base);
    let mut held = Vec::new();
    for _ in 0..STREAMS {
        let response = http.get(&url).send().await.context("a stream")?;
        if response.status() == 200 {
            held.push(response);
        }
    }
    out.streams_held = held.len();
    let addr = daemon.base.trim_start_matches("http://").to_owned();
    let mut heads = Vec::new();
    for _ in 0..HEADS {
        let mut socket = tokio::net::TcpStream::connect(&addr).await?;
        socket
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            .await?;
        heads.push(socket);
    }
    for _ in 0..samples {
        let (healthz, turn) = probe(&daemon, &thread).await?;
        out.healthz_held.samples.push(healthz);
        out.turn_held.samples.push(turn);
    }
    drop((held, heads));
    daemon.stop().await;
    Ok(out)
}

pub fn render(out: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(out, "## The door: answers while connections are held\n")?;
    writeln!(
        out,
        "{STREAMS} event streams asked for ({} held, the rest refused with 503 past \
         `http.max_streams`) and {HEADS} half-sent request heads held; `/healthz` and a warm turn \
         on fresh connections, next to the same with nothing held (goal: within 1 s).\n",
        o.streams_held
    )?;
    writeln!(
        out,
        "| scenario | n | min | median | p95 | max | median / nothing held |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for (series, against) in [
        (&o.healthz_idle, &o.healthz_idle),
        (&o.healthz_held, &o.healthz_idle),
        (&o.turn_idle, &o.turn_idle),
        (&o.turn_held, &o.turn_idle),
    ] {
        crate::report::row(out, series, Some(against))?;
    }
    writeln!(
        out,
        "\n- held: `/healthz` {:.1} ms, a warm turn {:.1} ms (medians)\n",
        ms(o.healthz_held.median()),
        ms(o.turn_held.median())
    )
}
