//! JSON-RPC 2.0 over newline-delimited JSON, as ACP's stdio transport speaks it: the framing
//! (pure: a line in, a message out) and [`Peer`], the handle that writes to the client and waits
//! for its answers. Nothing here knows ACP's methods.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// JSON-RPC's reserved codes and ACP's own.
pub const PARSE_ERROR: i64 = -32700;
pub const INVALID_REQUEST: i64 = -32600;
pub const METHOD_NOT_FOUND: i64 = -32601;
pub const INVALID_PARAMS: i64 = -32602;
pub const INTERNAL_ERROR: i64 = -32603;
/// ACP: the resource (here a session, that is a thread) does not exist.
pub const RESOURCE_NOT_FOUND: i64 = -32002;

/// A JSON-RPC error object: what the client shows its user.
#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
            data: None,
        }
    }

    fn to_json(&self) -> Value {
        let mut error = json!({"code": self.code, "message": self.message});
        if let Some(data) = &self.data {
            error["data"] = data.clone();
        }
        error
    }

    fn from_json(value: &Value) -> RpcError {
        RpcError {
            code: value["code"].as_i64().unwrap_or(INTERNAL_ERROR),
            message: value["message"].as_str().unwrap_or("").to_owned(),
            data: value.get("data").cloned(),
        }
    }
}

/// One line from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// A call that wants an answer under `id`.
    Request {
        id: Value,
        method: String,
        params: Value,
    },
    /// A call without an answer (`session/cancel`).
    Notification { method: String, params: Value },
    /// The answer to one of our own requests (`session/request_permission`).
    Response {
        id: Value,
        outcome: Result<Value, RpcError>,
    },
}

/// Reads one line. A line that is not a JSON-RPC message is an error to answer (with a null id).
pub fn parse(line: &str) -> Result<Incoming, RpcError> {
    let value: Value = serde_json::from_str(line)
        .map_err(|err| RpcError::new(PARSE_ERROR, format!("not JSON: {err}")))?;
    let id = value.get("id").cloned().filter(|id| !id.is_null());
    if let Some(method) = value["method"].as_str() {
        let params = value.get("params").cloned().unwrap_or(Value::Null);
        let method = method.to_owned();
        return Ok(match id {
            Some(id) => Incoming::Request { id, method, params },
            None => Incoming::Notification { method, params },
        });
    }
    let Some(id) = id else {
        return Err(RpcError::new(
            INVALID_REQUEST,
            "neither a call nor an answer",
        ));
    };
    let outcome = match value.get("error") {
        Some(error) => Err(RpcError::from_json(error)),
        None => Ok(value.get("result").cloned().unwrap_or(Value::Null)),
    };
    Ok(Incoming::Response { id, outcome })
}

/// The answer to the request `id`.
pub fn response(id: &Value, outcome: Result<Value, RpcError>) -> Value {
    match outcome {
        Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
        Err(error) => json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()}),
    }
}

/// Where a request of ours waits for the client's answer.
type Waiting = HashMap<u64, oneshot::Sender<Result<Value, RpcError>>>;

/// The way back to the client: every line written to stdout goes through one channel, so lines
/// never interleave; our own requests wait here for their answers.
#[derive(Clone)]
pub struct Peer {
    out: mpsc::UnboundedSender<Value>,
    /// Our requests still waiting for the client's answer, by id.
    waiting: Arc<Mutex<Waiting>>,
    next_id: Arc<AtomicU64>,
}

impl Peer {
    /// A peer writing into `out` (the stdout writer's channel).
    pub fn new(out: mpsc::UnboundedSender<Value>) -> Peer {
        Peer {
            out,
            waiting: Arc::default(),
            next_id: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Writes a message as it is (an answer built by [`response`]).
    pub fn send(&self, message: Value) {
        // A closed channel means stdout is gone: the client left, nothing is left to tell.
        let _ = self.out.send(message);
    }

    /// A notification to the client.
    pub fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// A request to the client, and its answer.
    pub async fn request(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.lock().insert(id, tx);
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        rx.await
            .map_err(|_| RpcError::new(INTERNAL_ERROR, "the client went away"))?
    }

    /// Hands the client's answer to the request waiting for it; an answer to nothing is dropped.
    pub fn resolve(&self, id: &Value, outcome: Result<Value, RpcError>) {
        let waiting = id.as_u64().and_then(|id| self.lock().remove(&id));
        if let Some(tx) = waiting {
            let _ = tx.send(outcome);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Waiting> {
        self.waiting
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_requests_notifications_and_answers() {
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"a":1}}"#),
            Ok(Incoming::Request {
                id: json!(1),
                method: "initialize".into(),
                params: json!({"a": 1})
            })
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","method":"session/cancel","params":{}}"#),
            Ok(Incoming::Notification {
                method: "session/cancel".into(),
                params: json!({})
            })
        );
        assert_eq!(
            parse(r#"{"jsonrpc":"2.0","id":3,"error":{"code":-1,"message":"no"}}"#),
            Ok(Incoming::Response {
                id: json!(3),
                outcome: Err(RpcError::new(-1, "no"))
            })
        );
        assert_eq!(parse("nope").map_err(|e| e.code), Err(PARSE_ERROR));
        assert_eq!(parse("{}").map_err(|e| e.code), Err(INVALID_REQUEST));
    }

    #[tokio::test]
    async fn a_request_waits_for_its_answer() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let peer = Peer::new(tx);
        let asking = tokio::spawn({
            let peer = peer.clone();
            async move { peer.request("ask", json!({})).await }
        });
        let sent = rx.recv().await.expect("the request is written");
        assert_eq!(sent["method"], "ask");
        peer.resolve(&sent["id"], Ok(json!({"ok": true})));
        assert_eq!(asking.await.expect("joins"), Ok(json!({"ok": true})));
    }
}
