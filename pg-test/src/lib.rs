//! A real PostgreSQL for tests, no mock: one server per test process, started on first use, and a
//! fresh database per test ([`database_url`]), so tests run in parallel on one server.
//!
//! The server is Debian's `postgresql` (`/usr/lib/postgresql/<version>/bin`), installed with
//! `apt-get install -y postgresql` when missing and we are root; otherwise the error says what to
//! install. Its cluster lives in a temporary folder (`initdb`, trust authentication) owned by the
//! `postgres` account when we are root (PostgreSQL refuses to run as root), and it listens on a
//! free port of 127.0.0.1 and on a Unix socket in that folder only.
//!
//! **Invariant:** no server outlives its test process. `postgres` runs as our child with
//! `PR_SET_PDEATHSIG` = `SIGQUIT` (an immediate shutdown, which also ends its backends), set from
//! a thread that never exits, so the signal comes when the process does, however it ends (the
//! test harness runs no destructors for statics). The folders of dead test processes are removed
//! by the next start.
//!
//! Owns no SQL of the daemon: the store's migrations run in the databases it hands out.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{mpsc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use sqlx::Connection;

/// How long the server may take to accept connections after it was started.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The folder under the system's temp dir that holds one cluster per test process.
const CLUSTERS_DIR: &str = "harness-pg-test";

/// The server of this process, once started (or why it could not start: every test sees the same
/// error instead of trying again).
static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();

/// A running server. Lives as long as the process.
#[derive(Debug)]
struct Server {
    port: u16,
}

/// The URL of a new, empty database on this process's server (started on first call), e.g.
/// `postgres://postgres@127.0.0.1:54321/t_0123…`. Every call makes another database; nothing is
/// dropped (the cluster goes with the process).
pub async fn database_url() -> anyhow::Result<String> {
    let port = server()?.port;
    let name = format!("t_{}", uuid::Uuid::new_v4().simple());
    let admin = format!("postgres://postgres@127.0.0.1:{port}/postgres");
    let deadline = Instant::now() + START_TIMEOUT;
    // The server may still be starting ("the database system is starting up").
    let mut conn = loop {
        match sqlx::PgConnection::connect(&admin).await {
            Ok(conn) => break conn,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(err) => return Err(err).context("connecting to the test PostgreSQL"),
        }
    };
    sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .context("CREATE DATABASE")?;
    conn.close().await.ok();
    Ok(format!("postgres://postgres@127.0.0.1:{port}/{name}"))
}

/// Whether this process can run PostgreSQL (starting it if it is not running yet). Tests that
/// need it call [`database_url`] and fail with its error instead.
pub fn available() -> bool {
    server().is_ok()
}

fn server() -> anyhow::Result<&'static Server> {
    SERVER
        .get_or_init(|| start().map_err(|err| format!("{err:#}")))
        .as_ref()
        .map_err(|err| anyhow!("cannot start a test PostgreSQL: {err}"))
}

