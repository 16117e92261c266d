//! The Events extension's data, free of IO: Harness's event types (what `events/list` shows),
//! the mapping of a stored thread event to the occurrences it stands for, the cursor, and the
//! params of each method. Every case is a value test.
//!
//! - **Event types** ([`EventName`]): each is read from the thread event log (`crate::events`),
//!   which every daemon appends to: `turn.ended` (`turn_finished`, `turn_failed`),
//!   `permission.requested` (`permission_requested`), `budget.reached` (a `turn_failed` that
//!   carries the budget that refused or stopped it) and `schedule.run` (`schedule_run_started`).
//!   One stored event may stand for two occurrences (a budget's `turn_failed` is a `turn.ended`
//!   and a `budget.reached`); each subscription is to one name, so it sees one of them.
//! - **Ids.** An occurrence's `eventId` is `<event id>:<name>`: stable across polls, streams and
//!   webhook attempts, so a client deduplicates on it (and a webhook's `webhook-id` is it).
//! - **Cursor** ([`Cursor`]): the id of the last stored event a reader has been given or passed
//!   over. The event log's ids grow across threads and restarts, so one number resumes every
//!   thread; written `c1.<id>` and opaque to clients.

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::store::EventRow;

/// The extension's id: the key of `capabilities.extensions` on both sides.
pub const EXTENSION: &str = "io.modelcontextprotocol/events";

/// The `_meta` key that names the subscription a stream's notifications belong to.
pub const SUBSCRIPTION_META: &str = "io.modelcontextprotocol/subscriptionId";

/// Events a poll returns when the client names no `maxEvents`, and the most it may name.
pub const DEFAULT_MAX_EVENTS: usize = 100;
pub const MAX_EVENTS: usize = 1000;

/// A webhook subscription's life when the client names no `ttlMs`, and the longest it may ask.
pub const DEFAULT_TTL_MS: u64 = 60 * 60 * 1000;
pub const MAX_TTL_MS: u64 = 24 * 60 * 60 * 1000;

/// The event types Harness offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventName {
    /// A turn of a thread ended: with a reply (`done`) or without (`error`, `interrupted`,
    /// `refused`).
    TurnEnded,
    /// A tool waits for a person's answer (`approvals.mode = "ask"`).
    PermissionRequested,
    /// A budget refused a turn or stopped it.
    BudgetReached,
    /// A schedule sent its message to its thread.
    ScheduleRun,
}

impl EventName {
    pub const ALL: [EventName; 4] = [
        EventName::TurnEnded,
        EventName::PermissionRequested,
        EventName::BudgetReached,
        EventName::ScheduleRun,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventName::TurnEnded => "turn.ended",
            EventName::PermissionRequested => "permission.requested",
            EventName::BudgetReached => "budget.reached",
            EventName::ScheduleRun => "schedule.run",
        }
    }

    pub fn parse(name: &str) -> Option<EventName> {
        EventName::ALL.into_iter().find(|n| n.as_str() == name)
    }

    /// The stored event kinds it is read from.
    pub fn kinds(self) -> &'static [&'static str] {
        match self {
            EventName::TurnEnded => &["turn_finished", "turn_failed"],
            EventName::PermissionRequested => &["permission_requested"],
            EventName::BudgetReached => &["turn_failed"],
            EventName::ScheduleRun => &["schedule_run_started"],
        }
    }

    fn description(self) -> &'static str {
        match self {
            EventName::TurnEnded => {
                "A turn of a thread you see ended: with a reply (status `done`, `text` is the \
                 reply) or without one (`error`, `interrupted`, `refused`; `cause` and `error` \
                 say why)."
            }
            EventName::PermissionRequested => {
                "A tool of a thread you see waits for a person to allow or deny it \
                 (POST /api/threads/{threadId}/permissions/{requestId} answers)."
            }
            EventName::BudgetReached => {
                "A budget (the thread's, the key's or the daily one) refused a turn of a thread \
                 you see, or stopped it."
            }
            EventName::ScheduleRun => "A schedule sent its message to a thread you see.",
        }
    }

    /// What its `data` holds.
    fn payload_schema(self) -> Value {
        let common = json!({
            "threadId": {"type": "string"},
            "messageId": {"type": ["string", "null"], "description": "The user message of the turn."}
        });
        let (mut properties, required): (Value, &[&str]) = match self {
            EventName::TurnEnded => (
                json!({
                    "status": {"enum": ["done", "error", "interrupted", "refused"]},
                    "replyId": {"type": "string"},
                    "text": {"type": "string", "description": "The reply (status `done`)."},
                    "cause": {"type": "string"},
                    "error": {"type": "string"}
                }),
                &["threadId", "status"],
            ),
            EventName::PermissionRequested => (
                json!({
                    "requestId": {"type": "string"},
                    "toolName": {"type": "string"},
                    "input": {},
                    "toolUseId": {"type": ["string", "null"]}
                }),
                &["threadId", "requestId", "toolName"],
            ),
            EventName::BudgetReached => (
                json!({
                    "budget": {"enum": ["thread", "key", "daily"]},
                    "limitUsd": {"type": "number"},
                    "spentUsd": {"type": "number"},
                    "status": {"type": "string"},
                    "error": {"type": "string"}
                }),
                &["threadId", "budget"],
            ),
            EventName::ScheduleRun => (
                json!({
                    "scheduleId": {"type": "string"},
                    "runId": {"type": "integer"},
                    "trigger": {"type": "string"}
                }),
                &["threadId", "scheduleId"],
            ),
        };
        if let (Some(all), Some(common)) = (properties.as_object_mut(), common.as_object()) {
            all.extend(common.clone());
        }
        json!({"type": "object", "properties": properties, "required": required})
    }

    /// The event type as `events/list` shows it.
    pub fn listed(self) -> Value {
        json!({
            "name": self.as_str(),
            "description": self.description(),
            "delivery": ["poll", "push", "webhook"],
            "inputSchema": input_schema(),
            "payloadSchema": self.payload_schema(),
        })
    }
}

