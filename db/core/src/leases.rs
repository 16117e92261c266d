//! The operations on `leases`: which node owns a thread.

#[allow(async_fn_in_trait)]
pub trait LeaseQueries {}
