//! The end of a turn, as a table: each row a turn's facts and what they must come to.

use serde_json::json;

use super::*;
use crate::budget::BudgetKind;

fn result(line: serde_json::Value) -> TurnResult {
    serde_json::from_value(line).expect("a result line")
}

fn finished() -> Result<TurnResult, TurnError> {
    Ok(result(json!({
        "subtype": "success", "is_error": false, "result": "hi", "session_id": "s-result",
        "structured_output": {"n": 1}
    })))
}

fn failed() -> Result<TurnResult, TurnError> {
    Ok(result(json!({
        "subtype": "success", "is_error": true, "result": "API Error: 529 overloaded"
    })))
}

fn aborted() -> Result<TurnResult, TurnError> {
    Ok(result(json!({
        "subtype": "error_during_execution", "is_error": true, "terminal_reason": "aborted_streaming"
    })))
}

fn gave_up() -> Result<TurnResult, TurnError> {
    Ok(result(json!({
        "subtype": "error_max_structured_output_retries", "is_error": true
    })))
}

fn exceeded() -> BudgetExceeded {
    BudgetExceeded {
        budget: BudgetKind::Thread,
        limit_usd: 1.0,
        spent_usd: 1.2,
    }
}

fn usage() -> Usage {
    Usage {
        cost_usd: 0.25,
        ..Usage::default()
    }
}

fn facts(started: Started, ran: Ran) -> Facts<'static> {
    Facts {
        started,
        ran,
        stopped_by: None,
        usage: Some(usage()),
        session: Some(CliSessionId::from_string("s-lease")),
        model: Some("claude-x".into()),
        schema: None,
        timeout: Duration::from_secs(600),
        shutting_down: false,
    }
}

use Started::{ByCli, ByMessage};

/// What a row must come to: the stored cause, the process's fate, the caller's status (`None`:
/// a reply), and the session the ending stores.
struct Row {
    name: &'static str,
    facts: Facts<'static>,
    cause: EndCause,
    finish: Option<Finish>,
    status: Option<MessageStatus>,
    session: Option<&'static str>,
}

fn row(
    name: &'static str,
    facts: Facts<'static>,
    cause: EndCause,
    finish: Option<Finish>,
    status: Option<MessageStatus>,
    session: Option<&'static str>,
) -> Row {
    Row {
        name,
        facts,
        cause,
        finish,
        status,
        session,
    }
}

static SCHEMA: std::sync::LazyLock<serde_json::Value> = std::sync::LazyLock::new(
    || json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}),
);
static OTHER_SCHEMA: std::sync::LazyLock<serde_json::Value> =
    std::sync::LazyLock::new(|| json!({"type": "object", "required": ["m"]}));

fn sent(result: Result<TurnResult, TurnError>) -> Ran {
    Ran::Sent(Box::new(result))
}

fn stopped(mut f: Facts<'static>) -> Facts<'static> {
    f.stopped_by = Some(exceeded());
    f
}

fn with_schema(mut f: Facts<'static>, schema: &'static serde_json::Value) -> Facts<'static> {
    f.schema = Some(schema);
    f
}

