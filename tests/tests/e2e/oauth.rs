//! OAuth 2.1 on `/mcp` and `/api` (#28), against software nobody here wrote: the issuer is npm
//! `oauth2-mock-server`, the client the official MCP Python SDK's OAuth flow. A client with no
//! token is led from the `401` through the protected resource metadata to the issuer, gets a
//! token for this server (PKCE, RFC 8707) and calls the threads tools as the token's tenant; a
//! token for another audience, one in the query string, and one without a scope are refused
//! with the challenge that says why.

mod registration;

use reqwest::{Method, StatusCode};
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;

use super::support::call;
use harness_tests::mcp::{python_or_skip, run_python_script};
use harness_tests::mock::MockApi;
use harness_tests::oauth::{run_typescript_client, ClientDocument, Issuer, PYTHON_OAUTH_CLIENT};

const OPERATOR: &str = "the-operator-token";

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

/// The daemon as its own authorization server.
async fn builtin_daemon(mock: &MockApi) -> TestDaemon {
    TestDaemon::start(mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.oauth.builtin = true;
    })
    .await
}

/// A form POST to the token endpoint: (status, JSON).
async fn token_request(base: &str, form: &[(&str, &str)]) -> (StatusCode, Value) {
    let answer = reqwest::Client::new()
        .post(format!("{base}/oauth/token"))
        .form(form)
        .send()
        .await
        .expect("the token endpoint answers");
    let status = answer.status();
    (status, answer.json().await.unwrap_or(Value::Null))
}

