//! Opaque cursors: where the next page starts, base64url so clients treat them as tokens. A
//! thread page's names the last thread shown by its last activity and id (the list's order); a
//! message page's the last message's `seq`. Both stay valid while rows are added: a new thread
//! or message sorts before them, never into a page already read.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use chrono::{DateTime, Utc};

use plugin_contract::ThreadId;

use crate::store::time_text;

/// The cursor after a thread last active at `at`.
pub fn after_thread(at: DateTime<Utc>, id: &ThreadId) -> String {
    keyset("t", at, id.as_str())
}

/// `(last activity as stored, thread id)`; `None` for anything not made by [`after_thread`].
pub fn parse_thread(cursor: &str) -> Option<(String, String)> {
    parse_keyset("t", cursor)
}

/// A cursor of kind `kind` naming a row by its time (as stored) and id.
fn keyset(kind: &str, at: DateTime<Utc>, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{kind}\n{}\n{id}", time_text(at)))
}

/// `(time as stored, id)` of a [`keyset`] cursor of kind `kind`; `None` for anything else.
fn parse_keyset(kind: &str, cursor: &str) -> Option<(String, String)> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    let mut parts = text.splitn(3, '\n');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(k), Some(at), Some(id)) if k == kind && DateTime::parse_from_rfc3339(at).is_ok() => {
            Some((at.to_owned(), id.to_owned()))
        }
        _ => None,
    }
}

/// The cursor of a search's page starting `offset` threads in (a search ranks, so its pages
/// are counted; a thread that starts to match meanwhile can shift them by one).
pub fn search_from(offset: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("s\n{offset}"))
}

/// The offset of [`search_from`]; `None` for anything else.
pub fn parse_search(cursor: &str) -> Option<i64> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    text.strip_prefix("s\n")?
        .parse()
        .ok()
        .filter(|n: &i64| *n >= 0)
}

/// The cursor before the message `seq`.
pub fn before_message(seq: i64) -> String {
    URL_SAFE_NO_PAD.encode(format!("m\n{seq}"))
}

/// The `seq` of [`before_message`]; `None` for anything else.
pub fn parse_message(cursor: &str) -> Option<i64> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(cursor).ok()?).ok()?;
    text.strip_prefix("m\n")?.parse().ok()
}

/// The cursor next to a row of a list ordered by `(created_at, id)` (permissions, webhook
/// deliveries): its creation time as stored and its id.
pub fn at_row(at: DateTime<Utc>, id: &str) -> String {
    keyset("r", at, id)
}

/// `(creation time as stored, id)` of [`at_row`]; `None` for anything else.
pub fn parse_row(cursor: &str) -> Option<(String, String)> {
    parse_keyset("r", cursor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_read_back_and_nothing_else_does() {
        let at = DateTime::parse_from_rfc3339("2026-11-26T10:00:00.123456Z")
            .unwrap()
            .with_timezone(&Utc);
        let id = ThreadId::from_string("thr_1");
        let row = at_row(at, "req_1");
        assert_eq!(
            parse_row(&row),
            Some(("2026-11-26T10:00:00.123456Z".into(), "req_1".into()))
        );
        assert_eq!(parse_row(&after_thread(at, &id)), None);
        let cursor = after_thread(at, &id);
        assert_eq!(
            parse_thread(&cursor),
            Some(("2026-11-26T10:00:00.123456Z".into(), "thr_1".into()))
        );
        assert_eq!(parse_message(&before_message(42)), Some(42));
        for bad in ["", "nope", "%%%", &before_message(1)] {
            assert_eq!(parse_thread(bad), None, "{bad}");
        }
        assert_eq!(parse_message(&cursor), None);
        assert_eq!(parse_search(&search_from(100)), Some(100));
        assert_eq!(parse_search(&cursor), None);
        assert_eq!(parse_thread(&search_from(1)), None);
    }
}
