//! Budgets as the money goes: the model gateway, the meter of record, asks before each model
//! request of a process ([`Budgets::before_request`]) and reports what each one cost
//! ([`Meter::metered`]).
//!
//! A running turn (one that holds a [`Reservation`]) counts against the limits it reserved in;
//! it hands its [`Meter`] to the process that runs it ([`Reservation::meter`]), and the gateway
//! counts that process's requests through it: what they cost is added to each of the turn's
//! accounts until the turn's cost is stored, and the turn stores the larger of what the CLI
//! reported and what the gateway metered ([`Reservation::close_meter`]), so a request the CLI
//! does not know of (a command's own, with the process's token) is paid for. A meter names its
//! turn by number and keeps nothing alive: once the reservation is dropped it counts nothing.
//! A request with no live meter to count it (one between turns, or one that ended after its
//! turn's meter closed) is stored on its own (`model_requests.alone`) and counts in what its
//! thread, its key and the day spent. Between turns a request counts against the budgets of the
//! thread's last turn here: the thread's own (with whoever delegated to it), that turn's key's
//! and the day's.
//!
//! While a request is in flight it holds an estimate of its cost (its prompt's size and its
//! `max_tokens` at its model's prices: [`crate::gateway`]) in every budget that applies, so
//! requests sent together cannot all pass on the last cents of a budget. The rule per budget of
//! limit `L`, with `spent` what was stored plus what running turns metered: a request goes when
//! `spent + held + estimate <= L`, or when nothing else is in flight there and `spent < L`; it
//! is refused when `spent >= L`; otherwise it waits until a request in flight ends, and asks
//! again. So spending passes `L` by at most one request's cost beyond its estimate.

use std::collections::HashMap;
use std::pin::pin;
use std::sync::Arc;

use claude_cli::ApiUsage;
use plugin_contract::ThreadId;

use super::{Account, BudgetExceeded, Budgets, Held, Ledger, LedgerState, Limit, Reservation};
use crate::store::{MessageId, Store, StoreError};
use crate::sync::lock;

/// The most responses a running turn keeps the metered usage of, for its spans.
const RESPONSES_KEPT: usize = 256;

/// A running turn, as the ledger meters it.
#[derive(Debug)]
pub(super) struct Running {
    /// Its thread: whose next turn takes over from it, and whose requests count against its
    /// key once it ends.
    thread: ThreadId,
    limits: Vec<Limit>,
    /// What its model requests cost so far.
    metered: f64,
    /// Its cost is being stored: what ends from now on is stored on its own.
    closed: bool,
    /// The budget a request of it found spent.
    refused: Option<BudgetExceeded>,
    /// Its user message and trace ([`Reservation::on_message`]).
    turn_ref: Option<TurnRef>,
    /// The usage each of its responses had, by response id, as the gateway read it.
    responses: Vec<(String, ApiUsage)>,
}

/// What the model gateway records a request of a running turn under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TurnRef {
    pub message: MessageId,
    /// The W3C `traceparent` of the turn's span, when traces are on.
    pub traceparent: Option<String>,
}

/// A running turn's meter: the gateway counts the model requests of the process that runs the
/// turn through it ([`Reservation::meter`], handed to the process with its lease). It names
/// the turn by its number and holds none of it: once the turn's reservation is dropped (or a
/// later turn of its thread reserved), it counts nothing, and what it would have counted is
/// stored on its own.
#[derive(Clone)]
pub struct Meter {
    ledger: Arc<Ledger>,
    turn: u64,
}

impl std::fmt::Debug for Meter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Meter").field("turn", &self.turn).finish()
    }
}

/// A model request in flight: the estimate it holds in each budget that applies, given back
/// when dropped (by when what it cost is metered or stored).
#[derive(Debug)]
pub struct RequestHold {
    ledger: Arc<Ledger>,
    held: Vec<(Account, f64)>,
    key: Option<String>,
}

impl RequestHold {
    /// The API key the request is charged to, when one is.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }
}

impl Drop for RequestHold {
    fn drop(&mut self) {
        let mut state = lock(&self.ledger.0);
        for (account, usd) in self.held.drain(..) {
            release(&mut state.in_flight, &account, usd);
        }
        state.settled += 1;
        drop(state);
        self.ledger.1.notify_waiters();
    }
}

