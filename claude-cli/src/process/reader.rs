//! The stdout reader of one process: every line decoded, then handed to whom it belongs: our
//! answers to our control requests, the CLI's control requests to the host, and each turn's lines
//! to the turn the CLI says it runs (ours, by the uuid we wrote, or one it started by itself,
//! handed to the host as a [`CliTurn`]).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec};
use tracing::{debug, trace, warn};

use super::{
    lock, CliTurn, HostRequest, Reply, Runner, Shared, TurnEvents, TurnLine, TurnPhase,
    MAX_LINE_BYTES,
};
use crate::protocol::{self, CliMessage, Lifecycle};

pub(super) async fn read_stdout(stdout: tokio::process::ChildStdout, shared: Arc<Shared>) {
    let mut lines = FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE_BYTES));
    while let Some(line) = lines.next().await {
        let line = match line {
            Ok(line) => line,
            Err(tokio_util::codec::LinesCodecError::MaxLineLengthExceeded) => {
                warn!(max = MAX_LINE_BYTES, "Skipped an oversized stdout line.");
                continue;
            }
            Err(err) => {
                warn!(%err, "stdout read failed.");
                break;
            }
        };
        trace!(line = %line, "stdout");
        if !line.trim_start().starts_with('{') {
            if !line.trim().is_empty() {
                debug!(line = %line, "Skipped a non-JSON stdout line.");
            }
            continue;
        }
        match protocol::decode(&line) {
            Ok(message) => dispatch(&shared, message),
            Err(err) => warn!(%err, "Skipped an undecodable stdout line."),
        }
    }
    // EOF: wake everyone waiting on this process, and end the host's request stream.
    *lock(&shared.turn) = None;
    *lock(&shared.runner) = Runner::Idle;
    *lock(&shared.cli_turns) = None;
    lock(&shared.pending).clear();
    *lock(&shared.host) = None;
    *lock(&shared.mirror) = None;
}

fn dispatch(shared: &Arc<Shared>, message: CliMessage) {
    match message {
        CliMessage::ControlResponse {
            request_id,
            outcome,
        } => {
            if let Some(tx) = lock(&shared.pending).remove(&request_id) {
                let _ = tx.send(outcome);
            }
        }
        CliMessage::ControlRequest {
            request_id,
            subtype,
            request,
        } => {
            shared.waiting_on_host.fetch_add(1, Ordering::SeqCst);
            let request = HostRequest {
                request_id,
                subtype,
                request,
                in_cli_turn: matches!(*lock(&shared.runner), Runner::Own(_)),
                reply: Some(Reply {
                    writer: shared.writer.clone(),
                    waiting: shared.waiting_on_host.clone(),
                }),
            };
            // Nobody serving (the host let go, or EOF): dropping it answers an error.
            if let Some(host) = lock(&shared.host).as_ref() {
                let _ = host.send(request);
            }
        }
        CliMessage::ControlCancel { request_id } => debug!(%request_id, "CLI cancelled a request."),
        CliMessage::Lifecycle(lifecycle) => started_command(shared, lifecycle),
        CliMessage::Result(result) => {
            if let Some(id) = &result.session_id {
                *lock(&shared.session_id) = Some(id.clone());
            }
            let runner = std::mem::replace(&mut *lock(&shared.runner), Runner::Idle);
            if let Runner::Own(tx) = runner {
                let _ = tx.send(TurnLine::Result(result));
                return;
            }
            let turn = lock(&shared.turn).clone();
            match turn {
                Some(tx) => {
                    let _ = tx.send(TurnLine::Result(result));
                }
                None => {
                    debug!(uuids = ?result.user_message_uuids, "A result with no turn running.");
                    shared.unpaired.send_replace(true);
                    *lock(&shared.stray_result) = Some(*result);
                }
            }
        }
        CliMessage::Progress(line) => {
            if line.starts_turn {
                started_turn(shared);
                // The mode the turn runs in; a later `status` (plan mode left mid-turn, say) is
                // the turn's own doing, not what the host asked for.
                if let Some(mode) = line.permission_mode {
                    *lock(&shared.permission_mode) = Some(mode);
                }
            }
            if let Some(id) = &line.session_id {
                let mut current = lock(&shared.session_id);
                if current.as_deref() != Some(id) {
                    debug!(session_id = %id, "CLI reported a session id.");
                    *current = Some(id.clone());
                }
            }
            // Even a line with no events says the CLI is alive (a long thinking phase is silent
            // otherwise).
            let events = TurnLine::Events(line.events, line.model_call);
            if let Runner::Own(tx) = &*lock(&shared.runner) {
                let _ = tx.send(events);
                return;
            }
            if let Some(tx) = lock(&shared.turn).as_ref() {
                let _ = tx.send(events);
            }
        }
        CliMessage::Mirror(frame) => {
            trace!(file = %frame.file_path, entries = frame.entries.len(), "Transcript mirrored.");
            shared.mirror_frames.fetch_add(1, Ordering::SeqCst);
            if let Some(mirror) = lock(&shared.mirror).as_ref() {
                // Nobody listening: the host does not keep transcripts.
                let _ = mirror.send(frame);
            }
        }
        CliMessage::Ignored => {}
    }
}

/// A `command_lifecycle` line: a `started` command is our turn when it names the uuid we wrote,
/// else a turn the CLI starts by itself.
fn started_command(shared: &Arc<Shared>, lifecycle: Lifecycle) {
    shared.reports_lifecycle.store(true, Ordering::SeqCst);
    if lifecycle.state != "started" {
        return;
    }
    let ours = lock(&shared.written).as_deref() == Some(lifecycle.command_uuid.as_str());
    if ours {
        *lock(&shared.runner) = Runner::Ours;
    } else {
        let source = lifecycle.wakeup_source.unwrap_or_else(|| "cli".to_owned());
        begin_cli_turn(shared, source);
    }
}

/// A `system/init`: the CLI starts a turn. With no command started before it, it is one the CLI
/// starts by itself (a background task's notice has no lifecycle line), unless this CLI reports
/// no lifecycle at all and a turn of ours is written.
fn started_turn(shared: &Arc<Shared>) {
    let idle = matches!(*lock(&shared.runner), Runner::Idle);
    if idle {
        let ours =
            lock(&shared.written).is_some() && !shared.reports_lifecycle.load(Ordering::SeqCst);
        if ours {
            *lock(&shared.runner) = Runner::Ours;
        } else {
            begin_cli_turn(shared, "task_notification".to_owned());
        }
    }
    if matches!(*lock(&shared.runner), Runner::Ours) {
        shared.phase.send_if_modified(|phase| {
            let queued = *phase == TurnPhase::Queued;
            if queued {
                *phase = TurnPhase::Running;
            }
            queued
        });
    }
}

/// Routes the lines from here to the turn's `result` into a turn of its own, handed to the host.
/// A host that does not take them leaves the process unpaired.
fn begin_cli_turn(shared: &Arc<Shared>, source: String) {
    let (tx, rx) = mpsc::unbounded_channel();
    *lock(&shared.runner) = Runner::Own(tx);
    let events = TurnEvents {
        tools: HashMap::new(),
        rx,
        buffered: VecDeque::new(),
        shared: shared.clone(),
        exit: shared.exit.clone(),
        ours: None,
    };
    debug!(%source, "The CLI started a turn of its own.");
    let taken = lock(&shared.cli_turns)
        .as_ref()
        .is_some_and(|host| host.send(CliTurn { source, events }).is_ok());
    if !taken {
        warn!(
            "The CLI started a turn of its own and nobody takes it; the process no longer pairs."
        );
        shared.unpaired.send_replace(true);
    }
}
