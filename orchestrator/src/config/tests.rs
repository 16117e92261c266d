use super::*;

#[test]
fn defaults_are_documented_values() {
    let c = Config::default();
    assert_eq!(c.bind.to_string(), "127.0.0.1:7878");
    assert_eq!(c.pool.idle_ttl, Duration::from_secs(480));
    assert_eq!(c.pool.max_capacity, 16);
    assert_eq!(c.turn.idle_timeout, Duration::from_secs(120));
    assert_eq!(c.tools.timeout, Duration::from_secs(120));
    assert!(c.plugins.is_empty());
    assert_eq!(c.claude.max_retries, 2);
    assert!(!c.claude.tool_search);
    assert!(c.db_path().ends_with("harness.db"));
    assert_eq!(c.claude_config_dir(), c.data_dir.join("claude"));
}

#[test]
fn file_values_override_defaults_and_flags_override_file() {
    let mut c = Config::from_toml(
        r#"
        bind = "127.0.0.1:9000"
        db = "/tmp/x.db"
        [pool]
        idle_ttl = 2.5
        max_capacity = 3
        [claude]
        bin = "/opt/claude"
        env = { FOO = "bar" }
        "#,
    )
    .unwrap();
    assert_eq!(c.bind.port(), 9000);
    assert_eq!(c.pool.idle_ttl, Duration::from_millis(2500));
    assert_eq!(c.pool.max_capacity, 3);
    assert_eq!(c.claude.env.get("FOO").map(String::as_str), Some("bar"));
    // Untouched sections keep their defaults.
    assert_eq!(c.turn.queue_limit, 32);
    c.apply(&ServeArgs {
        db: Some(":memory:".into()),
        claude_bin: Some("/bin/c".into()),
        ..Default::default()
    });
    assert_eq!(c.db_path(), ":memory:");
    assert_eq!(c.claude.bin, PathBuf::from("/bin/c"));
}

#[test]
fn approvals_deny_by_default_and_come_from_the_file_then_the_flag() {
    let c = Config::default();
    assert_eq!(c.approvals.mode, ApprovalMode::Deny);
    assert_eq!(c.approvals.timeout, Duration::from_secs(300));
    let mut c = Config::from_toml(
        r#"
        [approvals]
        mode = "ask"
        timeout = 20
        [[approvals.rules]]
        tool = "Bash(git status:*)"
        decision = "allow"
        "#,
    )
    .unwrap();
    assert_eq!(c.approvals.mode, ApprovalMode::Ask);
    assert_eq!(c.approvals.timeout, Duration::from_secs(20));
    assert_eq!(c.approvals.rules[0].tool, "Bash(git status:*)");
    assert_eq!(c.approvals.rules[0].decision, RuleDecision::Allow);
    c.apply(&ServeArgs {
        approvals: Some(ApprovalMode::Allow),
        ..Default::default()
    });
    assert_eq!(c.approvals.mode, ApprovalMode::Allow);
    let err = Config::from_toml("[approvals]\nmode = \"maybe\"").unwrap_err();
    assert!(err.to_string().contains("maybe"), "{err}");
}

#[test]
fn clustering_comes_from_the_flags_and_needs_postgres() {
    let c = Config::default();
    assert_eq!(c.cluster.advertise, None);
    assert_eq!(c.cluster.lease_ttl, Duration::from_secs(15));
    let c = Config::from_toml("[cluster]\nadvertise = \"http://10.0.0.5:7878\"\nlease_ttl = 6")
        .unwrap();
    assert_eq!(c.cluster.lease_ttl, Duration::from_secs(6));
    let err = c.validate().unwrap_err();
    assert!(err.to_string().contains("PostgreSQL"), "{err}");

    let mut c = Config::default();
    c.apply(&ServeArgs {
        db: Some("postgres://h/db".into()),
        advertise: Some("auto".into()),
        lease_ttl: Some(Duration::from_secs(3)),
        ..Default::default()
    });
    assert_eq!(c.cluster.advertise.as_deref(), Some("auto"));
    assert_eq!(c.cluster.lease_ttl, Duration::from_secs(3));
    c.validate().unwrap();
}

