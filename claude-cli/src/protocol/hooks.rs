//! The hooks the host registers in `initialize` and answers over the control channel
//! (`hook_callback`): which ones ([`Hooks`]), and the `PreSkillShellCommand` request and answer
//! ([`SkillShellCommand`]). The `Stop` hook's input is read by `StopReport`.

use serde_json::{json, Map, Value};

/// The callback id of the `Stop` hook.
pub const STOP_HOOK_ID: &str = "harness_stop";

/// The callback id of the `PreSkillShellCommand` hook.
pub const SKILL_SHELL_HOOK_ID: &str = "harness_skill_shell";

/// The hook event a skill's shell command is checked by (CLI 2.1.332 and later).
const SKILL_SHELL_EVENT: &str = "PreSkillShellCommand";

/// The hooks a process registers in `initialize`, each answered by the host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hooks {
    /// `Stop` ([`STOP_HOOK_ID`]): at each turn's end the CLI reports the background tasks and
    /// crons it will still start turns for by itself.
    pub stop: bool,
    /// `PreSkillShellCommand` ([`SKILL_SHELL_HOOK_ID`]): before a shell command written in a
    /// skill or slash command (`` !`cmd` ``, a ```` ```! ```` block) runs, the CLI asks the host
    /// ([`SkillShellCommand`]). The CLI checks its own rules first: a command they would ask
    /// about is refused without asking the host, one they refuse never reaches it.
    pub skill_shell: bool,
}

impl Hooks {
    /// The `hooks` of `initialize`: `{EVENT: [{matcher: null, hookCallbackIds: [ID]}]}`, or null
    /// with none.
    pub(super) fn registration(self) -> Value {
        let rows = [
            (self.stop, "Stop", STOP_HOOK_ID),
            (self.skill_shell, SKILL_SHELL_EVENT, SKILL_SHELL_HOOK_ID),
        ];
        let hooks: Map<String, Value> = rows
            .into_iter()
            .filter(|(on, _, _)| *on)
            .map(|(_, event, id)| {
                let matcher = json!([{"matcher": null, "hookCallbackIds": [id]}]);
                (event.to_owned(), matcher)
            })
            .collect();
        if hooks.is_empty() {
            Value::Null
        } else {
            Value::Object(hooks)
        }
    }
}

/// A shell command written in a skill or slash command, which the CLI is about to run: the
/// input of a `PreSkillShellCommand` `hook_callback`. It runs only if the host allows it
/// ([`SkillShellCommand::answer`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SkillShellCommand {
    /// The shell tool that runs it: `Bash` (or `PowerShell`).
    pub tool_name: String,
    /// The command as it would run, with the skill's arguments filled in.
    pub command: String,
    /// Names this command (`<Skill tool_use_id>:preamble-<n>`), not a tool call of the transcript.
    pub tool_use_id: Option<String>,
    /// The skill or command whose text holds it (`plugin:skill` for a plugin's).
    pub command_name: String,
    /// Where the skill comes from: `plugin`, …
    pub command_source: Option<String>,
    /// Who loaded the skill: `claude` (the `Skill` tool), `user`, `other`.
    pub invoked_by: String,
}

impl SkillShellCommand {
    /// The command in a `hook_callback` request, if it is one of the `PreSkillShellCommand` hook.
    pub fn from_request(request: &Value) -> Option<SkillShellCommand> {
        let input = &request["input"];
        if request["callback_id"] != SKILL_SHELL_HOOK_ID
            || input["hook_event_name"] != SKILL_SHELL_EVENT
        {
            return None;
        }
        let text = |value: &Value| value.as_str().map(str::to_owned);
        Some(SkillShellCommand {
            tool_name: text(&input["tool_name"]).unwrap_or_else(|| "Bash".to_owned()),
            command: text(&input["tool_input"]["command"])?,
            tool_use_id: text(&input["tool_use_id"]).or_else(|| text(&request["tool_use_id"])),
            command_name: text(&input["command_name"]).unwrap_or_default(),
            command_source: text(&input["command_source"]),
            invoked_by: text(&input["invoked_by"]).unwrap_or_else(|| "other".to_owned()),
        })
    }

    /// The hook's answer. `allow` lets the command run (if nothing else refuses it); a denial
    /// keeps it from running, and the skill's text reads `[not run: blocked by hook: REASON]` in
    /// its place.
    pub fn answer(allow: bool, reason: &str) -> Value {
        json!({"hookSpecificOutput": {
            "hookEventName": SKILL_SHELL_EVENT,
            "permissionDecision": if allow { "allow" } else { "deny" },
            "permissionDecisionReason": reason,
        }})
    }
}
