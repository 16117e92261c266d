//! `[audit]`: how long the audit log keeps its entries (see `http::audit`).

use serde::Deserialize;

/// `[audit]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// Days an entry is kept; older ones are deleted (hourly). `0`: kept for good.
    pub keep_days: u32,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig { keep_days: 90 }
    }
}
