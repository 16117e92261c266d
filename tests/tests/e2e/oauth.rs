//! OAuth 2.1 on `/mcp` and `/api` (#28), against software nobody here wrote: the issuer is npm
//! `oauth2-mock-server`, the client the official MCP Python SDK's OAuth flow. A client with no
//! token is led from the `401` through the protected resource metadata to the issuer, gets a
//! token for this server (PKCE, RFC 8707) and calls the threads tools as the token's tenant; a
//! token for another audience, one in the query string, and one without a scope are refused
//! with the challenge that says why.

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mcp::{python_or_skip, run_python_script};
use harness_tests::mock::MockApi;
use harness_tests::oauth::{Issuer, PYTHON_OAUTH_CLIENT};

const OPERATOR: &str = "the-operator-token";

async fn call(
    base: &str,
    bearer: Option<&str>,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value, reqwest::header::HeaderMap) {
    let mut request = reqwest::Client::new().request(method, format!("{base}{path}"));
    if let Some(bearer) = bearer {
        request = request.bearer_auth(bearer);
    }
    if let Some(body) = body {
        request = request
            .header("accept", "application/json, text/event-stream")
            .json(&body);
    }
    let response = request.send().await.expect("the daemon answers");
    let (status, headers) = (response.status(), response.headers().clone());
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
        headers,
    )
}

fn challenge(headers: &reqwest::header::HeaderMap) -> String {
    headers
        .get("www-authenticate")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn oauth_daemon(mock: &MockApi, issuer: &Issuer) -> TestDaemon {
    let url = issuer.url.clone();
    TestDaemon::start(mock, move |c| {
        c.auth_token = Some(OPERATOR.into());
        c.oauth.issuer = Some(url);
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_client_with_no_token_is_led_to_one_and_works_as_its_tenant() {
    let Some(python) = python_or_skip("oauth").await else {
        return;
    };
    let issuer = Issuer::start("alice").await.expect("the OAuth issuer runs");
    let mock = MockApi::start().await;
    let daemon = oauth_daemon(&mock, &issuer).await;
    let base = daemon.base.clone();

    // The first answer says where to look.
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
    let (status, _, headers) = call(&base, None, Method::POST, "/mcp", Some(initialize)).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let metadata_url = format!("{base}/.well-known/oauth-protected-resource/mcp");
    assert!(
        challenge(&headers).contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{}",
        challenge(&headers)
    );
    let metadata: Value = reqwest::get(&metadata_url)
        .await
        .expect("the metadata")
        .json()
        .await
        .expect("JSON");
    assert_eq!(metadata["resource"], format!("{base}/mcp"));
    assert_eq!(metadata["authorization_servers"], json!([issuer.url]));

    let report = run_python_script(
        python,
        "python_oauth_client.py",
        PYTHON_OAUTH_CLIENT,
        json!({"url": format!("{base}/mcp"), "clientId": "harness-tests", "issuer": issuer.url}),
    )
    .await
    .expect("the SDK's OAuth flow completes");
    assert_eq!(
        report["resource"],
        format!("{base}/mcp"),
        "RFC 8707: {report}"
    );
    assert_eq!(report["codeChallengeMethod"], "S256", "PKCE: {report}");
    let thread = report["created"]["threadId"]
        .as_str()
        .expect("a thread made over OAuth")
        .to_owned();
    let listed: Vec<&str> = report["listed"]["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| t["threadId"].as_str())
        .collect();
    assert_eq!(listed, [thread.as_str()], "Alice lists Alice's: {report}");

    // The token names Alice: her tenant owns the thread; another tenant's key does not find it.
    let token = report["accessToken"].as_str().expect("the token");
    let (status, me, _) = call(&base, Some(token), Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(
        (me["subject"].as_str(), me["tenant"].as_str()),
        (Some("oauth:alice"), Some("alice"))
    );
    let (_, owned, _) = call(
        &base,
        Some(OPERATOR),
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await;
    assert_eq!(owned["tenant"], "alice", "{owned}");
    let (_, made, _) = call(
        &base,
        Some(OPERATOR),
        Method::POST,
        "/api/keys",
        Some(json!({"tenant": "bob", "scopes": ["threads:read"]})),
    )
    .await;
    let bob = made["key"].as_str().expect("a key");
    let (status, _, _) = call(
        &base,
        Some(bob),
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_for_another_audience_in_the_query_or_without_the_scope_is_refused() {
    let issuer = Issuer::start("carol").await.expect("the OAuth issuer runs");
    let mock = MockApi::start().await;
    let daemon = oauth_daemon(&mock, &issuer).await;
    let base = daemon.base.clone();

    let ours = issuer
        .token_for(&format!("{base}/mcp"), "threads:read threads:write")
        .await
        .expect("a token for this server");
    let (status, me, _) = call(&base, Some(&ours), Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(me["tenant"], "carol");

    let theirs = issuer
        .token_for("http://elsewhere.example/mcp", "threads:read threads:write")
        .await
        .expect("a token for another server");
    let (status, body, headers) = call(&base, Some(&theirs), Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(
        challenge(&headers).contains("error=\"invalid_token\""),
        "{}",
        challenge(&headers)
    );
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not valid here"),
        "{body}"
    );

    // Never from the query string.
    let (status, _, _) = call(
        &base,
        None,
        Method::GET,
        &format!("/api/me?access_token={ours}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    // A token without `threads:write` reads, and is told what it lacks when it writes.
    let reader = issuer
        .token_for(&format!("{base}/mcp"), "threads:read")
        .await
        .expect("a read-only token");
    let (status, _, _) = call(&base, Some(&reader), Method::GET, "/api/threads", None).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body, headers) = call(
        &base,
        Some(&reader),
        Method::POST,
        "/api/threads",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{body}");
    let said = challenge(&headers);
    assert!(
        said.contains("error=\"insufficient_scope\"") && said.contains("scope=\"threads:write\""),
        "{said}"
    );

    // Another issuer's token: neither its `iss` nor its key is this issuer's.
    let other = Issuer::start("carol").await.expect("a second issuer");
    let forged = other
        .token_for(&format!("{base}/mcp"), "threads:read")
        .await
        .expect("a token of the other issuer");
    let (status, _, _) = call(&base, Some(&forged), Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "another issuer's token");
    daemon.stop().await;
}
