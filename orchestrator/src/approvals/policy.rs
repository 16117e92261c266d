//! Which tool permissions are decided without a person. The CLI asks the daemon about every tool
//! use it would ask a person about (`can_use_tool`); [`Policy::decide`] answers, in this order:
//!
//! 1. Harness's own MCP tools (`mcp__harness__*`) are allowed.
//! 2. A deny rule that matches refuses, wherever it stands in `approvals.rules`.
//! 3. Allow rules that match allow.
//! 4. `approvals.mode` decides the rest (`deny`, `ask`, `allow`).
//!
//! The CLI checks its own rules in the same order (deny, then allow). Rules are written in the
//! CLI's syntax (`Tool`, `Tool(argument)`, `mcp__server__*`). A deny rule errs towards refusing:
//! one whose argument Harness cannot check on a tool refuses that tool whole, and input without
//! the command or path a rule is about counts as a match.
//!
//! **`Bash` rules.** `Bash` and `Bash(*)` name every command. `Bash(git status:*)` names the words
//! `git status` followed by any words or none, `Bash(git status)` exactly those words. In a rule,
//! `*` inside a word matches any characters of one word, and `*` as a word of its own any number
//! of words (`Bash(git status *)` is `Bash(git status:*)`).
//! - An **allow** rule allows a command only when it allows every simple command in it: the line
//!   is split on `&&`, `||`, `;`, `|`, `&` and newlines outside quotes, and each part, its quotes
//!   and backslashes removed, must match some allow rule word by word. A part with a command or
//!   process substitution (`$(…)`, backticks, `<(…)`, `>(…)`), a redirection (`>`, `>>`, `<`,
//!   `<<`; only `2>&1`, `1>&2`, `>&2`, `>/dev/null`, `1>/dev/null`, `2>/dev/null` and
//!   `&>/dev/null` are accepted, and dropped), a group or subshell (`(`, `{`, so also `${…}`), or
//!   a quote that never closes is allowed by no rule: it goes to the mode. Words are compared as
//!   written: `/usr/bin/git status` and `A=1 git status` are not `git status`.
//! - A **deny** rule refuses a command in which its words appear side by side anywhere, at any
//!   depth. For this the whole line is cut into words at whitespace, at every shell operator, at
//!   `$`, `{`, `}` and `,`, and at the operators inside `${…}`, with quotes, backslashes and line
//!   continuations dropped; it is read a second time with every `$name`, `$@`, `${…}` taken out;
//!   each word is compared by its last path segment. So `Bash(rm:*)` (or `Bash(rm)`) also refuses
//!   `/bin/rm`, `\rm`, `"r"m`, `command rm`, `env -i A=1 rm`, `sudo rm`, `xargs rm`,
//!   `true && rm`, `$(rm …)`, `sh -c 'rm …'`, `{rm,x}`, `rm${IFS}x`, `r${u}m` and `${u:-rm}`; a
//!   word with a wildcard that could expand to `rm` (`/bin/r?`) counts as `rm`. The price:
//!   `echo rm` and `git rm` are refused too. A few commands have the same effect under another
//!   name: a deny rule that is just `rm` also refuses `unlink`, `rmdir`, `shred` and
//!   `find … -delete`.
//!
//! **Limits of deny rules.** A deny rule names commands, not effects: a script, `python -c`,
//! `perl -e`, an interpreter reading stdin, or a name built at run time (`$cmd`, `$'\x72m'`,
//! `$(printf r)m`, `base64 -d | sh`) is not recognized, and the words of a rule of several words
//! must be side by side (`Bash(git push:*)` does not see `git -C . push`). To let only what is
//! listed run, use `approvals.mode = "deny"` (or `ask`) with allow rules instead.
//!
//! **Path rules** (gitignore-style, as the CLI's). `Edit(…)` applies to every tool that writes a
//! file (`Edit`, `Write`, `MultiEdit`, `NotebookEdit`); `Write(…)` is the same rule (the CLI files
//! it under Edit), and so are bare `Edit` and `Write`. `Read(…)` (and bare `Read`) applies to
//! every tool that reads: `Read` by its file, `Glob`, `Grep` and `LS` by the folder they search
//! (their `path`, else the thread's folder; for `Glob` also the fixed start of its pattern). Rules
//! naming another tool (`NotebookEdit(…)`) apply to that tool only. Anchors: `//abs/path` is
//! `/abs/path`; `~/x` is under the daemon's `$HOME`; `/x`, `./x` and `x` are in the thread's
//! folder (the CLI anchors `/x` at the source of its settings; for Harness that is the thread's
//! folder). The tool's path is joined onto the thread's folder and its `.` and `..` are resolved
//! as text before matching (no filesystem access, so a symlink is not followed, and case counts
//! even where the filesystem ignores it): `work/A/../B/x` is `work/B/x`. `*`, `?` and `[…]`
//! match within one path segment, `**` any number of segments; a trailing `/` means everything
//! inside. An `Edit` rule says nothing about reads, nor a `Read` rule about writes.
//! - A deny rule also refuses what lies inside a folder it matches; a pattern without `/` (`.env`,
//!   `*.pem`) at any depth of the thread's folder; and a search whose folder contains, or lies
//!   inside, the fixed start of the pattern (a `Grep` of the thread's folder under `Read(.env)`).
//! - An allow rule allows exactly the paths it matches (`//w/*` is not `/w/B/CLAUDE.md`), and a
//!   search only when the rule ends in `/**` and covers the whole folder searched.
//!
//! Commands that read or write files are judged by the `Bash` rules, never by the path rules (as
//! in the CLI). The CLI runs some tools without asking (reads in its folder, read-only commands),
//! so those never reach this policy: [`Policy::cli_deny_rules`] hands the deny rules to the CLI's
//! own settings as well. No IO here, so every case is a string test.
//!
//! Reading a command line as the shell would is `approvals::shell`'s part, resolving and matching
//! paths `approvals::paths`'s; this module says what a rule means and decides.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::paths::{glob_root, normalize, resolve_input, segments, wildcard, PathPattern};
use super::shell::{split_command, Words};
use crate::config::{ApprovalMode, ApprovalRule, ApprovalsConfig, RuleDecision};
use crate::mcp::SERVER_NAME;

