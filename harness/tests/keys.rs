//! `harness keys`, on the real binary and the database a running daemon uses: `create` prints
//! the key once (the database holds its hash only), the daemon takes it at once as its tenant's
//! caller, `list` shows it without the key, `revoke` shuts it out at once, and both changes are
//! in the audit log.

mod support;

use reqwest::StatusCode;
use tempfile::TempDir;

use harness_tests::client::ApiClient;
use harness_tests::mock::MockApi;
use support::{keys, Harness, Launch};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_made_on_the_command_line_is_a_tenants_caller_until_revoked() {
    let mock = MockApi::start().await;
    let dir = TempDir::new().expect("temp dir");
    let daemon = Harness::start(dir.path(), &mock, &Launch::with_grace(5)).await;

    let made = keys(
        dir.path(),
        &[
            "create",
            "--tenant",
            "acme",
            "--scopes",
            "threads:read",
            "--rpm",
            "100",
        ],
    )
    .await;
    let key = String::from_utf8(made.stdout).expect("utf-8");
    let key = key.trim();
    assert!(key.starts_with("hk_"), "stdout is the key alone: {key:?}");
    let described = String::from_utf8_lossy(&made.stderr).to_string();
    let id = described
        .split('\t')
        .next()
        .expect("the id first")
        .to_owned();
    assert!(id.starts_with("key_"), "{described}");

    let database = std::fs::read(dir.path().join("harness.db")).expect("the database file");
    let secret = &key.as_bytes()["hk_".len()..];
    assert!(
        !database.windows(secret.len()).any(|w| w == secret),
        "the key itself is not in the database"
    );

    let as_key = ApiClient::with_bearer_token(daemon.client.base(), key);
    let (status, me) = as_key.get("/api/me").await;
    assert_eq!(status, StatusCode::OK, "{me}");
    assert_eq!(
        (me["subject"].as_str(), me["tenant"].as_str()),
        (Some(id.as_str()), Some("acme"))
    );
    assert_eq!(me["scopes"], serde_json::json!(["threads:read"]));

    let listed = keys(dir.path(), &["list"]).await;
    let listed = String::from_utf8(listed.stdout).expect("utf-8");
    assert!(
        listed.contains(&id) && listed.contains("rpm=100") && listed.contains("live"),
        "{listed}"
    );
    assert!(!listed.contains(key), "list never shows a key");

    keys(dir.path(), &["revoke", &id]).await;
    let (status, body) = as_key.get("/api/me").await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "revoked at once: {body}");

    let audit = daemon.get_ok("/api/audit").await;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["path"].as_str() == Some(&format!("keys/{id}")))
        .filter_map(|e| e["action"].as_str())
        .collect();
    assert_eq!(actions, ["harness keys revoke", "harness keys create"]);
    daemon.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_key_request_names_its_problem() {
    let dir = TempDir::new().expect("temp dir");
    for (args, words) in [
        (
            &["create", "--tenant", "acme", "--scopes", "root"][..],
            "unknown scope `root`",
        ),
        (
            &["create", "--tenant", "a/b", "--scopes", "admin"][..],
            "tenant must be",
        ),
        (&["revoke", "key_nope"][..], "no key key_nope"),
    ] {
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_harness"))
            .arg("keys")
            .args(args)
            .arg(format!("--db={}", dir.path().join("harness.db").display()))
            .arg(format!("--data-dir={}", dir.path().display()))
            .output()
            .await
            .expect("harness runs");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{args:?}");
        assert!(stderr.contains(words), "{args:?}: {stderr}");
    }
}
