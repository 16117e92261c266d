//! The served document against the router that serves it (no socket: `oneshot`), and against the
//! source that builds the router. See the module's `//!` for the guarantee these tests hold up.

use std::collections::BTreeSet;
use std::path::Path;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::Value;
use tower::ServiceExt;

use crate::api::events::EventKind;
use crate::config::Config;
use crate::server::Daemon;

/// The methods a route can be registered for that the tests probe (HEAD comes with GET, OPTIONS
/// is CORS's).
const METHODS: [&str; 5] = ["get", "post", "put", "patch", "delete"];

/// What a path parameter is filled with: no such thread, tool or asset.
const DUMMY: &str = "openapi-probe";

struct Fixture {
    router: axum::Router,
    _daemon: Daemon,
    _dir: tempfile::TempDir,
}

async fn fixture(token: Option<&str>) -> Fixture {
    fixture_with(|config| config.auth_token = token.map(str::to_owned)).await
}

/// A daemon's router on `tweak`ed config.
async fn fixture_with(tweak: impl FnOnce(&mut Config)) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().to_path_buf(),
        db: Some(":memory:".into()),
        ..Default::default()
    };
    // No turn runs here; a message that got that far would answer 503, not hang.
    config.claude.bin = "/nonexistent/claude".into();
    tweak(&mut config);
    let daemon = Daemon::build(config, Vec::new()).await.unwrap();
    Fixture {
        router: super::super::router(daemon.api_state()),
        _daemon: daemon,
        _dir: dir,
    }
}

