//! Pages of threads and messages, a thread's title and tags, and deleting a thread (the pipeline
//! owns what else a delete does); the facade of `harness_db::LifecycleQueries`.

use plugin_contract::ThreadId;

use super::{
    on_db, Db, DeletedRows, LifecycleQueries, MessageRow, Store, StoreError, ThreadChange,
    ThreadQuery, ThreadRow, ThreadSummaryRow,
};

impl Store {
    /// A page of threads, newest activity first.
    pub async fn thread_page(
        &self,
        query: &ThreadQuery<'_>,
    ) -> Result<Vec<ThreadSummaryRow>, StoreError> {
        let _timer = self.metrics.time("thread_page");
        on_db!(self, db => db.thread_page(query).await)
    }

    /// A page of the threads whose title or messages hold every word of `words`, best first.
    pub async fn search_threads(
        &self,
        query: &ThreadQuery<'_>,
        words: &str,
        offset: i64,
    ) -> Result<Vec<ThreadSummaryRow>, StoreError> {
        let _timer = self.metrics.time("search_threads");
        on_db!(self, db => db.search_threads(query, words, offset).await)
    }

    /// The tags of each of `threads`, by thread.
    pub async fn tags_of(
        &self,
        threads: &[ThreadId],
    ) -> Result<Vec<(ThreadId, String)>, StoreError> {
        let _timer = self.metrics.time("tags_of");
        on_db!(self, db => db.tags_of(threads).await)
    }

