//! The operations on `api_keys` (keys stored as the hash of the key) and `caller_usage_days`
//! (what each caller's turns cost per UTC day).

use chrono::{DateTime, NaiveDate, Utc};

use crate::StoreError;

/// A key to store: its hash, never the key.
#[derive(Clone, Copy, Debug)]
pub struct NewKey<'a> {
    /// `key_…`: how the key is named everywhere (the audit log, messages, `harness keys`).
    pub id: &'a str,
    /// The SHA-256 of the whole key, lowercase hex.
    pub hash: &'a str,
    pub tenant: &'a str,
    /// Comma-separated scope names.
    pub scopes: &'a str,
    pub daily_usd: Option<f64>,
    pub max_concurrent_turns: Option<i64>,
    pub rpm: Option<i64>,
}

/// A key as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct KeyRow {
    pub id: String,
    pub tenant: String,
    /// Comma-separated scope names.
    pub scopes: String,
    pub daily_usd: Option<f64>,
    pub max_concurrent_turns: Option<i64>,
    pub rpm: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
}

#[allow(async_fn_in_trait)]
pub trait KeyQueries {
    async fn create_key(&self, key: NewKey<'_>) -> Result<KeyRow, StoreError>;

    /// The key whose hash is `hash`, unless it was revoked.
    async fn live_key(&self, hash: &str) -> Result<Option<KeyRow>, StoreError>;

    /// The key `id`, revoked or not.
    async fn key(&self, id: &str) -> Result<Option<KeyRow>, StoreError>;

    /// Every key, revoked ones included, oldest first.
    async fn list_keys(&self) -> Result<Vec<KeyRow>, StoreError>;

    /// Revokes the key `id` (once: a second call changes nothing); the key as it is then, `None`
    /// for an unknown key.
    async fn revoke_key(&self, id: &str) -> Result<Option<KeyRow>, StoreError>;

    /// What the turns `subject` sent cost on `day`.
    async fn caller_day_cost(&self, subject: &str, day: NaiveDate) -> Result<f64, StoreError>;
}

/// `key_queries!(Backend)`: the [`KeyQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module.
#[macro_export]
macro_rules! key_queries {
    ($backend:ty) => {
        impl $crate::KeyQueries for $backend {
            async fn create_key(&self, key: NewKey<'_>) -> Result<KeyRow, StoreError> {
                create_key(self.pool(), key).await
            }

            async fn live_key(&self, hash: &str) -> Result<Option<KeyRow>, StoreError> {
                live_key(self.pool(), hash).await
            }

            async fn key(&self, id: &str) -> Result<Option<KeyRow>, StoreError> {
                key(self.pool(), id).await
            }

            async fn list_keys(&self) -> Result<Vec<KeyRow>, StoreError> {
                list_keys(self.pool()).await
            }

            async fn revoke_key(&self, id: &str) -> Result<Option<KeyRow>, StoreError> {
                revoke_key(self.pool(), id).await
            }

            async fn caller_day_cost(
                &self,
                subject: &str,
                day: NaiveDate,
            ) -> Result<f64, StoreError> {
                caller_day_cost(self.pool(), subject, day).await
            }
        }
    };
}
