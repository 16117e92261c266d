use std::collections::HashSet;

use super::super::tests::{store_tests, turn_of};
use super::super::{EndCause, MessageStatus, NewThread, PendingTurn, Role};
use super::*;
use plugin_contract::CliSessionId;

async fn thread(store: &Store) -> ThreadId {
    store.create_thread(NewThread::default()).await.unwrap().id
}

store_tests! {
    async fn only_one_retry_puts_an_interrupted_message_back_to_pending(store: sqlite_memory) {
        let thread = thread(&store).await;
        let Inserted::New(message) = store
            .insert_user_message(
                NewUserMessage {
                    thread_id: thread,
                    content: "cut short".into(),
                    client_message_id: Some("c".into()),
                    model: None,
                    origin: crate::store::Origin::User,
                    caller: Some(crate::store::CallerId {
                        subject: "schedule:sch_1".into(),
                        tenant: None,
                    }),
                },
                None,
            )
            .await
            .unwrap()
        else {
            panic!("a new message")
        };
        assert_eq!(message.caller_subject.as_deref(), Some("schedule:sch_1"));
        assert!(
            store
                .retry_interrupted(&message.id)
                .await
                .unwrap()
                .is_none(),
            "a pending message is not retried"
        );
        store
            .fail_turn(message.turn_key(), MessageStatus::Interrupted, "crash", None, None, None)
            .await
            .unwrap();
        let retried = store.retry_interrupted(&message.id).await.unwrap();
        let retried = retried.expect("the first retry gets it");
        assert_eq!(retried.status, MessageStatus::Pending);
        assert_eq!(retried.error, None);
        assert_eq!(retried.seq, message.seq, "it keeps its place");
        assert_eq!(retried.caller(), message.caller(), "and its caller");
        assert!(store
            .retry_interrupted(&message.id)
            .await
            .unwrap()
            .is_none());
    }
}

fn user(thread: &ThreadId, content: &str, client: Option<&str>) -> NewUserMessage {
    NewUserMessage {
        thread_id: thread.clone(),
        content: content.into(),
        client_message_id: client.map(str::to_owned),
        model: None,
        origin: crate::store::Origin::User,
        caller: Some(crate::store::CallerId {
            subject: "key_1".into(),
            tenant: Some("acme".into()),
        }),
    }
}

async fn send(store: &Store, thread: &ThreadId, content: &str) -> MessageRow {
    match store
        .insert_user_message(user(thread, content, None), None)
        .await
        .unwrap()
    {
        Inserted::New(m) => m,
        Inserted::Duplicate(m) => panic!("unexpected duplicate {m:?}"),
    }
}

async fn count_messages(store: &Store) -> i64 {
    store.test_count("SELECT COUNT(*) FROM messages").await
}

store_tests! {
    async fn user_messages_get_increasing_seq_per_thread(store: sqlite_memory) {
        let a = thread(&store).await;
        let b = thread(&store).await;

        let a1 = send(&store, &a, "one").await;
        let a2 = send(&store, &a, "two").await;
        let b1 = send(&store, &b, "other").await;
        let a3 = send(&store, &a, "three").await;

        assert_eq!((a1.seq, a2.seq, a3.seq, b1.seq), (1, 2, 3, 1));
        assert_eq!(a1.role, Role::User);
        assert_eq!(a1.status, MessageStatus::Pending);
        assert_eq!(a1.thread_id, a);
        assert_eq!(a1.content, "one");
        assert!(a1.id.as_str().starts_with("msg_"));

        let listed: Vec<(i64, String)> = store
            .list_messages(&a)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.seq, m.content))
            .collect();
        assert_eq!(
            listed,
            [(1, "one".into()), (2, "two".into()), (3, "three".into())]
        );

        let got = store.get_message(&a2.id).await.unwrap().unwrap();
        assert_eq!(got.content, "two");
        assert_eq!(got.created_at, a2.created_at);
        let who = got.caller().expect("stored with its caller");
        assert_eq!((who.subject.as_str(), who.tenant.as_deref()), ("key_1", Some("acme")));
        assert!(store
            .get_message(&MessageId::from_string("msg_x"))
            .await
            .unwrap()
            .is_none());
    }
}

store_tests! {
    async fn message_to_unknown_thread_is_thread_not_found(store: sqlite_memory) {
        let unknown = ThreadId::from_string("thr_nope");
        let err = store
            .insert_user_message(user(&unknown, "hi", Some("c1")), None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::ThreadNotFound(ref id) if *id == unknown),
            "{err:?}"
        );
        assert_eq!(count_messages(&store).await, 0);
    }
}

