//! `[cluster]`: several nodes on one database.

use std::time::Duration;

use plugin_contract::settings::secs;
use serde::Deserialize;

/// Several nodes on one PostgreSQL database (`docs/scale-out.md`). Off unless `advertise` is set.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// This node's URL as its peers reach it (flag `--advertise`, env `HARNESS_ADVERTISE`),
    /// e.g. `http://10.0.0.5:7878`; `auto` takes the bound address. Set: clustering is on
    /// (PostgreSQL only); peers forward requests for the threads this node owns to it.
    pub advertise: Option<String>,
    /// How long a thread's lease outlives its owner's last heartbeat (env `HARNESS_LEASE_TTL`,
    /// seconds): how long a dead node's threads wait before a peer takes them. Renewed every
    /// third of it.
    #[serde(with = "secs")]
    pub lease_ttl: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        Self {
            advertise: None,
            lease_ttl: Duration::from_secs(15),
        }
    }
}
