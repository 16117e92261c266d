//! `/v1/sessions/{id}/events`: what a client sends (a message, an interrupt, the answer to a
//! tool that asked), and the session's events, listed by page or streamed as Server-Sent
//! Events, both projected from the thread's stored events ([`super::events::project`]).
//!
//! - `user.message` is a message to the thread ([`ThreadService::send`]), not waited for: its
//!   turn's events follow on the stream. Its event id names its message (`sevt_msg_…`).
//! - `user.interrupt` interrupts the running turn ([`ThreadService::interrupt`]) and the
//!   goal under way ([`crate::goals::Goals::interrupt`]).
//! - `user.tool_confirmation` answers the permission the tool use (`sevt_tu_…`) waits for
//!   ([`crate::approvals`]).
//! - `user.define_outcome` sets a goal ([`crate::goals`]): the session works on it, a grader
//!   grades it, and it iterates until the grader is satisfied or out of iterations. Its event
//!   id names the goal (`sevt_outc_…`); a rubric file is read as UTF-8 text.
//! - `user.custom_tool_result` answers the call to a custom tool (`sevt_tu_…`) that waits for
//!   it ([`crate::mcp::ClientCalls`]); its echo is `sevt_tr_…`, the id the stored record of the
//!   answer gets too.
//!
//! The stream is the SDKs' kind: each frame has an `event:` line (the event's `type`), its JSON
//! on one `data:` line and its `id:`; it carries what happens after it opens (the SDKs list
//! the history and open a new stream to resume), and keeps idle connections open with
//! comments.
//!
//! [`ThreadService::send`]: crate::service::ThreadService::send
//! [`ThreadService::interrupt`]: crate::service::ThreadService::interrupt

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::{Extension, Json};
use futures::{Stream, StreamExt};
use serde::Serialize;

use super::agents;
use super::error::ManagedError;
use super::events::user_message_event_id;
use super::events::wire::{Confirmation, Content, Rubric};
use super::events::{event_type, goal_event_id, tool_result_event_id, tool_use_of};
use super::events::{EventParams, Frame, Reader, SendEvents, SessionEvent};
use super::lists::{limit_of, Body};
use super::{ids, profile, sessions, ManagedState, TAG};
use crate::api::threads::PostMessage;
use crate::approvals::Answer;
use crate::caller::Caller;
use crate::goals::{NewGoalSpec, DEFAULT_ITERATIONS};
use crate::mcp::ClientAnswer;
use crate::service::SendMessage;
use crate::store::{EventRow, Fence, ManagedKind, SessionRow};
use rmcp::model::ContentBlock;

/// What `POST …/events` answers: the events sent, as stored.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Sent {
    pub data: Vec<SessionEvent>,
}

/// Sends events to the session, in order.
#[utoipa::path(post, path = "/sessions/{session_id}/events", operation_id = "sendSessionEvents", tag = TAG,
    params(("session_id" = String, Path, description = "`sesn_…`")),
    request_body = SendEvents,
    responses((status = 200, description = "The events, as stored.", body = Sent)))]
pub async fn send(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    fence: Option<Extension<Fence>>,
    Body(body): Body<SendEvents>,
) -> Result<Json<Sent>, ManagedError> {
    let session = sessions::visible(&state, &caller, &id).await?;
    if body.events.is_empty() {
        return Err(ManagedError::invalid("events: at least one"));
    }
    let fence = fence.map(|Extension(fence)| fence);
    let data = send_all(&state, &caller, &session, body.events, fence).await?;
    Ok(Json(Sent { data }))
}

/// Sends each of `events` to the session's thread (`fence`: this node's lease on it, when
/// clustered); the events as echoed.
pub async fn send_all(
    state: &ManagedState,
    caller: &Caller,
    session: &SessionRow,
    events: Vec<EventParams>,
    fence: Option<Fence>,
) -> Result<Vec<SessionEvent>, ManagedError> {
    let mut sent = Vec::with_capacity(events.len());
    for event in events {
        sent.push(send_one(state, caller, session, event, fence.clone()).await?);
    }
    Ok(sent)
}

