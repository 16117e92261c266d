//! `[schedules]`: how this node runs the schedules (see `crate::schedules`).

use std::time::Duration;

use plugin_contract::settings::secs;
use serde::Deserialize;

/// `[schedules]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulesConfig {
    /// Whether this node runs schedules' ticks (the API works either way; on a cluster, the
    /// nodes that run them share the ticks, each run once).
    pub enabled: bool,
    /// How often the node looks for ticks that are due.
    #[serde(with = "secs")]
    pub poll: Duration,
}

impl Default for SchedulesConfig {
    fn default() -> Self {
        SchedulesConfig {
            enabled: true,
            poll: Duration::from_secs(1),
        }
    }
}
