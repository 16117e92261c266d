//! A daemon's HTTP API as a client uses it (`harness send`, `threads`, and the ACP agent):
//! calls, and a thread's event stream. Each call gives a value or a [`DaemonError`] that keeps
//! the daemon's own status, code and message, so the person or the editor sees why.
//!
//! Two ways to the API, one client: over HTTP to a daemon at a URL ([`Daemon::new`]), or
//! through this daemon's own router ([`Daemon::in_process`]), for a door inside the daemon that
//! speaks for a caller who reached it (the `/acp` WebSocket): each request then carries the
//! caller's own credentials and address and takes every step an HTTP request takes (the guard,
//! the token, the tenant, the scopes, the audit, the thread's owner), without a socket.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, StatusCode};
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::Value;
use tower::ServiceExt;

/// Where the daemon is and how to prove who we are.
#[derive(Clone)]
pub struct Daemon {
    way: Way,
}

#[derive(Clone)]
enum Way {
    Http {
        http: reqwest::Client,
        /// The daemon's URL without a trailing slash.
        base: String,
        /// Bearer token or API key (`--token-file`, `HARNESS_TOKEN`).
        token: Option<String>,
    },
    InProcess {
        router: axum::Router,
        /// The caller's: `Authorization`, `Host`, and what identifies its client.
        headers: HeaderMap,
        /// The caller's address, as the listener recorded it (for the audit log).
        remote: Option<axum::extract::ConnectInfo<std::net::SocketAddr>>,
    },
}

/// A call to the daemon that did not give what was asked.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// No HTTP answer at all: the daemon is not running there, or the network failed.
    #[error("cannot reach the Harness daemon at {url}")]
    Unreachable {
        url: String,
        #[source]
        cause: reqwest::Error,
    },
    /// The daemon answered with an error: its status, `error.code` and `error.message`.
    #[error("the Harness daemon refused ({status} {code}): {message}")]
    Refused {
        status: u16,
        code: String,
        message: String,
    },
}

/// One event of a thread's stream: its id (for `Last-Event-ID`), kind, the user message whose
/// turn it belongs to, and the kind's data.
#[derive(Debug, Clone)]
pub struct ThreadEvent {
    pub id: String,
    pub kind: String,
    pub message_id: Option<String>,
    pub data: Value,
}

impl DaemonError {
    /// The error and its causes, on one line (`cannot reach … : … : Connection refused`).
    pub fn chain(&self) -> String {
        let mut text = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(err) = cause {
            text.push_str(": ");
            text.push_str(&err.to_string());
            cause = err.source();
        }
        text
    }
}

/// The headers of a caller's request that an in-process request carries on.
const CARRIED: [&str; 5] = [
    "authorization",
    "host",
    "x-api-key",
    "user-agent",
    "traceparent",
];

/// An answer: its status, and its body as bytes arriving.
struct Answer {
    status: StatusCode,
    body: futures::stream::BoxStream<'static, Result<axum::body::Bytes, std::io::Error>>,
}

impl Daemon {
    /// The daemon at `url`, over HTTP.
    pub fn new(url: &str, token: Option<String>) -> Daemon {
        Daemon {
            way: Way::Http {
                http: reqwest::Client::new(),
                base: url.trim_end_matches('/').to_owned(),
                token,
            },
        }
    }

    /// This daemon, through its own `router`, for the caller whose request had `headers` and
    /// came from `remote`.
    pub fn in_process(
        router: axum::Router,
        headers: &HeaderMap,
        remote: Option<axum::extract::ConnectInfo<std::net::SocketAddr>>,
    ) -> Daemon {
        let mut carried = HeaderMap::new();
        for name in CARRIED {
            if let Some(value) = headers.get(name) {
                carried.insert(name, value.clone());
            }
        }
        Daemon {
            way: Way::InProcess {
                router,
                headers: carried,
                remote,
            },
        }
    }

