//! Workspaces (issue #25): making a thread on a git worktree of a repository of 10,000 files next
//! to making a plain thread, and the first turn of a new worktree thread next to a new plain
//! thread's first turn, a worktree thread's first turn after a prewarm, and a warm turn; then,
//! on a second daemon with `pool.workspace_spares = 1`, a worktree thread made from the spare
//! parked for the repository and its first turn. Each pair alternates its order, so drift hits
//! both alike.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::git::{git, repository};
use harness_tests::mock::MockApi;

use crate::{ms, Series};

/// Files in the benchmark's repository.
const FILES: usize = 10_000;

pub struct Outcome {
    create_plain: Series,
    create_worktree: Series,
    first_plain: Series,
    first_worktree: Series,
    first_prewarmed: Series,
    warm: Series,
    create_spare: Series,
    first_spare: Series,
}

/// A repository of `FILES` small files in 100 folders, one commit.
fn big_repository(dir: &Path) -> anyhow::Result<()> {
    repository(dir);
    for i in 0..FILES {
        let folder = dir.join(format!("src/m{:02}", i % 100));
        std::fs::create_dir_all(&folder)?;
        std::fs::write(
            folder.join(format!("f{i}.rs")),
            format!("pub const N: usize = {i};\n"),
        )?;
    }
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "--quiet", "-m", "files"]);
    Ok(())
}

pub async fn run(mock: &MockApi, samples: usize) -> anyhow::Result<Outcome> {
    let root = tempfile::tempdir()?;
    let root_path = root.path().canonicalize()?;
    let repo = root_path.join("big");
    let setup = Instant::now();
    big_repository(&repo)?;
    eprintln!(
        "bench: a repository of {FILES} files made in {:.1} s",
        setup.elapsed().as_secs_f64()
    );
    let daemon = TestDaemon::start(mock, |c| {
        c.pool.max_capacity = 64;
        c.workspaces.roots = vec![root_path.clone()];
    })
    .await;
    let worktree = json!({"workspace": {"repo": repo, "worktree": true}});
    let create = |body: serde_json::Value| {
        let daemon = &daemon;
        async move {
            let t = Instant::now();
            let (status, thread) = daemon.post("/api/threads", body).await;
            ensure!(status == 201, "creating a thread failed: {thread}");
            let id = thread["id"].as_str().context("the thread's id")?.to_owned();
            Ok::<_, anyhow::Error>((id, t.elapsed()))
        }
    };
    let mut out = Outcome {
        create_plain: Series::new("create a plain thread"),
        create_worktree: Series::new(format!("create a thread on a worktree ({FILES} files)")),
        first_plain: Series::new("first turn, plain thread"),
        first_worktree: Series::new("first turn, worktree thread"),
        first_prewarmed: Series::new("first turn, worktree thread after prewarm"),
        warm: Series::new("warm turn, worktree thread"),
        create_spare: Series::new("create a thread on a worktree, from a spare"),
        first_spare: Series::new("first turn, worktree thread from a spare"),
    };
    // The second daemon keeps a spare parked for the repository once a thread was made on it.
    let with_spares = TestDaemon::start(mock, |c| {
        c.workspaces.roots = vec![root_path.clone()];
        c.pool.workspace_spares = 1;
    })
    .await;
    let (status, seed) = with_spares.post("/api/threads", worktree.clone()).await;
    ensure!(status == 201, "creating a thread failed: {seed}");
    for i in 0..samples {
        let (plain, worked) = if i % 2 == 0 {
            let plain = create(json!({})).await?;
            (plain, create(worktree.clone()).await?)
        } else {
            let worked = create(worktree.clone()).await?;
            (create(json!({})).await?, worked)
        };
        out.create_plain.samples.push(plain.1);
        out.create_worktree.samples.push(worked.1);
        let first = |thread: String| {
            let daemon = &daemon;
            async move {
                let t = Instant::now();
                daemon.reply(&thread, "first").await;
                t.elapsed()
            }
        };
        if i % 2 == 0 {
            out.first_plain.samples.push(first(plain.0).await);
            out.first_worktree
                .samples
                .push(first(worked.0.clone()).await);
        } else {
            out.first_worktree
                .samples
                .push(first(worked.0.clone()).await);
            out.first_plain.samples.push(first(plain.0).await);
        }
        let t = Instant::now();
        daemon.reply(&worked.0, "again").await;
        out.warm.samples.push(t.elapsed());

        let (prewarmed, _) = create(worktree.clone()).await?;
        let (status, body) = daemon
            .post("/api/prewarm", json!({"threadId": prewarmed}))
            .await;
        ensure!(status == 202, "prewarm failed: {body}");
        let deadline = Instant::now() + Duration::from_secs(30);
        while daemon.pid_of(&prewarmed).is_none() {
            ensure!(Instant::now() < deadline, "prewarm did not finish");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let t = Instant::now();
        daemon.reply(&prewarmed, "first").await;
        out.first_prewarmed.samples.push(t.elapsed());

        let spare = parked_spare(&with_spares).await?;
        let t = Instant::now();
        let (status, thread) = with_spares.post("/api/threads", worktree.clone()).await;
        out.create_spare.samples.push(t.elapsed());
        ensure!(status == 201, "creating a thread failed: {thread}");
        ensure!(
            thread["id"] == spare.as_str(),
            "the thread did not take the spare"
        );
        let t = Instant::now();
        with_spares.reply(&spare, "first").await;
        out.first_spare.samples.push(t.elapsed());
        // The replacement is parked before the next round measures anything.
        parked_spare(&with_spares).await?;
    }
    daemon.stop().await;
    with_spares.stop().await;
    Ok(out)
}

/// The thread id reserved by the daemon's parked spare, once one is parked.
async fn parked_spare(daemon: &TestDaemon) -> anyhow::Result<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, pool) = daemon.get("/api/pool").await;
        let processes = pool["processes"].as_array().into_iter().flatten();
        let parked = processes
            .filter(|p| p["spare"] == true)
            .find_map(|p| p["threadId"].as_str());
        if let Some(thread) = parked {
            return Ok(thread.to_owned());
        }
        ensure!(Instant::now() < deadline, "no spare was parked");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