impl Fixture {
    /// The status and the body (JSON, or `Null` when it is not JSON).
    async fn call(&self, method: &str, uri: &str) -> (StatusCode, Value) {
        let body = if method == "GET" { "" } else { "{}" };
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("host", "127.0.0.1:7878")
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(Body::from(body))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        // An SSE answer never ends: read what is there within a moment.
        let bytes = tokio::time::timeout(
            std::time::Duration::from_millis(500),
            axum::body::to_bytes(response.into_body(), usize::MAX),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_default();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn document(&self) -> Value {
        let (status, doc) = self.call("GET", "/api/openapi.json").await;
        assert_eq!(status, StatusCode::OK, "{doc}");
        doc
    }
}

/// Every documented (method, path), path parameters as written (`{id}`).
fn operations(doc: &Value) -> Vec<(String, String)> {
    let paths = doc["paths"].as_object().expect("`paths` is an object");
    let mut operations = Vec::new();
    for (path, item) in paths {
        for method in METHODS {
            if item.get(method).is_some() {
                operations.push((method.to_uppercase(), path.clone()));
            }
        }
    }
    operations
}

/// `/api/threads/{id}` → `/api/threads/openapi-probe`.
fn concrete(path: &str) -> String {
    path.split('/')
        .map(|segment| {
            if segment.starts_with('{') && segment.ends_with('}') {
                DUMMY
            } else {
                segment
            }
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// True when the answer came from `http::router`'s fallbacks: no route has that path, or the
/// path's route does not take that method.
fn is_fallback(status: StatusCode, body: &Value) -> bool {
    let code = body["error"]["code"].as_str();
    let message = body["error"]["message"].as_str();
    (status == StatusCode::NOT_FOUND && message == Some("no such endpoint"))
        || (status == StatusCode::METHOD_NOT_ALLOWED && code == Some("method_not_allowed"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_document_is_openapi_3_1_and_served_without_the_token() {
    let fixture = fixture(Some("s3cret")).await;
    let (status, body) = fixture.call("GET", "/api/threads").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the token is on: {body}");
    let doc = fixture.document().await;

    let version = doc["openapi"].as_str().unwrap();
    assert!(version.starts_with("3.1."), "{version}");
    assert_eq!(doc["info"]["title"], "Harness");
    assert!(!operations(&doc).is_empty());
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for name in [
        "ErrorBody",
        "Thread",
        "Message",
        "TurnReply",
        "StreamEvent",
        "ThreadEvent",
    ] {
        assert!(
            schemas.contains_key(name),
            "components.schemas lacks {name}"
        );
    }
    assert_eq!(
        doc["components"]["securitySchemes"]["bearer"]["scheme"],
        "bearer"
    );

    // Every event kind has its schema, and the SSE answer is their `oneOf`.
    let one_of = doc["components"]["schemas"]["ThreadEvent"]["oneOf"]
        .as_array()
        .unwrap();
    assert_eq!(one_of.len(), EventKind::ALL.len());
    for kind in EventKind::ALL {
        let name = super::event_schema_name(kind);
        let schema = &schemas[&name];
        assert_eq!(
            schema["allOf"][1]["properties"]["kind"]["enum"][0],
            kind.as_str(),
            "{name}: {schema}"
        );
        assert!(
            schema["allOf"][1]["properties"]["data"].is_object(),
            "{name} documents its data"
        );
        assert!(
            schema["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "{name} says when it comes: {schema}"
        );
    }
    let events = &doc["paths"]["/api/threads/{id}/events"]["get"]["responses"]["200"];
    assert_eq!(
        events["content"]["text/event-stream"]["schema"]["$ref"],
        "#/components/schemas/ThreadEvent"
    );
    // Each kind's data is its own payload type: the CLI's events too, not the whole enum.
    let payload = |kind: &str| {
        let data = &schemas[kind]["allOf"][1]["properties"]["data"];
        let name = data["$ref"].as_str().unwrap_or_default();
        schemas[name.trim_start_matches("#/components/schemas/")].clone()
    };
    assert!(payload("TextDeltaEvent")["properties"]["text"].is_object());
    assert!(payload("TurnFinishedEvent")["properties"]["reply"].is_object());
    assert!(payload("TurnFailedEvent")["properties"]["budget"].is_object());

    // The token where the router puts it, and nowhere else.
    let needs_token = |method: &str, path: &str| {
        doc["paths"][path][method]["security"]
            .as_array()
            .is_some_and(|s| s.iter().any(|r| r.get("bearer").is_some()))
    };
    assert!(needs_token("get", "/api/threads"));
    assert!(needs_token("post", "/mcp"));
    assert!(needs_token("get", "/metrics"));
    assert!(!needs_token("get", "/api/openapi.json"));
    assert!(!needs_token("get", "/healthz"));
    assert!(!needs_token("get", "/"));
    for (method, path) in operations(&doc) {
        let responses = &doc["paths"][&path][method.to_lowercase()]["responses"];
        assert!(
            responses["403"]["content"]["application/json"]["schema"]["$ref"]
                .as_str()
                .is_some_and(|r| r.ends_with("/ErrorBody")),
            "{method} {path}: the guard's 403 is an ErrorBody"
        );
        if needs_token(&method.to_lowercase(), &path) {
            assert!(responses["401"].is_object(), "{method} {path}: its 401");
        }
    }

    // Client generators name methods after `operationId`: one each, never twice.
    let mut ids = BTreeSet::new();
    for (method, path) in operations(&doc) {
        let id = doc["paths"][&path][method.to_lowercase()]["operationId"].as_str();
        let id = id.unwrap_or_else(|| panic!("{method} {path} has no operationId"));
        assert!(ids.insert(id.to_owned()), "operationId {id} twice");
    }

    // Every `$ref` names a component that is there.
    let mut refs = BTreeSet::new();
    collect_refs(&doc, &mut refs);
    for reference in refs {
        let pointer = reference.trim_start_matches('#');
        assert!(doc.pointer(pointer).is_some(), "dangling {reference}");
    }
}

fn collect_refs(value: &Value, refs: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("$ref", Value::String(r)) => {
                        refs.insert(r.clone());
                    }
                    _ => collect_refs(value, refs),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, refs)),
        _ => {}
    }
}

/// Documented → served, and served on a documented path → documented (per method).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served_and_no_other_method_is() {
    let fixture = fixture(None).await;
    let doc = fixture.document().await;
    let documented = operations(&doc);
    for (method, path) in &documented {
        let uri = concrete(path);
        let (status, body) = fixture.call(method, &uri).await;
        assert!(
            !is_fallback(status, &body),
            "{method} {path} is documented but the router has no such route ({status} {body})"
        );
    }
    let paths: BTreeSet<&String> = documented.iter().map(|(_, path)| path).collect();
    for path in paths {
        for method in METHODS.map(str::to_uppercase) {
            if documented.contains(&(method.clone(), path.clone())) {
                continue;
            }
            let (status, body) = fixture.call(&method, &concrete(path)).await;
            assert_eq!(
                status,
                StatusCode::METHOD_NOT_ALLOWED,
                "{method} {path} is served ({body}) but not in the OpenAPI document: register it \
                 with `routes!` and a `#[utoipa::path]`"
            );
        }
    }
}

/// Routes registered by path outside `routes!` (what clippy's `disallowed-methods` forbids, for
/// a `cargo test` without clippy): none, but the `route_service` calls whose paths the document
/// has. A new path needs a new registration call, so a route the document lacks fails here or
/// does not compile.
#[test]
fn no_route_is_registered_outside_the_document() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let documented: BTreeSet<String> = {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let fixture = fixture(None).await;
            let doc = fixture.document().await;
            operations(&doc).into_iter().map(|(_, path)| path).collect()
        })
    };
    let mut found = Vec::new();
    let mut files = vec![src];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with(file!()) {
            let text = std::fs::read_to_string(&path).unwrap();
            for (call, route) in registrations(&text) {
                found.push((path.display().to_string(), call, route));
            }
        }
    }
    assert!(
        found.iter().any(|(_, call, _)| call == "route_service"),
        "the scan finds `/mcp`'s registration; if it moved, update this test"
    );
    for (file, call, route) in found {
        assert!(
            call == "route_service" && documented.contains(&route),
            "{file}: `.{call}(\"{route}\", …)` registers a route outside `routes!`, so the \
             OpenAPI document lacks it"
        );
    }
}

/// `(method, path)` of every `.route("…"`, `.route_service("…"` and `.nest_service("…"` in
/// `text` (the first argument a string literal, maybe on the next line).
fn registrations(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for call in ["route", "route_service", "nest_service"] {
        let needle = format!(".{call}(");
        let mut rest = text;
        while let Some(at) = rest.find(&needle) {
            rest = &rest[at + needle.len()..];
            let argument = rest.trim_start();
            if let Some(literal) = argument.strip_prefix('"') {
                let end = literal.find('"').unwrap_or(literal.len());
                found.push((call.to_owned(), literal[..end].to_owned()));
            }
        }
    }
    found
}

#[test]
fn the_scan_finds_registrations_however_they_are_formatted() {
    let text = "Router::new()\n    .route(\"/a\", get(x))\n    .route_service(\n        \"/b\",\n        svc,\n    )\n    .route_layer(l)\n    .nest_service(\"/c\", s);\n mcp.route(&thread, server)";
    assert_eq!(
        registrations(text),
        [
            ("route", "/a"),
            ("route_service", "/b"),
            ("nest_service", "/c")
        ]
        .map(|(c, p)| (c.to_owned(), p.to_owned()))
    );
}

/// `security`: each operation behind the token names the scope `access::NEEDS` gives its route,
/// on the bearer scheme and (only with `[oauth]`) on the `oauth2` one, whose flow the daemon
/// serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_names_its_scope_and_oauth_only_when_configured() {
    use crate::caller::Scope;
    use crate::http::access::{need_of, Need};

