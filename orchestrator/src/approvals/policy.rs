//! Which tool permissions are decided without a person: Harness's own MCP tools, the configured
//! rules (in the CLI's own syntax, checked in order), then the mode. No IO, so every case is a
//! string test.

use serde_json::Value;

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
    rules: Vec<(Pattern, RuleDecision, String)>,
}

impl Policy {
    /// `Err` names the first rule that is not in the CLI's syntax.
    pub fn new(config: &ApprovalsConfig) -> Result<Policy, String> {
        let rules = config
            .rules
            .iter()
            .map(|ApprovalRule { tool, decision }| {
                Pattern::parse(tool).map(|pattern| (pattern, *decision, tool.clone()))
            })
            .collect::<Result<_, _>>()?;
        Ok(Policy {
            mode: config.mode,
            rules,
        })
    }

    pub fn mode(&self) -> ApprovalMode {
        self.mode
    }

    pub fn decide(&self, tool: &str, input: &Value) -> Verdict {
        if tool.starts_with(&format!("mcp__{SERVER_NAME}__")) {
            let reason = "Harness's own tools are always allowed".to_owned();
            return Verdict::Allow {
                by: DecidedBy::Policy,
                reason,
            };
        }
        for (pattern, decision, text) in &self.rules {
            if pattern.matches(tool, input) {
                let reason = format!("rule {text}");
                let by = DecidedBy::Rule;
                return match decision {
                    RuleDecision::Allow => Verdict::Allow { by, reason },
                    RuleDecision::Deny => Verdict::Deny { by, reason },
                };
            }
        }
        let by = DecidedBy::Policy;
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
}

/// `Tool`, `Tool(argument)`, `Tool(prefix:*)`, `Tool(glob*)`; a tool name may end in `*`
/// (`mcp__github__*`).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Pattern {
    tool: String,
    argument: Option<String>,
}

impl Pattern {
    fn parse(text: &str) -> Result<Pattern, String> {
        let text = text.trim();
        let bad = || format!("approvals rule {text:?} is not `Tool` or `Tool(pattern)`");
        let (tool, argument) = match text.split_once('(') {
            Some((tool, rest)) => {
                let argument = rest.strip_suffix(')').ok_or_else(bad)?;
                (tool, Some(argument.to_owned()))
            }
            None => (text, None),
        };
        let valid_name = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        let name = tool.strip_suffix('*').unwrap_or(tool);
        if tool.is_empty() || !name.chars().all(valid_name) {
            return Err(bad());
        }
        Ok(Pattern {
            tool: tool.to_owned(),
            argument,
        })
    }

    fn matches(&self, tool: &str, input: &Value) -> bool {
        let tool_matches = match self.tool.strip_suffix('*') {
            Some(prefix) => tool.starts_with(prefix),
            None => tool == self.tool,
        };
        if !tool_matches {
            return false;
        }
        let Some(pattern) = &self.argument else {
            return true;
        };
        let Some(argument) = main_argument(tool, input) else {
            return false;
        };
        match pattern.strip_suffix(":*") {
            // `Bash(git status:*)`: the command, or the command followed by more words.
            Some(prefix) => {
                argument == prefix
                    || argument
                        .strip_prefix(prefix)
                        .is_some_and(|rest| rest.starts_with(char::is_whitespace))
            }
            None => glob(pattern, argument),
        }
    }
}

/// The argument a rule's parentheses are about: the command, the file, the pattern, the URL.
fn main_argument<'a>(tool: &str, input: &'a Value) -> Option<&'a str> {
    let key = match tool {
        "Bash" => "command",
        "Write" | "Edit" | "MultiEdit" | "Read" => "file_path",
        "NotebookEdit" => "notebook_path",
        "Glob" | "Grep" => "pattern",
        "WebFetch" => "url",
        "WebSearch" => "query",
        _ => return None,
    };
    input.get(key).and_then(Value::as_str)
}

