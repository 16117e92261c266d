//! A thread's `outputSchema` ([`OutputSchema`]): checked once, at creation, by the rules of the
//! validator the CLI runs it under, so a schema no turn could use is refused there (422, naming
//! the problem) instead of failing every turn of the thread.
//!
//! The CLI takes the schema as `--json-schema` and compiles it with a strict draft-07 validator
//! before its first turn; a schema it refuses makes it exit (every turn `cli_died`). Measured on
//! CLI 2.1.330 (one thread per schema, a scripted `StructuredOutput` call):
//! - unknown keywords are refused (strict mode): `x-note`, and the 2019-09/2020-12 ones it does
//!   not implement (`$anchor`, `$dynamicRef`, `$dynamicAnchor`, `unevaluatedProperties`,
//!   `dependentRequired`, …). [`KNOWN`] lists what it took.
//! - a `$schema` naming draft 2020-12 is refused ("no schema with key or ref"); ours must be
//!   2020-12, so the CLI gets the schema without it ([`for_cli`]).
//! - a `$ref` cycle that never reaches a value overflows its stack; a recursive schema that goes
//!   through `properties` or `items` (a tree) is fine.
//! - `pattern`s are ECMAScript regular expressions with the `u` flag (`(?i)`, `[[:alpha:]]`,
//!   `\z`, `\-` are refused); checked with `regress`, an ECMAScript engine.
//! - `format` is not asserted (an email-shaped string is not checked), so neither is it here.
//! - the root must be an object schema: the CLI offers it as a tool's input schema.
//!
//! Bounds before anything is compiled: [`MAX_BYTES`] of JSON, [`MAX_DEPTH`] levels of
//! subschemas, [`MAX_SUBSCHEMAS`] in all. `jsonschema` before 0.61 kept a cache that grew by
//! hundreds of MB per new depth of a 1 KB schema; the bounds keep what any version does with one
//! schema small.

use std::collections::HashMap;

use jsonschema::Validator;
use serde_json::{Map, Value};

use super::advertise::{escape, holds, walk, Holds};
use super::{build_validator, check_is_2020_12, violations, Violation};

/// Most bytes of JSON in an `outputSchema` (it is one command-line argument of the CLI, whose
/// limit is 128 KiB).
pub const MAX_BYTES: usize = 64 * 1024;
/// Most levels of subschemas below the root.
pub const MAX_DEPTH: usize = 32;
/// Most subschemas in all.
pub const MAX_SUBSCHEMAS: usize = 2_000;

/// The keywords the CLI's validator takes (draft-07, with `$defs` and `nullable`).
const KNOWN: &[&str] = &[
    "$id",
    "$schema",
    "$ref",
    "$comment",
    "$defs",
    "$vocabulary",
    "definitions",
    "type",
    "enum",
    "const",
    "nullable",
    "multipleOf",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "items",
    "additionalItems",
    "maxItems",
    "minItems",
    "uniqueItems",
    "contains",
    "maxProperties",
    "minProperties",
    "required",
    "properties",
    "patternProperties",
    "additionalProperties",
    "dependencies",
    "propertyNames",
    "if",
    "then",
    "else",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentMediaType",
    "contentEncoding",
];

/// A thread's `outputSchema`, compiled once: what every structured reply must match.
pub struct OutputSchema(Validator);

impl OutputSchema {
    /// `Err` says what is wrong with the schema itself: too large, not an object schema, not
    /// draft 2020-12, or not something the CLI's validator can run; each problem with its place
    /// in the schema.
    pub fn compile(schema: &Value) -> Result<OutputSchema, String> {
        let listed = |problems: Vec<Violation>| {
            let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
            format!(
                "outputSchema is not a valid JSON Schema: {}",
                lines.join("; ")
            )
        };
        let unusable = |problems: Vec<Violation>| {
            let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
            format!(
                "outputSchema cannot be used by the claude CLI: {}",
                lines.join("; ")
            )
        };
        bounded(schema)?;
        check_is_2020_12(schema).map_err(listed)?;
        let problems = cli_problems(schema);
        if !problems.is_empty() {
            return Err(unusable(problems));
        }
        build_validator(schema, false)
            .map(OutputSchema)
            .map_err(|problem| listed(vec![problem]))
    }

