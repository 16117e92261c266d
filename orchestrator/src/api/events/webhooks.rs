//! The webhook events: a thin projection of the thread's events ([`super::ThreadEvent`]) and of
//! a turn's end (`harness_db::Ending`, heard by a [`super::Audience`]), one [`WebhookEvent`] variant per type, each with its payload
//! type. The outbox stores a variant's `type` and `data` as it serializes; the dispatcher sends
//! them in the Standard Webhooks envelope (`{"type", "timestamp", "data"}`, `crate::webhooks`);
//! the OpenAPI document derives each type's schema and its entry under `webhooks` from the same
//! enum ([`WebhookSchemas`]). Thin: ids, status and cause; the receiver fetches the rest.

use plugin_contract::ThreadId;
use serde::Serialize;
use serde_json::json;
use utoipa::openapi::schema::Schema;
use utoipa::openapi::{OpenApi, Paths, RefOr};
use utoipa::{Modify, PartialSchema, ToSchema};

use super::{Audience, ThreadEvent};
use crate::budget::BudgetExceeded;
use crate::store::{EndCause, Ending, MessageId, MessageStatus, RunTrigger, WebhookDraft};

/// One webhook event: its `type`, and its payload under `data`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(tag = "type", content = "data")]
pub enum WebhookEvent {
    /// A turn ended with a reply.
    #[serde(rename = "turn.finished")]
    TurnFinished(TurnEndedWebhook),
    /// A turn ended without a reply.
    #[serde(rename = "turn.failed")]
    TurnFailed(TurnEndedWebhook),
    /// A budget refused a turn, or stopped it half-way.
    #[serde(rename = "budget.reached")]
    BudgetReached(BudgetReachedWebhook),
    /// A tool waits for a person's answer (`approvals.mode = "ask"`).
    #[serde(rename = "permission.requested")]
    PermissionRequested(PermissionRequestedWebhook),
    /// A schedule sent its message.
    #[serde(rename = "schedule.run_started")]
    ScheduleRunStarted(ScheduleRunStartedWebhook),
    /// The turn of a schedule's message ended.
    #[serde(rename = "schedule.run_finished")]
    ScheduleRunFinished(ScheduleRunFinishedWebhook),
}

/// A webhook event's type, by name: what an endpoint's `events` lists.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum WebhookKind {
    TurnFinished,
    TurnFailed,
    BudgetReached,
    PermissionRequested,
    ScheduleRunStarted,
    ScheduleRunFinished,
}

impl WebhookKind {
    pub const ALL: [WebhookKind; 6] = [
        WebhookKind::TurnFinished,
        WebhookKind::TurnFailed,
        WebhookKind::BudgetReached,
        WebhookKind::PermissionRequested,
        WebhookKind::ScheduleRunStarted,
        WebhookKind::ScheduleRunFinished,
    ];

    /// The `type` a delivery carries.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookKind::TurnFinished => "turn.finished",
            WebhookKind::TurnFailed => "turn.failed",
            WebhookKind::BudgetReached => "budget.reached",
            WebhookKind::PermissionRequested => "permission.requested",
            WebhookKind::ScheduleRunStarted => "schedule.run_started",
            WebhookKind::ScheduleRunFinished => "schedule.run_finished",
        }
    }

    /// The type a name stands for; `None` for a name no webhook carries.
    pub fn parse(name: &str) -> Option<WebhookKind> {
        WebhookKind::ALL
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }

    /// The name of its body's schema in `components.schemas`.
    fn schema_name(self) -> &'static str {
        match self {
            WebhookKind::TurnFinished => "TurnFinishedWebhookBody",
            WebhookKind::TurnFailed => "TurnFailedWebhookBody",
            WebhookKind::BudgetReached => "BudgetReachedWebhookBody",
            WebhookKind::PermissionRequested => "PermissionRequestedWebhookBody",
            WebhookKind::ScheduleRunStarted => "ScheduleRunStartedWebhookBody",
            WebhookKind::ScheduleRunFinished => "ScheduleRunFinishedWebhookBody",
        }
    }

    /// The name of its payload's schema.
    fn data_schema(self) -> String {
        match self {
            WebhookKind::TurnFinished | WebhookKind::TurnFailed => TurnEndedWebhook::name(),
            WebhookKind::BudgetReached => BudgetReachedWebhook::name(),
            WebhookKind::PermissionRequested => PermissionRequestedWebhook::name(),
            WebhookKind::ScheduleRunStarted => ScheduleRunStartedWebhook::name(),
            WebhookKind::ScheduleRunFinished => ScheduleRunFinishedWebhook::name(),
        }
        .into_owned()
    }
}

