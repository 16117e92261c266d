//! The built-in authorization server's clients, codes and tokens (`crate::oauth::authorize`
//! owns the rules); the facade of `harness_db::OAuthQueries`.

use super::{
    on_db, CodeRow, Db, NewCode, NewToken, OAuthClientRow, OAuthQueries, Store, StoreError,
    TokenRow,
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
}

#[cfg(test)]
mod tests {
    use super::super::tests::store_tests;
    use crate::store::{NewCode, NewToken};

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
    }
}
