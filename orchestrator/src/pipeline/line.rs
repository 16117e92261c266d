//! Stopping one caller's message, not the thread's: a message sent with a `clientMessageId`
//! can be withdrawn while it waits in its thread's line (it never runs, and the turn ahead of it
//! goes on), or interrupted once it runs ([`Pipeline::stop_message`]). An MCP client's cancel of
//! its `threads__send` uses this; interrupting the thread stopped whichever turn ran, another
//! caller's included. The messages waiting and running are part of each thread's runtime state
//! (`runtime.rs`); the turn's wait in line is its first stage (`turn.rs`).

use plugin_contract::ThreadId;

use super::runtime::ClientTurn;
use super::{Pipeline, PipelineError};

/// What [`Pipeline::stop_message`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stopped {
    /// It waited in line: it will not run.
    Withdrawn,
    /// It ran: its turn was interrupted.
    Interrupted,
    /// It neither waits nor runs (done, or not sent yet).
    Neither,
}

impl Pipeline {
    /// Stops the message `client` (its `clientMessageId`) of `thread`: withdrawn from the line,
    /// or its running turn interrupted; never another message's turn.
    pub async fn stop_message(
        &self,
        thread: &ThreadId,
        client: &str,
    ) -> Result<Stopped, PipelineError> {
        match self.inner.runtime.stop_client(thread, client) {
            ClientTurn::Withdrawn => Ok(Stopped::Withdrawn),
            ClientTurn::Running if self.interrupt(thread).await? => Ok(Stopped::Interrupted),
            ClientTurn::Running | ClientTurn::Neither => Ok(Stopped::Neither),
        }
    }
}