impl WebhookEvent {
    pub fn kind(&self) -> WebhookKind {
        match self {
            WebhookEvent::TurnFinished(_) => WebhookKind::TurnFinished,
            WebhookEvent::TurnFailed(_) => WebhookKind::TurnFailed,
            WebhookEvent::BudgetReached(_) => WebhookKind::BudgetReached,
            WebhookEvent::PermissionRequested(_) => WebhookKind::PermissionRequested,
            WebhookEvent::ScheduleRunStarted(_) => WebhookKind::ScheduleRunStarted,
            WebhookEvent::ScheduleRunFinished(_) => WebhookKind::ScheduleRunFinished,
        }
    }

    /// The payload as stored and sent (`data`).
    pub fn data(&self) -> serde_json::Value {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(mut event)) => event.remove("data").unwrap_or_default(),
            // Every payload is a struct of plain values; serializing one cannot fail.
            _ => serde_json::Value::Null,
        }
    }

    /// What the outbox stores of it.
    pub fn draft(&self) -> WebhookDraft {
        WebhookDraft {
            kind: self.kind().as_str(),
            data: self.data(),
        }
    }

    /// The webhook event a thread event stands for, if any (a turn's end has its own:
    /// [`WebhookEvent::of_ending`]).
    pub fn of_event(thread: &ThreadId, event: &ThreadEvent) -> Option<WebhookEvent> {
        match event {
            ThreadEvent::PermissionRequested(asked) => Some(WebhookEvent::PermissionRequested(
                PermissionRequestedWebhook {
                    thread_id: thread.clone(),
                    request_id: asked.request_id.clone(),
                    tool_name: asked.tool_name.clone(),
                },
            )),
            ThreadEvent::ScheduleRunStarted(run) => Some(WebhookEvent::ScheduleRunStarted(
                ScheduleRunStartedWebhook {
                    thread_id: thread.clone(),
                    schedule_id: run.schedule_id.clone(),
                    run_id: run.run_id,
                    message_id: run.message_id.clone(),
                    trigger: run.trigger,
                },
            )),
            _ => None,
        }
    }

    /// The webhook events of an ending, in the order they are written: `turn.finished` or
    /// `turn.failed`; `schedule.run_finished` for a schedule's run (`audience.run`);
    /// `budget.reached` when
    /// `budget` refused it.
    pub fn of_ending(
        ending: &Ending<'_>,
        audience: &Audience<'_>,
        budget: Option<&BudgetExceeded>,
    ) -> Vec<WebhookEvent> {
        let turn = TurnEndedWebhook {
            thread_id: audience.turn.thread.clone(),
            message_id: audience.turn.message.clone(),
            status: ending.cause.status(),
            cause: ending.cause,
            reply_id: ending.reply_id().cloned(),
        };
        let mut events = Vec::new();
        events.push(match ending.cause {
            EndCause::Done => WebhookEvent::TurnFinished(turn.clone()),
            _ => WebhookEvent::TurnFailed(turn.clone()),
        });
        if let Some(run) = audience.run {
            events.push(WebhookEvent::ScheduleRunFinished(
                ScheduleRunFinishedWebhook {
                    turn: turn.clone(),
                    schedule_id: run.schedule_id.clone(),
                    run_id: run.run_id,
                },
            ));
        }
        if let Some(budget) = budget {
            events.push(WebhookEvent::BudgetReached(BudgetReachedWebhook {
                turn,
                budget: budget.clone(),
            }));
        }
        events
    }
}

/// `turn.finished`, `turn.failed`: how a turn ended.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnEndedWebhook {
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    /// The user message the turn ran for.
    pub message_id: MessageId,
    /// The user message's status now.
    pub status: MessageStatus,
    pub cause: EndCause,
    /// The stored reply (`turn.finished`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply_id: Option<MessageId>,
}

