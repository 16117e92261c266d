//! Images in the composer and files out, on the page: an image pasted into the composer is
//! uploaded, sent with the message and reaches the model as an image block; the history shows
//! it as a thumbnail, again after a reload; a file the agent wrote is linked from its tool call.

use orchestrator::config::{ApprovalRule, RuleDecision};
use serde_json::json;

use harness_tests::media::{b64, PNG};
use harness_tests::mock::{MediaBlock, Reply};

use crate::support::{Page, QUICK, TURN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pasted_image_reaches_the_model_and_shows_in_the_history() {
    let page = Page::open(|c| {
        c.claude.builtin_tools = Some("Write".into());
        c.approvals.rules = vec![ApprovalRule {
            tool: "Write".into(),
            decision: RuleDecision::Allow,
        }];
    })
    .await;
    let thread = page.new_thread().await;
    // What the browser does on a paste of a screenshot: a `paste` event carrying the file.
    page.browser
        .client
        .execute(
            "const bytes = Uint8Array.from(atob(arguments[0]), (c) => c.charCodeAt(0));
             const file = new File([bytes], 'shot.png', {type: 'image/png'});
             const data = new DataTransfer();
             data.items.add(file);
             document.querySelector('[data-testid=composer]').dispatchEvent(
                 new ClipboardEvent('paste', {clipboardData: data, bubbles: true, cancelable: true}));",
            vec![json!(b64(PNG))],
        )
        .await
        .expect("paste");
    page.wait_js(
        QUICK,
        "the image is attached and uploaded",
        "const a = document.querySelector('[data-testid=attachment]');
         return a && a.dataset.state === 'ready';",
    )
    .await;
    page.send("what is in the picture?").await;
    page.wait_last_reply("done", TURN).await;
    let sent = page
        .mock
        .message_requests()
        .last()
        .cloned()
        .expect("a request");
    assert_eq!(
        sent.last_user_media(),
        [MediaBlock {
            kind: "image".into(),
            media_type: "image/png".into(),
            data: PNG.to_vec(),
        }]
    );
    assert!(sent.last_user_text().contains("what is in the picture?"));
    let thumbnail = "const img = document.querySelector('[data-testid=message][data-role=user] [data-testid=thumbnail]');
         return img && img.complete && img.naturalWidth === 1;";
    page.wait_js(QUICK, "the sent message shows its thumbnail", thumbnail)
        .await;
    assert!(page
        .wait_js(
            QUICK,
            "the tray is empty again",
            "return document.querySelector('[data-testid=attachments]').hidden;"
        )
        .await
        .as_bool()
        .unwrap_or(false));

    // A file the agent writes is linked from its tool call.
    let pid = page.daemon.pid_of(&thread).expect("a live process");
    let folder = std::fs::read_link(format!("/proc/{pid}/cwd")).expect("its folder");
    page.mock.once_when_prompt_contains(
        "write the summary",
        Reply::write(&folder.join("summary.md"), "a one-pixel image\n"),
    );
    page.send("write the summary").await;
    let path = page
        .wait_js(
            TURN,
            "the Write call links the file it wrote",
            "const link = document.querySelector('[data-testid=tool-call] [data-testid=written-file]');
             return link && link.dataset.path;",
        )
        .await;
    assert_eq!(path, json!("summary.md"));

    // Opened again, the stored message shows its image from the daemon.
    page.browser.client.refresh().await.expect("reload");
    page.wait_js(
        QUICK,
        "the thumbnail is read back from the daemon",
        thumbnail,
    )
    .await;
    let stored = page.stored(&thread).await;
    assert_eq!(
        stored[0]["blocks"][1]["source"]["type"], "file",
        "{}",
        stored[0]
    );
    page.finish(false).await;
}
