//! A message whose door cannot forward its whole request (a tool call) reaches the thread's
//! owner as `/api` does: [`ThreadService::at_owner`] routes it ([`Cluster::route`]), forwards it
//! to the owner's `POST /api/threads/{id}/messages?wait=false` with its caller, and follows its
//! outcome on the shared event log and database ([`Pipeline::outcome`]). An owner that cannot be
//! reached is waited out: when its lease expires this node takes the thread.
//!
//! [`Pipeline::outcome`]: crate::pipeline::Pipeline::outcome

use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use serde_json::Value;

use plugin_contract::ThreadId;

use super::{Sent, ServiceError, ThreadService};
use crate::api::threads::PostMessage;
use crate::caller::Caller;
use crate::cluster::{Cluster, ForwardError, Outgoing, Route, RouteError};
use crate::store::{Fence, MessageId};

/// Where a message's turn runs, with clustering.
pub(super) enum Placed {
    /// Here, under this node's lease.
    Here(Fence),
    /// At the thread's owner; this is how it ended.
    There(Box<Sent>),
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
        let url = match cluster.route(thread, false).await {
            Ok(Route::Local(fence)) => return Ok(Placed::Here(fence)),
            Ok(Route::Forward(url)) => url,
            Err(RouteError::Store(err)) => return Err(err.into()),
            Err(err @ RouteError::NotOwner { .. }) => {
                return Err(ServiceError::Moving(err.to_string()))
            }
        };
        let body = serde_json::to_vec(body)
            .map_err(|err| ServiceError::Invalid(format!("cannot encode the message: {err}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let path = format!("/api/threads/{thread}/messages?wait=false");
        let answer = cluster
            .forward(
                thread,
                &url,
                Outgoing {
                    method: Method::POST,
                    path_and_query: &path,
                    headers: &headers,
                    body: body.into(),
                    caller,
                },
            )
            .await;
        let accepted = match answer {
            Ok(answer) if answer.status == StatusCode::ACCEPTED => {
                serde_json::from_slice::<Value>(&answer.body).unwrap_or_default()
            }
            Ok(answer) => return Err(refused(answer.status, &answer.body)),
            Err(ForwardError::Unreachable { .. }) => {
                return match cluster.take_when_expired(thread).await {
                    Ok(Route::Local(fence)) => Ok(Placed::Here(fence)),
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
        let message = MessageId::from_string(accepted["messageId"].as_str().unwrap_or_default());
        let duplicate = accepted["duplicate"].as_bool().unwrap_or(false);
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
}

/// A refusal from the owner's API (`{"error": {"code", "message"}}`), its status and message.
fn refused(status: StatusCode, body: &[u8]) -> ServiceError {
    let body: Value = serde_json::from_slice(body).unwrap_or_default();
    let message = body["error"]["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("the thread's node answered {status}"));
    ServiceError::Owner { status, message }
}
