//! The policy as a table: each way past a rule, with the verdict it must get in every mode;
//! then the order of the checks, the reasons given, and the rules handed to the CLI.

use super::*;
use serde_json::json;

const CWD: &str = "/data/work/A";
const HOME: &str = "/home/u";

type Rules = &'static [(&'static str, RuleDecision)];

fn policy(mode: ApprovalMode, rules: &[(&str, RuleDecision)]) -> Policy {
    Policy::with_home(&config(mode, rules), Some(Path::new(HOME))).unwrap()
}

fn config(mode: ApprovalMode, rules: &[(&str, RuleDecision)]) -> ApprovalsConfig {
    ApprovalsConfig {
        mode,
        rules: rules
            .iter()
            .map(|(tool, decision)| ApprovalRule {
                tool: (*tool).to_owned(),
                decision: *decision,
            })
            .collect(),
        ..Default::default()
    }
}

fn decide(p: &Policy, tool: &str, input: &Value) -> Verdict {
    p.decide(tool, input, Path::new(CWD))
}

fn bash(command: &str) -> Value {
    json!({"command": command})
}

/// A verdict without its reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Allow(DecidedBy),
    Deny(DecidedBy),
    Ask,
}

fn outcome(verdict: &Verdict) -> Outcome {
    match verdict {
        Verdict::Allow { by, .. } => Outcome::Allow(*by),
        Verdict::Deny { by, .. } => Outcome::Deny(*by),
        Verdict::Ask => Outcome::Ask,
    }
}

/// What a row expects, whatever the mode.
#[derive(Clone, Copy, Debug)]
enum Expect {
    /// An allow rule allows it.
    Allowed,
    /// A deny rule refuses it.
    Denied,
    /// No rule decides: the mode does (refused, held, allowed).
    Mode,
    /// Harness's own tool: allowed by the policy, rules or not.
    Harness,
}

impl Expect {
    fn in_mode(self, mode: ApprovalMode) -> Outcome {
        match (self, mode) {
            (Expect::Allowed, _) => Outcome::Allow(DecidedBy::Rule),
            (Expect::Denied, _) => Outcome::Deny(DecidedBy::Rule),
            (Expect::Harness, _) => Outcome::Allow(DecidedBy::Policy),
            (Expect::Mode, ApprovalMode::Deny) => Outcome::Deny(DecidedBy::Policy),
            (Expect::Mode, ApprovalMode::Ask) => Outcome::Ask,
            (Expect::Mode, ApprovalMode::Allow) => Outcome::Allow(DecidedBy::Policy),
        }
    }
}

struct Row {
    rules: Rules,
    tool: &'static str,
    input: Value,
    expect: Expect,
}

fn row(rules: Rules, tool: &'static str, input: Value, expect: Expect) -> Row {
    Row {
        rules,
        tool,
        input,
        expect,
    }
}

fn sh(rules: Rules, command: &str, expect: Expect) -> Row {
    row(rules, "Bash", bash(command), expect)
}

fn file(rules: Rules, tool: &'static str, path: &str, expect: Expect) -> Row {
    let key = if tool == "NotebookEdit" {
        "notebook_path"
    } else {
        "file_path"
    };
    let mut input = json!({});
    input[key] = json!(path);
    row(rules, tool, input, expect)
}

use Expect::{Allowed, Denied, Harness, Mode};
use RuleDecision::{Allow as A, Deny as D};

