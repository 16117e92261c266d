//! The OpenAPI document against the daemon that serves it: every request the document allows
//! is taken. Schemathesis draws requests from the served document (bodies, path, query and
//! header parameters; see `harness_tests::openapi`), and none may be refused as invalid (`400`
//! or `422`): a bound the daemon checks and the document does not state fails here.
//!
//! A check that JSON Schema cannot state (a cron that never fires, a time zone's existence) is
//! said in its field's description and listed in [`NOT_STATEABLE`], refusal by refusal.

use std::collections::BTreeMap;
use std::time::Instant;

use serde_json::{json, Map, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::media::PNG;
use harness_tests::mock::MockApi;
use harness_tests::openapi::{schemathesis_or_skip, send_generated, Answer, Operation, Plan};

/// Requests per operation: enough for Hypothesis to reach the bounds of each field (it tries
/// the edges first), few enough for a 2-core machine.
const EXAMPLES: u32 = 25;

/// Operations that start model turns or processes: a few requests each.
const FEW: &[(&str, u32)] = &[
    ("POST /api/threads/{id}/messages", 10),
    ("POST /api/prewarm", 3),
    ("POST /api/schedules/{id}/run", 3),
];

/// Refusals the document cannot rule out, each said in its field's description: the operation,
/// what the refusal's message holds, and why JSON Schema cannot state it.
pub(crate) const NOT_STATEABLE: &[(&str, &str, &str)] = &[
    (
        "POST /api/schedules",
        "is not a cron expression",
        "each field's values (minutes 0-59, a step within its range, …) are the cron parser's",
    ),
    (
        "PATCH /api/schedules/{id}",
        "is not a cron expression",
        "each field's values are the cron parser's",
    ),
    (
        "POST /api/schedules",
        "never fires",
        "whether a cron fires again is a computation",
    ),
    (
        "PATCH /api/schedules/{id}",
        "never fires",
        "whether a cron fires again is a computation",
    ),
    (
        "POST /api/schedules",
        "threadId: thread",
        "the thread must exist",
    ),
    (
        "POST /api/threads",
        "outputSchema is not a valid JSON Schema",
        "the outputSchema is checked against the draft 2020-12 meta-schema",
    ),
    (
        "POST /api/threads",
        "outputSchema cannot be used by the claude CLI",
        "the CLI's own dialect of JSON Schema",
    ),
    (
        "GET /acp",
        "speaks ACP over a WebSocket",
        "a WebSocket's opening handshake (RFC 6455: `Connection: Upgrade`, `Upgrade: websocket`, \
         a key) is the protocol switch, not parameters of the operation",
    ),
    (
        "POST /api/threads/{id}/messages",
        ": no file",
        "a file reference names a file that exists and is the caller's",
    ),
    (
        "POST /api/threads/{id}/messages",
        ": the bytes are not",
        "the bytes' magic numbers must say the media type",
    ),
    (
        "POST /v1/agents",
        "its input_schema cannot be served",
        "a custom tool's input_schema is checked against the draft 2020-12 meta-schema and the \
         Messages API's rules for a tool's schema",
    ),
    (
        "POST /v1/agents/{agent_id}",
        "its input_schema cannot be served",
        "a custom tool's input_schema is checked against the draft 2020-12 meta-schema and the \
         Messages API's rules for a tool's schema",
    ),
    (
        "POST /v1/agents",
        "is given twice",
        "JSON Schema cannot say that a field is unique across an array's items",
    ),
    (
        "POST /v1/agents/{agent_id}",
        "is given twice",
        "JSON Schema cannot say that a field is unique across an array's items",
    ),
    (
        "POST /v1/agents",
        "an http:// or https:// URL",
        "a URL's syntax past its scheme (RFC 3986 as the url crate parses it) is more than a \
         pattern says",
    ),
    (
        "POST /v1/agents",
        "Harness's own server has that name",
        "the names Harness keeps (`harness`, `custom`) are said in the field's description",
    ),
    (
        "POST /v1/agents",
        "mcp_toolset",
        "JSON Schema cannot relate one array's items to another's (each MCP server referenced by \
         one mcp_toolset of tools, none naming an unknown server) nor a toolset's configs to its \
         default",
    ),
    (
        "POST /v1/agents/{agent_id}",
        "an http:// or https:// URL",
        "a URL's syntax past its scheme (RFC 3986 as the url crate parses it) is more than a \
         pattern says",
    ),
    (
        "POST /v1/agents/{agent_id}",
        "Harness's own server has that name",
        "the names Harness keeps (`harness`, `custom`) are said in the field's description",
    ),
    (
        "POST /v1/agents/{agent_id}",
        "mcp_toolset",
        "JSON Schema cannot relate one array's items to another's (each MCP server referenced by \
         one mcp_toolset of tools, none naming an unknown server) nor a toolset's configs to its \
         default",
    ),
];

/// Parts of refusals the document states, never excused by [`NOT_STATEABLE`]: a cron's shape.
const STATED: &[&str] = &["must have 5 or 6 fields", "illegal character"];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_the_document_allows_is_accepted() {
    let Some(python) = schemathesis_or_skip("every_request_the_document_allows_is_accepted").await
    else {
        return;
    };
    let mock = MockApi::start().await;
    // No tick runs by itself: a generated cron of every second would start turns all along.
    let daemon = TestDaemon::start(&mock, |c| c.schedules.enabled = false).await;
    let (status, doc) = daemon.get("/api/openapi.json").await;
    assert_eq!(status, 200, "{doc}");
    let plan = plan(&doc, &resources(&daemon).await);

    let started = Instant::now();
    let report = send_generated(python, &daemon.base, None, &plan)
        .await
        .expect("the generator runs");
    eprintln!(
        "openapi: {} requests to {} operations in {:.1?}",
        report.sent.values().sum::<u32>(),
        report.sent.len(),
        started.elapsed()
    );
    eprintln!(
        "openapi: the answers that were not a success: {:#?}",
        tally(&report.answers)
    );
    for operation in &plan.operations {
        let sent = report.sent.get(&operation.label()).copied().unwrap_or(0);
        assert!(
            sent > 0,
            "no request was generated for {}",
            operation.label()
        );
    }
    let refused: Vec<String> = report
        .answers
        .iter()
        .filter(|a| matches!(a.status, 400 | 422) && not_stateable(a).is_none())
        .map(ToString::to_string)
        .collect();
    assert!(
        refused.is_empty(),
        "{} requests the OpenAPI document allows were refused as invalid: the document must \
         state what the daemon checks:\n{}",
        refused.len(),
        refused.join("\n")
    );
    daemon.stop().await;
}

/// The answers by operation, status, code and the [`NOT_STATEABLE`] entry that excuses them.
fn tally(answers: &[Answer]) -> BTreeMap<String, u32> {
    let mut tally = BTreeMap::new();
    for answer in answers {
        let excused = not_stateable(answer).map_or(String::new(), |n| format!(" ({n:?})"));
        let (operation, status, code) = (&answer.operation, answer.status, answer.code());
        *tally
            .entry(format!("{operation} {status} {code}{excused}"))
            .or_default() += 1;
    }
    tally
}

/// The entry of [`NOT_STATEABLE`] that excuses `answer`, if one does.
fn not_stateable(answer: &Answer) -> Option<&'static str> {
    let message = answer.message();
    if STATED.iter().any(|stated| message.contains(stated)) {
        return None;
    }
    NOT_STATEABLE
        .iter()
        .find(|(operation, needle, _)| answer.operation == *operation && message.contains(needle))
        .map(|(_, needle, _)| *needle)
}

