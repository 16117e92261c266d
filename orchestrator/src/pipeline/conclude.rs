//! The end of a turn as one pure function: from how far the turn got and what it came to
//! ([`Facts`]) to what is stored (the [`Ending`]), what becomes of its process ([`Finish`])
//! and what its caller hears ([`Answer`]). Every source of turns (a user's message, a re-drive,
//! a turn the CLI started by itself) ends here; where they differ, the arm says so.

use std::time::Duration;

use claude_cli::TurnResult;
use plugin_contract::CliSessionId;

use crate::budget::BudgetExceeded;
use crate::events::{Ending, Reply};
use crate::pool::Finish;
use crate::store::{EndCause, MessageStatus, Usage};
use crate::turn_error::TurnError;

/// Whether a person's message or the CLI itself started the turn: they end alike, except that a
/// CLI-started turn keeps its session when it fails and lets its process go when a budget
/// refuses it (with it go the session's crons and background tasks, which would start the next
/// such turn; a message to a thread over budget is refused before any process starts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Started {
    /// A message (from the API, `/mcp`, a delegation, a schedule), or its re-drive.
    ByMessage,
    /// The CLI started it on the thread's warm process.
    ByCli,
}

/// How far a turn got.
#[derive(Debug)]
pub(super) enum Ran {
    /// It never started: withdrawn from the line, the thread archived or the daemon stopping
    /// while it waited.
    NotStarted {
        cause: EndCause,
        reason: String,
        error: TurnError,
    },
    /// A budget refused it before anything reached the CLI; `leased`: it had a process.
    Refused {
        exceeded: BudgetExceeded,
        leased: bool,
    },
    /// It stopped before its prompt reached a process; `leased`: it had checked one out, which
    /// it did not use.
    Unsent { error: TurnError, leased: bool },
    /// The CLI ran it: its `result`, or why none came.
    Sent(Box<Result<TurnResult, TurnError>>),
}

/// What a turn came to.
#[derive(Debug)]
pub(super) struct Facts<'a> {
    pub(super) started: Started,
    pub(super) ran: Ran,
    /// A budget the model gateway found spent during the turn (it refused a model request).
    pub(super) stopped_by: Option<BudgetExceeded>,
    /// What it cost, metered.
    pub(super) usage: Option<Usage>,
    /// The CLI session its process reports.
    pub(super) session: Option<CliSessionId>,
    /// The model it asked for.
    pub(super) model: Option<String>,
    /// The thread's `outputSchema`: a finished turn's structured output must match it.
    pub(super) schema: Option<&'a serde_json::Value>,
    /// Its total time bound, as the user set it.
    pub(super) timeout: Duration,
    /// Shutdown has begun: a failure is shutdown's doing.
    pub(super) shutting_down: bool,
}

/// What its caller hears of a turn, once its ending is stored.
#[derive(Debug)]
pub(super) enum Answer {
    /// It finished; the stored reply is the answer. `api_calls`: the model round trips it took.
    Reply {
        session: Option<CliSessionId>,
        api_calls: u64,
    },
    /// It failed, ending its message with `status`.
    Failed {
        status: MessageStatus,
        error: TurnError,
    },
    /// A budget refused it, before it ran or half-way.
    Refused(BudgetExceeded),
}

/// The end of a turn.
#[derive(Debug)]
pub(super) struct Conclusion {
    pub(super) ending: Ending,
    /// What becomes of its process; `None`: it had none.
    pub(super) finish: Option<Finish>,
    pub(super) answer: Answer,
}

/// A finished turn's reply, before it is stored.
struct Done {
    text: String,
    structured_output: Option<serde_json::Value>,
    session: Option<CliSessionId>,
    api_calls: u64,
}

