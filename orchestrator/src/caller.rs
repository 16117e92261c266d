//! Who is calling: a [`Caller`] (a subject, its tenant, its scopes) travels with each request.
//!
//! The auth middleware (`http::require_token`) sets it once, in the request's extensions, as
//! `routing::to_owner` adds the `Fence`; handlers pass it on in `pipeline::NewMessage`, and the
//! store keeps its [`CallerId`] on the user message and on a person's answer to a permission.
//! Work the daemon starts itself acts for someone too: a schedule's run for its schedule, a
//! re-driven turn for the message's caller, a delegated child for its parent's caller.
//!
//! A request forwarded to the thread's owner carries its caller in [`CALLER_HEADER`], signed
//! with the cluster's credential (the token every node shares) over the method, the path and a
//! timestamp ([`Caller::forwarded`], [`Caller::from_forward`]): the owner records the caller the
//! request came from, not the node that passed it on, and refuses a header it cannot verify.
//!
//! A tool call from `/mcp` is handed its caller explicitly: the `threads__*` tools are bound
//! to it (`http::mcp_endpoint::threads::ThreadsPlugin::for_caller`).
//!
//! No IO; a leaf of the module tree.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

pub use harness_db::CallerId;

/// The header a forwarded request carries its caller in: `<caller>.<unix seconds>.<signature>`,
/// base64url without padding.
pub const CALLER_HEADER: &str = "x-harness-caller";

/// How far a forwarded caller's timestamp may be from the owner's clock.
const FORWARD_SKEW: Duration = Duration::from_secs(300);

/// What a caller may do.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
pub enum Scope {
    #[serde(rename = "threads:read")]
    ThreadsRead,
    #[serde(rename = "threads:write")]
    ThreadsWrite,
    #[serde(rename = "approvals")]
    Approvals,
    #[serde(rename = "admin")]
    Admin,
    #[serde(rename = "metrics")]
    Metrics,
}

impl Scope {
    pub const ALL: [Scope; 5] = [
        Scope::ThreadsRead,
        Scope::ThreadsWrite,
        Scope::Approvals,
        Scope::Admin,
        Scope::Metrics,
    ];

    /// Its name, as the API, the config and `harness keys` write it (`threads:read`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::ThreadsRead => "threads:read",
            Scope::ThreadsWrite => "threads:write",
            Scope::Approvals => "approvals",
            Scope::Admin => "admin",
            Scope::Metrics => "metrics",
        }
    }

    /// The scope named `name`.
    pub fn parse(name: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// A comma-separated list of names, each known, at least one.
    pub fn parse_list(list: &str) -> Result<Vec<Scope>, String> {
        let mut scopes = Vec::new();
        for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let scope = Scope::parse(name).ok_or_else(|| {
                let known: Vec<&str> = Scope::ALL.iter().map(|s| s.as_str()).collect();
                format!("unknown scope `{name}` (known: {})", known.join(", "))
            })?;
            if !scopes.contains(&scope) {
                scopes.push(scope);
            }
        }
        if scopes.is_empty() {
            return Err("at least one scope is needed".into());
        }
        Ok(scopes)
    }

    /// `scopes` as a comma-separated list.
    pub fn join(scopes: &[Scope]) -> String {
        let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
        names.join(",")
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Who is calling.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Caller {
    /// Who: `operator` (the configured token, or anyone when none is set), `schedule:<id>`, …
    pub subject: String,
    /// Whose threads it acts on; `None`: the operator's (every thread).
    pub tenant: Option<String>,
    pub scopes: Vec<Scope>,
}

/// Why a forwarded caller was refused.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ForwardError {
    #[error("the forwarded caller is malformed")]
    Malformed,
    #[error("the forwarded caller's signature does not verify")]
    Signature,
    #[error("the forwarded caller is too old or from the future")]
    Stale,
}

type HmacSha256 = Hmac<Sha256>;

impl Caller {
    /// Whoever holds the configured token (or anyone, when none is set): every scope, every
    /// tenant's threads.
    pub fn operator() -> Caller {
        Caller {
            subject: "operator".into(),
            tenant: None,
            scopes: Scope::ALL.to_vec(),
        }
    }

