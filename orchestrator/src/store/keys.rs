//! API keys and what each caller spent per day (`crate::keys` owns the rules); the facade of
//! `harness_db::KeyQueries`.

use chrono::NaiveDate;

use super::{on_db, Db, KeyQueries, KeyRow, NewKey, Store, StoreError};

impl Store {
    pub async fn create_key(&self, key: NewKey<'_>) -> Result<KeyRow, StoreError> {
        let _timer = self.metrics.time("create_key");
        on_db!(self, db => db.create_key(key).await)
    }

    /// The key whose hash is `hash`, unless revoked.
    pub async fn live_key(&self, hash: &str) -> Result<Option<KeyRow>, StoreError> {
        let _timer = self.metrics.time("live_key");
        on_db!(self, db => db.live_key(hash).await)
    }

    /// The key `id`, revoked or not.
    pub async fn key(&self, id: &str) -> Result<Option<KeyRow>, StoreError> {
        let _timer = self.metrics.time("key");
        on_db!(self, db => db.key(id).await)
    }

    /// Every key, oldest first.
    pub async fn list_keys(&self) -> Result<Vec<KeyRow>, StoreError> {
        let _timer = self.metrics.time("list_keys");
        on_db!(self, db => db.list_keys().await)
    }

    /// Revokes the key `id`; the key as it is then, `None` for an unknown key.
    pub async fn revoke_key(&self, id: &str) -> Result<Option<KeyRow>, StoreError> {
        let _timer = self.metrics.time("revoke_key");
        on_db!(self, db => db.revoke_key(id).await)
    }

    /// What the turns `subject` sent cost on `day` (UTC).
    pub async fn caller_day_cost(&self, subject: &str, day: NaiveDate) -> Result<f64, StoreError> {
        let _timer = self.metrics.time("caller_day_cost");
        on_db!(self, db => db.caller_day_cost(subject, day).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::NewKey;

    fn key<'a>(id: &'a str, hash: &'a str) -> NewKey<'a> {
        NewKey {
            id,
            hash,
            tenant: "acme",
            scopes: "threads:read,threads:write",
            daily_usd: Some(1.5),
            max_concurrent_turns: None,
            rpm: Some(60),
        }
    }

    store_tests! {
        /// A key is found by its hash until it is revoked; revoking keeps its row and is done
        /// once.
        async fn a_key_is_found_by_its_hash_until_revoked(store: sqlite_memory) {
            let made = store.create_key(key("key_a", "h1")).await.unwrap();
            assert_eq!((made.tenant.as_str(), made.daily_usd, made.rpm), ("acme", Some(1.5), Some(60)));
            store.create_key(key("key_b", "h2")).await.unwrap();
            assert_eq!(store.live_key("h1").await.unwrap().map(|k| k.id), Some("key_a".into()));
            assert_eq!(store.live_key("nope").await.unwrap(), None);
            let revoked = store.revoke_key("key_a").await.unwrap().expect("known");
            let at = revoked.revoked_at.expect("revoked");
            assert_eq!(store.live_key("h1").await.unwrap(), None);
            let again = store.revoke_key("key_a").await.unwrap().expect("known");
            assert_eq!(again.revoked_at, Some(at), "revoked once");
            assert_eq!(store.revoke_key("key_x").await.unwrap(), None);
            let ids: Vec<String> = store.list_keys().await.unwrap().into_iter().map(|k| k.id).collect();
            assert_eq!(ids, ["key_a", "key_b"]);
            assert!(store.create_key(key("key_c", "h2")).await.is_err(), "hashes are unique");
        }
    }
}
