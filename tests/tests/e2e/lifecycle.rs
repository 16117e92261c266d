//! Threads by the hundred thousand (#29): the list and a thread's messages in pages whose
//! cursors skip and repeat nothing while rows are added, over `/api` and `threads__list`;
//! renaming, tagging, archiving and unarchiving; and a delete that leaves nothing.

use std::collections::HashSet;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::McpHttp;
use harness_tests::mock::{MockApi, Reply};
use harness_tests::util::process_exists;

/// Every page of `path` (a list answering `{threads|messages, nextCursor}`), following the
/// cursors with `param`; `between` runs after the first page.
async fn all_pages(
    daemon: &TestDaemon,
    path: &str,
    key: &str,
    param: &str,
    mut between: impl FnMut(),
) -> Vec<Vec<Value>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{path}&{param}={c}"),
            None => path.to_owned(),
        };
        let (status, body) = daemon.get(&url).await;
        assert_eq!(status, StatusCode::OK, "{url}: {body}");
        pages.push(body[key].as_array().cloned().unwrap_or_default());
        if pages.len() == 1 {
            between();
        }
        match body["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return pages,
        }
        assert!(pages.len() < 50, "the pages end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_come_in_pages_newest_activity_first() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let mut made = Vec::new();
    for _ in 0..7 {
        made.push(daemon.create_thread().await);
    }
    // The oldest thread has a turn: it is the most recently active.
    daemon.reply(&made[0], "hello").await;
    let (tx, rx) = std::sync::mpsc::channel();
    let pages = all_pages(&daemon, "/api/threads?limit=3", "threads", "cursor", || {
        tx.send(()).unwrap()
    })
    .await;
    assert!(rx.try_recv().is_ok());
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
    let ids: Vec<&str> = pages
        .iter()
        .flatten()
        .filter_map(|t| t["id"].as_str())
        .collect();
    let mut expected: Vec<&str> = made.iter().skip(1).rev().map(String::as_str).collect();
    expected.insert(0, &made[0]);
    assert_eq!(ids, expected);
    assert!(pages[0][0]["lastActivityAt"].is_string());

    // A thread made while paging sorts first: it never lands in a later page.
    let (_, first) = daemon.get("/api/threads?limit=3").await;
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    let newer = daemon.create_thread().await;
    let (_, second) = daemon
        .get(&format!("/api/threads?limit=3&cursor={cursor}"))
        .await;
    let second: Vec<&str> = second["threads"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["id"].as_str())
        .collect();
    assert_eq!(second, ids[3..6], "the second page is as it was");
    assert!(!second.contains(&newer.as_str()));

    for (query, status) in [
        ("limit=0", 422),
        ("limit=501", 422),
        ("cursor=bm9wZQ", 422),
        ("archived=maybe", 422),
        ("createdFrom=yesterday", 400),
        ("color=red", 400),
    ] {
        let (got, body) = daemon.get(&format!("/api/threads?{query}")).await;
        assert_eq!(got.as_u16(), status, "{query}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    let (_, recent) = daemon
        .get(&format!(
            "/api/threads?limit=500&createdFrom={}",
            pages[0][1]["createdAt"].as_str().unwrap()
        ))
        .await;
    assert!(
        recent["threads"].as_array().unwrap().len() < 8,
        "createdFrom narrows: {recent}"
    );

    // The same pages through `threads__list`.
    let mcp = McpHttp::new(&daemon.base, None);
    let mut seen = Vec::new();
    let mut cursor = Value::Null;
    for id in 1..10 {
        let mut arguments = json!({"limit": 5});
        if let Some(c) = cursor.as_str() {
            arguments["cursor"] = json!(c);
        }
        let answer = mcp.call_tool(id, "threads__list", arguments).await;
        let page = &answer.result()["structuredContent"];
        seen.extend(
            page["threads"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["threadId"].as_str().unwrap().to_owned()),
        );
        cursor = page["nextCursor"].clone();
        if cursor.is_null() {
            break;
        }
    }
    assert_eq!(seen.len(), 8, "{seen:?}");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 8);
    assert_eq!(seen[0], newer);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_messages_come_in_pages_and_the_thread_shows_the_last() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    for n in 0..26 {
        daemon.reply(&thread, &format!("turn {n}")).await;
    }
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    let shown = body["messages"].as_array().unwrap();
    assert_eq!(shown.len(), 50, "the last page");
    assert_eq!(shown[0]["seq"], 3, "oldest first within it");
    assert_eq!(shown[49]["seq"], 52);
    let older = body["messagesCursor"].as_str().expect("there is more");
    let (status, rest) = daemon
        .get(&format!("/api/threads/{thread}/messages?before={older}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{rest}");
    let seqs: Vec<i64> = rest["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["seq"].as_i64())
        .collect();
    assert_eq!(seqs, [2, 1]);
    assert!(rest["nextCursor"].is_null());

    let pages = all_pages(
        &daemon,
        &format!("/api/threads/{thread}/messages?limit=20"),
        "messages",
        "before",
        || {},
    )
    .await;
    let seqs: Vec<i64> = pages
        .iter()
        .flatten()
        .filter_map(|m| m["seq"].as_i64())
        .collect();
    assert_eq!(
        seqs,
        (1..=52).rev().collect::<Vec<_>>(),
        "newest first, each once"
    );
    let (status, _) = daemon.get("/api/threads/thr_nope/messages").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // `threads__get` pages the same way.
    let mcp = McpHttp::new(&daemon.base, None);
    let got = mcp
        .call_tool(1, "threads__get", json!({"threadId": thread}))
        .await;
    let last = &got.result()["structuredContent"];
    assert_eq!(last["messages"].as_array().unwrap().len(), 50);
    assert_eq!(last["messages"][0]["seq"], 3);
    let before = last["messagesCursor"]
        .as_str()
        .expect("older ones")
        .to_owned();
    let older = mcp
        .call_tool(
            2,
            "threads__get",
            json!({"threadId": thread, "before": before}),
        )
        .await;
    let older = &older.result()["structuredContent"];
    let seqs: Vec<i64> = older["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["seq"].as_i64())
        .collect();
    assert_eq!(seqs, [1, 2], "oldest first within the page");
    assert!(older["messagesCursor"].is_null());
    let bad = mcp
        .call_tool(
            3,
            "threads__get",
            json!({"threadId": thread, "before": "nope"}),
        )
        .await;
    assert_eq!(bad.result()["isError"], true, "{}", bad.last());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_is_renamed_tagged_archived_and_unarchived() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let path = format!("/api/threads/{thread}");
    let (status, body) = daemon
        .patch(
            &path,
            json!({"title": "Quarterly report", "tags": ["finance", "q3", "q3"]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["title"], "Quarterly report");
    assert_eq!(body["tags"], json!(["finance", "q3"]));
    let (_, tagged) = daemon.get("/api/threads?tag=finance").await;
    assert_eq!(tagged["threads"][0]["id"], thread.as_str());
    assert_eq!(tagged["threads"][0]["tags"], json!(["finance", "q3"]));
    let (_, none) = daemon.get("/api/threads?tag=marketing").await;
    assert_eq!(none["threads"], json!([]));

    let (status, body) = daemon.patch(&path, json!({"archived": true})).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["archivedAt"].is_string());
    let (_, live) = daemon.get("/api/threads").await;
    assert!(
        !live.to_string().contains(&thread),
        "archived leaves the default list"
    );
    let (_, archived) = daemon.get("/api/threads?archived=true").await;
    assert_eq!(archived["threads"][0]["id"], thread.as_str());
    let (status, _) = daemon.send(&thread, "still there?").await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "an archived thread takes no messages"
    );

    let (status, body) = daemon
        .patch(&path, json!({"archived": false, "title": null}))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body["archivedAt"].is_null() && body["title"].is_null(),
        "{body}"
    );
    assert_eq!(
        daemon.reply(&thread, "back again").await,
        "echo: back again"
    );

    let many: Vec<String> = (0..21).map(|n| format!("t{n}")).collect();
    for bad in [
        json!({"title": "  "}),
        json!({"title": "x".repeat(201)}),
        json!({"tags": [""]}),
        json!({"tags": many}),
        json!({"archived": "yes"}),
    ] {
        let (status, body) = daemon.patch(&path, bad.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
    }
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_thread_leaves_nothing_and_its_running_turn_stops() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    let (status, fork) = daemon
        .post(&format!("/api/threads/{thread}/fork"), json!({}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{fork}");
    let fork = fork["id"].as_str().unwrap().to_owned();
    let pid = daemon.pid_of(&thread).expect("a warm process");
    let folder = std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap();
    // A turn that waits on the model when the delete comes.
    mock.once_when_prompt_contains("wait for it", Reply::Hang);
    let (status, _) = daemon
        .post(
            &format!("/api/threads/{thread}/messages?wait=false"),
            json!({"content": "wait for it"}),
        )
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    mock.wait_for_requests(2, Duration::from_secs(30))
        .await
        .unwrap();

    let url = format!("{}/api/threads/{thread}", daemon.base);
    let deleted = reqwest::Client::new().delete(&url).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let (status, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    let again = reqwest::Client::new().delete(&url).send().await.unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
    let left = daemon
        .daemon()
        .store
        .thread_rows(&plugin_contract::ThreadId::from_string(&thread))
        .await
        .unwrap();
    assert!(left.iter().all(|(_, n)| *n == 0), "{left:?}");
    assert!(!process_exists(pid), "its process is gone");
    assert!(!folder.exists(), "its folder is gone");
    let (status, kept) = daemon.get(&format!("/api/threads/{fork}")).await;
    assert_eq!(status, StatusCode::OK, "the fork is kept");
    assert!(kept["parentId"].is_null(), "{kept}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_cascade_a_delete_takes_the_children_too() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.threads.delete_children = orchestrator::config::DeleteChildren::Cascade;
    })
    .await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "first").await;
    let (_, fork) = daemon
        .post(&format!("/api/threads/{thread}/fork"), json!({}))
        .await;
    let fork = fork["id"].as_str().unwrap().to_owned();
    let url = format!("{}/api/threads/{thread}", daemon.base);
    let deleted = reqwest::Client::new().delete(&url).send().await.unwrap();
    assert_eq!(deleted.status(), StatusCode::NO_CONTENT);
    let (status, _) = daemon.get(&format!("/api/threads/{fork}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_are_found_by_the_words_of_their_titles_and_messages() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let mut found = Vec::new();
    for n in 0..5 {
        let thread = daemon.create_thread().await;
        daemon
            .reply(&thread, &format!("invoice number {n} for the harbour"))
            .await;
        found.push(thread);
    }
    let titled = daemon.create_thread().await;
    daemon
        .patch(
            &format!("/api/threads/{titled}"),
            json!({"title": "Harbour invoices"}),
        )
        .await;
    let other = daemon.create_thread().await;
    daemon.reply(&other, "nothing to see").await;
    found.push(titled);

    let pages = all_pages(
        &daemon,
        "/api/threads?q=harbour%20invoice&limit=2",
        "threads",
        "cursor",
        || {},
    )
    .await;
    let mut ids: Vec<String> = pages
        .iter()
        .flatten()
        .filter_map(|t| t["id"].as_str().map(str::to_owned))
        .collect();
    // "invoice" is a word of every message; the title says "invoices": five threads match.
    assert_eq!(ids.len(), 5, "{ids:?}");
    ids.sort();
    let mut expected = found[..5].to_vec();
    expected.sort();
    assert_eq!(ids, expected);
    let (_, one) = daemon.get("/api/threads?q=number%203").await;
    assert_eq!(one["threads"].as_array().unwrap().len(), 1, "{one}");
    assert_eq!(one["threads"][0]["id"], found[3].as_str());
    let (_, titles) = daemon.get("/api/threads?q=invoices").await;
    assert_eq!(titles["threads"][0]["id"], found[5].as_str(), "{titles}");

    let mcp = McpHttp::new(&daemon.base, None);
    let answer = mcp
        .call_tool(1, "threads__list", json!({"q": "nothing"}))
        .await;
    let listed = &answer.result()["structuredContent"]["threads"];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed[0]["threadId"], other.as_str());
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permissions_and_deliveries_come_in_pages() {
    use orchestrator::config::WebhookEndpoint;
    use orchestrator::store::{NewPermission, WebhookDraft};

    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |config| {
        // Nothing listens there: every delivery dies after its one attempt.
        config.webhooks.endpoints = vec![WebhookEndpoint {
            url: "http://127.0.0.1:9/hooks".into(),
            secret: Some("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into()),
            secrets: Vec::new(),
            events: Vec::new(),
        }];
        config.webhooks.allow_private_targets = true;
        config.webhooks.max_attempts = 1;
    })
    .await;
    let store = daemon.daemon().store.clone();
    let thread = daemon.create_thread().await;
    let id = plugin_contract::ThreadId::from_string(&thread);
    let input = json!({"command": "touch f"});
    for n in 0..5 {
        let request = format!("req-{n}");
        let new = NewPermission {
            request_id: &request,
            thread_id: &id,
            message_id: None,
            tool_use_id: None,
            tool_name: "Bash",
            input: &input,
        };
        let (status, by) = match n % 2 {
            0 => ("pending", None),
            _ => ("denied", Some("rule")),
        };
        store
            .record_permission(new, status, by, None)
            .await
            .unwrap();
        let draft = WebhookDraft {
            kind: "turn.finished",
            data: json!({"n": n}),
        };
        store
            .append_announced(&id, None, "note", &json!({}), &[draft])
            .await
            .unwrap();
    }

    // Permissions, oldest first: all five in pages of two; the pending three in pages of two.
    let path = format!("/api/threads/{thread}/permissions?all=true&limit=2");
    let pages = all_pages(&daemon, &path, "permissions", "cursor", || {}).await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
    let ids: Vec<&str> = pages
        .iter()
        .flatten()
        .filter_map(|p| p["requestId"].as_str())
        .collect();
    assert_eq!(ids, ["req-0", "req-1", "req-2", "req-3", "req-4"]);
    let path = format!("/api/threads/{thread}/permissions?limit=2");
    let pages = all_pages(&daemon, &path, "permissions", "cursor", || {}).await;
    let ids: Vec<&str> = pages
        .iter()
        .flatten()
        .filter_map(|p| p["requestId"].as_str())
        .collect();
    assert_eq!(ids, ["req-0", "req-2", "req-4"]);

    // Deliveries, newest first, once all five are made: the pages hold the list, in order.
    let all = || async {
        let (_, body) = daemon.get("/api/webhooks/deliveries?limit=100").await;
        body["deliveries"].as_array().cloned().unwrap_or_default()
    };
    harness_tests::util::eventually_async(Duration::from_secs(30), "five deliveries", || async {
        all().await.len() == 5
    })
    .await
    .unwrap();
    let every: Vec<String> = all()
        .await
        .iter()
        .filter_map(|d| d["id"].as_str().map(str::to_owned))
        .collect();
    let pages = all_pages(
        &daemon,
        "/api/webhooks/deliveries?limit=2",
        "deliveries",
        "cursor",
        || {},
    )
    .await;
    assert_eq!(pages.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2, 1]);
    let paged: Vec<String> = pages
        .iter()
        .flatten()
        .filter_map(|d| d["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(paged, every);
    assert_eq!(
        pages[2][0]["data"]["n"], 0,
        "the oldest last: {:?}",
        pages[2][0]
    );

    for bad in [
        format!("/api/threads/{thread}/permissions?cursor=nope"),
        "/api/webhooks/deliveries?cursor=bm9wZQ".to_owned(),
        format!("/api/threads/{thread}/permissions?limit=0"),
    ] {
        let (status, body) = daemon.get(&bad).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{bad}: {body}");
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    daemon.stop().await;
}