/// The end of the turn `facts` describe.
pub(super) fn conclude(facts: Facts<'_>) -> Conclusion {
    let by_cli = facts.started == Started::ByCli;
    // A failed turn of a message keeps no session: the thread's stays the last finished one's.
    let kept = if by_cli { facts.session.clone() } else { None };
    let (outcome, finish) = match facts.ran {
        Ran::NotStarted {
            cause,
            reason,
            error,
        } => {
            return Conclusion {
                ending: Ending::failed(cause, reason),
                finish: None,
                answer: Answer::Failed {
                    status: cause.status(),
                    error,
                },
            };
        }
        Ran::Refused { exceeded, leased } => {
            let finish = match (by_cli, leased) {
                (true, _) => Some(Finish::Discard),
                // Refused once it had its process: the process was not used and stays warm.
                (false, true) => Some(Finish::Keep),
                (false, false) => None,
            };
            return Conclusion {
                ending: Ending::refused(exceeded.clone()).with_spending(kept, facts.usage),
                finish,
                answer: Answer::Refused(exceeded),
            };
        }
        Ran::Unsent { error, leased } => (Err(error), leased.then_some(Finish::Keep)),
        Ran::Sent(result) => {
            let (outcome, finish) = ran(*result, facts.schema, facts.timeout);
            (outcome, Some(finish))
        }
    };
    match (outcome, facts.stopped_by) {
        // A budget ran out during the turn: the gateway refused a model request, and the CLI
        // ended the turn (a turn that still finished, its refused request a side one, keeps its
        // reply).
        (Err(_), Some(exceeded)) => Conclusion {
            ending: Ending::stopped(exceeded.clone()).with_spending(kept, facts.usage),
            finish: if by_cli {
                Some(Finish::Discard)
            } else {
                finish
            },
            answer: Answer::Refused(exceeded),
        },
        (Ok(done), _) => {
            let session = done.session.or(facts.session);
            let reply = Reply {
                text: done.text,
                model: facts.model,
                structured_output: done.structured_output,
            };
            Conclusion {
                ending: Ending::done(reply, session.clone(), facts.usage),
                finish,
                answer: Answer::Reply {
                    session,
                    api_calls: done.api_calls,
                },
            }
        }
        (Err(error), None) => {
            let (cause, error) = cause_of(error, facts.shutting_down);
            let ending = Ending::failed(cause, error.to_string()).with_spending(kept, facts.usage);
            Conclusion {
                ending,
                finish,
                answer: Answer::Failed {
                    status: cause.status(),
                    error,
                },
            }
        }
    }
}

/// What the CLI's `result` (or the lack of one) makes of the turn, and of its process.
fn ran(
    result: Result<TurnResult, TurnError>,
    schema: Option<&serde_json::Value>,
    timeout: Duration,
) -> (Result<Done, TurnError>, Finish) {
    match result {
        Ok(result) if !result.is_error => {
            let structured_output = match schema {
                Some(schema) => match structured(schema, result.structured_output) {
                    Ok(output) => Some(output),
                    Err(err) => return (Err(err), Finish::Keep),
                },
                None => None,
            };
            let done = Done {
                text: result.text.unwrap_or_default(),
                structured_output,
                session: result.session_id.map(CliSessionId::from_string),
                api_calls: result.num_turns,
            };
            (Ok(done), Finish::Keep)
        }
        // The model failed the schema; the process itself is fine.
        Ok(result) if result.subtype == "error_max_structured_output_retries" => (
            Err(TurnError::StructuredOutput(format!(
                "the CLI gave up (error_max_structured_output_retries): {}",
                result.error_reason()
            ))),
            Finish::Keep,
        ),
        // An interrupt: the process stays usable.
        Ok(result) if result.was_interrupted() => (Err(TurnError::Interrupted), Finish::Keep),
        // Also after an API failure (a 529 once the CLI's retries ran out), though the process
        // is healthy: kept, it sends the failed prompt again merged into the next one (measured:
        // the next request's last user text held both), while a process that resumes the
        // session sends only the new prompt.
        Ok(result) => {
            let reason = crate::turn_error::for_clients(&result.error_reason());
            (Err(TurnError::Cli(reason)), Finish::Discard)
        }
        // Stopped by an interrupt: the process stays usable.
        Err(err @ TurnError::ToolCallLimit(_)) => (Err(err), Finish::Keep),
        // The turn only knows its deadline; the user set (and should read) the total.
        Err(TurnError::TurnTimeout(_)) => (Err(TurnError::TurnTimeout(timeout)), Finish::Discard),
        Err(err) => (Err(err), Finish::Discard),
    }
}

/// Why a failed turn ended, and the error its caller reads.
fn cause_of(error: TurnError, shutting_down: bool) -> (EndCause, TurnError) {
    match error {
        // A turn that met a result for another message (a turn the CLI started by itself) never
        // ran as asked: it may be sent again, and runs on a new process.
        TurnError::Interrupted | TurnError::Process(claude_cli::CliError::Unpaired { .. }) => {
            (EndCause::Interrupted, error)
        }
        // Killed by shutdown (the process death is only how): the user did nothing wrong and may
        // send it again.
        TurnError::ShuttingDown => (EndCause::Shutdown, error),
        _ if shutting_down => (EndCause::Shutdown, TurnError::ShuttingDown),
        other => (EndCause::Error, other),
    }
}

/// The turn's structured output, checked against the thread's schema.
fn structured(
    schema: &serde_json::Value,
    output: Option<serde_json::Value>,
) -> Result<serde_json::Value, TurnError> {
    let Some(output) = output else {
        return Err(TurnError::StructuredOutput(
            "the model answered without calling StructuredOutput".into(),
        ));
    };
    let compiled =
        crate::mcp::schema::OutputSchema::compile(schema).map_err(TurnError::StructuredOutput)?;
    compiled.check(&output).map_err(|problems| {
        TurnError::StructuredOutput(format!(
            "the output does not match outputSchema: {problems}"
        ))
    })?;
    Ok(output)
}

#[cfg(test)]
mod tests;
