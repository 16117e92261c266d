//! The docs hold together: every relative link in the repository's Markdown leads to a file that
//! exists, and every `#anchor` to a heading of that file (GitHub's slugs); the README stays the
//! front door, under 25 KB, with the reference in `docs/`. No daemon here: files only.
//!
//! Links are found by a small parser rather than a Markdown crate: it skips fenced code blocks
//! and code spans, and checks inline links (`[text](dest)`, `![alt](dest)`) and reference
//! definitions (`[label]: dest`). Absolute URLs (`https:`, `mailto:`, any scheme) are not checked.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The README's bound: past it, move the text to a doc under `docs/` and link it.
const README_MAX_BYTES: u64 = 25_000;

/// Folders that hold no Markdown of ours: build output, other projects' files, dot folders.
const SKIPPED_DIRS: [&str; 3] = ["target", "vendor", "node_modules"];

#[test]
fn every_relative_link_in_the_markdown_resolves() {
    let root = repo_root();
    let files = markdown_files(&root);
    for expected in ["README.md", "ARCHITECTURE.md", "SECURITY.md", "docs/api.md"] {
        assert!(
            files.iter().any(|f| f == &root.join(expected)),
            "the scan finds {expected}; if it moved, update this test"
        );
    }
    let mut headings = BTreeMap::new();
    let mut broken = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).expect("a Markdown file reads as UTF-8");
        for link in links(&text) {
            checked += 1;
            if let Err(why) = resolve(&root, file, &link.dest, &mut headings) {
                let shown = file.strip_prefix(&root).unwrap_or(file).display();
                broken.push(format!("{shown}:{}: ({}) {why}", link.line, link.dest));
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} relative links found: the parser lost them"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn the_readme_stays_under_25_kb() {
    let readme = repo_root().join("README.md");
    let bytes = std::fs::metadata(&readme).expect("README.md").len();
    assert!(
        bytes < README_MAX_BYTES,
        "README.md is {bytes} bytes, over {README_MAX_BYTES}: move reference text to docs/ and link it"
    );
}

#[test]
fn the_parser_skips_code_and_absolute_urls() {
    let text = "\
See [a](a.md) and ![pic](img/p.png \"title\") and [b](<b c.md#x>).
`[not](code.md)` and ``[nor](this.md) ` inside`` and \\[escaped](no.md).
[abs](https://example.com/x.md) [mail](mailto:a@b.c) [here](#top)

```sh
[fenced](no.md)
```
~~~~
```
[still fenced](no.md)
~~~~
[ref]: docs/ref.md#part
  Para `with a span
that crosses](lines.md)` and [after](after.md)
";
    let found: Vec<(usize, String)> = links(text).into_iter().map(|l| (l.line, l.dest)).collect();
    let expect: Vec<(usize, String)> = [
        (1, "a.md"),
        (1, "img/p.png"),
        (1, "b c.md#x"),
        (3, "#top"),
        (12, "docs/ref.md#part"),
        (14, "after.md"),
    ]
    .into_iter()
    .map(|(line, dest)| (line, dest.to_owned()))
    .collect();
    assert_eq!(found, expect);
}

#[test]
fn slugs_follow_github() {
    for (heading, expected) in [
        ("Harness as an MCP server", "harness-as-an-mcp-server"),
        ("API keys and tenants", "api-keys-and-tenants"),
        ("Re-drive", "re-drive"),
        (
            "`pool.max_capacity` and `max_memory_mb`",
            "poolmax_capacity-and-max_memory_mb",
        ),
        (
            "What isolates threads (and what not)",
            "what-isolates-threads-and-what-not",
        ),
        ("**Bold** and [a link](x.md)", "bold-and-a-link"),
        ("One message, end to end", "one-message-end-to-end"),
    ] {
        assert_eq!(slug(heading), expected, "{heading}");
    }
    let doc = "# Title\n## Notes\ntext\n## Notes\nSetext\n---\n```\n# not a heading\n```\n";
    let anchors = anchors(doc);
    for anchor in ["title", "notes", "notes-1", "setext"] {
        assert!(anchors.contains(anchor), "{anchor} in {anchors:?}");
    }
    assert!(!anchors.contains("not-a-heading"));
}

