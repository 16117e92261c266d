//! Clustering (issue #14): two nodes in this process on one real PostgreSQL database (`pg-test`).
//! A warm turn sent to the thread's owner next to one sent through the other node, which forwards
//! it over HTTP to the owner's warm process; and failover: the first reply through the surviving
//! node after the owner died without releasing its lease (the forward fails, the node waits for
//! the lease to expire, takes the thread over and resumes the session from the stored transcript).

use std::fmt::Write as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{ensure, Context};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use plugin_contract::ThreadId;

use crate::{ms, Series};

/// Lease TTL of the forwarding pair: long enough that no lease expires during the run.
const STEADY_TTL: Duration = Duration::from_secs(15);

/// Lease TTL of the failover pairs: each failover waits for up to this long.
const FAILOVER_TTL: Duration = Duration::from_secs(2);

pub enum Outcome {
    Skipped(String),
    Measured(Cluster),
}

pub struct Cluster {
    local: Series,
    forwarded: Series,
    failover: Series,
    /// Per failover: lease time left when the request reached the surviving node, in ms.
    lease_left_ms: Vec<f64>,
}

/// `samples` warm turns each way, then `failovers` failovers, each on a fresh pair of nodes.
/// Skipped, with the reason, when PostgreSQL cannot start.
pub async fn run(mock: &MockApi, samples: usize, failovers: usize) -> anyhow::Result<Outcome> {
    // The first start runs initdb (and apt-get when the server is missing): off the async workers.
    tokio::task::spawn_blocking(pg_test::available).await?;
    let url = match pg_test::database_url().await {
        Ok(url) => url,
        Err(err) => {
            eprintln!("bench: clustering section skipped: {err:#}");
            return Ok(Outcome::Skipped(format!("{err:#}")));
        }
    };

    let a = TestDaemon::start_node(mock, &url, STEADY_TTL, |_| {}).await;
    let b = TestDaemon::start_node(mock, &url, STEADY_TTL, |_| {}).await;
    let thread = a.create_thread().await;
    a.reply(&thread, "cluster warm-up").await;
    let mut local = Series::new("warm turn on the owner (A)");
    let mut forwarded = Series::new("warm turn through B, forwarded to A");
    for i in 0..samples {
        // A then B, B then A: whatever drifts during the run hits both alike.
        let order = if i % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for through_b in order {
            let (node, series, text) = if through_b {
                (&b, &mut forwarded, format!("forwarded {i}"))
            } else {
                (&a, &mut local, format!("local {i}"))
            };
            let t = Instant::now();
            let reply = node.reply(&thread, &text).await;
            series.samples.push(t.elapsed());
            ensure!(reply == format!("echo: {text}"), "wrong reply: {reply}");
        }
    }
    ensure!(
        b.spawns() == 0 && a.spawns() == 1,
        "the owner's warm process did not serve every turn: A spawned {}, B {}",
        a.spawns(),
        b.spawns()
    );
    a.stop().await;
    b.stop().await;

    let mut failover = Series::new(format!(
        "first reply through B after A died (TTL {} s)",
        FAILOVER_TTL.as_secs()
    ));
    let mut lease_left_ms = Vec::with_capacity(failovers);
    for i in 0..failovers {
        let a = TestDaemon::start_node(mock, &url, FAILOVER_TTL, |_| {}).await;
        let b = TestDaemon::start_node(mock, &url, FAILOVER_TTL, |_| {}).await;
        let thread = a.create_thread().await;
        let secret = format!("failover {i}: the word is tangerine");
        a.reply(&thread, &secret).await;
        // Dies like `kill -9`: the lease stays until it expires.
        a.abort().await;
        let lease = b
            .daemon()
            .store
            .lease(&ThreadId::from_string(&thread))
            .await?
            .context("a lease row")?;
        let now_ms = SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis() as i64;
        let t = Instant::now();
        let reply = b.reply(&thread, "what was the word?").await;
        failover.samples.push(t.elapsed());
        lease_left_ms.push((lease.expires_at.timestamp_millis() - now_ms).max(0) as f64);
        ensure!(reply == "echo: what was the word?", "wrong reply: {reply}");
        ensure!(b.spawns() == 1, "B did not take the thread over");
        let last = mock
            .message_requests()
            .last()
            .context("no request reached the mock")?
            .all_text();
        ensure!(
            last.contains(&secret),
            "the resumed session lacks the history"
        );
        b.stop().await;
    }
    Ok(Outcome::Measured(Cluster {
        local,
        forwarded,
        failover,
        lease_left_ms,
    }))
}

