use super::super::tests::{store_tests, turn_of};
use super::super::*;
use std::time::Duration;

const TTL: Duration = Duration::from_secs(60);

async fn thread(store: &Store) -> ThreadId {
    store.create_thread(NewThread::default()).await.unwrap().id
}

store_tests! {
    /// A free lease goes to the first taker at epoch 1; a live one is refused to a peer and
    /// kept (same epoch) by its owner; an expired one goes to the peer at epoch + 1.
    async fn acquire_takes_free_keeps_own_and_takes_expired(store: sqlite_memory) {
        let t = thread(&store).await;
        let a = store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap();
        assert_eq!(a, Some(Fence { owner: "node_a".into(), epoch: 1 }));
        assert_eq!(store.acquire_lease(&t, "node_b", "http://b", TTL).await.unwrap(), None);
        let again = store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap();
        assert_eq!(again.map(|f| f.epoch), Some(1));
        let lease = store.lease(&t).await.unwrap().unwrap();
        assert_eq!((lease.owner.as_str(), lease.owner_url.as_str()), ("node_a", "http://a"));
        assert!(lease.is_live(chrono::Utc::now()));

        store.test_execute(&format!(
            "UPDATE leases SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE thread_id = '{t}'"
        )).await;
        let b = store.acquire_lease(&t, "node_b", "http://b", TTL).await.unwrap();
        assert_eq!(b, Some(Fence { owner: "node_b".into(), epoch: 2 }));
        assert_eq!(store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap(), None);
        assert_eq!(store.lease(&t).await.unwrap().unwrap().owner_url, "http://b");
    }

    /// An unknown thread gets no lease row.
    async fn acquire_of_an_unknown_thread_is_not_found(store: sqlite_memory) {
        let err = store
            .acquire_lease(&ThreadId::from_string("thr_nope"), "node_a", "http://a", TTL)
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::ThreadNotFound(_)), "{err:?}");
        assert_eq!(store.lease(&ThreadId::from_string("thr_nope")).await.unwrap(), None);
    }

    /// The heartbeat renews only the node's own leases and names them; a release frees them
    /// for a peer at once.
    async fn renew_names_held_leases_and_release_frees_them(store: sqlite_memory) {
        let (t1, t2, t3) = (thread(&store).await, thread(&store).await, thread(&store).await);
        store.acquire_lease(&t1, "node_a", "http://a", TTL).await.unwrap().unwrap();
        store.acquire_lease(&t2, "node_a", "http://a", TTL).await.unwrap().unwrap();
        store.acquire_lease(&t3, "node_b", "http://b", TTL).await.unwrap().unwrap();
        let mut held = store.renew_leases("node_a", TTL).await.unwrap();
        held.sort_by(|x, y| x.as_str().cmp(y.as_str()));
        let mut want = vec![t1.clone(), t2.clone()];
        want.sort_by(|x, y| x.as_str().cmp(y.as_str()));
        assert_eq!(held, want);

        assert_eq!(store.release_leases("node_a").await.unwrap(), 2);
        let b = store.acquire_lease(&t1, "node_b", "http://b", TTL).await.unwrap();
        assert_eq!(b.map(|f| f.epoch), Some(2));
        assert_eq!(store.renew_leases("node_a", TTL).await.unwrap(), vec![t2.clone()]);
    }

    /// Fenced writes succeed while the fence holds and fail with `LeaseLost` once a peer took
    /// the lease over, writing nothing: the old owner that wakes up cannot touch the thread.
    async fn fenced_writes_fail_after_a_takeover(store: sqlite_memory) {
        let t = thread(&store).await;
        let a = store.acquire_lease(&t, "node_a", "http://a", TTL).await.unwrap().unwrap();
        let new = |content: &str| NewUserMessage {
            thread_id: t.clone(),
            content: content.into(),
            client_message_id: None,
            model: None,
            origin: crate::store::Origin::User,
            caller: None,
        };
        let Inserted::New(first) = store.insert_user_message(new("one"), Some(&a)).await.unwrap() else {
            panic!("a new message");
        };
        store
            .complete_turn(first.turn_key(), "reply", None, None, None, None, Some(&a))
            .await
            .unwrap();
        let Inserted::New(second) = store.insert_user_message(new("two"), Some(&a)).await.unwrap() else {
            panic!("a new message");
        };

        store.test_execute(&format!(
            "UPDATE leases SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE thread_id = '{t}'"
        )).await;
        let b = store.acquire_lease(&t, "node_b", "http://b", TTL).await.unwrap().unwrap();
        assert_eq!(b.epoch, 2);
        // The takeover ended the old owner's unfinished turn, whatever the clocks say.
        let status = |id: &MessageId| {
            let id = id.clone();
            let store = store.clone();
            async move { store.get_message(&id).await.unwrap().unwrap() }
        };
        let ended = status(&second.id).await;
        assert_eq!(ended.status, MessageStatus::Interrupted);
        assert_eq!(ended.error.as_deref(), Some(TAKEOVER_REASON));

        let err = store
            .complete_turn(second.turn_key(), "stale", None, None, None, None, Some(&a))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err:?}");
        let err = store
            .fail_turn(second.turn_key(), MessageStatus::Error, "stale", None, None, Some(&a))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err:?}");
        let err = store.insert_user_message(new("three"), Some(&a)).await.unwrap_err();
        assert!(matches!(err, StoreError::LeaseLost(_)), "{err:?}");
        let messages = store.list_messages(&t).await.unwrap();
        let seen: Vec<_> = messages.iter().map(|m| (m.content.as_str(), m.status)).collect();
        assert_eq!(
            seen,
            [("one", MessageStatus::Done), ("reply", MessageStatus::Done), ("two", MessageStatus::Interrupted)]
        );
        // The takeover's ending has its outcome, and the terminal event written with it.
        let outcomes = store.outcomes_of(&second.id).await.unwrap();
        assert_eq!(outcomes.len(), 1, "{outcomes:?}");
        assert_eq!((outcomes[0].cause, outcomes[0].status), (EndCause::Takeover, MessageStatus::Interrupted));
        let events = store.events_after(&t, 0, 100).await.unwrap();
        let terminal: Vec<_> = events.iter().filter(|e| e.kind == "turn_failed").collect();
        assert_eq!(terminal.len(), 1, "{events:?}");
        assert_eq!(terminal[0].id, outcomes[0].event_id);
        assert_eq!(terminal[0].message_id.as_ref(), Some(&second.id));
        // The owner keeping its lease ends nothing more.
        let Inserted::New(third) = store.insert_user_message(new("four"), Some(&b)).await.unwrap() else {
            panic!("a new message");
        };
        assert_eq!(store.acquire_lease(&t, "node_b", "http://b", TTL).await.unwrap(), Some(b.clone()));
        assert_eq!(status(&third.id).await.status, MessageStatus::Pending);
        // The new owner writes.
        store
            .complete_turn(third.turn_key(), "fresh", None, None, None, None, Some(&b))
            .await
            .unwrap();
    }

    /// A node's store ([`Store::as_node`]) checks its book on every write of a thread's turn:
    /// messages, events, tool calls, transcript entries, permissions and the CLI session
    /// are refused (`LeaseLost`, nothing written) on a node that never took the thread, and
    /// on the old owner once a peer took it over; the new owner writes them all.
    async fn every_write_of_a_node_needs_the_threads_lease(store: sqlite_memory) {
        let t = thread(&store).await;
        let a = store.clone().as_node("http://a".into(), TTL);
        let b = store.clone().as_node("http://b".into(), TTL);
        assert_eq!(store.claim_bare(&t).await.unwrap(), Claim::Unclustered);
        let Claim::Held { fence, interrupted, .. } = a.claim_bare(&t).await.unwrap() else {
            panic!("A takes the free lease");
        };
        assert_eq!((fence.owner.as_str(), fence.epoch, interrupted.len()), (a.node_id().unwrap(), 1, 0));
        assert_eq!(b.claim_bare(&t).await.unwrap(), Claim::Elsewhere { lost: false });

        let pending = write_all(&a, &t, "a1").await.expect("the owner writes");
        let rows = counts(&store, &t).await;
        assert_eq!(rows, [1, 1, 1, 1, 1], "message, event, tool call, transcript entry, permission");
        assert_refused(&b, &t, "b1", &pending).await;
        assert_eq!(counts(&store, &t).await, rows, "B wrote nothing");

        // A's lease runs out; B takes the thread over and A's pending turn ends.
        store.test_execute(&format!(
            "UPDATE leases SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE thread_id = '{t}'"
        )).await;
        let Claim::Held { fence, interrupted, moved } = b.claim_bare(&t).await.unwrap() else {
            panic!("B takes the expired lease");
        };
        assert_eq!((fence.epoch, interrupted, moved), (2, vec![pending.clone()], false));
        let rows = counts(&store, &t).await;
        assert_eq!(rows, [1, 2, 1, 1, 1], "the takeover wrote the turn's `turn_failed`");
        assert_refused(&a, &t, "a2", &pending).await;
        assert_eq!(counts(&store, &t).await, rows, "A wrote nothing after the takeover");
        let ended = store.get_message(&pending).await.unwrap().unwrap();
        assert_eq!((ended.status, ended.error.as_deref()), (MessageStatus::Interrupted, Some(TAKEOVER_REASON)));
        // A learns it lost the thread; it still cannot write.
        assert_eq!(a.renew_node_leases().await.unwrap(), vec![t.clone()]);
        assert!(matches!(write_all(&a, &t, "a3").await, Err(StoreError::LeaseLost(_))));
        assert_eq!(a.claim_bare(&t).await.unwrap(), Claim::Elsewhere { lost: false });
        // B, which never lost it, holds it as before.
        let Claim::Held { fence, moved, .. } = b.claim_bare(&t).await.unwrap() else {
            panic!("B keeps its lease");
        };
        assert_eq!((fence.epoch, moved), (2, false));

        write_all(&b, &t, "b2").await.expect("the new owner writes");
        assert_eq!(counts(&store, &t).await, [2, 3, 2, 2, 2]);
        // At a graceful stop B ends the pending turns of the threads it holds; A holds none.
        assert_eq!(a.held_leases().unwrap(), []);
        assert_eq!(b.held_leases().unwrap(), [(t.clone(), fence)]);
        assert_eq!(store.held_leases(), None, "a single node holds no leases");
    }
}