/// The subscription arguments every event type takes.
fn input_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "threadId": {"type": "string", "description": "Only this thread's events."},
            "tags": {
                "type": "array", "items": {"type": "string"},
                "description": "Only events of threads with every one of these tags."
            }
        },
        "additionalProperties": false
    })
}

/// What a subscription asks for beyond its name: which threads.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Filter {
    pub thread_id: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
}

/// One occurrence of an event type, as every delivery mode sends it.
#[derive(Clone, Debug, PartialEq)]
pub struct Occurrence {
    /// The stored event it comes from: what a cursor after it names.
    pub row: i64,
    pub name: EventName,
    pub thread_id: String,
    pub timestamp: DateTime<Utc>,
    pub data: Value,
}

impl Occurrence {
    pub fn event_id(&self) -> String {
        format!("{}:{}", self.row, self.name.as_str())
    }

    /// `{eventId, name, timestamp, data, cursor}`: its cursor is the position after it.
    pub fn to_json(&self) -> Value {
        json!({
            "eventId": self.event_id(),
            "name": self.name.as_str(),
            "timestamp": self.timestamp.to_rfc3339_opts(SecondsFormat::Millis, true),
            "data": self.data,
            "cursor": Cursor(self.row).to_string(),
        })
    }
}

/// The occurrence of `name` that `row` stands for, if it stands for one.
pub fn occurrence(row: &EventRow, name: EventName) -> Option<Occurrence> {
    if !name.kinds().contains(&row.kind.as_str()) {
        return None;
    }
    let d = &row.data;
    let mut data = Map::new();
    data.insert("threadId".into(), json!(row.thread_id.as_str()));
    let message = d
        .get("messageId")
        .cloned()
        .or_else(|| row.message_id.as_ref().map(|m| json!(m.as_str())))
        .unwrap_or(Value::Null);
    data.insert("messageId".into(), message);
    let mut put = |to: &str, value: Option<&Value>| {
        if let Some(value) = value.filter(|v| !v.is_null()) {
            data.insert(to.into(), value.clone());
        }
    };
    match (name, row.kind.as_str()) {
        (EventName::TurnEnded, "turn_finished") => {
            put("status", Some(&json!("done")));
            put("replyId", d.pointer("/reply/id"));
            put("text", d.pointer("/reply/content"));
        }
        (EventName::TurnEnded, _) => {
            put("status", d.get("status"));
            put("cause", d.get("cause"));
            put("error", d.get("error"));
        }
        (EventName::PermissionRequested, _) => {
            for field in ["requestId", "toolName", "input", "toolUseId"] {
                put(field, d.get(field));
            }
        }
        (EventName::BudgetReached, _) => {
            let budget = d.get("budget").filter(|b| b.is_object())?;
            put("budget", budget.get("budget"));
            put("limitUsd", budget.get("limitUsd"));
            put("spentUsd", budget.get("spentUsd"));
            put("status", d.get("status"));
            put("error", d.get("error"));
        }
        (EventName::ScheduleRun, _) => {
            put("scheduleId", d.get("scheduleId"));
            put("runId", d.get("runId"));
            put("trigger", d.get("trigger"));
        }
    }
    Some(Occurrence {
        row: row.id,
        name,
        thread_id: row.thread_id.as_str().to_owned(),
        timestamp: row.created_at,
        data: Value::Object(data),
    })
}

/// A reader's position in the event log: every stored event up to this id is behind it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cursor(pub i64);

impl Cursor {
    const PREFIX: &'static str = "c1.";

    /// The cursor a client sent, or why it is not one of ours.
    pub fn parse(text: &str) -> Result<Cursor, String> {
        text.strip_prefix(Cursor::PREFIX)
            .and_then(|id| id.parse::<i64>().ok())
            .filter(|id| *id >= 0)
            .map(Cursor)
            .ok_or_else(|| format!("cursor `{text}` is not one this server gave out"))
    }
}