/// Finds or installs the binaries, makes a cluster and starts `postgres` from a thread that
/// stays alive, then waits until it accepts TCP connections.
fn start() -> anyhow::Result<Server> {
    let bin = binaries()?;
    let account = Account::for_server()?;
    let root = std::env::temp_dir().join(CLUSTERS_DIR);
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    remove_dead_clusters(&root);
    let dir = root.join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
    account.own(&dir)?;
    let data = dir.join("data");

    let initdb = account
        .command(bin.join("initdb"))
        .arg("-D")
        .arg(&data)
        .args([
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ])
        .output()
        .context("running initdb")?;
    if !initdb.status.success() {
        bail!(
            "initdb failed ({}): {}",
            initdb.status,
            String::from_utf8_lossy(&initdb.stderr)
        );
    }

    let port = free_port()?;
    let log = std::fs::File::create(dir.join("postgres.log")).context("creating the log")?;
    account.own(&dir.join("postgres.log"))?;
    let mut cmd = account.command(bin.join("postgres"));
    cmd.arg("-D")
        .arg(&data)
        .arg("-p")
        .arg(port.to_string())
        .arg("-k")
        .arg(&dir)
        .args(["-c", "listen_addresses=127.0.0.1"])
        // Throwaway data: no fsync; enough connections for parallel tests' pools.
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off", "-c", "max_connections=300"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0);
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGQUIT)
                .map_err(std::io::Error::from)
        });
    }
    // The death signal follows the thread that spawned the child, so spawn it from one that
    // parks for the rest of the process.
    let (spawned, result) = mpsc::channel();
    std::thread::Builder::new()
        .name("pg-test-postmaster".into())
        .spawn(move || {
            let child = cmd.spawn();
            let ok = child.is_ok();
            let _ = spawned.send(child.map(|c| c.id()));
            if ok {
                loop {
                    std::thread::park();
                }
            }
        })
        .context("spawning the postmaster's thread")?;
    let pid = result
        .recv()
        .context("the postmaster's thread died")?
        .context("starting postgres")?;

    let deadline = Instant::now() + START_TIMEOUT;
    while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
        if Instant::now() > deadline || !Path::new(&format!("/proc/{pid}")).exists() {
            let log = std::fs::read_to_string(dir.join("postgres.log")).unwrap_or_default();
            bail!("postgres did not start on port {port}: {log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(Server { port })
}

/// The folder of Debian's newest installed PostgreSQL binaries, installing `postgresql` with apt
/// when none is there and we are root.
fn binaries() -> anyhow::Result<PathBuf> {
    if let Some(bin) = installed_binaries() {
        return Ok(bin);
    }
    if !nix::unistd::geteuid().is_root() {
        bail!("PostgreSQL is not installed: install Debian's `postgresql` (apt-get install postgresql)");
    }
    let install = || {
        Command::new("apt-get")
            .args(["install", "-y", "--no-install-recommends", "postgresql"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status()
    };
    let ok = install().is_ok_and(|s| s.success()) || {
        let _ = Command::new("apt-get").arg("update").status();
        install().is_ok_and(|s| s.success())
    };
    if !ok {
        bail!("`apt-get install -y postgresql` failed: install Debian's `postgresql` by hand");
    }
    installed_binaries().ok_or_else(|| anyhow!("no /usr/lib/postgresql/*/bin/initdb after apt"))
}

fn installed_binaries() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

/// Who runs the server: the `postgres` account when we are root, else ourselves.
struct Account(Option<nix::unistd::User>);

impl Account {
    fn for_server() -> anyhow::Result<Account> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(Account(None));
        }
        let user = nix::unistd::User::from_name("postgres")
            .context("looking up the postgres account")?
            .ok_or_else(|| anyhow!("no `postgres` account (Debian's postgresql creates it)"))?;
        Ok(Account(Some(user)))
    }

    fn command(&self, program: PathBuf) -> Command {
        let mut cmd = Command::new(program);
        if let Some(user) = &self.0 {
            cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
            cmd.env("HOME", &user.dir).env("USER", "postgres");
        }
        cmd
    }

    fn own(&self, path: &Path) -> anyhow::Result<()> {
        if let Some(user) = &self.0 {
            std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw()))
                .with_context(|| format!("chown {}", path.display()))?;
        }
        Ok(())
    }
}

/// A port free on 127.0.0.1 now (the kernel's pick).
fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).context("finding a free port")?;
    Ok(listener.local_addr()?.port())
}

/// Removes the clusters of test processes that are gone (each folder is named by its pid).
fn remove_dead_clusters(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn databases_are_fresh_and_usable() {
        let a = database_url().await.unwrap();
        let b = database_url().await.unwrap();
        assert_ne!(a, b);
        let mut conn = sqlx::PgConnection::connect(&a).await.unwrap();
        let one: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(one, 1);
        let tables: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = 'public'",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(tables, 0);
    }
}
