//! The plugins the `harness` binary loads: the one place plugin crates are listed. The daemon's
//! library names none; tests load the same list from here.
//!
//! Each plugin gets its own `[plugins.NAME]` table from the config (`Config::plugins`) and
//! parses it itself; a plugin with no settings refuses a table with any key in it. A table for
//! a plugin not in this list is refused by the daemon at start-up
//! (`Config::check_plugin_tables`).

use std::sync::Arc;

use orchestrator::config::Config;
use plugin_contract::{parse_settings, NoSettings, Plugin, SettingsError};

/// The plugins every daemon loads, each with its settings from `config`.
pub fn plugins(config: &Config) -> Result<Vec<Arc<dyn Plugin>>, SettingsError> {
    let table = |name: &str| config.plugins.get(name);
    Ok(vec![
        without_settings(harness_plugin_time::TimePlugin, config)?,
        Arc::new(harness_plugin_delegation::DelegationPlugin::from_table(
            table(harness_plugin_delegation::NAME),
        )?),
        without_settings(harness_plugin_context::ContextPlugin, config)?,
    ])
}

/// `plugin`, which takes no settings: its table, if the config has one, must be empty.
fn without_settings(
    plugin: impl Plugin + 'static,
    config: &Config,
) -> Result<Arc<dyn Plugin>, SettingsError> {
    parse_settings::<NoSettings>(plugin.name(), config.plugins.get(plugin.name()))?;
    Ok(Arc::new(plugin))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plugins for a config file holding `text`.
    fn plugins_for(text: &str) -> Result<Vec<Arc<dyn Plugin>>, SettingsError> {
        plugins(&Config::from_toml(text).unwrap())
    }

    /// The one tool `name` of `plugins`.
    fn tool(plugins: &[Arc<dyn Plugin>], name: &str) -> Arc<dyn plugin_contract::Tool> {
        plugins
            .iter()
            .flat_map(|p| p.tools())
            .find(|t| t.spec().name == name)
            .unwrap()
    }

    #[test]
    fn every_plugin_loads_from_an_empty_config_and_its_names_pass_the_daemons_check() {
        let loaded = plugins_for("").unwrap();
        let names: Vec<&str> = loaded.iter().map(|p| p.name()).collect();
        assert_eq!(names, ["time", "delegation", "context"]);
        let config =
            Config::from_toml("[plugins.time]\n[plugins.delegation]\n[plugins.context]").unwrap();
        config.check_plugin_tables(names).unwrap();
    }

    #[test]
    fn the_delegation_table_reaches_the_delegation_plugin() {
        let default = plugins_for("").unwrap();
        let default_bound = tool(&default, "delegate").spec().timeout;
        assert_eq!(
            default_bound,
            Some(std::time::Duration::from_secs(910)),
            "900 s, and the tool's 10 s above it"
        );
        let set = plugins_for("[plugins.delegation]\ntimeout = 20").unwrap();
        assert_eq!(
            tool(&set, "delegate").spec().timeout,
            Some(std::time::Duration::from_secs(30))
        );
    }

    #[test]
    fn a_key_no_plugin_knows_is_refused_naming_the_plugin_and_the_key() {
        for (file, plugin, key) in [
            (
                "[plugins.delegation]\nmax_dept = 1",
                "delegation",
                "max_dept",
            ),
            ("[plugins.time]\nzone = \"UTC\"", "time", "zone"),
            ("[plugins.context]\nturns = 4", "context", "turns"),
        ] {
            let err = plugins_for(file).err().expect("refused");
            assert_eq!(err.plugin, plugin);
            assert!(
                err.to_string().contains(&format!("`{key}`")),
                "{file}: {err}"
            );
        }
    }
}