    /// A turn the CLI started by itself (`claude.scheduling_tools`), and what it delegates.
    pub fn cli() -> Caller {
        Caller {
            subject: "cli".into(),
            tenant: None,
            scopes: vec![Scope::ThreadsWrite],
        }
    }

    /// A schedule's runs act for the schedule.
    pub fn schedule(id: &str, tenant: Option<String>) -> Caller {
        Caller {
            subject: format!("schedule:{id}"),
            tenant,
            scopes: vec![Scope::ThreadsWrite],
        }
    }

    /// The caller a stored message was sent by, acting again (a re-drive): it may write to the
    /// thread and nothing more; `operator` when the message was stored before callers were.
    pub fn acting_for(id: Option<CallerId>) -> Caller {
        match id {
            Some(id) => Caller {
                subject: id.subject,
                tenant: id.tenant,
                scopes: vec![Scope::ThreadsWrite],
            },
            None => Caller::operator(),
        }
    }

    /// What the store keeps of it.
    pub fn id(&self) -> CallerId {
        CallerId {
            subject: self.subject.clone(),
            tenant: self.tenant.clone(),
        }
    }

    pub fn has(&self, scope: Scope) -> bool {
        self.scopes.contains(&scope) || self.scopes.contains(&Scope::Admin)
    }

    /// Whether the caller may see what tenant `owner` owns (a thread, a schedule): the
    /// operator, work the daemon does for it and an `admin` see everything; a tenant's caller
    /// only its own. Whatever it may not see does not exist for it (404, never 403).
    pub fn sees(&self, owner: Option<&str>) -> bool {
        self.sees_all() || self.tenant.as_deref() == owner
    }

    /// Whether the caller sees every tenant's: the operator, an `admin`, the daemon's own work.
    pub fn sees_all(&self) -> bool {
        self.has(Scope::Admin) || self.tenant.is_none()
    }

    /// The [`CALLER_HEADER`] value for a request `method path` forwarded now, signed with `key`
    /// (the cluster's credential).
    pub fn forwarded(&self, key: &[u8], method: &str, path: &str) -> String {
        self.forwarded_at(key, method, path, unix_now())
    }

    fn forwarded_at(&self, key: &[u8], method: &str, path: &str, at: u64) -> String {
        let body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(self).unwrap_or_default());
        let signature = URL_SAFE_NO_PAD.encode(sign(key, method, path, &body, at));
        format!("{body}.{at}.{signature}")
    }

    /// The caller of a forwarded request `method path`, from its [`CALLER_HEADER`] `value`,
    /// verified with `key`.
    pub fn from_forward(
        value: &str,
        key: &[u8],
        method: &str,
        path: &str,
    ) -> Result<Caller, ForwardError> {
        Self::from_forward_at(value, key, method, path, unix_now())
    }

    fn from_forward_at(
        value: &str,
        key: &[u8],
        method: &str,
        path: &str,
        now: u64,
    ) -> Result<Caller, ForwardError> {
        let mut parts = value.split('.');
        let (Some(body), Some(at), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ForwardError::Malformed);
        };
        let at: u64 = at.parse().map_err(|_| ForwardError::Malformed)?;
        let signature = URL_SAFE_NO_PAD
            .decode(signature)
            .map_err(|_| ForwardError::Malformed)?;
        if mac(key, method, path, body, at)
            .verify_slice(&signature)
            .is_err()
        {
            return Err(ForwardError::Signature);
        }
        if now.abs_diff(at) > FORWARD_SKEW.as_secs() {
            return Err(ForwardError::Stale);
        }
        let body = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| ForwardError::Malformed)?;
        serde_json::from_slice(&body).map_err(|_| ForwardError::Malformed)
    }
}

/// The MAC of a forwarded caller: method, path, caller and timestamp, one per line.
fn mac(key: &[u8], method: &str, path: &str, body: &str, at: u64) -> HmacSha256 {
    let mut mac = <HmacSha256 as Mac>::new_from_slice(key)
        .unwrap_or_else(|_| unreachable!("HMAC takes keys of any length"));
    for part in [method.as_bytes(), path.as_bytes(), body.as_bytes()] {
        mac.update(part);
        mac.update(b"\n");
    }
    mac.update(at.to_string().as_bytes());
    mac
}