    /// Up to `limit` messages of `thread` before `seq` `before`, newest first.
    pub async fn message_page(
        &self,
        thread: &ThreadId,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<MessageRow>, StoreError> {
        let _timer = self.metrics.time("message_page");
        on_db!(self, db => db.message_page(thread, before, limit).await)
    }

    /// Renames, retags or unarchives the thread.
    pub async fn change_thread(
        &self,
        id: &ThreadId,
        change: &ThreadChange<'_>,
    ) -> Result<ThreadRow, StoreError> {
        let _timer = self.metrics.time("change_thread");
        let fence = self.fence(id, None)?;
        on_db!(self, db => db.change_thread(fence.as_ref(), id, change).await)
    }

    /// Deletes the thread's rows and the files only it named; the rows removed, by table.
    pub async fn delete_thread(&self, id: &ThreadId) -> Result<DeletedRows, StoreError> {
        let _timer = self.metrics.time("delete_thread");
        let fence = self.fence(id, None)?;
        on_db!(self, db => db.delete_thread(fence.as_ref(), id).await)
    }

    /// The threads whose parent is `id`.
    pub async fn children(&self, id: &ThreadId) -> Result<Vec<ThreadId>, StoreError> {
        on_db!(self, db => db.children(id).await)
    }

    /// How many rows of each table name the thread.
    pub async fn thread_rows(&self, id: &ThreadId) -> Result<DeletedRows, StoreError> {
        on_db!(self, db => db.thread_rows(id).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{spend, store_tests};
    use crate::store::{
        ArchiveFilter, NewThread, NewUserMessage, Origin, ThreadChange, ThreadQuery,
    };

    fn page(limit: i64) -> ThreadQuery<'static> {
        ThreadQuery {
            limit,
            ..Default::default()
        }
    }

    store_tests! {
        /// Threads page by last activity (a message moves a thread to the front), the cursor
        /// of one page starting the next with nothing skipped or repeated; the filters narrow.
        async fn threads_page_by_activity_and_filter(store: sqlite_memory) {
            let mut made = Vec::new();
            for n in 0..5 {
                let tenant = if n % 2 == 0 { Some("acme".to_owned()) } else { None };
                let new = NewThread { tenant, profile: (n == 4).then(|| "lean".into()), ..Default::default() };
                made.push(store.create_thread(new).await.unwrap().id);
            }
            // The oldest thread gets a turn: it is the most recently active now.
            spend(&store, &made[0], 0.01).await;
            let first = store.thread_page(&page(2)).await.unwrap();
            let ids: Vec<_> = first.iter().map(|s| s.thread.id.clone()).collect();
            assert_eq!(ids, [made[0].clone(), made[4].clone()]);
            let last = first.last().unwrap();
            let after = Some((crate::store::time_text(last.last_activity_at), last.thread.id.as_str().to_owned()));
            let rest = store.thread_page(&ThreadQuery { after, limit: 10, ..Default::default() }).await.unwrap();
            let rest: Vec<_> = rest.iter().map(|s| s.thread.id.clone()).collect();
            assert_eq!(rest, [made[3].clone(), made[2].clone(), made[1].clone()]);

            let acme = store.thread_page(&ThreadQuery { tenant: Some("acme"), limit: 10, ..Default::default() }).await.unwrap();
            assert_eq!(acme.len(), 3, "0, 2 and 4 are acme's");
            let lean = store.thread_page(&ThreadQuery { profile: Some("lean"), limit: 10, ..Default::default() }).await.unwrap();
            assert_eq!(lean.len(), 1);

            let tags = ["red".to_owned(), "blue".to_owned()];
            store.change_thread(&made[1], &ThreadChange { title: Some(Some("renamed")), tags: Some(&tags), unarchive: false }).await.unwrap();
            let red = store.thread_page(&ThreadQuery { tag: Some("red"), limit: 10, ..Default::default() }).await.unwrap();
            assert_eq!(red[0].thread.id, made[1]);
            assert_eq!(red[0].thread.title.as_deref(), Some("renamed"));
            assert_eq!(red.len(), 1);
            let got = store.tags_of(std::slice::from_ref(&made[1])).await.unwrap();
            assert_eq!(got.len(), 2);
            store.archive_thread(&made[1]).await.unwrap();
            assert!(store.thread_page(&ThreadQuery { tag: Some("red"), limit: 10, ..Default::default() }).await.unwrap().is_empty(), "archived leaves the default list");
            let archived = store.thread_page(&ThreadQuery { archived: ArchiveFilter::Archived, limit: 10, ..Default::default() }).await.unwrap();
            assert_eq!(archived.len(), 1);
            let back = store.change_thread(&made[1], &ThreadChange { unarchive: true, ..Default::default() }).await.unwrap();
            assert_eq!(back.archived_at, None);
        }

        /// Search finds threads by every word of their title or messages, follows a rename and
        /// a delete, keeps the filters, and reads operators as plain words.
        async fn search_finds_titles_and_messages(store: sqlite_memory) {
            let say = |thread: &plugin_contract::ThreadId, text: &str| NewUserMessage {
                thread_id: thread.clone(),
                content: text.into(),
                client_message_id: None,
                model: None,
                origin: Origin::User,
                caller: None,
            };
            let fox = store.create_thread(NewThread { title: Some("Fox report".into()), ..Default::default() }).await.unwrap().id;
            let quick = store.create_thread(NewThread { tenant: Some("acme".into()), ..Default::default() }).await.unwrap().id;
            let dog = store.create_thread(NewThread::default()).await.unwrap().id;
            store.insert_user_message(say(&quick, "the quick brown fox jumps"), None).await.unwrap();
            store.insert_user_message(say(&dog, "a lazy dog (\"NEAR\" OR *) sleeps"), None).await.unwrap();
            let find = |words: &'static str, tenant: Option<&'static str>| {
                let store = store.clone();
                async move {
                    let query = ThreadQuery { tenant, limit: 10, ..Default::default() };
                    let mut ids: Vec<String> = store.search_threads(&query, words, 0).await.unwrap()
                        .into_iter().map(|s| s.thread.id.as_str().to_owned()).collect();
                    ids.sort();
                    ids
                }
            };
            let mut both = vec![fox.as_str().to_owned(), quick.as_str().to_owned()];
            both.sort();
            assert_eq!(find("fox", None).await, both);
            assert_eq!(find("quick FOX", None).await, [quick.as_str()]);
            assert_eq!(find("fox", Some("acme")).await, [quick.as_str()]);
            assert_eq!(find("\"NEAR\" OR *", None).await.len(), 1, "operators are words");
            assert!(find("cat", None).await.is_empty());
            store.change_thread(&dog, &ThreadChange { title: Some(Some("Kennel")), ..Default::default() }).await.unwrap();
            assert_eq!(find("kennel", None).await, [dog.as_str()]);
            store.delete_thread(&quick).await.unwrap();
            assert_eq!(find("quick", None).await, Vec::<String>::new());
        }

        /// A delete leaves nothing of the thread in any table, keeps its child (without a
        /// parent), and removes the files only it named.
        async fn a_deleted_thread_leaves_nothing(store: sqlite_memory) {
            let parent = store.create_thread(NewThread::default()).await.unwrap().id;
            let other = store.create_thread(NewThread::default()).await.unwrap().id;
            let child = store.create_thread(NewThread { parent_id: Some(parent.clone()), ..Default::default() }).await.unwrap().id;
            spend(&store, &parent, 0.01).await;
            let file = |id: &'static str| crate::store::NewFile { id, owner: "", sha256: id, media_type: "image/png", data: b"x" };
            store.insert_file(file("file_mine")).await.unwrap();
            store.insert_file(file("file_shared")).await.unwrap();
            let with = |thread: &plugin_contract::ThreadId, ids: &[&str]| NewUserMessage {
                thread_id: thread.clone(),
                content: plugin_contract::UserContent::Blocks(ids.iter().map(|id| plugin_contract::ContentBlock::Image {
                    source: plugin_contract::MediaSource::File { file_id: (*id).into(), media_type: None, bytes: None },
                }).collect()),
                client_message_id: None,
                model: None,
                origin: Origin::User,
                caller: None,
            };
            store.insert_user_message(with(&parent, &["file_mine", "file_shared"]), None).await.unwrap();
            store.insert_user_message(with(&other, &["file_shared"]), None).await.unwrap();
            let before: u64 = store.thread_rows(&parent).await.unwrap().iter().map(|(_, n)| n).sum();
            assert!(before >= 5, "messages, the thread, the delegation-free rest: {before}");

            let removed = store.delete_thread(&parent).await.unwrap();
            assert!(removed.contains(&("messages", 3)), "{removed:?}");
            assert!(removed.contains(&("files", 1)), "{removed:?}");
            let left = store.thread_rows(&parent).await.unwrap();
            assert!(left.iter().all(|(_, n)| *n == 0), "{left:?}");
            assert!(store.get_thread(&parent).await.unwrap().is_none());
            assert_eq!(store.file("file_mine").await.unwrap(), None);
            assert!(store.file("file_shared").await.unwrap().is_some(), "another thread names it");
            let kept = store.require_thread(&child).await.unwrap();
            assert_eq!(kept.parent_id, None);
            assert!(matches!(store.delete_thread(&parent).await, Err(crate::store::StoreError::ThreadNotFound(_))));
        }
    }
}
