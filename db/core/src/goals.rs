//! The operations on `goals`: a thread's tasks with a rubric, each worked on and graded until
//! the grader is satisfied or its iterations run out (`orchestrator::goals` runs them; the
//! Managed Agents API calls them outcomes). A goal's turns are the thread's messages whose
//! `clientMessageId` is [`goal_turn_id`]'s, so a restarted daemon finds each turn it sent.

use chrono::{DateTime, Utc};
use plugin_contract::ThreadId;

use crate::{MessageId, StoreError};

/// What [`goal_turn_id`] starts with.
pub const GOAL_TURN_PREFIX: &str = "goal:";

/// The `clientMessageId` of the message that starts the goal's `iteration`.
pub fn goal_turn_id(goal: &str, iteration: i64) -> String {
    format!("{GOAL_TURN_PREFIX}{goal}:{iteration}")
}

/// A goal, as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct GoalRow {
    pub id: String,
    pub thread_id: ThreadId,
    pub description: String,
    /// The rubric's text (Markdown).
    pub rubric: String,
    pub max_iterations: i64,
    /// The iteration under way, or the last one, from 0.
    pub iteration: i64,
    /// `working` or `grading` while it runs, then its result.
    pub state: String,
    /// The grader's last explanation.
    pub explanation: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// A goal to store, at iteration 0, `working`.
#[derive(Clone, Copy, Debug)]
pub struct NewGoal<'a> {
    pub id: &'a str,
    pub thread_id: &'a ThreadId,
    pub description: &'a str,
    pub rubric: &'a str,
    pub max_iterations: i64,
}

/// Where a goal is now: its iteration, its state, the grader's last word, and whether that
/// state is its result (which sets `finished_at`).
#[derive(Clone, Copy, Debug)]
pub struct GoalChange<'a> {
    pub iteration: i64,
    pub state: &'a str,
    pub explanation: Option<&'a str>,
    pub finished: bool,
}

#[allow(async_fn_in_trait)]
pub trait GoalQueries {
    /// Stores `new`; `None` when its thread already has an unfinished goal, or is not there.
    async fn insert_goal(&self, new: NewGoal<'_>) -> Result<Option<GoalRow>, StoreError>;

    /// The thread's goals, oldest first.
    async fn goals_of(&self, thread: &ThreadId) -> Result<Vec<GoalRow>, StoreError>;

    /// Moves the unfinished goal `id` on; `None` when there is no such goal or it is finished.
    async fn update_goal(
        &self,
        id: &str,
        change: GoalChange<'_>,
    ) -> Result<Option<GoalRow>, StoreError>;

    /// Every unfinished goal, oldest first (what a starting daemon takes up again).
    async fn unfinished_goals(&self) -> Result<Vec<GoalRow>, StoreError>;

    /// The thread's messages that started a goal's turn ([`goal_turn_id`]).
    async fn goal_turns(&self, thread: &ThreadId) -> Result<Vec<MessageId>, StoreError>;
}

/// `goal_queries!(Backend)`: the [`GoalQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module.
#[macro_export]
macro_rules! goal_queries {
    ($backend:ty) => {
        impl $crate::GoalQueries for $backend {
            async fn insert_goal(
                &self,
                new: $crate::NewGoal<'_>,
            ) -> Result<Option<$crate::GoalRow>, StoreError> {
                insert_goal(self.pool(), new).await
            }

            async fn goals_of(
                &self,
                thread: &plugin_contract::ThreadId,
            ) -> Result<Vec<$crate::GoalRow>, StoreError> {
                goals_of(self.pool(), thread).await
            }

            async fn update_goal(
                &self,
                id: &str,
                change: $crate::GoalChange<'_>,
            ) -> Result<Option<$crate::GoalRow>, StoreError> {
                update_goal(self.pool(), id, change).await
            }

            async fn unfinished_goals(&self) -> Result<Vec<$crate::GoalRow>, StoreError> {
                unfinished_goals(self.pool()).await
            }

            async fn goal_turns(
                &self,
                thread: &plugin_contract::ThreadId,
            ) -> Result<Vec<$crate::MessageId>, StoreError> {
                goal_turns(self.pool(), thread).await
            }
        }
    };
}
