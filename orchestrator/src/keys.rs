//! API keys: a bearer credential other than the operator's token, naming a tenant, its scopes
//! and its limits.
//!
//! A key is `hk_` and 43 random base64url characters, shown once when it is made (`harness keys
//! create`, `POST /api/keys`); the store keeps its SHA-256 ([`hash`]) and an id (`key_…`),
//! which names the key everywhere after: as the [`Caller`]'s subject on the messages it sent,
//! in the audit log, in `harness keys list`. A high-entropy key needs no slow hash: nobody can
//! guess one from its SHA-256.
//!
//! [`Keys`] holds what the limits of a live key need on this node: its requests per minute
//! ([`Keys::admit`], a GCRA from `governor`: a burst of `rpm`, then one every `60/rpm` s) and its
//! turns at once ([`Keys::turn_slot`], a semaphore its turns wait on). Its daily budget is a
//! [`crate::budget`] scope like the thread's and the day's, charged from `caller_usage_days`.
//! On a cluster, the requests and turns are counted per node; the budget is shared.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::caller::{Caller, Scope};
use crate::secret;
use crate::store::{KeyRow, NewKey, Store, StoreError};
use crate::sync::lock;

/// How every key starts; a bearer credential without it is never looked up.
pub const KEY_PREFIX: &str = "hk_";

/// How every key's id starts.
const ID_PREFIX: &str = "key_";

/// Longest tenant name.
const TENANT_MAX: usize = 64;

/// What a key is made with.
#[derive(Clone, Debug, PartialEq)]
pub struct KeySpec {
    pub tenant: String,
    pub scopes: Vec<Scope>,
    /// Most USD the turns it sends may cost per UTC day.
    pub daily_usd: Option<f64>,
    /// Most of its turns running at once (on one node); more wait their turn.
    pub max_concurrent_turns: Option<u32>,
    /// Most requests per minute (on one node); more get `429` with `Retry-After`.
    pub rpm: Option<u32>,
}

impl KeySpec {
    /// The problem with it, in the words of the API's 422.
    pub fn check(&self) -> Result<(), String> {
        check_tenant(&self.tenant)?;
        if self.scopes.is_empty() {
            return Err("at least one scope is needed".into());
        }
        if let Some(usd) = self.daily_usd {
            crate::budget::validate_usd(usd, "dailyUsd")?;
        }
        for (name, value) in [
            ("maxConcurrentTurns", self.max_concurrent_turns),
            ("rpm", self.rpm),
        ] {
            if value == Some(0) {
                return Err(format!("{name} must be 1 or more"));
            }
        }
        Ok(())
    }
}

/// The problem with `tenant` as a tenant's name, if any.
pub fn check_tenant(tenant: &str) -> Result<(), String> {
    let ok = !tenant.is_empty()
        && tenant.len() <= TENANT_MAX
        && tenant
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "tenant must be 1 to {TENANT_MAX} letters, digits, `.`, `_` or `-` (got {tenant:?})"
        ))
    }
}

/// A key just made: the key itself (shown once, never stored) and its row.
#[derive(Clone, Debug)]
pub struct MadeKey {
    pub key: String,
    pub row: KeyRow,
}

/// Makes a key for `spec` (checked first).
pub async fn create(store: &Store, spec: &KeySpec) -> Result<Result<MadeKey, String>, StoreError> {
    if let Err(problem) = spec.check() {
        return Ok(Err(problem));
    }
    let key = secret::token(KEY_PREFIX);
    let id = format!("{ID_PREFIX}{}", secret::hex(&secret::random::<8>()));
    let scopes = Scope::join(&spec.scopes);
    let row = store
        .create_key(NewKey {
            id: &id,
            hash: &hash(&key),
            tenant: &spec.tenant,
            scopes: &scopes,
            daily_usd: spec.daily_usd,
            max_concurrent_turns: spec.max_concurrent_turns.map(i64::from),
            rpm: spec.rpm.map(i64::from),
        })
        .await?;
    Ok(Ok(MadeKey { key, row }))
}

/// The SHA-256 of a key, lowercase hex: what the store keeps.
pub fn hash(key: &str) -> String {
    secret::sha256_hex(key)
}

/// Whether a caller's subject names a key (`key_…`), rather than the operator or the daemon.
pub fn is_key_id(subject: &str) -> bool {
    subject.starts_with(ID_PREFIX)
}

/// The caller a live key authorizes: the key's id, its tenant, its scopes (a name no longer
/// known is dropped).
pub fn caller_of(key: &KeyRow) -> Caller {
    Caller {
        subject: key.id.clone(),
        tenant: Some(key.tenant.clone()),
        scopes: key.scopes.split(',').filter_map(Scope::parse).collect(),
    }
}

