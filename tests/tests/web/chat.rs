//! The chat: threads, a streamed reply rendered as Markdown, reload mid-turn, tool calls,
//! interrupt, untrusted output, prewarm and the pool panel.

use std::time::Duration;

use fantoccini::key::Key;
use serde_json::json;

use harness_tests::mock::Reply;

use crate::support::{Page, QUICK, TURN};

const TIME_TOOL: &str = "mcp__harness__time__current_time";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_message_streams_its_reply_in_as_markdown() {
    let page = Page::open(|_| {}).await;
    let thread = page.new_thread().await;
    page.wait_js(
        QUICK,
        "the new thread is listed, idle",
        &format!(
            "const li = document.querySelector('[data-testid=thread-list] li[data-thread-id=\"{thread}\"]');
             return li && li.dataset.state === 'idle' && li.textContent.includes('ago');"
        ),
    )
    .await;
    let chunks = ["Hello ", "**bold** ", "world, ", "in ", "pieces."];
    page.mock.once_when_prompt_contains(
        "line two",
        Reply::slow_text(chunks, Duration::from_millis(300)),
    );

    // Shift+Enter is a new line; Enter sends.
    let composer = page.browser.hook("composer").await.unwrap();
    composer
        .send_keys(&format!(
            "line one{}{}{}line two",
            char::from(Key::Shift),
            char::from(Key::Enter),
            char::from(Key::Null)
        ))
        .await
        .unwrap();
    assert_eq!(
        composer.prop("value").await.unwrap().as_deref(),
        Some("line one\nline two"),
        "Shift+Enter does not send"
    );
    composer
        .send_keys(&char::from(Key::Enter).to_string())
        .await
        .unwrap();
    assert_eq!(composer.prop("value").await.unwrap().as_deref(), Some(""));

    // Part of the reply shows while the turn still runs, with the interrupt button.
    page.wait_js(
        TURN,
        "a partial reply while the turn runs",
        "const r = document.querySelector('[data-testid=message][data-role=assistant]');
         const i = document.querySelector('[data-testid=interrupt]');
         return r && r.dataset.status === 'streaming' && r.textContent.includes('Hello')
             && !r.textContent.includes('pieces') && !i.hidden;",
    )
    .await;
    let text = page.wait_last_reply("done", TURN).await;
    assert_eq!(text, "Hello bold world, in pieces.");
    page.wait_js(
        QUICK,
        "Markdown rendered, the interrupt button gone",
        "const r = document.querySelector('[data-testid=message][data-role=assistant]');
         return r.querySelector('strong')?.textContent === 'bold'
             && document.querySelector('[data-testid=interrupt]').hidden;",
    )
    .await;
    let users = page.messages("user").await;
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0]["text"], "line one\nline two");
    assert_eq!(users[0]["status"], "sent");
    let model = page
        .browser
        .hook("model")
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(model.starts_with("model: "), "{model}");

    // The URL names the thread: a fresh load opens it with its messages.
    let url = page.browser.client.current_url().await.unwrap();
    assert!(
        url.as_str().ends_with(&format!("?thread={thread}")),
        "{url}"
    );
    page.browser.client.goto(url.as_str()).await.unwrap();
    page.wait_js(
        QUICK,
        "the thread reopens with both messages",
        "const m = document.querySelectorAll('[data-testid=message]');
         return m.length === 2 && m[1].dataset.status === 'done'
             && m[1].textContent === 'Hello bold world, in pieces.';",
    )
    .await;
    let stored = page.stored(&thread).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    page.finish(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_mid_turn_resumes_the_reply_exactly_once() {
    let page = Page::open(|_| {}).await;
    let thread = page.new_thread().await;
    let chunks: Vec<String> = (0..12).map(|i| format!("part{i} ")).collect();
    let full = chunks.concat();
    page.send_slow("slow one", chunks, Duration::from_millis(250), "part1 ")
        .await;
    page.browser.client.refresh().await.unwrap();
    // After the reload: the reply so far at once, still streaming, then the rest.
    page.wait_js(
        QUICK,
        "the reloaded page shows the reply in progress",
        "const r = document.querySelector('[data-testid=message][data-role=assistant]');
         return r && r.dataset.status === 'streaming' && r.textContent.startsWith('part0 part1 ');",
    )
    .await;
    let text = page.wait_last_reply("done", TURN).await;
    assert_eq!(
        text.trim_end(),
        full.trim_end(),
        "every part once, in order"
    );
    let replies = page.messages("assistant").await;
    assert_eq!(replies.len(), 1, "{replies:?}");
    assert_eq!(page.messages("user").await.len(), 1);
    let stored = page.stored(&thread).await;
    assert_eq!(stored.len(), 2, "one message, one reply: {stored:?}");
    page.finish(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_show_inline_collapsed_with_input_result_and_error() {
    let page = Page::open(|_| {}).await;
    page.new_thread().await;
    page.mock.once_when_prompt_contains(
        "what time",
        Reply::tool_use(TIME_TOOL, json!({"timezone": "Europe/Berlin"})),
    );
    page.send("what time is it?").await;
    let text = page.wait_last_reply("done", TURN).await;
    assert!(text.contains("tool said:"), "{text}");
    let call = page
        .wait_js(
            QUICK,
            "one finished tool call, collapsed",
            "const c = document.querySelectorAll('[data-testid=tool-call]');
             return c.length === 1 && c[0].dataset.status === 'ok'
                 ? {open: c[0].open, summary: c[0].querySelector('summary').textContent,
                    input: c[0].querySelector('.tool-input pre').textContent,
                    result: c[0].querySelector('.tool-result pre').textContent} : null;",
        )
        .await;
    assert_eq!(call["open"], false, "collapsed: {call}");
    assert!(
        call["summary"]
            .as_str()
            .unwrap()
            .contains("time__current_time"),
        "{call}"
    );
    assert!(
        call["input"].as_str().unwrap().contains("Europe/Berlin"),
        "{call}"
    );
    assert!(
        call["result"].as_str().unwrap().contains("Europe/Berlin"),
        "{call}"
    );
    page.browser
        .client
        .find(fantoccini::Locator::Css("[data-testid=tool-call] summary"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    page.wait_js(
        QUICK,
        "a click opens it",
        "return document.querySelector('[data-testid=tool-call]').open;",
    )
    .await;

    // A call the tool refuses shows as an error.
    page.mock.once_when_prompt_contains(
        "time on mars",
        Reply::tool_use(TIME_TOOL, json!({"timezone": "Mars/Olympus_Mons"})),
    );
    page.send("time on mars?").await;
    page.wait_js(
        TURN,
        "the second call ends in an error",
        "const c = document.querySelectorAll('[data-testid=tool-call]');
         return c.length === 2 && c[1].dataset.status === 'error'
             && c[1].querySelector('.tool-error pre').textContent.includes('Mars');",
    )
    .await;
    page.wait_last_reply("done", TURN).await;
    page.finish(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interrupt_button_stops_the_running_turn() {
    let page = Page::open(|_| {}).await;
    let thread = page.new_thread().await;
    let chunks: Vec<String> = (0..100).map(|i| format!("w{i} ")).collect();
    page.send_slow("go on and on", chunks, Duration::from_millis(200), "w1 ")
        .await;
    page.wait_js(
        QUICK,
        "the interrupt button shows",
        "return !document.querySelector('[data-testid=interrupt]').hidden;",
    )
    .await;
    page.browser
        .hook("interrupt")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    page.wait_last_reply("interrupted", QUICK).await;
    page.wait_js(
        QUICK,
        "the button hides and the reply says why",
        "const r = document.querySelector('[data-testid=message][data-role=assistant]');
         return document.querySelector('[data-testid=interrupt]').hidden
             && r.querySelector('.note').textContent.startsWith('Interrupted');",
    )
    .await;
    let stored = page.stored(&thread).await;
    assert_eq!(stored[0]["status"], "interrupted", "{stored:?}");
    page.finish(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_a_reply_renders_as_inert_text() {
    let page = Page::open(|_| {}).await;
    page.new_thread().await;
    let payload = "Look: <img src=x onerror=\"window.__xss=1\"> and \
                   [click me](javascript:window.__xss=2) and <script>window.__xss=3</script> \
                   and [a real link](https://example.com/docs) and `<b>code</b>`";
    page.mock
        .once_when_prompt_contains("be evil", Reply::text(payload));
    page.send("be evil").await;
    let text = page.wait_last_reply("done", TURN).await;
    assert!(
        text.contains("<img src=x onerror=\"window.__xss=1\">"),
        "the tag shows as text: {text}"
    );
    assert!(
        text.contains("[click me](javascript:window.__xss=2)"),
        "{text}"
    );
    assert!(text.contains("<script>window.__xss=3</script>"), "{text}");
    let dom = page
        .browser
        .client
        .execute(
            "const r = document.querySelector('[data-testid=message][data-role=assistant]');
             return {
               imgs: r.querySelectorAll('img').length,
               scripts: r.querySelectorAll('script').length,
               bold: r.querySelectorAll('b').length,
               links: Array.from(r.querySelectorAll('a'), a => a.href),
               code: r.querySelector('code')?.textContent,
               xss: window.__xss === undefined ? null : window.__xss,
             };",
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        dom,
        json!({"imgs": 0, "scripts": 0, "bold": 0, "links": ["https://example.com/docs"],
               "code": "<b>code</b>", "xss": null})
    );
    page.finish(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn focusing_the_composer_prewarms_and_the_pool_panel_shows_the_process() {
    let page = Page::open(|_| {}).await;
    // New thread focuses the composer: the page asks for a warm process before any message.
    let thread = page.new_thread().await;
    harness_tests::util::eventually(TURN, "a process for the thread", || {
        page.daemon.pid_of(&thread).is_some()
    })
    .await
    .unwrap();
    assert!(page.stored(&thread).await.is_empty(), "nothing was sent");
    let pid = page.daemon.pid_of(&thread).unwrap();

    page.browser
        .hook("pool-toggle")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let row = page
        .wait_js(
            QUICK,
            "the pool panel lists the thread's process",
            &format!(
                "const p = document.querySelector('[data-testid=pool]');
                 const row = p.querySelector('tr[data-thread-id=\"{thread}\"]');
                 return !p.hidden && row ? {{pid: row.dataset.pid, cells: row.textContent,
                     summary: p.querySelector('[data-testid=pool-summary]').textContent}} : null;"
            ),
        )
        .await;
    assert_eq!(row["pid"], pid.to_string(), "{row}");
    assert!(
        row["summary"].as_str().unwrap().contains("misses 1"),
        "{row}"
    );

    // The first turn is warm, and the panel's counters follow (refreshed while open).
    page.send("hello").await;
    page.wait_last_reply("done", TURN).await;
    assert_eq!(
        page.daemon.counts().hits,
        1,
        "the turn found the prewarmed process"
    );
    page.wait_js(
        QUICK,
        "the panel shows the hit",
        "return document.querySelector('[data-testid=pool-summary]').textContent.includes('hits 1');",
    )
    .await;
    page.finish(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_and_its_assets_have_their_types_and_a_strict_policy() {
    let mock = harness_tests::mock::MockApi::start().await;
    let daemon = harness_tests::daemon::TestDaemon::start(&mock, |c| {
        c.auth_token = Some("tok".into());
    })
    .await;
    let http = reqwest::Client::new();
    for (path, kind) in [
        ("/", "text/html; charset=utf-8"),
        ("/assets/app.js", "text/javascript; charset=utf-8"),
        ("/assets/markdown.js", "text/javascript; charset=utf-8"),
        ("/assets/markdown-it.js", "text/javascript; charset=utf-8"),
        ("/assets/api.js", "text/javascript; charset=utf-8"),
        ("/assets/pool.js", "text/javascript; charset=utf-8"),
        ("/assets/workspace.js", "text/javascript; charset=utf-8"),
        ("/assets/style.css", "text/css; charset=utf-8"),
    ] {
        let response = http
            .get(format!("{}{path}", daemon.base))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}: no token needed");
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .map(|v| v.to_str().unwrap().to_owned())
                .unwrap_or_default()
        };
        assert_eq!(header("content-type"), kind, "{path}");
        assert_eq!(header("x-content-type-options"), "nosniff", "{path}");
        let policy = header("content-security-policy");
        assert!(
            policy.contains("default-src 'none'") && policy.contains("script-src 'self';"),
            "{path}: {policy}"
        );
        assert!(!policy.contains("unsafe-inline"), "{path}: {policy}");
    }
    let (status, body) = daemon.get("/assets/secrets.txt").await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    // The Host guard covers the page too (DNS rebinding).
    let response = http
        .get(format!("{}/", daemon.base))
        .header("host", "rebind.example.com")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    daemon.stop().await;
}

/// A turn the CLI starts by itself (`claude.scheduling_tools`: here a background agent's notice)
/// shows in the open thread as it happens, marked as the CLI's, with its reply; and again after a
/// reload, from the stored thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_the_cli_started_by_itself_shows_as_the_clis() {
    let page = Page::open(|config| {
        config.claude.builtin_tools = None;
        config.claude.scheduling_tools = true;
    })
    .await;
    let thread = page.new_thread().await;
    page.mock.once_when_prompt_contains(
        "start the background agent",
        Reply::tool_use(
            "Agent",
            json!({"description": "bg", "prompt": "PAGE-AGENT-WORK", "subagent_type": "general-purpose", "run_in_background": true}),
        ),
    );
    page.send("start the background agent").await;
    let cli_turn = "const m = document.querySelector('[data-testid=message][data-origin=cli]');
         const reply = m && m.nextElementSibling;
         return m && reply && reply.dataset.status === 'done'
             ? {text: m.textContent, reply: reply.dataset.role} : null;";
    let shown = page
        .wait_js(TURN, "the CLI-started turn, live, with its reply", cli_turn)
        .await;
    assert!(
        shown["text"]
            .as_str()
            .unwrap_or("")
            .contains("task_notification"),
        "{shown}"
    );
    assert_eq!(shown["reply"], "assistant");
    let stored = page.stored(&thread).await;
    assert!(stored.iter().any(|m| m["origin"] == "cli"), "{stored:?}");

    page.browser.client.refresh().await.expect("reload");
    let shown = page
        .wait_js(TURN, "the CLI-started turn, after a reload", cli_turn)
        .await;
    assert_eq!(shown["reply"], "assistant");
    page.finish(false).await;
}
