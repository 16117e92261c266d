//! Agent profiles, on the real binary: a profile with an external stdio MCP server (written with
//! the official Python SDK) gives that server's tools to its threads' model, which calls one,
//! and to no thread of another profile; the server's secret reaches the server and nothing else:
//! not a command line (`/proc/*/cmdline`), not the daemon's log at `trace`, not the API. A
//! turn that names some of its profile's servers (`mcpServers`) has the others switched off in
//! place, on the same process, and the next turn gets them back.

mod support;

use std::path::Path;

use serde_json::{json, Value};
use tempfile::TempDir;

use harness_tests::mcp::{one_tool_server, python_or_skip};
use harness_tests::mock::{MockApi, Reply};
use support::{Harness, Launch};

const SECRET: &str = "tk-4f1d9c2e-never-shown";

/// A stdio MCP server with one tool, `lookup`, that says whether the server got its token.
const SERVER: &str = r#"
import os
from mcp.server.mcpserver import MCPServer

server = MCPServer("tickets")

@server.tool()
def lookup(ticket: str) -> str:
    """Looks a ticket up."""
    token = os.environ.get("TICKETS_TOKEN")
    return f"ticket {ticket}: " + ("token ok" if token == "SECRET_VALUE" else "no token")

server.run()
"#;

/// Every process's command line, NULs as spaces.
fn command_lines() -> String {
    let mut all = String::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(bytes) = std::fs::read(entry.path().join("cmdline")) {
            all.push_str(&String::from_utf8_lossy(&bytes).replace('\0', " "));
            all.push('\n');
        }
    }
    all
}

