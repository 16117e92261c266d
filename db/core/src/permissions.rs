//! The operations on `permissions`, the tool permissions the CLI asked for.

#[allow(async_fn_in_trait)]
pub trait PermissionQueries {}
