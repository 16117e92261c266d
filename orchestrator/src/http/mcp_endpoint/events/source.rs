//! Reads occurrences from the thread event log for one caller: only threads it sees
//! (`Caller::sees`, as `/api` lists them: a tenant's key its tenant's threads), narrowed by the
//! subscription's arguments. Every delivery mode reads through [`read`].
//!
//! The log has no cross-thread index, so a read lists the caller's threads and asks each for
//! the events after the cursor. It first takes each thread's newest event id and reads no
//! further than the largest (the *bound*): on SQLite ids are given in commit order, so every
//! event up to the bound is already stored and the cursor never passes one not yet read.
//! (On PostgreSQL several daemons append: a thread's events commit in id order, but another
//! thread's smaller id may commit after a read; such an event is missed by a reader that was
//! already past it.)

use chrono::Utc;
use plugin_contract::ThreadId;

use super::model::{occurrence, Cursor, Filter, Occurrence, ReadParams};
use crate::caller::Caller;
use crate::store::{time_text, ArchiveFilter, Store, StoreError, ThreadQuery};

/// Stored events read per thread and call; a thread with more is read again by the next call.
const PAGE: u32 = 500;

/// Threads listed per query.
const THREADS_PAGE: i64 = 500;

/// Why a read was not served.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The arguments name something the caller cannot read (`-32602`).
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one read gives.
#[derive(Debug, Default)]
pub struct Batch {
    pub occurrences: Vec<Occurrence>,
    /// Where the next read starts: after everything read or passed over.
    pub cursor: Option<Cursor>,
    /// Events were skipped: removed by retention before they were read, or older than the
    /// reader's `maxAgeMs`.
    pub truncated: bool,
    /// More is there already: read again now.
    pub has_more: bool,
}

/// The threads `filter` names, of those `caller` sees; the one it names by id only when the
/// caller sees it (else the read is refused, as for a thread that does not exist).
pub async fn threads(
    store: &Store,
    caller: &Caller,
    filter: &Filter,
) -> Result<Vec<ThreadId>, ReadError> {
    let mut ids = match &filter.thread_id {
        Some(id) => {
            let id = ThreadId::from_string(id.clone());
            match crate::service::visible_thread(store, caller, &id).await {
                Ok(_) => vec![id],
                Err(StoreError::ThreadNotFound(_)) => {
                    return Err(ReadError::Invalid(format!("thread {id} not found")))
                }
                Err(err) => return Err(err.into()),
            }
        }
        None => listed(store, caller, filter.tags.first().map(String::as_str)).await?,
    };
    if !filter.tags.is_empty() && !ids.is_empty() {
        let tags = store.tags_of(&ids).await?;
        ids.retain(|id| {
            filter
                .tags
                .iter()
                .all(|tag| tags.iter().any(|(t, has)| t == id && has == tag))
        });
    }
    Ok(ids)
}

/// Every thread the caller sees (archived ones too: their events stay readable), with `tag`.
async fn listed(
    store: &Store,
    caller: &Caller,
    tag: Option<&str>,
) -> Result<Vec<ThreadId>, StoreError> {
    let mut ids = Vec::new();
    let mut after = None;
    loop {
        let query = ThreadQuery {
            tenant: if caller.sees_all() {
                None
            } else {
                caller.tenant.as_deref()
            },
            archived: ArchiveFilter::Any,
            profile: None,
            tag,
            created_from: None,
            created_to: None,
            active_from: None,
            active_to: None,
            after,
            limit: THREADS_PAGE,
        };
        let rows = store.thread_page(&query).await?;
        let full = rows.len() == THREADS_PAGE as usize;
        after = rows
            .last()
            .map(|last| (time_text(last.last_activity_at), last.thread.id.to_string()));
        ids.extend(rows.into_iter().map(|row| row.thread.id));
        if !full {
            return Ok(ids);
        }
    }
}

/// The cursor of "from now on": after the newest event of the threads the caller reads.
pub async fn now(store: &Store, caller: &Caller, filter: &Filter) -> Result<Cursor, ReadError> {
    let mut newest = 0;
    for thread in threads(store, caller, filter).await? {
        newest = newest.max(store.last_event_id(&thread).await?);
    }
    Ok(Cursor(newest))
}

