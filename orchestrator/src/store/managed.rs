//! The agents, environments and sessions of the Managed Agents door (`crate::managed` owns
//! their shape and rules); the facade of `harness_db::ManagedQueries`.

use plugin_contract::ThreadId;

use super::{
    on_db, Db, ManagedFilter, ManagedKind, ManagedQueries, ManagedRow, ManagedUpdate, NewManaged,
    NewSession, SessionFilter, SessionRow, Store, StoreError,
};

impl Store {
    /// Stores `new` at version 1; the stored row.
    pub async fn insert_managed(&self, new: NewManaged<'_>) -> Result<ManagedRow, StoreError> {
        let _timer = self.metrics.time("insert_managed");
        on_db!(self, db => db.insert_managed(new).await)
    }

    /// The `kind` row `id`: its latest version, or (an agent's) `version`.
    pub async fn managed(
        &self,
        kind: ManagedKind,
        id: &str,
        version: Option<i64>,
    ) -> Result<Option<ManagedRow>, StoreError> {
        let _timer = self.metrics.time("managed");
        on_db!(self, db => db.managed(kind, id, version).await)
    }

    /// A page of `filter`'s rows, newest first.
    pub async fn list_managed(
        &self,
        filter: ManagedFilter<'_>,
    ) -> Result<Vec<ManagedRow>, StoreError> {
        let _timer = self.metrics.time("list_managed");
        on_db!(self, db => db.list_managed(filter).await)
    }

    /// Replaces the body of the `kind` row `id` when its version is `expected` (any when
    /// `None`); see [`ManagedUpdate`].
    pub async fn update_managed(
        &self,
        kind: ManagedKind,
        id: &str,
        expected: Option<i64>,
        body: &str,
    ) -> Result<ManagedUpdate, StoreError> {
        let _timer = self.metrics.time("update_managed");
        on_db!(self, db => db.update_managed(kind, id, expected, body).await)
    }

    /// Archives the `kind` row `id` (once); the row, or `None` when there is none.
    pub async fn archive_managed(
        &self,
        kind: ManagedKind,
        id: &str,
    ) -> Result<Option<ManagedRow>, StoreError> {
        let _timer = self.metrics.time("archive_managed");
        on_db!(self, db => db.archive_managed(kind, id).await)
    }

    /// Deletes the `kind` row `id` and its versions; false when there was none.
    pub async fn delete_managed(&self, kind: ManagedKind, id: &str) -> Result<bool, StoreError> {
        let _timer = self.metrics.time("delete_managed");
        on_db!(self, db => db.delete_managed(kind, id).await)
    }

    /// The versions of the agent `id`, newest first, below `before` when given.
    pub async fn agent_versions(
        &self,
        id: &str,
        before: Option<i64>,
        limit: i64,
    ) -> Result<Vec<ManagedRow>, StoreError> {
        let _timer = self.metrics.time("agent_versions");
        on_db!(self, db => db.agent_versions(id, before, limit).await)
    }

    /// Stores the session of a thread; [`StoreError::ThreadNotFound`] without the thread.
    pub async fn insert_session(&self, new: NewSession<'_>) -> Result<SessionRow, StoreError> {
        let _timer = self.metrics.time("insert_session");
        on_db!(self, db => db.insert_session(new).await)
    }

    /// The session of the thread `thread`, or `None`.
    pub async fn session(&self, thread: &ThreadId) -> Result<Option<SessionRow>, StoreError> {
        let _timer = self.metrics.time("session");
        on_db!(self, db => db.session(thread).await)
    }

    /// Replaces the session's body; `None` when there is no such session.
    pub async fn update_session(
        &self,
        thread: &ThreadId,
        body: &str,
    ) -> Result<Option<SessionRow>, StoreError> {
        let _timer = self.metrics.time("update_session");
        on_db!(self, db => db.update_session(thread, body).await)
    }

    /// A page of `filter`'s sessions.
    pub async fn list_sessions(
        &self,
        filter: SessionFilter<'_>,
    ) -> Result<Vec<SessionRow>, StoreError> {
        let _timer = self.metrics.time("list_sessions");
        on_db!(self, db => db.list_sessions(filter).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::{
        ManagedAfter, ManagedFilter, ManagedKind, ManagedRow, ManagedUpdate, NewManaged,
        NewSession, NewThread, SessionFilter, StoreError,
    };

    fn agent<'a>(id: &'a str, owner: &'a str, body: &'a str) -> NewManaged<'a> {
        NewManaged {
            id,
            kind: ManagedKind::Agent,
            owner,
            body,
        }
    }

