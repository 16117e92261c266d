//! Twice as many threads as pool slots, used round-robin: the hit rate the pool reaches next to the
//! best any policy could (capacity ÷ threads), with the turns' latency and the slot waits.

use std::fmt::Write as _;
use std::time::Instant;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use crate::{ms, Series};

pub struct Overload {
    capacity: u64,
    threads: usize,
    rounds: usize,
    hits: u64,
    misses: u64,
    latency: Series,
    slot_waits: u64,
    slot_waits_expired: u64,
    live_peak: u64,
}

/// `threads` threads (twice `capacity`), one turn each in a fixed order, `rounds` times over, one
/// turn at a time. The first round only meets each thread, so hits and latency are counted from
/// the second on.
pub async fn run(mock: &MockApi, capacity: u64, rounds: usize) -> anyhow::Result<Overload> {
    let threads = usize::try_from(capacity)? * 2;
    let daemon = TestDaemon::start(mock, |c| c.pool.max_capacity = capacity).await;
    let mut ids = Vec::with_capacity(threads);
    for _ in 0..threads {
        ids.push(daemon.create_thread().await);
    }
    let mut latency = Series::new(format!(
        "{threads} threads round-robin, capacity {capacity}"
    ));
    let mut before = daemon.counts();
    for round in 0..rounds {
        if round == 1 {
            before = daemon.counts();
        }
        for (t, id) in ids.iter().enumerate() {
            let started = Instant::now();
            let text = format!("round {round} thread {t}");
            let reply = daemon.reply(id, &text).await;
            anyhow::ensure!(reply == format!("echo: {text}"), "wrong reply: {reply}");
            if round > 0 {
                latency.samples.push(started.elapsed());
            }
        }
    }
    let after = daemon.counts();
    daemon.stop().await;
    Ok(Overload {
        capacity,
        threads,
        rounds,
        hits: after.hits - before.hits,
        misses: after.misses - before.misses,
        latency,
        slot_waits: after.slot_waits,
        slot_waits_expired: after.slot_waits_expired,
        live_peak: after.live_peak,
    })
}

pub fn render(out: &mut String, o: &Overload, warm: &Series) -> std::fmt::Result {
    writeln!(out, "## More threads than pool slots\n")?;
    let turns = o.hits + o.misses;
    let rate = 100.0 * o.hits as f64 / turns.max(1) as f64;
    let best = 100.0 * o.capacity as f64 / o.threads as f64;
    writeln!(
        out,
        "{} threads take turns in a fixed order, one turn at a time, on a pool of {} (no spares), \
         {} rounds; the first round meets each thread once, so figures count the {} turns after it. \
         Plain LRU misses every one of them: it pushes out each process just before its thread comes \
         round again.\n",
        o.threads,
        o.capacity,
        o.rounds,
        turns,
    )?;
    writeln!(
        out,
        "- hit rate **{rate:.0}%**; the best any policy could reach is capacity / threads = \
         {best:.0}% (goal: within 10 points), here {:.0} points from it",
        best - rate,
    )?;
    writeln!(
        out,
        "- latency: median {:.1} ms, p95 {:.1} ms ({:.1}x / {:.1}x a warm turn)",
        ms(o.latency.median()),
        ms(o.latency.p95()),
        ms(o.latency.median()) / ms(warm.median()),
        ms(o.latency.p95()) / ms(warm.median()),
    )?;
    writeln!(
        out,
        "- spawns that waited for a slot: {}, of which {} waited the full `pool.slot_wait`; most \
         processes alive at once: {} (capacity {})\n",
        o.slot_waits, o.slot_waits_expired, o.live_peak, o.capacity,
    )
}
