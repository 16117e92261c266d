//! The table against the router it describes, and the path matching the guard and the routing
//! rely on.

use std::collections::BTreeSet;

use super::*;
use crate::config::Config;
use crate::server::Daemon;

/// Every routed operation has a row, and every row is routed: the router's own document (the
/// one `routes!` builds with each handler) against [`OPERATIONS`].
#[tokio::test]
async fn the_table_and_the_router_name_the_same_operations() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().to_path_buf(),
        db: Some(":memory:".into()),
        ..Default::default()
    };
    config.claude.bin = "/nonexistent/claude".into();
    let daemon = Daemon::build(config, Vec::new()).await.unwrap();
    let (_, doc) = super::super::documented_routes(&daemon.api_state()).split_for_parts();
    let mut routed = BTreeSet::new();
    for (path, item) in &doc.paths.paths {
        let item = serde_json::to_value(item).unwrap();
        for method in ["get", "post", "put", "patch", "delete"] {
            if item.get(method).is_some() {
                routed.insert((method.to_uppercase(), path.replace("{*", "{")));
            }
        }
    }
    let declared: BTreeSet<(String, String)> = OPERATIONS
        .iter()
        // The served document names axum's catch-all `{*path}` as `{path}`: both, so.
        .map(|op| (op.verb.method().to_string(), op.path.replace("{*", "{")))
        .collect();
    let undeclared: Vec<_> = routed.difference(&declared).collect();
    let unrouted: Vec<_> = declared.difference(&routed).collect();
    assert!(undeclared.is_empty(), "routed, with no row: {undeclared:?}");
    assert!(unrouted.is_empty(), "rows with no route: {unrouted:?}");
    assert_eq!(declared.len(), OPERATIONS.len(), "a row twice");
}

#[test]
fn a_path_matches_its_template_segment_by_segment() {
    let op = |method: Method, path: &str| matching(&method, path).map(|op| op.path);
    assert_eq!(
        op(Method::POST, "/api/threads/thr_1/messages"),
        Some("/api/threads/{id}/messages")
    );
    assert_eq!(op(Method::POST, "/api/threads//messages"), None);
    assert_eq!(op(Method::POST, "/api/threads/a/b/messages"), None);
    assert_eq!(
        op(Method::GET, "/api/threads/t/files/a/b.txt"),
        Some("/api/threads/{id}/files/{*path}")
    );
    assert_eq!(op(Method::GET, "/api/threads/t/files/"), None);
    assert_eq!(op(Method::GET, "/"), Some("/"));
    assert_eq!(op(Method::GET, "/healthz"), Some("/healthz"));
    assert_eq!(op(Method::PUT, "/api/threads"), None);
}

#[test]
fn the_thread_is_the_id_of_a_path_under_threads() {
    let id = |p: &str| thread_of(p);
    assert_eq!(id("/threads/thr_1/messages").as_deref(), Some("thr_1"));
    assert_eq!(
        id("/api/threads/thr_2/permissions/r").as_deref(),
        Some("thr_2")
    );
    assert_eq!(id("/api/threads/thr_3").as_deref(), Some("thr_3"));
    assert_eq!(id("/threads/"), None);
    assert_eq!(id("/prewarm"), None);
    // A session's path names its thread, with or without `/v1`.
    assert_eq!(
        id("/v1/sessions/sesn_ab12/events").as_deref(),
        Some("thr_ab12")
    );
    assert_eq!(
        id("/sessions/sesn_ab12/archive").as_deref(),
        Some("thr_ab12")
    );
    assert_eq!(id("/v1/sessions/nonsense/events"), None);
    assert_eq!(id("/api/schedules/s_1"), None);
}

#[test]
fn what_needs_the_threads_process_runs_on_its_owner() {
    let owner: BTreeSet<String> = OPERATIONS
        .iter()
        .filter(|op| op.runs == Runs::Owner)
        .map(|op| format!("{} {}", op.verb.method(), op.path))
        .collect();
    for expected in [
        "POST /api/threads/{id}/messages",
        "POST /api/threads/{id}/interrupt",
        "POST /api/threads/{id}/permissions/{request_id}",
        "PATCH /api/threads/{id}",
        "DELETE /api/threads/{id}",
    ] {
        assert!(owner.contains(expected), "{expected}: {owner:?}");
    }
    // Only a thread's own routes (a session's is its thread's) can be placed by the thread in
    // their path.
    for op in OPERATIONS.iter().filter(|op| op.runs == Runs::Owner) {
        let own = op.path.starts_with("/api/threads/{id}")
            || op.path.starts_with("/v1/sessions/{session_id}");
        assert!(own, "{}", op.path);
    }
}

#[test]
fn what_names_its_thread_outside_its_path_runs_on_that_threads_owner() {
    let named: BTreeSet<String> = OPERATIONS
        .iter()
        .filter(|op| op.runs == Runs::OwnerOfNamed)
        .map(|op| format!("{} {}", op.verb.method(), op.path))
        .collect();
    let expected = ["POST /api/prewarm", "POST /api/schedules/{id}/run"];
    assert_eq!(named, expected.iter().map(|s| s.to_string()).collect());
    // Such a request cannot be placed by its path: its handler places it.
    for op in OPERATIONS.iter().filter(|op| op.runs == Runs::OwnerOfNamed) {
        assert_eq!(thread_of(op.path), None, "{}", op.path);
    }
}
