//! A turn's options from the page: the open thread's profile's MCP servers are listed, each on;
//! a turn sent with one of them off and in plan mode reaches the CLI that way (the model is not
//! offered that server's tools, and the CLI says it is in plan mode); the next turn, with the
//! options back, has them all again.

use orchestrator::config::{McpServerConfig, ProfileConfig};

use harness_tests::mcp::{one_tool_server, python_or_skip};

use crate::support::{Page, QUICK, TURN};

/// Waits for the last reply of the open thread to be done.
async fn turn_done(page: &Page, turns: usize) {
    let script = format!(
        "const r = [...document.querySelectorAll('[data-testid=message][data-role=assistant]')];
         return r.length === {turns} && r[{turns} - 1].dataset.status === 'done';"
    );
    page.wait_js(TURN, "the turn ends", &script).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_sent_with_fewer_servers_and_in_plan_mode_runs_that_way() {
    let Some(python) =
        python_or_skip("a_turn_sent_with_fewer_servers_and_in_plan_mode_runs_that_way").await
    else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = |name: &str, tool: &str| McpServerConfig {
        command: python.clone(),
        args: vec![one_tool_server(dir.path(), name, tool)
            .display()
            .to_string()],
        ..Default::default()
    };
    let (alpha, beta) = (server("alpha", "ping"), server("beta", "pong"));
    let page = Page::open(move |c| {
        c.profiles.insert(
            "desk".into(),
            ProfileConfig {
                mcp_servers: [("alpha".into(), alpha), ("beta".into(), beta)].into(),
                ..Default::default()
            },
        );
    })
    .await;
    page.wait_js(
        QUICK,
        "the profiles are offered",
        "return document.querySelector('[data-testid=profile-select] [data-profile=desk]');",
    )
    .await;
    page.browser
        .client
        .execute(
            "document.querySelector('[data-testid=profile-select]').value = 'desk';",
            vec![],
        )
        .await
        .unwrap();
    page.new_thread().await;
    let servers = page
        .wait_js(
            QUICK,
            "the profile's servers are offered, each on",
            "const boxes = [...document.querySelectorAll('[data-testid=turn-server]')];
             return boxes.length === 2 && boxes.every((b) => b.checked)
                 && boxes.map((b) => b.value);",
        )
        .await;
    assert_eq!(servers, serde_json::json!(["alpha", "beta"]));

    page.browser
        .client
        .execute(
            "document.querySelector('[data-testid=turn-options]').open = true;
             document.querySelector('[data-testid=turn-server][value=beta]').click();
             document.querySelector('[data-testid=turn-mode]').value = 'plan';",
            vec![],
        )
        .await
        .unwrap();
    page.send("plan it with alpha").await;
    turn_done(&page, 1).await;
    let asked = page.mock.message_requests();
    let first = asked.last().expect("a request");
    let tools = first.tool_names();
    assert!(tools.iter().any(|t| t == "mcp__alpha__ping"), "{tools:?}");
    assert!(!tools.iter().any(|t| t == "mcp__beta__pong"), "{tools:?}");
    assert!(
        first.all_text().contains("Plan mode is active"),
        "plan mode"
    );

    page.browser
        .client
        .execute(
            "document.querySelector('[data-testid=turn-server][value=beta]').click();
             document.querySelector('[data-testid=turn-mode]').value = '';",
            vec![],
        )
        .await
        .unwrap();
    page.send("now with both").await;
    turn_done(&page, 2).await;
    let asked = page.mock.message_requests();
    let second = asked.last().expect("a request");
    let tools = second.tool_names();
    assert!(
        tools.iter().any(|t| t == "mcp__alpha__ping")
            && tools.iter().any(|t| t == "mcp__beta__pong"),
        "{tools:?}"
    );
    assert!(
        second.all_text().contains("Exited Plan Mode"),
        "back from plan mode"
    );
    page.finish(false).await;
}
