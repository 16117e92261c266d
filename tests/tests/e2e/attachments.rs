//! Images and documents in, files out (#26): what the real CLI sends the API for a base64 block,
//! an uploaded file, `threads__send` and a thread whose session is gone; uploads checked against
//! their bytes; a thread's folder served without ever leaving it.

use std::path::{Path, PathBuf};

use plugin_contract::{CliSessionId, ThreadId};
use reqwest::StatusCode;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::McpHttp;
use harness_tests::media::{b64, PDF, PNG};
use harness_tests::mock::{MediaBlock, MockApi, Reply};

fn media(kind: &str, media_type: &str, data: &[u8]) -> MediaBlock {
    MediaBlock {
        kind: kind.into(),
        media_type: media_type.into(),
        data: data.to_vec(),
    }
}

fn blocks_with_base64() -> Value {
    json!([
        {"type": "text", "text": "what is in these?"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(PNG)}},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64(PDF)}},
    ])
}

async fn messages(daemon: &TestDaemon, thread: &str) -> Vec<Value> {
    let (_, body) = daemon.get(&format!("/api/threads/{thread}")).await;
    body["messages"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn base64_blocks_reach_the_api_and_the_thread_keeps_references() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let (status, reply) = daemon
        .post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": blocks_with_base64()}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let sent = mock.message_requests().last().cloned().expect("a request");
    assert_eq!(
        sent.last_user_media(),
        [
            media("image", "image/png", PNG),
            media("document", "application/pdf", PDF)
        ]
    );
    assert!(sent.last_user_text().contains("what is in these?"));

    let stored = messages(&daemon, &thread).await;
    let user = &stored[0];
    assert_eq!(user["content"], "what is in these?");
    let blocks = user["blocks"].as_array().expect("the blocks are shown");
    assert_eq!(blocks.len(), 3, "{user}");
    for (block, (kind, media_type, bytes)) in blocks[1..].iter().zip([
        ("image", "image/png", PNG.len()),
        ("document", "application/pdf", PDF.len()),
    ]) {
        assert_eq!(block["type"], kind);
        assert_eq!(block["source"]["type"], "file");
        assert!(block["source"]["fileId"]
            .as_str()
            .unwrap()
            .starts_with("file_"));
        assert_eq!(block["source"]["media_type"], media_type);
        assert_eq!(block["source"]["bytes"], bytes);
    }
    assert!(
        !user.to_string().contains(&b64(PDF)),
        "references, not base64: {user}"
    );
    // The reference serves the bytes.
    let id = blocks[1]["source"]["fileId"].as_str().unwrap();
    let (status, content_type, bytes) =
        daemon.client().get_bytes(&format!("/api/files/{id}")).await;
    assert_eq!(
        (status, content_type.as_str()),
        (StatusCode::OK, "image/png")
    );
    assert_eq!(bytes, PNG);

    // The same message again under one clientMessageId is one turn; other bytes conflict.
    let path = format!("/api/threads/{thread}/messages");
    let send =
        |content: Value| daemon.post(&path, json!({"content": content, "clientMessageId": "m-1"}));
    let (first, _) = send(blocks_with_base64()).await;
    let turns = mock.message_requests().len();
    let (again, body) = send(blocks_with_base64()).await;
    assert_eq!((first, again), (StatusCode::OK, StatusCode::OK), "{body}");
    assert_eq!(mock.message_requests().len(), turns, "not run twice");
    let mut other = blocks_with_base64();
    other[1]["source"]["data"] = json!(b64(&harness_tests::media::padded_png(100, 1)));
    let (status, body) = send(other).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uploaded_file_is_sent_by_its_id() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let (status, file) = daemon
        .client()
        .post_bytes("/api/files", "application/pdf", PDF)
        .await;
    assert_eq!(status, StatusCode::CREATED, "{file}");
    assert_eq!(file["mediaType"], "application/pdf");
    assert_eq!(file["bytes"], PDF.len());
    assert_eq!(file["sha256"].as_str().map(str::len), Some(64));
    let (_, again) = daemon
        .client()
        .post_bytes("/api/files", "application/pdf", PDF)
        .await;
    assert_eq!(again["id"], file["id"], "stored once");

    let (status, reply) = daemon
        .post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": [
                {"type": "document", "source": {"type": "file", "fileId": file["id"]}},
                {"type": "text", "text": "summarise it"},
            ]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{reply}");
    let sent = mock.message_requests().last().cloned().expect("a request");
    assert_eq!(
        sent.last_user_media(),
        [media("document", "application/pdf", PDF)]
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_are_refused_with_json_and_nothing_is_stored() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.files.max_file_bytes = 1000;
    })
    .await;
    let thread = daemon.create_thread().await;
    let client = daemon.client();
    for (content_type, bytes, status, code) in [
        ("image/jpeg", PNG.to_vec(), 422, "media_type_mismatch"),
        (
            "image/svg+xml",
            b"<svg/>".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "text/plain",
            b"hello".to_vec(),
            415,
            "unsupported_media_type",
        ),
        (
            "image/png",
            harness_tests::media::padded_png(1001, 0),
            413,
            "body_too_large",
        ),
    ] {
        let (got, body) = client.post_bytes("/api/files", content_type, bytes).await;
        assert_eq!(got.as_u16(), status, "{content_type}: {body}");
        assert_eq!(body["error"]["code"], code, "{content_type}: {body}");
    }
    let path = format!("/api/threads/{thread}/messages");
    let image = |source: Value| json!([{"type": "image", "source": source}]);
    for (content, status, code) in [
        (
            image(json!({"type": "base64", "media_type": "image/png", "data": "%%%"})),
            422,
            "invalid_content",
        ),
        (
            image(json!({"type": "base64", "media_type": "image/gif", "data": b64(PNG)})),
            422,
            "invalid_content",
        ),
        (
            image(json!({"type": "file", "fileId": "file_0000"})),
            422,
            "invalid_content",
        ),
        (
            image(json!({"type": "url", "url": "http://example.com/a.png"})),
            422,
            "invalid_body",
        ),
        (
            json!([{"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": b64(&harness_tests::media::padded_png(2000, 0))}}]),
            422,
            "invalid_content",
        ),
        (
            image(
                json!({"type": "base64", "media_type": "image/png", "data": b64(&harness_tests::media::padded_png(1001, 0))}),
            ),
            413,
            "payload_too_large",
        ),
    ] {
        let (got, body) = daemon.post(&path, json!({"content": content})).await;
        assert_eq!(got.as_u16(), status, "{content}: {body}");
        assert_eq!(body["error"]["code"], code, "{content}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{body}"
        );
    }
    assert!(
        messages(&daemon, &thread).await.is_empty(),
        "nothing stored"
    );
    assert!(
        mock.message_requests().is_empty(),
        "nothing reached the model"
    );
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_send_takes_mcp_image_and_resource_content() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let mcp = McpHttp::new(&daemon.base, None);
    let sent = mcp
        .call_tool(
            1,
            "threads__send",
            json!({
                "threadId": thread,
                "content": "compare",
                "attachments": [
                    {"type": "image", "data": b64(PNG), "mimeType": "image/png"},
                    {"type": "resource", "resource": {"uri": "file:///report.pdf", "mimeType": "application/pdf", "blob": b64(PDF)}},
                ],
            }),
        )
        .await;
    assert_eq!(
        sent.result()["structuredContent"]["status"],
        "done",
        "{}",
        sent.last()
    );
    let request = mock.message_requests().last().cloned().expect("a request");
    assert_eq!(
        request.last_user_media(),
        [
            media("image", "image/png", PNG),
            media("document", "application/pdf", PDF)
        ]
    );
    let refused = mcp
        .call_tool(
            2,
            "threads__send",
            json!({"threadId": thread, "attachments": [{"type": "image", "data": b64(PNG), "mimeType": "image/jpeg"}]}),
        )
        .await;
    let result = refused.result();
    assert_eq!(result["isError"], true, "a tool error: {result}");
    assert!(result.to_string().contains("not image/jpeg"), "{result}");
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_whose_session_is_gone_gets_its_images_back_in_the_history() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let (status, _) = daemon
        .post(
            &format!("/api/threads/{thread}/messages"),
            json!({"content": blocks_with_base64()}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // The CLI's session files are gone: the thread names a session no project has, and nothing
    // is stored to restore it from.
    let stale = CliSessionId::from_string(uuid::Uuid::new_v4().to_string());
    daemon
        .daemon()
        .store
        .set_cli_session(&ThreadId::from_string(&thread), Some(&stale))
        .await
        .unwrap();
    let daemon = daemon.restart().await;
    let reply = daemon.reply(&thread, "and now?").await;
    assert!(reply.contains("<conversation_history>"), "{reply}");
    let sent = mock.message_requests().last().cloned().expect("a request");
    assert_eq!(
        sent.last_user_media(),
        [
            media("image", "image/png", PNG),
            media("document", "application/pdf", PDF)
        ],
        "the history carries the blocks, not placeholders"
    );
    assert_eq!(daemon.counts().resume_fallbacks, 1);
    daemon.stop().await;
}

/// The thread's working folder, from its live process.
fn folder_of(daemon: &TestDaemon, thread: &str) -> PathBuf {
    let pid = daemon.pid_of(thread).expect("a live process");
    std::fs::read_link(format!("/proc/{pid}/cwd")).expect("its working folder")
}

/// `GET` with the path sent as it is (no client normalizing `..`): the status.
async fn raw_get_status(base: &str, path: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let host = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(host).await.expect("connect");
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.expect("write");
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.expect("read");
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_threads_files_are_listed_and_served_and_nothing_outside_its_folder() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.claude.builtin_tools = Some("Write".into());
        c.approvals.rules = vec![orchestrator::config::ApprovalRule {
            tool: "Write".into(),
            decision: orchestrator::config::RuleDecision::Allow,
        }];
    })
    .await;
    let thread = daemon.create_thread().await;
    let other = daemon.create_thread().await;
    daemon.reply(&thread, "hello").await;
    daemon.reply(&other, "hello").await;
    let folder = folder_of(&daemon, &thread);
    let other_folder = folder_of(&daemon, &other);
    mock.once_when_prompt_contains(
        "write the report",
        Reply::write(&folder.join("out/report.md"), "# Report\n"),
    );
    daemon.reply(&thread, "write the report").await;
    std::fs::write(other_folder.join("theirs.txt"), "the other thread's").unwrap();
    let secret = daemon.data_dir().join("secret.txt");
    std::fs::write(&secret, "the daemon's").unwrap();
    // What a model with a shell could make: links out of its folder.
    std::os::unix::fs::symlink(&secret, folder.join("escape.txt")).unwrap();
    std::os::unix::fs::symlink(daemon.data_dir(), folder.join("up")).unwrap();
    std::os::unix::fs::symlink(other_folder.join("theirs.txt"), folder.join("theirs.txt")).unwrap();

    let (status, listing) = daemon.get(&format!("/api/threads/{thread}/files")).await;
    assert_eq!(status, StatusCode::OK, "{listing}");
    let paths: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert!(paths.contains(&"out/report.md"), "{listing}");
    assert!(
        !paths
            .iter()
            .any(|p| p.contains("escape") || p.starts_with("up")),
        "{listing}"
    );
    let report = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "out/report.md")
        .unwrap();
    assert_eq!(report["bytes"], 9);
    assert!(report["modified"].is_string());

    let (status, _, bytes) = daemon
        .client()
        .get_bytes(&format!("/api/threads/{thread}/files/out/report.md"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(bytes, b"# Report\n");

    let other_name = other_folder
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    for path in [
        "escape.txt".to_owned(),
        "up/secret.txt".to_owned(),
        "theirs.txt".to_owned(),
        "..%2Fsecret.txt".to_owned(),
        format!("..%2F{other_name}%2Ftheirs.txt"),
        "%2Fetc%2Fpasswd".to_owned(),
        "out".to_owned(),
        "nothing.txt".to_owned(),
    ] {
        let (status, _, body) = daemon
            .client()
            .get_bytes(&format!("/api/threads/{thread}/files/{path}"))
            .await;
        assert_eq!(
            status,
            StatusCode::NOT_FOUND,
            "{path}: {}",
            String::from_utf8_lossy(&body)
        );
    }
    for raw in [
        format!("/api/threads/{thread}/files/../../secret.txt"),
        format!("/api/threads/{thread}/files/../{other}/theirs.txt"),
        format!("/api/threads/{thread}/files/out/../../{other_name}/theirs.txt"),
    ] {
        let status = raw_get_status(&daemon.base, &raw).await;
        assert_eq!(status, 404, "{raw}");
    }
    assert_eq!(
        std::fs::read_to_string(Path::new(&secret)).unwrap(),
        "the daemon's",
        "untouched"
    );
    daemon.stop().await;
}

/// #46: a hard link to the daemon's database in a thread's folder was served whole, and a
/// thread's folder swapped for a symlink to `/etc` served `/etc/passwd`. A file with another
/// link is neither listed nor served; a folder that is not where it was made is refused, as a
/// turn in it would be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hard_link_or_a_swapped_folder_serves_nothing_of_the_outside() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    daemon.reply(&thread, "hello").await;
    let folder = folder_of(&daemon, &thread);
    std::fs::write(folder.join("mine.txt"), "written here").unwrap();
    // The database, or on PostgreSQL another file of the daemon's.
    let db = PathBuf::from(daemon.config.db_path());
    let private = if db.is_file() {
        db
    } else {
        let secret = daemon.data_dir().join("secret.txt");
        std::fs::write(&secret, "the daemon's").unwrap();
        secret
    };
    std::fs::hard_link(&private, folder.join("copy.db")).unwrap();

    let (status, listing) = daemon.get(&format!("/api/threads/{thread}/files")).await;
    assert_eq!(status, StatusCode::OK, "{listing}");
    let paths: Vec<&str> = listing["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|f| f["path"].as_str())
        .collect();
    assert_eq!(paths, ["mine.txt"], "{listing}");
    let file = |path: &str| {
        let url = format!("/api/threads/{thread}/files/{path}");
        let client = daemon.client().clone();
        async move { client.get_bytes(&url).await }
    };
    let (status, _, bytes) = file("copy.db").await;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "served {} bytes",
        bytes.len()
    );
    let (status, _, bytes) = file("mine.txt").await;
    assert_eq!(
        (status, bytes.as_slice()),
        (StatusCode::OK, &b"written here"[..])
    );

    // The folder swapped for a symlink to /etc (its process still works in the moved one).
    std::fs::rename(&folder, folder.with_extension("moved")).unwrap();
    std::os::unix::fs::symlink("/etc", &folder).unwrap();
    let (status, _, body) = file("passwd").await;
    let body = String::from_utf8_lossy(&body);
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("workspace_unavailable"), "{body}");
    let (status, listing) = daemon.get(&format!("/api/threads/{thread}/files")).await;
    assert_eq!(status, StatusCode::CONFLICT, "{listing}");
    daemon.stop().await;
}