/// With `[oauth] builtin`, the official Python SDK registers itself (RFC 7591), is sent to the
/// consent page, which the operator's key unlocks for a tenant, and calls the threads tools with
/// the token it got; its refresh token is good once, and a spent one coming back ends the grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_builtin_server_registers_a_client_and_the_operators_consent_gives_it_a_token() {
    let Some(python) = python_or_skip("oauth builtin").await else {
        return;
    };
    let mock = MockApi::start().await;
    let daemon = builtin_daemon(&mock).await;
    let base = daemon.base.clone();
    let (status, metadata, _) = call(
        &base,
        None,
        Method::GET,
        "/.well-known/oauth-authorization-server",
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{metadata}");
    assert_eq!(metadata["issuer"], base);
    assert_eq!(
        metadata["code_challenge_methods_supported"],
        json!(["S256"])
    );

    let report = run_python_script(
        python,
        "python_oauth_client.py",
        PYTHON_OAUTH_CLIENT,
        json!({"url": format!("{base}/mcp"), "consent": {"adminKey": OPERATOR, "tenant": "dave"}}),
    )
    .await
    .expect("the SDK registers, is granted and calls");
    assert_eq!(report["consentPage"], 200, "{report}");
    let thread = report["created"]["threadId"].as_str().expect("a thread");
    let (_, owned, _) = call(
        &base,
        Some(OPERATOR),
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await;
    assert_eq!(owned["tenant"], "dave", "{owned}");
    let client = report["clientId"].as_str().expect("registered").to_owned();
    let access = report["accessToken"]
        .as_str()
        .expect("an access token")
        .to_owned();
    let refresh = report["refreshToken"]
        .as_str()
        .expect("a refresh token")
        .to_owned();
    assert!(access.starts_with("hat_"), "{access}");
    let (status, me, _) = call(&base, Some(&access), Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(me["subject"], format!("oauth:{client}"));
    assert_eq!(
        me["scopes"],
        json!(["threads:read", "threads:write"]),
        "never admin"
    );

    // A refresh gives a new pair; the old refresh token is spent.
    let (status, fresh) = token_request(
        &base,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &client),
        ],
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{fresh}");
    let new_access = fresh["access_token"].as_str().expect("a new access token");
    assert_ne!(new_access, access);
    let (status, _, _) = call(&base, Some(new_access), Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::OK);
    // The spent one comes back (a thief, or a replay): refused, and the whole grant ends.
    let (status, reused) = token_request(
        &base,
        &[
            ("grant_type", "refresh_token"),
            ("refresh_token", &refresh),
            ("client_id", &client),
        ],
    )
    .await;
    assert_eq!(
        (status, reused["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant"))
    );
    let (status, _, headers) = call(&base, Some(new_access), Method::GET, "/api/me", None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "the grant is revoked");
    assert!(challenge(&headers).contains("/.well-known/oauth-protected-resource"));
    daemon.stop().await;
}

/// Registration is all or nothing (Cursor registers its own scheme beside https and loopback
/// URIs); a code is good once, for its client and verifier only; consent needs an admin key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_codes_and_consent_refuse_what_they_should() {
    let mock = MockApi::start().await;
    let daemon = builtin_daemon(&mock).await;
    let base = daemon.base.clone();
    let cursor = [
        "cursor://anysphere.cursor-mcp/oauth/callback",
        "https://www.cursor.com/oauth/callback",
        "http://localhost:33418/callback",
    ];
    let register = |uris: Vec<&str>| {
        let base = base.clone();
        let uris: Vec<String> = uris.into_iter().map(str::to_owned).collect();
        async move {
            call(
                &base,
                None,
                Method::POST,
                "/oauth/register",
                Some(json!({"client_name": "Cursor", "redirect_uris": uris, "token_endpoint_auth_method": "none"})),
            )
            .await
        }
    };
    let (status, client, _) = register(cursor.to_vec()).await;
    assert_eq!(status, StatusCode::CREATED, "{client}");
    assert_eq!(client["redirect_uris"], json!(cursor));
    let mut with_bad = cursor.to_vec();
    with_bad.push("http://attacker.example/callback");
    let (status, refused, _) = register(with_bad).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{refused}");
    assert_eq!(refused["error"], "invalid_redirect_uri");
    assert!(refused["error_description"]
        .as_str()
        .unwrap_or_default()
        .contains("attacker.example"));

    // A code, through the consent the page gives.
    let client_id = client["client_id"].as_str().expect("an id").to_owned();
    let verifier = "a-verifier-that-is-long-enough-for-pkce-0123456789";
    let challenge_value = harness_tests::oauth::pkce_challenge(verifier);
    let request = json!({
        "response_type": "code", "client_id": client_id, "redirect_uri": cursor[2],
        "code_challenge": challenge_value, "code_challenge_method": "S256", "state": "s1",
    });
    let consent = |key: &str| {
        call(
            &base,
            None,
            Method::POST,
            "/oauth/consent",
            Some(json!({"request": request, "tenant": "erin", "adminKey": key})),
        )
    };
    let (status, _, _) = consent("not-the-operator").await;
    assert_eq!(status, StatusCode::FORBIDDEN, "consent needs an admin key");
    let (status, granted, _) = consent(OPERATOR).await;
    assert_eq!(status, StatusCode::OK, "{granted}");
    let to =
        reqwest::Url::parse(granted["redirectTo"].as_str().expect("a redirect")).expect("a URL");
    assert!(to.as_str().starts_with(cursor[2]), "{to}");
    let query: std::collections::HashMap<_, _> = to.query_pairs().into_owned().collect();
    assert_eq!(query.get("state").map(String::as_str), Some("s1"));
    assert_eq!(query.get("iss"), Some(&base), "RFC 9207");
    let code = query["code"].clone();
    let (_, audit, _) = call(&base, Some(OPERATOR), Method::GET, "/api/audit", None).await;
    let consents: Vec<&Value> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["path"] == "/oauth/consent")
        .collect();
    assert_eq!(consents.len(), 1, "one grant given, audited: {audit}");
    assert_eq!(consents[0]["subject"], "operator");
    assert_eq!(
        consents[0]["action"],
        format!("oauth consent {client_id} for erin")
    );

    let exchange = |verifier: &'static str| {
        let (base, code, client_id) = (base.clone(), code.clone(), client_id.clone());
        async move {
            token_request(
                &base,
                &[
                    ("grant_type", "authorization_code"),
                    ("code", &code),
                    ("code_verifier", verifier),
                    ("redirect_uri", "http://localhost:33418/callback"),
                    ("client_id", &client_id),
                ],
            )
            .await
        }
    };
    let (status, wrong) = exchange("not-the-verifier-that-was-committed-to-at-all-0000").await;
    assert_eq!(
        (status, wrong["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant")),
        "{wrong}"
    );
    // The code was spent by that attempt: the right verifier comes too late.
    let (status, late) = exchange("a-verifier-that-is-long-enough-for-pkce-0123456789").await;
    assert_eq!(
        (status, late["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_grant")),
        "{late}"
    );

    // An authorization request for a redirect URI the client did not register gets no page.
    let page = reqwest::get(format!(
        "{base}/oauth/authorize?response_type=code&client_id={client_id}&redirect_uri=https%3A%2F%2Fevil.example%2Fcb&code_challenge={challenge_value}&code_challenge_method=S256"
    ))
    .await
    .expect("the page");
    assert_eq!(page.status(), StatusCode::BAD_REQUEST);
    assert!(page
        .text()
        .await
        .unwrap_or_default()
        .contains("not one the client registered"));
    daemon.stop().await;
}

