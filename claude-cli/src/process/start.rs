//! How [`CliProcess::spawn`] starts a process, step by step: the [`child`] with its pipes, in
//! its own process group; the tasks [`wire`]d to its pipes (stdin writer, stdout reader,
//! stderr drain, reaper), all on the caller's tracker; then [`ready`]: the `initialize`
//! handshake and the external MCP servers, within the launch's `ready_timeout`.

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use tokio::process::{Child, ChildStderr, ChildStdin, ChildStdout};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, Instrument};

use super::pipes::{drain_stderr, write_stdin};
use super::reader::read_stdout;
use super::{
    CliProcess, CliTurns, ExitInfo, HostRequests, Launch, MirrorFrames, Runner, Shared, SpawnError,
    Started, TurnPhase,
};
use crate::protocol::{self, SpawnOptions};
use crate::CliError;

/// The child's three pipes, taken from it.
pub(super) struct Pipes {
    stdin: ChildStdin,
    stdout: ChildStdout,
    stderr: ChildStderr,
}

/// The receiving ends of the process's channels, handed out in [`Started`] once it is ready.
pub(super) struct Outlets {
    requests: HostRequests,
    mirror: MirrorFrames,
    cli_turns: CliTurns,
}

/// What [`wire`] made: the state the tasks share with the process, the exit it reports, the
/// token that stops its tasks, and the channels' receiving ends.
pub(super) struct Wired {
    pub shared: Arc<Shared>,
    pub exit: watch::Receiver<Option<ExitInfo>>,
    pub cancel: CancellationToken,
    pub outlets: Outlets,
}

/// Starts `claude` for `launch` (resuming `resume` when given) with piped stdio, in its own
/// process group, killed on drop and when the host dies.
pub(super) fn child(
    launch: &Launch,
    options: &SpawnOptions,
    resume: Option<&str>,
) -> Result<(Child, Pipes), SpawnError> {
    let bin = launch.bin.display().to_string();
    let mut cmd = launch.command(options, resume);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    set_parent_death_signal(&mut cmd);
    let mut child = cmd.spawn().map_err(|err| {
        if !launch.workdir.is_dir() {
            // The folder went away: what the CLI would call `cwd_unavailable`.
            let message = format!(
                "the folder {} is not there ({err})",
                launch.workdir.display()
            );
            return SpawnError::Failed(CliError::StartupFailed(
                crate::StartupFailure::cwd_unavailable(message),
            ));
        }
        SpawnError::Failed(CliError::Spawn {
            bin: bin.clone(),
            reason: err.to_string(),
        })
    })?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err(SpawnError::Failed(CliError::Spawn {
            bin,
            reason: "stdio pipes missing".into(),
        }));
    };
    Ok((
        child,
        Pipes {
            stdin,
            stdout,
            stderr,
        },
    ))
}

/// Makes the state shared with the process's tasks and spawns them on `tasks`, in the span of
/// `pid`: the stdin writer, the stdout reader, the stderr drain, and the reaper that records the
/// exit.
pub(super) fn wire(
    mut child: Child,
    pipes: Pipes,
    pid: u32,
    resume: Option<&str>,
    tasks: &TaskTracker,
) -> Wired {
    let (writer_tx, writer_rx) = mpsc::unbounded_channel();
    let (host_tx, requests) = mpsc::unbounded_channel();
    let (mirror_tx, mirror) = mpsc::unbounded_channel();
    let (own_tx, cli_turns) = mpsc::unbounded_channel();
    let (exit_tx, exit) = watch::channel(None);
    let shared = Arc::new(Shared {
        writer: writer_tx,
        host: Mutex::new(Some(host_tx)),
        pending: Mutex::default(),
        turn: Mutex::default(),
        written: Mutex::default(),
        runner: Mutex::new(Runner::Idle),
        reports_lifecycle: AtomicBool::new(false),
        cli_turns: Mutex::new(Some(own_tx)),
        exit: exit.clone(),
        session_id: Mutex::new(resume.map(str::to_owned)),
        permission_mode: Mutex::default(),
        stderr_tail: Mutex::default(),
        stray_result: Mutex::default(),
        unpaired: watch::Sender::new(false),
        waiting_on_host: Arc::default(),
        mirror: Mutex::new(Some(mirror_tx)),
        mirror_frames: AtomicU64::new(0),
        phase: watch::channel(TurnPhase::Idle).0,
        next_request: AtomicU64::new(1),
    });
    let cancel = CancellationToken::new();
    let span = tracing::info_span!("cli", pid);
    let Pipes {
        stdin,
        stdout,
        stderr,
    } = pipes;
    tasks.spawn(write_stdin(stdin, writer_rx, cancel.clone()).instrument(span.clone()));
    tasks.spawn(read_stdout(stdout, shared.clone()).instrument(span.clone()));
    tasks.spawn(drain_stderr(stderr, shared.clone(), cancel.clone()).instrument(span.clone()));
    tasks.spawn(
        async move {
            let status = match child.wait().await {
                Ok(status) => status.to_string(),
                Err(err) => format!("wait failed: {err}"),
            };
            debug!(%status, "Process reaped.");
            let _ = exit_tx.send(Some(ExitInfo { status }));
        }
        .instrument(span),
    );
    Wired {
        shared,
        exit,
        cancel,
        outlets: Outlets {
            requests,
            mirror,
            cli_turns,
        },
    }
}

/// Waits, within `launch.ready_timeout`, until `process` answered `initialize` and took the
/// external MCP servers; on a failure or the timeout the process is killed and reaped.
pub(super) async fn ready(
    process: Arc<CliProcess>,
    launch: &Launch,
    resume: Option<&str>,
    outlets: Outlets,
) -> Result<Started, SpawnError> {
    let initialize = protocol::initialize_request(
        &launch.sdk_mcp_servers,
        launch.hooks,
        launch.agents.as_ref(),
        launch.managed_settings.as_ref(),
    );
    let answered = async {
        let answer = process.initialize(initialize).await?;
        if let Some(servers) = &launch.external_mcp_servers {
            process.add_external_servers(servers).await?;
        }
        Ok::<_, SpawnError>(answer)
    };
    match tokio::time::timeout(launch.ready_timeout, answered).await {
        Ok(Ok(initialize)) => {
            info!(
                pid = process.pid,
                ms = process.spawned_at.elapsed().as_millis() as u64,
                resumed = resume.is_some(),
                "Process started."
            );
            Ok(Started {
                process,
                requests: outlets.requests,
                initialize,
                mirror: outlets.mirror,
                cli_turns: outlets.cli_turns,
            })
        }
        Ok(Err(failure)) => {
            process.kill_and_reap().await;
            Err(failure)
        }
        Err(_) => {
            process.kill_and_reap().await;
            Err(SpawnError::Failed(CliError::NotReady(launch.ready_timeout)))
        }
    }
}

/// Kill children if the host dies without cleaning up (SIGKILL, crash).
fn set_parent_death_signal(cmd: &mut tokio::process::Command) {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                .map_err(std::io::Error::from)
        });
    }
}