/// What the policy says about one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    Allow {
        by: DecidedBy,
        reason: String,
    },
    Deny {
        by: DecidedBy,
        reason: String,
    },
    /// Held for a person.
    Ask,
}

/// Who made a decision; stored and counted under these names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecidedBy {
    Rule,
    Person,
    Timeout,
    /// The mode (`approvals.mode`), or Harness's own tools, which are always allowed.
    Policy,
    /// An interrupt or shutdown while a person had not answered.
    Interrupt,
}

impl DecidedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Rule => "rule",
            DecidedBy::Person => "person",
            DecidedBy::Timeout => "timeout",
            DecidedBy::Policy => "policy",
            DecidedBy::Interrupt => "interrupt",
        }
    }
}

/// The rules and the mode, parsed once.
#[derive(Clone, Debug)]
pub struct Policy {
    mode: ApprovalMode,
    /// All checked before any allow rule: one match refuses.
    deny: Vec<Rule>,
    allow: Vec<Rule>,
    /// What `~/` means in a tool's path (rules resolve theirs when parsed).
    home: Option<PathBuf>,
    /// `sandbox.auto_allow` with the walls on: [`WALLED_TOOLS`] run without asking.
    walled: bool,
}

/// The tools whose every effect the walls hold (files, processes, memory: `[sandbox]`), which
/// `sandbox.auto_allow` lets run without asking once no rule decided them. Not the web tools:
/// the network beyond the gateway is the profile's `network` to allow.
pub const WALLED_TOOLS: &[&str] = &[
    "Bash",
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "NotebookEdit",
    "Glob",
    "Grep",
    "LS",
];

impl Policy {
    /// `Err` names the first rule that is not in the CLI's syntax, or that names `~` when
    /// `$HOME` is unset.
    pub fn new(config: &ApprovalsConfig) -> Result<Policy, String> {
        let home = std::env::var_os("HOME")
            .filter(|home| !home.is_empty())
            .map(PathBuf::from);
        Policy::with_home(config, home.as_deref())
    }

    /// [`Policy::new`] with `~` meaning `home`, whatever `$HOME` says.
    pub fn with_home(config: &ApprovalsConfig, home: Option<&Path>) -> Result<Policy, String> {
        let mut policy = Policy {
            mode: config.mode,
            deny: Vec::new(),
            allow: Vec::new(),
            home: home.map(normalize),
            walled: false,
        };
        for ApprovalRule { tool, decision } in &config.rules {
            let rule = Rule::parse(tool, *decision, policy.home.as_deref())?;
            match decision {
                RuleDecision::Allow => policy.allow.push(rule),
                RuleDecision::Deny => policy.deny.push(rule),
            }
        }
        Ok(policy)
    }

