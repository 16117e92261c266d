//! `[budget]`: what the turns may cost (see `crate::budget`).

use serde::Deserialize;

/// What the turns may cost. A thread's own limit is `maxBudgetUsd` on the thread.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BudgetConfig {
    /// Most USD all turns of a UTC day may cost together (flag `--budget-daily-usd`, env
    /// `HARNESS_BUDGET_DAILY_USD`); `None`: no daily limit. A message that would start a turn
    /// once it is spent gets 402.
    pub daily_usd: Option<f64>,
    /// What a turn is expected to cost before its thread has finished one (since the daemon
    /// started): each turn holds its estimate in every budget that applies while it runs, so
    /// turns starting together cannot all spend the same last cents. Later turns of a thread
    /// hold its recent cost per turn instead.
    pub turn_estimate_usd: f64,
}

impl Default for BudgetConfig {
    fn default() -> BudgetConfig {
        BudgetConfig {
            daily_usd: None,
            turn_estimate_usd: 0.05,
        }
    }
}