/// Takes one hold of `usd` out of `account`'s.
pub(super) fn release(holds: &mut HashMap<Account, Held>, account: &Account, usd: f64) {
    if let Some(held) = holds.get_mut(account) {
        held.usd -= usd;
        held.turns = held.turns.saturating_sub(1);
        if held.turns == 0 {
            holds.remove(account);
        }
    }
}

/// What [`LedgerState::admit`] decided of a request.
enum Admission {
    Go,
    Refused(BudgetExceeded),
    /// It does not fit beside the requests in flight: it waits for one of them to end.
    Wait,
}

impl LedgerState {
    /// A turn of `thread` counting against `limits` starts: its number. A thread's next turn
    /// may reserve before its last one let go: the earlier one's requests are over (what they
    /// metered is stored by now), and its meter counts no more.
    pub(super) fn start_metering(&mut self, thread: &ThreadId, limits: Vec<Limit>) -> u64 {
        self.next_turn += 1;
        let turn = self.next_turn;
        let earlier = self.running.iter().find(|(_, r)| r.thread == *thread);
        if let Some(earlier) = earlier.map(|(turn, _)| *turn) {
            if let Some(earlier) = self.running.remove(&earlier) {
                self.unmeter(&earlier);
            }
        }
        let running = Running {
            thread: thread.clone(),
            limits,
            metered: 0.0,
            closed: false,
            refused: None,
            turn_ref: None,
            responses: Vec::new(),
        };
        self.running.insert(turn, running);
        turn
    }

    /// Turn `turn` ended (its usage stored): what it metered no longer counts, and its key is
    /// the one its thread's requests count against until its next turn.
    pub(super) fn stop_metering(&mut self, turn: u64) {
        if let Some(running) = self.running.remove(&turn) {
            self.unmeter(&running);
            let key = running
                .limits
                .iter()
                .find_map(|limit| match &limit.account {
                    Account::Key(id, _) => Some((id.clone(), limit.usd)),
                    _ => None,
                });
            self.last_key.insert(running.thread, key);
        }
    }

    fn unmeter(&mut self, running: &Running) {
        self.settled += 1;
        for limit in &running.limits {
            if let Some(usd) = self.metered.get_mut(&limit.account) {
                *usd -= running.metered;
                if *usd <= 0.0 {
                    self.metered.remove(&limit.account);
                }
            }
        }
    }

    /// What the running turns of `account` metered.
    pub(super) fn metered(&self, account: &super::Account) -> f64 {
        self.metered.get(account).copied().unwrap_or(0.0)
    }

    /// Whether a request estimated at `estimate` may go now, given what was stored as `spent`
    /// in each of `limits` (the rule in the module doc).
    fn admit(&self, limits: &[Limit], spent: &[f64], estimate: f64) -> Admission {
        let mut wait = false;
        for (limit, stored) in limits.iter().zip(spent) {
            let spent = stored + self.metered(&limit.account);
            if spent >= limit.usd {
                return Admission::Refused(limit.exceeded(spent));
            }
            let held = self
                .in_flight
                .get(&limit.account)
                .copied()
                .unwrap_or_default();
            if held.turns > 0 && spent + held.usd + estimate > limit.usd {
                wait = true;
            }
        }
        if wait {
            Admission::Wait
        } else {
            Admission::Go
        }
    }
}