const GIT_STATUS: Rules = &[("Bash(git status:*)", A)];
const ECHO: Rules = &[("Bash(echo:*)", A)];
const GIT_STATUS_AND_LS: Rules = &[("Bash(git status:*)", A), ("Bash(ls:*)", A)];
const NPM_TEST: Rules = &[("Bash(npm test)", A), ("Bash(npm run *)", A)];
const NO_RM: Rules = &[("Bash(rm:*)", D)];
const NO_GIT_PUSH: Rules = &[("Bash(git:*)", A), ("Bash(git push:*)", D)];
const NO_BASH: Rules = &[("Bash", D), ("Bash(ls:*)", A)];
const DOCS: Rules = &[("Edit(/docs/**)", A)];
const WORK_STAR: Rules = &[("Write(//data/work/*)", A)];
const WORK_ALL: Rules = &[("Edit(//data/work/**)", A)];
const HERE: Rules = &[("Edit(/x.txt)", A), ("Edit(./y.txt)", A)];
const HOME_NOTES: Rules = &[("Edit(~/notes/*)", A), ("Edit(../shared/*)", A)];
const NO_ETC: Rules = &[("Edit(//etc/**)", D), ("Edit(//srv/secret)", D)];
const NO_DOTENV: Rules = &[("Read(.env)", D)];
const NO_SECRETS: Rules = &[("Read(//secrets/**)", D)];
const READ_DOCS: Rules = &[("Read(//opt/docs/**)", A)];
const WEB: Rules = &[
    ("WebFetch(domain:example.com)", A),
    ("WebFetch(domain:evil.io)", D),
];
const OWN_TOOLS: Rules = &[("mcp__harness__*", D), ("mcp__github__*", A)];

