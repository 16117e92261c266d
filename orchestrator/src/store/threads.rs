//! Threads: creating, looking up and listing them, the CLI session each one resumes, and how
//! deep a delegated child sits. Messages of a thread are in `messages.rs`.

use plugin_contract::{CliSessionId, ThreadId};

use super::{on_db, Db, NewThread, Store, StoreError, ThreadQueries, ThreadRow};

impl Store {
    /// Creates a thread, with `new.id` or a fresh [`ThreadId`]. A `parent_id` must name an
    /// existing thread ([`StoreError::ThreadNotFound`] otherwise).
    pub async fn create_thread(&self, new: NewThread) -> Result<ThreadRow, StoreError> {
        let _timer = self.metrics.time("create_thread");
        if let Some(parent) = &new.parent_id {
            // A clear error first; a parent deleted between this check and the insert fails the
            // insert on its foreign key (`threads.parent_id`).
            self.require_thread(parent).await?;
        }
        let id = new.id.clone().unwrap_or_else(ThreadId::generate);
        let row = on_db!(self, db => db.create_thread(&id, &new).await)?;
        tracing::debug!(thread_id = %id, parent_id = ?new.parent_id, "Created a thread.");
        Ok(row)
    }

    /// A new thread that forks `parent`: its model, `outputSchema`, budget limit (not what it
    /// spent) and finished messages (new ids, in order, each reply still answering its
    /// question; their usage stays the parent's), and the parent's CLI session to fork on its
    /// first turn. One transaction.
    pub async fn fork_thread(
        &self,
        parent: &ThreadId,
        title: Option<String>,
    ) -> Result<ThreadRow, StoreError> {
        let _timer = self.metrics.time("fork_thread");
        let source = self.require_thread(parent).await?;
        let id = ThreadId::generate();
        let title = title.unwrap_or_else(|| format!("fork of {parent}"));
        let row = on_db!(self, db => db.fork_thread(&id, &source, &title).await)?;
        tracing::debug!(thread_id = %id, parent_id = %parent, "Forked a thread.");
        Ok(row)
    }

    /// The thread, or `None` when we never created it.
    pub async fn get_thread(&self, id: &ThreadId) -> Result<Option<ThreadRow>, StoreError> {
        let _timer = self.metrics.time("get_thread");
        on_db!(self, db => db.get_thread(id).await)
    }

    /// The thread, or [`StoreError::ThreadNotFound`].
    pub async fn require_thread(&self, id: &ThreadId) -> Result<ThreadRow, StoreError> {
        self.get_thread(id)
            .await?
            .ok_or_else(|| StoreError::ThreadNotFound(id.clone()))
    }

    /// Every thread, newest first (creation order; ties broken by insertion order).
    pub async fn list_threads(&self) -> Result<Vec<ThreadRow>, StoreError> {
        on_db!(self, db => db.list_threads().await)
    }

    /// Records the CLI session the thread should `--resume` next (or forgets it with `None`, after
    /// the CLI could no longer load it). [`StoreError::ThreadNotFound`] for an unknown thread;
    /// [`StoreError::LeaseLost`] on a node without the thread's lease (`leases.rs`).
    pub async fn set_cli_session(
        &self,
        id: &ThreadId,
        session: Option<&CliSessionId>,
    ) -> Result<(), StoreError> {
        let _timer = self.metrics.time("set_cli_session");
        let fence = self.fence(id, None)?;
        on_db!(self, db => db.set_cli_session(fence.as_ref(), id, session).await)
    }

    /// Archives the thread (once: again changes nothing) and returns it. [`StoreError::LeaseLost`]
    /// on a node without the thread's lease.
    pub async fn archive_thread(&self, id: &ThreadId) -> Result<ThreadRow, StoreError> {
        let _timer = self.metrics.time("archive_thread");
        let fence = self.fence(id, None)?;
        on_db!(self, db => db.archive_thread(fence.as_ref(), id).await)
    }