pub fn render(out: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(out, "## Workspaces: a worktree per thread\n")?;
    writeln!(
        out,
        "A repository of {FILES} files (100 folders, one commit). Each round makes a plain thread \
         and a thread on a fresh worktree of it (the order alternating), sends each its first \
         message, then a second one to the worktree thread (warm), and makes one more worktree \
         thread that is prewarmed before its first message. Then, on a second daemon with \
         `pool.workspace_spares = 1`, it makes a worktree thread that takes the spare parked for \
         the repository, and sends it its first message.\n"
    )?;
    writeln!(
        out,
        "| scenario | n | min | median | p95 | max | median / first |"
    )?;
    writeln!(out, "|---|---|---|---|---|---|---|")?;
    for (series, against) in [
        (&o.create_plain, &o.create_plain),
        (&o.create_worktree, &o.create_plain),
        (&o.first_plain, &o.first_plain),
        (&o.first_worktree, &o.first_plain),
        (&o.first_prewarmed, &o.first_plain),
        (&o.warm, &o.first_plain),
        (&o.create_spare, &o.create_plain),
        (&o.first_spare, &o.first_plain),
    ] {
        crate::report::row(out, series, Some(against))?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "- a worktree of {FILES} files costs **{:.0} ms** more to create than a plain thread \
         (median {:.0} ms vs {:.0} ms); its first turn is {:.2}x a plain thread's, and after a \
         prewarm {:.2}x; a warm turn on it is {:.2}x a plain first turn; from a parked spare, \
         creating it takes {:.0} ms and its first turn is {:.2}x a plain thread's\n",
        ms(o.create_worktree.median()) - ms(o.create_plain.median()),
        ms(o.create_worktree.median()),
        ms(o.create_plain.median()),
        ms(o.first_worktree.median()) / ms(o.first_plain.median()),
        ms(o.first_prewarmed.median()) / ms(o.first_plain.median()),
        ms(o.warm.median()) / ms(o.first_plain.median()),
        ms(o.create_spare.median()),
        ms(o.first_spare.median()) / ms(o.first_plain.median()),
    )
}
