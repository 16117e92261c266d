use chrono::Utc;
use plugin_contract::ThreadId;

use super::*;

fn goal(iteration: i64, max_iterations: i64, explanation: Option<&str>) -> GoalRow {
    GoalRow {
        id: "outc_1".into(),
        thread_id: ThreadId::from_string("thr_1"),
        description: "Write fib.py".into(),
        rubric: "- fib(10) is 55".into(),
        max_iterations,
        iteration,
        state: "working".into(),
        explanation: explanation.map(str::to_owned),
        created_at: Utc::now(),
        updated_at: Utc::now(),
        finished_at: None,
    }
}

fn ending(result: GoalResult) -> Ending {
    Ending {
        result,
        explanation: Some("why".into()),
        graded: true,
        usage: GoalUsage::default(),
    }
}

#[test]
fn needs_revision_goes_on_until_the_last_iteration_which_reaches_the_maximum() {
    let first = goal(0, 2, None);
    let event = ending(GoalResult::NeedsRevision).event(&first);
    assert_eq!(event.result, GoalResult::NeedsRevision);
    let next = Change::after(&first, event.result, Some("fix it"));
    assert_eq!(
        (next.iteration, next.state, next.finished),
        (1, "working", false)
    );

    let last = goal(1, 2, Some("fix it"));
    let event = ending(GoalResult::NeedsRevision).event(&last);
    assert_eq!(event.result, GoalResult::MaxIterationsReached);
    let next = Change::after(&last, event.result, Some("still wrong"));
    assert_eq!(
        (next.iteration, next.state, next.finished),
        (1, "max_iterations_reached", true)
    );
}

#[test]
fn a_final_result_finishes_the_goal_at_its_iteration() {
    for result in [
        GoalResult::Satisfied,
        GoalResult::Failed,
        GoalResult::Interrupted,
    ] {
        let event = ending(result).event(&goal(0, 3, None));
        assert_eq!(event.result, result);
        let change = Change::after(&goal(0, 3, None), result, None);
        assert_eq!((change.iteration, change.state), (0, result.as_str()));
        assert!(change.finished);
    }
}

#[test]
fn the_first_prompt_names_the_task_and_rubric_and_later_ones_the_graders_word() {
    let first = work_prompt(&goal(0, 3, None));
    assert!(first.starts_with("Write fib.py"), "{first}");
    assert!(first.contains("- fib(10) is 55"), "{first}");
    let later = work_prompt(&goal(1, 3, Some("fib(10) returned 89")));
    assert!(later.contains("fib(10) returned 89"), "{later}");
    assert!(later.contains("- fib(10) is 55"), "{later}");
}

#[test]
fn a_goal_is_checked_before_it_is_stored() {
    let spec = |description: &str, rubric: &str, max_iterations| NewGoalSpec {
        id: "outc_1".into(),
        description: description.into(),
        rubric: rubric.into(),
        max_iterations,
    };
    assert!(check_spec(&spec("task", "- ok", 3)).is_ok());
    for (bad, field) in [
        (spec(" ", "- ok", 3), "description"),
        (spec("task", "", 3), "rubric"),
        (spec("task", "- ok", 0), "max_iterations"),
        (spec("task", "- ok", MAX_ITERATIONS + 1), "max_iterations"),
    ] {
        let err = check_spec(&bad).expect_err(field).to_string();
        assert!(err.starts_with(field), "{err}");
    }
}

#[test]
fn an_interrupted_turn_ends_the_iteration_interrupted_and_a_stopping_daemon_halts_it() {
    let interrupted = PipelineError::PreviousFailure {
        message_id: crate::store::MessageId::from_string("msg_1"),
        status: MessageStatus::Interrupted,
        error: "interrupted".into(),
    };
    match turn_ended(interrupted, false) {
        Step::Ended(ending) => {
            assert_eq!(ending.result, GoalResult::Interrupted);
            assert!(!ending.graded);
        }
        _ => panic!("an interrupted turn ends the iteration"),
    }
    assert!(matches!(
        turn_ended(PipelineError::ShuttingDown, true),
        Step::Stopping
    ));
    match turn_ended(PipelineError::InvalidInput("bad".into()), true) {
        Step::Ended(ending) => {
            assert_eq!(ending.result, GoalResult::Failed);
            assert!(ending.graded);
        }
        _ => panic!("a failed turn ends the iteration"),
    }
}