    /// With `auto_allow` (the walls on, and the profile's `sandbox.auto_allow`), the tools of
    /// [`WALLED_TOOLS`] run without asking when no rule decided them.
    pub fn walled(self, auto_allow: bool) -> Policy {
        Policy {
            walled: auto_allow,
            ..self
        }
    }

    pub fn mode(&self) -> ApprovalMode {
        self.mode
    }

    /// Decides `tool` with `input`, run in the thread's folder `cwd` (where relative paths and
    /// relative path rules are anchored; an absolute path).
    pub fn decide(&self, tool: &str, input: &Value, cwd: &Path) -> Verdict {
        self.decide_in(tool, input, cwd, &ThreadRules::default())
    }

    /// [`Policy::decide`] on a thread that has `thread` rules: they allow, after the profile's
    /// deny and allow rules and before the walls and the mode.
    pub fn decide_in(
        &self,
        tool: &str,
        input: &Value,
        cwd: &Path,
        thread: &ThreadRules,
    ) -> Verdict {
        if tool.starts_with(&format!("mcp__{SERVER_NAME}__")) {
            let reason = "Harness's own tools are always allowed".to_owned();
            return Verdict::Allow {
                by: DecidedBy::Policy,
                reason,
            };
        }
        let request = Request {
            tool,
            input,
            cwd: segments(cwd),
            home: self.home.as_deref(),
        };
        if let Some(rule) = self.deny.iter().find(|rule| rule.denies(&request)) {
            return Verdict::Deny {
                by: DecidedBy::Rule,
                reason: format!("rule {}", rule.text),
            };
        }
        if let Some(reason) = allowed(&self.allow, &request) {
            return Verdict::Allow {
                by: DecidedBy::Rule,
                reason,
            };
        }
        if !thread.0.is_empty() {
            let both: Vec<Rule> = self.allow.iter().chain(&thread.0).cloned().collect();
            if let Some(reason) = allowed(&both, &request) {
                return Verdict::Allow {
                    by: DecidedBy::Rule,
                    reason: format!("{reason}; a person allowed it always on this thread"),
                };
            }
        }
        let by = DecidedBy::Policy;
        if self.walled && WALLED_TOOLS.contains(&tool) {
            return Verdict::Allow {
                by,
                reason: "inside the thread's walls (sandbox.auto_allow)".into(),
            };
        }
        match self.mode {
            ApprovalMode::Allow => Verdict::Allow {
                by,
                reason: "approvals.mode = allow".into(),
            },
            ApprovalMode::Deny => Verdict::Deny {
                by,
                reason: "approvals.mode = deny".into(),
            },
            ApprovalMode::Ask => Verdict::Ask,
        }
    }

    /// The deny rules for the CLI's own `permissions.deny`, which it checks before the reads and
    /// read-only commands it runs without asking. As written, except that they say what they mean
    /// here in the CLI's terms: `Write(…)` is `Edit(…)`, a path rule's `/x` is `./x` (the CLI
    /// anchors `/x` at the settings' source, Harness at the thread's folder, the CLI's current
    /// folder), and a bare `Edit`/`Write` or `Read` names each tool of its family.
    pub fn cli_deny_rules(&self) -> Vec<String> {
        let mut rules: Vec<String> = Vec::new();
        for rule in &self.deny {
            for text in rule.cli_texts() {
                if !rules.contains(&text) {
                    rules.push(text);
                }
            }
        }
        rules
    }

    /// The stored rules of a thread, parsed as allow rules; one that does not parse is left out
    /// (it was checked when made, so this is a stored row from elsewhere), with its error.
    pub fn thread_rules(&self, stored: &[String]) -> (ThreadRules, Vec<String>) {
        let (mut rules, mut bad) = (Vec::new(), Vec::new());
        for text in stored {
            match Rule::parse(text, RuleDecision::Allow, self.home.as_deref()) {
                Ok(rule) => rules.push(rule),
                Err(err) => bad.push(err),
            }
        }
        (ThreadRules(rules), bad)
    }

