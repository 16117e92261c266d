//! Locking for the std mutexes that guard short, non-async critical sections (maps of live
//! processes, queues, channels).

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `m`, recovering from poisoning: a poisoned lock only means a panic elsewhere while it
/// was held, and every guarded structure here stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
