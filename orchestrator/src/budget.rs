//! Budgets: a thread's own (`maxBudgetUsd`), the key's that sent the message (`dailyUsd`, per
//! UTC day) and the daemon's per UTC day (`budget.daily_usd`).
//!
//! A turn starts only while what was spent is below every budget that applies; the check runs
//! when a message arrives (so the API can answer 402 at once) and again when its turn comes up,
//! where the turn also reserves what it is expected to cost ([`Budgets::reserve`]) until it
//! ends. Turns that start together see each other's reservations, so a dozen turns racing the
//! last cents of a budget do not all start. Harness does the accounting from the usage it stores
//! for every turn: the CLI's own `--max-budget-usd` counts from the process's start, which a warm
//! pool makes meaningless. A turn is not cut short when it crosses a budget half-way: what it
//! costs is known only at its end.
//!
//! The rule, per budget ([`Account`]) of limit `L`: a turn starts when `spent + reserved +
//! estimate <= L`, or when nothing else is reserved there and `spent < L` (one turn at a time on
//! the last of a budget smaller than an estimate). So spending passes `L` by at most what the
//! turns that ran at once cost beyond their estimates, or by one turn's cost when it ran alone.
//! A thread's budget covers the turns of the threads it delegated to (and they to): a delegated
//! child's turn holds its estimate in, and counts against, its own budget, those of whoever
//! delegated to it, its key's, and the day's. What a turn counts against is its [`Charge`].
//! The estimate is the thread's recent cost per turn, or `budget.turn_estimate_usd` for a
//! thread that has not finished a turn since the daemon started. Reservations live in this
//! node's memory: on a cluster, each node reserves for its own turns.
//!
//! The model gateway is the meter of record ([`metered`]): it meters each model request as it
//! happens, what the running turns metered counts with what was spent, a request that finds a
//! budget spent is refused (so a runaway turn stops within one request of its limit), requests
//! in flight hold estimates of their cost, and what no turn's stored cost covers is stored on
//! its own and counted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{NaiveDate, Utc};
use serde::Serialize;

use plugin_contract::ThreadId;

use crate::store::{KeyRow, Store, StoreError, ThreadRow};
use crate::sync::lock;

mod metered;

pub use metered::{Meter, RequestHold, TurnRef};

/// What a budget is kept over. A value, so that the same reservations serve every kind of
/// budget.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Account {
    /// One thread's turns.
    Thread(ThreadId),
    /// The turns one key sent on a UTC day (by its id).
    Key(String, NaiveDate),
    /// Every turn of a UTC day.
    Day(NaiveDate),
}

/// What a turn's cost counts against: its thread and the threads whose budgets its turns also
/// count against (whoever delegated to it, and so on: [`Budgets::charge`]), and the key that
/// sent it, when that key has a daily budget.
#[derive(Clone, Debug)]
pub struct Charge {
    chain: Vec<ThreadRow>,
    key: Option<(String, f64)>,
}

impl Charge {
    /// A turn of `thread` alone: nobody delegated to it, no key sent it.
    pub fn thread(thread: ThreadRow) -> Charge {
        Charge {
            chain: vec![thread],
            key: None,
        }
    }

    /// Also charged to `key`'s daily budget, when it has one.
    pub fn with_key(mut self, key: Option<&KeyRow>) -> Charge {
        self.key = key.and_then(|k| Some((k.id.clone(), k.daily_usd?)));
        self
    }

    fn thread_row(&self) -> &ThreadRow {
        &self.chain[0]
    }
}

/// Which budget refused a turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BudgetKind {
    /// The thread's `maxBudgetUsd`.
    Thread,
    /// The `dailyUsd` of the API key that sent the message.
    Key,
    /// `budget.daily_usd`, over every thread's turns of the UTC day.
    Daily,
}

impl BudgetKind {
    /// The name the API and the metrics use (`thread`, `daily`), as serde writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            BudgetKind::Thread => "thread",
            BudgetKind::Key => "key",
            BudgetKind::Daily => "daily",
        }
    }
}

impl std::fmt::Display for BudgetKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BudgetKind::Thread => "the thread's budget (maxBudgetUsd)",
            BudgetKind::Key => "the key's daily budget (dailyUsd)",
            BudgetKind::Daily => "the daily budget (budget.daily_usd)",
        })
    }
}

