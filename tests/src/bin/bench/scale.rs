//! A hundred thousand threads (issue #29), on SQLite and on PostgreSQL: the database is filled by
//! a generator (SQL run by the database itself: threads, messages of eight pseudo-words each,
//! and one thread of 10,000 turns), then a daemon starts on it and is timed over HTTP: start-up,
//! the first page of threads, a search, opening the long thread (its last page), deleting it
//! (and counting what is left of it), and a warm turn next to one on a daemon whose database is
//! empty, alternating. `BENCH_SCALE_THREADS` and `BENCH_SCALE_MESSAGES` (defaults 100,000 and
//! 1,000,000) size it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use crate::{ms, Series};

/// The long thread's turns.
const LONG_TURNS: i64 = 10_000;

pub struct Run {
    db: &'static str,
    threads: i64,
    messages: i64,
    fill: Duration,
    start: Duration,
    first_page: Series,
    search: Series,
    open_long: Series,
    delete_long: Duration,
    left: u64,
    rss_mb: f64,
    warm_filled: Series,
    warm_empty: Series,
}

pub enum Outcome {
    Ran(Vec<Run>),
}

fn env_i64(name: &str, default: i64) -> i64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let threads = env_i64("BENCH_SCALE_THREADS", 100_000).max(10);
    let messages = env_i64("BENCH_SCALE_MESSAGES", 1_000_000).max(LONG_TURNS * 2 + 10);
    let mut runs = Vec::new();
    let dir = tempfile::tempdir()?;
    let sqlite = dir.path().join("filled.db");
    let url = sqlite.display().to_string();
    runs.push(measure(mock, "SQLite", &url, threads, messages, samples).await?);
    tokio::task::spawn_blocking(pg_test::available).await?;
    match pg_test::database_url().await {
        Ok(url) => runs.push(measure(mock, "PostgreSQL", &url, threads, messages, samples).await?),
        Err(err) => eprintln!("bench: scale on PostgreSQL skipped: {err:#}"),
    }
    Ok(Outcome::Ran(runs))
}

async fn measure(
    mock: &MockApi,
    db: &'static str,
    url: &str,
    threads: i64,
    messages: i64,
    samples: usize,
) -> anyhow::Result<Run> {
    eprintln!("bench: scale on {db}: filling {threads} threads, {messages} messages");
    // Opening the store migrates the database; the generator then writes with its own SQL.
    let store = orchestrator::store::Store::open(url).await?;
    store.close().await;
    let filled = Instant::now();
    fill(url, threads, messages).await?;
    let fill_time = filled.elapsed();

    let url = url.to_owned();
    let started = Instant::now();
    let daemon = TestDaemon::start(mock, move |c| c.db = Some(url)).await;
    let start = started.elapsed();
    // The empty daemon on the same kind of database: a fresh one.
    let empty_db = match db {
        "PostgreSQL" => Some(pg_test::database_url().await?),
        _ => None,
    };
    let empty = TestDaemon::start(mock, move |c| {
        if empty_db.is_some() {
            c.db = empty_db;
        }
    })
    .await;
    let http = reqwest::Client::new();
    let get = |path: String| {
        let http = http.clone();
        let base = daemon.base.clone();
        async move {
            let at = Instant::now();
            let answer = http.get(format!("{base}{path}")).send().await?;
            anyhow::ensure!(answer.status().is_success(), "{path}: {}", answer.status());
            answer.bytes().await?;
            Ok::<_, anyhow::Error>(at.elapsed())
        }
    };
    let rounds = (samples * 10).max(50);
    let mut first_page = Series::new("first page of threads");
    let mut search = Series::new("search (two words)");
    let mut open_long = Series::new("open the 10,000-turn thread (its last page)");
    let long = "thr_gen0000000000000000000000001";
    for round in 0..rounds + 5 {
        let page = get("/api/threads".into()).await?;
        let words = format!("w{} w{}", round % 97, (round * 7) % 89);
        let found = get(format!("/api/threads?q={}", words.replace(' ', "%20"))).await?;
        let opened = get(format!("/api/threads/{long}")).await?;
        if round >= 5 {
            first_page.samples.push(page);
            search.samples.push(found);
            open_long.samples.push(opened);
        }
    }
    let rss = crate::schemas::rss_mib();

    // A warm turn on the filled database next to one on an empty one, alternating.
    let filled_thread = daemon.create_thread().await;
    let empty_thread = empty.create_thread().await;
    daemon.reply(&filled_thread, "warm up").await;
    empty.reply(&empty_thread, "warm up").await;
    let mut warm_filled = Series::new("warm turn, filled database");
    let mut warm_empty = Series::new("warm turn, empty database");
    for i in 0..samples * 2 {
        // Filled then empty, empty then filled: what drifts hits both alike.
        let pair = [
            (&daemon, &filled_thread, true),
            (&empty, &empty_thread, false),
        ];
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let (node, thread, filled) = pair[k];
            let at = Instant::now();
            node.reply(thread, &format!("turn {i}")).await;
            if filled {
                warm_filled.samples.push(at.elapsed());
            } else {
                warm_empty.samples.push(at.elapsed());
            }
        }
    }

    let deleting = Instant::now();
    let answer = http
        .delete(format!("{}/api/threads/{long}", daemon.base))
        .send()
        .await?;
    let delete_long = deleting.elapsed();
    anyhow::ensure!(
        answer.status().as_u16() == 204,
        "delete: {}",
        answer.status()
    );
    let left: u64 = daemon
        .daemon()
        .store
        .thread_rows(&plugin_contract::ThreadId::from_string(long))
        .await?
        .iter()
        .map(|(_, n)| n)
        .sum();
    daemon.stop().await;
    empty.stop().await;
    Ok(Run {
        db,
        threads,
        messages,
        fill: fill_time,
        start,
        first_page,
        search,
        open_long,
        delete_long,
        left,
        rss_mb: rss,
        warm_filled,
        warm_empty,
    })
}