    /// The narrowest allow rules that name this request, for a person who allows it "always":
    /// each simple command of a `Bash` line word for word (`Bash(npm test)`), a file tool's file
    /// (`Edit(//w/src/main.rs)`), a search's folder and what lies under it (`Grep(//w/src/**)`),
    /// a fetch's host (`WebFetch(domain:docs.rs)`), a web search's query, else the tool
    /// (`mcp__github__create_issue`). Empty when no rule names it exactly: a command with a
    /// substitution, a redirection or a word with spaces, quotes or `*`; a path with wildcard
    /// characters. Each set is checked to allow the request, by rules alone.
    pub fn rules_for(&self, tool: &str, input: &Value, cwd: &Path) -> Vec<String> {
        let request = Request {
            tool,
            input,
            cwd: segments(cwd),
            home: self.home.as_deref(),
        };
        let Some(texts) = narrowest(&request) else {
            return Vec::new();
        };
        let parsed: Result<Vec<Rule>, String> = texts
            .iter()
            .map(|text| Rule::parse(text, RuleDecision::Allow, self.home.as_deref()))
            .collect();
        match parsed {
            Ok(rules) if allowed(&rules, &request).is_some() => texts,
            _ => Vec::new(),
        }
    }
}

/// The allow rules people added to one thread ([`Policy::rules_for`], stored), parsed
/// ([`Policy::thread_rules`]).
#[derive(Clone, Debug, Default)]
pub struct ThreadRules(Vec<Rule>);

/// [`Policy::rules_for`]'s rules, unchecked; `None` when none can name the request exactly.
fn narrowest(request: &Request) -> Option<Vec<String>> {
    // Characters a rule would read as a pattern, a quote or its own parentheses.
    let plain = |text: &str| {
        !text.is_empty()
            && !text.contains(|c: char| c.is_whitespace() || "*?[]()'\"\\$`{}!#".contains(c))
    };
    let tool = request.tool;
    if tool == "Bash" {
        let parts = split_command(request.input.get("command")?.as_str()?)?;
        let mut rules: Vec<String> = Vec::new();
        for part in &parts {
            if part.special || part.words.is_empty() || !part.words.iter().all(|w| plain(w)) {
                return None;
            }
            let rule = format!("Bash({})", part.words.join(" "));
            if !rules.contains(&rule) {
                rules.push(rule);
            }
        }
        return (!rules.is_empty()).then_some(rules);
    }
    let path = |segments: &[String]| {
        segments
            .iter()
            .all(|s| plain(s))
            .then(|| format!("//{}", segments.join("/")))
    };
    let rule = match target(request) {
        Some(Target::File(file)) => format!("{tool}({})", path(&file)?),
        Some(Target::Folder(folder)) if folder.is_empty() => format!("{tool}(//**)"),
        Some(Target::Folder(folder)) => format!("{tool}({}/**)", path(&folder)?),
        None if EDIT_TOOLS.contains(&tool) || READ_TOOLS.contains(&tool) => return None,
        None if tool == "WebFetch" => format!("WebFetch(domain:{})", url_host(request)?),
        None if tool == "WebSearch" => {
            let query = main_argument(tool, request.input)?;
            let spaced = query.split(' ').all(plain);
            spaced.then(|| format!("WebSearch({query})"))?
        }
        None => {
            let name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
            tool.chars().all(name).then(|| tool.to_owned())?
        }
    };
    Some(vec![rule])
}

/// Why the allow rules `allow` allow `request` (`rule X`, or `rules X, Y` when a command line needed
/// several); `None` when they do not.
fn allowed(allow: &[Rule], request: &Request) -> Option<String> {
    let rules: Vec<&Rule> = allow
        .iter()
        .filter(|rule| rule.tools.covers(request.tool))
        .collect();
    if request.tool != "Bash" {
        let rule = rules.iter().find(|rule| rule.allows(request))?;
        return Some(format!("rule {}", rule.text));
    }
    if let Some(rule) = rules.iter().find(|rule| rule.argument == Argument::Any) {
        return Some(format!("rule {}", rule.text));
    }
    let command = request.input.get("command")?.as_str()?;
    let parts = split_command(command)?;
    if parts.is_empty() {
        return None;
    }
    let mut used: Vec<&str> = Vec::new();
    for part in &parts {
        if part.special {
            return None;
        }
        let rule = rules.iter().find(|rule| match &rule.argument {
            Argument::Bash(pattern) => pattern.allows(&part.words),
            _ => false,
        })?;
        if !used.contains(&rule.text.as_str()) {
            used.push(&rule.text);
        }
    }
    Some(match used.as_slice() {
        [one] => format!("rule {one}"),
        all => format!("rules {}", all.join(", ")),
    })
}

