//! The shell side of `Bash(…)` rules: a command line read as bash and zsh read it, as text
//! (nothing runs). [`split_command`] cuts a line into the simple commands an allow rule must each
//! match; [`deny_words`] is the stream of words a deny rule searches (read a second time through
//! [`without_expansions`]); [`Words`] holds a rule's words, `*` words included, and
//! [`SAME_EFFECT`] the commands that do what another does under their own name. What a `Bash`
//! rule means, and what a deny rule cannot see, is in [`super::policy`]'s module doc; tools, paths
//! and modes are not known here.

use super::paths::wildcard;
use crate::config::RuleDecision;

/// The words of a `Bash(…)` rule.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Words(Vec<WordPattern>);

#[derive(Clone, Debug, PartialEq)]
enum WordPattern {
    /// One word; `*` in it matches any characters of that word.
    One(String),
    /// A `*` word, or the `:*` suffix: any number of words.
    Many,
}

/// Same effect, other name: a deny rule that is only the first word also refuses a command in
/// which each word list of the second appears, in order. Kept short on purpose; see
/// [`super::policy`]'s module doc for what deny rules cannot see.
const SAME_EFFECT: &[(&str, &[&[&str]])] = &[(
    "rm",
    &[&["unlink"], &["rmdir"], &["shred"], &["find", "-delete"]],
)];

impl Words {
    /// An allow rule is read like one simple command (so an operator in it is an error, as it
    /// could never match one); a deny rule like the commands it refuses.
    pub(super) fn parse(argument: &str, decision: RuleDecision) -> Result<Words, String> {
        let (body, rest) = match argument.strip_suffix(":*") {
            Some(body) => (body, true),
            None => (argument, false),
        };
        let words = match decision {
            RuleDecision::Allow => match split_command(body).as_deref() {
                Some([part]) if !part.special => part.words.clone(),
                _ => {
                    return Err(
                        "allows one command: no operators, redirections, substitutions \
                                or open quotes (write one rule per command)"
                            .into(),
                    )
                }
            },
            RuleDecision::Deny => deny_words(body),
        };
        if words.is_empty() {
            return Err("names no command".into());
        }
        let mut pattern: Vec<WordPattern> = words
            .into_iter()
            .map(|word| match word.as_str() {
                "*" => WordPattern::Many,
                _ => WordPattern::One(word),
            })
            .collect();
        if rest {
            pattern.push(WordPattern::Many);
        }
        Ok(Words(pattern))
    }

    /// The words of one plain simple command, compared as written.
    pub(super) fn allows(&self, words: &[String]) -> bool {
        let mut reach = vec![false; words.len() + 1];
        reach[0] = true;
        for pattern in &self.0 {
            let mut next = vec![false; words.len() + 1];
            match pattern {
                WordPattern::Many => {
                    let mut seen = false;
                    for (j, slot) in next.iter_mut().enumerate() {
                        seen |= reach[j];
                        *slot = seen;
                    }
                }
                WordPattern::One(glob) => {
                    for (j, word) in words.iter().enumerate() {
                        next[j + 1] = reach[j] && wildcard(glob, word, false);
                    }
                }
            }
            reach = next;
        }
        reach[words.len()]
    }

    /// Whether the rule's words appear in `command`: each run of words between `*`s side by side,
    /// the runs in order, anywhere in the command's [`deny_words`], read with its expansions as
    /// word breaks or as nothing.
    pub(super) fn denies(&self, command: &str) -> bool {
        let tokens = deny_words(command);
        let bare = deny_words(&without_expansions(command));
        self.denies_words(&tokens) || self.denies_words(&bare)
    }

