//! Budgets as the money goes: the model gateway asks before each model request of a thread
//! ([`Budgets::before_request`]) and reports what each one cost ([`Budgets::metered`]).
//!
//! A running turn (one that holds a [`Reservation`]) counts against the limits it reserved in;
//! what its requests cost is added to each of their scopes until the reservation goes, by when
//! the turn's usage is stored. A request of a thread with no running turn (a turn the CLI
//! started before the pipeline took it over) counts against the thread's own budgets, with
//! whoever delegated to it, and the day's. A request is refused when, in any of them, what was
//! spent plus what running turns metered reaches the limit: so a turn stops within one request
//! of the limit, and turns running at once see each other's requests.

use plugin_contract::ThreadId;

use super::{BudgetExceeded, Budgets, LedgerState, Limit, Reservation};
use crate::store::{MessageId, Store, StoreError};
use crate::sync::lock;

/// A running turn, as the ledger meters it.
#[derive(Debug)]
pub(super) struct Running {
    /// Which reservation: a thread's next turn may reserve before its last one let go.
    turn: u64,
    limits: Vec<Limit>,
    /// What its model requests cost so far.
    metered: f64,
    /// The budget a request of it found spent.
    refused: Option<BudgetExceeded>,
    /// Its user message and trace ([`Reservation::on_message`]).
    turn_ref: Option<TurnRef>,
}

/// What the model gateway records a request of a running turn under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnRef {
    pub message: MessageId,
    /// The W3C `traceparent` of the turn's span, when traces are on.
    pub traceparent: Option<String>,
}

impl LedgerState {
    /// A turn of `thread` counting against `limits` starts: its number.
    pub(super) fn start_metering(&mut self, thread: &ThreadId, limits: Vec<Limit>) -> u64 {
        self.next_turn += 1;
        let turn = self.next_turn;
        let running = Running {
            turn,
            limits,
            metered: 0.0,
            refused: None,
            turn_ref: None,
        };
        if let Some(earlier) = self.running.insert(thread.clone(), running) {
            // The earlier turn's requests are over: what they metered is stored by now.
            self.unmeter(&earlier);
        }
        turn
    }

    /// Turn `turn` of `thread` ended (its usage stored): what it metered no longer counts.
    pub(super) fn stop_metering(&mut self, thread: &ThreadId, turn: u64) {
        if self.running.get(thread).is_some_and(|r| r.turn == turn) {
            if let Some(running) = self.running.remove(thread) {
                self.unmeter(&running);
            }
        }
    }

    fn unmeter(&mut self, running: &Running) {
        for limit in &running.limits {
            if let Some(usd) = self.metered.get_mut(&limit.scope) {
                *usd -= running.metered;
                if *usd <= 0.0 {
                    self.metered.remove(&limit.scope);
                }
            }
        }
    }

    /// What the running turns of `scope` metered.
    pub(super) fn metered(&self, scope: &super::Scope) -> f64 {
        self.metered.get(scope).copied().unwrap_or(0.0)
    }
}

impl Budgets {
    /// Whether `thread` may send a model request now: `Err` inside `Ok` when a budget that
    /// applies is spent, counting what running turns metered (see the module doc). A refusal
    /// is remembered for the thread's running turn ([`Reservation::refused`]).
    pub async fn before_request(
        &self,
        store: &Store,
        thread: &ThreadId,
    ) -> Result<Result<(), BudgetExceeded>, StoreError> {
        let running = lock(&self.ledger.0)
            .running
            .get(thread)
            .map(|r| r.limits.clone());
        let limits = match running {
            Some(limits) => limits,
            None => match store.get_thread(thread).await? {
                Some(row) => self.limits(&Budgets::charge(store, row).await?),
                // A spare's reserved thread, not created yet: nothing to charge.
                None => return Ok(Ok(())),
            },
        };
        let spent = Self::spent_in(store, &limits).await?;
        let mut state = lock(&self.ledger.0);
        for (limit, spent) in limits.iter().zip(spent) {
            let spent = spent + state.metered(&limit.scope);
            if spent >= limit.usd {
                let exceeded = limit.exceeded(spent);
                if let Some(running) = state.running.get_mut(thread) {
                    running.refused.get_or_insert(exceeded.clone());
                }
                return Ok(Err(exceeded));
            }
        }
        Ok(Ok(()))
    }

    /// A model request of `thread` cost `usd`: counted in its running turn's scopes until the
    /// turn ends. Nothing when it has none (the CLI's own turn stores its usage when it ends).
    pub fn metered(&self, thread: &ThreadId, usd: f64) {
        let mut state = lock(&self.ledger.0);
        let LedgerState {
            running, metered, ..
        } = &mut *state;
        if let Some(turn) = running.get_mut(thread) {
            turn.metered += usd;
            for limit in &turn.limits {
                *metered.entry(limit.scope.clone()).or_default() += usd;
            }
        }
    }