/// `*` matches any run of characters (`**` too); everything else matches itself.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(mode: ApprovalMode, rules: &[(&str, RuleDecision)]) -> Policy {
        Policy::new(&ApprovalsConfig {
            mode,
            rules: rules
                .iter()
                .map(|(tool, decision)| ApprovalRule {
                    tool: (*tool).to_owned(),
                    decision: *decision,
                })
                .collect(),
            ..Default::default()
        })
        .unwrap()
    }

    fn bash(command: &str) -> Value {
        json!({"command": command})
    }

    #[test]
    fn rules_come_first_in_order_then_the_mode() {
        let p = policy(
            ApprovalMode::Ask,
            &[
                ("Bash(git status:*)", RuleDecision::Allow),
                ("Bash(git:*)", RuleDecision::Deny),
                ("Write(/tmp/*)", RuleDecision::Allow),
            ],
        );
        assert!(matches!(
            p.decide("Bash", &bash("git status")),
            Verdict::Allow {
                by: DecidedBy::Rule,
                ..
            }
        ));
        assert!(matches!(
            p.decide("Bash", &bash("git status -s")),
            Verdict::Allow {
                by: DecidedBy::Rule,
                ..
            }
        ));
        assert!(matches!(
            p.decide("Bash", &bash("git push")),
            Verdict::Deny {
                by: DecidedBy::Rule,
                ..
            }
        ));
        assert_eq!(
            p.decide("Bash", &bash("git-lfs x")),
            Verdict::Ask,
            "a prefix is whole words"
        );
        assert_eq!(p.decide("Bash", &bash("touch f")), Verdict::Ask);
        assert!(matches!(
            p.decide("Write", &json!({"file_path": "/tmp/a/b"})),
            Verdict::Allow { .. }
        ));
        assert_eq!(
            p.decide("Write", &json!({"file_path": "/etc/x"})),
            Verdict::Ask
        );
    }

    #[test]
    fn the_default_denies_and_harness_tools_are_always_allowed() {
        let p = policy(
            ApprovalMode::Deny,
            &[("mcp__harness__*", RuleDecision::Deny)],
        );
        assert!(matches!(
            p.decide("Bash", &bash("touch f")),
            Verdict::Deny {
                by: DecidedBy::Policy,
                ..
            }
        ));
        assert!(matches!(
            p.decide("mcp__harness__time__current_time", &json!({})),
            Verdict::Allow {
                by: DecidedBy::Policy,
                ..
            }
        ));
        let all = policy(ApprovalMode::Allow, &[]);
        assert!(matches!(
            all.decide("Write", &json!({})),
            Verdict::Allow { .. }
        ));
    }

    #[test]
    fn bare_tools_and_wildcards() {
        let p = policy(
            ApprovalMode::Deny,
            &[
                ("Write", RuleDecision::Allow),
                ("mcp__github__*", RuleDecision::Allow),
            ],
        );
        assert!(matches!(
            p.decide("Write", &json!({"file_path": "x"})),
            Verdict::Allow { .. }
        ));
        assert!(matches!(
            p.decide("mcp__github__issue", &json!({})),
            Verdict::Allow { .. }
        ));
        assert!(matches!(
            p.decide("Edit", &json!({"file_path": "x"})),
            Verdict::Deny { .. }
        ));
    }

    #[test]
    fn malformed_rules_are_refused_by_name() {
        for bad in ["Bash(git", "", "Ba sh", "(x)"] {
            let err = Policy::new(&ApprovalsConfig {
                rules: vec![ApprovalRule {
                    tool: bad.into(),
                    decision: RuleDecision::Allow,
                }],
                ..Default::default()
            })
            .unwrap_err();
            assert!(err.contains("approvals rule"), "{err}");
        }
    }

    #[test]
    fn globs() {
        assert!(glob("a*c", "abc"));
        assert!(glob("a*", "a"));
        assert!(glob("*.rs", "x/y.rs"));
        assert!(glob("/w/**", "/w/a/b"));
        assert!(!glob("a*c", "ab"));
        assert!(!glob("abc", "abcd"));
    }
}