impl Budgets {
    /// Whether a process of `thread`, holding `meter` if a turn handed it one, may send a model
    /// request expected to cost `estimate` now: `Err` inside `Ok` when a budget that applies
    /// is spent, counting what running turns metered; waits while it does not fit beside the
    /// requests in flight (see the module doc). A refusal is remembered for the meter's turn
    /// ([`Reservation::refused`]).
    pub async fn before_request(
        &self,
        store: &Store,
        thread: &ThreadId,
        meter: Option<&Meter>,
        estimate: f64,
    ) -> Result<Result<RequestHold, BudgetExceeded>, StoreError> {
        let Some(limits) = self.request_limits(store, thread, meter).await? else {
            // A spare's reserved thread, not created yet: nothing to charge.
            return Ok(Ok(self.hold(&mut lock(&self.ledger.0), Vec::new(), 0.0)));
        };
        loop {
            // Registered before the check, so a request ending after it still wakes this one.
            let mut ended = pin!(self.ledger.1.notified());
            ended.as_mut().enable();
            let settled = lock(&self.ledger.0).settled;
            let spent = Self::spent_in(store, &limits).await?;
            match self.decide(meter, &limits, (&spent, settled), estimate) {
                Ok(Some(hold)) => return Ok(Ok(hold)),
                Err(exceeded) => return Ok(Err(exceeded)),
                Ok(None) => {}
            }
            ended.await;
        }
    }

    /// [`LedgerState::admit`] under one lock with what follows: the hold taken when the request
    /// goes (`None`: it waits), a refusal remembered for `meter`'s turn while it runs. `spent`
    /// is what the store said while the ledger's `settled` count was the one given: when the
    /// count moved since, a cost may have left the ledger for the store after the read, so the
    /// request waits (it was woken already) and reads again.
    fn decide(
        &self,
        meter: Option<&Meter>,
        limits: &[Limit],
        (spent, settled): (&[f64], u64),
        estimate: f64,
    ) -> Result<Option<RequestHold>, BudgetExceeded> {
        let mut state = lock(&self.ledger.0);
        if state.settled != settled {
            return Ok(None);
        }
        match state.admit(limits, spent, estimate) {
            Admission::Go => Ok(Some(self.hold(&mut state, limits.to_vec(), estimate))),
            Admission::Wait => Ok(None),
            Admission::Refused(exceeded) => {
                if let Some(running) = meter.and_then(|m| state.running.get_mut(&m.turn)) {
                    running.refused.get_or_insert(exceeded.clone());
                }
                Err(exceeded)
            }
        }
    }

    /// The budgets a request of `thread` counts against: those of `meter`'s turn while it runs,
    /// else those of the thread's last turn here (its own, whoever delegated to it, that turn's
    /// key's, the day's); `None` for a thread not created yet.
    async fn request_limits(
        &self,
        store: &Store,
        thread: &ThreadId,
        meter: Option<&Meter>,
    ) -> Result<Option<Vec<Limit>>, StoreError> {
        let (running, last_key) = {
            let state = lock(&self.ledger.0);
            let running = meter.and_then(|m| state.running.get(&m.turn));
            let running = running.map(|r| r.limits.clone());
            (running, state.last_key.get(thread).cloned().flatten())
        };
        if running.is_some() {
            return Ok(running);
        }
        let Some(row) = store.get_thread(thread).await? else {
            return Ok(None);
        };
        let mut charge = Budgets::charge(store, row).await?;
        charge.key = last_key;
        Ok(Some(self.limits(&charge)))
    }

    /// Holds `estimate` in each of `limits`.
    fn hold(&self, state: &mut LedgerState, limits: Vec<Limit>, estimate: f64) -> RequestHold {
        let mut key = None;
        let mut held = Vec::with_capacity(limits.len());
        for limit in limits {
            if let Account::Key(id, _) = &limit.account {
                key = Some(id.clone());
            }
            let entry = state.in_flight.entry(limit.account.clone()).or_default();
            entry.usd += estimate;
            entry.turns += 1;
            held.push((limit.account, estimate));
        }
        RequestHold {
            ledger: self.ledger.clone(),
            held,
            key,
        }
    }
}

impl Meter {
    /// A model request of the meter's process cost `usd` (its response `response`, with its
    /// usage): counted in the turn's accounts until the turn's cost is stored. `false` when the
    /// turn no longer counts it (its meter closed, or it ended): it is then stored on its own
    /// (`model_requests.alone`).
    pub fn metered(&self, usd: f64, response: Option<(String, ApiUsage)>) -> bool {
        let mut state = lock(&self.ledger.0);
        let LedgerState {
            running, metered, ..
        } = &mut *state;
        let Some(turn) = running.get_mut(&self.turn).filter(|turn| !turn.closed) else {
            return false;
        };
        turn.metered += usd;
        for limit in &turn.limits {
            *metered.entry(limit.account.clone()).or_default() += usd;
        }
        if let Some(response) = response {
            if turn.responses.len() < RESPONSES_KEPT {
                turn.responses.push(response);
            }
        }
        true
    }