async fn send_one(
    state: &ManagedState,
    caller: &Caller,
    session: &SessionRow,
    event: EventParams,
    fence: Option<Fence>,
) -> Result<SessionEvent, ManagedError> {
    let thread = &session.thread_id;
    let id = match &event {
        EventParams::UserMessage { content } => {
            sessions::ensure_profile(state, session).await?;
            let content = serde_json::to_value(content)
                .and_then(serde_json::from_value)
                .map_err(|err| ManagedError::invalid(format!("user.message: {err}")))?;
            let message = SendMessage {
                thread: thread.clone(),
                body: PostMessage {
                    content,
                    client_message_id: None,
                    model: None,
                    permission_mode: None,
                    mcp_servers: None,
                },
                fence,
                traceparent: None,
            };
            let accepted = state.threads.send(caller, message).await?;
            user_message_event_id(accepted.message_id.as_str())
        }
        EventParams::UserInterrupt {} => {
            state.goals.interrupt(thread);
            state.threads.interrupt(caller, thread, None).await?;
            ids::generate("sevt")
        }
        EventParams::UserToolConfirmation {
            tool_use_id,
            result,
            deny_message,
        } => {
            confirm(state, caller, thread, tool_use_id, result, deny_message).await?;
            ids::generate("sevt")
        }
        EventParams::UserCustomToolResult {
            custom_tool_use_id,
            content,
            is_error,
        } => {
            let tool_use =
                answer_custom_tool(state, thread, custom_tool_use_id, content, *is_error).await?;
            tool_result_event_id(tool_use)
        }
        EventParams::UserDefineOutcome {
            description,
            rubric,
            max_iterations,
        } => {
            sessions::ensure_profile(state, session).await?;
            let spec = NewGoalSpec {
                id: ids::generate("outc"),
                description: description.clone(),
                rubric: rubric_text(state, caller, rubric).await?,
                max_iterations: max_iterations.map_or(DEFAULT_ITERATIONS, i64::from),
            };
            let goal = state.goals.set(caller, thread, spec).await?;
            return Ok(SessionEvent {
                id: goal_event_id(&goal.id),
                processed_at: None,
                body: event.into_body(|| goal.id.clone()),
            });
        }
    };
    Ok(SessionEvent {
        id,
        processed_at: None,
        body: event.into_body(|| ids::generate("outc")),
    })
}

/// A rubric's text: as given, or the caller's uploaded file's, read as UTF-8.
async fn rubric_text(
    state: &ManagedState,
    caller: &Caller,
    rubric: &Rubric,
) -> Result<String, ManagedError> {
    let file_id = match rubric {
        Rubric::Text { content } => return Ok(content.clone()),
        Rubric::File { file_id } => file_id,
    };
    let bytes = super::files::read(state, caller, file_id).await?;
    String::from_utf8(bytes)
        .map_err(|_| ManagedError::invalid(format!("rubric: file {file_id} is not UTF-8 text")))
}

/// Answers the permission the tool use `event` (`sevt_tu_…`) waits for.
async fn confirm(
    state: &ManagedState,
    caller: &Caller,
    thread: &plugin_contract::ThreadId,
    event: &str,
    result: &Confirmation,
    deny_message: &Option<String>,
) -> Result<(), ManagedError> {
    // As `/api`'s answer to a permission: a person's decision needs its own scope.
    if !caller.has(crate::caller::Scope::Approvals) {
        return Err(ManagedError::new(
            axum::http::StatusCode::FORBIDDEN,
            "user.tool_confirmation needs the scope `approvals`, which the caller's key does not have",
        ));
    }
    let tool_use = tool_use_of(event)
        .ok_or_else(|| ManagedError::invalid(format!("tool_use_id: {event} is not a tool use")))?;
    let waiting = state
        .store
        .permission_page(thread, true, None, Some(500))
        .await?;
    let request = waiting
        .iter()
        .find(|p| p.tool_use_id.as_deref() == Some(tool_use))
        .ok_or_else(|| {
            ManagedError::invalid(format!(
                "tool use {event} is not waiting for a confirmation"
            ))
        })?;
    let answer = Answer {
        allow: *result == Confirmation::Allow,
        message: deny_message.clone(),
        updated_input: None,
        always: false,
        by: caller.clone(),
    };
    state
        .pipeline
        .approvals()
        .answer(thread, &request.request_id, answer)
        .await
        .map_err(|err| ManagedError::invalid(err.to_string()))?;
    Ok(())
}