/// Real things for the path parameters that name one: what a generated id would only find
/// missing (`404`) before its request is checked.
struct Resources {
    /// Takes the messages, prewarms, forks and runs.
    thread: String,
    /// Changed, archived and deleted, apart from `thread`.
    other_thread: String,
    user_message: String,
    schedule: String,
    key: String,
    file: String,
    tool: String,
}

async fn resources(daemon: &TestDaemon) -> Resources {
    let thread = daemon.create_thread().await;
    let other_thread = daemon.create_thread().await;
    let (status, reply) = daemon.send(&thread, "hello").await;
    assert_eq!(status, 200, "{reply}");
    let (status, schedule) = daemon
        .post(
            "/api/schedules",
            json!({"cron": "0 0 1 1 *", "prompt": "hi", "threadId": thread}),
        )
        .await;
    assert_eq!(status, 201, "{schedule}");
    let (status, key) = daemon
        .post(
            "/api/keys",
            json!({"tenant": "acme", "scopes": ["threads:read"]}),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let file = reqwest::Client::new()
        .post(format!("{}/api/files", daemon.base))
        .header("content-type", "image/png")
        .body(PNG)
        .send()
        .await
        .expect("the upload reaches the daemon");
    assert_eq!(file.status(), 201);
    let file: Value = file.json().await.expect("the stored file");
    let (_, tools) = daemon.get("/api/tools").await;
    let id = |v: &Value, key: &str| v[key].as_str().expect(key).to_owned();
    Resources {
        user_message: id(&reply, "userMessageId"),
        thread,
        other_thread,
        schedule: id(&schedule, "id"),
        key: id(&key, "id"),
        file: id(&file, "id"),
        tool: id(&tools["tools"][0], "name"),
    }
}

/// Every operation of `doc`: the ones that change or remove `other_thread` and the deletions
/// last, so the others find their resources there.
fn plan(doc: &Value, resources: &Resources) -> Plan {
    let mut operations = Vec::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for method in ["get", "post", "put", "patch", "delete"] {
            let Some(operation) = item.get(method) else {
                continue;
            };
            let method = method.to_uppercase();
            let label = format!("{method} {path}");
            let examples = FEW
                .iter()
                .find(|(l, _)| *l == label)
                .map_or(EXAMPLES, |(_, n)| *n);
            let mut headers = Map::new();
            if path == "/mcp" {
                // What a Streamable HTTP client sends: rmcp answers `406` to anything else.
                headers.insert(
                    "Accept".into(),
                    json!("application/json, text/event-stream"),
                );
            }
            operations.push(Operation {
                path_parameters: path_parameters(&label, resources),
                omit_query: cursors(&label, operation),
                headers,
                method,
                path: path.clone(),
                examples,
            });
        }
    }
    let late = |o: &Operation| match o.method.as_str() {
        "DELETE" => 2,
        _ if o.path_parameters.get("id") == Some(&json!(resources.other_thread)) => 1,
        _ => 0,
    };
    operations.sort_by_key(late);
    Plan { operations }
}