    fn agents(owner: Option<&str>) -> ManagedFilter<'_> {
        ManagedFilter {
            kind: ManagedKind::Agent,
            owner,
            include_archived: false,
            created_gte: None,
            created_lte: None,
            after: None,
            limit: 10,
        }
    }

    fn ids(rows: &[ManagedRow]) -> Vec<&str> {
        rows.iter().map(|r| r.id.as_str()).collect()
    }

    fn sessions() -> SessionFilter<'static> {
        SessionFilter {
            tenant: None,
            agent_id: None,
            agent_version: None,
            include_archived: true,
            descending: false,
            after: None,
            limit: 10,
        }
    }

    store_tests! {
        /// An agent keeps every version: two updates make versions 2 and 3, the first stays
        /// readable; a stale version conflicts, the same body changes nothing, an archived
        /// agent is no longer changed.
        async fn an_agent_keeps_its_versions(store: sqlite_memory) {
            let first = store.insert_managed(agent("agent_a", "acme", "{\"v\":1}")).await.unwrap();
            assert_eq!((first.version, first.kind.as_str(), first.archived_at), (1, "agent", None));
            let read = store.managed(ManagedKind::Agent, "agent_a", None).await.unwrap();
            assert_eq!(read.as_ref(), Some(&first));
            assert_eq!(store.managed(ManagedKind::Environment, "agent_a", None).await.unwrap(), None);

            let Ok(ManagedUpdate::Updated(second)) = store.update_managed(ManagedKind::Agent, "agent_a", Some(1), "{\"v\":2}").await else {
                panic!("not updated");
            };
            assert_eq!((second.version, second.body.as_str()), (2, "{\"v\":2}"));
            assert_eq!(second.created_at, first.created_at);
            let Ok(ManagedUpdate::Updated(third)) = store.update_managed(ManagedKind::Agent, "agent_a", None, "{\"v\":3}").await else {
                panic!("not updated");
            };
            assert_eq!(third.version, 3);
            let old = store.managed(ManagedKind::Agent, "agent_a", Some(1)).await.unwrap().unwrap();
            assert_eq!(old, first);
            let now = store.managed(ManagedKind::Agent, "agent_a", None).await.unwrap().unwrap();
            assert_eq!(now, third);
            assert_eq!(store.managed(ManagedKind::Agent, "agent_a", Some(4)).await.unwrap(), None);
            let versions = store.agent_versions("agent_a", None, 10).await.unwrap();
            assert_eq!(versions.iter().map(|r| r.version).collect::<Vec<_>>(), [3, 2, 1]);
            let below = store.agent_versions("agent_a", Some(3), 1).await.unwrap();
            assert_eq!(below, vec![second.clone()]);

            let stale = store.update_managed(ManagedKind::Agent, "agent_a", Some(2), "{}").await.unwrap();
            assert_eq!(stale, ManagedUpdate::Conflict { current: 3 });
            let same = store.update_managed(ManagedKind::Agent, "agent_a", Some(3), "{\"v\":3}").await.unwrap();
            assert_eq!(same, ManagedUpdate::Unchanged(third.clone()));
            let missing = store.update_managed(ManagedKind::Agent, "agent_b", None, "{}").await.unwrap();
            assert_eq!(missing, ManagedUpdate::NotFound);

            let archived = store.archive_managed(ManagedKind::Agent, "agent_a").await.unwrap().unwrap();
            let at = archived.archived_at.expect("archived");
            let again = store.archive_managed(ManagedKind::Agent, "agent_a").await.unwrap().unwrap();
            assert_eq!(again.archived_at, Some(at), "the first archive's time stays");
            assert_eq!(store.archive_managed(ManagedKind::Agent, "agent_b").await.unwrap(), None);
            let late = store.update_managed(ManagedKind::Agent, "agent_a", None, "{\"v\":4}").await.unwrap();
            assert_eq!(late, ManagedUpdate::Archived);
            let old = store.managed(ManagedKind::Agent, "agent_a", Some(1)).await.unwrap().unwrap();
            assert_eq!(old.archived_at, Some(at));
        }

        /// A listing is newest first, pages on from `after`, keeps to its owner and leaves the
        /// archived out unless asked; deleting an agent takes its versions.
        async fn agents_list_in_pages_and_go_with_their_versions(store: sqlite_memory) {
            for (id, owner) in [("agent_1", "acme"), ("agent_2", ""), ("agent_3", "acme"), ("agent_4", "acme")] {
                store.insert_managed(agent(id, owner, "{}")).await.unwrap();
            }
            let all = store.list_managed(agents(None)).await.unwrap();
            assert_eq!(ids(&all), ["agent_4", "agent_3", "agent_2", "agent_1"]);
            let acme = store.list_managed(ManagedFilter { limit: 2, ..agents(Some("acme")) }).await.unwrap();
            assert_eq!(ids(&acme), ["agent_4", "agent_3"]);
            let last = &acme[1];
            let after = ManagedAfter { created_at: last.created_at, id: last.id.clone() };
            let next = store.list_managed(ManagedFilter { after: Some(after), ..agents(Some("acme")) }).await.unwrap();
            assert_eq!(ids(&next), ["agent_1"]);
            let operator = store.list_managed(agents(Some(""))).await.unwrap();
            assert_eq!(ids(&operator), ["agent_2"]);
            let since = store.list_managed(ManagedFilter { created_gte: Some(all[1].created_at), ..agents(None) }).await.unwrap();
            assert_eq!(ids(&since), ["agent_4", "agent_3"]);
            let until = store.list_managed(ManagedFilter { created_lte: Some(all[2].created_at), ..agents(None) }).await.unwrap();
            assert_eq!(ids(&until), ["agent_2", "agent_1"]);

            store.archive_managed(ManagedKind::Agent, "agent_3").await.unwrap();
            let live = store.list_managed(agents(Some("acme"))).await.unwrap();
            assert_eq!(ids(&live), ["agent_4", "agent_1"]);
            let every = store.list_managed(ManagedFilter { include_archived: true, ..agents(Some("acme")) }).await.unwrap();
            assert_eq!(ids(&every), ["agent_4", "agent_3", "agent_1"]);
            let environments = store.list_managed(ManagedFilter { kind: ManagedKind::Environment, ..agents(None) }).await.unwrap();
            assert!(environments.is_empty());

            store.update_managed(ManagedKind::Agent, "agent_4", None, "{\"v\":2}").await.unwrap();
            assert!(!store.delete_managed(ManagedKind::Environment, "agent_4").await.unwrap());
            assert!(store.delete_managed(ManagedKind::Agent, "agent_4").await.unwrap());
            assert!(!store.delete_managed(ManagedKind::Agent, "agent_4").await.unwrap());
            assert_eq!(store.managed(ManagedKind::Agent, "agent_4", Some(1)).await.unwrap(), None);
            assert!(store.agent_versions("agent_4", None, 10).await.unwrap().is_empty());
            let left = store.test_count("SELECT COUNT(*) FROM managed_agent_versions WHERE agent_id = 'agent_4'").await;
            assert_eq!(left, 0);
        }

        /// An environment stays at version 1 whatever its updates.
        async fn an_environment_stays_at_version_one(store: sqlite_memory) {
            let new = NewManaged { id: "env_a", kind: ManagedKind::Environment, owner: "", body: "{\"a\":1}" };
            let first = store.insert_managed(new).await.unwrap();
            assert_eq!((first.version, first.kind.as_str()), (1, "environment"));
            let Ok(ManagedUpdate::Updated(changed)) = store.update_managed(ManagedKind::Environment, "env_a", Some(1), "{\"a\":2}").await else {
                panic!("not updated");
            };
            assert_eq!((changed.version, changed.body.as_str()), (1, "{\"a\":2}"));
            assert!(changed.updated_at >= first.updated_at);
            let read = store.managed(ManagedKind::Environment, "env_a", None).await.unwrap();
            assert_eq!(read, Some(changed.clone()));
            assert_eq!(store.managed(ManagedKind::Environment, "env_a", Some(1)).await.unwrap(), Some(changed));
            assert_eq!(store.managed(ManagedKind::Environment, "env_a", Some(2)).await.unwrap(), None);
            assert_eq!(store.managed(ManagedKind::Agent, "env_a", None).await.unwrap(), None);
            let versions = store.test_count("SELECT COUNT(*) FROM managed_agent_versions").await;
            assert_eq!(versions, 0);
            assert!(store.delete_managed(ManagedKind::Environment, "env_a").await.unwrap());
            assert_eq!(store.managed(ManagedKind::Environment, "env_a", None).await.unwrap(), None);
        }

        /// A session is stored beside its thread, shows the thread's tenant, title and
        /// archiving, lists by tenant and agent in either order, and goes with its thread.
        async fn a_session_goes_with_its_thread(store: sqlite_memory) {
            let thread = |tenant: Option<&str>| NewThread {
                title: Some("t".into()),
                tenant: tenant.map(Into::into),
                ..Default::default()
            };
            let a = store.create_thread(thread(Some("acme"))).await.unwrap().id;
            let b = store.create_thread(thread(None)).await.unwrap().id;
            let c = store.create_thread(thread(Some("acme"))).await.unwrap().id;
            let session = |t, version| NewSession { thread_id: t, agent_id: "agent_a", agent_version: version, environment_id: "env_a", body: "{}" };
            let first = store.insert_session(session(&a, 1)).await.unwrap();
            assert_eq!((first.tenant.as_deref(), first.title.as_deref(), first.archived_at), (Some("acme"), Some("t"), None));
            assert_eq!((first.agent_version, first.environment_id.as_str()), (1, "env_a"));
            store.insert_session(session(&b, 2)).await.unwrap();
            store.insert_session(session(&c, 2)).await.unwrap();
            let unknown = plugin_contract::ThreadId::from_string("thr_unknown");
            let missing = store.insert_session(session(&unknown, 1)).await;
            assert!(matches!(missing, Err(StoreError::ThreadNotFound(_))), "{missing:?}");
            assert_eq!(store.session(&unknown).await.unwrap(), None);

            let changed = store.update_session(&a, "{\"x\":1}").await.unwrap().unwrap();
            assert_eq!((changed.body.as_str(), changed.created_at), ("{\"x\":1}", first.created_at));
            assert_eq!(store.session(&a).await.unwrap(), Some(changed));
            assert_eq!(store.update_session(&unknown, "{}").await.unwrap(), None);

            let store_ref = &store;
            let list = move |filter| async move { store_ref.list_sessions(filter).await.unwrap().into_iter().map(|s| s.thread_id).collect::<Vec<_>>() };
            assert_eq!(list(sessions()).await, [a.clone(), b.clone(), c.clone()]);
            assert_eq!(list(SessionFilter { descending: true, ..sessions() }).await, [c.clone(), b.clone(), a.clone()]);
            assert_eq!(list(SessionFilter { tenant: Some("acme"), ..sessions() }).await, [a.clone(), c.clone()]);
            assert_eq!(list(SessionFilter { agent_version: Some(2), ..sessions() }).await, [b.clone(), c.clone()]);
            assert_eq!(list(SessionFilter { agent_id: Some("agent_b"), ..sessions() }).await, []);
            let first_b = store.session(&b).await.unwrap().unwrap();
            let after = Some((first_b.created_at, b.clone()));
            assert_eq!(list(SessionFilter { after: after.clone(), ..sessions() }).await, vec![c.clone()]);
            assert_eq!(list(SessionFilter { after, descending: true, ..sessions() }).await, vec![a.clone()]);
            assert_eq!(list(SessionFilter { limit: 1, descending: true, ..sessions() }).await, vec![c.clone()]);

            store.archive_thread(&c).await.unwrap();
            assert!(store.session(&c).await.unwrap().unwrap().archived_at.is_some());
            assert_eq!(list(SessionFilter { include_archived: false, ..sessions() }).await, [a.clone(), b.clone()]);

            let removed = store.delete_thread(&a).await.unwrap();
            assert!(removed.contains(&("managed_sessions", 1)), "{removed:?}");
            assert_eq!(store.session(&a).await.unwrap(), None);
            assert_eq!(list(sessions()).await, [b, c]);
        }
    }
}