/// The live limits of keys on this node. Cheap to share.
#[derive(Debug)]
pub struct Keys {
    store: Store,
    rates: Mutex<HashMap<String, Arc<DefaultDirectRateLimiter>>>,
    turns: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Keys {
    pub fn new(store: Store) -> Keys {
        Keys {
            store,
            rates: Mutex::default(),
            turns: Mutex::default(),
        }
    }

    /// The live key `presented` is, if it is one (`None`: not a key, unknown or revoked).
    pub async fn authenticate(&self, presented: &str) -> Result<Option<KeyRow>, StoreError> {
        if !presented.starts_with(KEY_PREFIX) {
            return Ok(None);
        }
        self.store.live_key(&hash(presented)).await
    }

    /// Counts one request of `key` against its `rpm`: `Err(wait)` when it has none left, with
    /// how long until it has.
    pub fn admit(&self, key: &KeyRow) -> Result<(), Duration> {
        let Some(rpm) = key
            .rpm
            .and_then(|n| u32::try_from(n).ok())
            .and_then(NonZeroU32::new)
        else {
            return Ok(());
        };
        let limiter = lock(&self.rates)
            .entry(key.id.clone())
            .or_insert_with(|| Arc::new(RateLimiter::direct(Quota::per_minute(rpm))))
            .clone();
        limiter
            .check()
            .map_err(|not_until| not_until.wait_time_from(DefaultClock::default().now()))
    }

    /// The key behind `caller`, when it acts for one (a message a key sent, or its re-drive).
    pub async fn of(&self, caller: &Caller) -> Result<Option<KeyRow>, StoreError> {
        if !is_key_id(&caller.subject) {
            return Ok(None);
        }
        self.store.key(&caller.subject).await
    }

    /// Waits until `key` has room for one more turn on this node (`max_concurrent_turns`); the
    /// permit is its place until dropped. `None`: the key has no such limit.
    pub async fn turn_slot(&self, key: &KeyRow) -> Option<OwnedSemaphorePermit> {
        let most = usize::try_from(key.max_concurrent_turns?).ok()?;
        let slots = lock(&self.turns)
            .entry(key.id.clone())
            .or_insert_with(|| Arc::new(Semaphore::new(most)))
            .clone();
        // Never closed, so it always grants.
        slots.acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> KeySpec {
        KeySpec {
            tenant: "acme".into(),
            scopes: vec![Scope::ThreadsRead],
            daily_usd: None,
            max_concurrent_turns: None,
            rpm: None,
        }
    }

    #[test]
    fn a_spec_names_its_problem() {
        assert_eq!(spec().check(), Ok(()));
        for (bad, words) in [
            (
                KeySpec {
                    tenant: String::new(),
                    ..spec()
                },
                "tenant must be",
            ),
            (
                KeySpec {
                    tenant: "a/b".into(),
                    ..spec()
                },
                "tenant must be",
            ),
            (
                KeySpec {
                    scopes: vec![],
                    ..spec()
                },
                "at least one scope",
            ),
            (
                KeySpec {
                    daily_usd: Some(-1.0),
                    ..spec()
                },
                "dailyUsd",
            ),
            (
                KeySpec {
                    rpm: Some(0),
                    ..spec()
                },
                "rpm must be 1 or more",
            ),
            (
                KeySpec {
                    max_concurrent_turns: Some(0),
                    ..spec()
                },
                "maxConcurrentTurns",
            ),
        ] {
            let err = bad.check().expect_err("refused");
            assert!(err.contains(words), "{err}");
        }
    }

    #[tokio::test]
    async fn a_key_is_stored_as_its_hash_and_found_by_it() {
        let (store, _kept) = crate::store::tests::sqlite_memory().await;
        let made = create(&store, &spec()).await.unwrap().expect("made");
        assert!(
            made.key.starts_with(KEY_PREFIX) && made.key.len() == 46,
            "{}",
            made.key
        );
        assert!(is_key_id(&made.row.id));
        let keys = Keys::new(store.clone());
        let found = keys.authenticate(&made.key).await.unwrap().expect("found");
        assert_eq!(found.id, made.row.id);
        assert_eq!(
            caller_of(&found),
            Caller {
                subject: made.row.id.clone(),
                tenant: Some("acme".into()),
                scopes: vec![Scope::ThreadsRead],
            }
        );
        // Nothing stored holds the key itself.
        let stored = format!("{:?}", store.list_keys().await.unwrap());
        assert!(!stored.contains(&made.key[KEY_PREFIX.len()..]), "{stored}");
        assert_eq!(keys.authenticate("hk_not-a-key").await.unwrap(), None);
        assert_eq!(keys.authenticate("operator-token").await.unwrap(), None);
        store.revoke_key(&made.row.id).await.unwrap();
        assert_eq!(keys.authenticate(&made.key).await.unwrap(), None);
    }

    #[tokio::test]
    async fn rpm_admits_a_burst_then_says_how_long_to_wait() {
        let (store, _kept) = crate::store::tests::sqlite_memory().await;
        let spec = KeySpec {
            rpm: Some(2),
            ..spec()
        };
        let made = create(&store, &spec).await.unwrap().expect("made");
        let keys = Keys::new(store);
        assert_eq!(keys.admit(&made.row), Ok(()));
        assert_eq!(keys.admit(&made.row), Ok(()));
        let wait = keys
            .admit(&made.row)
            .expect_err("the third in a minute waits");
        assert!(
            wait > Duration::from_secs(25) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
    }

    #[tokio::test]
    async fn turns_at_once_wait_for_a_slot() {
        let (store, _kept) = crate::store::tests::sqlite_memory().await;
        let spec = KeySpec {
            max_concurrent_turns: Some(1),
            ..spec()
        };
        let made = create(&store, &spec).await.unwrap().expect("made");
        let keys = Arc::new(Keys::new(store));
        let first = keys.turn_slot(&made.row).await.expect("a limit");
        let waiting = {
            let (keys, row) = (keys.clone(), made.row.clone());
            tokio::spawn(async move { keys.turn_slot(&row).await })
        };
        tokio::task::yield_now().await;
        assert!(
            !waiting.is_finished(),
            "the second waits while the first runs"
        );
        drop(first);
        assert!(waiting.await.unwrap().is_some());
    }
}