/// The occurrences after `from` of what `params` subscribes to, oldest first, at most
/// `params.max_events`.
pub async fn read(
    store: &Store,
    caller: &Caller,
    params: &ReadParams,
    from: Cursor,
) -> Result<Batch, ReadError> {
    let name = params.subscription.name;
    let after = from.0;
    let mut fresh = Vec::new();
    let mut bound = after;
    for thread in threads(store, caller, &params.subscription.filter).await? {
        let newest = store.last_event_id(&thread).await?;
        if newest > after {
            bound = bound.max(newest);
            fresh.push(thread);
        }
    }
    let mut batch = Batch::default();
    // Past a thread's full page lies what this call did not read: the cursor stops before it.
    let mut horizon = bound;
    let mut rows = Vec::new();
    for thread in fresh {
        let compacted = store.compacted_through(&thread).await?;
        batch.truncated |= compacted > after;
        let page = store
            .events_after(&thread, after.max(compacted), PAGE)
            .await?;
        if let (true, Some(last)) = (page.len() == PAGE as usize, page.last()) {
            horizon = horizon.min(last.id);
            batch.has_more = true;
        }
        rows.extend(
            page.into_iter()
                .filter(|row| row.id <= bound && name.kinds().contains(&row.kind.as_str())),
        );
    }
    rows.sort_by_key(|row| row.id);
    let oldest = params.max_age_ms.map(|ms| {
        Utc::now() - chrono::Duration::milliseconds(i64::try_from(ms).unwrap_or(i64::MAX))
    });
    let mut cursor = Cursor(horizon);
    for row in rows.iter().filter(|row| row.id <= horizon) {
        let Some(occurrence) = occurrence(row, name) else {
            continue;
        };
        if oldest.is_some_and(|oldest| occurrence.timestamp < oldest) {
            batch.truncated = true;
            continue;
        }
        if batch.occurrences.len() == params.max_events {
            batch.has_more = true;
            cursor = Cursor(batch.occurrences.last().map_or(after, |o| o.row));
            break;
        }
        batch.occurrences.push(occurrence);
    }
    batch.cursor = Some(cursor);
    Ok(batch)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::caller::Scope;
    use crate::http::mcp_endpoint::events::model::{read_params, EventName};
    use crate::store::NewThread;

    fn tenant(name: &str) -> Caller {
        Caller {
            subject: format!("key-of-{name}"),
            tenant: Some(name.to_owned()),
            scopes: vec![Scope::ThreadsRead],
        }
    }

    async fn thread(store: &Store, tenant: &str) -> ThreadId {
        let new = NewThread {
            tenant: Some(tenant.to_owned()),
            ..NewThread::default()
        };
        store.create_thread(new).await.expect("a thread").id
    }

    async fn ended(store: &Store, thread: &ThreadId, kind: &str) -> i64 {
        let data = json!({"messageId": "msg_1", "status": "error", "cause": "error", "error": "x"});
        let row = store.append_event(thread, None, kind, &data).await;
        row.expect("stored").id
    }

    /// The rows of the occurrences of a read, its cursor and whether it has more.
    async fn check(
        store: &Store,
        caller: &Caller,
        from: i64,
        params: serde_json::Value,
    ) -> (Vec<i64>, i64, bool) {
        let params = read_params(&params).expect("params");
        let batch = read(store, caller, &params, Cursor(from))
            .await
            .expect("read");
        let rows = batch.occurrences.iter().map(|o| o.row).collect();
        (rows, batch.cursor.expect("a cursor").0, batch.has_more)
    }

    /// Each tenant reads its own threads' events, in id order across threads; the cursor goes
    /// past what was read or passed over, and stops after the last one given when `maxEvents`
    /// cuts a read short.
    #[tokio::test]
    async fn a_read_is_the_callers_threads_in_order_and_resumes_where_it_stopped() {
        let store = Store::open(":memory:").await.expect("a store");
        let (a1, a2, g) = (
            thread(&store, "acme").await,
            thread(&store, "acme").await,
            thread(&store, "globex").await,
        );
        let first = ended(&store, &a1, "turn_failed").await;
        let theirs = ended(&store, &g, "turn_failed").await;
        let second = ended(&store, &a2, "turn_failed").await;
        let noise = ended(&store, &a1, "text_delta").await;
        let third = ended(&store, &a1, "turn_failed").await;
        let (acme, globex) = (tenant("acme"), tenant("globex"));
        let all = json!({"name": EventName::TurnEnded.as_str()});

        assert_eq!(
            check(&store, &acme, 0, all.clone()).await,
            (vec![first, second, third], third, false)
        );
        assert_eq!(
            check(&store, &globex, 0, all.clone()).await,
            (vec![theirs], theirs, false)
        );
        let every = check(&store, &Caller::operator(), 0, all.clone()).await;
        assert_eq!(every.0, [first, theirs, second, third]);

        let two = json!({"name": "turn.ended", "maxEvents": 2});
        assert_eq!(
            check(&store, &acme, 0, two.clone()).await,
            (vec![first, second], second, true)
        );
        assert_eq!(
            check(&store, &acme, second, two).await,
            (vec![third], third, false)
        );
        assert!(noise > second, "the text delta in between is passed over");
        assert_eq!(
            check(&store, &acme, third, all.clone()).await,
            (vec![], third, false)
        );

        let one = json!({"name": "turn.ended", "arguments": {"threadId": a2.as_str()}});
        assert_eq!(check(&store, &acme, 0, one).await.0, [second]);
        let filter = Filter {
            thread_id: Some(g.as_str().to_owned()),
            tags: Vec::new(),
        };
        let refused = threads(&store, &acme, &filter)
            .await
            .expect_err("not acme's");
        assert!(matches!(refused, ReadError::Invalid(_)), "{refused}");
        assert_eq!(
            now(&store, &acme, &Filter::default()).await.expect("now"),
            Cursor(third)
        );
        assert_eq!(
            now(&store, &globex, &Filter::default()).await.expect("now"),
            Cursor(theirs)
        );
    }
}
