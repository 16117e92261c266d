//! A thread on a workspace and a profile from the page: made with a worktree of a repository
//! and the profile that has `Write`, both shown, and its diff read after the model wrote a file
//! (as text, never markup).

use serde_json::json;

use harness_tests::git::{git, repository};
use harness_tests::mock::Reply;
use orchestrator::config::{ApprovalRule, RuleDecision};

use crate::support::{Page, QUICK, TURN};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thread_on_a_worktree_shows_its_workspace_and_its_diff() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let repo = repository(&root.join("app"));
    let page = Page::open(|c| {
        c.workspaces.roots = vec![root.clone()];
        // Only this profile has `Write` (the tests' [claude] has no built-in tools).
        c.profiles.insert(
            "writer".into(),
            orchestrator::config::ProfileConfig {
                description: Some("may write".into()),
                builtin_tools: Some("Write".into()),
                ..Default::default()
            },
        );
        c.approvals.rules = vec![ApprovalRule {
            tool: "Write".into(),
            decision: RuleDecision::Allow,
        }];
    })
    .await;

    page.browser
        .hook("workspace-options")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    page.browser
        .hook("workspace-input")
        .await
        .unwrap()
        .send_keys(&repo.display().to_string())
        .await
        .unwrap();
    page.browser
        .hook("workspace-worktree")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    page.wait_js(
        QUICK,
        "the profiles are offered, the default first",
        "const s = document.querySelector('[data-testid=profile-select]');
         return s.options.length === 3 && s.options[0].value === ''
             && s.options[0].dataset.profile === 'standard';",
    )
    .await;
    page.browser
        .client
        .execute(
            "document.querySelector('[data-testid=profile-select]').value = 'writer';",
            vec![],
        )
        .await
        .unwrap();
    let thread = page.new_thread().await;
    let shown = page
        .wait_js(
            QUICK,
            "the thread's workspace in the header",
            "const w = document.querySelector('[data-testid=workspace]');
             return !w.hidden && w.textContent;",
        )
        .await;
    assert_eq!(
        shown,
        json!(format!("worktree harness/{thread} of {}", repo.display()))
    );

    page.wait_js(
        QUICK,
        "the thread's profile in the header",
        "return document.querySelector('[data-testid=model]').textContent
             .includes('profile: writer');",
    )
    .await;
    let (_, got) = page.daemon.get(&format!("/api/threads/{thread}")).await;
    assert_eq!(got["profile"], "writer");
    let folder = got["workspace"]["path"].as_str().unwrap().to_owned();
    let written = std::path::Path::new(&folder).join("page.html");
    page.mock
        .once_when_prompt_contains("write the page", Reply::write(&written, "<b>bold</b>\n"));
    page.send("write the page").await;
    page.wait_js(
        TURN,
        "the turn ends",
        "const r = document.querySelector('[data-testid=message][data-role=assistant]');
         return r && r.dataset.status === 'done';",
    )
    .await;

    page.browser
        .hook("diff-toggle")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let diff = page
        .wait_js(
            QUICK,
            "the diff shows",
            "const d = document.querySelector('[data-testid=diff]');
             return !d.hidden && {
               summary: document.querySelector('[data-testid=diff-summary]').textContent,
               patch: document.querySelector('[data-testid=diff-patch]').textContent,
               markup: d.querySelectorAll('b').length,
             };",
        )
        .await;
    let base = git(&repo, &["rev-parse", "main"]);
    assert_eq!(
        diff["summary"],
        json!(format!("1 file changed since {}: +1 −0", &base[..10]))
    );
    let patch = diff["patch"].as_str().unwrap();
    assert!(patch.contains("+++ b/page.html"), "{patch}");
    assert!(patch.contains("+<b>bold</b>"), "{patch}");
    assert_eq!(diff["markup"], 0, "the patch is text, not markup");
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "the checkout is untouched"
    );

    // Archive it from the page: the worktree holds the new file, so it is kept, and said so.
    page.browser
        .client
        .execute("window.confirm = () => true;", vec![])
        .await
        .unwrap();
    page.browser
        .hook("archive")
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let shown = page
        .wait_js(
            QUICK,
            "the thread shows archived, without a composer",
            "const a = document.querySelector('[data-testid=archived]');
             const form = document.querySelector('[data-testid=composer-form]');
             const error = document.querySelector('[data-testid=send-error]');
             return !a.hidden && form.hidden && !error.hidden && error.textContent;",
        )
        .await;
    assert!(
        shown.as_str().unwrap().contains("uncommitted work"),
        "{shown}"
    );
    let (_, got) = page.daemon.get(&format!("/api/threads/{thread}")).await;
    assert!(got["archivedAt"].is_string(), "{got}");
    assert!(written.is_file());
    page.finish(false).await;
}
