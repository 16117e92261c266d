//! The operations on the built-in authorization server's tables: `oauth_clients` (registered
//! clients), `oauth_codes` (authorization codes, used once) and `oauth_tokens` (access and
//! refresh tokens, stored as hashes; a refresh token is spent when used, and every token of its
//! family is revoked when a spent one comes back). A registered client that no token was ever
//! issued to is *unused*: it may be deleted once it is old enough.

use chrono::{DateTime, Utc};

use crate::StoreError;

/// A registered client.
#[derive(Clone, Debug, PartialEq)]
pub struct OAuthClientRow {
    pub id: String,
    pub name: Option<String>,
    /// A JSON array of the redirect URIs it registered.
    pub redirect_uris: sqlx::types::Json<Vec<String>>,
    pub created_at: DateTime<Utc>,
}

/// A code to store.
#[derive(Clone, Copy, Debug)]
pub struct NewCode<'a> {
    pub hash: &'a str,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    /// The PKCE S256 challenge.
    pub challenge: &'a str,
    pub tenant: &'a str,
    pub scopes: &'a str,
    pub resource: Option<&'a str>,
    /// A [`crate::now_text`]-style time.
    pub expires_at: &'a str,
}

/// A code taken: what it grants, and what its exchange must match.
#[derive(Clone, Debug, PartialEq)]
pub struct CodeRow {
    pub client_id: String,
    pub redirect_uri: String,
    pub challenge: String,
    pub tenant: String,
    pub scopes: String,
    pub resource: Option<String>,
    pub expires_at: DateTime<Utc>,
}

/// A token to store.
#[derive(Clone, Copy, Debug)]
pub struct NewToken<'a> {
    pub hash: &'a str,
    /// `access` or `refresh`.
    pub kind: &'a str,
    /// One per authorization: a refresh keeps it.
    pub family: &'a str,
    pub client_id: &'a str,
    pub tenant: &'a str,
    pub scopes: &'a str,
    pub resource: Option<&'a str>,
    pub expires_at: &'a str,
}

/// A token as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenRow {
    pub kind: String,
    pub family: String,
    pub client_id: String,
    pub tenant: String,
    pub scopes: String,
    pub resource: Option<String>,
    pub expires_at: DateTime<Utc>,
    pub spent_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[allow(async_fn_in_trait)]
pub trait OAuthQueries {
    async fn create_oauth_client(
        &self,
        id: &str,
        name: Option<&str>,
        redirect_uris: &[String],
    ) -> Result<OAuthClientRow, StoreError>;

    async fn oauth_client(&self, id: &str) -> Result<Option<OAuthClientRow>, StoreError>;

    async fn create_oauth_code(&self, code: NewCode<'_>) -> Result<(), StoreError>;

    /// Marks the code `hash` used and returns it, once: `None` when unknown or used before.
    async fn take_oauth_code(&self, hash: &str) -> Result<Option<CodeRow>, StoreError>;

    async fn create_oauth_token(&self, token: NewToken<'_>) -> Result<(), StoreError>;

    /// The token `hash`, whatever its state.
    async fn oauth_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError>;

    /// Marks the refresh token `hash` spent, once: false when it was spent (or revoked) before.
    async fn spend_oauth_token(&self, hash: &str) -> Result<bool, StoreError>;

    /// Revokes every token of `family`.
    async fn revoke_oauth_family(&self, family: &str) -> Result<(), StoreError>;

    /// Whether a token was ever issued to `client_id`.
    async fn oauth_client_used(&self, client_id: &str) -> Result<bool, StoreError>;

    /// The unused registered clients created at or after `since` (a [`crate::now_text`]-style
    /// time).
    async fn unused_oauth_clients(&self, since: &str) -> Result<UnusedClients, StoreError>;

    /// Deletes the unused registered clients created before `before` that hold no live code;
    /// how many.
    async fn delete_unused_oauth_clients(&self, before: &str) -> Result<u64, StoreError>;
}

/// Registered clients no token was issued to yet.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct UnusedClients {
    pub count: i64,
    /// When the oldest of them was registered.
    pub oldest: Option<DateTime<Utc>>,
}

/// `oauth_queries!(Backend)`: the [`OAuthQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module.
#[macro_export]
macro_rules! oauth_queries {
    ($backend:ty) => {
        impl $crate::OAuthQueries for $backend {
            async fn create_oauth_client(
                &self,
                id: &str,
                name: Option<&str>,
                redirect_uris: &[String],
            ) -> Result<OAuthClientRow, StoreError> {
                create_oauth_client(self.pool(), id, name, redirect_uris).await
            }

            async fn oauth_client(&self, id: &str) -> Result<Option<OAuthClientRow>, StoreError> {
                oauth_client(self.pool(), id).await
            }

            async fn create_oauth_code(&self, code: NewCode<'_>) -> Result<(), StoreError> {
                create_oauth_code(self.pool(), code).await
            }

            async fn take_oauth_code(&self, hash: &str) -> Result<Option<CodeRow>, StoreError> {
                take_oauth_code(self.pool(), hash).await
            }

            async fn create_oauth_token(&self, token: NewToken<'_>) -> Result<(), StoreError> {
                create_oauth_token(self.pool(), token).await
            }

            async fn oauth_token(&self, hash: &str) -> Result<Option<TokenRow>, StoreError> {
                oauth_token(self.pool(), hash).await
            }

            async fn spend_oauth_token(&self, hash: &str) -> Result<bool, StoreError> {
                spend_oauth_token(self.pool(), hash).await
            }

            async fn revoke_oauth_family(&self, family: &str) -> Result<(), StoreError> {
                revoke_oauth_family(self.pool(), family).await
            }

            async fn oauth_client_used(&self, client_id: &str) -> Result<bool, StoreError> {
                oauth_client_used(self.pool(), client_id).await
            }

            async fn unused_oauth_clients(
                &self,
                since: &str,
            ) -> Result<$crate::UnusedClients, StoreError> {
                unused_oauth_clients(self.pool(), since).await
            }

            async fn delete_unused_oauth_clients(&self, before: &str) -> Result<u64, StoreError> {
                delete_unused_oauth_clients(self.pool(), before).await
            }
        }
    };
}