    fn denies_words(&self, tokens: &[String]) -> bool {
        let runs: Vec<Vec<&str>> = self
            .0
            .split(|pattern| *pattern == WordPattern::Many)
            .filter(|run| !run.is_empty())
            .map(|run| {
                run.iter()
                    .filter_map(|pattern| match pattern {
                        WordPattern::One(word) => Some(word.as_str()),
                        WordPattern::Many => None,
                    })
                    .collect()
            })
            .collect();
        if runs_in_order(&runs, tokens) {
            return true;
        }
        let [only] = runs.as_slice() else {
            return false;
        };
        let [command_name] = only.as_slice() else {
            return false;
        };
        SAME_EFFECT
            .iter()
            .filter(|(name, _)| name == command_name)
            .flat_map(|(_, others)| others.iter())
            .any(|words| {
                let runs: Vec<Vec<&str>> = words.iter().map(|word| vec![*word]).collect();
                runs_in_order(&runs, tokens)
            })
    }
}

/// Each run appears in `tokens` with its words side by side, each run after the one before.
fn runs_in_order(runs: &[Vec<&str>], tokens: &[String]) -> bool {
    let mut from = 0;
    for run in runs {
        let found = (from..=tokens.len().saturating_sub(run.len())).find(|&at| {
            tokens.len() >= at + run.len()
                && run
                    .iter()
                    .zip(&tokens[at..])
                    .all(|(word, token)| token_is(word, token))
        });
        match found {
            Some(at) => from = at + run.len(),
            None => return false,
        }
    }
    true
}

/// Whether the command word `token` may run what the deny rule's `word` names: compared by the
/// last path segment (unless the rule's word has a `/`), a leading `=` (zsh's `=rm`) dropped; a
/// token with a wildcard that could expand to the word (`r?`, `/bin/r*`) counts.
fn token_is(word: &str, token: &str) -> bool {
    let token = token.trim_start_matches('=');
    let token = if word.contains('/') {
        token
    } else {
        token.rsplit('/').next().unwrap_or(token)
    };
    if wildcard(word, token, false) {
        return true;
    }
    let has_wildcard = token.contains(['*', '?', '[']);
    let has_literal = token.chars().any(|c| !matches!(c, '*' | '?' | '[' | ']'));
    has_wildcard && has_literal && wildcard(token, word, true)
}

/// The words a deny rule looks for: the whole line cut at whitespace, at every shell operator and
/// at `$`, `{`, `}`, `,` (so `rm${IFS}x` and `{rm,x}` split) and at the operators inside `${…}`
/// (`${u:-rm}`), quotes, backslashes and line continuations dropped (so the words inside
/// `sh -c '…'` and `"r"m` count).
fn deny_words(command: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = command.chars().peekable();
    // How deep inside `${…}`, and whether the character before was a `$`.
    let (mut braces, mut after_dollar) = (0usize, false);
    while let Some(c) = chars.next() {
        let dollar_before = std::mem::replace(&mut after_dollar, c == '$');
        let separator = match c {
            '\\' => {
                chars.next_if_eq(&'\n');
                continue;
            }
            '\'' | '"' => continue,
            '{' if dollar_before => {
                braces += 1;
                true
            }
            '}' if braces > 0 => {
                braces -= 1;
                true
            }
            ':' | '-' | '=' | '+' | '?' | '#' | '%' | '/' | '^' | '@' | '!' if braces > 0 => true,
            c => c.is_whitespace() || ";&|<>(){}`$,".contains(c),
        };
        if !separator {
            word.push(c);
        } else if !word.is_empty() {
            words.push(std::mem::take(&mut word));
        }
    }
    if !word.is_empty() {
        words.push(word);
    }
    words
}

/// `command` with its parameter expansions (`$name`, `$1`, `$@`, `${…}`) taken out, as if they
/// were empty, so that `r${u}m` reads `rm`.
fn without_expansions(command: &str) -> String {
    let chars: Vec<char> = command.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '$' {
            match chars.get(i + 1) {
                Some('{') => {
                    let mut depth = 0;
                    while let Some(&c) = chars.get(i) {
                        i += 1;
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 1 => break,
                            '}' => depth -= 1,
                            _ => {}
                        }
                    }
                    continue;
                }
                Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
                    i += 1;
                    while chars
                        .get(i)
                        .is_some_and(|c| c.is_ascii_alphanumeric() || *c == '_')
                    {
                        i += 1;
                    }
                    continue;
                }
                Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(*c) => {
                    i += 2;
                    continue;
                }
                _ => {}
            }
        }
        out.push(chars[i]);
        i += 1;
    }
    out
}