store_tests! {
    async fn duplicate_client_id_returns_the_first_message(store: sqlite_memory) {
        let t = thread(&store).await;
        let first = store
            .insert_user_message(user(&t, "hello", Some("c1")), None)
            .await
            .unwrap();
        let Inserted::New(first) = first else {
            panic!("first insert was a duplicate")
        };
        assert_eq!(first.client_message_id.as_deref(), Some("c1"));

        let again = store
            .insert_user_message(user(&t, "hello again", Some("c1")), None)
            .await
            .unwrap();
        let Inserted::Duplicate(dup) = &again else {
            panic!("expected Duplicate, got {again:?}")
        };
        assert_eq!(dup.id, first.id);
        assert_eq!(dup.content, "hello");
        assert_eq!(again.message().id, first.id);
        assert_eq!(count_messages(&store).await, 1);

        // Messages without a client id never collide.
        send(&store, &t, "x").await;
        send(&store, &t, "y").await;
        assert_eq!(count_messages(&store).await, 3);
    }
}

store_tests! {
    async fn same_client_id_on_two_threads_is_allowed(store: sqlite_memory) {
        let a = thread(&store).await;
        let b = thread(&store).await;
        let on_a = store
            .insert_user_message(user(&a, "a", Some("same")), None)
            .await
            .unwrap();
        let on_b = store
            .insert_user_message(user(&b, "b", Some("same")), None)
            .await
            .unwrap();
        assert!(matches!(on_a, Inserted::New(_)));
        assert!(matches!(on_b, Inserted::New(_)));
        assert_ne!(on_a.message().id, on_b.message().id);
        assert_eq!(count_messages(&store).await, 2);
    }
}

store_tests! {
    async fn complete_turn_writes_reply_and_session(store: sqlite_memory) {
        let t = thread(&store).await;
        let question = send(&store, &t, "2+2?").await;
        assert!(store.reply_for(&question.id).await.unwrap().is_none());
        let session = CliSessionId::from_string("sess-42");

        let reply = store
            .complete_turn(question.turn_key(), "4", Some("opus"), None, Some(&session), None, None)
            .await
            .unwrap();
        assert_eq!(reply.role, Role::Assistant);
        assert_eq!(reply.status, MessageStatus::Done);
        assert_eq!(reply.reply_to.as_ref(), Some(&question.id));
        assert_eq!(reply.thread_id, t);
        assert_eq!(reply.seq, 2);
        assert_eq!(reply.content, "4");
        assert_eq!(reply.model.as_deref(), Some("opus"));

        let question = store.get_message(&question.id).await.unwrap().unwrap();
        assert_eq!(question.status, MessageStatus::Done);
        assert_eq!(
            store.require_thread(&t).await.unwrap().cli_session_id,
            Some(session)
        );
        assert_eq!(
            store.reply_for(&question.id).await.unwrap().unwrap().id,
            reply.id
        );

        // The next user message follows the reply.
        assert_eq!(send(&store, &t, "next").await.seq, 3);
        assert_eq!(reply.reply_to.as_ref(), Some(&question.id));
        assert_eq!(reply.status, MessageStatus::Done);
        assert_eq!(reply.role, Role::Assistant);
    }
}

store_tests! {
    async fn complete_turn_without_session_keeps_the_old_one(store: sqlite_memory) {
        let t = thread(&store).await;
        let old = CliSessionId::from_string("old");
        store.set_cli_session(&t, Some(&old)).await.unwrap();
        let question = send(&store, &t, "hi").await;
        store
            .complete_turn(question.turn_key(), "hello", None, None, None, None, None)
            .await
            .unwrap();
        assert_eq!(
            store.require_thread(&t).await.unwrap().cli_session_id,
            Some(old)
        );
    }
}

store_tests! {
    async fn complete_turn_rejects_unknown_and_answered_messages_atomically(store: sqlite_memory) {
        let t = thread(&store).await;
        let unknown = MessageId::from_string("msg_nope");
        let err = store
            .complete_turn(turn_of(&t, &unknown), "x", None, None, None, None, None)
            .await
            .unwrap_err();
        assert!(
            matches!(err, StoreError::MessageNotFound(ref id) if *id == unknown),
            "{err:?}"
        );

        let question = send(&store, &t, "q").await;
        // The question, named with another thread: not found, and nothing written.
        let elsewhere = thread(&store).await;
        assert!(matches!(
            store
                .complete_turn(turn_of(&elsewhere, &question.id), "x", None, None, None, None, None)
                .await,
            Err(StoreError::MessageNotFound(_))
        ));
        assert_eq!(count_messages(&store).await, 1);
        let reply = store
            .complete_turn(question.turn_key(), "a", None, None, None, None, None)
            .await
            .unwrap();
        // An assistant message is not a user message to answer.
        assert!(matches!(
            store
                .complete_turn(reply.turn_key(), "x", None, None, None, None, None)
                .await,
            Err(StoreError::MessageNotFound(_))
        ));
        // A second ending of the same run is none: nothing written, the session not set.
        let session = CliSessionId::from_string("must-not-stick");
        let again = store
            .fail_turn(question.turn_key(), MessageStatus::Error, "again", Some(&session), None, None)
            .await
            .unwrap();
        assert!(again.is_none(), "{again:?}");
        assert_eq!(store.get_message(&question.id).await.unwrap().unwrap().status, MessageStatus::Done);
        assert_eq!(store.outcomes_of(&question.id).await.unwrap().len(), 1);
        assert_eq!(count_messages(&store).await, 2);
        assert_eq!(store.require_thread(&t).await.unwrap().cli_session_id, None);
    }
}

