//! The AIMD arithmetic with time passed in, and the gate's line: first come first served, every
//! way out gives the place back.

use std::time::{Duration, Instant};

use claude_cli::{ApiRetry, RateLimit, TurnEvent, TurnResult};

use super::*;

const COOLDOWN: Duration = Duration::from_secs(2);

fn retry(status: u64) -> TurnEvent {
    TurnEvent::ApiRetry(ApiRetry {
        attempt: 1,
        max_retries: 2,
        retry_delay_ms: 500,
        error: "overloaded".into(),
        status: Some(status),
    })
}

fn answered() -> TurnResult {
    TurnResult {
        subtype: "success".into(),
        ..Default::default()
    }
}

fn throttle(max: usize) -> (Throttle, ThrottleMetrics) {
    let metrics = ThrottleMetrics::default();
    let settings = ThrottleSettings {
        enabled: true,
        max,
        min: 1,
        // Long enough that no two decreases in one test fall in different windows by accident.
        cooldown: Duration::from_secs(3600),
    };
    (Throttle::new(&settings, metrics.clone()), metrics)
}

fn now_permit(throttle: &Throttle) -> Permit {
    match throttle.admit() {
        Admission::Now(permit) => permit,
        Admission::Queued(q) => panic!("queued at {} (limit {})", q.position, q.limit),
    }
}

fn queued(throttle: &Throttle) -> Queued {
    match throttle.admit() {
        Admission::Now(_) => panic!("admitted at once"),
        Admission::Queued(queued) => queued,
    }
}

#[test]
fn a_signal_halves_the_limit_once_per_cooldown_down_to_the_floor() {
    let t0 = Instant::now();
    let mut aimd = Aimd::new(1, 8, COOLDOWN);
    assert_eq!(aimd.limit(), 8, "starts at the ceiling");
    assert!(aimd.back_off(t0));
    assert_eq!(aimd.limit(), 4);
    // The rest of the cluster: retries of other turns within the window count once.
    for ms in [1, 500, 1000, 1999] {
        assert!(!aimd.back_off(t0 + Duration::from_millis(ms)));
    }
    assert_eq!(aimd.limit(), 4);
    assert!(aimd.back_off(t0 + COOLDOWN));
    assert_eq!(aimd.limit(), 2);
    aimd.back_off(t0 + 2 * COOLDOWN);
    assert_eq!(aimd.limit(), 1);
    aimd.back_off(t0 + 3 * COOLDOWN);
    assert_eq!(aimd.limit(), 1, "never below the floor");
}

#[test]
fn halving_rounds_up_and_respects_a_higher_floor() {
    let t0 = Instant::now();
    let mut aimd = Aimd::new(2, 5, COOLDOWN);
    aimd.back_off(t0);
    assert_eq!(aimd.limit(), 3, "5 → 3, rounded up");
    aimd.back_off(t0 + COOLDOWN);
    assert_eq!(aimd.limit(), 2);
    aimd.back_off(t0 + 2 * COOLDOWN);
    assert_eq!(aimd.limit(), 2, "the floor is min");
}

#[test]
fn successes_add_one_per_limit_successes_up_to_the_ceiling() {
    let t0 = Instant::now();
    let mut aimd = Aimd::new(1, 4, COOLDOWN);
    aimd.back_off(t0);
    aimd.back_off(t0 + COOLDOWN);
    assert_eq!(aimd.limit(), 1);
    let mut seen = vec![];
    for _ in 0..8 {
        aimd.succeeded();
        seen.push(aimd.limit());
    }
    // 1 success to reach 2, 2 more to reach 3, 3 more to reach 4, then the ceiling holds.
    assert_eq!(seen, [2, 2, 3, 3, 3, 4, 4, 4]);
}

#[test]
fn a_decrease_forfeits_the_credit_gathered_toward_an_increase() {
    let t0 = Instant::now();
    let mut aimd = Aimd::new(1, 8, COOLDOWN);
    aimd.back_off(t0); // 4
    for _ in 0..3 {
        aimd.succeeded();
    }
    aimd.back_off(t0 + COOLDOWN); // 2
    aimd.succeeded();
    assert_eq!(aimd.limit(), 2, "one success of the two needed");
    aimd.succeeded();
    assert_eq!(aimd.limit(), 3);
}

#[tokio::test]
async fn turns_over_the_limit_wait_in_arrival_order() {
    let (throttle, metrics) = throttle(2);
    let first = now_permit(&throttle);
    let _second = now_permit(&throttle);
    let third = queued(&throttle);
    let fourth = queued(&throttle);
    assert_eq!(
        (third.position, third.limit, third.running),
        (1, 2, 2),
        "the first in line"
    );
    assert_eq!(fourth.position, 2);
    let waiting = |q: &Queued| q.granted.is_some();
    assert!(waiting(&third) && waiting(&fourth));

    drop(first);
    let third = tokio::time::timeout(Duration::from_secs(1), third.wait())
        .await
        .expect("the head of the line gets the freed place");
    let still = queued(&throttle);
    assert_eq!(still.position, 2, "behind the fourth: no overtaking");
    drop(third);
    let _fourth = tokio::time::timeout(Duration::from_secs(1), fourth.wait())
        .await
        .expect("then the next");
    let text = crate::metrics::Metrics::new(
        &Default::default(),
        &Default::default(),
        &Default::default(),
        &Default::default(),
        &Default::default(),
        &metrics,
        &Default::default(),
    )
    .render()
    .unwrap();
    assert!(text.contains("harness_turns_throttled_total 3"), "{text}");
    assert!(text.contains("harness_turns_running 2"), "{text}");
}