    /// How many ancestors the thread has through `parent_id`: 0 for a root thread, 1 for its
    /// child. Delegation uses it to bound nesting. [`StoreError::ThreadNotFound`] for an unknown
    /// thread.
    pub async fn thread_depth(&self, id: &ThreadId) -> Result<u32, StoreError> {
        let depth = on_db!(self, db => db.thread_depth(id).await)?
            .ok_or_else(|| StoreError::ThreadNotFound(id.clone()))?;
        u32::try_from(depth)
            .map_err(|_| StoreError::Corrupt(format!("thread {id} has depth {depth}")))
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use super::*;

    /// Every thread, archived or not, on one page.
    fn every() -> crate::store::ThreadQuery<'static> {
        crate::store::ThreadQuery {
            archived: crate::store::ArchiveFilter::Any,
            limit: 1_000,
            ..Default::default()
        }
    }

    store_tests! {
        async fn summaries_show_last_activity_and_running_turns(store: sqlite_memory) {
            let idle = store.create_thread(NewThread::default()).await.unwrap();
            let busy = store.create_thread(NewThread::default()).await.unwrap();
            store
                .insert_user_message(
                    crate::store::NewUserMessage {
                        thread_id: busy.id.clone(),
                        content: "hi".into(),
                        client_message_id: None,
                        model: None,
                        origin: crate::store::Origin::User,
                        caller: None,
                    },
                    None,
                )
                .await
                .unwrap();
            let summaries = store.thread_page(&every()).await.unwrap();
            let ids: Vec<_> = summaries.iter().map(|s| s.thread.id.clone()).collect();
            assert_eq!(ids, [busy.id.clone(), idle.id.clone()], "newest first");
            assert!(summaries[0].running, "a pending message is a running turn");
            assert!(summaries[0].last_activity_at > busy.updated_at);
            assert!(!summaries[1].running);
            assert_eq!(summaries[1].last_activity_at, idle.updated_at);
        }
    }

    store_tests! {
        async fn create_get_and_list_threads(store: sqlite_memory) {
            let worktree = crate::store::Workspace::Worktree {
                repo: "/srv/repos/app".into(),
                path: "/data/worktrees/thr_1".into(),
                branch: "harness/thr_1".into(),
                base_ref: "main".into(),
                base_commit: "0123abcd".into(),
            };
            let first = store
                .create_thread(NewThread {
                    id: None,
                    title: Some("first".into()),
                    model: Some("sonnet".into()),
                    parent_id: None,
                    output_schema: Some(serde_json::json!({"type": "object"})),
                    max_budget_usd: Some(1.5),
                    workspace: Some(worktree.clone()),
                    profile: Some("reviewer".into()),
                    on_interrupt: crate::store::OnInterrupt::Retry,
                    tenant: Some("acme".into()),
                })
                .await
                .unwrap();
            assert_eq!(first.max_budget_usd, Some(1.5));
            assert_eq!(first.workspace.as_deref(), Some(&worktree));
            assert_eq!(
                first.output_schema,
                Some(serde_json::json!({"type": "object"}))
            );
            let second = store.create_thread(NewThread::default()).await.unwrap();

            assert!(first.id.as_str().starts_with("thr_"));
            assert_ne!(first.id, second.id);
            assert_eq!(first.title.as_deref(), Some("first"));
            assert_eq!(first.model.as_deref(), Some("sonnet"));
            assert_eq!(first.cli_session_id, None);
            assert_eq!(first.created_at, first.updated_at);

            let got = store.get_thread(&first.id).await.unwrap().unwrap();
            assert_eq!(got.workspace.as_deref(), Some(&worktree), "read back whole");
            assert_eq!(got.profile.as_deref(), Some("reviewer"));
            assert_eq!(got.on_interrupt, crate::store::OnInterrupt::Retry);
            assert_eq!(got.tenant.as_deref(), Some("acme"));
            assert_eq!(second.tenant, None, "the operator's");
            assert_eq!(second.on_interrupt, crate::store::OnInterrupt::Mark);
            assert_eq!(second.profile, None);
            assert_eq!(second.workspace, None);
            assert_eq!(got.id, first.id);
            assert_eq!(got.title.as_deref(), Some("first"));
            assert_eq!(got.created_at, first.created_at);

            let unknown = ThreadId::from_string("thr_nope");
            assert!(store.get_thread(&unknown).await.unwrap().is_none());
            match store.require_thread(&unknown).await {
                Err(StoreError::ThreadNotFound(id)) => assert_eq!(id, unknown),
                other => panic!("expected ThreadNotFound, got {other:?}"),
            }

            let listed: Vec<ThreadId> = store
                .list_threads()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect();
            assert_eq!(listed, [second.id, first.id], "newest first");
        }
    }