/// A client with no registration: its `client_id` is the URL of its own metadata document
/// (served here over https, under a CA the daemon is told to trust), which the built-in server
/// fetches; the official Python SDK uses it because the server's metadata says it may.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_described_by_its_own_metadata_document_needs_no_registration() {
    let Some(python) = python_or_skip("oauth client metadata document").await else {
        return;
    };
    let document = ClientDocument::start(
        &python,
        "a client of its own description",
        &["http://127.0.0.1:9/callback"],
    )
    .await
    .expect("the document is served");
    let mock = MockApi::start().await;
    let ca = document.ca.clone();
    let daemon = TestDaemon::start(&mock, move |c| {
        c.auth_token = Some(OPERATOR.into());
        c.oauth.builtin = true;
        c.oauth.client_ca_file = Some(ca);
        c.oauth.allow_private_client_urls = true;
    })
    .await;
    let base = daemon.base.clone();
    let (_, metadata, _) = call(
        &base,
        None,
        Method::GET,
        "/.well-known/oauth-authorization-server",
        None,
    )
    .await;
    assert_eq!(metadata["client_id_metadata_document_supported"], true);

    let report = run_python_script(
        python,
        "python_oauth_client.py",
        PYTHON_OAUTH_CLIENT,
        json!({
            "url": format!("{base}/mcp"),
            "clientMetadataUrl": document.url,
            "consent": {"adminKey": OPERATOR, "tenant": "gina"},
        }),
    )
    .await
    .expect("the SDK is granted without registering");
    assert_eq!(report["clientId"], document.url.as_str(), "{report}");
    let thread = report["created"]["threadId"].as_str().expect("a thread");
    let (_, owned, _) = call(
        &base,
        Some(OPERATOR),
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await;
    assert_eq!(owned["tenant"], "gina");

    // A document that cannot be fetched describes no client.
    let page = reqwest::get(format!(
        "{base}/oauth/authorize?response_type=code&client_id={}&redirect_uri=http%3A%2F%2F127.0.0.1%3A9%2Fcallback&code_challenge={}&code_challenge_method=S256",
        "https%3A%2F%2F127.0.0.1%3A1%2Fnobody.json",
        "x".repeat(43)
    ))
    .await
    .expect("the page");
    assert_eq!(page.status(), StatusCode::BAD_REQUEST);
    assert!(page
        .text()
        .await
        .unwrap_or_default()
        .contains("cannot be fetched"));
    daemon.stop().await;
}

/// The official MCP TypeScript SDK's OAuth client against the built-in server: it registers
/// itself, is granted through the consent, and calls the threads tools as the tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_typescript_sdk_completes_the_flow_against_the_builtin_server() {
    let mock = MockApi::start().await;
    let daemon = builtin_daemon(&mock).await;
    let base = daemon.base.clone();
    let report = run_typescript_client(json!({
        "url": format!("{base}/mcp"),
        "consent": {"adminKey": OPERATOR, "tenant": "hank"},
    }))
    .await
    .expect("the TypeScript SDK completes the flow");
    assert_eq!(report["consentPage"], 200, "{report}");
    assert_eq!(
        report["resource"],
        format!("{base}/mcp"),
        "RFC 8707: {report}"
    );
    assert_eq!(report["codeChallengeMethod"], "S256");
    assert_eq!(report["state"], "ts-state");
    let thread = report["created"]["threadId"].as_str().expect("a thread");
    let listed: Vec<&str> = report["listed"]["threads"]
        .as_array()
        .expect("threads")
        .iter()
        .filter_map(|t| t["threadId"].as_str())
        .collect();
    assert_eq!(listed, [thread], "{report}");
    let (_, owned, _) = call(
        &base,
        Some(OPERATOR),
        Method::GET,
        &format!("/api/threads/{thread}"),
        None,
    )
    .await;
    assert_eq!(owned["tenant"], "hank");
    daemon.stop().await;
}