/// How long an answer to a custom tool use waits for its call to register: a client may answer
/// as soon as it reads the `agent.custom_tool_use`, which comes a moment before the CLI calls.
const CALL_REGISTERS: std::time::Duration = std::time::Duration::from_secs(2);

/// Answers the call to a custom tool that the event `event` (`sevt_tu_…`) names with
/// `content`; the model's id of the call.
async fn answer_custom_tool<'a>(
    state: &ManagedState,
    thread: &plugin_contract::ThreadId,
    event: &'a str,
    content: &Option<Vec<Content>>,
    is_error: Option<bool>,
) -> Result<&'a str, ManagedError> {
    let tool_use = tool_use_of(event).ok_or_else(|| {
        ManagedError::invalid(format!(
            "custom_tool_use_id: {event} is not a custom tool use"
        ))
    })?;
    let content = (content.iter().flatten())
        .map(|block| match block {
            Content::Text { text } => Ok(ContentBlock::text(text.clone())),
            _ => Err(ManagedError::invalid(
                "content: a custom tool's result is served as text blocks only",
            )),
        })
        .collect::<Result<_, _>>()?;
    let answer = ClientAnswer {
        content,
        is_error: is_error.unwrap_or(false),
    };
    state
        .pipeline
        .client_calls()
        .answer_within(thread, tool_use, answer, CALL_REGISTERS)
        .await
        .map_err(|_| {
            ManagedError::invalid(format!(
                "custom_tool_use_id: no custom tool use {event} of this session waits for a result"
            ))
        })?;
    Ok(tool_use)
}

/// The query of a list of events: `limit`, `page`, `types[]`, `order`.
struct EventsQuery {
    limit: i64,
    /// After this event: the `index`th of the stored row `row`.
    after: Option<(i64, usize)>,
    types: Vec<String>,
}

fn events_query(raw: Option<&str>) -> Result<EventsQuery, ManagedError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.unwrap_or(""))
        .map_err(|err| ManagedError::invalid(format!("the query: {err}")))?;
    let mut query = EventsQuery {
        limit: 1000,
        after: None,
        types: Vec::new(),
    };
    let mut limit = None;
    for (key, value) in pairs {
        match key.as_str() {
            "limit" => {
                limit = Some(value.parse().map_err(|_| {
                    ManagedError::invalid(format!("limit: {value:?} is not a number"))
                })?)
            }
            "page" => {
                query.after =
                    Some(ids::parse_event(&value).ok_or_else(|| {
                        ManagedError::invalid("page: not a cursor this list gave")
                    })?)
            }
            "types[]" | "types" => query.types.push(value),
            "order" if value == "asc" => {}
            "order" => {
                return Err(ManagedError::invalid(
                    "order: a session's events are listed oldest first (asc) only",
                ))
            }
            _ => {}
        }
    }
    if limit.is_some() {
        query.limit = limit_of(limit)?;
    }
    Ok(query)
}

/// The session's events, oldest first.
#[utoipa::path(get, path = "/sessions/{session_id}/events", operation_id = "listSessionEvents", tag = TAG,
    params(("session_id" = String, Path, description = "`sesn_…`"),
        ("limit" = Option<i64>, Query, minimum = 1, maximum = 1000, description = "At most this many (1 to 1000; default 1000)."),
        ("page" = Option<String>, Query, description = "The `next_page` of the page before."),
        ("order" = inline(Option<super::params::OldestFirst>), Query, description = "`asc`: oldest first, the only order."),
        ("types[]" = Option<Vec<String>>, Query, description = "Only events of these types.")),
    responses((status = 200, description = "A page of events.", body = inline(super::wire::Page<SessionEvent>))))]
