//! Workspaces against the real `git`: what is refused and why, the worktree made, its diff, and
//! a worktree made again after it was removed.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::*;
use crate::config::OnArchive;

/// Runs `git -C dir args…`, panicking with its stderr when it fails.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A root holding a repository `app` (one commit on `main`: README.md, .gitignore, and a
/// `.worktreeinclude` naming `.env`), an ignored `.env` beside it, and a folder `plain`.
struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    outside: PathBuf,
    workspaces: Workspaces,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("test set-up");
    let base = dir.path().canonicalize().expect("test set-up");
    let root = base.join("root");
    let repo = root.join("app");
    let outside = base.join("outside");
    for folder in [&repo, &outside, &root.join("plain")] {
        std::fs::create_dir_all(folder).expect("test set-up");
    }
    git(&repo, &["init", "--quiet", "-b", "main"]);
    git(&repo, &["config", "user.email", "t@example.com"]);
    git(&repo, &["config", "user.name", "t"]);
    std::fs::write(repo.join("README.md"), "hello\n").expect("test set-up");
    std::fs::write(repo.join(".gitignore"), ".env\nbuild/\n").expect("test set-up");
    std::fs::write(repo.join(".worktreeinclude"), ".env\n").expect("test set-up");
    std::fs::write(repo.join(".env"), "SECRET=1\n").expect("test set-up");
    std::fs::create_dir_all(repo.join("build")).expect("test set-up");
    std::fs::write(repo.join("build/out.bin"), "x").expect("test set-up");
    git(
        &repo,
        &["add", "README.md", ".gitignore", ".worktreeinclude"],
    );
    git(&repo, &["commit", "--quiet", "-m", "first"]);
    let config = Config {
        data_dir: base.join("data"),
        workspaces: crate::config::WorkspacesConfig {
            roots: vec![root.clone()],
            ..Default::default()
        },
        ..Default::default()
    };
    let workspaces = Workspaces::new(&config).expect("test set-up");
    Fixture {
        _dir: dir,
        root,
        repo,
        outside,
        workspaces,
    }
}

fn path(path: &Path) -> WorkspaceRequest {
    WorkspaceRequest {
        path: Some(path.display().to_string()),
        ..Default::default()
    }
}

fn worktree(repo: &Path) -> WorkspaceRequest {
    WorkspaceRequest {
        repo: Some(repo.display().to_string()),
        worktree: Some(true),
        ..Default::default()
    }
}

/// A worktree of the fixture's repository for `thread`.
async fn made_worktree(f: &Fixture, thread: &ThreadId) -> Workspace {
    let made = f.workspaces.prepare(thread, &worktree(&f.repo)).await;
    made.expect("a worktree")
}