    let requirements =
        |doc: &Value, method: &str, path: &str| doc["paths"][path][method]["security"].clone();
    let plain = fixture(None).await.document().await;
    assert!(plain["components"]["securitySchemes"]
        .get("oauth2")
        .is_none());
    assert_eq!(
        requirements(&plain, "get", "/api/threads"),
        serde_json::json!([{"bearer": ["threads:read"]}])
    );
    assert_eq!(
        requirements(&plain, "get", "/api/me"),
        serde_json::json!([{"bearer": []}])
    );

    let builtin = fixture_with(|c| c.oauth.builtin = true).await;
    let doc = builtin.document().await;
    let scheme = &doc["components"]["securitySchemes"]["oauth2"];
    assert_eq!(scheme["type"], "oauth2", "{scheme}");
    let flow = &scheme["flows"]["authorizationCode"];
    for (url, method) in [
        ("authorizationUrl", "GET"),
        ("tokenUrl", "POST"),
        ("refreshUrl", "POST"),
    ] {
        let path = flow[url].as_str().unwrap();
        let (status, body) = builtin.call(method, path).await;
        assert!(!is_fallback(status, &body), "{url} {path} is served");
    }
    let offered: BTreeSet<&str> = flow["scopes"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    let expected: BTreeSet<&str> = Scope::ALL
        .iter()
        .filter(|s| **s != Scope::Admin)
        .map(|s| s.as_str())
        .collect();
    assert_eq!(offered, expected, "the built-in server never grants admin");
    assert!(scheme["description"].as_str().unwrap().contains("PKCE"));
    for (method, path) in operations(&doc) {
        let security = requirements(&doc, &method.to_lowercase(), &path);
        let Some(alternatives) = security.as_array() else {
            continue;
        };
        let route = path.replace("{path}", "{*path}");
        let method = axum::http::Method::from_bytes(method.as_bytes()).unwrap();
        let scope = match need_of(&method, &route) {
            Need::Scope(scope) => vec![scope.as_str()],
            Need::Caller => vec![],
        };
        let mut expected = vec![serde_json::json!({"bearer": scope})];
        if scope.first().is_none_or(|s| *s != "admin") {
            expected.push(serde_json::json!({"oauth2": scope}));
        }
        assert_eq!(alternatives, &expected, "{method} {path}");
    }

    let issuer = fixture_with(|c| c.oauth.issuer = Some("https://issuer.example/".into())).await;
    let doc = issuer.document().await;
    let scheme = &doc["components"]["securitySchemes"]["oauth2"];
    assert_eq!(scheme["type"], "openIdConnect", "{scheme}");
    assert_eq!(
        scheme["openIdConnectUrl"],
        "https://issuer.example/.well-known/openid-configuration"
    );
    assert_eq!(
        requirements(&doc, "get", "/api/keys"),
        serde_json::json!([{"bearer": ["admin"]}, {"oauth2": ["admin"]}])
    );
}

/// `rules`: every rule finds its schema, and every pattern in the document is one of
/// `api::doc`'s (the annotations write them out) or the cron's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rule_finds_its_schema_and_every_pattern_is_a_known_one() {
    let fixture = fixture(None).await;
    let state = fixture._daemon.api_state();
    let (_, doc) = super::super::documented_routes(&state).split_for_parts();
    let mut value = serde_json::to_value(&doc).unwrap();
    assert_eq!(
        super::rules::apply(&mut value, &state.config, &state.pool),
        Vec::<String>::new()
    );

