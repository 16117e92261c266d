//! `Mcp-Session-Id` on `/mcp`: a label the endpoint hands each client with its `initialize`
//! answer, so that two clients on one credential can be told apart. Clients echo it on every
//! later request (the transport says they must), and [`in_flight`](super::in_flight) scopes
//! calls and cancels by it: without it, two clients of one key running calls with the same
//! JSON-RPC id (small integers, which collide without malice) were one client, and a cancel
//! from either matched both.
//!
//! A label, not a session: nothing is kept, every request is still served on its own, and an id
//! this daemon never issued is taken as given (it names only the calls that carry it, and only
//! within its caller's own). So there is no session to end either: `DELETE` answers `405`, which
//! the transport defines as "this server does not let clients end sessions".

use axum::http::{HeaderMap, HeaderValue};

/// The header, as the transport names it.
pub const HEADER: &str = "mcp-session-id";

/// A new session id: 256 random bits, so that a client cannot name another's calls by guessing
/// (the transport: "globally unique and cryptographically secure").
pub fn issue() -> HeaderValue {
    HeaderValue::from_str(&crate::secret::token("mcs_"))
        .expect("a prefix and base64url are visible ASCII")
}

/// The session id a request carries, if any.
pub fn of(headers: &HeaderMap) -> Option<String> {
    headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_client_gets_its_own_unguessable_id() {
        let (a, b) = (issue(), issue());
        assert_ne!(a, b);
        let a = a.to_str().expect("ASCII");
        assert!(a.starts_with("mcs_") && a.len() == 47, "{a}");
        let mut headers = HeaderMap::new();
        assert_eq!(of(&headers), None);
        headers.insert(HEADER, HeaderValue::from_static("mcs_x"));
        assert_eq!(of(&headers).as_deref(), Some("mcs_x"));
    }
}
