//! Re-drive, schedules and webhook deliveries from the page: a thread made with `onInterrupt:
//! "retry"`; a schedule made for the open thread, run now, its run shown with its outcome, paused
//! and deleted; a dead delivery shown and sent again.

use std::time::Duration;

use serde_json::Value;

use orchestrator::config::WebhookEndpoint;
use orchestrator::webhooks::Signer;

use crate::support::{Page, QUICK, TURN};

/// Clicks the first element `selector` finds, in the page.
async fn click(page: &Page, selector: &str) {
    let script = format!("document.querySelector({selector:?}).click(); return true;");
    page.browser
        .client
        .execute(&script, Vec::new())
        .await
        .unwrap_or_else(|err| panic!("click {selector}: {err}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_thread_a_schedule_and_a_dead_delivery_from_the_page() {
    let page = Page::open(|c| {
        // A closed port: every attempt fails, and one attempt makes a delivery dead.
        c.webhooks.allow_private_targets = true;
        c.webhooks.endpoints = vec![WebhookEndpoint {
            url: "http://127.0.0.1:9/hooks".into(),
            secret: Some(Signer::generate_secret()),
            secrets: Vec::new(),
            events: Vec::new(),
        }];
        c.webhooks.max_attempts = 1;
        c.webhooks.poll = Duration::from_millis(50);
    })
    .await;
    // A thread whose turns cut by a restart run again.
    click(&page, "[data-testid=workspace-options] summary").await;
    click(&page, "[data-testid=new-retry]").await;
    let thread = page.new_thread().await;
    let (_, made) = page.daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(made["onInterrupt"], "retry", "{made}");

    click(&page, "[data-testid=schedules-toggle]").await;
    for (hook, text) in [
        ("schedule-cron", "0 0 1 1 *"),
        ("schedule-prompt", "SENT-BY-A-SCHEDULE"),
    ] {
        page.browser
            .hook(hook)
            .await
            .unwrap()
            .send_keys(text)
            .await
            .unwrap();
    }
    click(&page, "[data-testid=schedule-this-thread]").await;
    click(&page, "[data-testid=schedule-create]").await;
    page.wait_js(
        QUICK,
        "the schedule is listed, running",
        "const li = document.querySelector('[data-testid=schedule-list] > li');
         return li && li.dataset.enabled === 'true' ? li.dataset.scheduleId : null;",
    )
    .await;
    let (_, listed) = page.daemon.get("/api/schedules").await;
    let schedule = &listed["schedules"][0];
    assert_eq!(schedule["threadId"], thread.as_str(), "{listed}");
    assert_eq!(schedule["prompt"], "SENT-BY-A-SCHEDULE");
    let id = schedule["id"].as_str().expect("an id").to_owned();

    click(&page, "[data-testid=schedule-run]").await;
    page.wait_js(
        TURN,
        "the manual run shows its turn done",
        "const run = document.querySelector('[data-testid=schedule-runs] > li');
         return run && run.dataset.trigger === 'manual' && run.dataset.outcome === 'done';",
    )
    .await;
    let (_, thread_now) = page.daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(
        thread_now["messages"][1]["content"], "echo: SENT-BY-A-SCHEDULE",
        "{thread_now}"
    );

    click(&page, "[data-testid=schedule-toggle]").await;
    page.wait_js(
        QUICK,
        "the schedule shows paused",
        "const li = document.querySelector('[data-testid=schedule-list] > li');
         return li && li.dataset.enabled === 'false'
             && li.querySelector('[data-testid=schedule-state]').textContent === 'paused';",
    )
    .await;
    let (_, paused) = page.daemon.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(paused["enabled"], false);

    // The turns' webhooks died at the closed port: the panel shows them and sends one again.
    click(&page, "[data-testid=deliveries-toggle]").await;
    let dead = page
        .wait_js(
            QUICK,
            "a dead delivery is shown",
            "const row = document.querySelector('[data-testid=delivery-rows] tr[data-status=dead]');
             return row && row.querySelector('[data-testid=redeliver]')
                 ? row.dataset.deliveryId : null;",
        )
        .await;
    let dead = dead.as_str().expect("a delivery id").to_owned();
    let script = format!(
        "document.querySelector('tr[data-delivery-id=\"{dead}\"] [data-testid=redeliver]').click();
         return true;"
    );
    page.browser
        .client
        .execute(&script, Vec::new())
        .await
        .unwrap();
    harness_tests::util::eventually_async(QUICK, "a second attempt", || async {
        let (_, one) = page
            .daemon
            .get(&format!("/api/webhooks/deliveries/{dead}"))
            .await;
        one["attemptLog"].as_array().map(Vec::len) == Some(2)
    })
    .await
    .unwrap();

    click(&page, "[data-testid=schedule-delete]").await;
    page.wait_js(
        QUICK,
        "the schedule is gone from the list",
        "return document.querySelector('[data-testid=schedule-list]').children.length === 0;",
    )
    .await;
    let (status, _): (_, Value) = page.daemon.get(&format!("/api/schedules/{id}")).await;
    assert_eq!(status, 404);
    page.finish(false).await;
}