/// A turn refused because a budget is spent.
#[derive(Clone, Debug, PartialEq, Serialize, thiserror::Error, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
#[error("{budget} of {limit_usd} USD is spent or held by running turns ({spent_usd:.6} USD); nothing was sent to the model")]
pub struct BudgetExceeded {
    pub budget: BudgetKind,
    pub limit_usd: f64,
    pub spent_usd: f64,
}

/// The budgets every turn is checked against, and the reservations of the turns running now.
#[derive(Clone, Debug, Default)]
pub struct Budgets {
    /// Most USD all turns of a UTC day may cost together.
    pub daily_usd: Option<f64>,
    /// What a turn of a thread with no recent turn is expected to cost.
    pub turn_estimate_usd: f64,
    pub ledger: Arc<Ledger>,
}

/// The reservations of running turns, by account, and each thread's recent cost per turn; and
/// what wakes a model request waiting for one in flight to end ([`RequestHold`]).
#[derive(Debug, Default)]
pub struct Ledger(Mutex<LedgerState>, tokio::sync::Notify);

#[derive(Debug, Default)]
struct LedgerState {
    reserved: HashMap<Account, Held>,
    /// Each thread's recent cost per turn (the mean of the last and the one before, weighted
    /// half and half).
    recent: HashMap<ThreadId, f64>,
    /// What the running turns' model requests cost so far, by account ([`metered`]).
    metered: HashMap<Account, f64>,
    /// The running turns by number (what their [`Meter`]s name): what each counts against and
    /// what it metered.
    running: HashMap<u64, metered::Running>,
    /// Numbers the reservations, so that one ending never takes a later one's entry.
    next_turn: u64,
    /// What the model requests in flight hold, by account ([`RequestHold`]).
    in_flight: HashMap<Account, Held>,
    /// How many times what the ledger counted left it for the store (a turn's meter let go once
    /// its cost was stored, a request's hold given back once its row was): a figure read from
    /// the store before such a move and set beside the ledger after it counts the move twice
    /// or not at all ([`Budgets::before_request`] reads again).
    settled: u64,
    /// The key (and its daily limit) each thread's last turn here was charged to: what its
    /// requests between turns count against.
    last_key: HashMap<ThreadId, Option<(String, f64)>>,
}

/// What the running turns (or the model requests in flight) of one account hold, and how many
/// there are (`turns`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Held {
    usd: f64,
    turns: usize,
}

/// A budget that applies to a turn: its account, kind and limit.
#[derive(Clone, Debug)]
struct Limit {
    account: Account,
    kind: BudgetKind,
    usd: f64,
}

/// A running turn's hold on its budgets: given back when dropped, by when what the turn cost is
/// stored. [`Reservation::settle`] also remembers the cost as the thread's recent one.
#[derive(Debug)]
pub struct Reservation {
    ledger: Arc<Ledger>,
    thread: ThreadId,
    held: Vec<(Account, f64)>,
    /// Its number in [`LedgerState::running`], which its [`Meter`]s name.
    turn: u64,
}

impl Reservation {
    /// The turn ended having cost `cost_usd` (`None`: it never got as far as the API's answer,
    /// and its cost says nothing of the thread's turns).
    pub fn settle(self, cost_usd: Option<f64>) {
        let Some(cost_usd) = cost_usd else {
            return;
        };
        let mut state = lock(&self.ledger.0);
        let recent = state.recent.entry(self.thread.clone()).or_insert(cost_usd);
        *recent = (*recent + cost_usd) / 2.0;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut state = lock(&self.ledger.0);
        state.stop_metering(self.turn);
        for (account, usd) in self.held.drain(..) {
            metered::release(&mut state.reserved, &account, usd);
        }
        drop(state);
        // A request waiting on what the turn metered asks again.
        self.ledger.1.notify_waiters();
    }
}

impl Budgets {
    /// What a turn of `thread` counts against: it and the threads whose budgets its turns also
    /// count against (whoever delegated to it, and so on); [`Charge::with_key`] adds the key.
    pub async fn charge(store: &Store, thread: ThreadRow) -> Result<Charge, StoreError> {
        let mut chain = Vec::new();
        // Only a thread with a parent can have been delegated to.
        if thread.parent_id.is_some() {
            for id in store.delegators(&thread.id).await? {
                chain.push(store.require_thread(&id).await?);
            }
        }
        chain.insert(0, thread);
        Ok(Charge { chain, key: None })
    }

