//! The built-in authorization server's open registration, bounded (#46): forty registrations of
//! ten 90 KB redirect URIs each grew the database by 73.5 MB in 0.4 s. A registration is now
//! bounded in size, registrations in rate (`oauth.registrations_per_minute`, then `429` with
//! `Retry-After`), and a client that never gets a token expires (`oauth.unused_client_ttl`):
//! unknown at once, deleted by the retention pass.

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;
use harness_tests::util::eventually_async;

use crate::support::call;

/// `POST /oauth/register` with `redirect_uris`: (status, body, `Retry-After`).
async fn register(base: &str, uris: &[String]) -> (StatusCode, Value, Option<u64>) {
    let body = json!({"client_name": "flood", "redirect_uris": uris});
    let (status, answer, headers) =
        call(base, None, Method::POST, "/oauth/register", Some(body)).await;
    let retry_after = headers
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    (status, answer, retry_after)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_flood_is_refused_and_the_database_stays_small() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some("the-operator-token".into());
        c.oauth.builtin = true;
        c.oauth.registrations_per_minute = 10;
    })
    .await;
    let store = daemon.daemon().store.clone();
    let before = store.bytes_used().await.expect("the database's size");

    // The reproduction: 40 registrations of 10 × 90 KB redirect URIs, as fast as they go.
    let huge = vec![format!("https://app.example/{}", "a".repeat(90 * 1024)); 10];
    let mut answers = Vec::new();
    for _ in 0..40 {
        answers.push(register(&daemon.base, &huge).await);
    }
    let (too_large, rest) = answers.split_at(10);
    for (status, body, _) in too_large {
        assert_eq!(*status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(body["error"], "invalid_client_metadata", "{body}");
    }
    for (status, body, retry_after) in rest {
        assert_eq!(*status, StatusCode::TOO_MANY_REQUESTS, "{body}");
        assert_eq!(body["error"], "temporarily_unavailable", "{body}");
        assert!(
            retry_after.is_some_and(|s| (1..=6).contains(&s)),
            "one every 6 s: {retry_after:?}"
        );
    }
    // Small ones are refused past the rate too.
    let small = vec!["http://127.0.0.1:9/cb".to_owned()];
    let (status, body, _) = register(&daemon.base, &small).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");

    let after = store.bytes_used().await.expect("the database's size");
    assert!(
        after < before + 256 * 1024,
        "the database grew by {} bytes",
        after.saturating_sub(before)
    );
    daemon.stop().await;
}

/// A client registered and never used is deleted by the retention pass once
/// `oauth.unused_client_ttl` has passed, and is unknown then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_never_used_expires_and_is_deleted() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |c| {
        c.auth_token = Some("the-operator-token".into());
        c.oauth.builtin = true;
        c.oauth.unused_client_ttl = Duration::from_millis(500);
        c.retention.interval = Duration::from_millis(200);
    })
    .await;
    let uris = vec!["http://127.0.0.1:9/cb".to_owned()];
    let (status, client, _) = register(&daemon.base, &uris).await;
    assert_eq!(status, StatusCode::CREATED, "{client}");
    let id = client["client_id"].as_str().expect("an id").to_owned();
    let store = daemon.daemon().store.clone();
    assert!(store.oauth_client(&id).await.expect("read").is_some());

    let page = |base: String, id: String| async move {
        let challenge = harness_tests::oauth::pkce_challenge("a-verifier-long-enough-0123456789");
        let url = format!(
            "{base}/oauth/authorize?response_type=code&client_id={id}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcb&code_challenge={challenge}&code_challenge_method=S256"
        );
        let answer = reqwest::get(url).await.expect("the page");
        (answer.status(), answer.text().await.unwrap_or_default())
    };
    let (status, text) = page(daemon.base.clone(), id.clone()).await;
    assert_eq!(
        status,
        StatusCode::OK,
        "a fresh client gets its page: {text}"
    );

    let gone = eventually_async(Duration::from_secs(10), "the client is deleted", || {
        let store = store.clone();
        let id = id.clone();
        async move { store.oauth_client(&id).await.is_ok_and(|c| c.is_none()) }
    })
    .await;
    gone.expect("the retention pass deletes the unused client");
    let (status, text) = page(daemon.base.clone(), id.clone()).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{text}");
    assert!(text.contains("unknown client_id"), "{text}");
    daemon.stop().await;
}
