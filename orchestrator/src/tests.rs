//! The crate's layout, held by a test: the module order `lib.rs` states, checked against every
//! import of every source file under `src/`.
//!
//! The order is read from `lib.rs`'s own map (each `//! - ` line names its modules before its
//! first `:`), so the doc and the rule cannot drift apart: a new module is one more line there.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The modules of `lib.rs`'s map, top to bottom and left to right.
fn stated_order(lib: &str) -> Vec<String> {
    lib.lines()
        .filter_map(|line| line.strip_prefix("//! - "))
        .flat_map(|item| {
            let head = item.split(':').next().unwrap_or_default();
            head.split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The modules `lib.rs` declares (`mod x;`, `pub mod x;`), apart from test-only ones.
fn declared(lib: &str) -> Vec<String> {
    let mut test_only = false;
    let mut names = Vec::new();
    for line in lib.lines().map(str::trim) {
        if line.starts_with("#[cfg(test)]") {
            test_only = true;
            continue;
        }
        let name = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = name {
            if !test_only {
                names.push(name.to_owned());
            }
        }
        test_only = false;
    }
    names
}

/// The top-level modules `source` names through `crate::` (`use crate::x::…`,
/// `crate::x::f()`, `use crate::{x, y}`), with the line each is on. Comment lines and the
/// items under `#[cfg(test)]` are left out: tests may reach anywhere.
fn imports(source: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    for (line, text) in outside_tests(source) {
        let mut rest = text;
        while let Some(at) = rest.find("crate::") {
            let before = rest[..at].chars().next_back();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let names: Vec<&str> = match rest.strip_prefix('{') {
                Some(group) => group
                    .split('}')
                    .next()
                    .unwrap_or_default()
                    .split(',')
                    .map(|item| item.trim().split("::").next().unwrap_or_default())
                    .collect(),
                None => rest
                    .split(|c: char| !(c.is_alphanumeric() || c == '_'))
                    .take(1)
                    .collect(),
            };
            let names = names.into_iter().filter(|name| !name.is_empty());
            found.extend(names.map(|name| (line, name.to_owned())));
        }
    }
    found
}

/// The lines of `source` (numbered from 1) that are neither comments nor part of an item under
/// `#[cfg(test)]` (a `mod tests;` line, or a block to its closing brace).
fn outside_tests(source: &str) -> Vec<(usize, &str)> {
    let mut kept = Vec::new();
    let mut skipping = false;
    let mut depth = 0i32;
    for (index, text) in source.lines().enumerate() {
        let code = text.trim();
        if code.starts_with("//") {
            continue;
        }
        if code.starts_with("#[cfg(test)]") {
            skipping = true;
            depth = 0;
            continue;
        }
        if !skipping {
            kept.push((index + 1, text));
            continue;
        }
        depth += code.matches('{').count() as i32 - code.matches('}').count() as i32;
        let attribute = code.starts_with("#[");
        if !attribute && depth <= 0 && (code.ends_with(';') || code.ends_with('}')) {
            skipping = false;
        }
    }
    kept
}

/// The source files under `dir`, test files (`tests.rs`, a `tests/` folder) left out.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("src/ is readable")
        .map(|entry| entry.expect("src/ is readable").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            if name != "tests" {
                sources(&path, out);
            }
        } else if name.ends_with(".rs") && name != "tests.rs" {
            out.push(path);
        }
    }
}

/// Every import of `files` (path, text) that names a module stated above the importing one:
/// `file:line: importer → imported`.
fn upward(order: &[String], files: &[(String, String)]) -> Vec<String> {
    let rank: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(at, name)| (name.as_str(), at))
        .collect();
    let mut found = Vec::new();
    for (path, text) in files {
        let top = path.split('/').next().unwrap_or_default();
        let top = top.strip_suffix(".rs").unwrap_or(top);
        let Some(&own) = rank.get(top) else { continue };
        for (line, name) in imports(text) {
            if rank.get(name.as_str()).is_some_and(|&other| other < own) {
                found.push(format!("src/{path}:{line}: {top} → {name}"));
            }
        }
    }
    found
}

#[test]
fn the_map_names_every_module_once() {
    let lib = include_str!("lib.rs");
    let mut stated = stated_order(lib);
    let mut modules = declared(lib);
    stated.sort();
    modules.sort();
    assert_eq!(
        stated, modules,
        "lib.rs's map (left) and its `mod` lines (right) differ: name each module once in the map"
    );
}

#[test]
fn no_module_imports_one_stated_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    sources(&src, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|path| {
            let relative = path.strip_prefix(&src).expect("under src/");
            let text = std::fs::read_to_string(path).expect("a source file is readable");
            (relative.to_string_lossy().into_owned(), text)
        })
        .collect();
    let found = upward(&stated_order(include_str!("lib.rs")), &files);
    assert!(
        found.is_empty(),
        "imports that point up against lib.rs's module order:\n{}",
        found.join("\n")
    );
}

/// The check itself, on made-up files: it must see each form of import, and only those.
#[test]
fn an_upward_import_is_found_in_every_form() {
    let order: Vec<String> = ["http", "pipeline", "store"].map(String::from).into();
    let file = |path: &str, text: &str| (path.to_owned(), text.to_owned());
    let files = [
        file("store/mod.rs", "use crate::pipeline::Pipeline;\n"),
        file("store/rows.rs", "fn f() { crate::http::serve(); }\n"),
        file("pipeline.rs", "use crate::{store::Store, http};\n"),
        file("pipeline/ok.rs", "use crate::store::Store;\n// crate::http in a comment\n"),
        file("store/other.rs", "use other_crate::http;\n#[cfg(test)]\nuse crate::http;\n"),
        file(
            "store/later.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::http;\n}\nfn f() { crate::pipeline::g(); }\n",
        ),
    ];
    let found = upward(&order, &files);
    assert_eq!(
        found,
        [
            "src/store/mod.rs:1: store → pipeline",
            "src/store/rows.rs:1: store → http",
            "src/pipeline.rs:1: pipeline → http",
            "src/store/later.rs:5: store → pipeline",
        ]
    );
}