store_tests! {
    async fn fail_turn_sets_status_error_and_session(store: sqlite_memory) {
        let t = thread(&store).await;
        let question = send(&store, &t, "q").await;
        let session = CliSessionId::from_string("sess-f");

        store
            .fail_turn(
                question.turn_key(),
                MessageStatus::Error,
                "CLI died",
                Some(&session),
                None,
                None,
            )
            .await
            .unwrap();
        let got = store.get_message(&question.id).await.unwrap().unwrap();
        assert_eq!(got.status, MessageStatus::Error);
        assert_eq!(got.error.as_deref(), Some("CLI died"));
        assert_eq!(
            store.require_thread(&t).await.unwrap().cli_session_id,
            Some(session)
        );
        assert!(store.reply_for(&question.id).await.unwrap().is_none());

        let other = send(&store, &t, "q2").await;
        store
            .fail_turn(other.turn_key(), MessageStatus::Interrupted, "stopped", None, None, None)
            .await
            .unwrap();
        let got = store.get_message(&other.id).await.unwrap().unwrap();
        assert_eq!(got.status, MessageStatus::Interrupted);
        assert_eq!(got.error.as_deref(), Some("stopped"));

        let unknown = MessageId::from_string("msg_nope");
        assert!(matches!(
            store
                .fail_turn(turn_of(&t, &unknown), MessageStatus::Error, "x", None, None, None)
                .await,
            Err(StoreError::MessageNotFound(_))
        ));
    }
}

store_tests! {
    async fn history_holds_only_finished_exchanges_in_order(store: sqlite_memory) {
        let t = thread(&store).await;
        let other = thread(&store).await;

        let q1 = send(&store, &t, "q1").await;
        store
            .complete_turn(q1.turn_key(), "a1", None, None, None, None, None)
            .await
            .unwrap();
        let failed = send(&store, &t, "failed").await;
        store
            .fail_turn(failed.turn_key(), MessageStatus::Error, "boom", None, None, None)
            .await
            .unwrap();
        let stopped = send(&store, &t, "stopped").await;
        store
            .fail_turn(stopped.turn_key(), MessageStatus::Interrupted, "stop", None, None, None)
            .await
            .unwrap();
        let q2 = send(&store, &t, "q2").await;
        let o1 = send(&store, &other, "other thread").await;
        store
            .complete_turn(o1.turn_key(), "other reply", None, None, None, None, None)
            .await
            .unwrap();
        store
            .complete_turn(q2.turn_key(), "a2", None, None, None, None, None)
            .await
            .unwrap();
        send(&store, &t, "running now").await;

        let history: Vec<(String, String)> = store
            .history(&t)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.role, m.content.text().into_owned()))
            .collect();
        let expected: Vec<(String, String)> = [
            ("user", "q1"),
            ("assistant", "a1"),
            ("user", "q2"),
            ("assistant", "a2"),
        ]
        .into_iter()
        .map(|(r, c)| (r.to_owned(), c.to_owned()))
        .collect();
        assert_eq!(history, expected);

        assert!(store
            .history(&ThreadId::from_string("thr_nope"))
            .await
            .unwrap()
            .is_empty());
    }
}

