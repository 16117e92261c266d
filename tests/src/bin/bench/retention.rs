//! What a turn leaves in the database, before and after retention (issue #29), on SQLite and on
//! PostgreSQL: a warm thread runs `turns` turns (a 400-character message and its echo, streamed),
//! the database's size is read before and after them, and again after its events were compacted
//! (every turn older than now) and it was vacuumed. The bytes per turn are split by what holds
//! them: the event log, the CLI's transcripts as mirrored, and the messages (their JSON or text
//! lengths, so the rest of a table's bytes is indexes and page overhead).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use orchestrator::store::Store;
use plugin_contract::ThreadId;

use crate::ms;

pub struct Run {
    db: &'static str,
    turns: u64,
    /// The database's bytes per turn: before retention, after compaction and a vacuum.
    per_turn: i64,
    per_turn_after: i64,
    /// The file's bytes per turn on SQLite, before and after.
    file: Option<(i64, i64)>,
    events: Payload,
    events_after: Payload,
    transcript: i64,
    messages: i64,
    compact: Duration,
    vacuum: Duration,
}

/// Rows and their payload bytes, per turn.
#[derive(Clone, Copy)]
struct Payload {
    rows: f64,
    bytes: u64,
}

pub enum Outcome {
    Ran(Vec<Run>),
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let turns = (samples * 10).max(50) as u64;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("retention.db");
    let mut runs = vec![measure(mock, "SQLite", &file.display().to_string(), turns).await?];
    tokio::task::spawn_blocking(pg_test::available).await?;
    match pg_test::database_url().await {
        Ok(url) => runs.push(measure(mock, "PostgreSQL", &url, turns).await?),
        Err(err) => eprintln!("bench: retention on PostgreSQL skipped: {err:#}"),
    }
    Ok(Outcome::Ran(runs))
}

async fn measure(mock: &MockApi, db: &'static str, url: &str, turns: u64) -> anyhow::Result<Run> {
    eprintln!("bench: retention on {db}: {turns} turns");
    let owned = url.to_owned();
    let daemon = TestDaemon::start(mock, move |c| c.db = Some(owned)).await;
    let store = daemon.daemon().store.clone();
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "warm-up").await;
    let id = ThreadId::from_string(&thread);
    let file_size = || match db {
        "SQLite" => std::fs::metadata(url).map(|m| m.len()).ok(),
        _ => None,
    };
    store.vacuum().await?;
    let (before, file_before) = (store.bytes_used().await?, file_size());
    let (events_before, transcript_before, messages_before) = payloads(&store, &id).await?;
    let message = "x".repeat(400);
    for _ in 0..turns {
        daemon.reply(&thread, &message).await;
    }
    store.vacuum().await?;
    let (filled, file_filled) = (store.bytes_used().await?, file_size());
    let (events, transcript, messages) = payloads(&store, &id).await?;

    let at = Instant::now();
    store
        .compact_events(&orchestrator::store::now_text(), 100)
        .await?;
    let compact = at.elapsed();
    let at = Instant::now();
    store.vacuum().await?;
    let vacuum = at.elapsed();
    let (after, file_after) = (store.bytes_used().await?, file_size());
    let (events_after, _, _) = payloads(&store, &id).await?;
    daemon.stop().await;

    // Growth over the turns; after retention it may be below zero (the warm-up turn's events
    // went too).
    let per = |from: u64, to: u64| (to as i64 - from as i64) / turns as i64;
    let per_payload = |p: Payload, base: Payload| Payload {
        rows: (p.rows - base.rows) / turns as f64,
        bytes: per(base.bytes, p.bytes).max(0) as u64,
    };
    Ok(Run {
        db,
        turns,
        per_turn: per(before, filled),
        per_turn_after: per(before, after),
        file: match (file_before, file_filled, file_after) {
            (Some(b), Some(f), Some(a)) => Some((per(b, f), per(b, a))),
            _ => None,
        },
        events: per_payload(events, events_before),
        events_after: Payload {
            rows: events_after.rows / turns as f64,
            bytes: events_after.bytes / turns,
        },
        transcript: per(transcript_before, transcript),
        messages: per(messages_before, messages),
        compact,
        vacuum,
    })
}

/// The thread's events, transcript bytes and message bytes.
async fn payloads(store: &Store, thread: &ThreadId) -> anyhow::Result<(Payload, u64, u64)> {
    let events = store.events_after(thread, 0, u32::MAX).await?;
    let event_bytes = events
        .iter()
        .map(|e| serde_json::to_string(&e.data).map_or(0, |s| s.len() as u64) + e.kind.len() as u64)
        .sum();
    let transcript = store
        .thread_transcript(thread)
        .await?
        .iter()
        .map(|entry| entry.line.len() as u64)
        .sum();
    let messages = store
        .list_messages(thread)
        .await?
        .iter()
        .map(|m| m.content.len() as u64)
        .sum();
    Ok((
        Payload {
            rows: events.len() as f64,
            bytes: event_bytes,
        },
        transcript,
        messages,
    ))
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    writeln!(
        out,
        "## What a turn leaves in the database, before and after retention\n"
    )?;
    let Outcome::Ran(runs) = outcome;
    writeln!(
        out,
        "| database | turns | bytes per turn | after compaction + vacuum | file per turn (before → after) | events per turn (rows, bytes) | after | transcript bytes | message bytes | compaction | vacuum |\n|---|---|---|---|---|---|---|---|---|---|---|"
    )?;
    for run in runs {
        let file = match run.file {
            Some((b, a)) => format!("{b} → {a}"),
            None => "—".into(),
        };
        writeln!(
            out,
            "| {} | {} | {} | {} | {} | {:.1}, {} | {:.1}, {} | {} | {} | {:.0} ms | {:.0} ms |",
            run.db,
            run.turns,
            run.per_turn,
            run.per_turn_after,
            file,
            run.events.rows,
            run.events.bytes,
            run.events_after.rows,
            run.events_after.bytes,
            run.transcript,
            run.messages,
            ms(run.compact),
            ms(run.vacuum),
        )?;
    }
    writeln!(
        out,
        "\nPostgreSQL's size is `pg_database_size`: `VACUUM` makes the space of removed rows \
         reusable without giving it back to the file system, so its figure after is what the next \
         turns fill before the database grows.\n"
    )?;
    Ok(())
}
