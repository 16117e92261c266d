//! Locking for the std mutexes that guard short, non-async critical sections (maps of live
//! processes, queues, channels).

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Locks `m`, recovering from poisoning: a poisoned lock only means a panic elsewhere while it
/// was held, and every guarded structure here stays consistent between statements.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The permits for long-lived streams (`http.max_streams`): every door's event stream, SSE
/// answer and WebSocket holds one while it runs, so that streams alone cannot take every
/// connection. Cheap to clone; the clones share the permits.
#[derive(Clone, Debug)]
pub struct Streams(Arc<Semaphore>);

/// Every stream the daemon allows is open; each door answers it in its own words.
#[derive(Debug, thiserror::Error)]
#[error("every stream this daemon allows is open (http.max_streams); try again later")]
pub struct StreamsFull;

impl Streams {
    pub fn new(permits: usize) -> Streams {
        Streams(Arc::new(Semaphore::new(permits)))
    }

    /// A permit, held for as long as the stream runs.
    pub fn take(&self) -> Result<OwnedSemaphorePermit, StreamsFull> {
        self.0.clone().try_acquire_owned().map_err(|_| StreamsFull)
    }
}
