//! A plugin's own settings: the `[plugins.NAME]` table of the daemon's config file, handed as
//! it is to the plugin's constructor. The daemon never reads inside it; each plugin parses its
//! table into a settings struct of its own with [`parse_settings`], so a typo in the file stops
//! start-up with an error naming the plugin and the key.
//!
//! A settings struct derives `Deserialize` with `#[serde(default, deny_unknown_fields)]` (every
//! key optional, no key unknown) and takes durations as whole or fractional seconds through
//! [`secs`], the format of every duration in the daemon's own config. A plugin with nothing to
//! set parses its table as [`NoSettings`], so that `[plugins.time] foo = 1` is refused too.

use serde::de::DeserializeOwned;
use serde::Deserialize;

/// One plugin's `[plugins.NAME]` table, as the config file gave it.
pub type PluginTable = toml::Table;

/// A `[plugins.NAME]` table its plugin cannot use: an unknown key, a value of the wrong type.
/// Stops the daemon at start-up; the operator reads the message.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid [plugins.{plugin}] settings: {message}")]
pub struct SettingsError {
    /// The plugin whose table it is.
    pub plugin: String,
    /// What is wrong, naming the key: "unknown field `max_dept`, expected …", "invalid type:
    /// string \"x\", expected u32, in `max_depth`".
    pub message: String,
}

/// `plugin`'s settings from its table; no table at all gives what an empty one gives (with
/// `#[serde(default)]`, the defaults).
pub fn parse_settings<T: DeserializeOwned>(
    plugin: &str,
    table: Option<&PluginTable>,
) -> Result<T, SettingsError> {
    toml::Value::Table(table.cloned().unwrap_or_default())
        .try_into()
        .map_err(|error: toml::de::Error| SettingsError {
            plugin: plugin.to_owned(),
            // "<what>\nin `<key>`\n" when a value is wrong: one line.
            message: error.to_string().trim_end().replace('\n', ", "),
        })
}

/// The settings of a plugin that has none: its table, when there is one, must be empty.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoSettings {}

/// Durations are seconds in the file, whole or not: `timeout = 900`, `timeout = 2.5`. Use as
/// `#[serde(with = "plugin_contract::settings::secs")]`; the daemon's own config uses it too.
pub mod secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        // `try_`: `from_secs_f64` panics on a value too large for a `Duration` (`1e30`).
        Duration::try_from_secs_f64(secs).map_err(|_| {
            serde::de::Error::custom(format!(
                "a duration must be a non-negative number of seconds that fits (got {secs})"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(default, deny_unknown_fields)]
    struct Example {
        depth: u32,
        #[serde(with = "secs")]
        wait: Duration,
    }

    impl Default for Example {
        fn default() -> Self {
            Self {
                depth: 3,
                wait: Duration::from_secs(60),
            }
        }
    }

    fn table(text: &str) -> PluginTable {
        text.parse().unwrap()
    }

    #[test]
    fn no_table_and_an_empty_table_give_the_defaults() {
        assert_eq!(
            parse_settings::<Example>("ex", None).unwrap(),
            Example::default()
        );
        assert_eq!(
            parse_settings::<Example>("ex", Some(&table(""))).unwrap(),
            Example::default()
        );
    }

    #[test]
    fn values_in_the_table_win_and_durations_are_seconds() {
        let got: Example = parse_settings("ex", Some(&table("depth = 1\nwait = 2.5"))).unwrap();
        assert_eq!(
            got,
            Example {
                depth: 1,
                wait: Duration::from_millis(2500)
            }
        );
        let got: Example = parse_settings("ex", Some(&table("wait = 900"))).unwrap();
        assert_eq!(got.wait, Duration::from_secs(900));
        assert_eq!(got.depth, 3, "an absent key keeps its default");
    }

    #[test]
    fn an_unknown_key_names_the_plugin_and_the_key() {
        let err = parse_settings::<Example>("ex", Some(&table("dpeth = 1"))).unwrap_err();
        assert_eq!(err.plugin, "ex");
        let shown = err.to_string();
        assert!(
            shown.starts_with("invalid [plugins.ex] settings: ") && shown.contains("`dpeth`"),
            "{shown}"
        );
    }

    #[test]
    fn a_wrong_type_or_a_negative_duration_is_refused() {
        let err = parse_settings::<Example>("ex", Some(&table("depth = \"deep\""))).unwrap_err();
        assert!(
            err.message.contains("deep") && err.message.contains("`depth`"),
            "{err}"
        );
        let err = parse_settings::<Example>("ex", Some(&table("wait = -1"))).unwrap_err();
        assert!(
            err.message.contains("non-negative") && err.message.contains("`wait`"),
            "{err}"
        );
        // Finite but beyond what a `Duration` holds: an error, not a panic.
        for text in ["wait = 1e30", "wait = inf", "wait = nan"] {
            let err = parse_settings::<Example>("ex", Some(&table(text))).unwrap_err();
            assert!(err.message.contains("`wait`"), "{text}: {err}");
        }
    }

    #[test]
    fn a_plugin_without_settings_takes_only_an_empty_table() {
        parse_settings::<NoSettings>("time", None).unwrap();
        parse_settings::<NoSettings>("time", Some(&table(""))).unwrap();
        let err = parse_settings::<NoSettings>("time", Some(&table("zone = \"UTC\""))).unwrap_err();
        assert!(
            err.to_string().contains("[plugins.time]") && err.message.contains("`zone`"),
            "{err}"
        );
    }
}
