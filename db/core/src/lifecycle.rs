//! Threads by the hundred thousand: a page of threads (filtered, newest activity first), a page
//! of a thread's messages (newest first), a thread's title and tags changed, unarchived, and a
//! thread deleted with everything of it.

use plugin_contract::{ThreadId, UserContent};

use crate::{Fence, MessageRow, StoreError, ThreadRow, ThreadSummaryRow};

/// Which threads by their archive state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ArchiveFilter {
    /// Threads that are not archived: the default list.
    #[default]
    Live,
    Archived,
    Any,
}

impl ArchiveFilter {
    pub fn as_str(self) -> &'static str {
        match self {
            ArchiveFilter::Live => "live",
            ArchiveFilter::Archived => "archived",
            ArchiveFilter::Any => "any",
        }
    }
}

/// What a page of threads holds. Times are stored text ([`crate::time_text`]).
#[derive(Clone, Debug, Default)]
pub struct ThreadQuery<'a> {
    /// Only this tenant's threads; `None`: every thread.
    pub tenant: Option<&'a str>,
    pub archived: ArchiveFilter,
    pub profile: Option<&'a str>,
    pub tag: Option<&'a str>,
    pub created_from: Option<String>,
    pub created_to: Option<String>,
    pub active_from: Option<String>,
    pub active_to: Option<String>,
    /// Threads after this one in the order (`last_activity_at`, `id`), both descending: the
    /// cursor of the previous page.
    pub after: Option<(String, String)>,
    pub limit: i64,
}

/// A change to a thread's own fields; `None` leaves a field alone.
#[derive(Clone, Debug, Default)]
pub struct ThreadChange<'a> {
    /// `Some(None)` clears the title.
    pub title: Option<Option<&'a str>>,
    /// Replaces the tags.
    pub tags: Option<&'a [String]>,
    /// `Some(false)` unarchives (archiving has more to it: `archive_thread`).
    pub unarchive: bool,
}

/// How many rows a delete removed, by table.
pub type DeletedRows = Vec<(&'static str, u64)>;

#[allow(async_fn_in_trait)]
pub trait LifecycleQueries {
    /// A page of threads as `query` says, newest activity first, each with whether a turn runs.
    async fn thread_page(
        &self,
        query: &ThreadQuery<'_>,
    ) -> Result<Vec<ThreadSummaryRow>, StoreError>;

    /// The page of threads whose title or messages hold every word of `words` (an FTS5 query
    /// on SQLite, [`fts_query`]; the words on PostgreSQL), best match first, `offset` threads
    /// in; `query`'s filters apply, its cursor does not.
    async fn search_threads(
        &self,
        query: &ThreadQuery<'_>,
        words: &str,
        offset: i64,
    ) -> Result<Vec<ThreadSummaryRow>, StoreError>;

    /// The tags of each of `threads`: `(thread, tag)`, by thread, then tag.
    async fn tags_of(&self, threads: &[ThreadId]) -> Result<Vec<(ThreadId, String)>, StoreError>;

    /// Up to `limit` messages of `thread` before `seq` `before` (all when `None`), newest first.
    async fn message_page(
        &self,
        thread: &ThreadId,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<MessageRow>, StoreError>;

    /// Applies `change` to the thread; the thread as it is then. [`StoreError::ThreadNotFound`]
    /// for an unknown thread, [`StoreError::LeaseLost`] when `fence` no longer holds it.
    async fn change_thread(
        &self,
        fence: Option<&Fence>,
        id: &ThreadId,
        change: &ThreadChange<'_>,
    ) -> Result<ThreadRow, StoreError>;

    /// In one transaction: every row of the thread (its messages, events, tool calls,
    /// permissions, outcomes, transcripts, webhooks and their attempts, schedules and their
    /// runs, callback, lease, tags, delegation records), its children's `parent_id` cleared,
    /// then the files its messages named that no other message names. The rows removed, by
    /// table. [`StoreError::ThreadNotFound`] for an unknown thread.
    async fn delete_thread(
        &self,
        fence: Option<&Fence>,
        id: &ThreadId,
    ) -> Result<DeletedRows, StoreError>;

    /// The threads whose parent is `id`.
    async fn children(&self, id: &ThreadId) -> Result<Vec<ThreadId>, StoreError>;

    /// How many rows of each table name the thread (what a delete leaves: all zero).
    async fn thread_rows(&self, id: &ThreadId) -> Result<DeletedRows, StoreError>;
}

/// `words` as an FTS5 query that matches every word as it is: each quoted (quotes doubled), so
/// no word is read as an operator.
pub fn fts_query(words: &str) -> String {
    words
        .split_whitespace()
        .map(|word| format!("\"{}\"", word.replace('"', "\"\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The file ids a thread's messages name, from their stored `blocks` columns.
pub fn files_named(blocks: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut ids: Vec<String> = blocks
        .into_iter()
        .filter_map(|json| serde_json::from_str::<Vec<plugin_contract::ContentBlock>>(&json).ok())
        .flat_map(|blocks| UserContent::Blocks(blocks).file_ids())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}
