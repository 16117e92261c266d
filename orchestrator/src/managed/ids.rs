//! The API's ids: `agent_…` and `env_…` made here, `sesn_…` the thread's own id under the
//! API's prefix (a session is its thread), and the opaque `page` cursors.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};

use plugin_contract::ThreadId;

/// A fresh id with `prefix` (`agent`, `env`).
pub fn generate(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

/// The session id of `thread`.
pub fn session_of(thread: &ThreadId) -> String {
    let id = thread.as_str();
    format!("sesn_{}", id.strip_prefix("thr_").unwrap_or(id))
}

/// The thread of the session `id`; `None` for anything that is not a session id.
pub fn thread_of(id: &str) -> Option<ThreadId> {
    let rest = id.strip_prefix("sesn_")?;
    (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then(|| ThreadId::from_string(format!("thr_{rest}")))
}

/// A `page` cursor naming a row by its time and id.
pub fn keyset(at: DateTime<Utc>, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("k\n{}\n{id}", at.to_rfc3339()))
}

/// The time and id of a [`keyset`] cursor; `None` for anything else.
pub fn parse_keyset(cursor: &str) -> Option<(DateTime<Utc>, String)> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let mut parts = text.splitn(3, '\n');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("k"), Some(at), Some(id)) => Some((
            DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc),
            id.to_owned(),
        )),
        _ => None,
    }
}

/// A `page` cursor after the agent version `version` (versions are listed newest first).
pub fn before_version(version: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("v\n{version}"))
}

/// The version of a [`before_version`] cursor.
pub fn parse_version(cursor: &str) -> Option<i64> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    text.strip_prefix("v\n")?.parse().ok()
}

/// A `page` cursor of a session's events: after the `index`th event of the thread event `row`.
pub fn after_event(row: i64, index: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("e\n{row}\n{index}"))
}

/// The row and index of an [`after_event`] cursor.
pub fn parse_event(cursor: &str) -> Option<(i64, usize)> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let mut parts = text.strip_prefix("e\n")?.splitn(2, '\n');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_session_id_is_its_threads_and_back() {
        let thread = ThreadId::generate();
        let session = session_of(&thread);
        assert!(session.starts_with("sesn_"));
        assert_eq!(thread_of(&session), Some(thread));
        assert_eq!(thread_of("thr_abc"), None);
        assert_eq!(thread_of("sesn_../x"), None);
    }

    #[test]
    fn cursors_read_back_and_refuse_each_other() {
        let at = Utc::now();
        let (back, id) = parse_keyset(&keyset(at, "agent_1")).unwrap();
        assert_eq!(
            (back.timestamp_micros(), id.as_str()),
            (at.timestamp_micros(), "agent_1")
        );
        assert_eq!(parse_version(&before_version(7)), Some(7));
        assert_eq!(parse_event(&after_event(42, 3)), Some((42, 3)));
        assert_eq!(parse_event(&before_version(7)), None);
        assert_eq!(parse_keyset("not a cursor"), None);
    }
}