    /// `Err` lists every way `value` does not match.
    pub fn check(&self, value: &Value) -> Result<(), String> {
        let problems = violations(&self.0, value);
        if problems.is_empty() {
            return Ok(());
        }
        let lines: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Err(lines.join("; "))
    }
}

/// The schema as the CLI's `--json-schema` takes it: without a root `$schema` (it knows no
/// draft 2020-12 meta-schema by that name, and its own dialect is the one that runs).
pub fn for_cli(schema: &Value) -> String {
    match schema {
        Value::Object(root) if root.contains_key("$schema") => {
            let mut root = root.clone();
            root.remove("$schema");
            Value::Object(root).to_string()
        }
        _ => schema.to_string(),
    }
}

/// Refuses, before anything is compiled, a schema that is not an object schema or passes a
/// bound.
fn bounded(schema: &Value) -> Result<(), String> {
    let Value::Object(root) = schema else {
        return Err("outputSchema must be a JSON Schema object".into());
    };
    if root.get("type") != Some(&Value::String("object".into())) {
        return Err(
            "outputSchema must have \"type\": \"object\" at its root: the CLI offers it to the \
             model as a tool's input"
                .into(),
        );
    }
    let bytes = schema.to_string().len();
    if bytes > MAX_BYTES {
        return Err(format!(
            "outputSchema is {bytes} bytes of JSON; at most {MAX_BYTES}"
        ));
    }
    let mut count = 0;
    let deepest = depth(schema, &mut count);
    if deepest > MAX_DEPTH {
        return Err(format!(
            "outputSchema nests subschemas {deepest} levels deep; at most {MAX_DEPTH}"
        ));
    }
    if count > MAX_SUBSCHEMAS {
        return Err(format!(
            "outputSchema has {count} subschemas; at most {MAX_SUBSCHEMAS}"
        ));
    }
    Ok(())
}

/// How many levels of subschemas lie below `schema` (0: none), counting every subschema into
/// `count`. It stops going down past [`MAX_DEPTH`] (the caller refuses it then).
fn depth(schema: &Value, count: &mut usize) -> usize {
    let Value::Object(node) = schema else {
        return 0;
    };
    *count += 1;
    let mut deepest = 0;
    for (keyword, value) in node {
        let below: Vec<&Value> = match (holds(keyword), value) {
            (Some(Holds::One), _) => vec![value],
            (Some(Holds::List), Value::Array(items)) => items.iter().collect(),
            (Some(Holds::Named), Value::Object(named)) => named.values().collect(),
            _ => Vec::new(),
        };
        for sub in below {
            if deepest > MAX_DEPTH || *count > MAX_SUBSCHEMAS {
                return deepest;
            }
            deepest = deepest.max(1 + depth(sub, count));
        }
    }
    deepest
}

/// What the CLI's validator would refuse in a (meta-valid) schema: unknown keywords, patterns
/// that are not ECMAScript, `$ref` cycles that never reach a value.
fn cli_problems(schema: &Value) -> Vec<Violation> {
    let mut problems = Vec::new();
    let mut nodes: Vec<(&Map<String, Value>, String)> = Vec::new();
    let _ = walk(schema, "", &mut |node, pointer| {
        nodes.push((node, pointer.to_owned()));
        Ok(())
    });
    for (node, pointer) in &nodes {
        for keyword in node.keys() {
            if !KNOWN.contains(&keyword.as_str()) {
                problems.push(Violation {
                    pointer: format!("{pointer}/{}", escape(keyword)),
                    message: format!(
                        "`{keyword}` is not a keyword the CLI's validator knows (it refuses \
                         unknown ones; a note fits in `description` or `$comment`)"
                    ),
                });
            }
        }
        let patterns = node
            .get("pattern")
            .and_then(Value::as_str)
            .map(|p| (format!("{pointer}/pattern"), p));
        let keys = node
            .get("patternProperties")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|named| named.keys())
            .map(|p| {
                (
                    format!("{pointer}/patternProperties/{}", escape(p)),
                    p.as_str(),
                )
            });
        for (at, pattern) in patterns.into_iter().chain(keys) {
            if let Err(why) = regress::Regex::with_flags(pattern, "u") {
                problems.push(Violation {
                    pointer: at,
                    message: format!(
                        "{pattern:?} is not an ECMAScript regular expression with the `u` flag \
                         ({why})"
                    ),
                });
            }
        }
    }
    problems.extend(ref_cycle(schema, &nodes));
    problems
}