/// The workspace root: this package's parent.
fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests package sits in the workspace")
        .to_path_buf()
}

/// Every `*.md` under `root`, but in [`SKIPPED_DIRS`] and dot folders, sorted.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("a readable folder") {
            let path = entry.expect("a folder entry").path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if path.is_dir() {
                if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name) {
                    dirs.push(path);
                }
            } else if name.ends_with(".md") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// Checks one link of `file`: its path exists, and its `#anchor` (if any) names a heading of the
/// Markdown file it leads to. `headings` caches each target's anchors.
fn resolve(
    root: &Path,
    file: &Path,
    dest: &str,
    headings: &mut BTreeMap<PathBuf, BTreeSet<String>>,
) -> Result<(), String> {
    let (path, anchor) = match dest.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (dest, None),
    };
    let path = percent_decode(path.split_once('?').map_or(path, |(p, _)| p));
    let target = if path.is_empty() {
        file.to_path_buf()
    } else if let Some(from_root) = path.strip_prefix('/') {
        root.join(from_root)
    } else {
        file.parent().expect("a file has a folder").join(&path)
    };
    if !target.exists() {
        let shown = target.strip_prefix(root).unwrap_or(&target).display();
        return Err(format!("no such file: {shown}"));
    }
    let Some(anchor) = anchor else { return Ok(()) };
    if target.extension().is_none_or(|e| e != "md") {
        return Ok(()); // `#L10` of a source file, say: GitHub's, not a heading.
    }
    let anchors = headings.entry(target.clone()).or_insert_with(|| {
        let text = std::fs::read_to_string(&target).expect("a Markdown file reads as UTF-8");
        anchors(&text)
    });
    if anchors.contains(&percent_decode(anchor).to_lowercase()) {
        Ok(())
    } else {
        Err(format!(
            "no heading `#{anchor}` in {}",
            target.strip_prefix(root).unwrap_or(&target).display()
        ))
    }
}

/// One link's destination and the line (1-based) it is on.
struct Link {
    line: usize,
    dest: String,
}

/// The relative links of a Markdown text: inline links and images, and reference definitions,
/// outside fenced code blocks and code spans; absolute URLs (any scheme) left out.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for block in blocks(text) {
        let prose = without_code_spans(&block.text);
        for (offset, dest) in inline_destinations(&prose) {
            let line = block.first_line + prose[..offset].matches('\n').count();
            found.push(Link { line, dest });
        }
        for (i, line) in prose.lines().enumerate() {
            if let Some(dest) = reference_definition(line) {
                found.push(Link {
                    line: block.first_line + i,
                    dest,
                });
            }
        }
    }
    found.sort_by_key(|l| l.line);
    found.retain(|l| !l.dest.is_empty() && !has_scheme(&l.dest));
    found
}

/// A run of lines between blank lines, outside fenced code: where a code span may cross lines.
struct Block {
    first_line: usize,
    text: String,
}

/// The text's paragraphs (runs of non-blank lines), fenced code blocks left out.
fn blocks(text: &str) -> Vec<Block> {
    let mut blocks = Vec::new();
    let mut current: Option<Block> = None;
    let mut fence: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let opener = fence_of(line);
        if let Some((ch, len)) = fence {
            if closes(line, ch, len) {
                fence = None;
            }
            continue;
        }
        if opener.is_some() || line.trim().is_empty() {
            blocks.extend(current.take());
            fence = opener;
            continue;
        }
        match &mut current {
            Some(block) => {
                block.text.push('\n');
                block.text.push_str(line);
            }
            None => {
                current = Some(Block {
                    first_line: i + 1,
                    text: line.to_owned(),
                })
            }
        }
    }
    blocks.extend(current);
    blocks
}

