//! `just demo`: the daemon against the real `claude` CLI and the local mock Messages API, so a
//! newcomer sees the whole flow without an account. Walks through a conversation, then keeps
//! serving on `HARNESS_DEMO_BIND` (default 127.0.0.1:7878) until Ctrl-C so you can try the API.

use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let bind = std::env::var("HARNESS_DEMO_BIND").unwrap_or_else(|_| "127.0.0.1:7878".into());
    let bind = bind
        .parse()
        .context("HARNESS_DEMO_BIND must be an address like 127.0.0.1:7878")?;
    println!("Starting the mock Messages API and the daemon (the first run installs the claude CLI under target/)...");
    let mock = MockApi::start().await;
    // Whenever a prompt asks for the time, the "model" calls our time tool.
    mock.when_prompt_contains(
        "what time",
        Reply::tool_use(
            "mcp__harness__time__current_time",
            json!({"timezone": "Europe/Berlin"}),
        ),
    );
    let daemon = TestDaemon::start(&mock, |c| c.bind = bind).await;
    let base = daemon.base.clone();
    println!("Daemon: {base}   (mock Messages API: {})\n", mock.url());

    let thread = daemon.create_thread().await;
    println!("1. POST /api/threads → thread {thread}");

    let (status, _) = daemon
        .post("/api/prewarm", json!({"threadId": thread}))
        .await;
    let t = Instant::now();
    while daemon.pid_of(&thread).is_none() && t.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "2. POST /api/prewarm → {status}; claude pid {:?} ready after {:?}",
        daemon.pid_of(&thread),
        t.elapsed()
    );

    for (n, text) in [
        (3, "hello, who are you?"),
        (4, "and what time is it in Berlin?"),
        (5, "thanks!"),
    ] {
        let t = Instant::now();
        let reply = daemon.reply(&thread, text).await;
        println!(
            "{n}. POST /api/threads/{{id}}/messages {text:?}\n   → {reply:?} in {:?}",
            t.elapsed()
        );
    }
    let (_, calls) = daemon
        .get(&format!("/api/threads/{thread}/tool-calls"))
        .await;
    println!(
        "6. GET /api/threads/{{id}}/tool-calls → {}",
        serde_json::to_string_pretty(&calls["toolCalls"])?
    );
    println!(
        "\nOne process served every turn (spawns: {}). The daemon keeps running; try:\n\
         \x20 curl -s {base}/api/threads | jq\n\
         \x20 curl -s -X POST {base}/api/threads/{thread}/messages -H 'content-type: application/json' -d '{{\"content\":\"hi again\"}}' | jq\n\
         \x20 curl -s {base}/api/pool | jq\n\
         Ctrl-C stops it.",
        daemon.spawns()
    );
    tokio::signal::ctrl_c().await?;
    daemon.stop().await;
    Ok(())
}
