//! Goals: a task with a rubric that a thread works on until a grader is satisfied (the Managed
//! Agents API's outcomes). [`Goals`] owns each goal's loop, one task per unfinished goal:
//!
//! 1. the thread works: a message to the thread ([`ThreadService::send_and_wait`], so on a
//!    cluster it runs at the thread's owner) with the description and the rubric, or, after
//!    the first iteration, the grader's explanation to revise by;
//! 2. the grader grades: a child thread of the goal's thread (its own context, the same
//!    working folder, the same profile; its turns count against the thread's budgets as a
//!    delegated child's do) is asked for a verdict in a fixed schema (`--json-schema`):
//!    `satisfied`, `needs_revision` or `failed`, and why;
//! 3. `needs_revision` starts the next iteration with the explanation, until
//!    `max_iterations` have been graded (`max_iterations_reached`).
//!
//! Each step is stored before the next ([`crate::store::GoalRow`]: `working` or `grading`, at
//! an iteration) and announced on the thread's events (`goal_set`, `goal_grading_started`,
//! `goal_graded`), so a daemon that restarts takes each unfinished goal up where it was
//! ([`Goals::resume`]): an iteration's message has the `clientMessageId`
//! `goal:{goal}:{iteration}` ([`goal_turn_id`]), so sending it again waits for the turn that
//! ran rather than running another. A goal stopped by [`Goals::interrupt`] ends `interrupted`;
//! one whose turn fails ends `failed`, saying why. A daemon shutting down leaves its goals
//! unfinished, to be taken up at the next start.

mod grader;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use plugin_contract::{ThreadId, UserContent};

use crate::api::events::ThreadEvent;
use crate::api::events::{GoalGraded, GoalGradingStarted, GoalResult, GoalSet, GoalUsage};
use crate::api::threads::PostMessage;
use crate::caller::Caller;
use crate::pipeline::{Pipeline, PipelineError};
use crate::service::{ServiceError, ThreadService};
use crate::store::{goal_turn_id, GoalChange, GoalRow, MessageStatus, NewGoal, Store, StoreError};
use crate::sync::lock;

pub use crate::store::GOAL_TURN_PREFIX;

/// How long [`Goals::stop_grading`] waits before asking a grading to stop again.
const STOP_AGAIN: std::time::Duration = std::time::Duration::from_millis(100);

/// How many iterations a goal may have graded when it names none, and at most.
pub const DEFAULT_ITERATIONS: i64 = 3;
pub const MAX_ITERATIONS: i64 = 20;

/// A goal to set.
#[derive(Clone, Debug)]
pub struct NewGoalSpec {
    /// Its id (`outc_…` through the Managed Agents API).
    pub id: String,
    pub description: String,
    pub rubric: String,
    /// 1 to [`MAX_ITERATIONS`].
    pub max_iterations: i64,
}

