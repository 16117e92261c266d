//! A running daemon's HTTP API as this binary's clients use it (`harness send`, `threads`,
//! `acp`): calls, and a thread's event stream. Each call gives a value or a [`DaemonError`] that
//! keeps the daemon's own status, code and message, so the person or the editor sees why.

use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use serde_json::Value;

/// Where the daemon is and how to prove who we are.
#[derive(Clone)]
pub struct Daemon {
    http: reqwest::Client,
    /// The daemon's URL without a trailing slash.
    base: String,
    /// Bearer token or API key (`--token-file`, `HARNESS_TOKEN`).
    token: Option<String>,
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

impl Daemon {
    pub fn new(url: &str, token: Option<String>) -> Daemon {
        Daemon {
            http: reqwest::Client::new(),
            base: url.trim_end_matches('/').to_owned(),
            token,
        }
    }

    /// `method path` with a JSON body; the answer's JSON (`null` for an empty body).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, DaemonError> {
        let url = format!("{}{path}", self.base);
        let mut req = self.authorized(self.http.request(method, &url));
        if let Some(body) = body {
            req = req.json(&body);
        }
        let response = sent(req, &url).await?;
        let status = response.status();
        let value: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            return Err(refused(status, &value));
        }
        Ok(value)
    }

    /// The thread's event stream after `last_event_id` (`None`: the whole stored log, then
    /// live events). The connection is open (the daemon subscribed) when this returns.
    pub async fn events(
        &self,
        thread: &str,
        last_event_id: Option<&str>,
    ) -> Result<impl Stream<Item = ThreadEvent> + Unpin, DaemonError> {
        let url = format!("{}/api/threads/{thread}/events", self.base);
        let mut req = self.authorized(self.http.get(&url));
        if let Some(id) = last_event_id {
            req = req.header("Last-Event-ID", id);
        }
        let response = sent(req, &url).await?;
        let status = response.status();
        if !status.is_success() {
            let value: Value = response.json().await.unwrap_or(Value::Null);
            return Err(refused(status, &value));
        }
        let events = response
            .bytes_stream()
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

    fn authorized(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }
}

fn refused(status: reqwest::StatusCode, body: &Value) -> DaemonError {
    DaemonError::Refused {
        status: status.as_u16(),
        code: body["error"]["code"].as_str().unwrap_or("").to_owned(),
        message: body["error"]["message"]
            .as_str()
            .unwrap_or("no details")
            .to_owned(),
    }
}

/// `req` sent to `url`; a daemon out of reach is [`DaemonError::Unreachable`].
async fn sent(req: reqwest::RequestBuilder, url: &str) -> Result<reqwest::Response, DaemonError> {
    req.send().await.map_err(|cause| DaemonError::Unreachable {
        url: url.to_owned(),
        cause,
    })
}
