//! A method a route does not take answers 405 with `Allow`, whatever body comes with it (#46:
//! `TRACE /api/files` with a body answered 415, its type refused before the method was known);
//! a path nobody serves answers 404. A body of the wrong type still gets its 415 on a route that
//! takes the method.

use reqwest::{Method, StatusCode};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

#[tokio::test]
async fn a_method_a_route_does_not_take_is_405_with_or_without_a_body() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let thread = daemon.create_thread().await;
    let http = reqwest::Client::new();
    let send = |method: &str, path: &str, body: Option<&'static str>| {
        let method = Method::from_bytes(method.as_bytes()).expect("a method");
        let mut request = http.request(method, format!("{}{path}", daemon.base));
        if let Some(body) = body {
            request = request.header("content-type", "text/plain").body(body);
        }
        async move { request.send().await.expect("an answer") }
    };
    let files = format!("/api/threads/{thread}/files");
    for (path, allowed) in [
        ("/api/files", "POST"),
        ("/api/threads", "GET,HEAD,POST"),
        ("/healthz", "GET,HEAD"),
        ("/oauth/register", "POST"),
        (files.as_str(), "GET,HEAD"),
    ] {
        for method in ["TRACE", "PUT", "FOO"] {
            for body in [None, Some("x")] {
                let answer = send(method, path, body).await;
                let status = answer.status();
                let mut allow: Vec<String> = answer
                    .headers()
                    .get("allow")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .split(',')
                    .map(|m| m.trim().to_owned())
                    .collect();
                allow.sort();
                let allow = allow.join(",");
                let text = answer.text().await.unwrap_or_default();
                let what = format!("{method} {path} with {body:?}: {status} {text}");
                assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{what}");
                assert_eq!(allow, allowed, "{what}");
                assert!(text.contains("\"method_not_allowed\""), "{what}");
            }
        }
    }
    let answer = send("TRACE", "/api/nothing-here", Some("x")).await;
    assert_eq!(answer.status(), StatusCode::NOT_FOUND);
    let answer = send("POST", "/api/threads", Some("x")).await;
    assert_eq!(answer.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    daemon.stop().await;
}