/// Why a goal was not set.
#[derive(Debug, thiserror::Error)]
pub enum GoalError {
    /// A field the caller got wrong.
    #[error("{0}")]
    Invalid(String),
    /// The thread works on another goal: one at a time.
    #[error("thread {thread} is working on goal {goal}; interrupt it or wait for its result")]
    Busy { thread: ThreadId, goal: String },
    #[error(transparent)]
    Service(#[from] ServiceError),
}

impl From<StoreError> for GoalError {
    fn from(err: StoreError) -> Self {
        GoalError::Service(err.into())
    }
}

/// The owner of every goal's loop. Cheap to clone.
#[derive(Clone)]
pub struct Goals {
    inner: Arc<Inner>,
}

struct Inner {
    threads: ThreadService,
    pipeline: Pipeline,
    store: Store,
    /// With clustering, a goal is taken up by the node that takes its thread.
    cluster: Option<crate::cluster::Cluster>,
    grader: grader::Grader,
    /// The running loops, by thread (the goal's id, and what cancels its loop).
    running: Mutex<HashMap<ThreadId, (String, CancellationToken)>>,
}

impl Goals {
    pub fn new(
        threads: ThreadService,
        pipeline: Pipeline,
        store: Store,
        cluster: Option<crate::cluster::Cluster>,
        threads_dir: std::path::PathBuf,
    ) -> Goals {
        let grader = grader::Grader::new(pipeline.clone(), store.clone(), threads_dir);
        Goals {
            inner: Arc::new(Inner {
                threads,
                pipeline,
                store,
                cluster,
                grader,
                running: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Sets a goal on the thread (the caller's, checked) and starts its loop; the goal as
    /// stored. Its `goal_set` event is stored before its first turn's message.
    pub async fn set(
        &self,
        caller: &Caller,
        thread: &ThreadId,
        spec: NewGoalSpec,
    ) -> Result<GoalRow, GoalError> {
        check_spec(&spec)?;
        self.inner.threads.thread(caller, thread).await?;
        let new = NewGoal {
            id: &spec.id,
            thread_id: thread,
            description: &spec.description,
            rubric: &spec.rubric,
            max_iterations: spec.max_iterations,
        };
        let Some(goal) = self.inner.store.insert_goal(new).await? else {
            let goals = self.inner.store.goals_of(thread).await?;
            let busy = goals.into_iter().find(|g| g.finished_at.is_none());
            return Err(match busy {
                Some(goal) => GoalError::Busy {
                    thread: thread.clone(),
                    goal: goal.id,
                },
                None => GoalError::Service(StoreError::ThreadNotFound(thread.clone()).into()),
            });
        };
        let event = ThreadEvent::GoalSet(GoalSet {
            goal_id: goal.id.clone(),
            description: goal.description.clone(),
            rubric: goal.rubric.clone(),
            max_iterations: goal.max_iterations,
        });
        self.inner
            .pipeline
            .events()
            .emit_and_wait(thread, None, event)
            .await;
        info!(thread_id = %thread, goal = %goal.id, "Goal set.");
        self.spawn(goal.clone(), caller.clone());
        Ok(goal)
    }

    /// Stops the thread's goal, if one runs: it ends `interrupted`. The thread's own turn is
    /// the caller's to interrupt (`ThreadService::interrupt`); the grader's is stopped here.
    pub fn interrupt(&self, thread: &ThreadId) -> bool {
        let token = lock(&self.inner.running)
            .get(thread)
            .map(|(_, t)| t.clone());
        token.map(|token| token.cancel()).is_some()
    }

    /// Takes up every unfinished goal where it was (at start-up, after the re-drive of cut
    /// turns), each acting for whoever set it; with clustering, those whose thread no live
    /// peer holds (a peer runs its own). The number taken up.
    pub async fn resume(&self) -> Result<usize, StoreError> {
        let goals = self.inner.store.unfinished_goals().await?;
        let mut count = 0;
        for goal in goals {
            let here = lock(&self.inner.running).contains_key(&goal.thread_id);
            let ours = match &self.inner.cluster {
                None => true,
                Some(cluster) => cluster.take(&goal.thread_id).await?.is_some(),
            };
            if here || !ours {
                continue;
            }
            count += 1;
            let caller = self.setter(&goal).await?;
            info!(thread_id = %goal.thread_id, goal = %goal.id, state = %goal.state, iteration = goal.iteration, "Goal taken up again.");
            self.spawn(goal, caller);
        }
        Ok(count)
    }

    /// Who set `goal`: the caller of its first turn's message, acting again.
    async fn setter(&self, goal: &GoalRow) -> Result<Caller, StoreError> {
        let first = goal_turn_id(&goal.id, 0);
        for id in self.inner.store.goal_turns(&goal.thread_id).await? {
            let Some(message) = self.inner.store.get_message(&id).await? else {
                continue;
            };
            if message.client_message_id.as_deref() == Some(first.as_str()) {
                return Ok(Caller::acting_for(message.caller()));
            }
        }
        // Its first message was never stored: the thread's tenant, as the daemon's own work.
        let thread = self.inner.store.require_thread(&goal.thread_id).await?;
        Ok(Caller::acting_for(Some(crate::store::CallerId {
            subject: format!("goal:{}", goal.id),
            tenant: thread.tenant,
        })))
    }

    fn spawn(&self, goal: GoalRow, caller: Caller) {
        let token = CancellationToken::new();
        let entry = (goal.id.clone(), token.clone());
        lock(&self.inner.running).insert(goal.thread_id.clone(), entry);
        let goals = self.clone();
        tokio::spawn(async move {
            let thread = goal.thread_id.clone();
            let id = goal.id.clone();
            match goals.run(goal, &caller, &token).await {
                Ok(()) | Err(Halt::Stopping) => {}
                Err(Halt::Store(err)) => {
                    warn!(thread_id = %thread, goal = %id, error = %err, "A goal's loop stopped; it is taken up at the next start.");
                }
            }
            let mut running = lock(&goals.inner.running);
            if running.get(&thread).is_some_and(|(goal, _)| *goal == id) {
                running.remove(&thread);
            }
        });
    }

    /// The loop: from the goal's stored state to its result. `Err`: it stopped unfinished.
    async fn run(
        &self,
        mut goal: GoalRow,
        caller: &Caller,
        stop: &CancellationToken,
    ) -> Result<(), Halt> {
        let mut reply = None;
        loop {
            let step = match goal.state.as_str() {
                "grading" => self.grade(&goal, caller, reply.take(), stop).await,
                _ => self.work(&goal, caller, stop).await,
            };
            // A turn cut by the daemon's stop is no result: the goal stays where it was.
            if self.inner.pipeline.is_shutting_down() && !matches!(step, Step::Worked(_)) {
                return Err(Halt::Stopping);
            }
            let next = match step {
                Step::Worked(text) => {
                    reply = Some(text);
                    Change::grading(&goal)
                }
                Step::Ended(ending) => {
                    let event = ending.event(&goal);
                    let result = event.result;
                    self.announce(&goal.thread_id, ThreadEvent::GoalGraded(event))
                        .await;
                    let change = Change::after(&goal, result, ending.explanation.as_deref());
                    if result.is_final() {
                        info!(thread_id = %goal.thread_id, goal = %goal.id, result = result.as_str(), iteration = goal.iteration, "Goal ended.");
                    }
                    change
                }
                Step::Stopping => return Err(Halt::Stopping),
            };
            let finished = next.finished;
            let changed = self
                .inner
                .store
                .update_goal(&goal.id, next.as_change())
                .await?;
            match changed {
                Some(row) if !finished => goal = row,
                _ => return Ok(()),
            }
        }
    }

    /// The thread works on the goal's current iteration.
    async fn work(&self, goal: &GoalRow, caller: &Caller, stop: &CancellationToken) -> Step {
        let body = PostMessage {
            content: UserContent::Text(work_prompt(goal)),
            client_message_id: Some(goal_turn_id(&goal.id, goal.iteration)),
            model: None,
            permission_mode: None,
            mcp_servers: None,
        };
        let threads = &self.inner.threads;
        let sent = tokio::select! {
            sent = threads.send_and_wait(caller, goal.thread_id.clone(), body, None) => sent,
            // The caller interrupts the thread's turn itself.
            () = stop.cancelled() => return Step::Ended(Ending::interrupted(false)),
        };
        let outcome = match sent {
            Ok(sent) => sent.outcome,
            Err(ServiceError::Pipeline(err)) => Err(err),
            Err(err) => return Step::Ended(Ending::failed(format!("its turn was refused: {err}"))),
        };
        match outcome {
            Ok(reply) => Step::Worked(reply.message.content),
            Err(err) => turn_ended(err, false),
        }
    }

    /// The grader grades the current iteration; `reply`: the thread's last reply when known.
    async fn grade(
        &self,
        goal: &GoalRow,
        caller: &Caller,
        reply: Option<String>,
        stop: &CancellationToken,
    ) -> Step {
        let grader = match self.inner.grader.start(goal).await {
            Ok(grader) => grader,
            Err(err) => return Step::Ended(Ending::failed(format!("no grader: {err}"))),
        };
        self.announce(
            &goal.thread_id,
            ThreadEvent::GoalGradingStarted(GoalGradingStarted {
                goal_id: goal.id.clone(),
                iteration: goal.iteration,
                grader_thread_id: grader.clone(),
            }),
        )
        .await;
        let grading = self
            .inner
            .grader
            .grade(&self.inner.threads, goal, &grader, caller, reply);
        tokio::pin!(grading);
        let graded = tokio::select! {
            graded = &mut grading => graded,
            () = stop.cancelled() => {
                self.stop_grading(goal, &grader, grading).await;
                return Step::Ended(Ending::interrupted(true));
            }
        };
        match graded {
            Ok(verdict) => Step::Ended(Ending {
                result: verdict.result,
                explanation: Some(verdict.explanation),
                graded: true,
                usage: verdict.usage,
            }),
            Err(grader::GradeError::Turn(err)) => turn_ended(err, true),
            Err(err) => Step::Ended(Ending {
                graded: true,
                ..Ending::failed(format!("the grader failed: {err}"))
            }),
        }
    }

    /// Stops the grader's turn, whatever it is at: not sent yet, waiting in line (withdrawn) or
    /// running (interrupted); asked again until `grading` has ended.
    async fn stop_grading<F: std::future::Future>(
        &self,
        goal: &GoalRow,
        grader: &ThreadId,
        mut grading: std::pin::Pin<&mut F>,
    ) {
        let id = grader::grading_id(goal);
        loop {
            let _ = self.inner.pipeline.stop_message(grader, &id).await;
            tokio::select! {
                _ = &mut grading => return,
                () = tokio::time::sleep(STOP_AGAIN) => {}
            }
        }
    }

    async fn announce(&self, thread: &ThreadId, event: ThreadEvent) {
        self.inner
            .pipeline
            .events()
            .emit_and_wait(thread, None, event)
            .await;
    }
}

/// Why a loop stopped before its goal's result.
enum Halt {
    /// The daemon is stopping: the goal stays where it was.
    Stopping,
    Store(StoreError),
}

impl From<StoreError> for Halt {
    fn from(err: StoreError) -> Self {
        Halt::Store(err)
    }
}

/// What a step of the loop came to.
enum Step {
    /// The thread replied: this.
    Worked(String),
    /// The iteration ended so.
    Ended(Ending),
    /// The daemon is stopping: the goal stays where it is.
    Stopping,
}

/// How an iteration ended.
struct Ending {
    result: GoalResult,
    explanation: Option<String>,
    graded: bool,
    usage: GoalUsage,
}

impl Ending {
    fn interrupted(graded: bool) -> Ending {
        Ending {
            result: GoalResult::Interrupted,
            explanation: Some("interrupted".into()),
            graded,
            usage: GoalUsage::default(),
        }
    }

    fn failed(why: String) -> Ending {
        Ending {
            result: GoalResult::Failed,
            explanation: Some(why),
            graded: false,
            usage: GoalUsage::default(),
        }
    }

    /// Its `goal_graded`: `needs_revision` on the last iteration is `max_iterations_reached`.
    fn event(&self, goal: &GoalRow) -> GoalGraded {
        let last = goal.iteration + 1 >= goal.max_iterations;
        let result = match self.result {
            GoalResult::NeedsRevision if last => GoalResult::MaxIterationsReached,
            result => result,
        };
        GoalGraded {
            goal_id: goal.id.clone(),
            iteration: goal.iteration,
            result,
            explanation: self.explanation.clone().unwrap_or_default(),
            graded: self.graded,
            usage: self.usage,
        }
    }
}

/// A turn (the thread's, or the grader's when `graded`) that ended without a reply.
fn turn_ended(err: PipelineError, graded: bool) -> Step {
    let status = match &err {
        PipelineError::Turn { status, .. } | PipelineError::PreviousFailure { status, .. } => {
            Some(*status)
        }
        PipelineError::ShuttingDown => return Step::Stopping,
        _ => None,
    };
    let ending = match status {
        Some(MessageStatus::Interrupted) => Ending::interrupted(graded),
        _ => Ending::failed(format!("a turn failed: {err}")),
    };
    Step::Ended(Ending { graded, ..ending })
}

/// A goal's next stored state.
struct Change {
    iteration: i64,
    state: &'static str,
    explanation: Option<String>,
    finished: bool,
}

impl Change {
    fn grading(goal: &GoalRow) -> Change {
        Change {
            iteration: goal.iteration,
            state: "grading",
            explanation: None,
            finished: false,
        }
    }

    /// After an iteration ended with `result`: the next iteration, or the result.
    fn after(goal: &GoalRow, result: GoalResult, explanation: Option<&str>) -> Change {
        let explanation = explanation.map(str::to_owned);
        if result.is_final() {
            return Change {
                iteration: goal.iteration,
                state: result.as_str(),
                explanation,
                finished: true,
            };
        }
        Change {
            iteration: goal.iteration + 1,
            state: "working",
            explanation,
            finished: false,
        }
    }

    fn as_change(&self) -> GoalChange<'_> {
        GoalChange {
            iteration: self.iteration,
            state: self.state,
            explanation: self.explanation.as_deref(),
            finished: self.finished,
        }
    }
}

fn check_spec(spec: &NewGoalSpec) -> Result<(), GoalError> {
    if spec.description.trim().is_empty() {
        return Err(GoalError::Invalid("description: not blank".into()));
    }
    if spec.rubric.trim().is_empty() {
        return Err(GoalError::Invalid("rubric: not blank".into()));
    }
    if !(1..=MAX_ITERATIONS).contains(&spec.max_iterations) {
        return Err(GoalError::Invalid(format!(
            "max_iterations: 1 to {MAX_ITERATIONS}"
        )));
    }
    Ok(())
}

/// What the thread is asked at an iteration: the task and the rubric first, then the grader's
/// explanation to revise by.
fn work_prompt(goal: &GoalRow) -> String {
    match (goal.iteration, &goal.explanation) {
        (0, _) | (_, None) => format!(
            "{}\n\nWhen you are done, your work is graded against this rubric:\n\n{}",
            goal.description, goal.rubric
        ),
        (_, Some(explanation)) => format!(
            "A grader held your work to the rubric and found it needs revision:\n\n{explanation}\n\nRevise the work so that it meets every criterion of the rubric:\n\n{}",
            goal.rubric
        ),
    }
}

#[cfg(test)]
mod tests;