store_tests! {
    /// A lease that went to a peer and came back before the node's heartbeat noticed is
    /// `moved`: the node's process for the thread missed the peer's turns.
    async fn a_lease_taken_back_from_a_peer_is_moved(store: sqlite_memory) {
        let t = thread(&store).await;
        let a = store.clone().as_node("http://a".into(), TTL);
        let b = store.clone().as_node("http://b".into(), TTL);
        let sql = format!(
            "UPDATE leases SET expires_at = '2000-01-01T00:00:00.000000Z' WHERE thread_id = '{t}'"
        );
        let expire = || store.test_execute(&sql);
        let held = |claim: Claim| match claim {
            Claim::Held { fence, moved, .. } => (fence.epoch, moved),
            other => panic!("not held: {other:?}"),
        };
        assert_eq!(held(a.claim_bare(&t).await.unwrap()), (1, false));
        assert_eq!(held(a.claim_bare(&t).await.unwrap()), (1, false));
        expire().await;
        assert_eq!(held(b.claim_bare(&t).await.unwrap()), (2, false));
        expire().await;
        assert_eq!(held(a.claim_bare(&t).await.unwrap()), (3, true));
        assert_eq!(held(a.claim_bare(&t).await.unwrap()), (3, false));
    }
}

/// One write of each kind a turn makes, through `store`, tagged `tag`: a user message (left
/// `pending`), an event, a tool call, a transcript entry, a permission asked and decided, the
/// CLI session. The first refusal stops it. Returns the user message's id.
async fn write_all(store: &Store, t: &ThreadId, tag: &str) -> Result<MessageId, StoreError> {
    let Inserted::New(message) = store
        .insert_user_message(
            NewUserMessage {
                thread_id: t.clone(),
                content: tag.into(),
                client_message_id: None,
                model: None,
                origin: crate::store::Origin::User,
                caller: None,
            },
            None,
        )
        .await?
    else {
        panic!("a new message");
    };
    for result in write_each(store, t, tag, &message.id).await {
        result?;
    }
    Ok(message.id)
}