/// An unauthenticated authorization request whose `client_id` is a metadata document on an
/// address literal of this machine, in any of the forms that reached the fetch before (#46),
/// is refused before anything connects: a listener on that port sees no connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metadata_document_on_a_loopback_literal_is_never_fetched() {
    let mock = MockApi::start().await;
    let daemon = builtin_daemon(&mock).await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a listener");
    listener.set_nonblocking(true).expect("non-blocking");
    let port = listener.local_addr().expect("its port").port();
    let base = daemon.client().base().to_owned();
    for host in [
        "127.0.0.1".to_owned(),
        "2130706433".to_owned(),
        "127.1".to_owned(),
        "0x7f.0.0.1".to_owned(),
        "[::ffff:127.0.0.1]".to_owned(),
        "0.0.0.0".to_owned(),
        "[::1]".to_owned(),
    ] {
        let client_id = format!("https://{host}:{port}/c.json");
        let url = reqwest::Url::parse_with_params(
            &format!("{base}/oauth/authorize"),
            &[
                ("response_type", "code"),
                ("client_id", client_id.as_str()),
                ("redirect_uri", "http://127.0.0.1:9/cb"),
                (
                    "code_challenge",
                    "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
                ),
                ("code_challenge_method", "S256"),
            ],
        )
        .expect("a URL");
        let page = reqwest::get(url).await.expect("an answer");
        assert_eq!(page.status(), StatusCode::BAD_REQUEST, "{client_id}");
        let text = page.text().await.unwrap_or_default();
        assert!(text.contains("loopback or private"), "{client_id}: {text}");
        assert!(
            listener.accept().is_err(),
            "{client_id}: the daemon connected to the port"
        );
    }
    daemon.stop().await;
}

/// The audience is this server's, whatever `Host` a request names (#46: with `allowed_hosts`
/// `*` and no `oauth.public_url`, a token for another server, sent with that server's name as
/// `Host`, was accepted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audience_does_not_follow_the_host_header() {
    let issuer = Issuer::start("dave").await.expect("the OAuth issuer runs");
    let mock = MockApi::start().await;
    let url = issuer.url.clone();
    let daemon = TestDaemon::start(&mock, move |c| {
        c.auth_token = Some(OPERATOR.into());
        c.oauth.issuer = Some(url);
        c.http.allowed_hosts = vec!["*".into()];
    })
    .await;
    let base = daemon.base.clone();
    let theirs = issuer
        .token_for("http://elsewhere.example/mcp", "threads:read threads:write")
        .await
        .expect("a token for another server");
    let client = reqwest::Client::new();
    let answer = client
        .get(format!("{base}/api/me"))
        .header(reqwest::header::HOST, "elsewhere.example")
        .bearer_auth(&theirs)
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), StatusCode::UNAUTHORIZED);
    // This server's own token still works, under any Host it allows.
    let ours = issuer
        .token_for(&format!("{base}/mcp"), "threads:read")
        .await
        .expect("a token for this server");
    let answer = client
        .get(format!("{base}/api/me"))
        .header(reqwest::header::HOST, "elsewhere.example")
        .bearer_auth(&ours)
        .send()
        .await
        .expect("an answer");
    assert_eq!(answer.status(), StatusCode::OK);
    daemon.stop().await;
}

/// The consent page is never framed, sniffed or kept, and shows the scopes the client will get
/// (#46: it showed `admin` and unknown names, which are never granted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consent_page_shows_what_is_granted_and_is_not_framed_or_kept() {
    let mock = MockApi::start().await;
    let daemon = builtin_daemon(&mock).await;
    let base = daemon.base.clone();
    let (status, client, _) = call(
        &base,
        None,
        Method::POST,
        "/oauth/register",
        Some(json!({"client_name": "Editor", "redirect_uris": ["http://127.0.0.1:9/cb"], "token_endpoint_auth_method": "none"})),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED, "{client}");
    let client_id = client["client_id"]
        .as_str()
        .expect("a client id")
        .to_owned();
    let challenge =
        harness_tests::oauth::pkce_challenge("a-verifier-that-is-long-enough-for-pkce-0123456789");
    let url = reqwest::Url::parse_with_params(
        &format!("{base}/oauth/authorize"),
        &[
            ("response_type", "code"),
            ("client_id", client_id.as_str()),
            ("redirect_uri", "http://127.0.0.1:9/cb"),
            ("code_challenge", challenge.as_str()),
            ("code_challenge_method", "S256"),
            ("scope", "admin threads:read no-such-scope"),
        ],
    )
    .expect("a URL");
    let page = reqwest::get(url).await.expect("the page");
    assert_eq!(page.status(), StatusCode::OK);
    let header = |name: &str| {
        page.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    assert_eq!(header("x-frame-options"), "DENY");
    assert_eq!(header("x-content-type-options"), "nosniff");
    assert_eq!(header("cache-control"), "no-store");
    let html = page.text().await.unwrap_or_default();
    assert!(
        html.contains(r#"<strong data-testid="consent-scopes">threads:read</strong>"#),
        "{html}"
    );
    assert!(!html.contains("no-such-scope"), "{html}");
    daemon.stop().await;
}
