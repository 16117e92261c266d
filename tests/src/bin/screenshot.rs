//! `just screenshot`: `docs/screenshot.png`, the web page as the README shows it, taken by the
//! same headless Chromium the page's tests drive. A daemon with the real CLI and the mock API,
//! two threads, a reply in Markdown with a tool call, and the pool panel open.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;

use harness_tests::browser::Browser;
use harness_tests::daemon::TestDaemon;
use harness_tests::mock::{MockApi, Reply};

const REPLY: &str =
    "The tool gave **Berlin's local time** and its offset. Three things to know:\n\n\
1. The daemon keeps this thread's `claude` process warm, so the next turn skips start-up.\n\
2. Tool calls show inline, collapsed; click one to see its input and result.\n\
3. Model output is rendered as Markdown, as text only: `<b>` stays `<b>`.\n\n\
```sh\ncurl -s localhost:7878/api/pool\n```";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mock = MockApi::start().await;
    mock.once_when_prompt_contains(
        "time in Berlin",
        Reply::tool_use(
            "mcp__harness__time__current_time",
            json!({"timezone": "Europe/Berlin"}),
        ),
    );
    // The tool result (it names the zone) comes back in the next request: answer it in Markdown.
    mock.once_when_prompt_contains("Europe/Berlin", Reply::text(REPLY));
    let daemon = TestDaemon::start(&mock, |_| {}).await;

    let (_, other) = daemon
        .post("/api/threads", json!({"title": "Release checklist"}))
        .await;
    let other = other["id"].as_str().context("thread id")?.to_owned();
    daemon.reply(&other, "Draft the release checklist.").await;
    let (_, thread) = daemon
        .post("/api/threads", json!({"title": "Time zones"}))
        .await;
    let thread = thread["id"].as_str().context("thread id")?.to_owned();
    daemon
        .reply(&thread, "What is the time in Berlin, and why is this fast?")
        .await;

    let browser = Browser::start().await?;
    browser
        .client
        .goto(&format!("{}/?thread={thread}", daemon.base))
        .await?;
    browser.hook("pool-toggle").await?.click().await?;
    browser
        .eventually_js(
            Duration::from_secs(15),
            "the reply, the tool call and the pool panel",
            "return document.querySelector('[data-testid=message][data-role=assistant][data-status=done]')
                && document.querySelector('[data-testid=tool-call]')
                && document.querySelectorAll('[data-testid=pool-processes] tr').length >= 2;",
        )
        .await?;
    browser
        .client
        .execute(
            "document.querySelector('[data-testid=tool-call]').open = true;
             document.querySelector('[data-testid=composer]').value = 'And in Tokyo?';",
            Vec::new(),
        )
        .await?;
    let png = browser.client.screenshot().await?;
    let out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/screenshot.png");
    std::fs::create_dir_all(out.parent().context("docs/")?)?;
    std::fs::write(&out, png).with_context(|| format!("write {}", out.display()))?;
    println!("Wrote {}", out.display());
    browser.assert_console_clean(false).await?;
    browser.close().await;
    daemon.stop().await;
    Ok(())
}
