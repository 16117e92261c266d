use std::ffi::OsString;

use super::*;

/// A launcher for `config`, with no manifest and no approval deny rules.
fn launcher(config: &Config) -> Launcher {
    Launcher::new(
        config,
        serde_json::json!({}),
        TOOL_BOUND,
        &Default::default(),
    )
    .expect("the launcher starts")
}

/// The longest tool call, where a test does not care.
const TOOL_BOUND: Duration = Duration::from_secs(120);

#[test]
fn the_cli_waits_on_our_tools_longer_than_the_longest_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    let longest = Duration::from_secs(910);
    let env = child_env(&config, longest, std::iter::empty());
    let var = env.iter().find(|(k, _)| k == "MCP_TOOL_TIMEOUT");
    assert_eq!(var.map(|(_, v)| v.as_str()), Some("940000"));
    let launcher =
        Launcher::new(&config, serde_json::json!({}), longest, &Default::default()).unwrap();
    let launch = launcher
        .launch(&launcher.spare_spec(&ThreadId::from_string("t")))
        .unwrap()
        .launch;
    assert_eq!(launch.sdk_mcp_servers[0].timeout_ms, 940_000);
}

#[test]
fn the_lean_profile_sets_its_switches_and_claude_env_can_set_one_back() {
    let mut config = Config::default();
    let standard = child_env(&config, TOOL_BOUND, std::iter::empty());
    assert!(!standard
        .iter()
        .any(|(k, _)| LEAN_SWITCHES.contains(&k.as_str())));

    config.claude.profile = Profile::Lean;
    config
        .claude
        .env
        .insert("CLAUDE_CODE_DISABLE_CLAUDE_MDS".into(), "0".into());
    let env = child_env(&config, TOOL_BOUND, std::iter::empty());
    for switch in LEAN_SWITCHES {
        assert!(env.iter().any(|(k, _)| k == switch), "{switch}");
    }
    // The last value of a name is the one a child gets.
    let last = env
        .iter()
        .rev()
        .find(|(k, _)| k == "CLAUDE_CODE_DISABLE_CLAUDE_MDS");
    assert_eq!(last.map(|(_, v)| v.as_str()), Some("0"));
}

#[test]
fn containment_holds_in_every_profile_and_claude_env_cannot_undo_it() {
    for profile in [Profile::Standard, Profile::Lean] {
        let mut config = Config::default();
        config.claude.profile = profile;
        config
            .claude
            .env
            .insert("CLAUDE_CODE_HARBOR_KITE".into(), "1".into());
        let daemon_env = [("CLAUDE_CODE_DISABLE_CRON", "0")]
            .map(|(k, v)| (OsString::from(k), OsString::from(v)));
        let env = child_env(&config, TOOL_BOUND, daemon_env.into_iter());
        for (name, value) in CONTAINMENT_SWITCHES {
            // The last value of a name is the one a child gets.
            let last = env.iter().rev().find(|(k, _)| k == name);
            assert_eq!(last.map(|(_, v)| v.as_str()), Some(*value), "{name}");
        }
        let dir = tempfile::tempdir().unwrap();
        config.data_dir = dir.path().to_path_buf();
        // In every profile, a named one too, whatever it takes away itself.
        config.profiles.insert(
            "reviewer".into(),
            crate::config::ProfileConfig {
                disallowed_tools: vec!["Bash".into()],
                ..Default::default()
            },
        );
        let launcher = launcher(&config);
        let names: Vec<&str> = launcher.profiles().map(|p| p.name()).collect();
        assert_eq!(names, ["lean", "reviewer", "standard"]);
        for profile in launcher.profiles() {
            let options = profile.options(None);
            for tool in [
                "ListAgents",
                "SendMessage",
                "CronCreate",
                "ScheduleWakeup",
                "Monitor",
            ] {
                let name = profile.name();
                assert!(
                    options.disallowed_tools.iter().any(|t| t == tool),
                    "{name}: {tool}"
                );
            }
        }
    }
}

#[test]
fn scheduling_tools_give_back_the_schedules_but_never_the_peers() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    config.claude.scheduling_tools = true;
    let launcher = launcher(&config);
    let disallowed = launcher
        .profile(None)
        .unwrap()
        .options(None)
        .disallowed_tools;
    for tool in SCHEDULING_TOOLS {
        assert!(!disallowed.iter().any(|t| t == tool), "{tool}");
    }
    for tool in ["ListAgents", "SendMessage", "Workflow", "RemoteTrigger"] {
        assert!(disallowed.iter().any(|t| t == tool), "{tool}");
    }
    let env = child_env(&config, TOOL_BOUND, std::iter::empty());
    let has = |name: &str| env.iter().any(|(k, _)| k == name);
    assert!(has("CLAUDE_CODE_HARBOR_KITE"));
    assert!(!has("CLAUDE_CODE_DISABLE_CRON"));
    assert!(!has("CLAUDE_CODE_DISABLE_BACKGROUND_TASKS"));
    let hooks = launcher
        .launch(&launcher.spare_spec(&ThreadId::from_string("t")))
        .unwrap()
        .launch
        .hooks;
    assert!(hooks.stop);
    // Every process asks the daemon about its skills' shell commands (`approvals`).
    assert!(hooks.skill_shell);
}

