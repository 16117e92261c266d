//! [`TurnError`]: why a turn got no reply. Each variant maps to one HTTP status in
//! `http::error`.

use std::time::Duration;

use claude_cli::CliError;

#[derive(Clone, Debug, thiserror::Error)]
pub enum TurnError {
    /// The process could not be started, did not become ready, died mid-turn or refused a
    /// request: the API answers 503 (not started, not ready) or 502.
    #[error(transparent)]
    Process(#[from] CliError),
    /// No output from the CLI for too long. The API answers 504.
    #[error("the claude CLI sent nothing for {0:?}; the turn was abandoned")]
    IdleTimeout(Duration),
    /// The whole turn took too long. The API answers 504.
    #[error("the turn did not finish within {0:?}")]
    TurnTimeout(Duration),
    /// The CLI ended the turn with an error (API failure, max turns, …). The text is the CLI's.
    /// The API answers 502.
    #[error("the claude CLI reported an error: {0}")]
    Cli(String),
    /// The model asked for more tool calls in one turn than `turn.max_tool_calls` allows; the
    /// turn was stopped. The API answers 502.
    #[error(
        "the turn was stopped after more than {0} tool calls (turn.max_tool_calls, or the \
         profile's max_tool_calls)"
    )]
    ToolCallLimit(u32),
    /// The thread has an `outputSchema` and the turn ended without a value matching it (the CLI
    /// gave up: `error_max_structured_output_retries`; no `StructuredOutput` call; a value that
    /// does not match). The API answers 502.
    #[error("no valid structured output: {0}")]
    StructuredOutput(String),
    /// The turn was interrupted on request. The API answers 409.
    #[error("the turn was interrupted")]
    Interrupted,
    /// The daemon is shutting down. The API answers 503.
    #[error("the daemon is shutting down")]
    ShuttingDown,
    /// The thread's workspace is not on this node and cannot be made again here; the turn was
    /// not run (never in another folder). The API answers 409.
    #[error("{0}")]
    WorkspaceUnavailable(String),
    /// The thread's profile is no longer configured; the turn was not run (never with another
    /// profile's powers). The API answers 409.
    #[error("{0}")]
    ProfileUnavailable(String),
    /// The thread's walls stopped its process (its memory limit, say): the CLI itself had grown
    /// past it. The next turn starts a fresh process. The API answers 502.
    #[error("the thread's process was {0}")]
    WallLimit(String),
    /// The images or documents of the prompt could not be read back from the store; the turn
    /// was not run. The API answers 500.
    #[error("the files of the message could not be read: {0}")]
    Files(String),
}

/// The CLI's error text as clients see it: the addresses in it (`host:port`, URLs) replaced by
/// `<address>`, since they name the daemon's model endpoint (`check your inference gateway
/// (127.0.0.1:35055)`). The daemon's log keeps the text whole.
pub fn for_clients(reason: &str) -> String {
    let mut out = String::with_capacity(reason.len());
    let mut rest = reason;
    while !rest.is_empty() {
        let word_end = rest.find(char::is_whitespace).unwrap_or(rest.len());
        let (word, tail) = rest.split_at(word_end);
        let space_end = tail
            .find(|c: char| !c.is_whitespace())
            .unwrap_or(tail.len());
        let (space, next) = tail.split_at(space_end);
        out.push_str(&hide_address(word));
        out.push_str(space);
        rest = next;
    }
    out
}

/// `word` with an address in it replaced, its surrounding punctuation kept.
fn hide_address(word: &str) -> std::borrow::Cow<'_, str> {
    let is_edge = |c: char| "(){}<>,;.!?'\"`".contains(c);
    let core = word.trim_start_matches(is_edge).trim_end_matches(is_edge);
    let is_url = core.contains("://");
    let is_host_port = core.rsplit_once(':').is_some_and(|(host, port)| {
        !port.is_empty()
            && port.bytes().all(|b| b.is_ascii_digit())
            && !host.is_empty()
            && host
                .bytes()
                .any(|b| b == b'.' || b.is_ascii_alphabetic() || b == b']')
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b".-[]:".contains(&b))
    });
    if core.is_empty() || !(is_url || is_host_port) {
        return std::borrow::Cow::Borrowed(word);
    }
    let start = word.len() - word.trim_start_matches(is_edge).len();
    let end = start + core.len();
    std::borrow::Cow::Owned(format!("{}<address>{}", &word[..start], &word[end..]))
}

#[cfg(test)]
mod tests {
    use super::for_clients;

    #[test]
    fn addresses_in_the_clis_text_are_hidden_from_clients() {
        assert_eq!(
            for_clients(
                "API Error: 529 mock 529. This is a server-side issue — try again. If it \
                 persists, check your inference gateway (127.0.0.1:35055)."
            ),
            "API Error: 529 mock 529. This is a server-side issue — try again. If it \
             persists, check your inference gateway (<address>)."
        );
        assert_eq!(
            for_clients("Unable to connect to https://api.internal:8443/v1/messages, retrying"),
            "Unable to connect to <address>, retrying"
        );
        assert_eq!(for_clients("at [::1]:9000"), "at <address>");
        assert_eq!(for_clients("gateway localhost:3000."), "gateway <address>.");
        // Not addresses: times, ratios, the error's own colon.
        let kept = "API Error: Request rejected (429) at 10:30, ratio 3:2";
        assert_eq!(for_clients(kept), kept);
    }
}