    /// The message and trace of `thread`'s running turn, when it has one.
    pub fn running_turn(&self, thread: &ThreadId) -> Option<TurnRef> {
        lock(&self.ledger.0)
            .running
            .get(thread)
            .and_then(|r| r.turn_ref.clone())
    }
}

impl Reservation {
    /// The budget a model request of this turn found spent, when the gateway refused one.
    pub fn refused(&self) -> Option<BudgetExceeded> {
        lock(&self.ledger.0)
            .running
            .get(&self.thread)
            .filter(|r| r.turn == self.turn)
            .and_then(|r| r.refused.clone())
    }

    /// The turn is that of `message`, traced under `traceparent`: its model requests are
    /// recorded under them.
    pub fn on_message(&self, message: &MessageId, traceparent: Option<String>) {
        let mut state = lock(&self.ledger.0);
        if let Some(running) = state.running.get_mut(&self.thread) {
            if running.turn == self.turn {
                running.turn_ref = Some(TurnRef {
                    message: message.clone(),
                    traceparent,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Charge;
    use crate::store::NewThread;

    async fn thread_with_budget(store: &Store, usd: f64) -> crate::store::ThreadRow {
        let new = NewThread {
            max_budget_usd: Some(usd),
            ..NewThread::default()
        };
        store.create_thread(new).await.unwrap()
    }

    #[tokio::test]
    async fn a_running_turn_is_refused_once_its_requests_reach_the_limit() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = thread_with_budget(&store, 0.05).await;
        let budgets = Budgets {
            turn_estimate_usd: 0.01,
            ..Budgets::default()
        };
        let charge = Charge::thread(thread.clone());
        let reservation = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        let message = MessageId::from_string("m-1");
        reservation.on_message(&message, None);
        let running = budgets.running_turn(&thread.id).unwrap();
        assert_eq!(running.message, message);
        let ask = || budgets.before_request(&store, &thread.id);
        assert!(ask().await.unwrap().is_ok());
        budgets.metered(&thread.id, 0.03);
        assert!(ask().await.unwrap().is_ok(), "0.03 of 0.05");
        budgets.metered(&thread.id, 0.03);
        let refused = ask().await.unwrap().unwrap_err();
        assert!((refused.spent_usd - 0.06).abs() < 1e-9, "{refused:?}");
        assert_eq!(reservation.refused(), Some(refused));
        // The turn ends with its usage stored: the metered amount gives way to the stored one.
        crate::store::tests::spend(&store, &thread.id, 0.06).await;
        drop(reservation);
        let state = lock(&budgets.ledger.0);
        assert!(state.metered.is_empty() && state.running.is_empty());
    }

    #[tokio::test]
    async fn a_request_with_no_running_turn_counts_against_the_stored_spending() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = thread_with_budget(&store, 0.05).await;
        let budgets = Budgets::default();
        assert!(budgets
            .before_request(&store, &thread.id)
            .await
            .unwrap()
            .is_ok());
        // Metered without a running turn: nothing to count it in.
        budgets.metered(&thread.id, 1.0);
        assert!(lock(&budgets.ledger.0).metered.is_empty());
        crate::store::tests::spend(&store, &thread.id, 0.05).await;
        assert!(budgets
            .before_request(&store, &thread.id)
            .await
            .unwrap()
            .is_err());
        let unknown = ThreadId::from_string("reserved-for-a-spare");
        assert!(budgets
            .before_request(&store, &unknown)
            .await
            .unwrap()
            .is_ok());
    }

    #[tokio::test]
    async fn a_delegated_turns_requests_count_against_its_delegators_budget() {
        let store = Store::open(":memory:").await.unwrap();
        let parent = thread_with_budget(&store, 0.05).await;
        let child = store
            .create_thread(NewThread {
                parent_id: Some(parent.id.clone()),
                ..NewThread::default()
            })
            .await
            .unwrap();
        store
            .record_delegation(&child.id, &parent.id)
            .await
            .unwrap();
        let budgets = Budgets::default();
        let parents = budgets
            .reserve(&store, &Charge::thread(parent.clone()))
            .await
            .unwrap()
            .unwrap();
        let charge = Budgets::charge(&store, child.clone()).await.unwrap();
        let childs = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        budgets.metered(&child.id, 0.05);
        // The parent's next request finds its tree's budget spent by the child's.
        assert!(budgets
            .before_request(&store, &parent.id)
            .await
            .unwrap()
            .is_err());
        drop((childs, parents));
    }
}
