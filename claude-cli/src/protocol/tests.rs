//! The protocol as strings: argv, stdin lines, stdout decoding (with property tests).

use super::*;
use serde_json::json;

#[test]
fn args_use_equals_form_and_declare_the_sdk_server() {
    let options = SpawnOptions {
        model: Some("claude-x".into()),
        allowed_tools: vec!["mcp__harness".into(), "Read".into()],
        disallowed_tools: vec!["ListAgents".into(), "CronCreate".into()],
        max_turns: Some(7),
        settings: Some(r#"{"a": 1}"#.into()),
        permission_prompt_tool: Some("stdio".into()),
        json_schema: Some(r#"{"type":"object"}"#.into()),
        ..Default::default()
    };
    let args = cli_args(&options, Some("-looks-like-a-flag"));
    assert!(args.contains(&"--permission-prompt-tool=stdio".to_owned()));
    assert!(args.contains(&r#"--json-schema={"type":"object"}"#.to_owned()));
    assert!(args.contains(&"--max-turns=7".to_owned()));
    assert!(args.contains(&r#"--settings={"a": 1}"#.to_owned()));
    assert!(args.contains(&"--model=claude-x".to_owned()));
    assert!(args.contains(&"--resume=-looks-like-a-flag".to_owned()));
    let allowed = args.iter().position(|a| a == "--allowedTools").unwrap();
    assert_eq!(args[allowed + 1], "mcp__harness,Read");
    let disallowed = args.iter().position(|a| a == "--disallowedTools").unwrap();
    assert_eq!(args[disallowed + 1], "ListAgents,CronCreate");
    assert!(!cli_args(&SpawnOptions::default(), None).contains(&"--disallowedTools".to_owned()));
    assert!(
        !args.iter().any(|a| a == "--mcp-config"),
        "in-process servers are declared in initialize"
    );
    assert!(
        !args.iter().any(|a| a.starts_with("--resume"))
            || args.iter().filter(|a| a.starts_with("--resume")).count() == 1
    );
    assert!(!cli_args(&options, None)
        .iter()
        .any(|a| a.starts_with("--resume")));
    assert!(!args.contains(&"--fork-session".to_owned()));
    let fork = SpawnOptions {
        fork_session: true,
        ..Default::default()
    };
    let args = cli_args(&fork, Some("parent-session"));
    assert!(args.ends_with(&["--resume=parent-session".into(), "--fork-session".into()]));
    assert!(!cli_args(&fork, None).contains(&"--fork-session".to_owned()));
}

#[test]
fn user_turn_is_client_composed_and_escapes_everything() {
    let line = user_turn(&"/clear \"quoted\"\nnext line".into(), "u-1");
    assert!(!line.contains('\n'), "one line on the wire");
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["client_composed"], true);
    assert_eq!(v["message"]["content"], "/clear \"quoted\"\nnext line");
    assert_eq!(v["uuid"], "u-1");
}

#[test]
fn user_turn_writes_blocks_as_the_messages_api_shape() {
    let content: UserContent = serde_json::from_value(json!([
        {"type": "text", "text": "see"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
    ]))
    .unwrap();
    let v: Value = serde_json::from_str(&user_turn(&content, "u-2")).unwrap();
    assert_eq!(
        v["message"]["content"],
        json!([
            {"type": "text", "text": "see"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
        ])
    );
}

#[test]
fn initialize_declares_the_servers_with_their_settings_and_manifests() {
    let manifest = json!({"initializeResult": {"protocolVersion": "2025-11-25"}, "toolsListResult": {"tools": []}});
    let request = initialize_request(
        &[
            SdkMcpServer {
                name: "harness".into(),
                timeout_ms: 120_000,
                manifest: Some(manifest.clone()),
            },
            SdkMcpServer {
                name: "other".into(),
                timeout_ms: 5,
                manifest: None,
            },
        ],
        Hooks::default(),
        Some(&json!({"reviewer": {"description": "d", "prompt": "p"}})),
        Some(&json!({"disableSideloadFlags": true})),
    );
    assert_eq!(request["managedSettings"]["disableSideloadFlags"], true);
    assert_eq!(request["agents"]["reviewer"]["prompt"], "p");
    assert_eq!(request["subtype"], "initialize");
    assert_eq!(request["hooks"], Value::Null);
    assert_eq!(request["sdkMcpServers"], json!(["harness", "other"]));
    assert_eq!(
        request["sdkMcpServerConfigs"]["harness"]["timeout"],
        120_000
    );
    assert_eq!(
        request["sdkMcpServerManifests"],
        json!({ "harness": manifest })
    );
    let bare = initialize_request(&[], Hooks::default(), None, None);
    assert!(bare.get("agents").is_none());
    assert!(bare.get("sdkMcpServerManifests").is_none());
    assert!(bare.get("managedSettings").is_none());
}

#[test]
fn initialize_registers_each_hook_asked_for_with_its_callback_id() {
    let stop = Hooks {
        stop: true,
        ..Hooks::default()
    };
    assert_eq!(
        initialize_request(&[], stop, None, None)["hooks"],
        json!({"Stop": [{"matcher": null, "hookCallbackIds": [STOP_HOOK_ID]}]})
    );
    let both = Hooks {
        stop: true,
        skill_shell: true,
    };
    let hooks = &initialize_request(&[], both, None, None)["hooks"];
    assert_eq!(hooks["Stop"][0]["hookCallbackIds"], json!([STOP_HOOK_ID]));
    assert_eq!(
        hooks["PreSkillShellCommand"],
        json!([{"matcher": null, "hookCallbackIds": [SKILL_SHELL_HOOK_ID]}])
    );
    assert_eq!(hooks.as_object().map(|h| h.len()), Some(2), "{hooks}");
}

/// A `PreSkillShellCommand` callback as claude 2.1.332 sends it when the model loads a plugin's
/// skill holding `` !`echo skill-marker-out` ``.
fn skill_shell_request(callback_id: &str, event: &str) -> Value {
    json!({
        "subtype": "hook_callback",
        "callback_id": callback_id,
        "input": {
            "session_id": "9a774e67", "transcript_path": "/c/p/9a774e67.jsonl", "cwd": "/w",
            "prompt_id": "0e1c5c98", "permission_mode": "default",
            "hook_event_name": event,
            "tool_name": "Bash",
            "tool_input": {"command": "echo skill-marker-out"},
            "tool_use_id": "toolu_01:preamble-0",
            "command_name": "helpers:shelly",
            "command_source": "plugin",
            "invoked_by": "claude"
        },
        "tool_use_id": "toolu_01:preamble-0"
    })
}

#[test]
fn a_skill_shell_callback_reads_as_the_command_and_its_skill() {
    let request = skill_shell_request(SKILL_SHELL_HOOK_ID, "PreSkillShellCommand");
    assert_eq!(
        SkillShellCommand::from_request(&request),
        Some(SkillShellCommand {
            tool_name: "Bash".into(),
            command: "echo skill-marker-out".into(),
            tool_use_id: Some("toolu_01:preamble-0".into()),
            command_name: "helpers:shelly".into(),
            command_source: Some("plugin".into()),
            invoked_by: "claude".into(),
        })
    );
    // Another hook's callback, or another event on ours, is not a skill's command.
    let other = skill_shell_request(STOP_HOOK_ID, "PreSkillShellCommand");
    assert_eq!(SkillShellCommand::from_request(&other), None);
    let other = skill_shell_request(SKILL_SHELL_HOOK_ID, "Stop");
    assert_eq!(SkillShellCommand::from_request(&other), None);
    // Without a command there is nothing to decide.
    let mut bare = skill_shell_request(SKILL_SHELL_HOOK_ID, "PreSkillShellCommand");
    bare["input"]["tool_input"] = json!({});
    assert_eq!(SkillShellCommand::from_request(&bare), None);
}

#[test]
fn a_skill_shell_answer_says_allow_or_deny_with_the_reason() {
    assert_eq!(
        SkillShellCommand::answer(false, "rule Bash(rm:*)"),
        json!({"hookSpecificOutput": {
            "hookEventName": "PreSkillShellCommand",
            "permissionDecision": "deny",
            "permissionDecisionReason": "rule Bash(rm:*)",
        }})
    );
    let allowed = SkillShellCommand::answer(true, "rule Bash(echo:*)");
    assert_eq!(allowed["hookSpecificOutput"]["permissionDecision"], "allow");
    // An answer that changes the command refuses it in the CLI: ours never does.
    assert!(allowed["hookSpecificOutput"].get("updatedInput").is_none());
}

#[test]
fn command_lifecycle_lines_say_which_command_a_turn_runs() {
    // As claude 2.1.330 writes them: ours name the uuid we sent; a cron's has its own.
    let ours = decode(r#"{"type":"command_lifecycle","command_uuid":"a-0","state":"started","uuid":"x","session_id":"s"}"#).unwrap();
    assert_eq!(
        ours,
        CliMessage::Lifecycle(Lifecycle {
            command_uuid: "a-0".into(),
            state: "started".into(),
            wakeup_source: None,
        })
    );
    let cron = decode(r#"{"type":"command_lifecycle","command_uuid":"f94f","state":"started","wakeup_source":"schedule_wakeup","uuid":"y","session_id":"s"}"#).unwrap();
    let CliMessage::Lifecycle(cron) = cron else {
        panic!("{cron:?}")
    };
    assert_eq!(cron.wakeup_source.as_deref(), Some("schedule_wakeup"));
}

#[test]
fn control_responses_answer_success_or_error() {
    let ok: Value = serde_json::from_str(&control_response("r1", &Ok(json!({"x": 1})))).unwrap();
    assert_eq!(ok["response"]["subtype"], "success");
    assert_eq!(ok["response"]["request_id"], "r1");
    assert_eq!(ok["response"]["response"]["x"], 1);
    let err: Value = serde_json::from_str(&control_response("r2", &Err("no".into()))).unwrap();
    assert_eq!(err["response"]["subtype"], "error");
    assert_eq!(err["response"]["error"], "no");
}

#[test]
fn decodes_control_traffic() {
    let req = decode(r#"{"type":"control_request","request_id":"abc","request":{"subtype":"mcp_message","server_name":"harness","message":{"jsonrpc":"2.0","id":0,"method":"initialize"}}}"#).unwrap();
    assert!(
        matches!(req, CliMessage::ControlRequest { ref request_id, ref subtype, .. } if request_id == "abc" && subtype == "mcp_message")
    );
    let ok = decode(r#"{"type":"control_response","response":{"subtype":"success","request_id":"req_1","response":{"pid":7}}}"#).unwrap();
    assert_eq!(
        ok,
        CliMessage::ControlResponse {
            request_id: "req_1".into(),
            outcome: Ok(json!({"pid":7}))
        }
    );
    let err = decode(r#"{"type":"control_response","response":{"subtype":"error","request_id":"req_2","error":"nope"}}"#).unwrap();
    assert_eq!(
        err,
        CliMessage::ControlResponse {
            request_id: "req_2".into(),
            outcome: Err("nope".into())
        }
    );
}

#[test]
fn api_failure_reported_as_success_subtype_is_an_error() {
    let line = r#"{"type":"result","subtype":"success","is_error":true,"result":"API Error: 500 mock 500","session_id":"s1","num_turns":1,"terminal_reason":"api_error"}"#;
    let CliMessage::Result(result) = decode(line).unwrap() else {
        panic!("not a result")
    };
    assert!(result.is_error);
    assert_eq!(result.error_reason(), "API Error: 500 mock 500");
}

#[test]
fn missing_session_is_recognised() {
    let line = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"num_turns":0,"session_id":"x","errors":["No conversation found with session ID: x"]}"#;
    let CliMessage::Result(result) = decode(line).unwrap() else {
        panic!("not a result")
    };
    assert!(result.is_missing_session());
    assert_eq!(
        result.error_reason(),
        "No conversation found with session ID: x"
    );
}

#[test]
fn turn_lines_become_events() {
    let delta = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hel"}},"session_id":"s","parent_tool_use_id":null}"#;
    let CliMessage::Progress(line) = decode(delta).unwrap() else {
        panic!()
    };
    assert_eq!(
        line.events,
        vec![TurnEvent::TextDelta(TextDelta { text: "Hel".into() })]
    );
    assert_eq!(line.session_id.as_deref(), Some("s"));

    let tool = r#"{"type":"assistant","message":{"content":[{"type":"tool_use","id":"toolu_1","name":"mcp__harness__time__current_time","input":{}}]},"parent_tool_use_id":null}"#;
    let CliMessage::Progress(line) = decode(tool).unwrap() else {
        panic!()
    };
    assert!(
        matches!(&line.events[0], TurnEvent::ToolCallStarted(ToolCallStarted { name, .. }) if name == "mcp__harness__time__current_time")
    );

    let result = r#"{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_1","type":"tool_result","content":"bad","is_error":true}]},"parent_tool_use_id":null}"#;
    let CliMessage::Progress(line) = decode(result).unwrap() else {
        panic!()
    };
    assert!(matches!(
        &line.events[0],
        TurnEvent::ToolCallFinished(ToolCallFinished { is_error: true, .. })
    ));

    let thought = r#"{"type":"assistant","message":{"content":[{"type":"thinking","thinking":"hm","signature":"sig"},{"type":"redacted_thinking","data":"x"}]},"parent_tool_use_id":null}"#;
    let CliMessage::Progress(line) = decode(thought).unwrap() else {
        panic!()
    };
    assert_eq!(
        line.events,
        vec![
            TurnEvent::AssistantThinking(AssistantThinking {
                thinking: "hm".into()
            }),
            TurnEvent::AssistantThinking(AssistantThinking {
                thinking: String::new()
            }),
        ]
    );

    let nested = r#"{"type":"assistant","message":{"content":[{"type":"text","text":"inner"}]},"parent_tool_use_id":"toolu_9"}"#;
    let CliMessage::Progress(line) = decode(nested).unwrap() else {
        panic!()
    };
    assert!(
        line.events.is_empty(),
        "sub-agent text is not the thread's text"
    );

    let retry = r#"{"type":"system","subtype":"api_retry","attempt":1,"max_retries":2,"retry_delay_ms":622,"error_status":529,"error":"overloaded"}"#;
    let CliMessage::Progress(line) = decode(retry).unwrap() else {
        panic!()
    };
    assert!(matches!(
        &line.events[0],
        TurnEvent::ApiRetry(ApiRetry {
            attempt: 1,
            status: Some(529),
            ..
        })
    ));
}

#[test]
fn every_known_system_subtype_is_mapped_or_ignored_with_a_reason() {
    // A new subtype is a decision: add it here and to `SYSTEM_SUBTYPES`.
    let mapped = [
        "init",
        "api_retry",
        "model_refusal_fallback",
        "memory_recall",
        "mirror_error",
    ];
    let ignored = [
        "files_persisted",
        "status",
        "permission_denied",
        "session_state_changed",
        "ui_invalidate",
        "session_title_changed",
        "compact_boundary",
        "task_started",
        "task_progress",
        "task_updated",
        "task_notification",
        "background_tasks_changed",
        "hook_started",
        "hook_progress",
        "hook_response",
    ];
    let table: Vec<&str> = SYSTEM_SUBTYPES.iter().map(|(name, _)| *name).collect();
    assert_eq!(table, [&mapped[..], &ignored[..]].concat());
    for name in mapped {
        assert_eq!(
            SystemHandling::of(name),
            Some(SystemHandling::Mapped),
            "{name}"
        );
    }
    for name in ignored {
        let Some(SystemHandling::Ignored(reason)) = SystemHandling::of(name) else {
            panic!("{name} is not ignored");
        };
        assert!(!reason.is_empty(), "{name} says why");
        // An ignored line gives nothing but its session id, whatever it carries.
        let line = json!({"type": "system", "subtype": name, "session_id": "s1",
            "error": "x", "files": [], "memories": [{"path": "p"}]});
        let CliMessage::Progress(progress) = decode(&line.to_string()).unwrap() else {
            panic!("{name}")
        };
        assert_eq!(
            (progress.events, progress.starts_turn, progress.session_id),
            (vec![], false, Some("s1".to_owned())),
            "{name}"
        );
    }
    assert_eq!(SystemHandling::of("a_new_one"), None);
}

#[test]
fn the_new_system_lines_of_2_1_332_decode_to_events() {
    let events = |line: &str| match decode(line).unwrap() {
        CliMessage::Progress(progress) => progress.events,
        other => panic!("{other:?}"),
    };
    // As the CLI writes them (field names from the 2.1.332 binary).
    let fallback = r#"{"type":"system","subtype":"model_refusal_fallback","trigger":"refusal","direction":"retry","scope":"local","original_model":"claude-opus-5-5","fallback_model":"claude-sonnet-5","request_id":"req_1","api_refusal_category":"cyber","content":"…","uuid":"u","session_id":"s"}"#;
    assert_eq!(
        events(fallback),
        [TurnEvent::ModelRefusalFallback(ModelRefusalFallback {
            trigger: "refusal".into(),
            direction: "retry".into(),
            scope: Some("local".into()),
            original_model: "claude-opus-5-5".into(),
            fallback_model: "claude-sonnet-5".into(),
            request_id: Some("req_1".into()),
            api_refusal_category: Some("cyber".into()),
        })]
    );
    let recall = r#"{"type":"system","subtype":"memory_recall","mode":"select","memories":[{"path":"/m/a.md","scope":"personal"},{"path":"/m/b.md","scope":"team","content":"b"},{"scope":"team"}],"uuid":"u","session_id":"s"}"#;
    assert_eq!(
        events(recall),
        [TurnEvent::MemoryRecall(MemoryRecall {
            mode: "select".into(),
            memories: vec![
                RecalledMemory {
                    path: "/m/a.md".into(),
                    scope: "personal".into(),
                    content: None
                },
                RecalledMemory {
                    path: "/m/b.md".into(),
                    scope: "team".into(),
                    content: Some("b".into())
                },
            ],
        })]
    );
    // As an SDK host writes it: the store key names the session and the file.
    let mirror = r#"{"type":"system","subtype":"mirror_error","error":"disk full","key":{"projectKey":"-w","sessionId":"s2","subpath":"subagents/a"},"uuid":"u","session_id":"s"}"#;
    assert_eq!(
        events(mirror),
        [TurnEvent::MirrorError(MirrorError {
            error: "disk full".into(),
            session_id: Some("s2".into()),
            subpath: Some("subagents/a".into()),
        })]
    );
    // Odd fields read as absent; the line still counts.
    let odd = r#"{"type":"system","subtype":"model_refusal_fallback","direction":7,"scope":null}"#;
    let [TurnEvent::ModelRefusalFallback(odd)] = &events(odd)[..] else {
        panic!()
    };
    assert_eq!((odd.direction.as_str(), odd.scope.as_deref()), ("", None));
}

#[test]
fn assistant_lines_name_the_model_response_they_belong_to() {
    // The `assistant` lines of a captured turn with a tool call (claude 2.1.330).
    let capture = include_str!("testdata/assistant-lines.jsonl");
    let calls: Vec<ModelCall> = capture
        .lines()
        .filter_map(|line| match decode(line) {
            Ok(CliMessage::Progress(progress)) => progress.model_call,
            _ => None,
        })
        .collect();
    let ids: Vec<&str> = calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(&ids[..2], ["msg_mock1", "msg_mock2"], "{calls:?}");
    assert_eq!(calls[0].model, "claude-opus-5-5");
    assert_eq!(
        (calls[0].usage.input_tokens, calls[0].usage.output_tokens),
        (5, 1)
    );

    // A sub-agent's response and a tool result are not the turn's model calls.
    for line in [
        r#"{"type":"assistant","message":{"id":"msg_x","model":"m","content":[]},"parent_tool_use_id":"toolu_9"}"#,
        r#"{"type":"user","message":{"id":"msg_y","content":[]},"parent_tool_use_id":null}"#,
    ] {
        let Ok(CliMessage::Progress(progress)) = decode(line) else {
            panic!("{line}")
        };
        assert_eq!(progress.model_call, None, "{line}");
    }
}

#[test]
fn rate_limit_events_decode_with_their_window() {
    let line = r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1795388830,"rateLimitType":"five_hour","utilization":0.95,"isUsingOverage":false,"surpassedThreshold":0.9,"unifiedWindows":{}},"uuid":"u","session_id":"s"}"#;
    let CliMessage::Progress(progress) = decode(line).unwrap() else {
        panic!()
    };
    assert_eq!(progress.session_id.as_deref(), Some("s"));
    assert_eq!(
        progress.events,
        vec![TurnEvent::RateLimit(RateLimit {
            status: "allowed_warning".into(),
            resets_at: Some(1_795_388_830),
            rate_limit_type: Some("five_hour".into()),
            utilization: Some(0.95),
            surpassed_threshold: Some(0.9),
            is_using_overage: Some(false),
        })]
    );
    let rejected =
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":"soon"}}"#;
    let CliMessage::Progress(progress) = decode(rejected).unwrap() else {
        panic!()
    };
    assert!(matches!(
        &progress.events[0],
        TurnEvent::RateLimit(RateLimit { status, resets_at: None, .. }) if status == "rejected"
    ));
}

#[test]
fn a_result_after_exhausted_retries_carries_the_api_status() {
    let line = r#"{"type":"result","subtype":"success","is_error":true,"api_error_status":529,"terminal_reason":"api_error","result":"API Error: 529 mock 529."}"#;
    let CliMessage::Result(result) = decode(line).unwrap() else {
        panic!()
    };
    assert_eq!(result.api_error_status, Some(529));
    let CliMessage::Result(ok) =
        decode(r#"{"type":"result","subtype":"success","api_error_status":null}"#).unwrap()
    else {
        panic!()
    };
    assert_eq!(ok.api_error_status, None);
}

mod properties {
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::super::decode;

    /// The line types and field names the decoder looks at, so generated lines reach past the
    /// first `match` into every branch.
    const KINDS: &[&str] = &[
        "control_request",
        "control_response",
        "control_cancel_request",
        "result",
        "system",
        "assistant",
        "user",
        "stream_event",
        "rate_limit_event",
    ];
    const FIELDS: &[&str] = &[
        "type",
        "subtype",
        "request_id",
        "request",
        "response",
        "error",
        "message",
        "content",
        "event",
        "delta",
        "text",
        "id",
        "name",
        "input",
        "tool_use_id",
        "is_error",
        "parent_tool_use_id",
        "session_id",
        "result",
        "errors",
        "num_turns",
        "terminal_reason",
        "user_message_uuids",
        "attempt",
        "max_retries",
        "retry_delay_ms",
        "rate_limit_info",
        "status",
        "api_error_status",
        "error_status",
    ];

    fn any_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            any::<f64>().prop_map(Value::from),
            ".{0,12}".prop_map(Value::String),
            prop::sample::select(KINDS).prop_map(Value::from),
            prop::sample::select(
                &[
                    "init",
                    "api_retry",
                    "success",
                    "text_delta",
                    "tool_use",
                    "tool_result",
                    "text",
                    "mcp_message"
                ][..]
            )
            .prop_map(Value::from),
        ];
        leaf.prop_recursive(5, 96, 8, |inner| {
            let key = prop_oneof![
                prop::sample::select(FIELDS).prop_map(str::to_owned),
                ".{0,8}",
            ];
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::vec((key, inner), 0..8)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect::<Map<_, _>>())),
            ]
        })
    }

    proptest! {
        #[test]
        fn decode_never_panics_on_any_string(line in ".*") {
            let _ = decode(&line);
        }

        #[test]
        fn decode_never_panics_on_any_json(value in any_json()) {
            let _ = decode(&value.to_string());
        }

        #[test]
        fn any_object_with_a_type_decodes(
            kind in prop::sample::select(KINDS),
            fields in prop::collection::vec((prop::sample::select(FIELDS), any_json()), 0..10),
        ) {
            let mut object: Map<String, Value> =
                fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            object.insert("type".into(), Value::from(kind));
            prop_assert!(decode(&Value::Object(object).to_string()).is_ok());
        }
    }
}

#[test]
fn garbage_is_an_error_not_a_panic() {
    for line in [
        "",
        "not json",
        "[1,2]",
        "{\"no_type\":1}",
        "{\"type\":5}",
        "\u{0}",
    ] {
        assert!(decode(line).is_err(), "{line:?} should not decode");
    }
    assert!(matches!(
        decode(r#"{"type":"brand_new_kind"}"#).unwrap(),
        CliMessage::Ignored
    ));
}

/// A second turn's `result` as CLI 2.1.330 wrote it (trimmed): `modelUsage` and `total_cost_usd`
/// count both turns, `model_usage_since_last_result` this one.
const SECOND_RESULT: &str = r#"{"duration_api_ms":29,"stop_reason":"end_turn","session_id":"c090badb","total_cost_usd":0.00009,"usage":{"input_tokens":5,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2},"modelUsage":{"claude-sonnet-4-5":{"inputTokens":10,"outputTokens":4,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":0.00009}},"is_error":false,"num_turns":1,"subtype":"success","result":"echo: again","type":"result","duration_ms":27,"result_index":1,"model_usage_since_last_result":{"claude-sonnet-4-5":{"inputTokens":5,"outputTokens":2,"cacheReadInputTokens":7,"cacheCreationInputTokens":3,"costUSD":0.000045},"claude-haiku-4-5":{"inputTokens":1,"outputTokens":1,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"costUSD":0.000005}}}"#;

#[test]
fn turn_usage_is_the_per_turn_figures_summed_over_models() {
    let CliMessage::Result(result) = decode(SECOND_RESULT).unwrap() else {
        panic!("not a result");
    };
    let usage = result.usage();
    assert_eq!(
        (
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_read_tokens,
            usage.cache_write_tokens,
            usage.api_ms
        ),
        (6, 3, 7, 3, 29)
    );
    assert!((usage.cost_usd - 0.00005).abs() < 1e-12, "{usage:?}");
}

#[test]
fn without_per_turn_figures_only_a_first_result_has_a_cost() {
    let mut line: Value = serde_json::from_str(SECOND_RESULT).unwrap();
    line.as_object_mut()
        .unwrap()
        .remove("model_usage_since_last_result");
    let CliMessage::Result(result) = decode(&line.to_string()).unwrap() else {
        panic!("not a result");
    };
    // The cumulative cost covers two turns: not this one's.
    let usage = result.usage();
    assert_eq!((usage.input_tokens, usage.output_tokens), (5, 2));
    assert_eq!(usage.cost_usd, 0.0);
    line["result_index"] = json!(0);
    let CliMessage::Result(result) = decode(&line.to_string()).unwrap() else {
        panic!("not a result");
    };
    assert_eq!(result.usage().cost_usd, 0.00009);
}

/// Every `transcript_mirror` line of `shared/protocol/capture-f-session-mirror.jsonl`, in order:
/// 8 frames of a process that ran two turns (the last two after stdin closed), then 4 of a
/// process that resumed the restored session.
const MIRROR_FRAMES: &str = include_str!("testdata/session-mirror-frames.jsonl");

#[test]
fn session_mirror_is_a_spawn_switch() {
    let on = SpawnOptions {
        session_mirror: true,
        ..Default::default()
    };
    assert!(cli_args(&on, None).contains(&"--session-mirror".to_owned()));
    assert!(!cli_args(&SpawnOptions::default(), None).contains(&"--session-mirror".to_owned()));
}

#[test]
fn transcript_mirror_frames_decode_from_the_capture() {
    let frames: Vec<TranscriptMirror> = MIRROR_FRAMES
        .lines()
        .map(|line| match decode(line).unwrap() {
            CliMessage::Mirror(frame) => frame,
            other => panic!("not a mirror frame: {other:?}"),
        })
        .collect();
    let sizes: Vec<usize> = frames.iter().map(|f| f.entries.len()).collect();
    assert_eq!(sizes, [13, 4, 2, 1, 3, 1, 1, 1, 4, 1, 3, 1]);
    assert_eq!(sizes[..8].iter().sum::<usize>(), 26, "the capture's count");
    let session = "7718c75e-fb9d-44d3-aa14-0aaf89cd90f9";
    for frame in &frames {
        assert_eq!(frame.session_id().as_deref(), Some(session));
        assert_eq!(
            frame.project_relative_path().as_deref(),
            Some(format!("{session}.jsonl").as_str())
        );
    }
    // Entries stay as the CLI wrote them, in order; some kinds carry no uuid.
    let first = &frames[0].entries;
    assert_eq!(first[0]["type"], "queue-operation");
    assert_eq!(transcript_entry_uuid(&first[0]), None);
    assert_eq!(first[2]["type"], "user");
    assert!(transcript_entry_uuid(&first[2]).is_some());
    let with_uuid = frames
        .iter()
        .flat_map(|f| &f.entries)
        .filter(|e| transcript_entry_uuid(e).is_some())
        .count();
    assert_eq!(with_uuid, 19);
    let kinds: Vec<&str> = frames[6..8]
        .iter()
        .map(|f| f.entries[0]["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["last-prompt", "cost-state"], "after stdin closed");
}

#[test]
fn transcript_mirror_paths_stay_inside_the_project_folder() {
    let frame = |path: &str| TranscriptMirror {
        file_path: path.to_owned(),
        entries: Vec::new(),
    };
    let sub = frame("/c/projects/-w-t/abc/subagents/agent-1.jsonl");
    assert_eq!(
        sub.project_relative_path().as_deref(),
        Some("abc/subagents/agent-1.jsonl")
    );
    assert_eq!(sub.session_id().as_deref(), Some("abc"));
    for bad in [
        "/c/projects/-w-t/../../etc/passwd",
        "/c/projects/-w-t/",
        "/c/elsewhere/x.jsonl",
        "/c/projects/-w-t",
        "",
    ] {
        assert_eq!(frame(bad).project_relative_path(), None, "{bad}");
    }
    // A frame that is not what we expect still decodes; odd entries are dropped.
    let odd = r#"{"type":"transcript_mirror","filePath":7,"entries":[1,{"type":"mode"}]}"#;
    let CliMessage::Mirror(frame) = decode(odd).unwrap() else {
        panic!("not a mirror frame");
    };
    assert_eq!(frame.file_path, "");
    assert_eq!(frame.entries, vec![json!({"type": "mode"})]);
}

/// Start-up failure results as 2.1.332 writes them (captured; usage trimmed).
#[test]
fn a_start_up_failure_result_says_why_and_who_can_fix_it() {
    let config = r#"{"type":"result","subtype":"error_during_execution","duration_ms":0,"is_error":true,"num_turns":0,"session_id":"64aa8073-082e-4017-b263-50a1810e3f65","total_cost_usd":0,"errors":["Configuration error in /cfg/.claude.json: JSON Parse error: Expected '}'\nFix the JSON in /cfg/.claude.json, or move the file aside to start with default settings."],"startup_failure_reason":"config_file_invalid","invalid_config_file":{"path":"/cfg/.claude.json","is_global":true,"backup_searched":true}}"#;
    let CliMessage::Result(result) = decode(config).unwrap() else {
        panic!("not a result");
    };
    let failure = result.startup_failure().expect("a start-up failure");
    assert_eq!(failure.reason, "config_file_invalid");
    assert_eq!(failure.file.as_deref(), Some("/cfg/.claude.json"));
    assert!(failure.message.contains("JSON Parse error"), "{failure}");
    assert_eq!(failure.class(), StartupClass::Operator);
    assert!(!failure.class().retryable());

    let root = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"],"startup_failure_reason":"bypass_root"}"#;
    let CliMessage::Result(result) = decode(root).unwrap() else {
        panic!("not a result");
    };
    assert_eq!(
        result.startup_failure().map(|f| f.class()),
        Some(StartupClass::Policy)
    );

    // An ordinary error result is no start-up failure.
    let turn =
        r#"{"type":"result","subtype":"error_during_execution","is_error":true,"errors":["boom"]}"#;
    let CliMessage::Result(result) = decode(turn).unwrap() else {
        panic!("not a result");
    };
    assert_eq!(result.startup_failure(), None);
}

#[test]
fn every_start_up_failure_reason_of_the_pinned_cli_has_a_class() {
    // The 25 reasons of 2.1.332's schema: only those the CLI says may pass are retried, the
    // caller's are the folder's, and an unknown one is not retried.
    let class = |reason: &str| {
        StartupFailure {
            reason: reason.to_owned(),
            message: String::new(),
            file: None,
        }
        .class()
    };
    for reason in [
        "org_verify_failed",
        "remote_settings_required_unavailable",
        "worktree_unverified",
        "org_config_required_unavailable",
    ] {
        assert!(class(reason).retryable(), "{reason}");
    }
    for reason in [
        "cwd_unavailable",
        "worktree_resume_refused",
        "session_held_by_background",
    ] {
        assert_eq!(class(reason), StartupClass::Caller, "{reason}");
    }
    for reason in [
        "bypass_root",
        "sideload_flags_disabled",
        "org_config_refused",
        "provider_not_allowed",
    ] {
        assert_eq!(class(reason), StartupClass::Policy, "{reason}");
    }
    for reason in [
        "config_file_invalid",
        "managed_settings_not_delivered",
        "proxy_invalid",
        "a_reason_from_a_newer_cli",
    ] {
        assert_eq!(class(reason), StartupClass::Operator, "{reason}");
    }
}

#[test]
fn init_and_status_lines_carry_the_permission_mode_in_effect() {
    for line in [
        r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s","permissionMode":"default"}"#,
        r#"{"type":"system","subtype":"status","status":null,"permissionMode":"default","session_id":"s"}"#,
    ] {
        let CliMessage::Progress(progress) = decode(line).unwrap() else {
            panic!("not progress: {line}");
        };
        assert_eq!(
            progress.permission_mode.as_deref(),
            Some("default"),
            "{line}"
        );
    }
}
