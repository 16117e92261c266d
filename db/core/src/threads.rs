//! The operations on `threads`.

#[allow(async_fn_in_trait)]
pub trait ThreadQueries {}
