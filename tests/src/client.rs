//! [`ApiClient`]: the one HTTP client the tests talk to a daemon with, the in-process one
//! ([`crate::daemon::TestDaemon`]) and the `harness` binary that the crash-recovery test runs.
//!
//! Each call answers `(status, JSON body)`, the body `Null` when it is not JSON, so a test asserts
//! on both; a request that does not reach the daemon at all panics (only [`ApiClient::try_get`]
//! returns that error, for waiting until a daemon answers).

use reqwest::StatusCode;
use serde_json::{json, Value};

/// A client for one daemon: its base URL and, when the daemon wants one, the bearer token.
#[derive(Clone, Debug)]
pub struct ApiClient {
    /// `http://127.0.0.1:PORT`, no trailing slash: paths start with `/`.
    base: String,
    /// Carries the `Authorization` header, when there is a token, as a default header.
    http: reqwest::Client,
}

impl ApiClient {
    /// A client for the daemon at `base` that sends no token.
    pub fn new(base: impl Into<String>) -> ApiClient {
        ApiClient {
            base: base.into(),
            http: reqwest::Client::new(),
        }
    }

    /// A client for the daemon at `base` that sends `token` as the bearer token on every request.
    pub fn with_bearer_token(base: impl Into<String>, token: &str) -> ApiClient {
        let mut headers = reqwest::header::HeaderMap::new();
        let value = format!("Bearer {token}")
            .parse()
            .expect("the token is a valid header value");
        headers.insert(reqwest::header::AUTHORIZATION, value);
        ApiClient {
            base: base.into(),
            http: reqwest::Client::builder()
                .default_headers(headers)
                .build()
                .expect("an HTTP client"),
        }
    }

    /// The daemon's base URL, for a request this client does not make (another header, a stream).
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`, or the error when the request does not reach the daemon (not listening yet).
    pub async fn try_get(&self, path: &str) -> reqwest::Result<(StatusCode, Value)> {
        let response = self.http.get(format!("{}{path}", self.base)).send().await?;
        Ok(status_and_json(response).await)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.try_get(path).await.expect("GET reaches the daemon")
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("POST reaches the daemon");
        status_and_json(response).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (StatusCode, Value) {
        let response = self
            .http
            .patch(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .expect("PATCH reaches the daemon");
        status_and_json(response).await
    }

    pub async fn delete(&self, path: &str) -> (StatusCode, Value) {
        let response = self
            .http
            .delete(format!("{}{path}", self.base))
            .send()
            .await
            .expect("DELETE reaches the daemon");
        status_and_json(response).await
    }

    /// POSTs raw bytes with a JSON content type.
    pub async fn post_raw(
        &self,
        path: &str,
        body: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("POST reaches the daemon");
        status_and_json(response).await
    }

    /// POSTs `bytes` under `content_type` (an upload): `(status, JSON body)`.
    pub async fn post_bytes(
        &self,
        path: &str,
        content_type: &str,
        bytes: impl Into<reqwest::Body>,
    ) -> (StatusCode, Value) {
        let response = self
            .http
            .post(format!("{}{path}", self.base))
            .header("content-type", content_type)
            .body(bytes)
            .send()
            .await
            .expect("POST reaches the daemon");
        status_and_json(response).await
    }

    /// GETs `path` as bytes: `(status, Content-Type, body)`.
    pub async fn get_bytes(&self, path: &str) -> (StatusCode, String, Vec<u8>) {
        let response = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .expect("GET reaches the daemon");
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let body = response.bytes().await.expect("the body arrives").to_vec();
        (status, content_type, body)
    }

    /// Creates a thread and returns its id; panics unless the daemon answered 201.
    pub async fn create_thread(&self) -> String {
        let (status, body) = self.post("/api/threads", json!({})).await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body["id"].as_str().expect("thread id").to_owned()
    }

    /// Sends a message and returns the whole response.
    pub async fn send(&self, thread: &str, text: &str) -> (StatusCode, Value) {
        self.post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": text}),
        )
        .await
    }

    /// Sends a message and returns the reply text; panics unless the turn succeeded.
    pub async fn reply(&self, thread: &str, text: &str) -> String {
        let (status, body) = self.send(thread, text).await;
        assert_eq!(status, StatusCode::OK, "turn failed: {body}");
        body["message"]["content"]
            .as_str()
            .expect("reply content")
            .to_owned()
    }
}

/// The status and the body as JSON (`Null` when it is not JSON).
async fn status_and_json(response: reqwest::Response) -> (StatusCode, Value) {
    let status = response.status();
    (status, response.json().await.unwrap_or(Value::Null))
}