    /// `method path` with a JSON body; the answer's JSON (`null` for an empty body).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, DaemonError> {
        let answer = self.send(method, path, body, None).await?;
        let status = answer.status;
        let bytes = read_all(answer.body).await;
        let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(refused(status, &value));
        }
        Ok(value)
    }

    /// The thread's event stream after `last_event_id` (`None`: the whole stored log, then
    /// live events). The stream is open (the daemon subscribed) when this returns.
    pub async fn events(
        &self,
        thread: &str,
        last_event_id: Option<&str>,
    ) -> Result<impl Stream<Item = ThreadEvent> + Unpin, DaemonError> {
        let path = format!("/api/threads/{thread}/events");
        self.stream_of(&path, last_event_id).await
    }

    /// The thread's whole stored event log, oldest first (`live=false`: no live events).
    pub async fn stored_events(&self, thread: &str) -> Result<Vec<ThreadEvent>, DaemonError> {
        let path = format!("/api/threads/{thread}/events?live=false");
        Ok(self.stream_of(&path, None).await?.collect().await)
    }

    /// The events of the stream at `path`.
    async fn stream_of(
        &self,
        path: &str,
        last_event_id: Option<&str>,
    ) -> Result<impl Stream<Item = ThreadEvent> + Unpin, DaemonError> {
        let answer = self.send(Method::GET, path, None, last_event_id).await?;
        if !answer.status.is_success() {
            let bytes = read_all(answer.body).await;
            let value: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            return Err(refused(answer.status, &value));
        }
        let events = answer
            .body
            .eventsource()
            // A broken stream ends the turn's reading; the caller says so.
            .take_while(|event| std::future::ready(event.is_ok()))
            .filter_map(|event| {
                std::future::ready(event.ok().map(|event| {
                    // The frame is `{id, kind, messageId, data, at}`.
                    let mut frame: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                    ThreadEvent {
                        message_id: frame["messageId"].as_str().map(str::to_owned),
                        data: frame["data"].take(),
                        id: event.id,
                        kind: event.event,
                    }
                }))
            });
        Ok(Box::pin(events))
    }

    /// One request, whichever way: its status and body.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        last_event_id: Option<&str>,
    ) -> Result<Answer, DaemonError> {
        match &self.way {
            Way::Http { http, base, token } => {
                let url = format!("{base}{path}");
                let mut req = http.request(method, &url);
                if let Some(token) = token {
                    req = req.bearer_auth(token);
                }
                if let Some(body) = body {
                    req = req.json(&body);
                }
                if let Some(id) = last_event_id {
                    req = req.header("Last-Event-ID", id);
                }
                let response = req.send().await.map_err(|cause| DaemonError::Unreachable {
                    url: url.clone(),
                    cause,
                })?;
                let status = response.status();
                let body = response
                    .bytes_stream()
                    .map(|chunk| chunk.map_err(std::io::Error::other));
                Ok(Answer {
                    status,
                    body: body.boxed(),
                })
            }
            Way::InProcess {
                router,
                headers,
                remote,
            } => {
                let mut request = Request::builder().method(method).uri(path);
                for (name, value) in headers {
                    request = request.header(name, value);
                }
                if let Some(id) = last_event_id.and_then(|id| HeaderValue::from_str(id).ok()) {
                    request = request.header("last-event-id", id);
                }
                let request = match body {
                    Some(body) => request
                        .header("content-type", "application/json")
                        .body(Body::from(body.to_string())),
                    None => request.body(Body::empty()),
                };
                let mut request = request.map_err(|err| DaemonError::Refused {
                    status: 400,
                    code: "bad_request".into(),
                    message: err.to_string(),
                })?;
                if let Some(remote) = remote {
                    request.extensions_mut().insert(*remote);
                }
                let Ok(response) = router.clone().oneshot(request).await;
                let status = response.status();
                let body = response
                    .into_body()
                    .into_data_stream()
                    .map(|chunk| chunk.map_err(std::io::Error::other));
                Ok(Answer {
                    status,
                    body: body.boxed(),
                })
            }
        }
    }
}

/// A whole body; what arrived before a failure when it fails.
async fn read_all(
    mut body: futures::stream::BoxStream<'static, Result<axum::body::Bytes, std::io::Error>>,
) -> Vec<u8> {
    let mut all = Vec::new();
    while let Some(Ok(chunk)) = body.next().await {
        all.extend_from_slice(&chunk);
    }
    all
}

fn refused(status: StatusCode, body: &Value) -> DaemonError {
    DaemonError::Refused {
        status: status.as_u16(),
        code: body["error"]["code"].as_str().unwrap_or("").to_owned(),
        message: body["error"]["message"]
            .as_str()
            .unwrap_or("no details")
            .to_owned(),
    }
}
