//! The plugins the `harness` binary loads: the one place plugin crates are listed. The daemon's
//! library names none; tests load the same list from here.

use std::sync::Arc;

use orchestrator::config::Config;
use plugin_contract::Plugin;

/// The plugins every daemon loads.
pub fn plugins(config: &Config) -> Vec<Arc<dyn Plugin>> {
    vec![
        Arc::new(harness_plugin_time::TimePlugin),
        Arc::new(harness_plugin_delegation::DelegationPlugin::new(
            config.tools.delegation_max_depth,
            config.tools.delegation_timeout,
        )),
        Arc::new(harness_plugin_context::ContextPlugin),
    ]
}