async fn refusal(f: &Fixture, request: WorkspaceRequest) -> String {
    let thread = ThreadId::generate();
    match f.workspaces.prepare(&thread, &request).await {
        Err(WorkspaceError::Invalid(message)) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn a_path_must_be_an_absolute_folder_under_the_roots_once_resolved() {
    let f = fixture();
    let thread = ThreadId::generate();
    let plain = f.root.join("plain");
    let made = f.workspaces.prepare(&thread, &path(&plain)).await.unwrap();
    assert_eq!(made, Workspace::Path { path: plain });
    // `..` back into the root is fine: it is where the path leads that counts.
    let around = f.root.join("plain/../app");
    let made = f.workspaces.prepare(&thread, &path(&around)).await.unwrap();
    assert_eq!(made.path(), f.repo);

    let message = refusal(&f, path(&f.outside)).await;
    assert!(message.contains("outside workspaces.roots"), "{message}");
    let escape = f.root.join("escape");
    std::os::unix::fs::symlink(&f.outside, &escape).unwrap();
    let message = refusal(&f, path(&escape)).await;
    assert!(
        message.contains(&format!("leads to {}", f.outside.display())),
        "{message}"
    );
    let message = refusal(&f, path(Path::new("relative/dir"))).await;
    assert!(message.contains("absolute"), "{message}");
    let message = refusal(&f, path(&f.root.join("missing"))).await;
    assert!(message.contains("missing"), "{message}");
    let message = refusal(&f, path(&f.repo.join("README.md"))).await;
    assert!(message.contains("not a folder"), "{message}");
}

#[tokio::test]
async fn requests_that_mix_or_miss_their_fields_are_refused() {
    let f = fixture();
    let both = WorkspaceRequest {
        repo: Some(f.repo.display().to_string()),
        ..path(&f.repo)
    };
    assert!(refusal(&f, both).await.contains("not both"));
    let repo_alone = WorkspaceRequest {
        worktree: None,
        ..worktree(&f.repo)
    };
    assert!(refusal(&f, repo_alone).await.contains("worktree"));
    let branch_on_path = WorkspaceRequest {
        branch: Some("x".into()),
        ..path(&f.repo)
    };
    assert!(refusal(&f, branch_on_path).await.contains("go with `repo`"));
    assert!(refusal(&f, WorkspaceRequest::default())
        .await
        .contains("needs `path` or `repo`"));
    let not_a_repo = worktree(&f.root.join("plain"));
    assert!(refusal(&f, not_a_repo)
        .await
        .contains("not a git repository"));
    let bad_ref = WorkspaceRequest {
        base_ref: Some("no-such-branch".into()),
        ..worktree(&f.repo)
    };
    assert!(refusal(&f, bad_ref).await.contains("names no commit"));
    let option = WorkspaceRequest {
        base_ref: Some("--output=/tmp/x".into()),
        ..worktree(&f.repo)
    };
    assert!(refusal(&f, option).await.contains("is not a ref"));
    let bad_branch = WorkspaceRequest {
        branch: Some("a..b".into()),
        ..worktree(&f.repo)
    };
    assert!(refusal(&f, bad_branch).await.contains("not a valid branch"));
}

#[tokio::test]
async fn workspaces_are_off_without_roots() {
    let f = fixture();
    let off = Workspaces::new(&Config::default()).unwrap();
    let err = off
        .prepare(&ThreadId::generate(), &path(&f.repo))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("workspaces are off"), "{err}");
}

#[tokio::test]
async fn a_worktree_gets_its_own_branch_the_included_files_and_a_diff_of_its_changes() {
    let f = fixture();
    let thread = ThreadId::generate();
    let made = made_worktree(&f, &thread).await;
    let Workspace::Worktree {
        repo,
        path,
        branch,
        base_ref,
        base_commit,
    } = &made
    else {
        panic!("a worktree: {made:?}")
    };
    assert_eq!(repo, &f.repo);
    assert_eq!(branch, &format!("harness/{thread}"));
    assert_eq!(base_ref, "HEAD");
    assert_eq!(base_commit, git(&f.repo, &["rev-parse", "HEAD"]).trim());
    assert_eq!(git(path, &["branch", "--show-current"]).trim(), branch);
    assert_eq!(
        std::fs::read_to_string(path.join(".env")).unwrap(),
        "SECRET=1\n"
    );
    assert!(
        !path.join("build").exists(),
        "only what .worktreeinclude names"
    );

    // Nothing changed yet.
    let (dir, base) = f.workspaces.base_of(Some(&made)).await.unwrap();
    assert_eq!(diff::summary(&dir, &base).await.unwrap().files, []);

    std::fs::write(path.join("new.txt"), "one\ntwo\n").unwrap();
    std::fs::write(path.join("README.md"), "hello\nworld\n").unwrap();
    git(path, &["add", "README.md"]);
    let summary = diff::summary(&dir, &base).await.unwrap();
    let files: Vec<(&str, &str, Option<u64>)> = summary
        .files
        .iter()
        .map(|c| (c.path.as_str(), c.status.as_str(), c.additions))
        .collect();
    assert_eq!(
        files,
        [
            ("README.md", "modified", Some(1)),
            ("new.txt", "added", Some(2))
        ]
    );
    let patch = diff::patch(&dir, &base).await.unwrap();
    assert!(patch.contains("+++ b/new.txt"), "{patch}");
    assert!(patch.contains("+world"), "{patch}");
    assert!(!patch.contains(".env"), "ignored files stay out: {patch}");
    // The workspace's own index is as the thread left it: new.txt is still untracked.
    let status = git(path, &["status", "--porcelain"]);
    assert!(status.contains("?? new.txt"), "{status}");
    assert!(status.contains("M  README.md"), "{status}");
    // The main checkout is untouched.
    assert_eq!(git(&f.repo, &["status", "--porcelain"]), "");

    // A second thread: a worktree and branch of its own; the first one's branch is taken.
    let second = ThreadId::generate();
    let other = made_worktree(&f, &second).await;
    assert_ne!(other.path(), made.path());
    let taken = WorkspaceRequest {
        branch: Some(branch.clone()),
        ..worktree(&f.repo)
    };
    let err = f
        .workspaces
        .prepare(&ThreadId::generate(), &taken)
        .await
        .unwrap_err();
    assert!(
        matches!(err, WorkspaceError::BranchExists(ref b) if b == branch),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_removed_worktree_is_made_again_and_a_missing_folder_is_unavailable() {
    let f = fixture();
    let made = made_worktree(&f, &ThreadId::generate()).await;
    std::fs::remove_dir_all(made.path()).unwrap();
    f.workspaces.ready(&made).await.unwrap();
    assert!(made.path().join("README.md").is_file());

    // A folder swapped for a symlink that leads outside the roots is not used.
    let swapped = f.root.join("swapped");
    std::os::unix::fs::symlink(&f.outside, &swapped).unwrap();
    let err = f
        .workspaces
        .ready(&Workspace::Path { path: swapped })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no longer lies under"), "{err}");

    let gone = Workspace::Path {
        path: f.root.join("gone"),
    };
    let err = f.workspaces.ready(&gone).await.unwrap_err();
    assert!(matches!(err, WorkspaceError::Unavailable(_)), "{err:?}");
    let err = f.workspaces.base_of(None).await.unwrap_err();
    assert!(matches!(err, WorkspaceError::NoDiff(_)), "{err:?}");
}

#[tokio::test]
async fn an_unused_worktree_is_discarded_with_its_branch() {
    let f = fixture();
    let thread = ThreadId::generate();
    let made = made_worktree(&f, &thread).await;
    f.workspaces.discard(&made).await;
    assert!(!made.path().exists());
    let branches = git(&f.repo, &["branch", "--list", "harness/*"]);
    assert_eq!(branches, "");
}

/// The fixture's workspaces with `on_archive` set to `rule`.
fn with_rule(f: &Fixture, rule: OnArchive) -> Workspaces {
    Workspaces {
        on_archive: rule,
        ..f.workspaces.clone()
    }
}

fn branches(f: &Fixture) -> String {
    git(&f.repo, &["branch", "--list", "harness/*"])
}

#[tokio::test]
async fn archiving_removes_a_clean_worktree_and_its_branch_by_default() {
    let f = fixture();
    let made = made_worktree(&f, &ThreadId::generate()).await;
    let done = f.workspaces.archive(Some(&made)).await.unwrap();
    assert_eq!(
        done,
        Some(WorktreeDisposition {
            removed: true,
            kept_dirty: false,
            branch_deleted: true
        })
    );
    assert!(!made.path().exists());
    assert_eq!(branches(&f), "");
    // A path is the operator's: never touched.
    let plain = Workspace::Path {
        path: f.root.join("plain"),
    };
    assert_eq!(f.workspaces.archive(Some(&plain)).await.unwrap(), None);
    assert!(f.root.join("plain").is_dir());
}

#[tokio::test]
async fn remove_if_clean_keeps_uncommitted_work_and_committed_branches() {
    let f = fixture();
    let dirty = made_worktree(&f, &ThreadId::generate()).await;
    std::fs::write(dirty.path().join("draft.txt"), "unsaved\n").unwrap();
    let done = f.workspaces.archive(Some(&dirty)).await.unwrap().unwrap();
    assert!(
        done.kept_dirty && !done.removed && !done.branch_deleted,
        "{done:?}"
    );
    assert!(dirty.path().join("draft.txt").is_file());

    // Work committed on the branch: the folder goes, the branch with the commit stays.
    let committed = made_worktree(&f, &ThreadId::generate()).await;
    std::fs::write(committed.path().join("done.txt"), "kept\n").unwrap();
    git(committed.path(), &["add", "done.txt"]);
    git(committed.path(), &["commit", "--quiet", "-m", "work"]);
    let done = f
        .workspaces
        .archive(Some(&committed))
        .await
        .unwrap()
        .unwrap();
    assert!(done.removed && !done.branch_deleted, "{done:?}");
    assert!(!committed.path().exists());
    let Workspace::Worktree { branch, .. } = &committed else {
        panic!("a worktree")
    };
    assert!(branches(&f).contains(branch.as_str()));
}

/// #46: a worktree whose only changes were in ignored files was removed as clean. The files
/// copied in at creation, unchanged, are not work.
#[tokio::test]
async fn remove_if_clean_keeps_work_in_ignored_files() {
    let f = fixture();
    let built = made_worktree(&f, &ThreadId::generate()).await;
    assert!(built.path().join(".env").is_file(), "copied in");
    std::fs::create_dir_all(built.path().join("build")).unwrap();
    std::fs::write(built.path().join("build/result.bin"), "hours of work").unwrap();
    let done = f.workspaces.archive(Some(&built)).await.unwrap().unwrap();
    assert!(done.kept_dirty && !done.removed, "{done:?}");
    assert!(built.path().join("build/result.bin").is_file());

    let edited = made_worktree(&f, &ThreadId::generate()).await;
    std::fs::write(edited.path().join(".env"), "SECRET=2\n").unwrap();
    let done = f.workspaces.archive(Some(&edited)).await.unwrap().unwrap();
    assert!(done.kept_dirty && !done.removed, "{done:?}");
    assert_eq!(
        std::fs::read_to_string(edited.path().join(".env")).unwrap(),
        "SECRET=2\n"
    );
}

#[tokio::test]
async fn remove_takes_everything_and_keep_nothing() {
    let f = fixture();
    let remove = with_rule(&f, OnArchive::Remove);
    let dirty = made_worktree(&f, &ThreadId::generate()).await;
    std::fs::write(dirty.path().join("draft.txt"), "unsaved\n").unwrap();
    let done = remove.archive(Some(&dirty)).await.unwrap().unwrap();
    assert!(done.removed && done.branch_deleted, "{done:?}");
    assert!(!dirty.path().exists());

    let keep = with_rule(&f, OnArchive::Keep);
    let kept = made_worktree(&f, &ThreadId::generate()).await;
    let done = keep.archive(Some(&kept)).await.unwrap().unwrap();
    assert!(!done.removed && !done.branch_deleted, "{done:?}");
    assert!(kept.path().is_dir());
    assert_eq!(branches(&f).lines().count(), 1);
}

#[tokio::test]
async fn prune_forgets_worktrees_removed_by_hand() {
    let f = fixture();
    let made = made_worktree(&f, &ThreadId::generate()).await;
    std::fs::remove_dir_all(made.path()).unwrap();
    let listed = |f: &Fixture| git(&f.repo, &["worktree", "list", "--porcelain"]);
    assert!(listed(&f).contains("prunable"), "{}", listed(&f));
    f.workspaces.prune([f.repo.as_path()]).await;
    assert!(!listed(&f).contains("prunable"), "{}", listed(&f));
}

/// The worktrees of the fixture's repository, as `git worktree list` shows them.
fn listed_worktrees(f: &Fixture) -> String {
    git(&f.repo, &["worktree", "list", "--porcelain"])
}

#[tokio::test]
async fn a_parked_worktree_is_the_next_threads_on_its_default_branch() {
    let f = fixture();
    let spare = ThreadId::generate();
    let (path, commit) = f.workspaces.park(&spare, &f.repo).await.expect("parked");
    assert_eq!(commit, git(&f.repo, &["rev-parse", "HEAD"]).trim());
    assert!(path.join(".env").is_file(), "the included files are in");
    let branch = format!("harness/{spare}");
    // On its branch from the start: the CLI reads the git status when it starts.
    assert_eq!(
        git(&path, &["symbolic-ref", "--short", "HEAD"]).trim(),
        branch
    );

    let Ok(Plan::Worktree(plan)) = f.workspaces.plan(&worktree(&f.repo)).await else {
        panic!("a worktree plan");
    };
    assert_eq!(plan.commit, commit);
    assert!(plan.on_default_branch());
    let taken = f.workspaces.adopt(&spare, &plan, path.clone());
    let Workspace::Worktree {
        path: taken_path,
        branch: taken_branch,
        base_commit,
        ..
    } = taken
    else {
        panic!("adopted: {taken:?}");
    };
    assert_eq!(
        (taken_path, taken_branch, base_commit),
        (path, branch, commit)
    );

    let mut named = worktree(&f.repo);
    named.branch = Some("fix/login".into());
    let Ok(Plan::Worktree(plan)) = f.workspaces.plan(&named).await else {
        panic!("a worktree plan");
    };
    assert!(
        !plan.on_default_branch(),
        "a branch of its own: no parked worktree"
    );
}

#[tokio::test]
async fn a_parked_worktree_is_removed_with_its_record_and_branch_and_orphans_only_when_untouched() {
    let f = fixture();
    let spare = ThreadId::generate();
    let (parked, _) = f.workspaces.park(&spare, &f.repo).await.expect("parked");
    f.workspaces.remove_parked(&parked).await;
    assert!(!parked.exists());
    assert!(
        !listed_worktrees(&f).contains(spare.as_str()),
        "record pruned"
    );
    assert!(
        !git(&f.repo, &["branch", "--list"]).contains(spare.as_str()),
        "branch deleted"
    );

    // Left behind by a daemon that died: a parked worktree; a thread's worktree; a parked one
    // with a change in it, and one on another branch (never removed: they may hold work).
    let park = || async {
        let (path, _) = f
            .workspaces
            .park(&ThreadId::generate(), &f.repo)
            .await
            .expect("parked");
        path
    };
    let orphan = park().await;
    let owned = park().await;
    let changed = park().await;
    std::fs::write(changed.join("README.md"), "changed\n").expect("test set-up");
    let switched = park().await;
    git(&switched, &["switch", "--quiet", "-c", "elsewhere"]);
    let later = std::time::SystemTime::now() + std::time::Duration::from_secs(1);
    f.workspaces
        .remove_orphans(std::slice::from_ref(&owned), later)
        .await;
    assert!(!orphan.exists(), "the untouched orphan goes");
    for kept in [&owned, &changed, &switched] {
        assert!(kept.is_dir(), "{kept:?} stays");
    }

    // A spare parked after the daemon started is its own, not an orphan.
    let fresh = park().await;
    let before = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    f.workspaces.remove_orphans(&[], before).await;
    assert!(fresh.is_dir());
}

/// A script at `path` that leaves `marker` when run (and passes its input through).
fn tripwire(path: &Path, marker: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(
        path,
        format!("#!/bin/sh\ntouch '{}'\ncat\n", marker.display()),
    )
    .expect("test set-up");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("test set-up");
}

/// Git never runs what a repository says (#46): a repository whose config sets a file-system
/// monitor, an external diff, a textconv, a filter and a diff driver command has none of them
/// run as the daemon, by the diff, its summary, or archiving.
#[tokio::test]
async fn the_daemons_git_runs_nothing_a_repository_configures() {
    let f = fixture();
    let thread = ThreadId::from_string("thr_evil");
    let workspace = made_worktree(&f, &thread).await;
    let Workspace::Worktree {
        path, base_commit, ..
    } = &workspace
    else {
        panic!("a worktree");
    };
    let traps = f.root.join("traps");
    std::fs::create_dir_all(&traps).expect("test set-up");
    let mut markers = Vec::new();
    for key in [
        "core.fsmonitor",
        "diff.external",
        "diff.evil.textconv",
        "diff.evil.command",
        "filter.evil.clean",
        "filter.evil.smudge",
        "filter.evil.process",
    ] {
        let marker = traps.join(format!("{key}.ran"));
        let script = traps.join(format!("{key}.sh"));
        tripwire(&script, &marker);
        git(&f.repo, &["config", key, &script.display().to_string()]);
        markers.push(marker);
    }
    std::fs::write(path.join(".gitattributes"), "* filter=evil diff=evil\n").expect("edit");
    std::fs::write(path.join("README.md"), "changed\n").expect("edit");
    std::fs::write(path.join("new.txt"), "new\n").expect("edit");

    f.workspaces.ready(&workspace).await.expect("ready");
    let patch = diff::patch(path, base_commit).await.expect("the patch");
    assert!(patch.contains("+changed"), "{patch}");
    let summary = diff::summary(path, base_commit).await.expect("the summary");
    assert_eq!(summary.files.len(), 3, "{summary:?}");
    with_rule(&f, OnArchive::Remove)
        .archive(Some(&workspace))
        .await
        .expect("archived");
    let ran: Vec<&PathBuf> = markers.iter().filter(|m| m.exists()).collect();
    assert!(ran.is_empty(), "the daemon's git ran {ran:?}");
}

/// A worktree whose `.git` was swapped for another git dir (`gitdir: ./evil`, with a config of
/// its own) is refused before any git runs in it.
#[tokio::test]
async fn a_worktree_with_a_swapped_git_dir_is_refused() {
    let f = fixture();
    let thread = ThreadId::from_string("thr_swapped");
    let workspace = made_worktree(&f, &thread).await;
    let path = workspace.path().to_path_buf();
    f.workspaces
        .ready(&workspace)
        .await
        .expect("its own git dir");
    // A git dir of the thread's making, whose config runs a program.
    let evil = path.join("evil");
    git(&path, &["init", "--quiet", "--bare", "evil"]);
    let marker = f.root.join("fsmonitor.ran");
    let script = f.root.join("fsmonitor.sh");
    tripwire(&script, &marker);
    git(
        &evil,
        &["config", "core.fsmonitor", &script.display().to_string()],
    );
    std::fs::write(path.join(".git"), "gitdir: ./evil\n").expect("swap");

    let refused = f.workspaces.ready(&workspace).await.expect_err("refused");
    assert!(
        refused.to_string().contains("not its repository's"),
        "{refused}"
    );
    let archived = with_rule(&f, OnArchive::Remove)
        .archive(Some(&workspace))
        .await;
    assert!(archived.is_err(), "{archived:?}");
    assert!(!marker.exists(), "the swapped git dir's program ran");
}

/// `@`, a full ref and an overlong name are refused as branch names (#46: the first two were
/// taken, the last was a 500).
#[tokio::test]
async fn odd_branch_names_are_refused() {
    let f = fixture();
    for branch in [
        "@".to_owned(),
        "refs/heads/main".to_owned(),
        "b".repeat(300),
    ] {
        let request = WorkspaceRequest {
            branch: Some(branch.clone()),
            ..worktree(&f.repo)
        };
        let refused = refusal(&f, request).await;
        assert!(refused.contains("branch"), "{branch}: {refused}");
    }
}

/// A thread's own folder (where threads without a workspace work) is ready as a workspace too:
/// a goal's grader works there. A folder beside it, outside the roots, is not.
#[tokio::test]
async fn a_threads_own_folder_is_a_workspace_a_grader_may_share() {
    let f = fixture();
    let threads = f.workspaces.threads_dir.clone();
    let own = threads.join("thr_1");
    std::fs::create_dir_all(&own).unwrap();
    f.workspaces
        .ready(&Workspace::Path { path: own })
        .await
        .expect("a thread's folder");
    let beside = threads.parent().unwrap().join("elsewhere");
    std::fs::create_dir_all(&beside).unwrap();
    let err = f
        .workspaces
        .ready(&Workspace::Path { path: beside })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no longer lies under"), "{err}");
}
