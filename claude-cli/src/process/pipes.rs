//! The child's stdin and stderr: lines written in order (the `mcp_set_servers` line, which
//! holds credentials, never traced), and stderr kept as a short tail for error messages.

use std::sync::Arc;

use futures::StreamExt;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::{FramedRead, LinesCodec};
use tokio_util::sync::CancellationToken;
use tracing::{debug, trace};

use super::{lock, Shared, STDERR_TAIL_LINES};

pub(super) async fn write_stdin(
    mut stdin: tokio::process::ChildStdin,
    mut lines: mpsc::UnboundedReceiver<String>,
    cancel: CancellationToken,
) {
    loop {
        let line = tokio::select! {
            line = lines.recv() => line,
            _ = cancel.cancelled() => None,
        };
        let Some(mut line) = line else { break };
        if line.contains(r#""subtype":"mcp_set_servers""#) {
            // Its servers' environments hold credentials.
            trace!("stdin: mcp_set_servers (not shown)");
        } else {
            trace!(line = %line, "stdin");
        }
        line.push('\n');
        if let Err(err) = async {
            stdin.write_all(line.as_bytes()).await?;
            stdin.flush().await
        }
        .await
        {
            debug!(%err, "stdin closed.");
            break;
        }
    }
}

pub(super) async fn drain_stderr(
    stderr: tokio::process::ChildStderr,
    shared: Arc<Shared>,
    cancel: CancellationToken,
) {
    let mut lines = FramedRead::new(stderr, LinesCodec::new_with_max_length(64 * 1024));
    loop {
        let line = tokio::select! {
            line = lines.next() => line,
            _ = cancel.cancelled() => None,
        };
        let Some(line) = line else { break };
        let Ok(line) = line else { continue };
        debug!(line = %line, "stderr");
        let mut tail = lock(&shared.stderr_tail);
        if tail.len() == STDERR_TAIL_LINES {
            tail.pop_front();
        }
        tail.push_back(line);
    }
}
