//! The path side of path rules (`Edit(…)`, `Read(…)`), all lexical: no filesystem access, so a
//! symlink is not followed and case counts. A tool's path is resolved as text ([`resolve_input`],
//! [`segments`], [`normalize`]: `~`, relative to the thread's folder, `.` and `..`); a rule's
//! pattern is anchored where its text says ([`PathPattern`]: `//abs`, `~/x`, `/x`, `x`) and
//! matched segment by segment, `**` standing for any number of segments and [`wildcard`] (`*`,
//! `?`, `[…]`) matching within one. Which path a tool names, and what a rule allows or refuses, is
//! in [`super::policy`]; [`wildcard`] also serves [`super::shell`]'s rule words and text rules.

use std::path::{Component, Path, PathBuf};

/// A path rule's pattern, anchored where its text says.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct PathPattern {
    /// `None`: from `/` (`//x`, and `~/x` with `$HOME` already in `segments`); `Some(up)`: from
    /// the thread's folder, `up` levels above it (a leading `..`).
    folder_up: Option<usize>,
    /// No `/` in it (`.env`): a deny rule finds it at any depth of the thread's folder.
    floating: bool,
    segments: Vec<Segment>,
    /// As written, for the CLI.
    text: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Segment {
    Literal(String),
    /// `*`, `?`, `[…]` within one segment.
    Glob(String),
    /// `**`: any number of segments.
    AnyDepth,
}

/// The folder a `Glob` pattern searches: `base` joined with the pattern's segments up to the
/// first wildcard; `/` when a `..` follows a wildcard (it could go anywhere).
pub(super) fn glob_root(
    base: Vec<String>,
    pattern: Option<&str>,
    home: Option<&Path>,
) -> Vec<String> {
    let Some(pattern) = pattern else {
        return base;
    };
    let segments: Vec<&str> = pattern.split('/').collect();
    let fixed = segments
        .iter()
        .position(|segment| has_wildcard(segment) || segment.contains('{'))
        .unwrap_or(segments.len());
    if segments[fixed..].contains(&"..") {
        return Vec::new();
    }
    resolve_input(&segments[..fixed].join("/"), &base, home)
}

/// A tool's path as normalized segments: `~/` under `home`, relative paths under `cwd`.
pub(super) fn resolve_input(path: &str, cwd: &[String], home: Option<&Path>) -> Vec<String> {
    let cwd = || PathBuf::from(format!("/{}", cwd.join("/")));
    let path = match (path.strip_prefix('~'), home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            home.join(rest.trim_start_matches('/'))
        }
        _ if Path::new(path).is_absolute() => PathBuf::from(path),
        _ => cwd().join(path),
    };
    segments(&path)
}

/// `path` with `.` and `..` resolved as text (`..` at `/` stays at `/`).
pub(super) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for segment in segments(path) {
        out.push(segment);
    }
    out
}

/// The segments of `path` after `/`, `.` and `..` resolved as text.
pub(super) fn segments(path: &Path) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name.to_string_lossy().into_owned()),
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    out
}

impl PathPattern {
    pub(super) fn parse(text: &str, home: Option<&Path>) -> Result<PathPattern, String> {
        let (folder_up, mut segments, rest) = if let Some(rest) = text.strip_prefix("//") {
            (None, Vec::new(), rest)
        } else if text == "~" || text.starts_with("~/") {
            let home = home.ok_or("names `~`, but $HOME is not set")?;
            let home = segments(home).into_iter().map(Segment::Literal).collect();
            (None, home, &text[1..])
        } else {
            (Some(0), Vec::new(), text.strip_prefix('/').unwrap_or(text))
        };
        let trimmed = rest.trim_end_matches('/');
        let floating = folder_up.is_some()
            && !text.starts_with('/')
            && !trimmed.contains('/')
            && !matches!(trimmed, "" | "." | "..");
        let mut up = 0;
        for segment in rest.split('/') {
            match segment {
                "" | "." => {}
                ".." => match segments.last() {
                    Some(Segment::Literal(_)) => {
                        segments.pop();
                    }
                    Some(_) => return Err("has `..` after a wildcard".into()),
                    None => up += 1,
                },
                "**" => segments.push(Segment::AnyDepth),
                _ if has_wildcard(segment) => segments.push(Segment::Glob(segment.to_owned())),
                _ => segments.push(Segment::Literal(unescape(segment))),
            }
        }
        if rest.ends_with('/') && !trimmed.is_empty() && segments.last() != Some(&Segment::AnyDepth)
        {
            segments.push(Segment::AnyDepth);
        }
        Ok(PathPattern {
            folder_up: folder_up.map(|_| up),
            floating,
            segments,
            text: text.to_owned(),
        })
    }

