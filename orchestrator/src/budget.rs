//! Budgets: a thread's own (`maxBudgetUsd`) and the daemon's per UTC day (`budget.daily_usd`).
//!
//! A turn starts only while what was spent is below every budget that applies; the check runs
//! when a message arrives (so the API can answer 402 at once) and again when its turn comes up
//! (a turn ahead of it in line may have spent the rest). Harness does the accounting from the
//! usage it stores for every turn: the CLI's own `--max-budget-usd` counts from the process's
//! start, which a warm pool makes meaningless. A turn is not cut short when it crosses a budget
//! half-way: what it costs is known only at its end.

use chrono::Utc;
use serde::Serialize;

use crate::store::{Store, StoreError, ThreadRow};

/// Which budget refused a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetKind {
    /// The thread's `maxBudgetUsd`.
    Thread,
    /// `budget.daily_usd`, over every thread's turns of the UTC day.
    Daily,
}

impl BudgetKind {
    /// The name the API and the metrics use (`thread`, `daily`), as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Thread => "thread",
            BudgetKind::Daily => "daily",
        }
    }
}

impl std::fmt::Display for BudgetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BudgetKind::Thread => "the thread's budget (maxBudgetUsd)",
            BudgetKind::Daily => "the daily budget (budget.daily_usd)",
        })
    }
}

/// A turn refused because a budget is spent.
#[derive(Clone, Debug, PartialEq, Serialize, thiserror::Error, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[error("{budget} of {limit_usd} USD is spent ({spent_usd:.6} USD so far); nothing was sent to the model")]
pub struct BudgetExceeded {
    pub budget: BudgetKind,
    pub limit_usd: f64,
    pub spent_usd: f64,
}

/// The budgets every turn is checked against.
#[derive(Clone, Debug, Default)]
pub struct Budgets {
    /// Most USD all turns of a UTC day may cost together.
    pub daily_usd: Option<f64>,
}

impl Budgets {
    /// `Err(BudgetExceeded)` inside `Ok` when a budget that applies to the thread is spent: the
    /// thread's own first, then the day's.
    pub async fn check(
        &self,
        store: &Store,
        thread: &ThreadRow,
    ) -> Result<Result<(), BudgetExceeded>, StoreError> {
        if let Some(limit) = thread.max_budget_usd {
            let spent = store.thread_usage(&thread.id).await?.cost_usd;
            if spent >= limit {
                return Ok(Err(BudgetExceeded {
                    budget: BudgetKind::Thread,
                    limit_usd: limit,
                    spent_usd: spent,
                }));
            }
        }
        if let Some(limit) = self.daily_usd {
            let spent = store.day_usage(Utc::now().date_naive()).await?.cost_usd;
            if spent >= limit {
                return Ok(Err(BudgetExceeded {
                    budget: BudgetKind::Daily,
                    limit_usd: limit,
                    spent_usd: spent,
                }));
            }
        }
        Ok(Ok(()))
    }
}

/// A budget as the API and the config take it: a finite amount, zero or more.
pub fn validate_usd(value: f64, name: &str) -> Result<(), String> {
    if value.is_finite() && value >= 0.0 {
        Ok(())
    } else {
        Err(format!(
            "{name} must be a number of USD, zero or more (got {value})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{NewThread, NewUserMessage, Usage};

    async fn spend(store: &Store, thread: &ThreadRow, cost_usd: f64) {
        let message = store
            .insert_user_message(
                NewUserMessage {
                    thread_id: thread.id.clone(),
                    content: "hi".into(),
                    client_message_id: None,
                    model: None,
                    origin: crate::store::Origin::User,
                },
                None,
            )
            .await
            .unwrap();
        let usage = Usage {
            cost_usd,
            input_tokens: 10,
            ..Usage::default()
        };
        store
            .complete_turn(
                message.message().turn_key(),
                "hello",
                None,
                None,
                None,
                Some(&usage),
                None,
            )
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn a_spent_thread_budget_refuses_and_the_daily_one_counts_every_thread() {
        let store = Store::open(":memory:").await.unwrap();
        let capped = store
            .create_thread(NewThread {
                max_budget_usd: Some(0.05),
                ..NewThread::default()
            })
            .await
            .unwrap();
        let other = store.create_thread(NewThread::default()).await.unwrap();
        let budgets = Budgets {
            daily_usd: Some(0.1),
        };
        assert_eq!(budgets.check(&store, &capped).await.unwrap(), Ok(()));
        spend(&store, &capped, 0.05).await;
        let refused = budgets.check(&store, &capped).await.unwrap().unwrap_err();
        assert_eq!(refused.budget, BudgetKind::Thread);
        assert_eq!((refused.limit_usd, refused.spent_usd), (0.05, 0.05));
        // The other thread has no budget of its own; the day still has 0.05 left.
        assert_eq!(budgets.check(&store, &other).await.unwrap(), Ok(()));
        spend(&store, &other, 0.06).await;
        let refused = budgets.check(&store, &other).await.unwrap().unwrap_err();
        assert_eq!(refused.budget, BudgetKind::Daily);
        assert!((refused.spent_usd - 0.11).abs() < 1e-9, "{refused:?}");
        // Without a daily budget the uncapped thread runs on.
        assert_eq!(
            Budgets::default().check(&store, &other).await.unwrap(),
            Ok(())
        );
    }

    #[test]
    fn the_metric_label_is_the_api_name() {
        for kind in [BudgetKind::Thread, BudgetKind::Daily] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }

    #[test]
    fn budgets_are_finite_and_not_negative() {
        assert!(validate_usd(0.0, "x").is_ok());
        assert!(validate_usd(2.5, "x").is_ok());
        for bad in [-0.01, f64::NAN, f64::INFINITY] {
            assert!(validate_usd(bad, "maxBudgetUsd").is_err(), "{bad}");
        }
    }
}
