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

/// The built-in authorization server's consent page: the operator names the tenant, unlocks
/// the grant with the operator token, and the browser goes back to the client with a code the
/// client can exchange (with its PKCE verifier) for a token of that tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consent_page_sends_the_browser_back_with_a_code() {
    let page = Page::open(|c| {
        c.auth_token = Some(OPERATOR.into());
        c.oauth.builtin = true;
    })
    .await;
    let base = page.link.url();
    let base = base.trim_end_matches('/');
    let back = "http://127.0.0.1:9/callback";
    let http = reqwest::Client::new();
    let client: serde_json::Value = http
        .post(format!("{base}/oauth/register"))
        .json(&json!({"client_name": "A <b>bold</b> client", "redirect_uris": [back]}))
        .send()
        .await
        .expect("registration answers")
        .json()
        .await
        .expect("JSON");
    let client_id = client["client_id"].as_str().expect("a client id");
    let verifier = "the-verifier-of-this-test-which-is-long-enough-000";
    let challenge = harness_tests::oauth::pkce_challenge(verifier);
    let authorize = format!(
        "{base}/oauth/authorize?response_type=code&client_id={client_id}&redirect_uri={}&code_challenge={challenge}&code_challenge_method=S256&state=st",
        "http%3A%2F%2F127.0.0.1%3A9%2Fcallback"
    );
    page.browser
        .client
        .goto(&authorize)
        .await
        .expect("the consent page loads");
    page.wait_js(
        QUICK,
        "the page names the client as text",
        "return document.querySelector('[data-testid=consent-client]').textContent === 'A <b>bold</b> client';",
    )
    .await;
    for (hook, text) in [("consent-tenant", "frank"), ("consent-key", OPERATOR)] {
        page.browser
            .hook(hook)
            .await
            .expect("a field")
            .send_keys(text)
            .await
            .expect("typing");
    }
    page.browser
        .hook("consent-allow")
        .await
        .expect("the button")
        .click()
        .await
        .expect("allowing");
    // The client's redirect URI does not answer: the browser shows an error page, but WebDriver
    // still reports the URL it went to.
    let deadline = tokio::time::Instant::now() + QUICK;
    let landed = loop {
        let url = page.browser.client.current_url().await.expect("the URL");
        if url.as_str().starts_with(&format!("{back}?code=")) {
            break url.to_string();
        }
        let refused = page
            .browser
            .client
            .execute(
                "const e = document.querySelector('[data-testid=consent-error]'); return e && !e.hidden ? e.textContent : null;",
                Vec::new(),
            )
            .await
            .unwrap_or(serde_json::Value::Null);
        assert!(refused.is_null(), "the consent was refused: {refused}");
        assert!(tokio::time::Instant::now() < deadline, "still at {url}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let landed = reqwest::Url::parse(&landed).expect("parses");
    let query: std::collections::HashMap<_, _> = landed.query_pairs().into_owned().collect();
    assert_eq!(query.get("state").map(String::as_str), Some("st"));
    let tokens: serde_json::Value = http
        .post(format!("{base}/oauth/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", query["code"].as_str()),
            ("code_verifier", verifier),
            ("redirect_uri", back),
            ("client_id", client_id),
        ])
        .send()
        .await
        .expect("the token endpoint answers")
        .json()
        .await
        .expect("JSON");
    let access = tokens["access_token"].as_str().expect("an access token");
    let as_client = harness_tests::client::ApiClient::with_bearer_token(base, access);
    let (status, me) = as_client.get("/api/me").await;
    assert_eq!(status, 200, "{me}");
    assert_eq!(me["tenant"], "frank");
    page.finish(true).await;
}