/// `--lease-ttl inf` and `1e30` used to panic (exit 101) turning seconds into a `Duration`.
#[test]
fn a_duration_flag_that_does_not_fit_is_an_error_not_a_panic() {
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }
    let parse = |value: &str| Cli::try_parse_from(["harness", "--lease-ttl", value]);
    let ok = parse("2.5").expect("a number of seconds parses");
    assert_eq!(ok.serve.lease_ttl, Some(Duration::from_millis(2500)));
    for bad in ["inf", "1e30", "-1", "NaN", "soon"] {
        let err = parse(bad)
            .err()
            .unwrap_or_else(|| panic!("{bad} must be refused"));
        assert!(err.to_string().contains(bad), "{bad}: {err}");
    }
}

#[test]
fn unknown_keys_are_rejected() {
    let err = Config::from_toml("bnid = \"127.0.0.1:1\"").unwrap_err();
    assert!(err.to_string().contains("bnid"), "{err}");
}

#[test]
fn non_loopback_bind_requires_a_token() {
    let mut c = Config {
        bind: "0.0.0.0:7878".parse().unwrap(),
        ..Default::default()
    };
    assert!(matches!(c.validate(), Err(ConfigError::TokenRequired(_))));
    c.auth_token = Some(String::new());
    assert!(matches!(c.validate(), Err(ConfigError::TokenRequired(_))));
    c.auth_token = Some("s3cret".into());
    assert!(c.validate().is_ok());
}

#[test]
fn the_token_comes_from_a_file_trimmed_and_an_empty_or_missing_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "  s3cret-from-file\n").unwrap();
    let mut c = Config {
        auth_token: Some("from-env".into()),
        auth_token_file: Some(path.clone()),
        ..Default::default()
    };
    c.read_token_file().unwrap();
    assert_eq!(
        c.auth_token.as_deref(),
        Some("s3cret-from-file"),
        "the file wins"
    );

    std::fs::write(&path, "\n").unwrap();
    let err = c.read_token_file().unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    c.auth_token_file = Some(dir.path().join("missing"));
    assert!(matches!(
        c.read_token_file(),
        Err(ConfigError::TokenFile { .. })
    ));
}

#[test]
fn the_file_then_the_token_variable_then_the_flags() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("harness.toml");
    std::fs::write(
        &path,
        "bind = \"127.0.0.1:9000\"\nauth_token = \"from-file\"\n",
    )
    .unwrap();
    let args = ServeArgs {
        config: Some(path),
        bind: Some("127.0.0.1:9001".parse().unwrap()),
        ..Default::default()
    };
    let c = Config::load_with(&args, None).unwrap();
    assert_eq!(c.bind.port(), 9001, "the flag wins over the file");
    assert_eq!(c.auth_token.as_deref(), Some("from-file"));
    let c = Config::load_with(&args, Some("from-env".into())).unwrap();
    assert_eq!(
        c.auth_token.as_deref(),
        Some("from-env"),
        "the variable wins"
    );
}

#[test]
fn the_concurrency_limit_defaults_to_the_pool_and_comes_from_the_file() {
    let c = Config::default();
    assert!(c.rate_limit.enabled);
    assert_eq!(c.rate_limit.max_turns(&c.pool), 16);
    assert_eq!(c.rate_limit.min_concurrent_turns, 1);
    assert_eq!(c.rate_limit.cooldown, Duration::from_secs(2));
    let c = Config::from_toml(
        "[pool]\nmax_capacity = 3\n[rate_limit]\ncooldown = 0.5\nmin_concurrent_turns = 2",
    )
    .unwrap();
    assert_eq!(c.rate_limit.max_turns(&c.pool), 3);
    assert_eq!(c.rate_limit.cooldown, Duration::from_millis(500));
    assert!(c.validate().is_ok());
    let c = Config::from_toml("[rate_limit]\nmax_concurrent_turns = 2\nmin_concurrent_turns = 3")
        .unwrap();
    assert!(matches!(c.validate(), Err(ConfigError::Invalid(_))));
    let c = Config::from_toml("[rate_limit]\nmin_concurrent_turns = 0").unwrap();
    assert!(matches!(c.validate(), Err(ConfigError::Invalid(_))));
}

