use std::collections::BTreeMap;

use super::usage::{Scanner, Used};
use super::*;

const STREAM: &str = concat!(
    "event: message_start\n",
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"model\":\"claude-sonnet-4-5\",",
    "\"usage\":{\"input_tokens\":120,\"output_tokens\":1,\"cache_read_input_tokens\":40,",
    "\"cache_creation_input_tokens\":3}}}\n\n",
    "event: content_block_delta\n",
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",",
    "\"text\":\"a \\\"message_delta\\\" in the text is not one\"}}\n\n",
    "event: message_delta\n",
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},",
    "\"usage\":{\"output_tokens\":57}}\n\n",
    "event: message_stop\n",
    "data: {\"type\":\"message_stop\"}\n\n",
);

fn expected() -> Used {
    Used {
        id: Some("msg_1".into()),
        model: Some("claude-sonnet-4-5".into()),
        input: 120,
        output: 57,
        cache_read: 40,
        cache_write: 3,
    }
}

#[test]
fn a_stream_is_read_whole_wherever_its_chunks_are_cut() {
    let bytes = STREAM.as_bytes();
    for cut in 0..bytes.len() {
        let mut scanner = Scanner::new(true);
        scanner.feed(&bytes[..cut]);
        scanner.feed(&bytes[cut..]);
        assert_eq!(scanner.finish(), expected(), "cut at {cut}");
    }
    let mut scanner = Scanner::new(true);
    for byte in bytes {
        scanner.feed(std::slice::from_ref(byte));
    }
    assert_eq!(scanner.finish(), expected(), "one byte at a time");
}

#[test]
fn a_json_response_is_read_at_its_end() {
    let body = br#"{"id":"msg_2","type":"message","model":"claude-haiku-4-5","content":[],
        "usage":{"input_tokens":10,"output_tokens":4,"cache_read_input_tokens":0,
        "cache_creation_input_tokens":0}}"#;
    let mut scanner = Scanner::new(false);
    let (a, b) = body.split_at(30);
    scanner.feed(a);
    scanner.feed(b);
    let used = scanner.finish();
    assert_eq!(used.model.as_deref(), Some("claude-haiku-4-5"));
    assert_eq!(used.id.as_deref(), Some("msg_2"));
    assert_eq!((used.input, used.output), (10, 4));
}

/// A request's estimate is its whole body as prompt and its `max_tokens` as output, at its
/// model's prices; a body that is not a request still has one (the fallback price, 4096 out).
#[test]
fn a_requests_estimate_is_its_prompt_and_its_max_tokens_at_its_models_prices() {
    let prices = prices(&BTreeMap::new());
    let prompt = "x".repeat(400_000);
    let body = serde_json::to_vec(&serde_json::json!({
        "model": "claude-sonnet-4-5", "max_tokens": 1000,
        "messages": [{"role": "user", "content": prompt}],
    }))
    .unwrap();
    let sonnet = prices.of(Some("claude-sonnet-4-5"));
    let tokens = (body.len() / 4) as f64;
    let want = tokens / 1e6 * sonnet.input + 1000.0 / 1e6 * sonnet.output;
    assert!((super::usage::Asked::of(&body).estimate(&prices) - want).abs() < 1e-12);
    let fallback = prices.of(None);
    let want = 4096.0 / 1e6 * fallback.output + 2.0 / 1e6 * fallback.input;
    assert!((super::usage::Asked::of(b"not json").estimate(&prices) - want).abs() < 1e-12);
}