/// Attempts to get past a rule, each with the verdict it must get.
fn rows() -> Vec<Row> {
    vec![
        // An allow prefix allows the command and its arguments, quoted operators included.
        sh(GIT_STATUS, "git status", Allowed),
        sh(GIT_STATUS, "git status -s", Allowed),
        sh(GIT_STATUS, "  git status", Allowed),
        sh(GIT_STATUS, "git status 'a;b'", Allowed),
        sh(GIT_STATUS, "git status \"a && b | c > d\"", Allowed),
        sh(GIT_STATUS, "git status \\; x", Allowed),
        sh(GIT_STATUS, "git status 2>&1", Allowed),
        sh(GIT_STATUS, "git status >/dev/null; git status -s", Allowed),
        sh(GIT_STATUS, "git sta\\\ntus", Allowed),
        sh(GIT_STATUS, "git status # ; touch p", Allowed),
        // …but not another word, another command, or anything that runs or writes more.
        sh(GIT_STATUS, "git statusx", Mode),
        sh(GIT_STATUS, "git", Mode),
        sh(GIT_STATUS, "git status || touch p", Mode),
        sh(GIT_STATUS, "git status && touch p", Mode),
        sh(GIT_STATUS, "git status; rm -rf x", Mode),
        sh(GIT_STATUS, "git status\ntouch p", Mode),
        sh(GIT_STATUS, "git status | sh", Mode),
        sh(GIT_STATUS, "git status |& sh", Mode),
        sh(GIT_STATUS, "git status & touch p", Mode),
        sh(GIT_STATUS, "git status `touch p`", Mode),
        sh(GIT_STATUS, "git status $(touch p)", Mode),
        sh(GIT_STATUS, "git status \"$(touch p)\"", Mode),
        sh(GIT_STATUS, "git status \"`touch p`\"", Mode),
        sh(GIT_STATUS, "git status <(touch p)", Mode),
        sh(GIT_STATUS, "git status >(touch p)", Mode),
        sh(GIT_STATUS, "git status > f", Mode),
        sh(GIT_STATUS, "git status 2>/dev/nullx", Mode),
        sh(GIT_STATUS, "git status >/dev/null>f", Mode),
        sh(GIT_STATUS, "git status; (touch p)", Mode),
        sh(GIT_STATUS, "git status; { touch p; }", Mode),
        sh(GIT_STATUS, "git status ${x:-$(touch p)}", Mode),
        sh(GIT_STATUS, "git status 'unclosed", Mode),
        sh(GIT_STATUS, "git status \\", Mode),
        sh(GIT_STATUS, "git status # '\ntouch p\n'", Mode),
        sh(
            GIT_STATUS,
            "git status $'\\'' ; touch p ; echo $'\\''",
            Mode,
        ),
        sh(GIT_STATUS, "/usr/bin/git status", Mode),
        sh(GIT_STATUS, "GIT_PAGER='touch p' git status", Mode),
        sh(GIT_STATUS, "", Mode),
        row(GIT_STATUS, "Bash", json!({}), Mode),
        sh(ECHO, "echo hi there", Allowed),
        sh(ECHO, "echo hi &>/dev/null", Allowed),
        sh(ECHO, "echo x > any-file", Mode),
        sh(ECHO, "echo x >> f", Mode),
        sh(ECHO, "echo x < f", Mode),
        sh(ECHO, "echo x <<< y", Mode),
        sh(ECHO, "echo x 2>f", Mode),
        sh(ECHO, "echo x &> f", Mode),
        // Every part needs a rule; several rules may share a line.
        sh(GIT_STATUS_AND_LS, "git status && ls -la", Allowed),
        sh(GIT_STATUS_AND_LS, "ls | git status", Allowed),
        sh(GIT_STATUS_AND_LS, "git status && ls -la && touch p", Mode),
        sh(NPM_TEST, "npm test", Allowed),
        sh(NPM_TEST, "npm  'test'", Allowed),
        sh(NPM_TEST, "npm test --watch", Mode),
        sh(NPM_TEST, "npm run build", Allowed),
        sh(NPM_TEST, "npm runx", Mode),
        // A deny rule holds for every way of writing the command.
        sh(NO_RM, "rm x", Denied),
        sh(NO_RM, " rm x", Denied),
        sh(NO_RM, "/bin/rm x", Denied),
        sh(NO_RM, "\\rm x", Denied),
        sh(NO_RM, "r\\m x", Denied),
        sh(NO_RM, "\"r\"m x", Denied),
        sh(NO_RM, "r''m x", Denied),
        sh(NO_RM, "true && rm x", Denied),
        sh(NO_RM, "true;rm x", Denied),
        sh(NO_RM, "command rm x", Denied),
        sh(NO_RM, "builtin rm x", Denied),
        sh(NO_RM, "exec rm x", Denied),
        sh(NO_RM, "env rm x", Denied),
        sh(NO_RM, "env -i A=1 B=2 rm x", Denied),
        sh(NO_RM, "A=1 rm x", Denied),
        sh(NO_RM, "sudo rm x", Denied),
        sh(NO_RM, "nohup rm x", Denied),
        sh(NO_RM, "nice -n 5 rm x", Denied),
        sh(NO_RM, "time rm x", Denied),
        sh(NO_RM, "timeout 5 rm x", Denied),
        sh(NO_RM, "echo x | xargs rm", Denied),
        sh(NO_RM, "echo $(rm x)", Denied),
        sh(NO_RM, "echo `rm x`", Denied),
        sh(NO_RM, "(rm x)", Denied),
        sh(NO_RM, "{ rm x; }", Denied),
        sh(NO_RM, "sh -c 'rm x'", Denied),
        sh(NO_RM, "bash -c \"cd /; rm x\"", Denied),
        sh(NO_RM, "rm${IFS}x", Denied),
        sh(NO_RM, "r\\\nm x", Denied),
        sh(NO_RM, "\"r\\\nm\" x", Denied),
        sh(NO_RM, "${u:-rm} x", Denied),
        sh(NO_RM, "r${u}m x", Denied),
        sh(NO_RM, "r$@m x", Denied),
        sh(NO_RM, "{rm,x}", Denied),
        sh(NO_RM, "/bin/r? x", Denied),
        sh(NO_RM, "=rm x", Denied),
        sh(NO_RM, "find . -name x -exec rm {} +", Denied),
        sh(NO_RM, "find . -name x -delete", Denied),
        sh(NO_RM, "unlink x", Denied),
        sh(NO_RM, "rmdir d", Denied),
        sh(NO_RM, "shred -u x", Denied),
        sh(NO_RM, "echo rm", Denied), // over-refused, as the module doc says
        sh(NO_RM, "ls -la", Mode),
        sh(NO_RM, "rmx x; firm", Mode),
        sh(NO_RM, "find . -name x", Mode),
        // Deny wins over an allow rule before it; bare `Bash` denies every command.
        sh(NO_GIT_PUSH, "git status", Allowed),
        sh(NO_GIT_PUSH, "git push", Denied),
        sh(NO_GIT_PUSH, "/usr/bin/git push --force", Denied),
        sh(NO_GIT_PUSH, "git status; git push", Denied),
        // FIXME: words of a several-word deny rule must be side by side (module doc).
        sh(NO_GIT_PUSH, "git -C . push", Allowed),
        sh(NO_BASH, "ls", Denied),
        row(NO_BASH, "Bash", json!({}), Denied),
        // `Edit(…)` covers every tool that writes, at the path after `..` is resolved.
        file(DOCS, "Edit", "/data/work/A/docs/x.md", Allowed),
        file(DOCS, "Write", "/data/work/A/docs/a/b.md", Allowed),
        file(DOCS, "MultiEdit", "/data/work/A/docs/x.md", Allowed),
        file(DOCS, "NotebookEdit", "/data/work/A/docs/n.ipynb", Allowed),
        file(DOCS, "Write", "docs/x.md", Allowed),
        file(DOCS, "Write", "./docs/../docs/x.md", Allowed),
        file(DOCS, "Write", "/data/work/A/docs/../../B/CLAUDE.md", Mode),
        file(DOCS, "Write", "/data/work/A/docsx/y", Mode),
        file(DOCS, "Write", "/data/work/B/docs/x.md", Mode),
        file(DOCS, "Read", "/etc/passwd", Mode),
        row(DOCS, "Write", json!({"content": "x"}), Mode),
        file(WORK_STAR, "Write", "/data/work/notes.txt", Allowed),
        file(WORK_STAR, "Edit", "/data/work/notes.txt", Allowed),
        file(WORK_STAR, "Write", "/data/work/A/../B/CLAUDE.md", Mode),
        file(WORK_STAR, "Write", "work/A/../B/CLAUDE.md", Mode),
        file(WORK_STAR, "Write", "/data/work/A/x", Mode),
        file(WORK_ALL, "Write", "/data/work/B/deep/er.txt", Allowed),
        file(WORK_ALL, "Write", "/data/work/../etc/x", Mode),
        file(HERE, "Write", "x.txt", Allowed),
        file(HERE, "Write", "/data/work/A/y.txt", Allowed),
        file(HERE, "Write", "/data/work/A/sub/x.txt", Mode),
        file(HERE, "Write", "/x.txt", Mode),
        file(HOME_NOTES, "Write", "/home/u/notes/a", Allowed),
        file(HOME_NOTES, "Write", "~/notes/a", Allowed),
        file(HOME_NOTES, "Write", "/home/u/notes/b/c", Mode),
        file(HOME_NOTES, "Write", "/data/work/shared/x", Allowed),
        file(HOME_NOTES, "Write", "/data/work/A/shared/x", Mode),
        // A deny path rule holds for every way of writing the path, and inside a folder.
        file(NO_ETC, "Write", "/etc/passwd", Denied),
        file(NO_ETC, "Edit", "/etc/../etc/hosts", Denied),
        file(NO_ETC, "MultiEdit", "/tmp/../etc/x", Denied),
        file(NO_ETC, "NotebookEdit", "/etc/x.ipynb", Denied),
        file(NO_ETC, "Write", "../../../../../etc/x", Denied),
        file(NO_ETC, "Write", "//etc/x", Denied),
        file(NO_ETC, "Write", "/srv/secret/a/b", Denied),
        row(NO_ETC, "Write", json!({}), Denied),
        file(NO_ETC, "Write", "/etcx/y", Mode),
        file(NO_ETC, "Read", "/etc/passwd", Mode),
        file(NO_DOTENV, "Read", "/data/work/A/.env", Denied),
        file(NO_DOTENV, "Read", "/data/work/A/sub/.env", Denied),
        file(NO_DOTENV, "Read", "/other/.env", Mode),
        row(NO_DOTENV, "Grep", json!({"pattern": "KEY"}), Denied),
        row(
            NO_DOTENV,
            "Grep",
            json!({"pattern": "K", "path": "/tmp"}),
            Mode,
        ),
        // `Read(…)` covers Glob, Grep and LS by the folder they search.
        file(NO_SECRETS, "Read", "/secrets/a", Denied),
        row(
            NO_SECRETS,
            "Grep",
            json!({"pattern": "x", "path": "/secrets"}),
            Denied,
        ),
        row(
            NO_SECRETS,
            "Grep",
            json!({"pattern": "x", "path": "/"}),
            Denied,
        ),
        row(NO_SECRETS, "LS", json!({"path": "/secrets/x"}), Denied),
        row(NO_SECRETS, "Glob", json!({"pattern": "/secrets/*"}), Denied),
        row(
            NO_SECRETS,
            "Glob",
            json!({"pattern": "../../../secrets/*"}),
            Denied,
        ),
        row(
            NO_SECRETS,
            "Glob",
            json!({"pattern": "*/../../../../x"}),
            Denied,
        ),
        row(NO_SECRETS, "Grep", json!({"pattern": "x"}), Mode),
        row(NO_SECRETS, "Glob", json!({"pattern": "**/*.rs"}), Mode),
        file(NO_SECRETS, "Write", "/secrets/a", Mode),
        file(READ_DOCS, "Read", "/opt/docs/a/b", Allowed),
        row(
            READ_DOCS,
            "Grep",
            json!({"pattern": "x", "path": "/opt/docs/s"}),
            Allowed,
        ),
        row(
            READ_DOCS,
            "Glob",
            json!({"pattern": "**/*.md", "path": "/opt/docs"}),
            Allowed,
        ),
        row(
            READ_DOCS,
            "Grep",
            json!({"pattern": "x", "path": "/opt"}),
            Mode,
        ),
        row(
            READ_DOCS,
            "Glob",
            json!({"pattern": "../*", "path": "/opt/docs"}),
            Mode,
        ),
        file(READ_DOCS, "Read", "/opt/docs/../secret", Mode),
        // Other tools.
        row(
            WEB,
            "WebFetch",
            json!({"url": "https://example.com/x"}),
            Allowed,
        ),
        row(
            WEB,
            "WebFetch",
            json!({"url": "https://example.com.evil.net/"}),
            Mode,
        ),
        row(
            WEB,
            "WebFetch",
            json!({"url": "https://a.net\\@example.com/"}),
            Mode,
        ),
        row(
            WEB,
            "WebFetch",
            json!({"url": "https://sub.evil.io/"}),
            Denied,
        ),
        row(
            WEB,
            "WebFetch",
            json!({"url": "http://u@EVIL.io:8/"}),
            Denied,
        ),
        row(OWN_TOOLS, "mcp__harness__time__now", json!({}), Harness),
        row(OWN_TOOLS, "mcp__github__issue", json!({}), Allowed),
        row(OWN_TOOLS, "mcp__gitlab__issue", json!({}), Mode),
    ]
}