#[test]
fn plugin_tables_are_kept_whole_for_their_plugins() {
    let c = Config::from_toml(
        r#"
        [tools]
        timeout = 60
        [plugins.delegation]
        max_depth = 1
        timeout = 30
        anything = { the = "core does not look" }
        [plugins.time]
        "#,
    )
    .unwrap();
    assert_eq!(c.tools.timeout, Duration::from_secs(60));
    assert_eq!(c.plugins.keys().collect::<Vec<_>>(), ["delegation", "time"]);
    let delegation = &c.plugins["delegation"];
    assert_eq!(delegation["max_depth"].as_integer(), Some(1));
    assert_eq!(delegation["timeout"].as_integer(), Some(30));
    assert!(delegation["anything"].is_table());
    assert!(c.plugins["time"].is_empty());
    c.check_plugin_tables(["time", "delegation", "context"])
        .unwrap();
    let err = Config::from_toml("[plugins]\ndelegation = 3").unwrap_err();
    assert!(err.to_string().contains("invalid type"), "{err}");
}

#[test]
fn a_table_for_a_plugin_that_is_not_loaded_is_refused() {
    let c = Config::from_toml("[plugins.delegaton]\nmax_depth = 1").unwrap();
    let err = c.check_plugin_tables(["time", "delegation"]).unwrap_err();
    assert!(matches!(&err, ConfigError::UnknownPlugin { name, .. } if name == "delegaton"));
    assert_eq!(
        err.to_string(),
        "[plugins.delegaton]: no plugin `delegaton` is loaded (loaded: time, delegation)"
    );
    Config::default().check_plugin_tables([]).unwrap();
}

#[test]
fn the_old_delegation_keys_say_where_they_moved() {
    for (key, now) in [
        ("delegation_max_depth = 1", "[plugins.delegation] max_depth"),
        ("delegation_timeout = 30", "[plugins.delegation] timeout"),
    ] {
        let err = Config::from_toml(&format!("[tools]\ntimeout = 5\n{key}")).unwrap_err();
        assert!(err.to_string().contains(now), "{key}: {err}");
    }
    // Other mistakes keep serde's own message, with its line.
    let err = Config::from_toml("[tools]\ntimeuot = 5").unwrap_err();
    assert!(
        err.to_string().contains("timeuot") && err.to_string().contains("line 2"),
        "{err}"
    );
}

#[test]
fn negative_durations_are_rejected() {
    assert!(Config::from_toml("[pool]\nidle_ttl = -1").is_err());
}

/// A relative `--data-dir` was used as given: the CLI, running in each thread's folder, read it
/// against that folder, so transcripts and deny rules landed under every thread.
#[test]
fn relative_paths_are_made_absolute_at_start() {
    let cwd = std::env::current_dir().expect("a working directory");
    let config = Config::load_with(
        &ServeArgs {
            data_dir: Some(PathBuf::from("rel/data")),
            db: Some("rel/harness.db".into()),
            ..Default::default()
        },
        None,
    )
    .expect("loads");
    assert_eq!(config.data_dir, cwd.join("rel/data"));
    assert!(config.claude_workdir().is_absolute());
    assert_eq!(config.claude_config_dir(), cwd.join("rel/data/claude"));
    assert_eq!(
        config.db_path(),
        cwd.join("rel/harness.db").to_string_lossy()
    );

    let memory = Config::load_with(
        &ServeArgs {
            db: Some(":memory:".into()),
            ..Default::default()
        },
        None,
    )
    .expect("loads");
    assert_eq!(memory.db_path(), ":memory:");
}