    /// The message and trace of the meter's turn, while it runs.
    pub fn turn_ref(&self) -> Option<TurnRef> {
        lock(&self.ledger.0)
            .running
            .get(&self.turn)
            .and_then(|r| r.turn_ref.clone())
    }

    /// The usage the gateway read from response `id` of the meter's turn, while it runs.
    pub fn response_usage(&self, id: &str) -> Option<ApiUsage> {
        let state = lock(&self.ledger.0);
        let running = state.running.get(&self.turn)?;
        running
            .responses
            .iter()
            .rev()
            .find(|(response, _)| response == id)
            .map(|(_, usage)| usage.clone())
    }
}

impl Reservation {
    /// The turn's meter, for the process that runs it ([`crate::pool::Lease::meter_with`]):
    /// the gateway counts that process's requests through it while the turn runs.
    pub fn meter(&self) -> Meter {
        Meter {
            ledger: self.ledger.clone(),
            turn: self.turn,
        }
    }

    /// The budget a model request of this turn found spent, when the gateway refused one.
    pub fn refused(&self) -> Option<BudgetExceeded> {
        lock(&self.ledger.0)
            .running
            .get(&self.turn)
            .and_then(|r| r.refused.clone())
    }

    /// The turn is that of `message`, traced under `traceparent`: its model requests are
    /// recorded under them.
    pub fn on_message(&self, message: &MessageId, traceparent: Option<String>) {
        let mut state = lock(&self.ledger.0);
        if let Some(running) = state.running.get_mut(&self.turn) {
            running.turn_ref = Some(TurnRef {
                message: message.clone(),
                traceparent,
            });
        }
    }