store_tests! {
    /// The pending turns are the `pending` user messages, oldest first; each ends once, with one
    /// outcome naming its cause and the terminal event written with it.
    async fn pending_turns_end_once_each_with_an_outcome_and_an_event(store: sqlite_memory) {
        let t = thread(&store).await;
        let other = thread(&store).await;
        let done = send(&store, &t, "done").await;
        store
            .complete_turn(done.turn_key(), "reply", None, None, None, None, None)
            .await
            .unwrap();
        let p1 = send(&store, &t, "p1").await;
        let p2 = send(&store, &t, "p2").await;
        let p3 = send(&store, &other, "p3").await;

        let ids = |pending: Vec<PendingTurn>| -> Vec<MessageId> {
            pending.into_iter().map(|p| p.message_id).collect()
        };
        assert_eq!(ids(store.pending_turns(None).await.unwrap()), [p1.id.clone(), p2.id.clone(), p3.id.clone()]);
        assert_eq!(ids(store.pending_turns(Some(&other)).await.unwrap()), std::slice::from_ref(&p3.id));
        for (m, status) in [(&p1, MessageStatus::Interrupted), (&p2, MessageStatus::Error), (&p3, MessageStatus::Refused)] {
            let ended = store
                .fail_turn(m.turn_key(), status, "daemon restarted", None, None, None)
                .await
                .unwrap()
                .expect("a pending turn ends");
            assert_eq!(ended.outcome.status, status);
            assert_eq!(ended.event.kind, "turn_failed");
            assert_eq!(ended.outcome.event_id, ended.event.id);
            let again = store
                .fail_turn(m.turn_key(), MessageStatus::Error, "again", None, None, None)
                .await
                .unwrap();
            assert!(again.is_none());
            let got = store.get_message(&m.id).await.unwrap().unwrap();
            assert_eq!((got.status, got.error.as_deref()), (status, Some("daemon restarted")));
            assert_eq!(store.outcomes_of(&m.id).await.unwrap(), [ended.outcome]);
        }
        assert!(store.pending_turns(None).await.unwrap().is_empty());
        let outcomes = store.outcomes_of(&done.id).await.unwrap();
        assert_eq!(outcomes.len(), 1);
        assert_eq!(outcomes[0].cause, EndCause::Done);
        assert!(outcomes[0].reply_id.is_some());
    }
}

store_tests! {
    async fn concurrent_inserts_get_distinct_seqs(store: sqlite_file) {
        let t = thread(&store).await;
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let store = store.clone();
                let t = t.clone();
                tokio::spawn(async move {
                    store
                        .insert_user_message(user(&t, &format!("m{i}"), Some(&format!("c{i}"))), None)
                        .await
                        .unwrap()
                        .message()
                        .seq
                })
            })
            .collect();
        let mut seqs = Vec::new();
        for task in tasks {
            seqs.push(task.await.unwrap());
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=20).collect::<Vec<i64>>());
        assert_eq!(seqs.iter().collect::<HashSet<_>>().len(), 20);
    }
}

store_tests! {
    /// Questions and replies written at once on one thread still get distinct, gapless
    /// `seq`s (PostgreSQL has no database-wide write lock: the thread's row lock does it).
    async fn concurrent_questions_and_replies_get_distinct_seqs(store: sqlite_file) {
        let t = thread(&store).await;
        let mut questions = Vec::new();
        for i in 0..5 {
            questions.push(send(&store, &t, &format!("q{i}")).await);
        }
        let replies = questions.into_iter().map(|q| {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .complete_turn(q.turn_key(), "a", None, None, None, None, None)
                    .await
                    .unwrap()
                    .seq
            })
        });
        let more = (0..5).map(|i| {
            let store = store.clone();
            let t = t.clone();
            tokio::spawn(async move { send(&store, &t, &format!("more{i}")).await.seq })
        });
        let tasks: Vec<_> = replies.chain(more).collect();
        let mut seqs: Vec<i64> = (1..=5).collect();
        for task in tasks {
            seqs.push(task.await.unwrap());
        }
        seqs.sort_unstable();
        assert_eq!(seqs, (1..=15).collect::<Vec<i64>>());
    }
}

store_tests! {
    async fn concurrent_duplicates_insert_once(store: sqlite_file) {
        let t = thread(&store).await;
        let tasks: Vec<_> = (0..10)
            .map(|_| {
                let store = store.clone();
                let t = t.clone();
                tokio::spawn(async move {
                    store
                        .insert_user_message(user(&t, "same", Some("retry")), None)
                        .await
                        .unwrap()
                })
            })
            .collect();
        let mut new = 0;
        let mut ids = HashSet::new();
        for task in tasks {
            let inserted = task.await.unwrap();
            if matches!(inserted, Inserted::New(_)) {
                new += 1;
            }
            ids.insert(inserted.message().id.clone());
        }
        assert_eq!(new, 1);
        assert_eq!(ids.len(), 1);
        assert_eq!(count_messages(&store).await, 1);
    }
}

store_tests! {
    async fn unknown_status_is_corrupt(store: sqlite_memory) {
        let t = thread(&store).await;
        let m = send(&store, &t, "q").await;
        // The CHECK constraint stops this in normal use; bypass it as a damaged file would.
        store
            .test_execute(match store.backend() {
                "sqlite" => "PRAGMA ignore_check_constraints = ON",
                _ => "ALTER TABLE messages DROP CONSTRAINT messages_status",
            })
            .await;
        store
            .test_execute(&format!(
                "UPDATE messages SET status = 'weird' WHERE id = '{}'",
                m.id
            ))
            .await;
        let err = store.get_message(&m.id).await.unwrap_err();
        assert!(
            matches!(err, StoreError::Corrupt(ref s) if s.contains("weird")),
            "{err:?}"
        );
    }
}
