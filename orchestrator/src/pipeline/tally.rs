//! What one turn showed ([`TurnTally`]: tool calls, how its session started, what it cost, how
//! long it took).

use std::time::{Duration, Instant};

use claude_cli::{TurnEvent, TurnResult};

use plugin_contract::SessionStart;

use crate::store::Usage;

/// What one turn showed, for its summary line and metrics.
#[derive(Debug)]
pub(super) struct TurnTally {
    /// When it began (after its wait in line).
    since: Instant,
    pub(super) tool_calls: u64,
    /// How the turn's process started; `None` until a process took the turn.
    pub(super) start: Option<SessionStart>,
    /// What the turn cost; `None` until its `result` line came.
    pub(super) usage: Option<Usage>,
    /// No person attends it (`NewMessage::unattended`).
    pub(super) unattended: bool,
}

/// The `result` line's usage in the store's terms.
pub(super) fn usage_of(result: &TurnResult) -> Usage {
    let u = result.usage();
    let count = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    Usage {
        input_tokens: count(u.input_tokens),
        output_tokens: count(u.output_tokens),
        cache_read_tokens: count(u.cache_read_tokens),
        cache_write_tokens: count(u.cache_write_tokens),
        cost_usd: u.cost_usd,
        api_ms: count(u.api_ms),
    }
}

impl TurnTally {
    /// A turn beginning now.
    pub(super) fn new(unattended: bool) -> TurnTally {
        TurnTally {
            since: Instant::now(),
            tool_calls: 0,
            start: None,
            usage: None,
            unattended,
        }
    }

    /// How long since it began.
    pub(super) fn elapsed(&self) -> Duration {
        self.since.elapsed()
    }

    /// The gateway metered `metered` for the turn's model requests: the turn's cost is the larger
    /// of that and what the CLI reported (a request the CLI does not know of is paid for too), and
    /// a turn with no `result` line that spent is charged what it spent.
    pub(super) fn meter(&mut self, metered: f64) {
        // Summed in another order, equal figures differ in their last bits.
        let more = |than: f64| metered > than + than.abs() * 1e-9 + 1e-12;
        match &mut self.usage {
            Some(usage) if more(usage.cost_usd) => usage.cost_usd = metered,
            Some(_) => {}
            None if more(0.0) => {
                self.usage = Some(Usage {
                    cost_usd: metered,
                    ..Usage::default()
                });
            }
            None => {}
        }
    }

    /// Counts the event; returns the tool calls so far.
    pub(super) fn observe(&mut self, event: &TurnEvent) -> u64 {
        if matches!(event, TurnEvent::ToolCallStarted(_)) {
            self.tool_calls += 1;
        }
        self.tool_calls
    }

    pub(super) fn is_warm(&self) -> bool {
        self.start.is_some_and(SessionStart::is_warm)
    }

    /// `warm` or `cold`, for log lines; `cold` when no process took the turn.
    pub(super) fn label(&self) -> &'static str {
        if self.is_warm() {
            "warm"
        } else {
            "cold"
        }
    }
}
