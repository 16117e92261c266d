//! Tool approvals on the page: a permission the CLI asks for shows in its turn with Allow, Allow
//! always and Deny, a click decides it (Allow always adds the thread's rule), and a reload shows
//! how it was decided. And what the walls do
//! instead of asking: a process they stop shows on the thread's page.

use serde_json::json;

use harness_tests::mock::Reply;
use orchestrator::config::ApprovalMode;

use crate::support::{Page, QUICK, TURN};

/// Waits for the pending request of the last turn and clicks `button` (`allow`, `allow-always`
/// or `deny`).
async fn decide(page: &Page, button: &str) {
    page.wait_js(
        TURN,
        "a pending permission for Bash with Allow and Deny",
        "const all = document.querySelectorAll('[data-testid=permission]');
         const p = all[all.length - 1];
         return p && p.dataset.status === 'pending' && p.textContent.includes('Bash')
             && p.querySelector('[data-testid=allow]') && p.querySelector('[data-testid=deny]')
             && p.querySelector('[data-testid=allow-always]');",
    )
    .await;
    let script = format!(
        "const all = document.querySelectorAll('[data-testid=permission]');
         all[all.length - 1].querySelector('[data-testid={button}]').click(); return true;"
    );
    page.browser
        .client
        .execute(&script, Vec::new())
        .await
        .expect("click the button");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permission_shows_in_its_turn_and_each_button_decides_it() {
    let page = Page::open(|c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Ask;
    })
    .await;
    let thread = page.new_thread().await;
    let folder = page.daemon.thread_folder(&thread);
    let allowed = folder.join("allowed-by-a-person");
    let denied = folder.join("denied-by-a-person");
    let always = folder.join("allowed-always");
    for (prompt, file) in [
        ("make the first file", &allowed),
        ("make the second file", &denied),
        ("make the third file", &always),
    ] {
        page.mock.once_when_prompt_contains(
            prompt,
            Reply::tool_use(
                "Bash",
                json!({"command": format!("touch {}", file.display()), "description": "d"}),
            ),
        );
    }

    page.send("make the first file").await;
    decide(&page, "allow").await;
    page.wait_last_reply("done", TURN).await;
    assert!(allowed.exists(), "the allowed command ran");

    page.send("make the second file").await;
    decide(&page, "deny").await;
    page.wait_last_reply("done", TURN).await;
    assert!(!denied.exists(), "the denied command did not run");

    page.send("make the third file").await;
    decide(&page, "allow-always").await;
    page.wait_last_reply("done", TURN).await;
    assert!(always.exists(), "the command allowed always ran");
    let (_, rules) = page
        .daemon
        .get(&format!("/api/threads/{thread}/rules"))
        .await;
    let rule = format!("Bash(touch {})", always.display());
    assert_eq!(rules["rules"][0]["rule"], rule.as_str(), "{rules}");

    // A reload rebuilds both from the event log: decided, no buttons.
    page.browser.client.refresh().await.expect("reload");
    let verdicts = page
        .wait_js(
            QUICK,
            "the requests show as decided by a person",
            "const all = Array.from(document.querySelectorAll('[data-testid=permission]'));
             return all.length === 3 && !document.querySelector('[data-testid=allow]')
                 ? all.map(p => p.dataset.status + ': '
                     + p.querySelector('[data-testid=permission-verdict]').textContent)
                 : null;",
        )
        .await;
    assert_eq!(
        verdicts,
        json!([
            "allowed: Allowed (person)",
            "denied: Denied (person)",
            "allowed: Allowed (person)"
        ])
    );
    page.finish(false).await;
}

/// A command the walls stop shows on its thread's page, with the limit it reached, live and
/// after a reload.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_the_walls_stop_shows_on_the_page() {
    let page = Page::open(|c| {
        c.claude.builtin_tools = Some("Bash".into());
        c.approvals.mode = ApprovalMode::Allow;
        c.sandbox.memory_max_mb = 512;
    })
    .await;
    page.new_thread().await;
    page.mock.once_when_prompt_contains(
        "grow too big",
        Reply::tool_use(
            "Bash",
            json!({"command": "python3 -c 'b = bytearray(2 * 1024 ** 3)'", "description": "d"}),
        ),
    );
    page.send("grow too big").await;
    page.wait_last_reply("done", TURN).await;
    for moment in ["live", "after a reload"] {
        let shown = page
            .wait_js(
                QUICK,
                &format!("the stop shows ({moment})"),
                "const n = document.querySelector('[data-testid=limit-reached]');
                 return n ? n.textContent : null;",
            )
            .await;
        let shown = shown.as_str().unwrap_or_default().to_owned();
        assert!(shown.contains("memory limit of 512 MiB"), "{shown}");
        assert!(shown.contains("python"), "{shown}");
        page.browser.client.refresh().await.expect("reload");
    }
}
