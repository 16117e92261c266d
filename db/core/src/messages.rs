//! The operations on `messages` and the life of a turn.

#[allow(async_fn_in_trait)]
pub trait MessageQueries {}