/// Every write of a turn but the user message's, each tried on its own.
async fn write_each(
    store: &Store,
    t: &ThreadId,
    tag: &str,
    message: &MessageId,
) -> Vec<Result<(), StoreError>> {
    let input = serde_json::json!({"tag": tag});
    let session = plugin_contract::CliSessionId::from_string(format!("ses-{tag}"));
    let entry = serde_json::json!({"uuid": format!("uuid-{tag}"), "type": "user"});
    vec![
        store
            .append_event(t, Some(message), "text_delta", &input)
            .await
            .map(drop),
        store
            .record_tool_call(NewToolCall {
                thread_id: Some(t.clone()),
                tool: "time__now".into(),
                tool_use_id: None,
                input: input.clone(),
                result: None,
                is_error: false,
                duration_ms: 1,
            })
            .await
            .map(drop),
        store
            .append_transcript(t, &session, "p/s.jsonl", &[entry])
            .await
            .map(drop),
        store
            .record_permission(
                NewPermission {
                    request_id: &format!("req-{tag}"),
                    thread_id: t,
                    message_id: Some(message),
                    tool_use_id: None,
                    tool_name: "Bash",
                    input: &input,
                },
                "pending",
                None,
                None,
            )
            .await,
        store
            .decide_permission(
                t,
                &format!("req-{tag}"),
                crate::store::Decided {
                    status: "denied",
                    decided_by: "person",
                    answered_by: None,
                    reason: None,
                    rules: &[],
                },
            )
            .await
            .map(drop),
        store.set_cli_session(t, Some(&session)).await,
        store.archive_thread(t).await.map(drop),
    ]
}