    /// The pattern from `/`, for a request run in `cwd`; `float` puts a slash-less pattern at
    /// any depth of the folder.
    fn anchored(&self, cwd: &[String], float: bool) -> Vec<Segment> {
        let mut out = Vec::new();
        if let Some(up) = self.folder_up {
            let keep = cwd.len().saturating_sub(up);
            out.extend(cwd[..keep].iter().cloned().map(Segment::Literal));
            if float && self.floating {
                out.push(Segment::AnyDepth);
            }
        }
        out.extend(self.segments.iter().cloned());
        out
    }

    pub(super) fn allows_file(&self, path: &[String], cwd: &[String]) -> bool {
        segments_match(&self.anchored(cwd, false), path)
    }

    /// The path, or a folder it lies in.
    pub(super) fn denies_file(&self, path: &[String], cwd: &[String]) -> bool {
        let pattern = self.anchored(cwd, true);
        (0..=path.len()).any(|len| segments_match(&pattern, &path[..len]))
    }

    /// Everything under `folder`: the pattern is `stem/**` and `stem` matches the folder or one
    /// above it.
    pub(super) fn allows_folder(&self, folder: &[String], cwd: &[String]) -> bool {
        let pattern = self.anchored(cwd, false);
        match pattern.split_last() {
            Some((Segment::AnyDepth, stem)) => {
                (0..=folder.len()).any(|len| segments_match(stem, &folder[..len]))
            }
            _ => false,
        }
    }

    /// Anything under `folder` might match, or `folder` lies in what matches: the folder and the
    /// pattern's fixed start are one inside the other.
    pub(super) fn denies_folder(&self, folder: &[String], cwd: &[String]) -> bool {
        let pattern = self.anchored(cwd, true);
        pattern
            .iter()
            .zip(folder)
            .take_while(|(segment, _)| matches!(segment, Segment::Literal(_)))
            .all(|(segment, name)| matches!(segment, Segment::Literal(l) if l == name))
    }

    /// The pattern for the CLI's settings: `/x` (the thread's folder here) as `./x`.
    pub(super) fn cli_text(&self) -> String {
        match self.text.strip_prefix('/') {
            Some(rest) if !rest.starts_with('/') => format!("./{rest}"),
            _ => self.text.clone(),
        }
    }
}

/// Whether the pattern's segments match the path's, `**` standing for any number of them.
fn segments_match(pattern: &[Segment], path: &[String]) -> bool {
    // reach[j]: the segments so far match path[..j].
    let mut reach = vec![false; path.len() + 1];
    reach[0] = true;
    for segment in pattern {
        let mut next = vec![false; path.len() + 1];
        match segment {
            Segment::AnyDepth => {
                let mut seen = false;
                for (j, slot) in next.iter_mut().enumerate() {
                    seen |= reach[j];
                    *slot = seen;
                }
            }
            Segment::Literal(literal) => {
                for (j, name) in path.iter().enumerate() {
                    next[j + 1] = reach[j] && literal == name;
                }
            }
            Segment::Glob(glob) => {
                for (j, name) in path.iter().enumerate() {
                    next[j + 1] = reach[j] && wildcard(glob, name, true);
                }
            }
        }
        reach = next;
    }
    reach[path.len()]
}

