//! The operations on `events`, the per-thread event log.

#[allow(async_fn_in_trait)]
pub trait EventQueries {}
