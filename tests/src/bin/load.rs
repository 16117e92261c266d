//! `cargo run --release -p harness-tests --bin load`: many threads at once through the HTTP API,
//! against the real `claude` CLI and the mock Messages API.
//!
//! Each thread sends its messages one after another (waiting for each reply), all threads at
//! once. Checked (a failure exits non-zero): every reply is right and stored in order with its
//! `replyTo`, the pool never holds more live processes than its capacity (sampled from
//! `/api/pool`), and no CLI process outlives the daemon. Printed, not asserted: turns/s, p50/p95
//! turn latency, and peak RSS of the CLI processes (`VmRSS` from `/proc/<pid>/status`).
//!
//! Env: `LOAD_THREADS` (default 20), `LOAD_MESSAGES` (per thread, default 5), `LOAD_CAPACITY`
//! (pool capacity, default 16).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use futures::future::join_all;
use serde_json::Value;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::process_exists;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the sampler saw while the load ran.
#[derive(Default, Debug)]
struct Samples {
    count: usize,
    peak_live: usize,
    peak_rss_sum_kib: u64,
    peak_rss_one_kib: u64,
    pids: BTreeSet<u32>,
}

/// `VmRSS` of a process in KiB, if it is still there.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Samples `/api/pool` and the processes' RSS every 20 ms until `stop`.
async fn sample(base: String, stop: Arc<AtomicBool>) -> Samples {
    let http = reqwest::Client::new();
    let mut samples = Samples::default();
    while !stop.load(Ordering::SeqCst) {
        let pool: Option<Value> = match http.get(format!("{base}/api/pool")).send().await {
            Ok(response) => response.json().await.ok(),
            Err(_) => None,
        };
        let pids: Vec<u32> = pool
            .as_ref()
            .and_then(|p| p["processes"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|p| p["pid"].as_u64().and_then(|pid| u32::try_from(pid).ok()))
            .collect();
        let rss: Vec<u64> = pids.iter().filter_map(|pid| rss_kib(*pid)).collect();
        samples.count += 1;
        samples.peak_live = samples.peak_live.max(pids.len());
        samples.peak_rss_sum_kib = samples.peak_rss_sum_kib.max(rss.iter().sum());
        samples.peak_rss_one_kib = samples
            .peak_rss_one_kib
            .max(rss.iter().copied().max().unwrap_or(0));
        samples.pids.extend(pids);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    samples
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((sorted.len() as f64) * p).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// Checks the stored thread: question, answer, question, answer … in `seq` order, each answer
/// linked to its question.
fn check_thread(index: usize, messages: &[Value], per_thread: usize) -> Result<(), String> {
    let mut messages: Vec<&Value> = messages.iter().collect();
    messages.sort_by_key(|m| m["seq"].as_i64());
    if messages.len() != per_thread * 2 {
        return Err(format!(
            "thread {index}: {} messages stored, expected {}",
            messages.len(),
            per_thread * 2
        ));
    }
    for (m, pair) in messages.chunks(2).enumerate() {
        let question = format!("thread {index} message {m}");
        let ok = pair[0]["role"] == "user"
            && pair[0]["content"] == question.as_str()
            && pair[0]["status"] == "done"
            && pair[1]["role"] == "assistant"
            && pair[1]["content"] == format!("echo: {question}").as_str()
            && pair[1]["replyTo"] == pair[0]["id"];
        if !ok {
            return Err(format!(
                "thread {index}, message {m}: {} / {}",
                pair[0], pair[1]
            ));
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let threads = env_or("LOAD_THREADS", 20);
    let per_thread = env_or("LOAD_MESSAGES", 5);
    let capacity = env_or("LOAD_CAPACITY", 16);
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| c.pool.max_capacity = capacity as u64).await;
    eprintln!(
        "load: {threads} threads x {per_thread} messages, pool capacity {capacity}, daemon at {}",
        daemon.base
    );
    let ids: Vec<String> = join_all((0..threads).map(|_| daemon.create_thread())).await;

    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample(daemon.base.clone(), stop.clone()));
    let started = Instant::now();
    let daemon_ref = &daemon;
    let runs = ids.iter().enumerate().map(|(t, thread)| async move {
        let mut latencies = Vec::new();
        let mut errors = Vec::new();
        for m in 0..per_thread {
            let text = format!("thread {t} message {m}");
            let sent = Instant::now();
            let (status, body) = daemon_ref.send(thread, &text).await;
            latencies.push(sent.elapsed());
            let expected = format!("echo: {text}");
            if status != 200 || body["message"]["content"] != expected.as_str() {
                errors.push(format!("{text}: {status} {body}"));
            }
        }
        (latencies, errors)
    });
    let results = join_all(runs).await;
    let wall = started.elapsed();
    stop.store(true, Ordering::SeqCst);
    let samples = sampler.await.context("the sampler task")?;

    let mut latencies: Vec<Duration> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for (l, e) in results {
        latencies.extend(l);
        errors.extend(e);
    }
    for (t, thread) in ids.iter().enumerate() {
        let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        if let Err(err) = check_thread(t, &messages, per_thread) {
            errors.push(err);
        }
    }
    if samples.peak_live > capacity {
        errors.push(format!(
            "{} live processes seen, capacity {capacity}",
            samples.peak_live
        ));
    }
    let (_, pool) = daemon.get("/api/pool").await;
    let stats: HashMap<String, Value> = pool["stats"]
        .as_object()
        .map(|o| o.clone().into_iter().collect())
        .unwrap_or_default();
    daemon.stop().await;
    let orphans: Vec<u32> = samples
        .pids
        .iter()
        .copied()
        .filter(|pid| process_exists(*pid))
        .collect();
    if !orphans.is_empty() {
        errors.push(format!("processes outlived the daemon: {orphans:?}"));
    }

    latencies.sort();
    let turns = latencies.len();
    println!("## Load: {threads} threads x {per_thread} messages, capacity {capacity}");
    println!();
    println!("| figure | value |");
    println!("|---|---|");
    println!("| turns | {turns} |");
    println!("| wall time | {:.2} s |", wall.as_secs_f64());
    println!(
        "| throughput | {:.1} turns/s |",
        turns as f64 / wall.as_secs_f64()
    );
    println!(
        "| turn latency p50 / p95 / max | {:.0} / {:.0} / {:.0} ms |",
        ms(percentile(&latencies, 0.50)),
        ms(percentile(&latencies, 0.95)),
        ms(latencies.last().copied().unwrap_or_default())
    );
    println!(
        "| live CLI processes, peak (capacity) | {} ({capacity}) |",
        samples.peak_live
    );
    println!(
        "| CLI RSS, peak sum | {:.0} MiB |",
        mib(samples.peak_rss_sum_kib)
    );
    println!(
        "| CLI RSS, peak single process | {:.0} MiB |",
        mib(samples.peak_rss_one_kib)
    );
    println!("| CLI processes started | {} |", samples.pids.len());
    println!("| pool samples | {} |", samples.count);
    println!(
        "| pool stats | spawns {}, hits {}, misses {}, evictions {} |",
        stats.get("spawns").unwrap_or(&Value::Null),
        stats.get("hits").unwrap_or(&Value::Null),
        stats.get("misses").unwrap_or(&Value::Null),
        stats.get("evictions").unwrap_or(&Value::Null)
    );
    println!("| orphans after stop | {} |", orphans.len());
    if !errors.is_empty() {
        for err in errors.iter().take(20) {
            eprintln!("load: {err}");
        }
        bail!("{} checks failed", errors.len());
    }
    Ok(())
}