    /// The turn's cost is about to be stored: what its model requests cost so far, as the
    /// gateway metered them. A request that ends from now on is stored on its own.
    pub fn close_meter(&self) -> f64 {
        let mut state = lock(&self.ledger.0);
        match state.running.get_mut(&self.turn) {
            Some(running) => {
                running.closed = true;
                running.metered
            }
            None => 0.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::Charge;
    use crate::store::{NewModelRequest, NewThread};

    async fn thread_with_budget(store: &Store, usd: f64) -> crate::store::ThreadRow {
        let new = NewThread {
            max_budget_usd: Some(usd),
            ..NewThread::default()
        };
        store.create_thread(new).await.unwrap()
    }

    /// A model request the gateway stores with no turn to count it.
    fn alone(thread: &ThreadId, cost_usd: f64, key_id: Option<&str>) -> NewModelRequest {
        NewModelRequest {
            thread_id: thread.clone(),
            message_id: None,
            model: None,
            status: 200,
            input_tokens: 0,
            output_tokens: 0,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cost_usd,
            first_byte_ms: 0,
            ms: 0,
            key_id: key_id.map(str::to_owned),
            alone: true,
        }
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
        let meter = reservation.meter();
        let running = meter.turn_ref().unwrap();
        assert_eq!(running.message, message);
        let ask = || budgets.before_request(&store, &thread.id, Some(&meter), 0.0);
        assert!(ask().await.unwrap().is_ok());
        assert!(meter.metered(0.03, None));
        assert!(ask().await.unwrap().is_ok(), "0.03 of 0.05");
        assert!(meter.metered(0.03, None));
        let refused = ask().await.unwrap().unwrap_err();
        assert!((refused.spent_usd - 0.06).abs() < 1e-9, "{refused:?}");
        assert_eq!(reservation.refused(), Some(refused));
        // The turn's cost is stored: the metered amount gives way to the stored one, and what
        // ends after the meter closed is no longer the turn's.
        assert!((reservation.close_meter() - 0.06).abs() < 1e-9);
        assert!(!meter.metered(0.01, None), "the meter is closed");
        crate::store::tests::spend(&store, &thread.id, 0.06).await;
        drop(reservation);
        let state = lock(&budgets.ledger.0);
        assert!(state.metered.is_empty() && state.running.is_empty());
        assert!(
            state.in_flight.is_empty(),
            "every request let go of its estimate"
        );
    }

    #[tokio::test]
    async fn a_request_with_no_running_turn_is_stored_alone_and_counted() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = thread_with_budget(&store, 0.05).await;
        let budgets = Budgets::default();
        let hold = budgets.before_request(&store, &thread.id, None, 0.01).await;
        assert!(hold.unwrap().is_ok());
        // No turn handed the process a meter: the gateway stores it on its own, and it counts.
        assert!(lock(&budgets.ledger.0).metered.is_empty());
        store
            .insert_model_request(&alone(&thread.id, 0.05, None))
            .await
            .unwrap();
        assert!((store.tree_cost_usd(&thread.id).await.unwrap() - 0.05).abs() < 1e-9);
        let today = chrono::Utc::now().date_naive();
        let day = store.day_usage(today).await.unwrap();
        assert!(
            (day.cost_usd - 0.05).abs() < 1e-9 && day.input_tokens == 0,
            "{day:?}"
        );
        let refused = budgets.before_request(&store, &thread.id, None, 0.0).await;
        assert!(refused.unwrap().is_err(), "the thread's budget is spent");
        let unknown = ThreadId::from_string("reserved-for-a-spare");
        let spare = budgets.before_request(&store, &unknown, None, 1.0).await;
        assert!(spare.unwrap().is_ok());
    }

    #[tokio::test]
    async fn between_turns_a_request_counts_against_the_last_turns_key() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = store.create_thread(NewThread::default()).await.unwrap();
        let budgets = Budgets::default();
        let mut charge = Charge::thread(thread.clone());
        charge.key = Some(("key_a".into(), 0.05));
        drop(budgets.reserve(&store, &charge).await.unwrap().unwrap());
        let hold = budgets.before_request(&store, &thread.id, None, 0.0).await;
        assert_eq!(hold.unwrap().unwrap().key(), Some("key_a"));
        store
            .insert_model_request(&alone(&thread.id, 0.05, Some("key_a")))
            .await
            .unwrap();
        let today = chrono::Utc::now().date_naive();
        assert!((store.caller_day_cost("key_a", today).await.unwrap() - 0.05).abs() < 1e-9);
        let refused = budgets.before_request(&store, &thread.id, None, 0.0).await;
        assert_eq!(
            refused.unwrap().unwrap_err().budget,
            super::super::BudgetKind::Key
        );
    }

