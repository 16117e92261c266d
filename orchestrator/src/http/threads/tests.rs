use axum::body::Body;
use axum::http::{Request, StatusCode};
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestRunner};
use serde_json::{json, Map, Value};
use tower::ServiceExt;

use crate::config::Config;
use crate::server::Daemon;
use crate::store::NewThread;

struct Fixture {
    runtime: tokio::runtime::Runtime,
    router: axum::Router,
    thread: String,
    _daemon: Daemon,
    _dir: tempfile::TempDir,
}

const MAX_BODY: usize = 4096;
/// `files.max_message_bytes`: a message's body may be this much (as base64) beyond `MAX_BODY`.
const MAX_MESSAGE_FILES: usize = 1024;
const MAX_CHARS: usize = 100;

fn fixture() -> Fixture {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().to_path_buf(),
        db: Some(":memory:".into()),
        max_body_bytes: MAX_BODY,
        max_message_chars: MAX_CHARS,
        ..Default::default()
    };
    config.claude.bin = "/nonexistent/claude".into();
    config.turn.queue_limit = 1_000_000;
    config.files.max_message_bytes = MAX_MESSAGE_FILES;
    let plugins: Vec<std::sync::Arc<dyn plugin_contract::Plugin>> =
        vec![std::sync::Arc::new(harness_plugin_time::TimePlugin)];
    let daemon = runtime.block_on(Daemon::build(config, plugins)).unwrap();
    let thread = runtime
        .block_on(daemon.store.create_thread(NewThread::default()))
        .unwrap()
        .id
        .to_string();
    Fixture {
        router: super::super::router(daemon.api_state()),
        runtime,
        thread,
        _daemon: daemon,
        _dir: dir,
    }
}

impl Fixture {
    fn call(&self, method: &str, uri: &str, body: Vec<u8>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "127.0.0.1:7878")
            .header("content-type", "application/json")
            .body(Body::from(body))
            .unwrap();
        self.runtime.block_on(async {
            let response = self.router.clone().oneshot(request).await.unwrap();
            let status = response.status();
            let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
                .await
                .unwrap();
            (
                status,
                serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            )
        })
    }

    fn post_json(&self, uri: &str, body: Value) -> (StatusCode, Value) {
        self.call("POST", uri, body.to_string().into_bytes())
    }

    fn messages_uri(&self) -> String {
        format!("/api/threads/{}/messages?wait=false", self.thread)
    }
}

/// JSON that looks like our request bodies: the fields they have, values of any type.
fn body_like() -> impl Strategy<Value = Vec<u8>> {
    let field = prop::sample::select(
        &[
            "content",
            "clientMessageId",
            "model",
            "title",
            "threadId",
            "wait",
            "",
        ][..],
    );
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        ".{0,40}".prop_map(Value::String),
        "\\PC{0,200}".prop_map(Value::String),
    ];
    let value = leaf.prop_recursive(3, 24, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Value::Array)
    });
    let object = prop::collection::vec((field, value), 0..5).prop_map(|fields| {
        Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect::<Map<_, _>>(),
        )
    });
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..600),
        ".{0,200}".prop_map(String::into_bytes),
        object.prop_map(|v| v.to_string().into_bytes()),
        prop::collection::vec(any::<u8>(), MAX_BODY - 8..MAX_BODY + 64),
    ]
}