/// One request as the rules see it.
struct Request<'a> {
    tool: &'a str,
    input: &'a Value,
    /// The thread's folder, as normalized path segments.
    cwd: Vec<String>,
    home: Option<&'a Path>,
}

/// Tools that write files: what an `Edit(…)` or `Write(…)` rule covers.
const EDIT_TOOLS: &[&str] = &["Edit", "Write", "MultiEdit", "NotebookEdit"];
/// Tools that read files: what a `Read(…)` rule covers.
const READ_TOOLS: &[&str] = &["Read", "Glob", "Grep", "LS"];

/// One rule of `approvals.rules`, parsed.
#[derive(Clone, Debug)]
struct Rule {
    /// As written; the reason a decision gives.
    text: String,
    /// The tool name as written (`Write`), for [`Policy::cli_deny_rules`].
    name: String,
    tools: Tools,
    argument: Argument,
}

/// Which tools a rule is about.
#[derive(Clone, Debug)]
enum Tools {
    Named(String),
    /// `mcp__github__*`.
    Prefix(String),
    /// `Edit`, `Write`: every tool of [`EDIT_TOOLS`].
    Edits,
    /// `Read`: every tool of [`READ_TOOLS`].
    Reads,
}

impl Tools {
    fn covers(&self, tool: &str) -> bool {
        match self {
            Tools::Named(name) => tool == name,
            Tools::Prefix(prefix) => tool.starts_with(prefix.as_str()),
            Tools::Edits => EDIT_TOOLS.contains(&tool),
            Tools::Reads => READ_TOOLS.contains(&tool),
        }
    }
}

/// What a rule says about the tool's input.
#[derive(Clone, Debug, PartialEq)]
enum Argument {
    /// No parentheses (or `Bash(*)`): every use of the tool.
    Any,
    Bash(Words),
    Path(PathPattern),
    /// `WebFetch(domain:example.com)`.
    Domain(String),
    /// Any other tool's main argument (`WebSearch(query)`): `prefix:*` or a `*` wildcard.
    Text(String),
}

impl Rule {
    fn parse(text: &str, decision: RuleDecision, home: Option<&Path>) -> Result<Rule, String> {
        let text = text.trim();
        let bad = |why: &str| format!("approvals rule {text:?} {why}");
        let (name, argument) = match text.split_once('(') {
            Some((name, rest)) => {
                let argument = rest
                    .strip_suffix(')')
                    .ok_or_else(|| bad("is not `Tool` or `Tool(pattern)`"))?;
                (name, Some(argument.trim()))
            }
            None => (text, None),
        };
        let valid_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        let stem = name.strip_suffix('*').unwrap_or(name);
        if name.is_empty() || !stem.chars().all(valid_name) {
            return Err(bad("is not `Tool` or `Tool(pattern)`"));
        }
        let tools = match name {
            "Edit" | "Write" => Tools::Edits,
            "Read" => Tools::Reads,
            _ if name.ends_with('*') => Tools::Prefix(stem.to_owned()),
            _ => Tools::Named(name.to_owned()),
        };
        let argument = match argument {
            None => Argument::Any,
            Some("") => return Err(bad("has empty parentheses")),
            Some("*") if name == "Bash" => Argument::Any,
            Some(argument) if name == "Bash" => {
                Argument::Bash(Words::parse(argument, decision).map_err(|why| bad(&why))?)
            }
            Some(argument) if EDIT_TOOLS.contains(&name) || READ_TOOLS.contains(&name) => {
                Argument::Path(PathPattern::parse(argument, home).map_err(|why| bad(&why))?)
            }
            Some(argument) => match argument.strip_prefix("domain:") {
                Some(domain) if name == "WebFetch" => {
                    Argument::Domain(domain.trim_end_matches('.').to_ascii_lowercase())
                }
                _ => Argument::Text(argument.to_owned()),
            },
        };
        Ok(Rule {
            text: text.to_owned(),
            name: name.to_owned(),
            tools,
            argument,
        })
    }