impl std::fmt::Display for Cursor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", Cursor::PREFIX, self.0)
    }
}

/// What every subscribing method names: the event type and its arguments.
#[derive(Clone, Debug, PartialEq)]
pub struct Subscription {
    pub name: EventName,
    pub filter: Filter,
    /// The arguments as sent, canonical (keys sorted): part of a webhook subscription's key.
    pub arguments: Value,
}

/// `events/poll` and `events/stream`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReadParams {
    pub subscription: Subscription,
    /// `None`: from now on (a first poll returns no events, and the cursor to poll with).
    pub cursor: Option<Cursor>,
    pub max_events: usize,
    /// Occurrences older than this are skipped (and the answer says `truncated`).
    pub max_age_ms: Option<u64>,
}

/// `events/subscribe`.
#[derive(Clone, Debug, PartialEq)]
pub struct SubscribeParams {
    pub read: ReadParams,
    pub url: String,
    pub secret: String,
    pub ttl_ms: u64,
}

/// `events/unsubscribe`.
#[derive(Clone, Debug, PartialEq)]
pub struct UnsubscribeParams {
    pub subscription: Subscription,
    pub url: String,
}

fn field<'a>(params: &'a Value, name: &str) -> Option<&'a Value> {
    params.get(name).filter(|v| !v.is_null())
}

fn subscription(params: &Value) -> Result<Subscription, String> {
    let name = field(params, "name")
        .and_then(Value::as_str)
        .ok_or("`name` (a string) is required")?;
    let name = EventName::parse(name).ok_or_else(|| {
        let known: Vec<&str> = EventName::ALL.iter().map(|n| n.as_str()).collect();
        format!("no event type `{name}` (events/list: {})", known.join(", "))
    })?;
    let arguments = field(params, "arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let filter = serde_json::from_value::<Filter>(arguments.clone())
        .map_err(|err| format!("`arguments` do not fit the input schema: {err}"))?;
    // Canonical: serde_json's map keeps keys sorted.
    let arguments = serde_json::from_str(&arguments.to_string()).unwrap_or(arguments);
    Ok(Subscription {
        name,
        filter,
        arguments,
    })
}

fn number(params: &Value, name: &str) -> Result<Option<u64>, String> {
    match field(params, name) {
        None => Ok(None),
        Some(value) => value
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{name}` is a non-negative integer, not {value}")),
    }
}

fn read(params: &Value) -> Result<ReadParams, String> {
    let subscription = subscription(params)?;
    let cursor = match field(params, "cursor") {
        None => None,
        Some(Value::String(text)) => Some(Cursor::parse(text)?),
        Some(other) => return Err(format!("`cursor` is a string or null, not {other}")),
    };
    let max_events = match number(params, "maxEvents")? {
        None => DEFAULT_MAX_EVENTS,
        Some(0) => return Err("`maxEvents` is at least 1".into()),
        Some(n) => usize::try_from(n).unwrap_or(MAX_EVENTS).min(MAX_EVENTS),
    };
    Ok(ReadParams {
        subscription,
        cursor,
        max_events,
        max_age_ms: number(params, "maxAgeMs")?,
    })
}

/// `events/poll` and `events/stream` params, or why they are wrong (`-32602`).
pub fn read_params(params: &Value) -> Result<ReadParams, String> {
    read(params)
}

fn webhook_url(params: &Value) -> Result<&Value, String> {
    let delivery = field(params, "delivery").ok_or("`delivery` is required")?;
    match field(delivery, "mode").and_then(Value::as_str) {
        Some("webhook") => Ok(delivery),
        other => Err(format!(
            "`delivery.mode` is `webhook`, not {}",
            other.unwrap_or("missing")
        )),
    }
}

/// `events/subscribe` params, or why they are wrong.
pub fn subscribe_params(params: &Value) -> Result<SubscribeParams, String> {
    let read = read(params)?;
    let delivery = webhook_url(params)?;
    let url = field(delivery, "url")
        .and_then(Value::as_str)
        .ok_or("`delivery.url` is required")?;
    let secret = field(delivery, "secret")
        .and_then(Value::as_str)
        .ok_or("`delivery.secret` (`whsec_` + base64) is required")?;
    let ttl_ms = match number(params, "ttlMs")? {
        None => DEFAULT_TTL_MS,
        Some(0) => return Err("`ttlMs` is at least 1".into()),
        Some(ms) => ms.min(MAX_TTL_MS),
    };
    Ok(SubscribeParams {
        read,
        url: url.to_owned(),
        secret: secret.to_owned(),
        ttl_ms,
    })
}

/// `events/unsubscribe` params, or why they are wrong.
pub fn unsubscribe_params(params: &Value) -> Result<UnsubscribeParams, String> {
    let subscription = subscription(params)?;
    let url = field(webhook_url(params)?, "url")
        .and_then(Value::as_str)
        .ok_or("`delivery.url` is required")?;
    Ok(UnsubscribeParams {
        subscription,
        url: url.to_owned(),
    })
}

#[cfg(test)]
mod tests;