/// `budget.reached`: the turn's end, and the budget that refused or stopped it.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BudgetReachedWebhook {
    #[serde(flatten)]
    pub turn: TurnEndedWebhook,
    pub budget: BudgetExceeded,
}

/// `schedule.run_finished`: the turn's end, and the run it was.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRunFinishedWebhook {
    #[serde(flatten)]
    pub turn: TurnEndedWebhook,
    pub schedule_id: String,
    pub run_id: i64,
}

/// `permission.requested`: answer at `POST /api/threads/{id}/permissions/{requestId}`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequestedWebhook {
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    pub request_id: String,
    pub tool_name: String,
}

/// `schedule.run_started`: a schedule sent its message.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRunStartedWebhook {
    #[schema(value_type = String)]
    pub thread_id: ThreadId,
    pub schedule_id: String,
    pub run_id: i64,
    pub message_id: MessageId,
    pub trigger: RunTrigger,
}

/// Adds the webhook events to the document: each payload's schema and each type's body
/// (`{"type", "timestamp", "data"}`) under `components.schemas`, `WebhookBody` (the `oneOf` of
/// them), and one entry per type under OpenAPI 3.1's `webhooks`: the `POST` an endpoint
/// receives.
pub struct WebhookSchemas;

impl Modify for WebhookSchemas {
    fn modify(&self, doc: &mut OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        let mut referred = Vec::new();
        WebhookEvent::schemas(&mut referred);
        components.schemas.extend(referred);
        for (name, schema) in [
            (TurnEndedWebhook::name(), TurnEndedWebhook::schema()),
            (BudgetReachedWebhook::name(), BudgetReachedWebhook::schema()),
            (
                ScheduleRunFinishedWebhook::name(),
                ScheduleRunFinishedWebhook::schema(),
            ),
            (
                PermissionRequestedWebhook::name(),
                PermissionRequestedWebhook::schema(),
            ),
            (
                ScheduleRunStartedWebhook::name(),
                ScheduleRunStartedWebhook::schema(),
            ),
        ] {
            components.schemas.insert(name.into_owned(), schema);
        }
        let mut hooks = serde_json::Map::new();
        for kind in WebhookKind::ALL {
            let body = json!({
                "type": "object",
                "description": format!("A `{}` delivery's body (Standard Webhooks; signed in \
                                        its `webhook-*` headers).", kind.as_str()),
                "required": ["type", "timestamp", "data"],
                "properties": {
                    "type": {"type": "string", "enum": [kind.as_str()]},
                    "timestamp": {
                        "type": "string", "format": "date-time",
                        "description": "When the event was written to the outbox."
                    },
                    "data": {"$ref": format!("#/components/schemas/{}", kind.data_schema())},
                },
            });
            components
                .schemas
                .insert(kind.schema_name().into(), from_json(body));
            hooks.insert(
                kind.as_str().into(),
                json!({"post": {
                    "operationId": format!("webhook_{}", kind.as_str().replace('.', "_")),
                    "tags": ["webhooks"],
                    "summary": format!("`{}`, sent to every endpoint that wants it.", kind.as_str()),
                    "requestBody": {"required": true, "content": {"application/json": {
                        "schema": {"$ref": format!("#/components/schemas/{}", kind.schema_name())}
                    }}},
                    "responses": {"200": {
                        "description": "Any 2xx: received. Anything else, or no answer in time, \
                                        is retried with back-off."
                    }},
                }}),
            );
        }
        let one_of: Vec<_> = WebhookKind::ALL
            .into_iter()
            .map(|kind| json!({"$ref": format!("#/components/schemas/{}", kind.schema_name())}))
            .collect();
        components.schemas.insert(
            WEBHOOK_BODY.into(),
            from_json(json!({
                "description": "A webhook delivery's body, by its `type`.",
                "oneOf": one_of,
            })),
        );
        doc.webhooks = serde_json::from_value::<Paths>(serde_json::Value::Object(hooks)).ok();
    }
}

/// The `oneOf` of every type's body.
const WEBHOOK_BODY: &str = "WebhookBody";

/// A schema written as JSON. Only called on the literals above, which hold valid schemas.
fn from_json(schema: serde_json::Value) -> RefOr<Schema> {
    serde_json::from_value(schema).expect("a valid schema literal")
}

#[cfg(test)]
mod tests;
