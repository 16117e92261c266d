//! What `outputSchema`s cost the daemon (issue #24): 1,000 threads created, each with a distinct
//! schema under 1 KB of nested `not`/`allOf`/`items` (depth 2 to 31, the keyword order turning),
//! and the daemon's resident memory before and after. The daemon runs in this process, idle
//! otherwise, so the growth of this process's `VmRSS` is the daemon's. On `jsonschema` 0.30 the
//! meta-schema check kept hundreds of MB per new depth (`harness/tests/bounds.rs` measured 1 GiB
//! for 20 such schemas).

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::ensure;
use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::nested_schema;

use crate::{ms, Series};

/// Schemas created.
const SCHEMAS: usize = 1_000;

pub struct Outcome {
    create: Series,
    largest_bytes: usize,
    grown_mib: f64,
}

/// This process's `VmRSS`, in MiB.
pub(crate) fn rss_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

pub async fn run(mock: &MockApi) -> anyhow::Result<Outcome> {
    let daemon = TestDaemon::start(mock, |_| {}).await;
    let (status, _) = daemon
        .post(
            "/api/threads",
            json!({"outputSchema": nested_schema(2, 0, "warm")}),
        )
        .await;
    ensure!(status == 201, "creating a thread failed");
    let before = rss_mib();
    let mut out = Outcome {
        create: Series::new("create a thread with a distinct schema"),
        largest_bytes: 0,
        grown_mib: 0.0,
    };
    for i in 0..SCHEMAS {
        let schema = nested_schema(2 + i % 30, i / 30, &format!("p{i}"));
        let bytes = schema.to_string().len();
        ensure!(bytes < 1024, "schema {i} is {bytes} bytes");
        out.largest_bytes = out.largest_bytes.max(bytes);
        let t = Instant::now();
        let (status, body) = daemon
            .post("/api/threads", json!({"outputSchema": schema}))
            .await;
        out.create.samples.push(t.elapsed());
        ensure!(status == 201, "creating a thread failed: {body}");
    }
    out.grown_mib = rss_mib() - before;
    daemon.stop().await;
    Ok(out)
}

pub fn render(out: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(out, "## Output schemas: what one costs\n")?;
    writeln!(
        out,
        "{SCHEMAS} threads created, each with a distinct `outputSchema` of nested \
         `not`/`allOf`/`items` (at most {} bytes, depth 2 to 31). The daemon's resident memory \
         grew by **{:.1} MiB** in all (goal: < 50 MiB); creating one took {:.2} ms (median), \
         {:.2} ms (p95).\n",
        o.largest_bytes,
        o.grown_mib,
        ms(o.create.median()),
        ms(o.create.p95()),
    )
}
