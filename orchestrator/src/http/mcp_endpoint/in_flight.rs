//! The `tools/call`s running on the MCP endpoint, daemon-wide, so that a
//! `notifications/cancelled` can stop one.
//!
//! The endpoint is stateless: a cancel arrives on a POST of its own, which may reach us on another
//! connection, and names only the JSON-RPC id of the request it cancels. So calls are kept by
//! that id, scoped by who calls (the request's caller: an API key, an OAuth subject, the
//! operator) and by the client's `Mcp-Session-Id` (handed to it on `initialize`,
//! [`session`](super::session)): a cancel reaches only calls of its own caller and its own
//! session. Ids are the client's own, so two clients of one caller that do not echo a session id
//! may run calls with the same id at once: a cancel that matches more than one call stops none of
//! them (a wrong turn interrupted is worse than a right one left running).
//!
//! Nothing is kept past its call: an entry is removed when its [`Registration`] is dropped, and
//! every call is bounded by its tool's timeout.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::sync::lock;

/// A running call's key: its caller's subject, the client's session id (if any) and the JSON
/// text of the request id.
type Key = (String, Option<String>, String);

/// The running calls.
#[derive(Debug, Default)]
pub struct InFlight {
    calls: Mutex<HashMap<Key, Vec<(u64, CancellationToken)>>>,
    next: AtomicU64,
}

/// What [`InFlight::cancel`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cancelled {
    /// One running call matched; it was told to stop.
    One,
    /// No running call has that id (it finished, or never ran).
    None,
    /// Several clients run a call with that id; none was stopped.
    Ambiguous,
}

/// A call's place in [`InFlight`]; dropping it removes the call.
#[derive(Debug)]
pub struct Registration {
    in_flight: Arc<InFlight>,
    key: Key,
    serial: u64,
    /// Cancelled by a matching `notifications/cancelled`.
    pub cancel: CancellationToken,
}

impl InFlight {
    /// Registers a call of `caller` with JSON-RPC id `request_id` (its JSON text) from
    /// `session`.
    pub fn register(
        self: &Arc<Self>,
        caller: &str,
        session: Option<String>,
        request_id: String,
    ) -> Registration {
        let serial = self.next.fetch_add(1, Ordering::Relaxed);
        let cancel = CancellationToken::new();
        let key = (caller.to_owned(), session, request_id);
        lock(&self.calls)
            .entry(key.clone())
            .or_default()
            .push((serial, cancel.clone()));
        Registration {
            in_flight: self.clone(),
            key,
            serial,
            cancel,
        }
    }

    /// Stops the one running call of `caller` with this id, if exactly one has it.
    pub fn cancel(&self, caller: &str, session: Option<String>, request_id: String) -> Cancelled {
        let calls = lock(&self.calls);
        match calls
            .get(&(caller.to_owned(), session, request_id))
            .map(Vec::as_slice)
        {
            None | Some([]) => Cancelled::None,
            Some([(_, cancel)]) => {
                cancel.cancel();
                Cancelled::One
            }
            Some(_) => Cancelled::Ambiguous,
        }
    }

    /// How many calls are running (for tests).
    pub fn len(&self) -> usize {
        lock(&self.calls).values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many running calls a cancel has told to stop (for tests: a cancel acts before its
    /// `202`, so this tells a cancel that stopped nothing from one still under way).
    pub fn stopping(&self) -> usize {
        lock(&self.calls)
            .values()
            .flatten()
            .filter(|(_, cancel)| cancel.is_cancelled())
            .count()
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut calls = lock(&self.in_flight.calls);
        if let Some(entries) = calls.get_mut(&self.key) {
            entries.retain(|(serial, _)| *serial != self.serial);
            if entries.is_empty() {
                calls.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cancel_stops_the_one_call_with_its_id() {
        let in_flight = Arc::new(InFlight::default());
        let first = in_flight.register("op", None, "1".into());
        let second = in_flight.register("op", None, "2".into());
        assert_eq!(in_flight.cancel("op", None, "2".into()), Cancelled::One);
        assert!(second.cancel.is_cancelled());
        assert!(!first.cancel.is_cancelled());
        assert_eq!(in_flight.cancel("op", None, "3".into()), Cancelled::None);
    }

    #[test]
    fn a_cancel_matching_two_calls_stops_neither() {
        let in_flight = Arc::new(InFlight::default());
        let a = in_flight.register("op", None, "7".into());
        let b = in_flight.register("op", None, "7".into());
        assert_eq!(
            in_flight.cancel("op", None, "7".into()),
            Cancelled::Ambiguous
        );
        assert!(!a.cancel.is_cancelled() && !b.cancel.is_cancelled());
        // A session id tells them apart.
        let c = in_flight.register("op", Some("s".into()), "7".into());
        assert_eq!(
            in_flight.cancel("op", Some("s".into()), "7".into()),
            Cancelled::One
        );
        assert!(c.cancel.is_cancelled());
    }

    #[test]
    fn two_sessions_of_one_caller_each_cancel_their_own() {
        let in_flight = Arc::new(InFlight::default());
        let a = in_flight.register("key", Some("mcs_a".into()), "42".into());
        let b = in_flight.register("key", Some("mcs_b".into()), "42".into());
        assert_eq!(
            in_flight.cancel("key", Some("mcs_c".into()), "42".into()),
            Cancelled::None
        );
        assert_eq!(in_flight.stopping(), 0);
        assert_eq!(
            in_flight.cancel("key", Some("mcs_a".into()), "42".into()),
            Cancelled::One
        );
        assert!(a.cancel.is_cancelled() && !b.cancel.is_cancelled());
        assert_eq!(in_flight.stopping(), 1);
    }

    #[test]
    fn a_cancel_reaches_only_its_own_callers_calls() {
        let in_flight = Arc::new(InFlight::default());
        let mine = in_flight.register("key_a", None, "1".into());
        let theirs = in_flight.register("key_b", None, "1".into());
        assert_eq!(in_flight.cancel("key_c", None, "1".into()), Cancelled::None);
        assert_eq!(in_flight.cancel("key_a", None, "1".into()), Cancelled::One);
        assert!(mine.cancel.is_cancelled() && !theirs.cancel.is_cancelled());
    }

    #[test]
    fn a_finished_call_leaves_nothing_behind() {
        let in_flight = Arc::new(InFlight::default());
        let a = in_flight.register("op", None, "1".into());
        let b = in_flight.register("op", None, "1".into());
        drop(a);
        assert_eq!(in_flight.len(), 1);
        assert_eq!(in_flight.cancel("op", None, "1".into()), Cancelled::One);
        drop(b);
        assert!(in_flight.is_empty());
    }
}