/// Profiles `ticketer` (the `tickets` server) and `desk` (`tickets` and `notes`).
fn config(dir: &Path, python: &Path) -> String {
    let script = dir.join("tickets.py");
    std::fs::write(&script, SERVER.replace("SECRET_VALUE", SECRET)).expect("the server script");
    let notes = one_tool_server(dir, "notes", "jot");
    let token = dir.join("tickets-token");
    std::fs::write(&token, format!("{SECRET}\n")).expect("the token file");
    let tickets = format!(
        "command = {python:?}\nargs = [{script:?}]\nsecrets = {{ TICKETS_TOKEN = \"file:{token}\" }}\n",
        python = python.display().to_string(),
        script = script.display().to_string(),
        token = token.display(),
    );
    format!(
        r#"
[profiles.ticketer]
description = "works the ticket queue"
[profiles.ticketer.mcp_servers.tickets]
{tickets}
[profiles.desk.mcp_servers.tickets]
{tickets}
[profiles.desk.mcp_servers.notes]
command = {python:?}
args = [{notes:?}]
"#,
        python = python.display().to_string(),
        notes = notes.display().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profiles_mcp_server_serves_its_threads_only_and_its_secret_stays_hidden() {
    let Some(python) =
        python_or_skip("a_profiles_mcp_server_serves_its_threads_only_and_its_secret_stays_hidden")
            .await
    else {
        return;
    };
    let dir = TempDir::new().expect("a temporary folder");
    let more = config(dir.path(), &python);
    let launch = Launch {
        env: &[("RUST_LOG", "trace")],
        config: &more,
        ..Launch::with_grace(5)
    };
    let mock = MockApi::start().await;
    let daemon = Harness::start(dir.path(), &mock, &launch).await;

    let profiles = daemon.get_ok("/api/profiles").await;
    let names: Vec<&str> = profiles["profiles"]
        .as_array()
        .expect("a list")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["desk", "lean", "standard", "ticketer"],
        "{profiles}"
    );
    let ticketer = &profiles["profiles"][3];
    assert_eq!(ticketer["mcpServers"][0]["name"], "tickets");
    assert_eq!(ticketer["description"], "works the ticket queue");

    let (status, thread) = daemon
        .client
        .post("/api/threads", json!({"profile": "ticketer"}))
        .await;
    assert_eq!(status, 201, "{thread}");
    assert_eq!(thread["profile"], "ticketer");
    let id = thread["id"].as_str().expect("an id").to_owned();
    mock.once_when_prompt_contains(
        "look up T-1",
        Reply::tool_use("mcp__tickets__lookup", json!({"ticket": "T-1"})),
    );
    let (status, reply) = daemon
        .client
        .post(
            &format!("/api/threads/{id}/messages"),
            json!({"content": "look up T-1"}),
        )
        .await;
    assert_eq!(status, 200, "{reply}\n{}", daemon.log_text());
    let asked = mock.message_requests();
    let offered = asked[0].tool_names();
    assert!(
        offered.iter().any(|t| t == "mcp__tickets__lookup"),
        "{offered:?}"
    );
    // Beside Harness's own: adding the profile's servers keeps the ones given at `initialize`.
    assert!(
        offered
            .iter()
            .any(|t| t == "mcp__harness__time__current_time"),
        "{offered:?}"
    );
    let results: Vec<_> = asked.iter().flat_map(|r| r.tool_results()).collect();
    assert!(
        results
            .iter()
            .any(|r| !r.is_error && r.text.contains("ticket T-1: token ok")),
        "the server got its token: {results:?}"
    );
    // The command lines of every process, the server's among them, while it runs.
    let lines = command_lines();
    assert!(lines.contains("tickets.py"), "the server runs");
    assert!(!lines.contains(SECRET), "the secret is on a command line");

    // A thread of the default profile is not offered the server's tools.
    let (_, plain) = daemon.client.post("/api/threads", json!({})).await;
    let plain = plain["id"].as_str().expect("an id").to_owned();
    let before = mock.message_requests().len();
    let (status, _) = daemon
        .client
        .post(
            &format!("/api/threads/{plain}/messages"),
            json!({"content": "hello"}),
        )
        .await;
    assert_eq!(status, 200);
    let plain_offer = mock.message_requests()[before].tool_names();
    assert!(
        !plain_offer.iter().any(|t| t.starts_with("mcp__tickets")),
        "{plain_offer:?}"
    );

    // Nowhere else: the API and the log (at trace, which shows every other stdin line).
    for path in ["/api/profiles", &format!("/api/threads/{id}"), "/api/pool"] {
        let body: Value = daemon.get_ok(path).await;
        assert!(!body.to_string().contains(SECRET), "{path}: {body}");
    }
    let log = daemon.log_text();
    assert!(
        log.contains("mcp_set_servers (not shown)"),
        "the request went"
    );
    assert!(!log.contains(SECRET), "the secret is in the log");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_switches_its_profiles_mcp_servers_off_and_back_in_place() {
    let Some(python) =
        python_or_skip("a_turn_switches_its_profiles_mcp_servers_off_and_back_in_place").await
    else {
        return;
    };
    let dir = TempDir::new().expect("a temporary folder");
    let more = config(dir.path(), &python);
    let launch = Launch {
        config: &more,
        ..Launch::with_grace(5)
    };
    let mock = MockApi::start().await;
    let daemon = Harness::start(dir.path(), &mock, &launch).await;
    let (_, thread) = daemon
        .client
        .post("/api/threads", json!({"profile": "desk"}))
        .await;
    let id = thread["id"].as_str().expect("an id").to_owned();
    let path = format!("/api/threads/{id}/messages");
    // Each turn: what the model was offered, and the thread's process.
    let turn = |body: Value| {
        let (daemon, mock, path, id) = (&daemon, &mock, &path, &id);
        async move {
            let (status, reply) = daemon.client.post(path, body).await;
            assert_eq!(status, 200, "{reply}\n{}", daemon.log_text());
            let offered = mock
                .message_requests()
                .last()
                .expect("a request")
                .tool_names();
            let pool = daemon.get_ok("/api/pool").await;
            let processes = pool["processes"].as_array().cloned().unwrap_or_default();
            let pid = processes
                .iter()
                .find(|p| p["threadId"] == id.as_str())
                .and_then(|p| p["pid"].as_u64())
                .expect("the thread's process");
            (offered, pid)
        }
    };
    let has = |offered: &[String], tool: &str| offered.iter().any(|t| t == tool);
    let (lookup, jot) = ("mcp__tickets__lookup", "mcp__notes__jot");

    let (all, pid) = turn(json!({"content": "first"})).await;
    assert!(has(&all, lookup) && has(&all, jot), "{all:?}");
    let ours: Vec<&String> = all
        .iter()
        .filter(|t| t.starts_with("mcp__harness__"))
        .collect();
    assert!(!ours.is_empty(), "{all:?}");

    let (fewer, same) = turn(json!({"content": "second", "mcpServers": ["tickets"]})).await;
    assert!(has(&fewer, lookup) && !has(&fewer, jot), "{fewer:?}");
    assert!(
        ours.iter().all(|t| fewer.contains(t)),
        "Harness's own tools stay: {fewer:?}"
    );
    assert_eq!(same, pid, "switched in place");

    let (none, same) = turn(json!({"content": "third", "mcpServers": []})).await;
    assert!(
        !none
            .iter()
            .any(|t| t.starts_with("mcp__tickets") || t.starts_with("mcp__notes")),
        "{none:?}"
    );
    assert_eq!(same, pid);

    let (back, same) = turn(json!({"content": "fourth"})).await;
    assert!(has(&back, lookup) && has(&back, jot), "{back:?}");
    assert_eq!(same, pid, "and back, in place");

    let (status, answer) = daemon
        .client
        .post(
            &path,
            json!({"content": "x", "mcpServers": ["tickets", "github"]}),
        )
        .await;
    assert_eq!(status, 422, "{answer}");
    let message = answer["error"]["message"].as_str().expect("a message");
    assert!(
        message.contains("no MCP server `github`") && message.contains("notes, tickets"),
        "{message}"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_profile_keeps_what_it_does_not_let_callers_choose() {
    let dir = TempDir::new().expect("a temporary folder");
    let launch = Launch {
        config: "[profiles.locked]\nmodel = \"claude-locked\"\noverridable = []\n",
        ..Launch::with_grace(5)
    };
    let mock = MockApi::start().await;
    let daemon = Harness::start(dir.path(), &mock, &launch).await;
    for (body, says) in [
        (json!({"profile": "nope"}), "not configured"),
        (json!({"profile": "locked", "model": "other"}), "`model`"),
        (
            json!({"profile": "locked", "workspace": {"path": "/tmp"}}),
            "`workspace`",
        ),
    ] {
        let (status, answer) = daemon.client.post("/api/threads", body.clone()).await;
        assert_eq!(status, 422, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().expect("a message");
        assert!(message.contains(says), "{body}: {message}");
    }
    let (_, thread) = daemon
        .client
        .post("/api/threads", json!({"profile": "locked"}))
        .await;
    let id = thread["id"].as_str().expect("an id").to_owned();
    let path = format!("/api/threads/{id}/messages");
    let (status, answer) = daemon
        .client
        .post(&path, json!({"content": "hi", "model": "other"}))
        .await;
    assert_eq!(status, 422, "{answer}");
    let (status, answer) = daemon
        .client
        .post(&path, json!({"content": "hi", "permissionMode": "plan"}))
        .await;
    assert_eq!(status, 422, "{answer}");
    assert!(answer.to_string().contains("`permissionMode`"), "{answer}");
    let (status, answer) = daemon
        .client
        .post(&path, json!({"content": "hi", "mcpServers": []}))
        .await;
    assert_eq!(status, 422, "{answer}");
    assert!(answer.to_string().contains("`mcpServers`"), "{answer}");
    let (status, reply) = daemon.client.post(&path, json!({"content": "hi"})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        mock.message_requests().last().expect("a request").model(),
        Some("claude-locked"),
        "the profile's model"
    );
    daemon.stop().await;
}