#[test]
fn prices_take_the_longest_prefix_and_the_configured_rows_win() {
    let built_in = prices(&BTreeMap::new());
    assert_eq!(built_in.of(Some("claude-opus-4-1-20250805")).input, 15.0);
    assert_eq!(built_in.of(Some("claude-opus-4-5-20251101")).input, 5.0);
    assert_eq!(built_in.of(Some("claude-opus-5-5")).cache_read, 0.2);
    assert_eq!(built_in.of(Some("claude-sonnet-4-5")).output, 15.0);
    // Unknown or none: what the CLI charges for a model it has no price of.
    assert_eq!(built_in.of(Some("gpt-9")).input, 5.0);
    assert_eq!(built_in.of(None).output, 25.0);
    let cheap = Price {
        input: 1.0,
        output: 2.0,
        cache_write: 0.0,
        cache_read: 0.0,
    };
    let configured = prices(&BTreeMap::from([("claude-sonnet-4-5".to_owned(), cheap)]));
    assert_eq!(configured.of(Some("claude-sonnet-4-5-20250929")), cheap);
    assert_eq!(configured.of(Some("claude-sonnet-4-0")).input, 3.0);
    // 120 input, 57 output, 40 cache reads, 3 cache writes at sonnet's list price.
    let cost = expected().cost(built_in.of(Some("claude-sonnet-4-5")));
    let want = (120.0 * 3.0 + 57.0 * 15.0 + 40.0 * 0.3 + 3.0 * 3.75) / 1e6;
    assert!((cost - want).abs() < 1e-12, "{cost} != {want}");
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

#[test]
fn the_upstream_and_its_credentials_leave_the_childs_environment() {
    let mut child = env(&[
        ("PATH", "/bin"),
        ("ANTHROPIC_BASE_URL", "https://proxy.example/anthropic/"),
        ("ANTHROPIC_API_KEY", "sk-real"),
        ("ANTHROPIC_AUTH_TOKEN", "bearer-real"),
        ("ANTHROPIC_MODEL", "sonnet"),
    ]);
    let upstream = Upstream::take_from(&mut child);
    assert_eq!(
        child,
        env(&[("PATH", "/bin"), ("ANTHROPIC_MODEL", "sonnet")])
    );
    assert_eq!(upstream.base, "https://proxy.example/anthropic");
    assert!(matches!(&upstream.auth, Auth::ApiKey(key) if key == "sk-real"));
    let shown = format!("{upstream:?}");
    assert!(
        !shown.contains("sk-real") && !shown.contains("proxy.example"),
        "{shown}"
    );

    let mut bearer = env(&[("ANTHROPIC_AUTH_TOKEN", "bearer-real")]);
    let upstream = Upstream::take_from(&mut bearer);
    assert_eq!(upstream.base, DEFAULT_UPSTREAM);
    assert!(matches!(&upstream.auth, Auth::Bearer(t) if t == "bearer-real"));
    assert!(Upstream::take_from(&mut Vec::new()).is_login());
}

#[tokio::test]
async fn a_process_gets_a_token_of_its_own_that_dies_with_it() {
    let (gateway, _listener) = Gateway::bind(&GatewayConfig::default()).await.unwrap();
    let thread = ThreadId::from_string("t-1");
    let keyed = Arc::new(Upstream::take_from(&mut env(&[(
        "ANTHROPIC_API_KEY",
        "sk-real",
    )])));
    let (child, pass) = gateway.issue(&thread, &keyed, None);
    let get = |name: &str| {
        child
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    assert_eq!(get("ANTHROPIC_BASE_URL").as_deref(), Some(gateway.url()));
    let token = get("ANTHROPIC_API_KEY").unwrap();
    assert!(token.starts_with("hgw_") && token.len() > 40, "{token}");
    assert_eq!(gateway.holder(&token).unwrap().thread, thread);
    let (_, other) = gateway.issue(&thread, &keyed, None);
    assert_ne!(other.token, token);
    drop(pass);
    assert!(gateway.holder(&token).is_none());
    assert!(gateway.holder(&other.token).is_some());

    // A child on the CLI's own login keeps it, and carries the token as a header.
    let login = Arc::new(Upstream::take_from(&mut Vec::new()));
    let (child, pass) = gateway.issue(&thread, &login, Some("x-team: blue"));
    assert!(child.iter().all(|(k, _)| k != "ANTHROPIC_API_KEY"));
    let headers = child
        .iter()
        .find(|(k, _)| k == "ANTHROPIC_CUSTOM_HEADERS")
        .map(|(_, v)| v.clone())
        .unwrap();
    assert_eq!(
        headers,
        format!("x-team: blue\n{TOKEN_HEADER}: {}", pass.token)
    );
}

#[test]
fn anthropics_api_is_told_from_other_upstreams() {
    let upstream = |base: &str| Upstream::take_from(&mut env(&[("ANTHROPIC_BASE_URL", base)]));
    assert!(
        Upstream::take_from(&mut Vec::new()).is_anthropic(),
        "the default"
    );
    for base in [
        "https://api.anthropic.com",
        "https://api.anthropic.com/",
        "https://API.Anthropic.com:443/v1",
        "https://eu.api.anthropic.com",
    ] {
        assert!(upstream(base).is_anthropic(), "{base}");
    }
    for base in [
        "http://api.anthropic.com",
        "https://api.anthropic.com.evil.example",
        "https://notanthropic.com",
        "https://anthropic.com@evil.example",
        "http://127.0.0.1:9000",
        "https://litellm.internal/anthropic.com",
    ] {
        assert!(!upstream(base).is_anthropic(), "{base}");
    }
}

/// `gateway.first_party`: `auto` tells a child to run as first-party only when the upstream is
/// Anthropic's API; `always` and `never` whatever it is.
#[tokio::test]
async fn children_run_as_first_party_when_the_upstream_is_anthropics() {
    let anthropic = Arc::new(Upstream::take_from(&mut Vec::new()));
    let other = Arc::new(Upstream::take_from(&mut env(&[(
        "ANTHROPIC_BASE_URL",
        "https://llm.example",
    )])));
    let thread = ThreadId::from_string("t-1");
    for (setting, on_anthropic, on_other) in [
        (FirstParty::Auto, true, false),
        (FirstParty::Always, true, true),
        (FirstParty::Never, false, false),
    ] {
        let config = GatewayConfig {
            first_party: setting,
            ..GatewayConfig::default()
        };
        let (gateway, _listener) = Gateway::bind(&config).await.unwrap();
        let told = |upstream: &Arc<Upstream>| {
            let (child, _pass) = gateway.issue(&thread, upstream, None);
            child.contains(&(FIRST_PARTY_ENV.to_owned(), "1".to_owned()))
        };
        assert_eq!(
            (told(&anthropic), told(&other)),
            (on_anthropic, on_other),
            "{setting:?}"
        );
    }
}

#[tokio::test]
async fn a_processs_requests_meter_into_the_turn_that_holds_it() {
    use crate::budget::{Budgets, Charge};
    use crate::store::{NewThread, Store};
    let (gateway, _listener) = Gateway::bind(&GatewayConfig::default()).await.unwrap();
    let store = Store::open(":memory:").await.unwrap();
    let thread = store.create_thread(NewThread::default()).await.unwrap();
    let budgets = Budgets::default();
    let upstream = Arc::new(Upstream::take_from(&mut Vec::new()));
    let (_, pass) = gateway.issue(&thread.id, &upstream, None);
    let (_, other) = gateway.issue(&thread.id, &upstream, None);
    // What the gateway finds for a request with the process's token.
    let meter_of = |pass: &Pass| gateway.holder(&pass.token).unwrap().meter.get();
    assert!(meter_of(&pass).is_none(), "no turn held it yet");
    let charge = Charge::thread(thread.clone());
    let first = budgets.reserve(&store, &charge).await.unwrap().unwrap();
    pass.meter_slot().set(first.meter());
    assert!(meter_of(&pass).unwrap().metered(0.01, None));
    assert!(meter_of(&other).is_none(), "a process no turn holds");
    assert!((first.close_meter() - 0.01).abs() < 1e-9);
    drop(first);
    // The thread's next turn: nothing counts in the ended one, then its own counts its own.
    let second = budgets.reserve(&store, &charge).await.unwrap().unwrap();
    assert!(!meter_of(&pass).unwrap().metered(0.05, None));
    pass.meter_slot().set(second.meter());
    assert!(meter_of(&pass).unwrap().metered(0.02, None));
    assert!((second.close_meter() - 0.02).abs() < 1e-9);
}