#[test]
fn bypass_attempts_get_the_same_verdict_in_every_mode() {
    let rows = rows();
    assert!(rows.len() >= 40);
    let mut wrong = Vec::new();
    for mode in [ApprovalMode::Deny, ApprovalMode::Ask, ApprovalMode::Allow] {
        for row in &rows {
            let p = policy(mode, row.rules);
            let got = outcome(&decide(&p, row.tool, &row.input));
            let want = row.expect.in_mode(mode);
            if got != want {
                wrong.push(format!(
                    "{mode:?} {:?} {} {}: got {got:?}, want {want:?}",
                    row.rules, row.tool, row.input
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases:\n{}",
        wrong.len(),
        rows.len() * 3,
        wrong.join("\n")
    );
}

#[test]
fn deny_rules_win_wherever_they_are_then_allow_rules_then_the_mode() {
    let p = policy(
        ApprovalMode::Ask,
        &[
            ("Bash(git status:*)", A),
            ("Bash(git:*)", D),
            ("Write(/tmp/*)", A),
        ],
    );
    assert_eq!(
        decide(&p, "Bash", &bash("git status")),
        Verdict::Deny {
            by: DecidedBy::Rule,
            reason: "rule Bash(git:*)".into()
        }
    );
    assert_eq!(decide(&p, "Bash", &bash("touch f")), Verdict::Ask);
    assert_eq!(
        decide(&p, "Write", &json!({"file_path": "/data/work/A/tmp/b"})),
        Verdict::Allow {
            by: DecidedBy::Rule,
            reason: "rule Write(/tmp/*)".into()
        }
    );
    assert_eq!(
        decide(&p, "Write", &json!({"file_path": "/tmp/b"})),
        Verdict::Ask,
        "`/tmp` is the thread's folder's"
    );
}

#[test]
fn a_line_allowed_by_several_rules_names_them() {
    let p = policy(ApprovalMode::Deny, GIT_STATUS_AND_LS);
    assert_eq!(
        decide(&p, "Bash", &bash("git status && ls && git status -s")),
        Verdict::Allow {
            by: DecidedBy::Rule,
            reason: "rules Bash(git status:*), Bash(ls:*)".into()
        }
    );
}

#[test]
fn the_default_denies_and_harness_tools_are_always_allowed() {
    let p = policy(ApprovalMode::Deny, &[("mcp__harness__*", D)]);
    assert_eq!(
        outcome(&decide(&p, "Bash", &bash("touch f"))),
        Outcome::Deny(DecidedBy::Policy)
    );
    assert_eq!(
        outcome(&decide(&p, "mcp__harness__time__current_time", &json!({}))),
        Outcome::Allow(DecidedBy::Policy)
    );
    let all = policy(ApprovalMode::Allow, &[]);
    assert_eq!(
        outcome(&decide(&all, "Write", &json!({}))),
        Outcome::Allow(DecidedBy::Policy)
    );
}

#[test]
fn bare_edit_and_write_name_every_tool_that_writes() {
    let p = policy(ApprovalMode::Deny, &[("Write", A), ("Bash(*)", A)]);
    for tool in ["Write", "Edit", "MultiEdit", "NotebookEdit"] {
        assert_eq!(
            outcome(&decide(&p, tool, &json!({"file_path": "x"}))),
            Outcome::Allow(DecidedBy::Rule),
            "{tool}"
        );
    }
    assert_eq!(
        outcome(&decide(&p, "Read", &json!({"file_path": "x"}))),
        Outcome::Deny(DecidedBy::Policy)
    );
    assert_eq!(
        outcome(&decide(&p, "Bash", &bash("a | b > c $(d)"))),
        Outcome::Allow(DecidedBy::Rule),
        "`Bash(*)` is every command"
    );
}

#[test]
fn malformed_rules_are_refused_by_name() {
    let bad: &[(&str, RuleDecision)] = &[
        ("Bash(git", A),
        ("", A),
        ("Ba sh", A),
        ("(x)", A),
        ("Bash()", D),
        ("Bash(:*)", D),
        ("Bash(git status && ls)", A),
        ("Bash(echo >f)", A),
        ("Edit(*/../x)", D),
    ];
    for (text, decision) in bad {
        let err =
            Policy::with_home(&config(ApprovalMode::Deny, &[(text, *decision)]), None).unwrap_err();
        assert!(err.contains("approvals rule"), "{text}: {err}");
    }
    let err =
        Policy::with_home(&config(ApprovalMode::Deny, &[("Read(~/x)", D)]), None).unwrap_err();
    assert!(err.contains("HOME"), "{err}");
}

#[test]
fn deny_rules_for_the_cli_say_what_they_mean_here() {
    let p = policy(
        ApprovalMode::Allow,
        &[
            ("Bash(rm:*)", D),
            ("Bash(git:*)", A),
            ("Write(/secret/**)", D),
            ("Edit(//etc/**)", D),
            ("Read(~/.ssh/**)", D),
            ("Read", D),
            ("Write", D),
            ("Edit", D),
            ("WebFetch(domain:evil.io)", D),
        ],
    );
    assert_eq!(
        p.cli_deny_rules(),
        [
            "Bash(rm:*)",
            "Edit(./secret/**)",
            "Edit(//etc/**)",
            "Read(~/.ssh/**)",
            "Read",
            "Glob",
            "Grep",
            "Edit",
            "Write",
            "MultiEdit",
            "NotebookEdit",
            "WebFetch(domain:evil.io)",
        ]
    );
}

/// "Allow always": the rules made for each kind of request, and what each allows afterwards on
/// the thread, in `ask` mode: the request itself, not its neighbours.
#[test]
fn allowing_always_makes_the_narrowest_rule_and_it_allows_just_that() {
    let p = policy(ApprovalMode::Ask, &[("Bash(rm:*)", RuleDecision::Deny)]);
    let cwd = Path::new(CWD);
    // (tool, input, the rules made, a neighbour they must not allow)
    let cases: Vec<(&str, Value, Vec<&str>, Value)> = vec![
        (
            "Bash",
            bash("npm test"),
            vec!["Bash(npm test)"],
            bash("npm test --all"),
        ),
        (
            "Bash",
            bash("cd sub && make -j2"),
            vec!["Bash(cd sub)", "Bash(make -j2)"],
            bash("cd sub && make install"),
        ),
        (
            "Edit",
            json!({"file_path": "src/main.rs"}),
            vec!["Edit(//data/work/A/src/main.rs)"],
            json!({"file_path": "src/lib.rs"}),
        ),
        (
            "Grep",
            json!({"pattern": "x", "path": "src"}),
            vec!["Grep(//data/work/A/src/**)"],
            json!({"pattern": "x"}),
        ),
        (
            "WebFetch",
            json!({"url": "https://docs.rs/tokio"}),
            vec!["WebFetch(domain:docs.rs)"],
            json!({"url": "https://evil.docs.rs.example/"}),
        ),
        (
            "WebSearch",
            json!({"query": "rust moka"}),
            vec!["WebSearch(rust moka)"],
            json!({"query": "rust moka cache"}),
        ),
        (
            "mcp__github__create_issue",
            json!({"title": "t"}),
            vec!["mcp__github__create_issue"],
            json!({}),
        ),
    ];
    for (tool, input, expected, neighbour) in cases {
        let rules = p.rules_for(tool, &input, cwd);
        assert_eq!(rules, expected, "{tool} {input}");
        let (thread, bad) = p.thread_rules(&rules);
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(outcome(&decide(&p, tool, &input)), Outcome::Ask);
        let verdict = p.decide_in(tool, &input, cwd, &thread);
        assert_eq!(
            outcome(&verdict),
            Outcome::Allow(DecidedBy::Rule),
            "{tool} {input}"
        );
        let Verdict::Allow { reason, .. } = verdict else {
            unreachable!()
        };
        assert!(
            reason.contains("allowed it always on this thread"),
            "{reason}"
        );
        let other = p.decide_in(tool, &neighbour, cwd, &thread);
        if tool != "mcp__github__create_issue" {
            assert_eq!(outcome(&other), Outcome::Ask, "{tool} {neighbour}");
        }
    }
}

/// What no rule names exactly gets no rule (the person's allow counts once); and a thread rule
/// never outranks the profile's deny rules.
#[test]
fn allowing_always_makes_no_rule_it_cannot_keep_narrow_and_deny_rules_win() {
    let p = policy(ApprovalMode::Ask, &[("Bash(rm:*)", RuleDecision::Deny)]);
    let cwd = Path::new(CWD);
    for command in [
        "echo $(id)",
        "cat x > y",
        "echo 'a b'",
        "ls *.rs",
        "echo \"$HOME\"",
        "",
    ] {
        assert!(
            p.rules_for("Bash", &bash(command), cwd).is_empty(),
            "{command}"
        );
    }
    let glob = json!({"file_path": "src/*.rs"});
    assert!(p.rules_for("Write", &glob, cwd).is_empty());
    assert!(p.rules_for("Edit", &json!({}), cwd).is_empty());
    // A stored `Bash` rule (say, written by hand into the table) does not undo a deny rule.
    let (thread, _) = p.thread_rules(&["Bash".to_owned(), "Bash(rm -rf x)".to_owned()]);
    let verdict = p.decide_in("Bash", &bash("rm -rf x"), cwd, &thread);
    assert_eq!(outcome(&verdict), Outcome::Deny(DecidedBy::Rule));
    // A stored rule that does not parse is left out, with its error.
    let (_, bad) = p.thread_rules(&["Bash(".to_owned()]);
    assert_eq!(bad.len(), 1);
}
