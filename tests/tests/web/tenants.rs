//! The page with API keys: it asks for a token or a key, shows whose it is, lists that tenant's
//! threads only, and switches to another key on request.

use std::time::Duration;

use serde_json::json;

use crate::support::Page;

const QUICK: Duration = Duration::from_secs(15);
const OPERATOR: &str = "operator-token";

/// Enters `key` in the token dialog, once it shows.
async fn enter(page: &Page, key: &str) {
    page.wait_js(
        QUICK,
        "the token dialog",
        "return !document.querySelector('[data-testid=token-dialog]').hidden;",
    )
    .await;
    let input = page
        .browser
        .hook("token-input")
        .await
        .expect("the key field");
    input.send_keys(key).await.expect("typing the key");
    page.browser
        .hook("token-submit")
        .await
        .expect("the submit button")
        .click()
        .await
        .expect("submitting the key");
}

/// The ids of the threads the page lists, once it lists `expected` only.
async fn listed_only(page: &Page, expected: &str) {
    let script = format!(
        "const ids = [...document.querySelectorAll('[data-testid=thread-list] li')]
             .map((li) => li.dataset.threadId);
         return ids.length === 1 && ids[0] === '{expected}';"
    );
    page.wait_js(QUICK, &format!("the list shows {expected} alone"), &script)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_shows_its_tenants_threads_and_another_key_another_tenants() {
    let page = Page::open(|c| c.auth_token = Some(OPERATOR.into())).await;
    let operator = harness_tests::client::ApiClient::with_bearer_token(&page.daemon.base, OPERATOR);
    let mut keys = Vec::new();
    let mut threads = Vec::new();
    for tenant in ["acme", "globex"] {
        let (status, made) = operator
            .post(
                "/api/keys",
                json!({"tenant": tenant, "scopes": ["threads:read", "threads:write"]}),
            )
            .await;
        assert_eq!(status, 201, "{made}");
        let key = made["key"].as_str().expect("a key").to_owned();
        let as_tenant =
            harness_tests::client::ApiClient::with_bearer_token(&page.daemon.base, &key);
        threads.push(as_tenant.create_thread().await);
        keys.push((key, made["id"].as_str().expect("an id").to_owned()));
    }
    // The operator's own thread, which no tenant sees.
    operator.create_thread().await;

    enter(&page, &keys[0].0).await;
    listed_only(&page, &threads[0]).await;
    page.wait_js(
        QUICK,
        "the page says whose key it is",
        &format!(
            "return document.querySelector('[data-testid=caller]').textContent === 'acme · {}';",
            keys[0].1
        ),
    )
    .await;

    page.browser
        .hook("switch-key")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    enter(&page, &keys[1].0).await;
    listed_only(&page, &threads[1]).await;
    page.wait_js(
        QUICK,
        "the page says it is Globex now",
        "return document.querySelector('[data-testid=caller]').dataset.tenant === 'globex';",
    )
    .await;
    page.finish(true).await;
}
