//! Pages of what can grow without bound: threads (`GET /api/threads`, `threads__list`) and a
//! thread's messages (`GET /api/threads/{id}/messages`, the last page in `GET
//! /api/threads/{id}`). The filters and the page as clients see them, one shape for `/api` and
//! `/mcp`; the cursors are [`super::cursor`]'s.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use plugin_contract::ThreadId;

use super::{cursor, Message, ThreadSummary};
use crate::caller::Caller;
use crate::store::{time_text, ArchiveFilter, Store, StoreError, ThreadQuery};

/// A page's size when none is asked for.
pub const DEFAULT_LIMIT: i64 = 50;
/// The largest page.
pub const MAX_LIMIT: i64 = 500;
/// The longest `q`, `profile` or `tag` of a thread list.
pub const MAX_FILTER_CHARS: usize = 1000;

/// Which threads, and which page of them.
#[derive(Clone, Debug, Default, Deserialize, utoipa::IntoParams, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ThreadFilters {
    /// Threads per page: 1 to 500, default 50.
    #[param(minimum = 1, maximum = 500)]
    #[schema(minimum = 1, maximum = 500, default = 50)]
    pub limit: Option<i64>,
    /// `nextCursor` of the previous page (one this daemon gave out: another is refused).
    #[param(pattern = r"^[A-Za-z0-9_-]*$")]
    pub cursor: Option<String>,
    /// Words the thread's title or messages must all hold: the threads then come best match
    /// first. At most 1000 characters, no NUL (likewise `profile` and `tag`).
    #[param(max_length = 1000, pattern = r"^[^\x00]*$")]
    pub q: Option<String>,
    /// `false` (the default: live threads), `true` (archived ones) or `all`.
    #[param(value_type = Option<Archived>, inline)]
    #[schema(value_type = Option<Archived>, inline, default = "false")]
    pub archived: Option<String>,
    /// Threads of this profile only.
    #[param(max_length = 1000, pattern = r"^[^\x00]*$")]
    #[schema(min_length = 1, max_length = 1000, pattern = r"^[^\x00]*$")]
    pub profile: Option<String>,
    /// Threads with this tag only.
    #[param(max_length = 1000, pattern = r"^[^\x00]*$")]
    pub tag: Option<String>,
    /// Made at or after this time (RFC 3339).
    pub created_from: Option<DateTime<Utc>>,
    /// Made before this time.
    pub created_to: Option<DateTime<Utc>>,
    /// Last active at or after this time.
    pub active_from: Option<DateTime<Utc>>,
    /// Last active before this time.
    pub active_to: Option<DateTime<Utc>>,
}

/// Which threads: live ones (`false`), archived ones (`true`) or both (`all`).
// Named for the document only: `archived` is read as a string, so that a bad one is a `422`
// naming the three.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)] // Never built: it names the values in the document.
pub enum Archived {
    False,
    True,
    All,
}

/// One page of threads, newest activity first.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ThreadPage {
    pub threads: Vec<ThreadSummary>,
    /// The next page's `cursor`; `null` on the last page.
    pub next_cursor: Option<String>,
}

/// One page of a thread's messages.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessagePage {
    /// Newest first.
    pub messages: Vec<Message>,
    /// The `before` of the page of older messages; `null` when there are none.
    pub next_cursor: Option<String>,
}

/// Why a page was not served.
#[derive(Debug, thiserror::Error)]
pub enum PageError {
    /// A filter or cursor the caller got wrong (422).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// `limit` checked, or the default.
pub fn limit(asked: Option<i64>) -> Result<i64, PageError> {
    match asked {
        None => Ok(DEFAULT_LIMIT),
        Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        Some(n) => Err(PageError::Invalid(format!(
            "limit is 1 to {MAX_LIMIT}, not {n}"
        ))),
    }
}

/// The row a `(created_at, id)` list's `cursor` names ([`cursor::at_row`]).
pub fn row_cursor(cursor: &str) -> Result<(String, String), PageError> {
    cursor::parse_row(cursor)
        .ok_or_else(|| PageError::Invalid("cursor is not one this list gave".into()))
}

/// Cuts `rows` (read one beyond `limit`) to `limit`: the cursor after the last kept when more
/// were there.
pub fn trim<T>(rows: &mut Vec<T>, limit: i64, cursor: impl Fn(&T) -> String) -> Option<String> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() <= limit {
        return None;
    }
    rows.truncate(limit);
    rows.last().map(cursor)
}