/// Threads and messages written by the database itself: `threads` threads (the first has
/// [`LONG_TURNS`] turns), `messages` messages in all, each of eight pseudo-words `w0`…`w4999`.
async fn fill(url: &str, threads: i64, messages: i64) -> anyhow::Result<()> {
    let long = LONG_TURNS * 2;
    let rest = messages - long;
    let others = threads - 1;
    match orchestrator::store::is_postgres_url(url) {
        false => {
            let pool = &sqlx::SqlitePool::connect(&format!("sqlite://{url}")).await?;
            sqlx::query(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?1)
                 INSERT INTO threads (id, title, created_at, updated_at)
                 SELECT printf('thr_gen%025d', i), 'Generated thread ' || i,
                        strftime('%Y-%m-%dT%H:%M:%S', '2026-01-01', '+' || i || ' seconds') || '.000000Z',
                        strftime('%Y-%m-%dT%H:%M:%S', '2026-01-01', '+' || i || ' seconds') || '.000000Z'
                 FROM n",
            )
            .bind(threads)
            .execute(pool)
            .await?;
            for (count, thread, offset) in [(long, Some(1_i64), 0_i64), (rest, None, long)] {
                sqlx::query(
                    "WITH RECURSIVE n(j) AS (SELECT 0 UNION ALL SELECT j + 1 FROM n WHERE j < ?1 - 1),
                     m AS (SELECT j,
                                  COALESCE(?2, 2 + j % ?3) AS t,
                                  CASE WHEN ?2 IS NULL THEN j / ?3 + 1 ELSE j + 1 END AS seq
                           FROM n)
                     INSERT INTO messages (id, thread_id, seq, role, content, status, created_at, updated_at)
                     SELECT printf('msg_gen%025d', j + ?4), printf('thr_gen%025d', t), seq,
                            CASE WHEN seq % 2 = 1 THEN 'user' ELSE 'assistant' END,
                            'w' || abs(random() % 5000) || ' w' || abs(random() % 97) || ' w' || abs(random() % 89)
                              || ' w' || abs(random() % 5000) || ' w' || abs(random() % 5000)
                              || ' w' || abs(random() % 5000) || ' w' || abs(random() % 5000) || ' w' || abs(random() % 5000),
                            'done',
                            strftime('%Y-%m-%dT%H:%M:%S', '2026-06-01', '+' || (j + ?4) || ' seconds') || '.000000Z',
                            strftime('%Y-%m-%dT%H:%M:%S', '2026-06-01', '+' || (j + ?4) || ' seconds') || '.000000Z'
                     FROM m",
                )
                .bind(count)
                .bind(thread)
                .bind(others)
                .bind(offset)
                .execute(pool)
                .await?;
            }
        }
        true => {
            let pool = &sqlx::PgPool::connect(url).await?;
            // One UPDATE of each thread's activity afterwards, instead of one per message row
            // (20,000 on the long thread's row alone).
            sqlx::query("ALTER TABLE messages DISABLE TRIGGER messages_activity")
                .execute(pool)
                .await?;
            sqlx::query(
                "INSERT INTO threads (id, title, created_at, updated_at)
                 SELECT 'thr_gen' || lpad(i::text, 25, '0'), 'Generated thread ' || i,
                        to_char(timestamp '2026-01-01' + i * interval '1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                        to_char(timestamp '2026-01-01' + i * interval '1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
                 FROM generate_series(1, $1) i",
            )
            .bind(threads)
            .execute(pool)
            .await?;
            for (count, thread, offset) in [(long, Some(1_i64), 0_i64), (rest, None, long)] {
                sqlx::query(
                    "INSERT INTO messages (id, thread_id, seq, role, content, status, created_at, updated_at)
                     SELECT 'msg_gen' || lpad((j + $4)::text, 25, '0'),
                            'thr_gen' || lpad(COALESCE($2, 2 + j % $3)::text, 25, '0'),
                            seq, CASE WHEN seq % 2 = 1 THEN 'user' ELSE 'assistant' END,
                            'w' || floor(random() * 5000) || ' w' || floor(random() * 97) || ' w' || floor(random() * 89)
                              || ' w' || floor(random() * 5000) || ' w' || floor(random() * 5000)
                              || ' w' || floor(random() * 5000) || ' w' || floor(random() * 5000) || ' w' || floor(random() * 5000),
                            'done',
                            to_char(timestamp '2026-06-01' + (j + $4) * interval '1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),
                            to_char(timestamp '2026-06-01' + (j + $4) * interval '1 second', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')
                     FROM (SELECT j, CASE WHEN $2::bigint IS NULL THEN j / $3 + 1 ELSE j + 1 END AS seq
                           FROM generate_series(0, $1 - 1) j) m",
                )
                .bind(count)
                .bind(thread)
                .bind(others)
                .bind(offset)
                .execute(pool)
                .await?;
            }
            sqlx::query("ALTER TABLE messages ENABLE TRIGGER messages_activity")
                .execute(pool)
                .await?;
            sqlx::query(
                "UPDATE threads t SET last_activity_at = m.last
                 FROM (SELECT thread_id, MAX(updated_at) AS last FROM messages GROUP BY thread_id) m
                 WHERE m.thread_id = t.id AND m.last > t.last_activity_at",
            )
            .execute(pool)
            .await?;
            sqlx::query("ANALYZE").execute(pool).await?;
        }
    }
    Ok(())
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    writeln!(out, "## A hundred thousand threads\n")?;
    let Outcome::Ran(runs) = outcome;
    for run in runs {
        writeln!(
            out,
            "{}: {} threads, {} messages (one thread of {} turns), filled by the database in {:.1} s. \
             Start-up on it {:.2} s; the process's RSS after the reads {:.0} MiB (the daemon and \
             this bench's client).\n",
            run.db,
            run.threads,
            run.messages,
            LONG_TURNS,
            run.fill.as_secs_f64(),
            run.start.as_secs_f64(),
            run.rss_mb,
        )?;
        writeln!(out, "| request | median | p99 |\n|---|---|---|")?;
        for series in [&run.first_page, &run.search, &run.open_long] {
            writeln!(
                out,
                "| {} | {:.1} ms | {:.1} ms |",
                series.name,
                ms(series.median()),
                ms(series.p99()),
            )?;
        }
        writeln!(
            out,
            "\nDelete of the 10,000-turn thread: {:.0} ms; rows of it left: {}. Warm turn on the \
             filled database {:.1} ms, on an empty one {:.1} ms (medians, alternating): {:.2}×.\n",
            ms(run.delete_long),
            run.left,
            ms(run.warm_filled.median()),
            ms(run.warm_empty.median()),
            ms(run.warm_filled.median()) / ms(run.warm_empty.median()).max(f64::EPSILON),
        )?;
    }
    Ok(())
}