    store_tests! {
        async fn list_orders_by_creation_time_not_insertion(store: sqlite_memory) {
            let a = store.create_thread(NewThread::default()).await.unwrap();
            let b = store.create_thread(NewThread::default()).await.unwrap();
            // Pretend `a` was created after `b`.
            store
                .test_execute(&format!(
                    "UPDATE threads SET created_at = '2999-01-01T00:00:00.000000Z' WHERE id = '{}'",
                    a.id
                ))
                .await;
            let listed: Vec<ThreadId> = store
                .list_threads()
                .await
                .unwrap()
                .into_iter()
                .map(|t| t.id)
                .collect();
            assert_eq!(listed, [a.id, b.id]);
        }
    }

    store_tests! {
        async fn parents_and_depth(store: sqlite_memory) {
            let root = store.create_thread(NewThread::default()).await.unwrap();
            let child = store
                .create_thread(NewThread {
                    parent_id: Some(root.id.clone()),
                    ..Default::default()
                })
                .await
                .unwrap();
            let grandchild = store
                .create_thread(NewThread {
                    parent_id: Some(child.id.clone()),
                    ..Default::default()
                })
                .await
                .unwrap();

            assert_eq!(child.parent_id.as_ref(), Some(&root.id));
            assert_eq!(grandchild.parent_id.as_ref(), Some(&child.id));
            assert_eq!(store.thread_depth(&root.id).await.unwrap(), 0);
            assert_eq!(store.thread_depth(&child.id).await.unwrap(), 1);
            assert_eq!(store.thread_depth(&grandchild.id).await.unwrap(), 2);

            let unknown = ThreadId::from_string("thr_nope");
            assert!(matches!(
                store.thread_depth(&unknown).await,
                Err(StoreError::ThreadNotFound(id)) if id == unknown
            ));
        }
    }

