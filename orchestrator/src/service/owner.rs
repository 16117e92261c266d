//! A message whose door cannot forward its whole request (a tool call) reaches the thread's
//! owner as `/api` does: [`ThreadService::at_owner`] routes it ([`Cluster::route`]), forwards it
//! to the owner's `POST /api/threads/{id}/messages?wait=false` with its caller, and follows its
//! outcome on the shared event log and database ([`Pipeline::outcome`]). An owner that cannot be
//! reached is waited out: when its lease expires this node takes the thread. Stopping such a
//! message ([`ThreadService::stop_message`]) goes the same way, to the owner's
//! `POST /api/threads/{id}/interrupt?clientMessageId=…`.
//!
//! [`Pipeline::outcome`]: crate::pipeline::Pipeline::outcome

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::Value;

use plugin_contract::ThreadId;

use super::{Sent, ServiceError, ThreadService};
use crate::api;
use crate::api::threads::PostMessage;
use crate::approvals::Answer;
use crate::caller::Caller;
use crate::cluster::{Cluster, ForwardError, Forwarded, Outgoing, Route, RouteError};
use crate::pipeline::Stopped;
use crate::store::{Fence, MessageId};

/// Where a message's turn runs, with clustering.
pub(super) enum Placed {
    /// Here, under this node's lease.
    Here(Fence),
    /// At the thread's owner; this is how it ended.
    There(Box<Sent>),
}

/// Where a message was stored, with clustering.
pub(super) enum Accepted {
    /// Nowhere yet: it runs here, under this node's lease.
    Here(Fence),
    /// At the thread's owner, which queued its turn.
    There {
        message: MessageId,
        duplicate: bool,
        /// The owner's address, whose loss is watched while its turn is followed.
        url: String,
    },
}

impl ThreadService {
    /// Routes the message: here under this node's lease, or at the live owner, which the message
    /// is forwarded to; its outcome is then awaited as a repeat of the message would be.
    pub(super) async fn at_owner(
        &self,
        cluster: &Cluster,
        caller: &Caller,
        thread: &ThreadId,
        body: &PostMessage,
    ) -> Result<Placed, ServiceError> {
        let (message, duplicate, url) = match self.place(cluster, caller, thread, body).await? {
            Accepted::Here(fence) => return Ok(Placed::Here(fence)),
            Accepted::There {
                message,
                duplicate,
                url,
            } => (message, duplicate, url),
        };
        // Followed on the shared event log and read from the shared database. Should the owner
        // stop renewing its lease first, this node takes the thread over, which ends the turn
        // (`interrupted`).
        loop {
            tokio::select! {
                outcome = self.pipeline.outcome(&message) => {
                    return Ok(Placed::There(Box::new(Sent {
                        thread: thread.clone(),
                        message,
                        duplicate,
                        outcome,
                    })));
                }
                () = cluster.owner_gone(thread, &url) => {
                    cluster.take(thread).await?;
                }
            }
        }
    }

    /// Routes the message without waiting for its turn: here under this node's lease, or
    /// forwarded to the live owner's `?wait=false`, which stores it and queues its turn.
    pub(super) async fn place(
        &self,
        cluster: &Cluster,
        caller: &Caller,
        thread: &ThreadId,
        body: &PostMessage,
    ) -> Result<Accepted, ServiceError> {
        let url = match cluster.route(thread, false).await {
            Ok(Route::Local(fence)) => return Ok(Accepted::Here(fence)),
            Ok(Route::Forward(url)) => url,
            Err(RouteError::Store(err)) => return Err(err.into()),
            Err(err @ RouteError::NotOwner { .. }) => {
                return Err(ServiceError::Moving(err.to_string()))
            }
        };
        let body = serde_json::to_vec(body)
            .map_err(|err| ServiceError::Invalid(format!("cannot encode the message: {err}")))?;
        let path = format!("/api/threads/{thread}/messages?wait=false");
        let answer = post(cluster, caller, thread, &url, &path, body).await;
        let accepted = match answer {
            Ok(answer) if answer.status == StatusCode::ACCEPTED => {
                serde_json::from_slice::<Value>(&answer.body).unwrap_or_default()
            }
            Ok(answer) => return Err(refused(answer.status, &answer.body)),
            Err(ForwardError::Unreachable { .. }) => {
                return match cluster.take_when_expired(thread).await {
                    Ok(Route::Local(fence)) => Ok(Accepted::Here(fence)),
                    Ok(Route::Forward(_)) | Err(_) => Err(ServiceError::Moving(format!(
                        "thread {thread} is moving between nodes; retry with the same clientMessageId"
                    ))),
                };
            }
            Err(err @ (ForwardError::Failed { .. } | ForwardError::OwnerLost { .. })) => {
                return Err(ServiceError::Moving(format!(
                    "{err}; retry with the same clientMessageId"
                )))
            }
        };
        Ok(Accepted::There {
            message: MessageId::from_string(accepted["messageId"].as_str().unwrap_or_default()),
            duplicate: accepted["duplicate"].as_bool().unwrap_or(false),
            url,
        })
    }

