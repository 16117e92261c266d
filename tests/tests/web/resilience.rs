//! Nothing lost: a message sent while the daemon is unreachable is queued and delivered once; a
//! refused one stays in the composer with the reason; a token is asked for once and used on
//! every request, the event stream included.

use std::time::Duration;

use harness_tests::util::eventually_async;

use crate::support::{Mode, Page, QUICK, TURN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_sent_while_unreachable_is_queued_then_delivered_once() {
    let page = Page::open(|_| {}).await;
    let thread = page.new_thread().await;

    // Down: nothing reaches the daemon; the message waits, marked queued.
    page.link.set(Mode::Down);
    page.send("sent while offline").await;
    page.wait_js(
        QUICK,
        "the message is queued and the page knows it is offline",
        "const m = document.querySelector('[data-testid=message][data-role=user]');
         return m && m.dataset.status === 'queued'
             && m.querySelector('.note').textContent.startsWith('Queued')
             && document.querySelector('[data-testid=connection]').dataset.state === 'offline';",
    )
    .await;
    assert!(page.stored(&thread).await.is_empty());

    // Answers lost: the daemon stores the message, the page never hears and sends it again.
    page.link.set(Mode::LoseAnswers);
    eventually_async(
        TURN,
        "two sends of the message reached the daemon",
        || async { page.link.lost_posts() >= 2 },
    )
    .await
    .unwrap();
    let users = page.messages("user").await;
    assert_eq!(users.len(), 1, "{users:?}");
    assert_eq!(users[0]["status"], "queued");

    // Back up: the page learns the message's fate; one message, one reply.
    page.link.set(Mode::Up);
    let text = page.wait_last_reply("done", TURN).await;
    assert_eq!(text, "echo: sent while offline");
    page.wait_js(
        QUICK,
        "online again, the message marked sent",
        "const m = document.querySelectorAll('[data-testid=message][data-role=user]');
         return m.length === 1 && m[0].dataset.status === 'sent'
             && document.querySelector('[data-testid=connection]').dataset.state === 'online';",
    )
    .await;
    let stored = page.stored(&thread).await;
    let user_messages: Vec<_> = stored.iter().filter(|m| m["role"] == "user").collect();
    assert_eq!(user_messages.len(), 1, "stored once: {stored:?}");
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(page.mock.message_requests().len(), 1, "one turn ran");
    assert_eq!(page.messages("assistant").await.len(), 1);
    // The console check sees what the browser logs: the cut requests are there, as network
    // errors, and nothing else is.
    let logged = page.browser.console().await.unwrap();
    assert!(
        logged
            .iter()
            .any(|e| e.level == "SEVERE" && e.source.as_deref() == Some("network")),
        "{logged:#?}"
    );
    assert!(
        logged
            .iter()
            .all(|e| e.source.as_deref() == Some("network")),
        "{logged:#?}"
    );
    page.finish(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_message_stays_in_the_composer_with_the_reason() {
    let page = Page::open(|c| c.max_message_chars = 20).await;
    let thread = page.new_thread().await;
    let long = "this message is far too long for the limit";
    page.send(long).await;
    let error = page
        .wait_js(
            QUICK,
            "the reason shows",
            "const e = document.querySelector('[data-testid=send-error]');
             return e.hidden ? null : e.textContent;",
        )
        .await;
    let error = error.as_str().unwrap();
    assert!(
        error.starts_with("Not sent:") && error.contains("the limit is 20"),
        "{error}"
    );
    let composer = page.browser.hook("composer").await.unwrap();
    assert_eq!(composer.prop("value").await.unwrap().as_deref(), Some(long));
    assert!(
        page.messages("user").await.is_empty(),
        "no message left behind"
    );
    assert!(page.stored(&thread).await.is_empty());
    page.finish(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_page_asks_once_and_sends_it_everywhere() {
    let page = Page::open(|c| c.auth_token = Some("s3cret-token".into())).await;
    page.wait_js(
        QUICK,
        "the token dialog",
        "return !document.querySelector('[data-testid=token-dialog]').hidden;",
    )
    .await;
    let input = page.browser.hook("token-input").await.unwrap();
    input.send_keys("s3cret-token").await.unwrap();
    page.browser
        .hook("token-submit")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let thread = page.new_thread().await;
    page.mock.once_when_prompt_contains(
        "with token",
        harness_tests::mock::Reply::slow_text(
            ["one ", "two ", "three"],
            Duration::from_millis(200),
        ),
    );
    page.send("with token").await;
    // The reply streams: the event stream carries the token too.
    let text = page.wait_last_reply("done", TURN).await;
    assert_eq!(text, "one two three");
    let stored = page
        .browser
        .client
        .execute(
            "return sessionStorage.getItem('harness.token');",
            Vec::new(),
        )
        .await
        .unwrap();
    assert_eq!(stored, "s3cret-token");
    // A reload keeps it (same tab): no second question.
    page.browser.client.refresh().await.unwrap();
    page.wait_js(
        QUICK,
        "the thread reopens without asking",
        "return document.querySelectorAll('[data-testid=message]').length === 2
             && document.querySelector('[data-testid=token-dialog]').hidden;",
    )
    .await;
    assert_eq!(
        page.daemon
            .client()
            .get(&format!("/api/threads/{thread}"))
            .await
            .0,
        401,
        "the daemon wants the token"
    );
    page.finish(true).await;
}
