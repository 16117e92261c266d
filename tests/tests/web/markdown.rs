//! Replies as Markdown (markdown-it, vendored): a bare URL is one link (it once recursed until the
//! stack overflowed and left the reply empty), a URL split across streamed deltas ends as one
//! link, and a 100 KB reply streamed in 10-character deltas renders in about its length, not its
//! length squared (the old renderer re-rendered the whole reply, quadratically, on every delta).

use std::time::Duration;

use serde_json::{json, Value};

use harness_tests::mock::Reply;

use crate::support::{Page, TURN};

/// What the last reply shows: its text and its links.
async fn last_reply(page: &Page) -> Value {
    page.browser
        .client
        .execute(
            "const r = [...document.querySelectorAll('[data-testid=message][data-role=assistant]')].pop();
             return {
               text: r.querySelector('.text').textContent,
               links: Array.from(r.querySelectorAll('.text a'), a => [a.textContent, a.href]),
             };",
            Vec::new(),
        )
        .await
        .expect("the reply")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_url_is_one_link_whole_or_streamed_in_pieces() {
    let page = Page::open(|_| {}).await;
    page.new_thread().await;
    page.mock
        .once_when_prompt_contains("where", Reply::text("see http://example.com now"));
    page.send("where").await;
    page.wait_last_reply("done", TURN).await;
    assert_eq!(
        last_reply(&page).await,
        json!({"text": "see http://example.com now",
               "links": [["http://example.com", "http://example.com/"]]})
    );

    let chunks = [
        "docs at https://exa",
        "mple.com/a/b",
        "?q=1 and ",
        "**more**",
    ];
    page.mock.once_when_prompt_contains(
        "stream it",
        Reply::slow_text(chunks, Duration::from_millis(80)),
    );
    page.send("stream it").await;
    page.wait_js(
        TURN,
        "the second reply is done",
        "const r = document.querySelectorAll('[data-testid=message][data-role=assistant]');
         return r.length === 2 && r[1].dataset.status === 'done';",
    )
    .await;
    let shown = last_reply(&page).await;
    assert_eq!(
        shown["text"],
        "docs at https://example.com/a/b?q=1 and more"
    );
    assert_eq!(
        shown["links"],
        json!([["https://example.com/a/b?q=1", "https://example.com/a/b?q=1"]])
    );
    page.finish(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_reply_streamed_in_small_deltas_renders_in_about_its_length() {
    let page = Page::open(|_| {}).await;
    let measured = page
        .browser
        .client
        .execute_async(
            "const done = arguments[arguments.length - 1];
             import('/assets/markdown.js').then(({ StreamRenderer }) => {
               const block = (i) => `## Part ${i}\\n\\nSome *text* with http://example.com/${i} in it, `
                 + '**bold** and `code`.\\n\\n- one\\n- two\\n\\n```\\nlet x = ' + i + ';\\n```\\n\\n';
               let text = '';
               for (let i = 0; text.length < 100000; i += 1) text += block(i);
               const element = document.createElement('div');
               document.body.append(element);
               const renderer = new StreamRenderer(element);
               const start = performance.now();
               for (let at = 10; at < text.length + 10; at += 10) {
                 renderer.update(text.slice(0, at));
               }
               const streamed = performance.now() - start;
               const links = element.querySelectorAll('a').length;
               renderer.finish(text);
               done({
                 bytes: text.length,
                 streamed,
                 links,
                 finalLinks: element.querySelectorAll('a').length,
                 blocks: text.split('## Part').length - 1,
                 headings: element.querySelectorAll('h4').length,
               });
             }).catch((err) => done({ error: String(err) }));",
            Vec::new(),
        )
        .await
        .expect("the script runs");
    assert!(measured.get("error").is_none(), "{measured}");
    let blocks = measured["blocks"].as_u64().expect("blocks");
    assert_eq!(
        measured["links"], blocks,
        "one link per part, streamed: {measured}"
    );
    assert_eq!(measured["finalLinks"], blocks, "{measured}");
    assert_eq!(measured["headings"], blocks, "{measured}");
    let ms = measured["streamed"].as_f64().expect("a time");
    eprintln!("100 KB in 10-character deltas rendered in {ms:.0} ms ({measured})");
    // Quadratic rendering took minutes here; linear takes well under a second.
    assert!(ms < 10_000.0, "{measured}");
    page.finish(false).await;
}