/// The path parameters of `label` that name a real resource.
fn path_parameters(label: &str, r: &Resources) -> Map<String, Value> {
    let (method, path) = label.split_once(' ').expect("METHOD /path");
    let mut fixed = Map::new();
    let mut set = |name: &str, value: &str| {
        fixed.insert(name.to_owned(), json!(value));
    };
    if let Some(rest) = path.strip_prefix("/api/threads/{id}") {
        let changes = matches!((method, rest), ("PATCH" | "DELETE", "") | (_, "/archive"));
        set("id", if changes { &r.other_thread } else { &r.thread });
        if rest.starts_with("/messages/{message_id}") {
            set("message_id", &r.user_message);
        }
    } else if path.starts_with("/api/schedules/{id}") {
        set("id", &r.schedule);
    } else if path == "/api/keys/{id}" {
        set("id", &r.key);
    } else if path == "/api/files/{id}" {
        set("id", &r.file);
    } else if path == "/api/tools/{name}/call" {
        set("name", &r.tool);
    }
    fixed
}

/// The query parameters of `label` that are cursors: tokens only the daemon gives out (a
/// made-up one is refused, as the document says).
fn cursors(label: &str, operation: &Value) -> Vec<String> {
    let parameters = operation["parameters"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    parameters
        .iter()
        .filter(|p| p["in"] == "query")
        .filter_map(|p| p["name"].as_str())
        .filter(|name| {
            *name == "cursor"
                || (label == "GET /api/threads/{id}/messages" && *name == "before")
                || (label.contains(" /v1/") && *name == "page")
        })
        .map(str::to_owned)
        .collect()
}