    /// The budgets that apply to a turn charged to `charge` today.
    fn limits(&self, charge: &Charge) -> Vec<Limit> {
        let today = Utc::now().date_naive();
        let own = charge.chain.iter().filter_map(|thread| {
            thread.max_budget_usd.map(|usd| Limit {
                account: Account::Thread(thread.id.clone()),
                kind: BudgetKind::Thread,
                usd,
            })
        });
        let key = charge.key.as_ref().map(|(id, usd)| Limit {
            account: Account::Key(id.clone(), today),
            kind: BudgetKind::Key,
            usd: *usd,
        });
        let daily = self.daily_usd.map(|usd| Limit {
            account: Account::Day(today),
            kind: BudgetKind::Daily,
            usd,
        });
        own.chain(key).chain(daily).collect()
    }

    /// What has been spent in `account`: a thread's, with the turns of the threads it delegated
    /// to.
    async fn spent(store: &Store, account: &Account) -> Result<f64, StoreError> {
        Ok(match account {
            Account::Thread(thread) => store.tree_cost_usd(thread).await?,
            Account::Key(id, day) => store.caller_day_cost(id, *day).await?,
            Account::Day(day) => store.day_usage(*day).await?.cost_usd,
        })
    }

    /// `Err(BudgetExceeded)` inside `Ok` when a budget that applies to a turn charged to
    /// `charge` is spent (with what running turns metered): the thread's own first, then those
    /// of whoever delegated to it, then the key's, then the day's. Reserves nothing.
    pub async fn check(
        &self,
        store: &Store,
        charge: &Charge,
    ) -> Result<Result<(), BudgetExceeded>, StoreError> {
        for limit in self.limits(charge) {
            let stored = Self::spent(store, &limit.account).await?;
            let spent = stored + lock(&self.ledger.0).metered(&limit.account);
            if spent >= limit.usd {
                return Ok(Err(limit.exceeded(spent)));
            }
        }
        Ok(Ok(()))
    }

    /// Reserves what a turn charged to `charge` is expected to cost in every budget that
    /// applies, or says which budget has no room for it (see the rule in the module's doc).
    pub async fn reserve(
        &self,
        store: &Store,
        charge: &Charge,
    ) -> Result<Result<Reservation, BudgetExceeded>, StoreError> {
        let thread = charge.thread_row();
        let limits = self.limits(charge);
        let spent = Self::spent_in(store, &limits).await?;
        let mut state = lock(&self.ledger.0);
        let estimate = state
            .recent
            .get(&thread.id)
            .copied()
            .unwrap_or(self.turn_estimate_usd);
        for (limit, spent) in limits.iter().zip(&spent) {
            let others = state.held(&limit.account);
            let with_own = Held {
                usd: others.usd + estimate,
                turns: others.turns + 1,
            };
            if !with_own.admits(*spent, limit.usd) {
                return Ok(Err(limit.exceeded(spent + others.usd)));
            }
        }
        let mut held = Vec::with_capacity(limits.len());
        let turn = state.start_metering(&thread.id, limits.clone());
        for limit in limits {
            let entry = state.reserved.entry(limit.account.clone()).or_default();
            entry.usd += estimate;
            entry.turns += 1;
            held.push((limit.account, estimate));
        }
        Ok(Ok(Reservation {
            ledger: self.ledger.clone(),
            thread: thread.id.clone(),
            held,
            turn,
        }))
    }

    /// Checks again, once a reserved turn has its process and its permit (it may have waited
    /// while other turns spent past their estimates): `Err` when what was spent since, with
    /// what running turns hold (its own estimate included), no longer fits, unless it runs
    /// alone on a budget not yet spent.
    pub async fn recheck(
        &self,
        store: &Store,
        charge: &Charge,
        reservation: &Reservation,
    ) -> Result<Result<(), BudgetExceeded>, StoreError> {
        let limits = self.limits(charge);
        let spent = Self::spent_in(store, &limits).await?;
        let state = lock(&self.ledger.0);
        for (limit, spent) in limits.iter().zip(&spent) {
            let with_own = state.held(&limit.account);
            if !with_own.admits(*spent, limit.usd) {
                let own = reservation
                    .held
                    .iter()
                    .find(|(account, _)| *account == limit.account)
                    .map_or(0.0, |(_, usd)| *usd);
                return Ok(Err(limit.exceeded(spent + with_own.usd - own)));
            }
        }
        Ok(Ok(()))
    }