/// A cycle of subschemas that apply in place (`$ref`, `allOf`, `anyOf`, `oneOf`, `not`, `if`,
/// `then`, `else`) and so never reach a value: a validator following it never ends.
fn ref_cycle(root: &Value, nodes: &[(&Map<String, Value>, String)]) -> Option<Violation> {
    let at: HashMap<&str, &Map<String, Value>> =
        nodes.iter().map(|(node, p)| (p.as_str(), *node)).collect();
    let in_place = |pointer: &str| -> Vec<String> {
        let Some(node) = at.get(pointer) else {
            return Vec::new();
        };
        let mut next = Vec::new();
        if let Some(target) = node.get("$ref").and_then(Value::as_str) {
            if let Some(fragment) = target.strip_prefix('#') {
                if root.pointer(fragment).is_some() {
                    next.push(fragment.to_owned());
                }
            }
        }
        for keyword in ["not", "if", "then", "else"] {
            if node.contains_key(keyword) {
                next.push(format!("{pointer}/{keyword}"));
            }
        }
        for keyword in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(items)) = node.get(keyword) {
                next.extend((0..items.len()).map(|i| format!("{pointer}/{keyword}/{i}")));
            }
        }
        next
    };
    // Depth-first from each subschema; `path` is the chain being followed.
    let mut done: std::collections::HashSet<String> = std::collections::HashSet::new();
    for (_, start) in nodes {
        let mut path: Vec<String> = Vec::new();
        let mut stack: Vec<(String, usize)> = vec![(start.clone(), 0)];
        while let Some((pointer, depth)) = stack.pop() {
            path.truncate(depth);
            if let Some(from) = path.iter().position(|p| *p == pointer) {
                let mut cycle: Vec<&str> = path[from..].iter().map(String::as_str).collect();
                cycle.push(&pointer);
                let chain: Vec<&str> = cycle
                    .iter()
                    .map(|p| if p.is_empty() { "#" } else { *p })
                    .collect();
                return Some(Violation {
                    pointer: path[from].clone(),
                    message: format!(
                        "a cycle of `$ref`s that never reaches a value ({}): the CLI's \
                         validator would recurse without end",
                        chain.join(" → ")
                    ),
                });
            }
            if !done.insert(pointer.clone()) {
                continue;
            }
            path.push(pointer.clone());
            for next in in_place(&pointer) {
                stack.push((next, depth + 1));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// An object schema with property `a` as `a`.
    fn with_a(a: Value) -> Value {
        json!({"type": "object", "properties": {"a": a}})
    }

    fn refusal(schema: &Value) -> String {
        match OutputSchema::compile(schema) {
            Ok(_) => panic!("accepted: {schema}"),
            Err(why) => why,
        }
    }

    #[test]
    fn keywords_the_clis_validator_does_not_know_are_refused_where_they_are() {
        for (schema, at, keyword) in [
            (
                json!({"type": "object", "x-note": "hi"}),
                "/x-note",
                "x-note",
            ),
            (
                with_a(json!({"type": "string", "foo": 1})),
                "/properties/a/foo",
                "foo",
            ),
            (
                json!({"type": "object", "$dynamicAnchor": "n", "properties": {"a": {"$dynamicRef": "#n"}}}),
                "/$dynamicAnchor",
                "$dynamicAnchor",
            ),
            (
                with_a(json!({"$anchor": "x"})),
                "/properties/a/$anchor",
                "$anchor",
            ),
            (
                json!({"type": "object", "unevaluatedProperties": false}),
                "/unevaluatedProperties",
                "unevaluatedProperties",
            ),
            (
                json!({"type": "object", "dependentRequired": {"a": ["b"]}}),
                "/dependentRequired",
                "dependentRequired",
            ),
        ] {
            let why = refusal(&schema);
            assert!(why.contains("cannot be used by the claude CLI"), "{why}");
            assert!(why.contains(&format!("at {at}: `{keyword}`")), "{why}");
        }
    }

    #[test]
    fn annotations_and_draft_07_keywords_the_cli_takes_are_accepted() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://example.com/reply",
            "$comment": "c",
            "type": "object",
            "title": "t",
            "description": "d",
            "examples": [{"a": "x"}],
            "properties": {
                "a": {"type": "string", "nullable": true, "default": "x", "readOnly": true,
                      "deprecated": false, "contentMediaType": "text/plain"},
                "b": {"type": "array", "items": {"type": "integer"}, "uniqueItems": true},
            },
            "dependencies": {"a": ["b"]},
            "$defs": {"unused": {"type": "string"}},
        });
        assert!(OutputSchema::compile(&schema).is_ok());
    }

    #[test]
    fn patterns_must_be_ecmascript_with_the_u_flag() {
        for pattern in ["(?i)abc", "[[:alpha:]]+", "abc\\z", "\\-"] {
            let why = refusal(&with_a(json!({"type": "string", "pattern": pattern})));
            assert!(why.contains("/properties/a/pattern"), "{why}");
            assert!(why.contains("ECMAScript"), "{why}");
        }
        let named = json!({"type": "object", "patternProperties": {"(?i)x": {}}});
        assert!(refusal(&named).contains("/patternProperties/(?i)x"));
        for pattern in ["^\\p{L}+$", "[\\w-]+", "^(?=a)a", "\\u{1F600}"] {
            let schema = with_a(json!({"type": "string", "pattern": pattern}));
            assert!(OutputSchema::compile(&schema).is_ok(), "{pattern}");
        }
    }

    #[test]
    fn a_ref_cycle_that_never_reaches_a_value_is_refused_and_a_tree_is_not() {
        let pair = json!({
            "type": "object",
            "$defs": {"x": {"$ref": "#/$defs/y"}, "y": {"allOf": [{"$ref": "#/$defs/x"}]}},
            "properties": {"a": {"$ref": "#/$defs/x"}},
        });
        let why = refusal(&pair);
        assert!(why.contains("never reaches a value"), "{why}");
        assert!(
            why.contains("/$defs/x → /$defs/y → /$defs/y/allOf/0 → /$defs/x"),
            "{why}"
        );
        let root = json!({"type": "object", "not": {"$ref": "#"}});
        assert!(refusal(&root).contains("# → /not → #"));
        let tree = json!({
            "type": "object",
            "$defs": {"node": {"type": "object", "properties": {
                "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}},
            "properties": {"root": {"$ref": "#/$defs/node"}},
        });
        assert!(OutputSchema::compile(&tree).is_ok());
    }

    #[test]
    fn bounds_are_checked_before_anything_is_compiled() {
        assert!(refusal(&json!({"type": "string"})).contains("\"type\": \"object\""));
        assert!(refusal(&json!({"properties": {}})).contains("\"type\": \"object\""));
        // A 589 KB enum once made every turn fail: `Argument list too long`.
        let values: Vec<String> = (0..60_000).map(|i| format!("v{i:05}")).collect();
        let why = refusal(&with_a(json!({"enum": values})));
        assert!(why.contains(&format!("at most {MAX_BYTES}")), "{why}");
        let mut deep = json!({"type": "string"});
        for _ in 0..40 {
            deep = json!({"not": deep});
        }
        let why = refusal(&with_a(deep));
        assert!(
            why.contains(&format!("levels deep; at most {MAX_DEPTH}")),
            "{why}"
        );
        let many: Map<String, Value> = (0..2_100)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        let why = refusal(&json!({"type": "object", "properties": many}));
        assert!(why.contains(&format!("at most {MAX_SUBSCHEMAS}")), "{why}");
    }

    #[test]
    fn formats_are_not_asserted_as_the_cli_does_not() {
        let schema = OutputSchema::compile(&with_a(json!({"type": "string", "format": "email"})))
            .expect("a schema");
        assert!(schema.check(&json!({"a": "not an email"})).is_ok());
        assert!(schema.check(&json!({"a": 5})).is_err());
    }

    #[test]
    fn the_cli_gets_the_schema_without_its_dollar_schema() {
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": {"$schema": {"type": "string"}},
        });
        let given: Value = serde_json::from_str(&for_cli(&schema)).expect("JSON");
        assert_eq!(
            given,
            json!({"type": "object", "properties": {"$schema": {"type": "string"}}})
        );
        let plain = json!({"type": "object"});
        assert_eq!(for_cli(&plain), plain.to_string());
    }
}