/// One simple command of a command line.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Part {
    /// Its words, quotes and backslashes removed.
    pub(super) words: Vec<String>,
    /// It has a substitution, a redirection, a group or a subshell: no rule allows it.
    pub(super) special: bool,
}

/// Redirections that write nowhere and read nothing; dropped from the words when they stand
/// alone.
const HARMLESS_REDIRECTIONS: &[&str] = &[
    "2>&1",
    "1>&2",
    ">&2",
    ">/dev/null",
    "1>/dev/null",
    "2>/dev/null",
    "&>/dev/null",
];

/// Splits a command line into simple commands at `&&`, `||`, `;`, `|`, `&` and newlines, outside
/// quotes, as bash and zsh read it: single quotes, double quotes (where `$(` and backticks still
/// substitute), `$'…'` (where `\'` does not close), backslash escapes and line continuations,
/// and `#` comments. `None` when a quote never closes or a backslash ends the line.
pub(super) fn split_command(command: &str) -> Option<Vec<Part>> {
    let chars: Vec<char> = command.chars().collect();
    let mut parts = Vec::new();
    let mut part = Part::default();
    let mut word = String::new();
    let mut in_word = false;
    let mut i = 0;
    let end_word = |part: &mut Part, word: &mut String, in_word: &mut bool| {
        if *in_word {
            part.words.push(std::mem::take(word));
            *in_word = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        if !in_word {
            if let Some(skip) = harmless_redirection(&chars[i..]) {
                i += skip;
                continue;
            }
        }
        match c {
            ' ' | '\t' => end_word(&mut part, &mut word, &mut in_word),
            '\n' | ';' | '&' | '|' => {
                end_word(&mut part, &mut word, &mut in_word);
                if !part.words.is_empty() || part.special {
                    parts.push(std::mem::take(&mut part));
                }
            }
            '#' if !in_word => {
                while i + 1 < chars.len() && chars[i + 1] != '\n' {
                    i += 1;
                }
            }
            '\\' => match chars.get(i + 1) {
                None => return None,
                Some('\n') => i += 1,
                Some(&next) => {
                    word.push(next);
                    in_word = true;
                    i += 1;
                }
            },
            '\'' => {
                i = single_quoted(&chars, i, &mut word)?;
                in_word = true;
            }
            '$' if chars.get(i + 1) == Some(&'\'') => {
                i = ansi_c_quoted(&chars, i, &mut word)?;
                in_word = true;
            }
            '"' => {
                let (close, substitutes) = double_quoted(&chars, i, &mut word)?;
                part.special |= substitutes;
                in_word = true;
                i = close;
            }
            '`' | '<' | '>' | '(' | ')' | '{' | '}' => {
                part.special = true;
                word.push(c);
                in_word = true;
            }
            _ => {
                word.push(c);
                in_word = true;
            }
        }
        i += 1;
    }
    end_word(&mut part, &mut word, &mut in_word);
    if !part.words.is_empty() || part.special {
        parts.push(part);
    }
    Some(parts)
}

/// `'…'` opening at `open`: its text, taken as it is, onto `word`; the index of the closing quote
/// (`None`: it never closes).
fn single_quoted(chars: &[char], open: usize, word: &mut String) -> Option<usize> {
    let len = chars[open + 1..].iter().position(|&c| c == '\'')?;
    word.extend(&chars[open + 1..open + 1 + len]);
    Some(open + 1 + len)
}

/// ANSI-C quoting, `$'…'` with its `$` at `open`: a backslash escapes the next character, `\'`
/// included. The escapes are not decoded; no rule word has them. The index of the closing quote.
fn ansi_c_quoted(chars: &[char], open: usize, word: &mut String) -> Option<usize> {
    let mut j = open + 2;
    loop {
        match chars.get(j)? {
            '\\' => {
                word.push('\\');
                word.push(*chars.get(j + 1)?);
                j += 2;
            }
            '\'' => return Some(j),
            &other => {
                word.push(other);
                j += 1;
            }
        }
    }
}

/// `"…"` opening at `open`: its text onto `word` (a backslash escapes only `$`, a backtick, `"`,
/// `\` and a newline), the index of the closing quote, and whether it substitutes (a backtick,
/// `$(` or `${` inside: the part is special).
fn double_quoted(chars: &[char], open: usize, word: &mut String) -> Option<(usize, bool)> {
    let mut substitutes = false;
    let mut j = open + 1;
    loop {
        match chars.get(j)? {
            '"' => return Some((j, substitutes)),
            '\\' => {
                let next = *chars.get(j + 1)?;
                match next {
                    '\n' => {}
                    '$' | '`' | '"' | '\\' => word.push(next),
                    _ => {
                        word.push('\\');
                        word.push(next);
                    }
                }
                j += 2;
            }
            '`' => {
                substitutes = true;
                word.push('`');
                j += 1;
            }
            '$' if matches!(chars.get(j + 1), Some('(' | '{')) => {
                substitutes = true;
                word.push('$');
                j += 1;
            }
            &other => {
                word.push(other);
                j += 1;
            }
        }
    }
}

/// How many characters a harmless redirection at the start of `rest` takes, when it stands
/// alone (followed by the end, a blank or an operator).
fn harmless_redirection(rest: &[char]) -> Option<usize> {
    HARMLESS_REDIRECTIONS.iter().find_map(|redirection| {
        let len = redirection.chars().count();
        let matches = rest.len() >= len
            && rest.iter().zip(redirection.chars()).all(|(a, b)| *a == b)
            && rest
                .get(len)
                .is_none_or(|c| matches!(c, ' ' | '\t' | '\n' | ';' | '&' | '|'));
        matches.then_some(len)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines_split_into_simple_commands() {
        let words = |line: &str| -> Option<Vec<(Vec<String>, bool)>> {
            split_command(line).map(|parts| {
                parts
                    .into_iter()
                    .map(|part| (part.words, part.special))
                    .collect()
            })
        };
        let plain = |w: &[&str]| (w.iter().map(|w| (*w).to_owned()).collect(), false);
        assert_eq!(
            words("a 'b c' \"d\\\"e\" f\\ g; h|i&&j"),
            Some(vec![
                plain(&["a", "b c", "d\"e", "f g"]),
                plain(&["h"]),
                plain(&["i"]),
                plain(&["j"]),
            ])
        );
        assert_eq!(
            words("a # b; c\nd"),
            Some(vec![plain(&["a"]), plain(&["d"])])
        );
        assert_eq!(words("a#b"), Some(vec![plain(&["a#b"])]));
        assert_eq!(words("a ''"), Some(vec![plain(&["a", ""])]));
        assert_eq!(words("a \"b"), None);
        assert_eq!(words("a $'b"), None);
        assert_eq!(
            words("a $(b)"),
            Some(vec![(vec!["a".into(), "$(b)".into()], true)])
        );
        assert_eq!(words("a 2>&1 >/dev/null"), Some(vec![plain(&["a"])]));
    }

    #[test]
    fn deny_words_drop_quotes_and_split_on_operators() {
        assert_eq!(
            deny_words("sh -c 'r\"m\" x;y' $(z)${IFS}{a,b}"),
            ["sh", "-c", "rm", "x", "y", "z", "IFS", "a", "b"]
        );
        assert_eq!(deny_words("${u:-r\\\nm}"), ["u", "rm"]);
        assert_eq!(without_expansions("r${u:-${v}}m $HOME$1$@x"), "rm x");
    }
}
