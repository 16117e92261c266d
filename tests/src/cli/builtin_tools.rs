//! The CLI's own table of built-in tool names, read from the installed package: what containment
//! must classify (`orchestrator::launch::{CONTAINED_TOOLS, IN_TURN_TOOLS}`) before a pin moves.
//!
//! The CLI (a native binary since 2.x: a Bun executable carrying its JavaScript as text) holds a
//! sorted array literal of every built-in tool's canonical name, `var xrt=["Agent","Artifact",…]`
//! in 2.1.332, followed by a map of legacy names (`{Task:"Agent",KillShell:"TaskStop",…}`). No
//! offset or minified name is relied on: the table is the one array literal of plain quoted
//! names that holds every name of [`ANCHORS`] (tools every version has had); the aliases are the
//! object literal of `Name:"Name"` pairs that maps `Task` to `Agent`. The same scan works on a
//! `cli.js` bundle, should the package ship one again. Zero or two different tables is an error
//! that says so: the bundle changed shape, and docs/cli-upgrades.md says what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

/// Names every CLI version has had; an array literal holding all of them is the table.
pub const ANCHORS: &[&str] = &["Agent", "Bash", "Edit", "Glob", "Grep", "Read", "Write"];

/// The legacy name whose entry finds the alias map (`Task` became `Agent` in 2.x).
const ALIAS_ANCHOR: &[u8] = b"Task:\"Agent\"";

/// How far around a hit a literal may reach; the table is under 1 KB in 2.1.332.
const REACH: usize = 16 * 1024;

/// Read size; consecutive chunks overlap by `2 * REACH`, so every literal lies whole in one.
const CHUNK: usize = 64 * 1024 * 1024;

/// What the CLI's binary says its built-in tools are.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolTable {
    /// Canonical names, as `--tools`, `--disallowedTools` and the API request spell them.
    pub names: BTreeSet<String>,
    /// Legacy name → canonical name (`Task` → `Agent`), as `system/init` may still list them.
    pub aliases: BTreeMap<String, String>,
}

impl ToolTable {
    /// The canonical name for `name`, through the aliases.
    pub fn canonical<'a>(&'a self, name: &'a str) -> &'a str {
        self.aliases.get(name).map(String::as_str).unwrap_or(name)
    }
}

/// The table in the file `bin` resolves to (`node_modules/.bin/claude` is a link to the package's
/// `bin/claude.exe`, the native binary the postinstall copied there).
pub fn read(bin: &Path) -> anyhow::Result<ToolTable> {
    let file: PathBuf = bin
        .canonicalize()
        .with_context(|| format!("resolve {}", bin.display()))?;
    let mut scan = Scan::default();
    let mut reader = File::open(&file).with_context(|| format!("open {}", file.display()))?;
    let mut buffer: Vec<u8> = Vec::new();
    loop {
        let kept = buffer.len();
        buffer.resize(kept + CHUNK, 0);
        let mut filled = kept;
        while filled < buffer.len() {
            let n = reader
                .read(&mut buffer[filled..])
                .with_context(|| format!("read {}", file.display()))?;
            if n == 0 {
                break;
            }
            filled += n;
        }
        buffer.truncate(filled);
        scan.add(&buffer);
        if filled < kept + CHUNK {
            break;
        }
        let tail = buffer.len().saturating_sub(2 * REACH);
        buffer.drain(..tail);
    }
    scan.finish()
        .with_context(|| format!("the built-in tool table of {}", file.display()))
}

/// The table in one bundle's bytes.
pub fn parse(bytes: &[u8]) -> anyhow::Result<ToolTable> {
    let mut scan = Scan::default();
    scan.add(bytes);
    scan.finish()
}

/// Candidates found so far, over any number of overlapping buffers.
#[derive(Default)]
struct Scan {
    tables: BTreeSet<Vec<String>>,
    aliases: BTreeMap<String, String>,
}

impl Scan {
    fn add(&mut self, bytes: &[u8]) {
        for hit in memchr::memmem::find_iter(bytes, b"\"Bash\"") {
            if let Some(names) = enclosing(bytes, hit, b'[', b']').and_then(name_list) {
                if ANCHORS.iter().all(|a| names.iter().any(|n| n == a)) {
                    self.tables.insert(names);
                }
            }
        }
        for hit in memchr::memmem::find_iter(bytes, ALIAS_ANCHOR) {
            if let Some(pairs) = enclosing(bytes, hit, b'{', b'}').and_then(alias_map) {
                self.aliases.extend(pairs);
            }
        }
    }