#[test]
fn profiles_come_from_their_tables_and_bad_ones_are_refused() {
    let c = Config::from_toml(
        r#"
        [profiles.reviewer]
        description = "reads, never writes"
        base = "lean"
        builtin_tools = "Read,Grep"
        permission_mode = "plan"
        overridable = []
        [profiles.reviewer.mcp_servers.tickets]
        command = "/usr/bin/tickets-mcp"
        args = ["--stdio"]
        env = { REGION = "eu" }
        secrets = { TICKETS_TOKEN = "env:TICKETS_TOKEN" }
        "#,
    )
    .unwrap();
    c.validate().unwrap();
    let reviewer = &c.profiles["reviewer"];
    assert_eq!(reviewer.base, Some(Profile::Lean));
    assert_eq!(reviewer.overridable.as_deref(), Some(&[][..]));
    let tickets = &reviewer.mcp_servers["tickets"];
    assert_eq!(tickets.args, ["--stdio"]);
    // Debug names the secrets, never their sources' values.
    assert!(format!("{tickets:?}").contains("TICKETS_TOKEN"));

    for (toml, says) in [
        ("[profiles.standard]", "built in"),
        ("[profiles.\"a b\"]", "letters, digits"),
        (
            "[profiles.r]\noverridable = [\"system_prompt\"]",
            "is not one of",
        ),
        (
            "[profiles.r.mcp_servers.harness]\ncommand = \"x\"",
            "not `harness`",
        ),
        ("[profiles.r.mcp_servers.s]\nargs = []", "one of them"),
        (
            "[profiles.r.mcp_servers.s]\ncommand = \"x\"\nurl = \"http://h/mcp\"",
            "one of them",
        ),
    ] {
        let c = Config::from_toml(toml).unwrap();
        let err = c.validate().unwrap_err().to_string();
        assert!(err.contains(says), "{toml}: {err}");
    }
    assert!(Config::from_toml("[profiles.r]\nnope = 1").is_err());
}

#[test]
fn an_mcp_servers_secrets_come_from_the_environment_or_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "from-a-file\n").unwrap();
    let server = McpServerConfig {
        command: "/bin/true".into(),
        env: [("PLAIN".to_owned(), "p".to_owned())].into(),
        secrets: [
            ("A".to_owned(), "env:SECRET_A".to_owned()),
            ("B".to_owned(), format!("file:{}", file.display())),
        ]
        .into(),
        ..Default::default()
    };
    let daemon_env = |name: &str| (name == "SECRET_A").then(|| "from-env".to_owned());
    let env = server.resolved(daemon_env).unwrap();
    assert_eq!(env["A"], "from-env");
    assert_eq!(env["B"], "from-a-file");
    assert_eq!(env["PLAIN"], "p");
    let missing = server.resolved(|_| None).unwrap_err().to_string();
    assert!(missing.contains("SECRET_A"), "{missing}");
    assert!(!missing.contains("from-env"));
    let odd = McpServerConfig {
        secrets: [("C".to_owned(), "literal".to_owned())].into(),
        ..server
    };
    let err = odd.resolved(daemon_env).unwrap_err().to_string();
    assert!(err.contains("`env:NAME` or `file:/path`"), "{err}");
}

#[test]
fn a_profiles_approvals_replace_only_what_they_set() {
    let c = Config::from_toml(
        r#"
        [approvals]
        mode = "ask"
        rules = [{ tool = "Bash(ls:*)", decision = "allow" }]
        timeout = 30
        [profiles.strict.approvals]
        mode = "deny"
        [profiles.open.approvals]
        rules = []
        "#,
    )
    .unwrap();
    let strict = c.approvals_of("strict");
    assert_eq!(strict.mode, ApprovalMode::Deny);
    assert_eq!(strict.rules.len(), 1, "its rules are [approvals]'");
    let open = c.approvals_of("open");
    assert_eq!(open.mode, ApprovalMode::Ask);
    assert!(open.rules.is_empty());
    assert_eq!(open.timeout, Duration::from_secs(30));
    assert_eq!(c.approvals_of("standard").mode, ApprovalMode::Ask);
    assert_eq!(c.profile_names(), ["standard", "lean", "open", "strict"]);
}

#[test]
fn a_profiles_effort_and_plugin_folders_are_checked() {
    for (toml, says) in [
        ("[profiles.r]\neffort = \"huge\"", "is not low, medium"),
        (
            "[profiles.r]\nplugin_dirs = [\"plugins\"]",
            "not an absolute path",
        ),
    ] {
        let err = Config::from_toml(toml).unwrap().validate().unwrap_err();
        assert!(err.to_string().contains(says), "{toml}: {err}");
    }
    let ok = Config::from_toml("[profiles.r]\neffort = \"max\"\nplugin_dirs = [\"/opt/p\"]");
    ok.unwrap().validate().unwrap();
}