    /// A person's answer, forwarded to the thread's owner when another node holds it (the turn
    /// that waits for it runs there); `None` when it is to be answered here.
    pub(super) async fn answer_at_owner(
        &self,
        cluster: &Cluster,
        caller: &Caller,
        thread: &ThreadId,
        request_id: &str,
        answer: &Answer,
    ) -> Result<Option<api::Permission>, ServiceError> {
        let url = match cluster.route(thread, false).await {
            Ok(Route::Local(_)) => return Ok(None),
            Ok(Route::Forward(url)) => url,
            Err(RouteError::Store(err)) => return Err(err.into()),
            Err(err @ RouteError::NotOwner { .. }) => {
                return Err(ServiceError::Moving(err.to_string()))
            }
        };
        let body = serde_json::json!({
            "decision": if answer.allow { "allow" } else { "deny" },
            "message": answer.message,
            "updatedInput": answer.updated_input,
            "always": answer.always,
        });
        let path = format!(
            "/api/threads/{thread}/permissions/{}",
            path_segment(request_id)
        );
        let answer = post(
            cluster,
            caller,
            thread,
            &url,
            &path,
            body.to_string().into_bytes(),
        )
        .await
        .map_err(|err| ServiceError::Moving(format!("{err}; retry")))?;
        match answer.status {
            StatusCode::OK => serde_json::from_slice(&answer.body)
                .map(Some)
                .map_err(|err| ServiceError::Moving(format!("the owner's answer: {err}"))),
            StatusCode::CONFLICT => Err(ServiceError::Conflict(message_of(&answer.body))),
            StatusCode::NOT_FOUND => Err(ServiceError::NotFound(message_of(&answer.body))),
            status => Err(refused(status, &answer.body)),
        }
    }
}

impl ThreadService {
    /// Stops the message `client` (its `clientMessageId`) of `thread` where the thread runs:
    /// withdrawn while it waits in line, interrupted once it runs. For a door that cannot
    /// forward its whole request (a cancelled tool call); `/api`'s interrupt reaches the owner
    /// before its handler runs.
    pub async fn stop_message(
        &self,
        caller: &Caller,
        thread: &ThreadId,
        client: &str,
    ) -> Result<Stopped, ServiceError> {
        self.check(caller, thread).await?;
        let route = match &self.cluster {
            Some(cluster) => Some((cluster, cluster.route(thread, false).await)),
            None => None,
        };
        let (cluster, url) = match route {
            Some((cluster, Ok(Route::Forward(url)))) => (cluster, url),
            Some((_, Err(RouteError::Store(err)))) => return Err(err.into()),
            Some((_, Err(err @ RouteError::NotOwner { .. }))) => {
                return Err(ServiceError::Moving(err.to_string()))
            }
            Some((_, Ok(Route::Local(_)))) | None => {
                return Ok(self.pipeline.stop_message(thread, client).await?)
            }
        };
        let query = serde_urlencoded::to_string([("clientMessageId", client)])
            .map_err(|err| ServiceError::Invalid(format!("cannot encode the id: {err}")))?;
        let path = format!("/api/threads/{thread}/interrupt?{query}");
        let answer = post(cluster, caller, thread, &url, &path, Vec::new())
            .await
            .map_err(|err| ServiceError::Moving(format!("{err}; retry")))?;
        if answer.status != StatusCode::OK {
            return Err(refused(answer.status, &answer.body));
        }
        let shown: Value = serde_json::from_slice(&answer.body).unwrap_or_default();
        Ok(
            match (shown["withdrawn"].as_bool(), shown["interrupted"].as_bool()) {
                (Some(true), _) => Stopped::Withdrawn,
                (_, Some(true)) => Stopped::Interrupted,
                _ => Stopped::Neither,
            },
        )
    }
}

/// Forwards `POST path` with the JSON `body` (or none) to the owner at `url`, for `caller`.
async fn post(
    cluster: &Cluster,
    caller: &Caller,
    thread: &ThreadId,
    url: &str,
    path: &str,
    body: Vec<u8>,
) -> Result<Forwarded, ForwardError> {
    let mut headers = HeaderMap::new();
    if !body.is_empty() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    let outgoing = Outgoing {
        method: Method::POST,
        path_and_query: path,
        headers: &headers,
        body: body.into(),
        caller,
    };
    cluster.forward(thread, url, outgoing).await
}

/// A refusal from the owner's API (`{"error": {"code", "message"}}`), its status and message.
fn refused(status: StatusCode, body: &[u8]) -> ServiceError {
    let message = message_of(body);
    let message = if message.is_empty() {
        format!("the thread's node answered {status}")
    } else {
        message
    };
    ServiceError::Owner { status, message }
}

/// The message of an `/api` error body (`{"error": {"code", "message"}}`), or "".
fn message_of(body: &[u8]) -> String {
    let body: Value = serde_json::from_slice(body).unwrap_or_default();
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// `text` as one path segment: every byte but the unreserved ones percent-encoded.
fn path_segment(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}