#[test]
fn children_get_the_allow_list_and_the_configured_env_only() {
    let mut config = Config::default();
    config.claude.env.insert("EXTRA".into(), "1".into());
    let daemon_env = [
        ("PATH", "/bin"),
        ("LC_ALL", "C"),
        ("ANTHROPIC_API_KEY", "k"),
        ("HARNESS_TOKEN", "secret"),
        ("AWS_SECRET_ACCESS_KEY", "x"),
        ("CLAUDECODE", "1"),
    ]
    .map(|(k, v)| (OsString::from(k), OsString::from(v)));
    let env = child_env(&config, TOOL_BOUND, daemon_env.into_iter());
    let names: Vec<&str> = env.iter().map(|(k, _)| k.as_str()).collect();
    for kept in [
        "PATH",
        "LC_ALL",
        "ANTHROPIC_API_KEY",
        "EXTRA",
        "CLAUDE_CODE_DISABLE_AUTO_MEMORY",
    ] {
        assert!(names.contains(&kept), "{kept}: {names:?}");
    }
    for dropped in ["HARNESS_TOKEN", "AWS_SECRET_ACCESS_KEY", "CLAUDECODE"] {
        assert!(!names.contains(&dropped), "{dropped}: {names:?}");
    }
}

#[test]
fn a_restored_transcript_is_one_private_file_per_path_with_lines_in_order() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let project = dir.path().join("projects").join("-w-t1");
    let written = write_transcript(
        &project,
        [
            ("s1.jsonl", r#"{"type":"queue-operation"}"#),
            ("s1/subagents/agent-a.jsonl", r#"{"uuid":"x"}"#),
            ("s1.jsonl", r#"{"type":"user","uuid":"u1"}"#),
            ("s1.jsonl", r#"{"type":"cost-state"}"#),
        ],
    )
    .unwrap();
    assert_eq!(written, 2);
    let main = project.join("s1.jsonl");
    assert_eq!(
        std::fs::read_to_string(&main).unwrap(),
        "{\"type\":\"queue-operation\"}\n{\"type\":\"user\",\"uuid\":\"u1\"}\n{\"type\":\"cost-state\"}\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("s1/subagents/agent-a.jsonl")).unwrap(),
        "{\"uuid\":\"x\"}\n"
    );
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&main), 0o600);
    assert_eq!(mode(&project), 0o700);
    assert_eq!(mode(&project.join("s1/subagents")), 0o700);
    let leftovers: Vec<_> = std::fs::read_dir(&project)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().contains("restoring"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    for bad in ["../escape.jsonl", "/etc/x.jsonl", ""] {
        assert!(write_transcript(&project, [(bad, "{}")]).is_err(), "{bad}");
    }
    assert!(!dir.path().join("projects/escape.jsonl").exists());
}

#[test]
fn the_session_file_is_where_the_cli_looks_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = Config {
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    let launcher = launcher(&config);
    let thread = ThreadId::from_string("thr_a.b");
    let session = CliSessionId::from_string("s-1");
    let spec = launcher.spare_spec(&thread);
    assert!(!launcher.has_session(&spec, &session));
    launcher
        .restore_transcript(&spec, [("s-1.jsonl", "{}")])
        .unwrap();
    assert!(launcher.has_session(&spec, &session));
    // Key: the thread folder's path with every character but ASCII letters and digits as `-`.
    let folder = spec.workdir.to_string_lossy().into_owned();
    let key: String = folder
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    // In the thread's own config dir.
    let file = config
        .claude_config_dir()
        .join("threads")
        .join("thr_a_b")
        .join("projects")
        .join(&key)
        .join("s-1.jsonl");
    assert!(file.is_file(), "{}", file.display());
    assert!(key.ends_with("-thr-a-b"), "{key}");
}

#[test]
fn thread_folders_cannot_escape_the_threads_dir() {
    let dir = Path::new("/data/threads");
    let odd = ThreadId::from_string("../../etc");
    assert_eq!(thread_workdir(dir, &odd), dir.join("______etc"));
    let normal = ThreadId::from_string("thr_0123abc");
    assert_eq!(thread_workdir(dir, &normal), dir.join("thr_0123abc"));
}

#[test]
fn a_caller_may_narrow_a_profiles_permission_mode_never_widen_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config {
        data_dir: dir.path().to_path_buf(),
        ..Default::default()
    };
    config.profiles.insert(
        "planner".into(),
        crate::config::ProfileConfig {
            permission_mode: Some("plan".into()),
            ..Default::default()
        },
    );
    config.profiles.insert(
        "editor".into(),
        crate::config::ProfileConfig {
            permission_mode: Some("acceptEdits".into()),
            ..Default::default()
        },
    );
    let launcher = launcher(&config);
    let refuses = |profile: &str, mode: &str| {
        launcher
            .profile(Some(profile))
            .unwrap()
            .refuses_mode(mode)
            .is_some()
    };
    assert!(!refuses("planner", "plan"));
    assert!(refuses("planner", "default"));
    assert!(!refuses("standard", "plan"));
    assert!(!refuses("standard", "default"));
    assert!(refuses("standard", "acceptEdits"));
    assert!(!refuses("editor", "acceptEdits"));
    assert!(!refuses("editor", "plan"));
    assert!(refuses("editor", "bypassPermissions"));
    assert!(refuses("editor", "nonsense"));
}

#[test]
fn no_builtin_tool_is_both_contained_and_in_turn() {
    // The CLI's table against both lists is `containment::every_builtin_tool_of_the_pinned_cli_is_classified`
    // (tests/); here only what holds without the binary: no name twice, none in both.
    let mut seen = std::collections::BTreeSet::new();
    for tool in CONTAINED_TOOLS.iter().chain(IN_TURN_TOOLS) {
        assert!(seen.insert(*tool), "{tool} is classified twice");
    }
    for tool in SCHEDULING_TOOLS {
        assert!(CONTAINED_TOOLS.contains(tool), "{tool} is not contained");
    }
}