    /// What has been spent in each of `limits`' scopes.
    async fn spent_in(store: &Store, limits: &[Limit]) -> Result<Vec<f64>, StoreError> {
        let mut spent = Vec::with_capacity(limits.len());
        for limit in limits {
            spent.push(Self::spent(store, &limit.account).await?);
        }
        Ok(spent)
    }
}

impl LedgerState {
    /// What the running turns of `account` hold.
    fn held(&self, account: &Account) -> Held {
        self.reserved.get(account).copied().unwrap_or_default()
    }
}

impl Held {
    /// The rule, for holds that include the turn in question: it fits with what was `spent`
    /// under `limit`, or it runs alone on a budget not yet spent.
    fn admits(self, spent: f64, limit: f64) -> bool {
        spent + self.usd <= limit || (self.turns <= 1 && spent < limit)
    }
}

impl Limit {
    fn exceeded(&self, spent_usd: f64) -> BudgetExceeded {
        BudgetExceeded {
            budget: self.kind,
            limit_usd: self.usd,
            spent_usd,
        }
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
    use crate::store::NewThread;

    async fn spend(store: &Store, thread: &ThreadRow, cost_usd: f64) {
        crate::store::tests::spend(store, &thread.id, cost_usd).await;
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
            ..Budgets::default()
        };
        assert_eq!(
            budgets
                .check(&store, &Charge::thread(capped.clone()))
                .await
                .unwrap(),
            Ok(())
        );
        spend(&store, &capped, 0.05).await;
        let refused = budgets
            .check(&store, &Charge::thread(capped.clone()))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.budget, BudgetKind::Thread);
        assert_eq!((refused.limit_usd, refused.spent_usd), (0.05, 0.05));
        // The other thread has no budget of its own; the day still has 0.05 left.
        assert_eq!(
            budgets
                .check(&store, &Charge::thread(other.clone()))
                .await
                .unwrap(),
            Ok(())
        );
        spend(&store, &other, 0.06).await;
        let refused = budgets
            .check(&store, &Charge::thread(other.clone()))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(refused.budget, BudgetKind::Daily);
        assert!((refused.spent_usd - 0.11).abs() < 1e-9, "{refused:?}");
        // Without a daily budget the uncapped thread runs on.
        assert_eq!(
            Budgets::default()
                .check(&store, &Charge::thread(other.clone()))
                .await
                .unwrap(),
            Ok(())
        );
    }

    /// A store with `n` threads, and budgets of `daily` USD a day, each turn estimated at
    /// `estimate`.
    async fn racing(n: usize, daily: f64, estimate: f64) -> (Store, Vec<ThreadRow>, Budgets) {
        let store = Store::open(":memory:").await.unwrap();
        let mut threads = Vec::new();
        for _ in 0..n {
            threads.push(store.create_thread(NewThread::default()).await.unwrap());
        }
        let budgets = Budgets {
            daily_usd: Some(daily),
            turn_estimate_usd: estimate,
            ..Budgets::default()
        };
        (store, threads, budgets)
    }

    #[tokio::test]
    async fn turns_starting_together_see_each_others_reservations() {
        let (store, threads, budgets) = racing(3, 0.10, 0.04).await;
        let charges: Vec<Charge> = threads.iter().cloned().map(Charge::thread).collect();
        let reserve = |t: usize| budgets.reserve(&store, &charges[t]);
        let first = reserve(0).await.unwrap().expect("0.04 of 0.10");
        let _second = reserve(1).await.unwrap().expect("0.08 of 0.10");
        let refused = reserve(2).await.unwrap().unwrap_err();
        assert_eq!(refused.budget, BudgetKind::Daily);
        assert!((refused.spent_usd - 0.08).abs() < 1e-9, "held: {refused:?}");
        // A turn that ends gives its hold back, and what it cost is counted instead.
        spend(&store, &threads[0], 0.01).await;
        first.settle(Some(0.01));
        assert!(
            reserve(2).await.unwrap().is_ok(),
            "0.01 spent + 0.04 + 0.04"
        );
    }

    #[tokio::test]
    async fn a_turn_that_waited_is_refused_when_others_spent_past_their_estimates() {
        let (store, threads, budgets) = racing(3, 0.12, 0.04).await;
        let chain = |t: usize| Charge::thread(threads[t].clone());
        let first = budgets.reserve(&store, &chain(0)).await.unwrap().unwrap();
        let _second = budgets.reserve(&store, &chain(1)).await.unwrap().unwrap();
        let waited = budgets.reserve(&store, &chain(2)).await.unwrap().unwrap();
        assert_eq!(
            budgets.recheck(&store, &chain(2), &waited).await.unwrap(),
            Ok(())
        );
        // The first turn ends having cost 0.09, not its 0.04.
        spend(&store, &threads[0], 0.09).await;
        first.settle(Some(0.09));
        let refused = budgets.recheck(&store, &chain(2), &waited).await.unwrap();
        let refused = refused.expect_err("0.09 spent + 0.04 held + its own 0.04 > 0.12");
        // What was spent, and what the other running turn holds.
        assert!((refused.spent_usd - 0.13).abs() < 1e-9, "{refused:?}");
    }

    #[tokio::test]
    async fn a_budget_smaller_than_an_estimate_runs_one_turn_at_a_time_until_spent() {
        let (store, threads, budgets) = racing(2, 0.01, 0.05).await;
        let alone = budgets
            .reserve(&store, &Charge::thread(threads[0].clone()))
            .await
            .unwrap();
        let alone = alone.expect("alone on an unspent budget");
        assert!(budgets
            .reserve(&store, &Charge::thread(threads[1].clone()))
            .await
            .unwrap()
            .is_err());
        spend(&store, &threads[0], 0.02).await;
        alone.settle(Some(0.02));
        let spent = budgets
            .reserve(&store, &Charge::thread(threads[1].clone()))
            .await
            .unwrap();
        assert_eq!(spent.unwrap_err().spent_usd, 0.02);
    }

    #[tokio::test]
    async fn a_keys_turns_share_its_daily_budget_and_other_turns_do_not() {
        let (store, threads, mut budgets) = racing(3, 10.0, 0.04).await;
        budgets.daily_usd = None;
        let made = crate::keys::create(
            &store,
            &crate::keys::KeySpec {
                tenant: "acme".into(),
                scopes: vec![crate::caller::Scope::ThreadsWrite],
                daily_usd: Some(0.05),
                max_concurrent_turns: None,
                rpm: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
        let keyed = |t: usize| Charge::thread(threads[t].clone()).with_key(Some(&made.row));
        let _first = budgets.reserve(&store, &keyed(0)).await.unwrap().unwrap();
        let refused = budgets
            .reserve(&store, &keyed(1))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!((refused.budget, refused.limit_usd), (BudgetKind::Key, 0.05));
        assert!(
            budgets
                .reserve(&store, &Charge::thread(threads[2].clone()))
                .await
                .unwrap()
                .is_ok(),
            "a turn no key sent is not charged to it"
        );
    }

    #[tokio::test]
    async fn a_threads_later_turns_hold_its_recent_cost() {
        let (store, threads, budgets) = racing(2, 0.05, 0.04).await;
        budgets
            .reserve(&store, &Charge::thread(threads[0].clone()))
            .await
            .unwrap()
            .unwrap()
            .settle(Some(0.01));
        // Thread 0 now holds 0.01, thread 1 the default 0.04: both fit in 0.05.
        let _a = budgets
            .reserve(&store, &Charge::thread(threads[0].clone()))
            .await
            .unwrap()
            .unwrap();
        let _b = budgets
            .reserve(&store, &Charge::thread(threads[1].clone()))
            .await
            .unwrap()
            .unwrap();
        // A turn that never reached the API teaches nothing.
        let (store, threads, budgets) = racing(1, 1.0, 0.04).await;
        let reservation = budgets
            .reserve(&store, &Charge::thread(threads[0].clone()))
            .await
            .unwrap()
            .unwrap();
        reservation.settle(None);
        assert!(lock(&budgets.ledger.0).recent.is_empty());
        assert!(lock(&budgets.ledger.0).reserved.is_empty(), "given back");
    }

    #[test]
    fn the_metric_label_is_the_api_name() {
        for kind in [BudgetKind::Thread, BudgetKind::Key, BudgetKind::Daily] {
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