    store_tests! {
        async fn unknown_parent_is_thread_not_found_and_creates_nothing(store: sqlite_memory) {
            let unknown = ThreadId::from_string("thr_missing");
            let err = store
                .create_thread(NewThread {
                    parent_id: Some(unknown.clone()),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert!(
                matches!(err, StoreError::ThreadNotFound(ref id) if *id == unknown),
                "{err:?}"
            );
            assert!(store.list_threads().await.unwrap().is_empty());
        }
    }

    store_tests! {
        async fn set_and_clear_cli_session(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            let session = CliSessionId::from_string("sess-1");

            store
                .set_cli_session(&thread.id, Some(&session))
                .await
                .unwrap();
            let got = store.require_thread(&thread.id).await.unwrap();
            assert_eq!(got.cli_session_id, Some(session));
            assert!(got.updated_at >= thread.updated_at);

            store.set_cli_session(&thread.id, None).await.unwrap();
            assert_eq!(
                store
                    .require_thread(&thread.id)
                    .await
                    .unwrap()
                    .cli_session_id,
                None
            );

            let unknown = ThreadId::from_string("thr_nope");
            assert!(matches!(
                store.set_cli_session(&unknown, None).await,
                Err(StoreError::ThreadNotFound(_))
            ));
        }
    }

    store_tests! {
        async fn bad_timestamp_is_corrupt_not_a_panic(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            store
                .test_execute(&format!(
                    "UPDATE threads SET updated_at = 'soon' WHERE id = '{}'",
                    thread.id
                ))
                .await;
            assert!(matches!(
                store.get_thread(&thread.id).await,
                Err(StoreError::Corrupt(_))
            ));
        }
    }

    store_tests! {
        async fn a_thread_is_archived_once_and_an_unknown_one_is_not_found(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap();
            assert_eq!(thread.archived_at, None);
            let archived = store.archive_thread(&thread.id).await.unwrap();
            let at = archived.archived_at.expect("archived");
            assert!(at >= thread.created_at);
            let again = store.archive_thread(&thread.id).await.unwrap();
            assert_eq!(again.archived_at, Some(at), "the first time stays");
            let got = store.require_thread(&thread.id).await.unwrap();
            assert_eq!(got.archived_at, Some(at));
            let listed = store.thread_page(&every()).await.unwrap();
            assert_eq!(listed[0].thread.archived_at, Some(at));
            let unknown = ThreadId::from_string("thr_nope");
            assert!(matches!(
                store.archive_thread(&unknown).await,
                Err(StoreError::ThreadNotFound(_))
            ));
        }
    }

    store_tests! {
        async fn a_fork_copies_finished_messages_and_settings(store: sqlite_memory) {
            let schema = serde_json::json!({"type": "object"});
            let parent = store
                .create_thread(NewThread {
                    model: Some("sonnet".into()),
                    output_schema: Some(schema.clone()),
                    max_budget_usd: Some(2.0),
                    workspace: Some(crate::store::Workspace::Path {
                        path: "/srv/shared".into(),
                    }),
                    profile: Some("reviewer".into()),
                    ..Default::default()
                })
                .await
                .unwrap();
            let session = CliSessionId::from_string("sess-parent");
            store
                .set_cli_session(&parent.id, Some(&session))
                .await
                .unwrap();
            let send = |content: &str| crate::store::NewUserMessage {
                thread_id: parent.id.clone(),
                content: content.into(),
                client_message_id: None,
                model: None,
                origin: crate::store::Origin::User,
                caller: None,
            };
            let answered = store.insert_user_message(send("q1"), None).await.unwrap();
            let answered = answered.message().clone();
            let output = serde_json::json!({"a": 1});
            store
                .complete_turn(answered.turn_key(), "a1", Some("sonnet"), Some(&output), None, None, None)
                .await
                .unwrap();
            let failed = store.insert_user_message(send("q2"), None).await.unwrap();
            store
                .fail_turn(
                    failed.message().turn_key(),
                    crate::store::MessageStatus::Error,
                    "boom",
                    None,
                    None,
                    None,
                )
                .await
                .unwrap();
            store.insert_user_message(send("q3"), None).await.unwrap();

            let fork = store.fork_thread(&parent.id, None).await.unwrap();
            assert_ne!(fork.id, parent.id);
            assert_eq!(fork.parent_id.as_ref(), Some(&parent.id));
            assert_eq!(fork.title, Some(format!("fork of {}", parent.id)));
            assert_eq!(fork.model.as_deref(), Some("sonnet"));
            assert_eq!(fork.output_schema, Some(schema));
            assert_eq!(fork.max_budget_usd, Some(2.0));
            assert_eq!(fork.workspace, parent.workspace, "a path workspace goes with the fork");
            assert_eq!(fork.profile.as_deref(), Some("reviewer"));
            assert_eq!(fork.forked_session, Some(session));
            assert_eq!(fork.cli_session_id, None);
            let got = store.require_thread(&fork.id).await.unwrap();
            assert_eq!(got.forked_session, fork.forked_session);

            // Only the finished turn, with new ids, the reply answering the copied question.
            let copied = store.list_messages(&fork.id).await.unwrap();
            let shape: Vec<_> = copied
                .iter()
                .map(|m| (m.seq, m.role.as_str(), m.content.as_str()))
                .collect();
            assert_eq!(shape, [(1, "user", "q1"), (2, "assistant", "a1")]);
            assert_ne!(copied[0].id, answered.id);
            assert_eq!(copied[1].reply_to.as_ref(), Some(&copied[0].id));
            assert_eq!(copied[1].structured_output, Some(output));
            assert_eq!(copied[1].model.as_deref(), Some("sonnet"));
            assert_eq!(store.list_messages(&parent.id).await.unwrap().len(), 4);

            let named = store
                .fork_thread(&parent.id, Some("mine".into()))
                .await
                .unwrap();
            assert_eq!(named.title.as_deref(), Some("mine"));
            assert!(matches!(
                store.fork_thread(&ThreadId::from_string("thr_nope"), None).await,
                Err(StoreError::ThreadNotFound(_))
            ));
        }
    }
}