/// The page of threads `filters` names, of those `caller` sees.
pub async fn threads(
    store: &Store,
    caller: &Caller,
    filters: &ThreadFilters,
) -> Result<ThreadPage, PageError> {
    let limit = limit(filters.limit)?;
    let archived = match filters.archived.as_deref() {
        None | Some("false") => ArchiveFilter::Live,
        Some("true") => ArchiveFilter::Archived,
        Some("all") => ArchiveFilter::Any,
        Some(other) => {
            return Err(PageError::Invalid(format!(
                "archived is `false`, `true` or `all`, not {other:?}"
            )))
        }
    };
    // Text no database stores (PostgreSQL refuses a NUL), or more than a search needs, is the
    // caller's to fix.
    for (name, value) in [
        ("q", &filters.q),
        ("profile", &filters.profile),
        ("tag", &filters.tag),
    ] {
        if let Some(value) = value {
            if value.contains('\0') {
                return Err(PageError::Invalid(format!("{name} holds a NUL character")));
            }
            if value.chars().count() > MAX_FILTER_CHARS {
                return Err(PageError::Invalid(format!(
                    "{name} is longer than {MAX_FILTER_CHARS} characters"
                )));
            }
        }
    }
    let words = filters
        .q
        .as_deref()
        .map(str::trim)
        .filter(|q| !q.is_empty());
    let bad_cursor = || PageError::Invalid("cursor is not one this daemon gave out".into());
    let (after, offset) = match (&filters.cursor, words) {
        (None, _) => (None, 0),
        (Some(text), None) => (Some(cursor::parse_thread(text).ok_or_else(bad_cursor)?), 0),
        (Some(text), Some(_)) => (None, cursor::parse_search(text).ok_or_else(bad_cursor)?),
    };
    let query = ThreadQuery {
        // A tenant's caller sees its tenant's threads only.
        tenant: if caller.sees_all() {
            None
        } else {
            caller.tenant.as_deref()
        },
        archived,
        profile: filters.profile.as_deref(),
        tag: filters.tag.as_deref(),
        created_from: filters.created_from.map(time_text),
        created_to: filters.created_to.map(time_text),
        active_from: filters.active_from.map(time_text),
        active_to: filters.active_to.map(time_text),
        after,
        // One more than asked: whether there is a next page.
        limit: limit + 1,
    };
    let mut rows = match words {
        None => store.thread_page(&query).await?,
        Some(words) => store.search_threads(&query, words, offset).await?,
    };
    let next_cursor = trim(&mut rows, limit, |last| match words {
        Some(_) => cursor::search_from(offset + limit),
        None => cursor::after_thread(last.last_activity_at, &last.thread.id),
    });
    let ids: Vec<ThreadId> = rows.iter().map(|r| r.thread.id.clone()).collect();
    let tags = store.tags_of(&ids).await?;
    let threads = rows
        .into_iter()
        .map(|row| {
            let mut summary = ThreadSummary::from(row);
            summary.tags = tags
                .iter()
                .filter(|(thread, _)| *thread == summary.thread.id)
                .map(|(_, tag)| tag.clone())
                .collect();
            summary
        })
        .collect();
    Ok(ThreadPage {
        threads,
        next_cursor,
    })
}

/// Up to `limit` messages of `thread` before the cursor `before`, newest first.
pub async fn messages(
    store: &Store,
    thread: &ThreadId,
    before: Option<&str>,
    limit: i64,
) -> Result<MessagePage, PageError> {
    let before = match before {
        None => None,
        Some(text) => Some(cursor::parse_message(text).ok_or_else(|| {
            PageError::Invalid("before is not a cursor this daemon gave out".into())
        })?),
    };
    let mut rows = store.message_page(thread, before, limit + 1).await?;
    let next_cursor = trim(&mut rows, limit, |last| cursor::before_message(last.seq));
    Ok(MessagePage {
        messages: rows.into_iter().map(Message::from).collect(),
        next_cursor,
    })
}