fn shutting(mut f: Facts<'static>) -> Facts<'static> {
    f.shutting_down = true;
    f
}

fn rows() -> Vec<Row> {
    [
        finished_rows(),
        failed_rows(),
        unsent_rows(),
        refused_rows(),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Turns that finished: kept, their output checked against the schema.
fn finished_rows() -> Vec<Row> {
    use EndCause as C;
    use Finish::Keep;
    use MessageStatus as S;
    vec![
        row(
            "a finished turn keeps its process and its result's session",
            facts(ByMessage, sent(finished())),
            C::Done,
            Some(Keep),
            None,
            Some("s-result"),
        ),
        row(
            "a finished CLI turn is stored the same",
            facts(ByCli, sent(finished())),
            C::Done,
            Some(Keep),
            None,
            Some("s-result"),
        ),
        row(
            "a finished turn whose output matches the schema",
            with_schema(facts(ByMessage, sent(finished())), &SCHEMA),
            C::Done,
            Some(Keep),
            None,
            Some("s-result"),
        ),
        row(
            "an output that does not match the schema fails, the process kept",
            with_schema(facts(ByMessage, sent(finished())), &OTHER_SCHEMA),
            C::Error,
            Some(Keep),
            Some(S::Error),
            None,
        ),
        row(
            "the CLI gave up on the schema: the process is fine",
            facts(ByMessage, sent(gave_up())),
            C::Error,
            Some(Keep),
            Some(S::Error),
            None,
        ),
    ]
}

/// Turns the CLI ran that failed: what becomes of the process, and of the session.
fn failed_rows() -> Vec<Row> {
    use EndCause as C;
    use Finish::{Discard, Keep};
    use MessageStatus as S;
    vec![
        row(
            "an interrupted turn keeps its process",
            facts(ByMessage, sent(aborted())),
            C::Interrupted,
            Some(Keep),
            Some(S::Interrupted),
            None,
        ),
        row(
            "a failed result lets the process go",
            facts(ByMessage, sent(failed())),
            C::Error,
            Some(Discard),
            Some(S::Error),
            None,
        ),
        row(
            "a failed CLI turn keeps its session",
            facts(ByCli, sent(failed())),
            C::Error,
            Some(Discard),
            Some(S::Error),
            Some("s-lease"),
        ),
        row(
            "too many tool calls: stopped by an interrupt, the process kept",
            facts(ByMessage, sent(Err(TurnError::ToolCallLimit(3)))),
            C::Error,
            Some(Keep),
            Some(S::Error),
            None,
        ),
        row(
            "a timeout lets the process go",
            facts(ByMessage, sent(Err(TurnError::TurnTimeout(Duration::ZERO)))),
            C::Error,
            Some(Discard),
            Some(S::Error),
            None,
        ),
        row(
            "a process that died during shutdown is shutdown's doing",
            shutting(facts(ByMessage, sent(Err(TurnError::Cli("gone".into()))))),
            C::Shutdown,
            Some(Discard),
            Some(S::Interrupted),
            None,
        ),
        row(
            "a result for another message: interrupted, the process let go",
            facts(
                ByMessage,
                sent(Err(TurnError::Process(claude_cli::CliError::Unpaired {
                    got: vec![],
                }))),
            ),
            C::Interrupted,
            Some(Discard),
            Some(S::Interrupted),
            None,
        ),
    ]
}

/// Turns that never reached the CLI: a process they had stays warm.
fn unsent_rows() -> Vec<Row> {
    use EndCause as C;
    use Finish::Keep;
    use MessageStatus as S;
    vec![
        row(
            "interrupted while it waited for a permit: the process stays warm",
            facts(
                ByMessage,
                Ran::Unsent {
                    error: TurnError::Interrupted,
                    leased: true,
                },
            ),
            C::Interrupted,
            Some(Keep),
            Some(S::Interrupted),
            None,
        ),
        row(
            "a checkout that failed leaves no process to finish",
            facts(
                ByMessage,
                Ran::Unsent {
                    error: TurnError::Cli("no spawn".into()),
                    leased: false,
                },
            ),
            C::Error,
            None,
            Some(S::Error),
            None,
        ),
        row(
            "withdrawn from the line",
            facts(
                ByMessage,
                Ran::NotStarted {
                    cause: C::Withdrawn,
                    reason: "withdrawn".into(),
                    error: TurnError::Interrupted,
                },
            ),
            C::Withdrawn,
            None,
            Some(S::Interrupted),
            None,
        ),
    ]
}

/// Turns a budget refused, before they ran or half-way.
fn refused_rows() -> Vec<Row> {
    use EndCause as C;
    use Finish::{Discard, Keep};
    use MessageStatus as S;
    vec![
        row(
            "refused as it started",
            facts(
                ByMessage,
                Ran::Refused {
                    exceeded: exceeded(),
                    leased: false,
                },
            ),
            C::Refused,
            None,
            Some(S::Refused),
            None,
        ),
        row(
            "refused once it had its process: kept warm",
            facts(
                ByMessage,
                Ran::Refused {
                    exceeded: exceeded(),
                    leased: true,
                },
            ),
            C::Refused,
            Some(Keep),
            Some(S::Refused),
            None,
        ),
        row(
            "a refused CLI turn lets its process go, its session kept",
            facts(
                ByCli,
                Ran::Refused {
                    exceeded: exceeded(),
                    leased: true,
                },
            ),
            C::Refused,
            Some(Discard),
            Some(S::Refused),
            Some("s-lease"),
        ),
        row(
            "stopped by the gateway: refused, the process as its result says",
            stopped(facts(ByMessage, sent(aborted()))),
            C::Refused,
            Some(Keep),
            Some(S::Refused),
            None,
        ),
        row(
            "stopped by the gateway, a failed result",
            stopped(facts(ByMessage, sent(failed()))),
            C::Refused,
            Some(Discard),
            Some(S::Refused),
            None,
        ),
        row(
            "a CLI turn stopped by the gateway lets its process go",
            stopped(facts(ByCli, sent(aborted()))),
            C::Refused,
            Some(Discard),
            Some(S::Refused),
            Some("s-lease"),
        ),
        row(
            "a turn that finished keeps its reply though a side request was refused",
            stopped(facts(ByMessage, sent(finished()))),
            C::Done,
            Some(Keep),
            None,
            Some("s-result"),
        ),
    ]
}

#[test]
fn each_turn_ends_as_its_row_says() {
    for row in rows() {
        let Conclusion {
            ending,
            finish,
            answer,
        } = conclude(row.facts);
        let name = row.name;
        assert_eq!(ending.cause, row.cause, "{name}: cause");
        assert_eq!(finish, row.finish, "{name}: finish");
        let status = match &answer {
            Answer::Reply { .. } => None,
            Answer::Failed { status, .. } => Some(*status),
            Answer::Refused(_) => Some(MessageStatus::Refused),
        };
        assert_eq!(status, row.status, "{name}: answer {answer:?}");
        assert_eq!(
            ending.session.as_ref().map(CliSessionId::as_str),
            row.session,
            "{name}: session"
        );
        assert_eq!(
            ending.cause == EndCause::Done,
            ending.reply.is_some(),
            "{name}: a reply exactly when done"
        );
        if ending.cause == EndCause::Refused {
            assert!(
                ending.budget.is_some(),
                "{name}: the refusal names its budget"
            );
        }
    }
}

#[test]
fn a_reply_carries_the_model_and_the_checked_output() {
    let mut f = facts(ByMessage, Ran::Sent(Box::new(finished())));
    f.schema = Some(&SCHEMA);
    let reply = conclude(f).ending.reply.expect("a reply");
    assert_eq!(reply.text, "hi");
    assert_eq!(reply.model.as_deref(), Some("claude-x"));
    assert_eq!(reply.structured_output, Some(json!({"n": 1})));
}

#[test]
fn a_timeout_names_the_total_the_user_set_and_spending_is_kept() {
    let c = conclude(facts(
        ByMessage,
        Ran::Sent(Box::new(Err(TurnError::TurnTimeout(Duration::ZERO)))),
    ));
    let Answer::Failed { error, .. } = c.answer else {
        panic!("a failure");
    };
    assert!(
        matches!(error, TurnError::TurnTimeout(t) if t == Duration::from_secs(600)),
        "{error:?}"
    );
    assert_eq!(c.ending.usage.map(|u| u.cost_usd), Some(0.25));
}

#[test]
fn a_result_without_a_session_keeps_the_processs() {
    let line = result(json!({"subtype": "success", "is_error": false, "result": "hi"}));
    let c = conclude(facts(ByMessage, Ran::Sent(Box::new(Ok(line)))));
    assert_eq!(
        c.ending.session.as_ref().map(CliSessionId::as_str),
        Some("s-lease")
    );
}