#[test]
fn arbitrary_bodies_never_get_a_5xx() {
    let fixture = fixture();
    let uris = [
        fixture.messages_uri(),
        "/api/prewarm".into(),
        "/api/threads".into(),
    ];
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 200,
        ..RunnerConfig::default()
    });
    let text = || prop_oneof!["\\PC{0,150}", ".{0,20}", any::<String>()];
    let optional = || prop::option::of(text());
    let message = (text(), optional(), optional()).prop_map(|(content, client, model)| {
        json!({"content": content, "clientMessageId": client, "model": model})
    });
    let thread = (optional(), optional()).prop_map(|(t, m)| json!({"title": t, "model": m}));
    let known = fixture.thread.clone();
    let prewarm = (prop_oneof![Just(known), text()], optional())
        .prop_map(|(id, model)| json!({"threadId": id, "model": model}));
    let bytes = |v: Value| v.to_string().into_bytes();
    let strategy = prop_oneof![
        (prop::sample::select(uris.to_vec()), body_like()),
        message.prop_map(move |v| (uris[0].clone(), bytes(v))),
        thread.prop_map(move |v| ("/api/threads".to_owned(), bytes(v))),
        prewarm.prop_map(move |v| ("/api/prewarm".to_owned(), bytes(v))),
    ];
    runner
        .run(&strategy, |(uri, body)| {
            let (status, reply) = fixture.call("POST", &uri, body);
            prop_assert!(!status.is_server_error(), "{uri}: {status} {reply}");
            if !status.is_success() {
                prop_assert!(
                    reply["error"]["code"].is_string(),
                    "{uri}: {status} {reply}"
                );
                prop_assert!(reply["error"]["message"].is_string(), "{uri}: {reply}");
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn arbitrary_thread_ids_are_404s() {
    let fixture = fixture();
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 100,
        ..RunnerConfig::default()
    });
    let id = prop::collection::vec(any::<u8>(), 1..24);
    runner
        .run(&id, |bytes| {
            let id: String = bytes.iter().map(|b| format!("%{b:02X}")).collect();
            for (method, path) in [
                ("GET", format!("/api/threads/{id}")),
                ("POST", format!("/api/threads/{id}/messages?wait=false")),
                ("POST", format!("/api/threads/{id}/interrupt")),
                ("GET", format!("/api/threads/{id}/events")),
            ] {
                let body = json!({"content": "hi"}).to_string().into_bytes();
                let (status, reply) = fixture.call(method, &path, body);
                prop_assert!(
                    matches!(status.as_u16(), 400 | 404),
                    "{method} {path}: {status} {reply}"
                );
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn every_answer_carries_a_request_id_and_a_given_one_is_echoed() {
    let fixture = fixture();
    let call = |id: Option<&str>| {
        let mut request = Request::builder()
            .uri("/healthz")
            .header("host", "127.0.0.1:7878");
        if let Some(id) = id {
            request = request.header("x-request-id", id);
        }
        let request = request.body(Body::empty()).unwrap();
        fixture.runtime.block_on(async {
            let response = fixture.router.clone().oneshot(request).await.unwrap();
            response
                .headers()
                .get("x-request-id")
                .map(|v| v.to_str().unwrap().to_owned())
        })
    };
    assert_eq!(call(Some("req-42")).as_deref(), Some("req-42"));
    let made = call(None).expect("a request id is made");
    assert_eq!(made.len(), 36, "a UUID: {made}");
}

#[test]
fn limits_and_content_rules() {
    let fixture = fixture();
    let uri = fixture.messages_uri();

    let message_limit = crate::config::FilesConfig {
        max_file_bytes: 0,
        max_message_bytes: MAX_MESSAGE_FILES,
    }
    .message_body_limit(MAX_BODY);
    let (status, body) = fixture.call("POST", &uri, vec![b' '; message_limit + 1]);
    assert_eq!(status, 413, "{body}");
    assert_eq!(body["error"]["code"], "body_too_large");
    let (status, body) = fixture.call("POST", "/api/prewarm", vec![b' '; MAX_BODY + 1]);
    assert_eq!(status, 413, "other routes keep max_body_bytes: {body}");

    let long = "x".repeat(MAX_CHARS + 1);
    let (status, body) = fixture.post_json(&uri, json!({"content": long}));
    assert_eq!(status, 422, "{body}");
    assert_eq!(
        body["error"]["message"],
        format!(
            "content is {} characters; the limit is {MAX_CHARS}",
            MAX_CHARS + 1
        )
    );
    let (status, _) = fixture.post_json(&uri, json!({"content": "é".repeat(MAX_CHARS)}));
    assert_eq!(status, 202, "the limit counts characters, not bytes");

    for bad in ["bell \u{7}", "nul \u{0}", "escape \u{1b}[31m", "del \u{7f}"] {
        let (status, body) = fixture.post_json(&uri, json!({"content": bad}));
        assert_eq!(status, 422, "{bad:?}: {body}");
        let text = body["error"]["message"].as_str().unwrap();
        assert!(text.contains("control characters"), "{text}");
    }
    let (status, body) =
        fixture.post_json(&uri, json!({"content": "line one\n\tline two\r\nthree"}));
    assert_eq!(status, 202, "newlines and tabs are text: {body}");

    let (status, body) = fixture.call("POST", &uri, b"{\"content\": \"x\"".to_vec());
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("column"));

    let (status, body) = fixture.post_json(&uri, json!({"content": 5}));
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("content"));
    let (status, body) = fixture.post_json(&uri, json!({"content": "x", "colour": 1}));
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("colour"));

    let (status, body) = fixture.post_json("/api/threads", json!({"title": 5}));
    assert_eq!(status, 422, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("title"),
        "names the field: {body}"
    );
    let (status, body) = fixture.post_json("/api/prewarm", json!({"threadId": ["x"]}));
    assert_eq!(status, 422, "{body}");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("threadId"));
}
