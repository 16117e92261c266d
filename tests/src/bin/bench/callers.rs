//! What telling callers apart costs a request (issue #28): one thread read (`GET
//! /api/threads/{id}`, through the scope and tenant check) by the operator token, an API key (its
//! hash looked up in the store, its requests counted) and a built-in OAuth access token (looked
//! up by its hash), in rounds that alternate the three, so each sees the same machine.

use std::fmt::Write as _;
use std::time::Instant;

use anyhow::Context;
use serde_json::{json, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use crate::{ms, Series};

const OPERATOR: &str = "bench-operator-token";

pub struct Outcome {
    reads: Vec<Series>,
}

/// `rounds` reads by each caller, after a warm-up.
pub async fn run(mock: &MockApi, rounds: usize) -> anyhow::Result<Outcome> {
    let daemon = TestDaemon::start(mock, |c| {
        c.auth_token = Some(OPERATOR.into());
        c.oauth.builtin = true;
    })
    .await;
    let base = daemon.base.clone();
    let http = reqwest::Client::new();
    let made: Value = http
        .post(format!("{base}/api/keys"))
        .bearer_auth(OPERATOR)
        .json(&json!({"tenant": "bench", "scopes": ["threads:read", "threads:write"]}))
        .send()
        .await?
        .json()
        .await?;
    let key = made["key"].as_str().context("a key")?.to_owned();
    let token = oauth_token(&http, &base).await?;
    let thread: Value = http
        .post(format!("{base}/api/threads"))
        .bearer_auth(&key)
        .json(&json!({}))
        .send()
        .await?
        .json()
        .await?;
    let path = format!(
        "{base}/api/threads/{}",
        thread["id"].as_str().context("an id")?
    );
    let callers = [
        ("operator token", OPERATOR.to_owned()),
        ("API key", key),
        ("OAuth access token (built-in)", token),
    ];
    let mut reads: Vec<Series> = callers.iter().map(|(name, _)| Series::new(*name)).collect();
    for round in 0..rounds + 20 {
        for (series, (_, bearer)) in reads.iter_mut().zip(&callers) {
            let started = Instant::now();
            let answer = http.get(&path).bearer_auth(bearer).send().await?;
            anyhow::ensure!(answer.status().is_success(), "{}", answer.status());
            answer.bytes().await?;
            // The first rounds warm connections and caches up.
            if round >= 20 {
                series.samples.push(started.elapsed());
            }
        }
    }
    daemon.stop().await;
    Ok(Outcome { reads })
}

/// An access token of the built-in server: a client registers, the operator consents, the code
/// is exchanged.
async fn oauth_token(http: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let back = "http://127.0.0.1:9/callback";
    let client: Value = http
        .post(format!("{base}/oauth/register"))
        .json(&json!({"client_name": "bench", "redirect_uris": [back]}))
        .send()
        .await?
        .json()
        .await?;
    let client_id = client["client_id"].as_str().context("a client")?.to_owned();
    let verifier = "the-bench-verifier-long-enough-for-pkce-0123456789";
    let challenge = harness_tests::oauth::pkce_challenge(verifier);
    let request = json!({"response_type": "code", "client_id": client_id, "redirect_uri": back,
        "code_challenge": challenge, "code_challenge_method": "S256"});
    let granted: Value = http
        .post(format!("{base}/oauth/consent"))
        .json(&json!({"request": request, "tenant": "bench", "adminKey": OPERATOR}))
        .send()
        .await?
        .json()
        .await?;
    let to = reqwest::Url::parse(granted["redirectTo"].as_str().context("a redirect")?)?;
    let code = to
        .query_pairs()
        .find(|(k, _)| k == "code")
        .context("a code")?
        .1
        .into_owned();
    let tokens: Value = http
        .post(format!("{base}/oauth/token"))
        .form(&[
            ("grant_type", "authorization_code"),
            ("code", &code),
            ("code_verifier", verifier),
            ("redirect_uri", back),
            ("client_id", &client_id),
        ])
        .send()
        .await?
        .json()
        .await?;
    Ok(tokens["access_token"]
        .as_str()
        .context("an access token")?
        .to_owned())
}

pub fn render(out: &mut String, outcome: &Outcome) -> std::fmt::Result {
    writeln!(out, "## Callers\n")?;
    let rounds = outcome.reads.first().map_or(0, |s| s.samples.len());
    writeln!(
        out,
        "{rounds} rounds of one thread read (`GET /api/threads/{{id}}`) by each caller, \
         alternating; the ratio is against the operator token's median.\n"
    )?;
    writeln!(out, "| caller | median | p95 | ratio |\n|---|---|---|---|")?;
    let base = outcome.reads.first().map_or(0.0, |s| ms(s.median()));
    for series in &outcome.reads {
        writeln!(
            out,
            "| {} | {:.2} ms | {:.2} ms | {:.2}× |",
            series.name,
            ms(series.median()),
            ms(series.p95()),
            ms(series.median()) / base.max(f64::EPSILON)
        )?;
    }
    writeln!(out)
}