/// A fence line (up to three spaces, then three or more backticks or tildes): its character and
/// length.
fn fence_of(line: &str) -> Option<(char, usize)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let len = rest.chars().take_while(|c| *c == ch).count();
    (len >= 3).then_some((ch, len))
}

/// Whether `line` closes a fence of `len` × `ch`: as many or more, and nothing after them.
fn closes(line: &str, ch: char, len: usize) -> bool {
    fence_of(line).is_some_and(|(c, l)| c == ch && l >= len)
        && line.trim().trim_start_matches(ch).is_empty()
}

/// `text` with every code span's content (and its backticks) blanked out, newlines kept, so
/// offsets still point at the same lines. Backslash escapes outside code are blanked as well.
fn without_code_spans(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' && chars.get(i + 1).is_some_and(|n| n.is_ascii_punctuation()) {
            out.push_str("  ");
            i += 2;
            continue;
        }
        if c != '`' {
            out.push(c);
            i += 1;
            continue;
        }
        let run = chars[i..].iter().take_while(|c| **c == '`').count();
        match closing_run(&chars, i + run, run) {
            Some(end) => {
                for blanked in &chars[i..end + run] {
                    out.push(if *blanked == '\n' { '\n' } else { ' ' });
                }
                i = end + run;
            }
            None => {
                // No closing run of the same length: the backticks are literal.
                out.extend(std::iter::repeat_n(' ', run));
                i += run;
            }
        }
    }
    out
}

/// Where the next run of exactly `len` backticks starts at or after `from`.
fn closing_run(chars: &[char], from: usize, len: usize) -> Option<usize> {
    let mut i = from;
    while i < chars.len() {
        if chars[i] == '`' {
            let run = chars[i..].iter().take_while(|c| **c == '`').count();
            if run == len {
                return Some(i);
            }
            i += run;
        } else {
            i += 1;
        }
    }
    None
}

/// `(offset, destination)` of every `](dest)` in prose whose code spans are blanked.
fn inline_destinations(prose: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = prose[from..].find("](") {
        let start = from + at + 2;
        from = start;
        if !opens_link_text(&prose[..start - 2]) {
            continue; // `\[text](…)`, or a stray `](`: not a link.
        }
        let rest = prose[start..].trim_start();
        let dest = if let Some(angled) = rest.strip_prefix('<') {
            match angled.split_once('>') {
                Some((dest, _)) => dest.to_owned(),
                None => continue,
            }
        } else {
            let mut depth = 0usize;
            let end = rest
                .char_indices()
                .find(|(_, c)| match c {
                    '(' => {
                        depth += 1;
                        false
                    }
                    ')' if depth == 0 => true,
                    ')' => {
                        depth -= 1;
                        false
                    }
                    c => c.is_whitespace(),
                })
                .map_or(rest.len(), |(i, _)| i);
            rest[..end].to_owned()
        };
        found.push((start, dest));
    }
    found
}

/// Whether `before` (the prose up to a `]`) ends in link text: an unmatched `[` before it.
fn opens_link_text(before: &str) -> bool {
    let mut depth = 0usize;
    for c in before.chars().rev() {
        match c {
            ']' => depth += 1,
            '[' if depth == 0 => return true,
            '[' => depth -= 1,
            _ => {}
        }
    }
    false
}

/// The destination of a reference definition, `[label]: dest`, up to three spaces in.
fn reference_definition(line: &str) -> Option<String> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = line[indent..].strip_prefix('[')?;
    let (label, after) = rest.split_once("]:")?;
    if label.trim().is_empty() || label.contains('[') {
        return None;
    }
    let dest = after.split_whitespace().next()?;
    Some(
        dest.trim_start_matches('<')
            .trim_end_matches('>')
            .to_owned(),
    )
}