/// A path segment with an unescaped `*`, `?` or `[`.
fn has_wildcard(segment: &str) -> bool {
    let mut escaped = false;
    for c in segment.chars() {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '*' | '?' | '[' => return true,
            _ => {}
        }
    }
    false
}

/// `\c` as `c`.
fn unescape(segment: &str) -> String {
    let mut out = String::new();
    let mut chars = segment.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => out.extend(chars.next()),
            _ => out.push(c),
        }
    }
    out
}

/// `*` matches any run of characters. With `full` (path segments, gitignore-style) also `?` one
/// character, `[abc]`, `[a-z]`, `[!x]` one of a set, and `\c` the character `c`.
pub(super) fn wildcard(pattern: &str, text: &str, full: bool) -> bool {
    let pattern: Vec<char> = pattern.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut p, mut t) = (0, 0);
    // The last `*` seen, and where in the text it started matching.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        if p < pattern.len() {
            if pattern[p] == '*' {
                star = Some((p, t));
                p += 1;
                continue;
            }
            if let Some(width) = one_character(&pattern[p..], text[t], full) {
                p += width;
                t += 1;
                continue;
            }
        }
        match star {
            Some((star_at, from)) => {
                p = star_at + 1;
                t = from + 1;
                star = Some((star_at, from + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == '*')
}

/// How many pattern characters match `c` (`None`: they do not).
fn one_character(pattern: &[char], c: char, full: bool) -> Option<usize> {
    if !full {
        return (pattern[0] == c).then_some(1);
    }
    match pattern[0] {
        '?' => Some(1),
        '\\' if pattern.len() > 1 => (pattern[1] == c).then_some(2),
        '[' => {
            let negated = matches!(pattern.get(1), Some('!' | '^'));
            let start = 1 + usize::from(negated);
            // A `]` right after `[` or `[!` is a member; the set ends at the next one.
            let close = pattern
                .iter()
                .skip(start + 1)
                .position(|&x| x == ']')
                .map(|at| at + start + 1);
            let Some(close) = close else {
                return ('[' == c).then_some(1);
            };
            let set = &pattern[start..close];
            let mut member = false;
            let mut k = 0;
            while k < set.len() {
                if k + 2 < set.len() && set[k + 1] == '-' {
                    member |= set[k] <= c && c <= set[k + 2];
                    k += 3;
                } else {
                    member |= set[k] == c;
                    k += 1;
                }
            }
            (member != negated).then_some(close + 1)
        }
        other => (other == c).then_some(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CWD: &str = "/data/work/A";

    #[test]
    fn wildcards() {
        assert!(wildcard("a*c", "abc", false));
        assert!(wildcard("a*", "a", false));
        assert!(wildcard("*.rs", "x.rs", true));
        assert!(wildcard("?.rs", "x.rs", true));
        assert!(wildcard("[a-c]x", "bx", true));
        assert!(wildcard("[!a-c]x", "dx", true));
        assert!(wildcard("\\*", "*", true));
        assert!(!wildcard("\\*", "x", true));
        assert!(!wildcard("?", "x", false));
        assert!(!wildcard("a*c", "ab", false));
        assert!(!wildcard("abc", "abcd", false));
        assert!(!wildcard("[a-c]x", "dx", true));
    }

    #[test]
    fn path_patterns_match_by_segment() {
        let check = |pattern: &str, path: &str| {
            let pattern = PathPattern::parse(pattern, None).unwrap();
            pattern.allows_file(&segments(Path::new(path)), &segments(Path::new(CWD)))
        };
        assert!(check("//w/*", "/w/a"));
        assert!(!check("//w/*", "/w/a/b"));
        assert!(check("//w/**", "/w/a/b"));
        assert!(check("//w/**/x", "/w/x"));
        assert!(check("//w/**/x", "/w/a/b/x"));
        assert!(check("//w/", "/w/a/b"));
        assert!(check("..", "/data/work"));
        assert!(check("a/../b", "/data/work/A/b"));
        assert!(!check("//w/a*", "/w/b/a"));
    }
}