/// Every write of a turn through `store` is refused with `LeaseLost`: the user message's
/// insert and end included.
async fn assert_refused(store: &Store, t: &ThreadId, tag: &str, pending: &MessageId) {
    let mut results = write_each(store, t, tag, pending).await;
    results.push(write_all(store, t, tag).await.map(drop));
    results.push(
        store
            .fail_turn(
                turn_of(t, pending),
                MessageStatus::Error,
                "stale",
                None,
                None,
                None,
            )
            .await
            .map(drop),
    );
    results.push(
        store
            .complete_turn(turn_of(t, pending), "stale", None, None, None, None, None)
            .await
            .map(drop),
    );
    for (i, refused) in results.into_iter().enumerate() {
        assert!(
            matches!(refused, Err(StoreError::LeaseLost(_))),
            "write {i}: {refused:?}"
        );
    }
}

/// The thread's rows: messages, events, tool calls, transcript entries, permissions.
async fn counts(store: &Store, t: &ThreadId) -> [usize; 5] {
    [
        store.list_messages(t).await.unwrap().len(),
        store.events_after(t, 0, 1000).await.unwrap().len(),
        store.tool_calls(t).await.unwrap().len(),
        store.thread_transcript(t).await.unwrap().len(),
        store.permissions(t, false).await.unwrap().len(),
    ]
}
