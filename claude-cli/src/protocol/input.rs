//! What the host writes: the command line of a process (`SpawnOptions`, `cli_args`) and the
//! lines it puts on stdin (`initialize`, user turns, control requests and answers).

use serde_json::{json, Value};

/// An in-process MCP server the host serves over the control channel, declared in
/// `initialize` (`sdkMcpServers`; part 1 §6.1 of the protocol notes).
#[derive(Clone, Debug, PartialEq)]
pub struct SdkMcpServer {
    pub name: String,
    /// The CLI's own per-call limit on the server's tools, in ms.
    pub timeout_ms: u64,
    /// The server's handshake (`{initializeResult, toolsListResult}`), so the CLI answers its
    /// MCP client's `initialize` and first `tools/list` itself (`sdkMcpServerManifests`).
    pub manifest: Option<Value>,
}

/// External MCP servers for one process: the `servers` of a `mcp_set_servers` control request
/// (`{"NAME": {"type": "stdio", "command", "args", "env"}}`), sent on stdin right after
/// `initialize`, so what `env` holds (credentials) is on no command line. Never shown: its
/// `Debug` names the servers only, and the request's stdin line is not traced.
#[derive(Clone, PartialEq)]
pub struct ExternalMcpServers(pub Value);

impl std::fmt::Debug for ExternalMcpServers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&String> = self
            .0
            .as_object()
            .map(|m| m.keys().collect())
            .unwrap_or_default();
        f.debug_tuple("ExternalMcpServers").field(&names).finish()
    }
}

/// What makes two processes interchangeable: a change to any of these needs another process.
/// Where the process works and which session it resumes are not part of it.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SpawnOptions {
    pub model: Option<String>,
    /// `--fallback-model`: the model the CLI turns to when the main one is overloaded.
    pub fallback_model: Option<String>,
    /// `--effort`: `low`, `medium`, `high`, `xhigh` or `max`.
    pub effort: Option<String>,
    /// `--plugin-dir`, once each: plugin folders (skills, commands, agents) for the session.
    pub plugin_dirs: Vec<String>,
    pub system_prompt: Option<String>,
    pub append_system_prompt: Option<String>,
    /// `--tools`: `None` keeps the CLI's built-in set, `""` removes every built-in tool.
    pub builtin_tools: Option<String>,
    /// `--allowedTools`: tools (and patterns) that run without asking.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools`: built-in tools removed from the model's tool list (in sub-agents too);
    /// a call to one is a tool error (`No such tool available`).
    pub disallowed_tools: Vec<String>,
    pub permission_mode: Option<String>,
    /// `--max-turns`: the CLI's own bound on API round trips in one turn.
    pub max_turns: Option<u32>,
    /// `--settings`: a JSON object of settings for the session.
    pub settings: Option<String>,
    /// Leaves out `--include-partial-messages`: no token deltas (`stream_event`), only whole
    /// messages; the CLI does a little less work per turn.
    pub no_partial_messages: bool,
    /// `--permission-prompt-tool`: `stdio` sends each permission the CLI would ask a person for
    /// to the host as a `can_use_tool` control request.
    pub permission_prompt_tool: Option<String>,
    /// `--json-schema`: every turn of the process must end with output matching this schema
    /// (the result's `structured_output`).
    pub json_schema: Option<String>,
    /// `--fork-session` with `--resume`: the resumed history under a new session id, so the
    /// resumed session itself is left as it was.
    pub fork_session: bool,
    /// `--session-mirror`: the CLI copies every transcript write to stdout as a
    /// `transcript_mirror` line ([`TranscriptMirror`]), so the host can keep the session and
    /// restore it where the CLI's own files are gone (protocol notes part 2, §5).
    pub session_mirror: bool,
}