#[tokio::test]
async fn leaving_the_line_or_dropping_a_granted_place_frees_it() {
    let (throttle, _) = throttle(1);
    let running = now_permit(&throttle);
    let gives_up = queued(&throttle);
    let behind = queued(&throttle);
    drop(gives_up); // interrupted while waiting
    drop(running);
    // The place went to `behind`, not to the one that left.
    let held = tokio::time::timeout(Duration::from_secs(1), behind.wait())
        .await
        .expect("granted");
    let granted_never_taken = queued(&throttle);
    drop(held);
    // Granted now (the holder left), but dropped before it was taken: the place comes back.
    drop(granted_never_taken);
    let _again = now_permit(&throttle);
}

#[tokio::test]
async fn signals_lower_the_limit_and_clean_turns_raise_it() {
    let (throttle, _) = throttle(4);
    let mut permits: Vec<Permit> = (0..4).map(|_| now_permit(&throttle)).collect();
    permits[0].observe(&retry(529));
    assert_eq!(throttle.limit(), 2);
    // The same cluster, from other turns and a 429: inside the cooldown, no further decrease.
    permits[1].observe(&retry(429));
    permits[2].observe_result(&TurnResult {
        api_error_status: Some(529),
        is_error: true,
        ..Default::default()
    });
    assert_eq!(throttle.limit(), 2);
    // A retry of another kind (a dropped connection, a 500) is not a rate-limit signal.
    permits[3].observe(&TurnEvent::ApiRetry(ApiRetry {
        attempt: 1,
        max_retries: 2,
        retry_delay_ms: 500,
        error: "unknown".into(),
        status: None,
    }));
    permits[3].observe_result(&answered());
    // Four running over a limit of two: nothing new starts until two have ended.
    let waiter = queued(&throttle);
    drop(permits.drain(..3).collect::<Vec<_>>());
    assert_eq!(
        throttle.limit(),
        2,
        "turns that were pushed back raise nothing"
    );
    let mut waited = tokio::time::timeout(Duration::from_secs(1), waiter.wait())
        .await
        .expect("granted once running < limit");
    drop(permits); // the clean one: 1 of 2 successes needed
    assert_eq!(throttle.limit(), 2);
    waited.observe_result(&answered());
    drop(waited);
    assert_eq!(throttle.limit(), 3);
}

#[tokio::test]
async fn a_rejected_rate_limit_is_a_signal_an_allowed_one_is_not() {
    let (throttle, _) = throttle(4);
    let mut permit = now_permit(&throttle);
    let event = |status: &str| {
        TurnEvent::RateLimit(RateLimit {
            status: status.into(),
            resets_at: Some(1),
            rate_limit_type: Some("five_hour".into()),
            utilization: Some(0.95),
            surpassed_threshold: Some(0.9),
            is_using_overage: Some(false),
        })
    };
    permit.observe(&event("allowed_warning"));
    assert_eq!(throttle.limit(), 4);
    permit.observe(&event("rejected"));
    assert_eq!(throttle.limit(), 2);
}

#[tokio::test]
async fn nested_turns_never_wait_and_disabled_throttles_never_lower() {
    let (throttle, _) = throttle(1);
    let _parent = now_permit(&throttle);
    let _child = throttle.admit_nested();
    let _next = queued(&throttle);

    let settings = ThrottleSettings {
        enabled: false,
        max: 2,
        min: 1,
        cooldown: Duration::ZERO,
    };
    let off = Throttle::new(&settings, ThrottleMetrics::default());
    let mut permit = now_permit(&off);
    permit.observe(&retry(529));
    assert_eq!(off.limit(), 2);
}

/// A `retry-after` holds new turns in line until it passes, even under the limit; then they
/// go, first in line first. Nested turns and the running ones are not held.
#[tokio::test(start_paused = true)]
async fn a_retry_after_holds_new_turns_until_it_passes() {
    let (throttle, _metrics) = throttle(4);
    let running = match throttle.admit() {
        Admission::Now(permit) => permit,
        Admission::Queued(_) => panic!("nothing held it yet"),
    };
    throttle.upstream(Some(Duration::from_secs(5)));
    // Halved once (4 → 2), and one of the two places is free, but the pause holds it.
    let Admission::Queued(first) = throttle.admit() else {
        panic!("a new turn waits out the retry-after");
    };
    let Admission::Queued(second) = throttle.admit() else {
        panic!("and so does the next");
    };
    // A nested turn is never held; its place comes back, and the pause still holds the line.
    drop(throttle.admit_nested());
    let first = tokio::spawn(first.wait());
    tokio::time::sleep(Duration::from_millis(4900)).await;
    assert!(!first.is_finished(), "still paused");
    let first = tokio::time::timeout(Duration::from_millis(200), first)
        .await
        .expect("granted once the pause is over")
        .unwrap();
    // The limit is 2 and both places are taken: the second waits for one.
    let second = tokio::spawn(second.wait());
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!second.is_finished());
    drop(running);
    tokio::time::timeout(Duration::from_secs(1), second)
        .await
        .expect("a place came free")
        .unwrap();
    drop(first);
    // Without a retry-after, a signal only lowers the limit (inside the cooldown: not even that).
    throttle.upstream(None);
    assert!(matches!(throttle.admit(), Admission::Now(_)));
}