/// `https:`, `mailto:` and every other scheme: a URL this test does not follow.
fn has_scheme(dest: &str) -> bool {
    match dest.split_once(':') {
        Some((scheme, _)) => {
            let mut chars = scheme.chars();
            chars.next().is_some_and(|c| c.is_ascii_alphabetic())
                && chars.all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        }
        None => false,
    }
}

/// The anchors GitHub gives a Markdown file's headings (ATX and setext, outside fenced code),
/// a repeated slug numbered `-1`, `-2`, …; and any HTML `id="…"` or `name="…"`.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut headings: Vec<&str> = Vec::new();
    let mut anchors = BTreeSet::new();
    let mut fence: Option<(char, usize)> = None;
    let mut previous: Option<&str> = None;
    for line in text.lines() {
        if let Some((ch, len)) = fence {
            if closes(line, ch, len) {
                fence = None;
            }
            previous = None;
            continue;
        }
        if let Some(opener) = fence_of(line) {
            fence = Some(opener);
            previous = None;
            continue;
        }
        let trimmed = line.trim();
        if let Some(heading) = atx_heading(line) {
            headings.push(heading);
            previous = None;
            continue;
        }
        let underline = !trimmed.is_empty()
            && line.len() - line.trim_start().len() <= 3
            && (trimmed.chars().all(|c| c == '=') || trimmed.chars().all(|c| c == '-'));
        match previous {
            Some(text) if underline => {
                headings.push(text);
                previous = None;
            }
            _ => previous = (!trimmed.is_empty()).then_some(trimmed),
        }
        for attr in ["id=\"", "name=\""] {
            for (at, _) in line.match_indices(attr) {
                let value = &line[at + attr.len()..];
                if let (true, Some((value, _))) = (line[..at].contains('<'), value.split_once('"'))
                {
                    anchors.insert(value.to_owned());
                }
            }
        }
    }
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for heading in headings {
        let base = slug(heading);
        let n = seen.entry(base.clone()).or_insert(0);
        anchors.insert(if *n == 0 { base } else { format!("{base}-{n}") });
        *n += 1;
    }
    anchors
}

/// The text of an ATX heading (`## Title ##`), or `None`.
fn atx_heading(line: &str) -> Option<&str> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let level = rest.chars().take_while(|c| *c == '#').count();
    if !(1..=6).contains(&level) {
        return None;
    }
    let text = &rest[level..];
    if !text.is_empty() && !text.starts_with([' ', '\t']) {
        return None;
    }
    let text = text.trim();
    let closed = text.trim_end_matches('#');
    Some(if closed.is_empty() || closed.ends_with(' ') {
        closed.trim_end()
    } else {
        text
    })
}

/// GitHub's anchor for a heading: its text as rendered (link text kept, code and emphasis marks
/// dropped), lowercased; spaces become `-`; punctuation but `-` and `_` is dropped.
fn slug(heading: &str) -> String {
    let mut rendered = String::new();
    let mut rest = heading;
    // `[text](dest)` renders as `text`.
    while let Some(open) = rest.find('[') {
        rendered.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.split_once("](") {
            Some((label, tail)) if tail.contains(')') => {
                rendered.push_str(label);
                rest = &tail[tail.find(')').map_or(0, |i| i + 1)..];
            }
            _ => {
                rendered.push('[');
                rest = after;
            }
        }
    }
    rendered.push_str(rest);
    rendered
        .chars()
        .filter(|c| *c != '`' && *c != '*')
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .flat_map(char::to_lowercase)
        .collect()
}

/// `%20` and the like, as GitHub decodes a link's path and anchor.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match (bytes[i], bytes.get(i + 1), bytes.get(i + 2)) {
            (b'%', Some(&h), Some(&l)) if hex(h).is_some() && hex(l).is_some() => {
                let value = hex(h).unwrap_or(0) * 16 + hex(l).unwrap_or(0);
                out.push(value as u8);
                i += 3;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