fn sign(key: &[u8], method: &str, path: &str, body: &str, at: u64) -> Vec<u8> {
    mac(key, method, path, body, at)
        .finalize()
        .into_bytes()
        .to_vec()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn someone() -> Caller {
        Caller {
            subject: "key_1".into(),
            tenant: Some("acme".into()),
            scopes: vec![Scope::ThreadsRead, Scope::ThreadsWrite],
        }
    }

    #[test]
    fn a_forwarded_caller_verifies_for_its_request_only() {
        let key = b"the cluster token";
        let at = 1_800_000_000;
        let value = someone().forwarded_at(key, "POST", "/api/threads/t/messages", at);
        let back = Caller::from_forward_at(&value, key, "POST", "/api/threads/t/messages", at + 10);
        assert_eq!(back, Ok(someone()));
        for (key, method, path) in [
            (&b"another token"[..], "POST", "/api/threads/t/messages"),
            (key, "GET", "/api/threads/t/messages"),
            (key, "POST", "/api/threads/u/messages"),
        ] {
            assert_eq!(
                Caller::from_forward_at(&value, key, method, path, at),
                Err(ForwardError::Signature),
                "{method} {path}"
            );
        }
        let late = at + FORWARD_SKEW.as_secs() + 1;
        assert_eq!(
            Caller::from_forward_at(&value, key, "POST", "/api/threads/t/messages", late),
            Err(ForwardError::Stale)
        );
    }

    #[test]
    fn a_changed_caller_or_a_broken_value_is_refused() {
        let key = b"k";
        let value = someone().forwarded_at(key, "POST", "/p", 100);
        let (_, rest) = value.split_once('.').expect("three parts");
        let admin = Caller {
            scopes: vec![Scope::Admin],
            ..someone()
        };
        let forged = format!(
            "{}.{rest}",
            URL_SAFE_NO_PAD.encode(serde_json::to_vec(&admin).expect("serializes"))
        );
        assert_eq!(
            Caller::from_forward_at(&forged, key, "POST", "/p", 100),
            Err(ForwardError::Signature)
        );
        for broken in ["", "a.b", "a.b.c.d", "a.notanumber.c"] {
            assert_eq!(
                Caller::from_forward_at(broken, key, "POST", "/p", 100),
                Err(ForwardError::Malformed),
                "{broken:?}"
            );
        }
    }

    #[test]
    fn admin_has_every_scope_and_the_operator_is_admin() {
        assert!(Caller::operator().has(Scope::Approvals));
        let reader = Caller {
            scopes: vec![Scope::ThreadsRead],
            ..someone()
        };
        assert!(reader.has(Scope::ThreadsRead));
        assert!(!reader.has(Scope::ThreadsWrite));
        let schedule = Caller::schedule("sch_1", None);
        assert_eq!(schedule.subject, "schedule:sch_1");
        assert!(schedule.has(Scope::ThreadsWrite));
        assert_eq!(Caller::acting_for(None), Caller::operator());
    }

    #[test]
    fn a_tenant_sees_its_own_an_admin_and_the_operator_see_all() {
        let acme = someone();
        assert!(acme.sees(Some("acme")));
        assert!(!acme.sees(Some("globex")));
        assert!(
            !acme.sees(None),
            "the operator's threads are not a tenant's"
        );
        let admin = Caller {
            scopes: vec![Scope::Admin],
            ..someone()
        };
        assert!(admin.sees(Some("globex")) && admin.sees(None));
        assert!(Caller::operator().sees(Some("globex")));
    }

    #[test]
    fn scope_lists_parse_and_name_what_is_unknown() {
        assert_eq!(
            Scope::parse_list("threads:read, approvals,threads:read"),
            Ok(vec![Scope::ThreadsRead, Scope::Approvals])
        );
        let err = Scope::parse_list("threads:read,root").expect_err("unknown");
        assert!(err.contains("`root`"), "{err}");
        assert!(Scope::parse_list(" , ").is_err());
        assert_eq!(
            Scope::join(&Scope::ALL),
            "threads:read,threads:write,approvals,admin,metrics"
        );
        for scope in Scope::ALL {
            let json = serde_json::to_value(scope).expect("serializes");
            assert_eq!(json, scope.as_str(), "serde and as_str agree");
        }
    }
}