    let served = fixture.document().await;
    let mut patterns = BTreeSet::new();
    collect(&served, "pattern", &mut patterns);
    assert!(patterns.len() > 5, "{patterns:?}");
    for pattern in patterns {
        assert!(
            crate::api::doc::PATTERNS.contains(&pattern.as_str())
                || pattern == super::rules::cron_pattern(),
            "{pattern:?} is written out somewhere: name it in `api::doc`"
        );
    }
    let content = &served["components"]["schemas"]["UserContent"];
    assert_eq!(
        content["oneOf"][0]["maxLength"],
        fixture._daemon.api_state().config.max_message_chars
    );
}

/// The cron pattern takes what the cron parser takes, and refuses a wrong count of fields.
#[test]
fn the_cron_pattern_takes_the_crons_the_parser_does() {
    let pattern = super::rules::cron_pattern();
    let schema = serde_json::json!({"type": "string", "pattern": pattern});
    let validator = jsonschema::validator_for(&schema).unwrap();
    for cron in [
        "*/5 * * * *",
        "*/2 * * * * *",
        "0 9 * * MON-FRI",
        " 0 0 L * * ",
        "0 0 * * 5#2",
        "0 0 15W * ?",
        "0 0 1 jan,Jul *",
        "0 0 * * 5L",
        "0 0 * Jan-Mar sun,FRI",
        "@daily",
        "@Annually",
    ] {
        crate::schedules::cron::Cron::parse(cron, "UTC").unwrap();
        assert!(validator.is_valid(&serde_json::json!(cron)), "{cron:?}");
    }
    for cron in [
        "* * * *",
        "* * * * * * *",
        "@often",
        "0 0 1#2 * *",
        "0 0 * ? *",
        "0 0 * * VTO",
        "0 0 * LD *",
        "",
    ] {
        assert!(
            crate::schedules::cron::Cron::parse(cron, "UTC").is_err(),
            "{cron:?}"
        );
        assert!(!validator.is_valid(&serde_json::json!(cron)), "{cron:?}");
    }
}

/// Every string value of `key`, anywhere in `value`.
fn collect(value: &Value, key: &str, found: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (k, v) in map {
                match (k.as_str() == key, v) {
                    (true, Value::String(s)) => {
                        found.insert(s.clone());
                    }
                    _ => collect(v, key, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, key, found)),
        _ => {}
    }
}
