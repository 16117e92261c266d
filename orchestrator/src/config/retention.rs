//! `[retention]`: what the store lets go of as it ages, and when it gives the space back (see
//! `crate::retention`).

use std::time::Duration;

use plugin_contract::settings::secs;
use serde::Deserialize;

/// `[retention]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetentionConfig {
    /// Seconds a finished turn's events are kept. Older turns' events are removed, a whole turn
    /// at a time; their messages, outcomes, usage and tool calls stay, and a replay from before
    /// the cut starts with `log_compacted`. `0`: kept for good.
    #[serde(with = "secs")]
    pub events_max_age: Duration,
    /// How often the daemon looks for what has aged out (events, and audit entries past
    /// `audit.keep_days`).
    #[serde(with = "secs")]
    pub interval: Duration,
    /// How often the database gives the space of removed rows back (SQLite: incremental vacuum
    /// and a checkpoint; PostgreSQL: `VACUUM (ANALYZE)`). `0`: never.
    #[serde(with = "secs")]
    pub vacuum_every: Duration,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            events_max_age: Duration::from_secs(30 * 24 * 3600),
            interval: Duration::from_secs(3600),
            vacuum_every: Duration::from_secs(24 * 3600),
        }
    }
}

impl RetentionConfig {
    pub(super) fn check(&self) -> Result<(), super::ConfigError> {
        match self.interval.is_zero() {
            true => Err(super::ConfigError::Invalid(
                "retention.interval must be more than 0 seconds".into(),
            )),
            false => Ok(()),
        }
    }
}