    /// Whether this deny rule refuses `request`. Input the rule cannot read (no `command`, no
    /// path) counts as a match: a deny rule errs on the side of refusing.
    fn denies(&self, request: &Request) -> bool {
        if !self.tools.covers(request.tool) {
            return false;
        }
        match &self.argument {
            Argument::Any => true,
            Argument::Bash(words) => request
                .input
                .get("command")
                .and_then(Value::as_str)
                .is_none_or(|command| words.denies(command)),
            Argument::Path(pattern) => match target(request) {
                Some(Target::File(path)) => pattern.denies_file(&path, &request.cwd),
                Some(Target::Folder(folder)) => pattern.denies_folder(&folder, &request.cwd),
                None => true,
            },
            Argument::Domain(domain) => url_host(request).is_none_or(|host| {
                host == *domain
                    || host.ends_with(&format!(".{domain}"))
                    || wildcard(domain, &host, false)
            }),
            Argument::Text(pattern) => main_argument(request.tool, request.input)
                .is_none_or(|argument| text_matches(pattern, argument)),
        }
    }

    /// Whether this allow rule allows `request` (a `Bash` command is judged part by part in
    /// [`Policy::allowed`], not here).
    fn allows(&self, request: &Request) -> bool {
        match &self.argument {
            Argument::Any => true,
            Argument::Bash(_) => false,
            Argument::Path(pattern) => match target(request) {
                Some(Target::File(path)) => pattern.allows_file(&path, &request.cwd),
                Some(Target::Folder(folder)) => pattern.allows_folder(&folder, &request.cwd),
                None => false,
            },
            Argument::Domain(domain) => {
                url_host(request).is_some_and(|host| wildcard(domain, &host, false))
            }
            Argument::Text(pattern) => main_argument(request.tool, request.input)
                .is_some_and(|argument| text_matches(pattern, argument)),
        }
    }

    /// This deny rule in the CLI's own settings (see [`Policy::cli_deny_rules`]).
    fn cli_texts(&self) -> Vec<String> {
        let family = match self.tools {
            Tools::Edits => "Edit",
            Tools::Reads => "Read",
            _ => self.name.as_str(),
        };
        match &self.argument {
            Argument::Any => match self.tools {
                Tools::Edits => EDIT_TOOLS.iter().map(|t| (*t).to_owned()).collect(),
                Tools::Reads => ["Read", "Glob", "Grep"].map(str::to_owned).to_vec(),
                _ => vec![self.text.clone()],
            },
            Argument::Path(pattern) => vec![format!("{family}({})", pattern.cli_text())],
            _ => vec![self.text.clone()],
        }
    }
}

/// The argument a text rule is about, for tools without their own kind of rule.
fn main_argument<'a>(tool: &str, input: &'a Value) -> Option<&'a str> {
    let key = match tool {
        "WebFetch" => "url",
        "WebSearch" => "query",
        _ => return None,
    };
    input.get(key).and_then(Value::as_str)
}

/// `prefix:*`: the argument is the prefix, or the prefix and a space and more; else a wildcard.
fn text_matches(pattern: &str, argument: &str) -> bool {
    match pattern.strip_suffix(":*") {
        Some(prefix) => {
            argument == prefix
                || argument
                    .strip_prefix(prefix)
                    .is_some_and(|rest| rest.starts_with(char::is_whitespace))
        }
        None => wildcard(pattern, argument, false),
    }
}

/// The lower-cased host of `WebFetch`'s `url` (a `\` ends the host, as browsers read it).
fn url_host(request: &Request) -> Option<String> {
    let url = request.input.get("url")?.as_str()?;
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split(['/', '\\', '?', '#']).next()?;
    let host_port = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host_port.split(':').next()?,
    };
    Some(host.trim_end_matches('.').to_ascii_lowercase())
}

/// What a tool reads or writes.
enum Target {
    /// A file (or whatever the path names), as normalized segments.
    File(Vec<String>),
    /// The folder a search looks through, everything under it.
    Folder(Vec<String>),
}

/// The path of `request`'s tool, resolved against the thread's folder; `None` for a tool without
/// one or input without it.
fn target(request: &Request) -> Option<Target> {
    let input = request.input;
    let text = |key: &str| input.get(key).and_then(Value::as_str);
    let resolve = |path: &str| resolve_input(path, &request.cwd, request.home);
    match request.tool {
        "Edit" | "Write" | "MultiEdit" | "Read" => Some(Target::File(resolve(text("file_path")?))),
        "NotebookEdit" => Some(Target::File(resolve(text("notebook_path")?))),
        "Grep" | "LS" => Some(Target::Folder(
            text("path").map_or_else(|| request.cwd.clone(), resolve),
        )),
        "Glob" => {
            let base = text("path").map_or_else(|| request.cwd.clone(), resolve);
            Some(Target::Folder(glob_root(
                base,
                text("pattern"),
                request.home,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