/// The argv (after the binary) for one process; `resume` is the CLI session to load.
pub fn cli_args(options: &SpawnOptions, resume: Option<&str>) -> Vec<String> {
    let mut args: Vec<String> = [
        "--output-format",
        "stream-json",
        "--verbose",
        "--input-format",
        "stream-json",
        "--include-partial-messages",
        // Only our settings: user/project settings files could change tools or hooks under us.
        "--setting-sources=",
    ]
    .map(String::from)
    .to_vec();
    if options.no_partial_messages {
        args.retain(|a| a != "--include-partial-messages");
    }
    if options.session_mirror {
        args.push("--session-mirror".to_owned());
    }
    if !options.allowed_tools.is_empty() {
        args.extend(["--allowedTools".to_owned(), options.allowed_tools.join(",")]);
    }
    if !options.disallowed_tools.is_empty() {
        args.extend([
            "--disallowedTools".to_owned(),
            options.disallowed_tools.join(","),
        ]);
    }
    // Equals form throughout: `--resume` takes an optional value, so a separate value starting with
    // `-` would be read as another flag.
    let flags = [
        ("--model", &options.model),
        ("--fallback-model", &options.fallback_model),
        ("--effort", &options.effort),
        ("--system-prompt", &options.system_prompt),
        ("--append-system-prompt", &options.append_system_prompt),
        ("--tools", &options.builtin_tools),
        ("--permission-mode", &options.permission_mode),
        ("--settings", &options.settings),
        ("--permission-prompt-tool", &options.permission_prompt_tool),
        ("--json-schema", &options.json_schema),
    ];
    for (flag, value) in flags {
        if let Some(value) = value {
            args.push(format!("{flag}={value}"));
        }
    }
    if let Some(max) = options.max_turns {
        args.push(format!("--max-turns={max}"));
    }
    for dir in &options.plugin_dirs {
        args.push(format!("--plugin-dir={dir}"));
    }
    if let Some(session) = resume {
        args.push(format!("--resume={session}"));
        if options.fork_session {
            args.push("--fork-session".to_owned());
        }
    }
    args
}

/// Our `initialize` request, declaring `servers` as in-process MCP servers with their settings
/// and, where given, their manifests, registering `hooks`, and carrying `managed_settings` (the
/// process's policy, for a launch with `--managed-settings-in-initialize`).
pub fn initialize_request(
    servers: &[SdkMcpServer],
    hooks: super::Hooks,
    agents: Option<&Value>,
    managed_settings: Option<&Value>,
) -> Value {
    let names: Vec<&str> = servers.iter().map(|s| s.name.as_str()).collect();
    let configs: serde_json::Map<String, Value> = servers
        .iter()
        .map(|s| (s.name.clone(), json!({ "timeout": s.timeout_ms })))
        .collect();
    let manifests: serde_json::Map<String, Value> = servers
        .iter()
        .filter_map(|s| Some((s.name.clone(), s.manifest.clone()?)))
        .collect();
    let mut request = json!({
        "subtype": "initialize",
        "hooks": hooks.registration(),
        "sdkMcpServers": names,
        "sdkMcpServerConfigs": configs,
    });
    if !manifests.is_empty() {
        request["sdkMcpServerManifests"] = Value::Object(manifests);
    }
    if let Some(agents) = agents {
        // The CLI's sub-agent definitions: `{NAME: {description, prompt, tools?, model?}}`.
        request["agents"] = agents.clone();
    }
    if let Some(settings) = managed_settings {
        request["managedSettings"] = settings.clone();
    }
    request
}

/// A user turn. `client_composed` makes the CLI take the text verbatim, so `/clear` and other
/// slash commands are never run (one would switch the session id mid-process).
/// `content` must have no [`super::MediaSource::File`] left ([`super::UserContent::unresolved`]).
pub fn user_turn(content: &super::UserContent, uuid: &str) -> String {
    json!({
        "type": "user",
        "session_id": "",
        "message": {"role": "user", "content": content},
        "parent_tool_use_id": null,
        "client_composed": true,
        "uuid": uuid,
    })
    .to_string()
}

/// A control request from us to the CLI.
pub fn control_request(request_id: &str, request: &Value) -> String {
    json!({"type": "control_request", "request_id": request_id, "request": request}).to_string()
}

/// The answer to one of the CLI's control requests: success with a response, or an error.
pub fn control_response(request_id: &str, outcome: &Result<Value, String>) -> String {
    let response = match outcome {
        Ok(response) => {
            json!({"subtype": "success", "request_id": request_id, "response": response})
        }
        Err(error) => json!({"subtype": "error", "request_id": request_id, "error": error}),
    };
    json!({"type": "control_response", "response": response}).to_string()
}
