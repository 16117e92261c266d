//! The built-in authorization server's clients, codes and tokens (`crate::oauth::authorize`
//! owns the rules); the facade of `harness_db::OAuthQueries`.

use super::{
    on_db, CodeRow, Db, NewCode, NewToken, OAuthClientRow, OAuthQueries, Store, StoreError,
    TokenRow, UnusedClients,
};

impl Store {
    pub async fn create_oauth_client(
        &self,
        id: &str,
        name: Option<&str>,
        redirect_uris: &[String],
    ) -> Result<OAuthClientRow, StoreError> {
        let _timer = self.metrics.time("create_oauth_client");
        on_db!(self, db => db.create_oauth_client(id, name, redirect_uris).await)
    }

    pub async fn oauth_client(&self, id: &str) -> Result<Option<OAuthClientRow>, StoreError> {
        let _timer = self.metrics.time("oauth_client");
        on_db!(self, db => db.oauth_client(id).await)
    }

    pub async fn create_oauth_code(&self, code: NewCode<'_>) -> Result<(), StoreError> {
        let _timer = self.metrics.time("create_oauth_code");
        on_db!(self, db => db.create_oauth_code(code).await)
    }

    /// The code `hash`, marked used: `None` when unknown or used before.
    pub async fn take_oauth_code(&self, hash: &str) -> Result<Option<CodeRow>, StoreError> {
        let _timer = self.metrics.time("take_oauth_code");
        on_db!(self, db => db.take_oauth_code(hash).await)
    }

    pub async fn create_oauth_token(&self, token: NewToken<'_>) -> Result<(), StoreError> {
        let _timer = self.metrics.time("create_oauth_token");
        on_db!(self, db => db.create_oauth_token(token).await)
    }

    pub async fn oauth_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
        let _timer = self.metrics.time("oauth_token");
        on_db!(self, db => db.oauth_token(hash).await)
    }

    /// Spends the refresh token `hash`, once: false when spent or revoked before.
    pub async fn spend_oauth_token(&self, hash: &str) -> Result<bool, StoreError> {
        let _timer = self.metrics.time("spend_oauth_token");
        on_db!(self, db => db.spend_oauth_token(hash).await)
    }

    pub async fn revoke_oauth_family(&self, family: &str) -> Result<(), StoreError> {
        let _timer = self.metrics.time("revoke_oauth_family");
        on_db!(self, db => db.revoke_oauth_family(family).await)
    }

    /// Whether a token was ever issued to `client_id` (then it is kept for good).
    pub async fn oauth_client_used(&self, client_id: &str) -> Result<bool, StoreError> {
        let _timer = self.metrics.time("oauth_client_used");
        on_db!(self, db => db.oauth_client_used(client_id).await)
    }

    /// The registered clients created since `since` that no token was issued to yet.
    pub async fn unused_oauth_clients(&self, since: &str) -> Result<UnusedClients, StoreError> {
        let _timer = self.metrics.time("unused_oauth_clients");
        on_db!(self, db => db.unused_oauth_clients(since).await)
    }

    /// Deletes the registered clients created before `before` that no token was issued to and
    /// that hold no live code; how many.
    pub async fn delete_unused_oauth_clients(&self, before: &str) -> Result<u64, StoreError> {
        let _timer = self.metrics.time("delete_unused_oauth_clients");
        on_db!(self, db => db.delete_unused_oauth_clients(before).await)
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::{NewCode, NewToken, UnusedClients};

    store_tests! {
        /// A code is taken once; a refresh token is spent once and its family revoked whole.
        async fn codes_are_taken_once_and_refresh_tokens_spent_once(store: sqlite_memory) {
            let uris = vec!["http://127.0.0.1:9/cb".to_owned()];
            let client = store.create_oauth_client("hc_1", Some("app"), &uris).await.unwrap();
            assert_eq!(client.redirect_uris.0, uris);
            assert_eq!(store.oauth_client("hc_1").await.unwrap(), Some(client));
            let code = NewCode {
                hash: "c1",
                client_id: "hc_1",
                redirect_uri: "http://127.0.0.1:9/cb",
                challenge: "ch",
                tenant: "acme",
                scopes: "threads:read",
                resource: None,
                expires_at: "2999-01-01T00:00:00.000000Z",
            };
            store.create_oauth_code(code).await.unwrap();
            let taken = store.take_oauth_code("c1").await.unwrap().expect("first take");
            assert_eq!((taken.tenant.as_str(), taken.challenge.as_str()), ("acme", "ch"));
            assert_eq!(store.take_oauth_code("c1").await.unwrap(), None, "once");
            let token = |hash, kind| NewToken {
                hash,
                kind,
                family: "f1",
                client_id: "hc_1",
                tenant: "acme",
                scopes: "threads:read",
                resource: None,
                expires_at: "2999-01-01T00:00:00.000000Z",
            };
            store.create_oauth_token(token("a1", "access")).await.unwrap();
            store.create_oauth_token(token("r1", "refresh")).await.unwrap();
            assert!(store.spend_oauth_token("r1").await.unwrap());
            assert!(!store.spend_oauth_token("r1").await.unwrap(), "once");
            store.revoke_oauth_family("f1").await.unwrap();
            let access = store.oauth_token("a1").await.unwrap().expect("kept");
            assert!(access.revoked_at.is_some());
            assert_eq!(store.oauth_token("nope").await.unwrap(), None);
        }

        /// A client no token was issued to is unused: counted, and deleted once older than the
        /// cut-off unless a live code waits for it; a used one stays.
        async fn unused_clients_are_counted_and_go_once_old(store: sqlite_memory) {
            let uris = vec!["http://127.0.0.1:9/cb".to_owned()];
            for id in ["hc_unused", "hc_used", "hc_coded"] {
                store.create_oauth_client(id, None, &uris).await.unwrap();
            }
            let later = "2999-01-01T00:00:00.000000Z";
            let earlier = "2000-01-01T00:00:00.000000Z";
            store
                .create_oauth_token(NewToken {
                    hash: "a1",
                    kind: "access",
                    family: "f1",
                    client_id: "hc_used",
                    tenant: "acme",
                    scopes: "threads:read",
                    resource: None,
                    expires_at: later,
                })
                .await
                .unwrap();
            store
                .create_oauth_code(NewCode {
                    hash: "c1",
                    client_id: "hc_coded",
                    redirect_uri: "http://127.0.0.1:9/cb",
                    challenge: "ch",
                    tenant: "acme",
                    scopes: "threads:read",
                    resource: None,
                    expires_at: later,
                })
                .await
                .unwrap();
            assert!(store.oauth_client_used("hc_used").await.unwrap());
            assert!(!store.oauth_client_used("hc_unused").await.unwrap());
            let unused = store.unused_oauth_clients(earlier).await.unwrap();
            assert_eq!(unused.count, 2, "{unused:?}");
            assert!(unused.oldest.is_some());
            assert_eq!(
                store.unused_oauth_clients(later).await.unwrap(),
                UnusedClients::default()
            );
            assert_eq!(store.delete_unused_oauth_clients(earlier).await.unwrap(), 0, "none old");
            assert_eq!(store.delete_unused_oauth_clients(later).await.unwrap(), 1);
            assert_eq!(store.oauth_client("hc_unused").await.unwrap(), None);
            assert!(store.oauth_client("hc_used").await.unwrap().is_some(), "used");
            assert!(store.oauth_client("hc_coded").await.unwrap().is_some(), "a live code");
        }
    }
}
