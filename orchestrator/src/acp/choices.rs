//! What the editor may choose for a session's prompts: its mode (ACP's session modes, the CLI's
//! permission modes no wider than the thread's profile's own) and its model (a session config
//! option of category `model`). Both travel with each prompt as the message's own options
//! (`permissionMode`, `model`), which the thread records with the message; nothing here does IO.

use serde_json::{json, Value};

/// The model option's id.
pub const MODEL: &str = "model";
/// The model value that sends none: the thread's (its profile's).
pub const PROFILE_MODEL: &str = "default";
/// Models the CLI knows by alias.
const ALIASES: [(&str, &str); 3] = [("sonnet", "Sonnet"), ("opus", "Opus"), ("haiku", "Haiku")];

/// The modes offered, narrowest first: `(id, name, description, rank)`; a profile's mode admits
/// those of its rank and below (the daemon refuses a wider one).
const MODES: [(&str, &str, &str, u8); 4] = [
    (
        "plan",
        "Plan",
        "Explores and proposes a plan; changes nothing.",
        0,
    ),
    ("default", "Ask", "Asks before tools that change things.", 1),
    (
        "acceptEdits",
        "Accept edits",
        "Edits files without asking.",
        2,
    ),
    (
        "bypassPermissions",
        "Bypass",
        "Runs every tool without asking.",
        3,
    ),
];

/// The editor's choices for one session.
#[derive(Clone, Debug, PartialEq)]
pub struct Choices {
    /// The profile's own mode (`default` when it sets none): the widest offered.
    pub profile_mode: String,
    /// The model the thread runs when none is chosen.
    pub thread_model: Option<String>,
    pub mode: String,
    /// [`PROFILE_MODEL`] or an alias.
    pub model: String,
}

fn rank(mode: &str) -> u8 {
    match mode {
        "plan" | "dontAsk" => 0,
        "acceptEdits" => 2,
        "bypassPermissions" => 3,
        _ => 1,
    }
}

impl Choices {
    /// A session's choices at its start: the profile's mode, the thread's model.
    pub fn new(profile_mode: Option<&str>, thread_model: Option<&str>) -> Choices {
        let profile_mode = profile_mode.unwrap_or("default").to_owned();
        Choices {
            mode: profile_mode.clone(),
            profile_mode,
            thread_model: thread_model.map(str::to_owned),
            model: PROFILE_MODEL.to_owned(),
        }
    }

    /// ACP's `modes`: the modes no wider than the profile's, and the current one.
    pub fn modes(&self) -> Value {
        let widest = rank(&self.profile_mode);
        let available: Vec<Value> = MODES
            .iter()
            .filter(|(_, _, _, rank)| *rank <= widest)
            .map(|(id, name, description, _)| json!({"id": id, "name": name, "description": description}))
            .collect();
        json!({"currentModeId": self.mode, "availableModes": available})
    }

    /// ACP's `configOptions`: the model, as a select.
    pub fn config_options(&self) -> Value {
        let default_name = match &self.thread_model {
            Some(model) => format!("The thread's ({model})"),
            None => "The thread's".to_owned(),
        };
        let mut options = vec![json!({"value": PROFILE_MODEL, "name": default_name})];
        options.extend(
            ALIASES
                .iter()
                .map(|(value, name)| json!({"value": value, "name": name})),
        );
        json!([{
            "id": MODEL, "name": "Model", "category": "model", "type": "select",
            "description": "The model of this session's prompts.",
            "currentValue": self.model, "options": options,
        }])
    }

    /// `session/set_mode`: `Err` names the modes there are when `mode` is not one of them.
    pub fn set_mode(&mut self, mode: &str) -> Result<(), String> {
        let offered = MODES
            .iter()
            .any(|(id, _, _, rank_of)| *id == mode && *rank_of <= rank(&self.profile_mode));
        if !offered {
            return Err(format!(
                "mode `{mode}` is not offered: this session's profile allows up to `{}`",
                self.profile_mode
            ));
        }
        self.mode = mode.to_owned();
        Ok(())
    }

    /// `session/set_config_option`: `Err` says what is wrong with the option or its value.
    pub fn set_option(&mut self, id: &str, value: &str) -> Result<(), String> {
        if id != MODEL {
            return Err(format!("there is no option `{id}`; the options: `{MODEL}`"));
        }
        let known = value == PROFILE_MODEL || ALIASES.iter().any(|(alias, _)| *alias == value);
        if !known {
            return Err(format!("model `{value}` is not offered"));
        }
        self.model = value.to_owned();
        Ok(())
    }

    /// What a prompt's message carries: the mode when it is not the profile's, the model when
    /// one was chosen.
    pub fn message_options(&self) -> Value {
        let mut options = json!({});
        if self.mode != self.profile_mode {
            options["permissionMode"] = json!(self.mode);
        }
        if self.model != PROFILE_MODEL {
            options["model"] = json!(self.model);
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(modes: &Value) -> Vec<&str> {
        modes["availableModes"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["id"].as_str())
            .collect()
    }

    #[test]
    fn the_modes_offered_are_no_wider_than_the_profiles() {
        let choices = Choices::new(None, Some("claude-sonnet-4-5"));
        assert_eq!(ids(&choices.modes()), ["plan", "default"]);
        assert_eq!(choices.modes()["currentModeId"], "default");
        let wide = Choices::new(Some("acceptEdits"), None);
        assert_eq!(ids(&wide.modes()), ["plan", "default", "acceptEdits"]);
        let narrow = Choices::new(Some("plan"), None);
        assert_eq!(ids(&narrow.modes()), ["plan"]);
    }

    #[test]
    fn a_choice_goes_with_each_prompt_and_a_wider_one_is_refused() {
        let mut choices = Choices::new(None, None);
        assert_eq!(
            choices.message_options(),
            json!({}),
            "nothing chosen: nothing sent"
        );
        let refused = choices.set_mode("acceptEdits").unwrap_err();
        assert!(refused.contains("up to `default`"), "{refused}");
        choices.set_mode("plan").unwrap();
        choices.set_option(MODEL, "opus").unwrap();
        assert_eq!(
            choices.message_options(),
            json!({"permissionMode": "plan", "model": "opus"})
        );
        assert!(choices.set_option(MODEL, "gpt").is_err());
        assert!(choices.set_option("effort", "high").is_err());
        assert_eq!(choices.config_options()[0]["currentValue"], "opus");
    }
}