    #[tokio::test]
    async fn requests_in_flight_hold_their_estimates_and_the_next_waits_for_them() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = thread_with_budget(&store, 1.0).await;
        let budgets = Budgets::default();
        let first = budgets.before_request(&store, &thread.id, None, 0.6).await;
        let first = first.unwrap().unwrap();
        // Alone on a budget not yet spent, a request goes even when its estimate is larger.
        let (tx, mut admitted) = tokio::sync::mpsc::unbounded_channel();
        let waiting = {
            let (budgets, store, id) = (budgets.clone(), store.clone(), thread.id.clone());
            tokio::spawn(async move {
                let hold = budgets
                    .before_request(&store, &id, None, 0.6)
                    .await
                    .unwrap();
                tx.send(()).unwrap();
                hold
            })
        };
        // The second does not fit beside the first: it waits until the first ends, and the
        // first's cost is stored by then.
        tokio::task::yield_now().await;
        assert!(
            admitted.try_recv().is_err(),
            "0.6 + 0.6 of 1.0 does not go at once"
        );
        store
            .insert_model_request(&alone(&thread.id, 1.2, None))
            .await
            .unwrap();
        drop(first);
        let second = waiting.await.unwrap();
        assert_eq!(second.unwrap_err().budget, super::super::BudgetKind::Thread);
        assert!(lock(&budgets.ledger.0).in_flight.is_empty());
    }

    /// A turn's meter let go between the store's read and the decision: its $0.60 was in neither
    /// figure the request saw, and it must read again rather than go.
    #[tokio::test]
    async fn a_cost_that_left_the_ledger_after_the_read_is_read_again() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = thread_with_budget(&store, 1.0).await;
        let budgets = Budgets::default();
        let charge = Charge::thread(thread.clone());
        let turn = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        assert!(turn.meter().metered(0.6, None));
        let limits = budgets.limits(&charge);
        let settled = lock(&budgets.ledger.0).settled;
        let spent = Budgets::spent_in(&store, &limits).await.unwrap();
        // The turn ends: its cost is stored (here, as a request row), its meter let go.
        store
            .insert_model_request(&alone(&thread.id, 0.6, None))
            .await
            .unwrap();
        drop(turn);
        let stale = budgets.decide(None, &limits, (&spent, settled), 0.6);
        assert!(matches!(stale, Ok(None)), "a stale read does not go");
        let hold = budgets.before_request(&store, &thread.id, None, 0.6).await;
        let hold = hold.unwrap();
        assert!(hold.is_ok(), "read again: 0.6 of 1.0 spent, alone it goes");
        let settled = lock(&budgets.ledger.0).settled;
        let spent = Budgets::spent_in(&store, &limits).await.unwrap();
        let fresh = budgets.decide(None, &limits, (&spent, settled), 0.6);
        assert!(
            matches!(fresh, Ok(None)),
            "beside the one in flight it waits"
        );
        drop(hold);
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
        assert!(childs.meter().metered(0.05, None));
        // The parent's next request finds its tree's budget spent by the child's.
        assert!(budgets
            .before_request(&store, &parent.id, Some(&parents.meter()), 0.0)
            .await
            .unwrap()
            .is_err());
        drop((childs, parents));
    }

    #[tokio::test]
    async fn a_stale_meter_counts_nothing_into_an_ended_turn() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = store.create_thread(NewThread::default()).await.unwrap();
        let budgets = Budgets::default();
        let mut charge = Charge::thread(thread.clone());
        charge.key = Some(("key_a".into(), 1.0));
        let ended = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        ended.on_message(&MessageId::from_string("m-1"), None);
        let stale = ended.meter();
        assert!(stale.metered(0.01, Some(("msg_1".into(), ApiUsage::default()))));
        drop(ended);
        // The turn ended: its handle meters nothing, names no turn, reads no response.
        assert!(!stale.metered(0.02, None));
        assert_eq!(stale.turn_ref(), None);
        assert_eq!(stale.response_usage("msg_1"), None);
        assert!(lock(&budgets.ledger.0).metered.is_empty());
        // Nor into the thread's next turn; its requests count as between turns (the last key).
        let next = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        assert!(!stale.metered(0.03, None));
        let hold = budgets.before_request(&store, &thread.id, Some(&stale), 0.0);
        assert_eq!(hold.await.unwrap().unwrap().key(), Some("key_a"));
        assert_eq!(next.close_meter(), 0.0);
    }

    #[tokio::test]
    async fn two_turns_of_a_thread_in_a_row_each_meter_their_own() {
        let store = Store::open(":memory:").await.unwrap();
        let thread = store.create_thread(NewThread::default()).await.unwrap();
        let budgets = Budgets::default();
        let charge = Charge::thread(thread.clone());
        let first = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        assert!(first.meter().metered(0.01, None));
        assert!((first.close_meter() - 0.01).abs() < 1e-9);
        drop(first);
        let second = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        let meter = second.meter();
        assert!(meter.metered(0.02, Some(("msg_2".into(), ApiUsage::default()))));
        assert!(meter.response_usage("msg_2").is_some());
        assert!((second.close_meter() - 0.02).abs() < 1e-9);
        drop(second);
        // A turn that reserves before the last one let go takes over: the earlier meter stops.
        let earlier = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        assert!(earlier.meter().metered(0.04, None));
        let later = budgets.reserve(&store, &charge).await.unwrap().unwrap();
        assert!(!earlier.meter().metered(0.05, None));
        assert!(later.meter().metered(0.06, None));
        assert_eq!(earlier.close_meter(), 0.0);
        assert!((later.close_meter() - 0.06).abs() < 1e-9);
        drop((earlier, later));
        assert!(lock(&budgets.ledger.0).running.is_empty());
    }
}