/// `cold`: the single-node cold turn of the same run, when measured, to compare the takeover with.
pub fn render(out: &mut String, outcome: &Outcome, cold: Option<&Series>) -> std::fmt::Result {
    writeln!(out, "## Clustering: two nodes on one PostgreSQL\n")?;
    let c = match outcome {
        Outcome::Skipped(why) => return writeln!(out, "Not measured: {why}.\n"),
        Outcome::Measured(c) => c,
    };
    writeln!(
        out,
        "Two daemons in this process on one database of a real PostgreSQL on loopback (`pg-test`). \
         A thread is created on A and warmed with one untimed turn; then warm turns go to A (its \
         owner) and through B, which forwards each over HTTP to A's warm process, alternating A, B \
         and B, A so that drift hits both alike.\n"
    )?;
    writeln!(
        out,
        "| scenario | n | min | median | p95 | max | median / local |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    crate::report::row(out, &c.local, Some(&c.local))?;
    crate::report::row(out, &c.forwarded, Some(&c.local))?;
    crate::report::row(out, &c.failover, Some(&c.local))?;
    writeln!(out)?;
    writeln!(
        out,
        "- forwarded / local: median **{:.2}x**, p95 {:.2}x; forwarded - local: **{:+.1} ms** at \
         the median ({:.1} ms vs {:.1} ms), {:+.1} ms at p95 (the forward's added latency); B \
         started no process",
        ms(c.forwarded.median()) / ms(c.local.median()),
        ms(c.forwarded.p95()) / ms(c.local.p95()),
        ms(c.forwarded.median()) - ms(c.local.median()),
        ms(c.forwarded.median()),
        ms(c.local.median()),
        ms(c.forwarded.p95()) - ms(c.local.p95()),
    )?;
    if c.failover.samples.is_empty() {
        return writeln!(out);
    }
    let mut left = c.lease_left_ms.clone();
    left.sort_by(f64::total_cmp);
    let left_median = left.get(left.len() / 2).copied().unwrap_or_default();
    let after: Vec<f64> = c
        .failover
        .samples
        .iter()
        .zip(&c.lease_left_ms)
        .map(|(total, left)| ms(*total) - left)
        .collect();
    let mut after_sorted = after.clone();
    after_sorted.sort_by(f64::total_cmp);
    let after_median = after_sorted[after_sorted.len() / 2];
    let cold = cold.map_or(String::new(), |cold| {
        format!(
            " (a cold turn on one node: {:.0} ms median)",
            ms(cold.median())
        )
    });
    writeln!(
        out,
        "- failover, on a fresh pair each time with a lease TTL of {ttl} ms: A has served one turn \
         and dies like `kill -9` (lease not released); the first reply through B took median \
         **{:.0} ms** (min {:.0}, max {:.0}, n = {}), i.e. {:.2}x the TTL. B's forward fails, it \
         polls every TTL / 10 until the lease expires, takes the thread over and resumes the \
         session from the stored transcript. The lease had {left_median:.0} ms left when the \
         request reached B (median), so the takeover, spawn and resumed turn took {after_median:.0} \
         ms after expiry{cold}\n",
        ms(c.failover.median()),
        ms(c.failover.min()),
        ms(c.failover.max()),
        c.failover.samples.len(),
        ms(c.failover.median()) / ms(FAILOVER_TTL),
        ttl = ms(FAILOVER_TTL),
    )
}