    fn finish(self) -> anyhow::Result<ToolTable> {
        let mut tables = self.tables.into_iter();
        let Some(names) = tables.next() else {
            bail!(
                "no array literal of tool names holds all of {ANCHORS:?}: the CLI's bundle changed \
                 shape; find its table by hand (docs/cli-upgrades.md, step 2) and teach \
                 tests/src/cli/builtin_tools.rs the new shape"
            );
        };
        let others: Vec<Vec<String>> = tables.collect();
        if !others.is_empty() {
            bail!(
                "more than one array literal holds all of {ANCHORS:?}: {names:?} and {others:?}; \
                 find which one is the CLI's table of built-in tools (docs/cli-upgrades.md, \
                 step 2) and make the scan tell them apart"
            );
        }
        let names: BTreeSet<String> = names.into_iter().collect();
        let aliases = self
            .aliases
            .into_iter()
            .filter(|(_, to)| names.contains(to))
            .collect();
        Ok(ToolTable { names, aliases })
    }
}

/// The bytes strictly between the `open` before `at` and the `close` after it, both within
/// [`REACH`]; `None` when either is missing.
fn enclosing(bytes: &[u8], at: usize, open: u8, close: u8) -> Option<&[u8]> {
    let from = at.saturating_sub(REACH);
    let start = from + memchr::memrchr(open, &bytes[from..at])? + 1;
    let to = (at + REACH).min(bytes.len());
    let end = at + memchr::memchr(close, &bytes[at..to])?;
    Some(&bytes[start..end])
}

/// `"A","B",…`: every item a quoted identifier, else `None`.
fn name_list(inner: &[u8]) -> Option<Vec<String>> {
    inner.split(|b| *b == b',').map(quoted_identifier).collect()
}

/// `A:"B",…` (keys bare or quoted): every pair two identifiers, else `None`.
fn alias_map(inner: &[u8]) -> Option<Vec<(String, String)>> {
    inner
        .split(|b| *b == b',')
        .map(|pair| {
            let colon = memchr::memchr(b':', pair)?;
            let key = &pair[..colon];
            let key = quoted_identifier(key).or_else(|| identifier(key))?;
            Some((key, quoted_identifier(&pair[colon + 1..])?))
        })
        .collect()
}

fn quoted_identifier(item: &[u8]) -> Option<String> {
    identifier(item.strip_prefix(b"\"")?.strip_suffix(b"\"")?)
}

fn identifier(name: &[u8]) -> Option<String> {
    let first = *name.first()?;
    let ok = (first.is_ascii_alphabetic() || first == b'_')
        && name.iter().all(|b| b.is_ascii_alphanumeric() || *b == b'_');
    ok.then(|| String::from_utf8_lossy(name).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle shaped as 2.1.332's: the table, the aliases, and lists that are not the table.
    const BUNDLE: &str = concat!(
        "\0// @bun @bytecode\nimport{ce}from\"/$bunfs/root/chunk-af8jprfz.js\";",
        "var q=[\"Read\",\"Write\",\"Edit\",\"Glob\",\"Grep\",\"Bash\"],",
        "xrt=[\"Agent\",\"Bash\",\"CronCreate\",\"Edit\",\"Glob\",\"Grep\",\"ListAgents\",\"Read\",\"Write\"],",
        "jKo={Task:\"Agent\",KillShell:\"TaskStop\",ListPeers:\"ListAgents\"};",
        "var d={...jKo,Eval:\"REPL\"};f([\"Bash\",x,\"Read\"]);",
    );

    #[test]
    fn finds_the_table_and_its_aliases() {
        let table = parse(BUNDLE.as_bytes()).unwrap();
        let names: Vec<&str> = table.names.iter().map(String::as_str).collect();
        assert_eq!(
            names,
            [
                "Agent",
                "Bash",
                "CronCreate",
                "Edit",
                "Glob",
                "Grep",
                "ListAgents",
                "Read",
                "Write"
            ]
        );
        // `KillShell` names a tool the table does not have here, so it is left out.
        assert_eq!(table.canonical("Task"), "Agent");
        assert_eq!(table.canonical("ListPeers"), "ListAgents");
        assert_eq!(table.canonical("KillShell"), "KillShell");
        assert_eq!(table.aliases.len(), 2);
    }

    #[test]
    fn a_bundle_without_the_table_or_with_two_is_an_error() {
        let none = parse(b"var q=[\"Read\",\"Bash\"];").unwrap_err();
        assert!(format!("{none:#}").contains("changed shape"), "{none:#}");
        let two = format!(
            "{BUNDLE}var z=[\"Agent\",\"Bash\",\"Edit\",\"Glob\",\"Grep\",\"Read\",\"Write\"];"
        );
        let two = parse(two.as_bytes()).unwrap_err();
        assert!(format!("{two:#}").contains("more than one"), "{two:#}");
    }

    #[test]
    fn a_file_read_in_chunks_gives_the_same_table() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("claude");
        // The table straddles the first chunk's end.
        let mut bytes = vec![b'.'; CHUNK - 40];
        bytes.extend_from_slice(BUNDLE.as_bytes());
        bytes.extend(std::iter::repeat_n(b'.', 1000));
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read(&path).unwrap(), parse(BUNDLE.as_bytes()).unwrap());
    }
}
