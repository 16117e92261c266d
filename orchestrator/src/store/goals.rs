//! A thread's goals (`crate::goals` runs them); the facade of `harness_db::GoalQueries`.

use plugin_contract::ThreadId;

use super::{on_db, Db, GoalChange, GoalQueries, GoalRow, MessageId, NewGoal, Store, StoreError};

impl Store {
    /// Stores `new`; `None` when its thread has an unfinished goal already, or is not there.
    pub async fn insert_goal(&self, new: NewGoal<'_>) -> Result<Option<GoalRow>, StoreError> {
        let _timer = self.metrics.time("insert_goal");
        on_db!(self, db => db.insert_goal(new).await)
    }

    /// The thread's goals, oldest first.
    pub async fn goals_of(&self, thread: &ThreadId) -> Result<Vec<GoalRow>, StoreError> {
        let _timer = self.metrics.time("goals_of");
        on_db!(self, db => db.goals_of(thread).await)
    }

    /// Moves the unfinished goal `id` on; `None` when it is not there or finished.
    pub async fn update_goal(
        &self,
        id: &str,
        change: GoalChange<'_>,
    ) -> Result<Option<GoalRow>, StoreError> {
        let _timer = self.metrics.time("update_goal");
        on_db!(self, db => db.update_goal(id, change).await)
    }

    /// Every unfinished goal, oldest first.
    pub async fn unfinished_goals(&self) -> Result<Vec<GoalRow>, StoreError> {
        let _timer = self.metrics.time("unfinished_goals");
        on_db!(self, db => db.unfinished_goals().await)
    }

    /// The thread's messages that started a goal's turn.
    pub async fn goal_turns(&self, thread: &ThreadId) -> Result<Vec<MessageId>, StoreError> {
        let _timer = self.metrics.time("goal_turns");
        on_db!(self, db => db.goal_turns(thread).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::{goal_turn_id, GoalChange, NewGoal, NewThread, NewUserMessage, Origin};

    fn goal<'a>(id: &'a str, thread: &'a plugin_contract::ThreadId) -> NewGoal<'a> {
        NewGoal {
            id,
            thread_id: thread,
            description: "Write fib.py",
            rubric: "- fib(10) is 55",
            max_iterations: 2,
        }
    }

    store_tests! {
        /// One unfinished goal a thread: a second waits for the first's result; a finished one
        /// is changed no more; the goals go with their thread.
        async fn a_thread_works_on_one_goal_at_a_time(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap().id;
            let first = store.insert_goal(goal("outc_1", &thread)).await.unwrap().unwrap();
            assert_eq!((first.iteration, first.state.as_str(), first.finished_at), (0, "working", None));
            assert_eq!(store.insert_goal(goal("outc_2", &thread)).await.unwrap(), None);
            let unknown = plugin_contract::ThreadId::from_string("thr_unknown");
            assert_eq!(store.insert_goal(goal("outc_3", &unknown)).await.unwrap(), None);
            assert_eq!(store.unfinished_goals().await.unwrap(), std::slice::from_ref(&first));

            let change = |iteration, state, explanation, finished| GoalChange { iteration, state, explanation, finished };
            let grading = store.update_goal("outc_1", change(0, "grading", None, false)).await.unwrap().unwrap();
            assert_eq!(grading.state, "grading");
            let revised = store.update_goal("outc_1", change(1, "working", Some("fib(10) is 89"), false)).await.unwrap().unwrap();
            assert_eq!((revised.iteration, revised.explanation.as_deref()), (1, Some("fib(10) is 89")));
            // No explanation keeps the last one.
            let done = store.update_goal("outc_1", change(1, "satisfied", None, true)).await.unwrap().unwrap();
            assert_eq!((done.state.as_str(), done.explanation.as_deref()), ("satisfied", Some("fib(10) is 89")));
            assert!(done.finished_at.is_some());
            assert_eq!(store.update_goal("outc_1", change(2, "working", None, false)).await.unwrap(), None);
            assert!(store.unfinished_goals().await.unwrap().is_empty());

            let second = store.insert_goal(goal("outc_2", &thread)).await.unwrap().unwrap();
            let ids: Vec<String> = store.goals_of(&thread).await.unwrap().into_iter().map(|g| g.id).collect();
            assert_eq!(ids, ["outc_1", "outc_2"]);
            assert_eq!(store.unfinished_goals().await.unwrap(), [second]);
            store.delete_thread(&thread).await.unwrap();
            assert!(store.goals_of(&thread).await.unwrap().is_empty());
            assert!(store.unfinished_goals().await.unwrap().is_empty());
        }

        /// A goal's turns are the messages with its `clientMessageId`s, in order.
        async fn a_goals_turns_are_found_by_their_client_ids(store: sqlite_memory) {
            let thread = store.create_thread(NewThread::default()).await.unwrap().id;
            let send = |client: Option<String>| NewUserMessage {
                thread_id: thread.clone(),
                content: "x".into(),
                client_message_id: client,
                model: None,
                origin: Origin::User,
                caller: None,
            };
            let id = |inserted: crate::store::Inserted| inserted.message().id.clone();
            let first = id(store.insert_user_message(send(Some(goal_turn_id("outc_1", 0))), None).await.unwrap());
            store.insert_user_message(send(Some("mine".into())), None).await.unwrap();
            store.insert_user_message(send(None), None).await.unwrap();
            let second = id(store.insert_user_message(send(Some(goal_turn_id("outc_1", 1))), None).await.unwrap());
            assert_eq!(store.goal_turns(&thread).await.unwrap(), [first, second]);
        }
    }
}