pub async fn list(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Json<super::wire::Page<SessionEvent>>, ManagedError> {
    let session = sessions::visible(&state, &caller, &id).await?;
    let query = events_query(raw.as_deref())?;
    let asks = asker(&state, &session).await?;
    let limit = usize::try_from(query.limit).unwrap_or(usize::MAX);
    // The row of the cursor is read again, past its event.
    let mut after = query.after.map_or(0, |(row, _)| row - 1);
    let past = |row: i64, index: usize| query.after.is_none_or(|(r, i)| row > r || index > i);
    let mut data: Vec<(i64, usize, SessionEvent)> = Vec::new();
    let mut reader = Reader::new(state.store.goal_turns(&session.thread_id).await?);
    while data.len() <= limit {
        let rows = (state.store)
            .events_after(&session.thread_id, after, PAGE_ROWS)
            .await?;
        for row in &rows {
            for (index, event) in reader.events(row, &asks).into_iter().enumerate() {
                let wanted = query.types.is_empty()
                    || query.types.iter().any(|t| t == event_type(&event.body));
                if wanted && past(row.id, index) {
                    data.push((row.id, index, event));
                }
            }
        }
        match rows.last() {
            Some(last) if rows.len() == PAGE_ROWS as usize => after = last.id,
            _ => break,
        }
    }
    let more = data.len() > limit;
    data.truncate(limit);
    let next_page = more
        .then(|| {
            data.last()
                .map(|(row, index, _)| ids::after_event(*row, *index))
        })
        .flatten();
    Ok(Json(super::wire::Page {
        data: data.into_iter().map(|(_, _, event)| event).collect(),
        next_page,
    }))
}

/// How many stored events a list reads at a time.
const PAGE_ROWS: u32 = 200;

/// Whether the session's agent asks before the CLI tool `name`.
async fn asker(
    state: &ManagedState,
    session: &SessionRow,
) -> Result<impl Fn(&str) -> bool, ManagedError> {
    let agent = state
        .store
        .managed(
            ManagedKind::Agent,
            &session.agent_id,
            Some(session.agent_version),
        )
        .await?
        .ok_or_else(|| ManagedError::not_found(format!("agent {} not found", session.agent_id)))?;
    let body = agents::body_of(&agent)?;
    Ok(move |name: &str| profile::asks(&body, name))
}

/// The session's events from now on, as Server-Sent Events.
#[utoipa::path(get, path = "/sessions/{session_id}/events/stream", operation_id = "streamSessionEvents", tag = TAG,
    params(("session_id" = String, Path, description = "`sesn_…`"),
        ("event_deltas[]" = inline(Option<Vec<super::params::Previewed>>), Query, description = "`agent.message`: its previews (`event_start`, `event_delta`) before it.")),
    responses((status = 200, description = "Server-Sent Events: `event:` the type, `data:` the event.", content_type = "text/event-stream", body = SessionEvent)))]
pub async fn stream(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ManagedError> {
    let session = sessions::visible(&state, &caller, &id).await?;
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(raw.as_deref().unwrap_or(""))
        .map_err(|err| ManagedError::invalid(format!("the query: {err}")))?;
    let mut previews = false;
    for (_, kind) in pairs
        .iter()
        .filter(|(key, _)| key.starts_with("event_deltas"))
    {
        match kind.as_str() {
            "agent.message" => previews = true,
            other => {
                return Err(ManagedError::invalid(format!(
                    "event_deltas: previews of {other:?} are not served; agent.message's are"
                )))
            }
        }
    }
    let permit = state.streams.take().map_err(|full| {
        ManagedError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            full.to_string(),
        )
    })?;
    let asks = asker(&state, &session).await?;
    let follow = state.pipeline.follow_from_now(&session.thread_id).await?;
    let mut reader = Reader::new(state.store.goal_turns(&session.thread_id).await?);
    let frames = follow
        .into_stream(state.pipeline.stopping().clone())
        .flat_map(move |row: EventRow| {
            let _held = &permit;
            let frames = reader.frames(&row, &asks, previews);
            futures::stream::iter(frames.into_iter().map(frame))
        });
    Ok(Sse::new(frames).keep_alive(KeepAlive::new().interval(Duration::from_secs(15))))
}

/// One event (or preview) as its frame; a preview has no `id:` of its own.
fn frame(frame: Frame) -> Result<Event, Infallible> {
    let sse = Event::default().event(frame.kind());
    let sse = match &frame {
        Frame::Event(event) => sse.id(event.id.clone()),
        Frame::Preview(_) => sse,
    };
    Ok(sse.data(serde_json::to_string(&frame).unwrap_or_default()))
}
