//! Walls raised on real processes (`sh`, `python3`), as the daemon raises them on `claude`.

use std::collections::BTreeSet;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;

fn sandbox() -> Sandbox {
    probe(true)
}

/// A sandbox whose limits are watched, not the kernel's.
fn watched() -> Sandbox {
    probe(false)
}

fn probe(cgroups: bool) -> Sandbox {
    static N: AtomicUsize = AtomicUsize::new(0);
    let name = format!(
        "{}-t{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    );
    let sandbox = Sandbox::probe(&name, cgroups).expect("this kernel holds walls (Landlock ABI 6)");
    assert_eq!(
        sandbox.status().limits == "cgroup-v1",
        cgroups,
        "{:?}",
        sandbox.status()
    );
    sandbox
}

fn system() -> BTreeSet<PathBuf> {
    ["/usr", "/bin", "/lib", "/lib64", "/etc", "/proc"]
        .iter()
        .map(PathBuf::from)
        .collect()
}

fn walls(own: &Path, connect: Connect, limits: Limits) -> Walls {
    Walls {
        read_write: [own.to_path_buf(), PathBuf::from("/dev/null")]
            .into_iter()
            .collect(),
        read_only: system(),
        connect,
        limits,
    }
}

/// Runs `script` with `sh -c` under `walls`; its status, output and the tree.
fn run(sandbox: &Sandbox, walls: &Walls, script: &str) -> (bool, String) {
    let (confinement, tree) = sandbox.wall("tree", walls).expect("walls");
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    Arc::new(confinement).apply(&mut cmd);
    let out = cmd.output().expect("spawn");
    drop(tree);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn a_walled_tree_works_in_its_own_folder_and_reads_the_system_only() {
    let sandbox = sandbox();
    let base = tempfile::tempdir().expect("tmp");
    let own = base.path().join("own");
    let other = base.path().join("other");
    std::fs::create_dir_all(&own).expect("own");
    std::fs::create_dir_all(&other).expect("other");
    std::fs::write(other.join("secret"), "OTHER-SECRET").expect("secret");
    let walls = walls(&own, Connect::default(), Limits::default());

    let (ok, out) = run(
        &sandbox,
        &walls,
        &format!(
            "echo mine > {0}/file && cat {0}/file && head -c 5 /etc/hostname >/dev/null && echo system-read",
            own.display()
        ),
    );
    assert!(ok, "{out}");
    assert!(out.contains("mine") && out.contains("system-read"), "{out}");

    for attack in [
        format!("cat {}/secret", other.display()),
        format!("ls {}", other.display()),
        format!("echo x > {}/planted", base.path().display()),
        "echo x > /tmp/walls-planted".to_owned(),
        "cat /root/.bashrc".to_owned(),
    ] {
        let (ok, out) = run(&sandbox, &walls, &attack);
        assert!(!ok, "{attack} went through: {out}");
        assert!(!out.contains("OTHER-SECRET"), "{out}");
    }
    assert!(!base.path().join("planted").exists());
}

#[test]
fn a_walled_tree_cannot_signal_or_read_processes_outside_it() {
    let sandbox = sandbox();
    let own = tempfile::tempdir().expect("tmp");
    let walls = walls(own.path(), Connect::default(), Limits::default());
    let me = std::process::id();
    let (ok, out) = run(&sandbox, &walls, &format!("kill -0 {me}"));
    assert!(!ok, "signalled the parent: {out}");
    let (ok, out) = run(&sandbox, &walls, &format!("cat /proc/{me}/environ"));
    assert!(
        !ok && !out.contains("PATH="),
        "read the parent's environment: {out}"
    );
    // Its own tree is its own.
    let (ok, out) = run(&sandbox, &walls, "sleep 5 & kill $! && echo own-signal");
    assert!(ok && out.contains("own-signal"), "{out}");
}

#[test]
fn a_walled_tree_connects_to_its_ports_only() {
    let sandbox = sandbox();
    let own = tempfile::tempdir().expect("tmp");
    let allowed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let refused = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = |l: &std::net::TcpListener| l.local_addr().expect("addr").port();
    let walls = walls(
        own.path(),
        Connect::Only([port(&allowed)].into_iter().collect()),
        Limits::default(),
    );
    let connect = |port: u16| {
        format!(
            "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 2); print(\"connected\")'"
        )
    };
    let (ok, out) = run(&sandbox, &walls, &connect(port(&allowed)));
    assert!(ok && out.contains("connected"), "{out}");
    let (ok, out) = run(&sandbox, &walls, &connect(port(&refused)));
    assert!(!ok && !out.contains("connected"), "{out}");
    assert!(out.contains("Permission denied"), "{out}");

    // Every port but some: those stay closed.
    let walls = Walls {
        connect: Connect::AllBut([port(&refused)].into_iter().collect()),
        ..walls
    };
    let (ok, out) = run(&sandbox, &walls, &connect(port(&allowed)));
    assert!(ok, "{out}");
    let (ok, out) = run(&sandbox, &walls, &connect(port(&refused)));
    assert!(!ok, "{out}");
}

/// Starts `script` under `walls` in the background; the child and its tree.
fn start(sandbox: &Sandbox, walls: &Walls, script: &str) -> (std::process::Child, Tree) {
    let (confinement, tree) = sandbox.wall("tree", walls).expect("walls");
    let mut cmd = Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(script)
        .env_clear()
        .env("PATH", "/usr/bin:/bin")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    Arc::new(confinement).apply(&mut cmd);
    let child = cmd.spawn().expect("spawn");
    tree.started(child.id());
    (child, tree)
}

/// Checks `tree` until it reports a breach (or 20 s pass).
fn first_breach(tree: &Tree) -> Breach {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(breach) = tree.check().into_iter().next() {
            return breach;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("no breach within 20 s: {:?}", tree.usage());
}

fn finish(mut child: std::process::Child) -> String {
    let status = child.wait().expect("wait");
    let mut text = String::new();
    for pipe in [
        child.stdout.take().map(|p| Box::new(p) as Box<dyn Read>),
        child.stderr.take().map(|p| Box::new(p) as Box<dyn Read>),
    ]
    .into_iter()
    .flatten()
    {
        let mut pipe = pipe;
        let _ = pipe.read_to_string(&mut text);
    }
    format!("{status}: {text}")
}

#[test]
fn a_command_past_the_memory_limit_is_stopped_and_told_why() {
    past_the_memory_limit(sandbox());
}

#[test]
fn without_cgroups_a_command_past_the_memory_limit_is_stopped_too() {
    past_the_memory_limit(watched());
}

fn past_the_memory_limit(sandbox: Sandbox) {
    let own = tempfile::tempdir().expect("tmp");
    let limits = Limits {
        memory_mb: Some(128),
        ..Limits::default()
    };
    let walls = walls(own.path(), Connect::default(), limits);
    let (child, tree) = start(
        &sandbox,
        &walls,
        "python3 -c 'b = bytearray(1024 * 1024 * 1024); print(\"allocated\")'; echo shell-goes-on",
    );
    let breach = first_breach(&tree);
    assert_eq!(breach.limit, Limit::Memory);
    assert_eq!(breach.max, 128);
    assert!(!breach.root, "the shell is not what grew: {breach:?}");
    assert!(breach.command.starts_with("python"), "{breach:?}");
    let out = finish(child);
    assert!(!out.contains("allocated"), "{out}");
    assert!(out.contains("shell-goes-on"), "the shell lives on: {out}");
    assert!(out.contains("memory limit of 128 MiB"), "{out}");
}

#[test]
fn a_first_process_past_the_memory_limit_is_stopped_itself() {
    let sandbox = sandbox();
    let own = tempfile::tempdir().expect("tmp");
    let limits = Limits {
        memory_mb: Some(128),
        ..Limits::default()
    };
    let walls = walls(own.path(), Connect::default(), limits);
    let (confinement, tree) = sandbox.wall("tree", &walls).expect("walls");
    let mut cmd = Command::new("/usr/bin/python3");
    cmd.args(["-c", "b = bytearray(1024 ** 3); print('allocated')"])
        .env_clear()
        .stdout(Stdio::piped())
        .process_group(0);
    Arc::new(confinement).apply(&mut cmd);
    let child = cmd.spawn().expect("spawn");
    tree.started(child.id());
    let breach = first_breach(&tree);
    assert!(breach.root, "{breach:?}");
    assert_eq!(breach.limit, Limit::Memory);
    let out = finish(child);
    assert!(out.contains("signal: 9"), "killed: {out}");
    assert!(!out.contains("allocated"), "{out}");
}

#[test]
fn a_fork_storm_stops_at_the_process_limit() {
    fork_storm(sandbox());
}

#[test]
fn without_cgroups_a_fork_storm_is_stopped_too() {
    fork_storm(watched());
}

fn fork_storm(sandbox: Sandbox) {
    let own = tempfile::tempdir().expect("tmp");
    let limits = Limits {
        processes: Some(24),
        ..Limits::default()
    };
    let walls = walls(own.path(), Connect::default(), limits);
    let (child, tree) = start(
        &sandbox,
        &walls,
        "sh -c 'i=0; while [ $i -lt 200 ]; do sleep 30 & i=$((i+1)); done; wait'; echo storm-over",
    );
    let breach = first_breach(&tree);
    assert_eq!(breach.limit, Limit::Processes);
    assert_eq!(breach.max, 24);
    let out = finish(child);
    assert!(out.contains("storm-over"), "{out}");
    assert!(out.contains("limit of 24 processes"), "{out}");
    // Nothing of the storm is left once its processes are reaped.
    let deadline = Instant::now() + Duration::from_secs(10);
    while tree.usage().processes.unwrap_or(0) > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(tree.usage().processes, Some(0), "{:?}", tree.usage());
    if tree.mechanism() == "cgroup" {
        assert!(tree.refused_a_fork());
        // Released (its group removed), the tree still says so: a turn whose process died of
        // the storm may be told after its tree was let go.
        tree.release();
        assert!(tree.refused_a_fork(), "kept past the release");
    }
}
