//! The API-safe copy of an input schema, and the rules that make it one.
//!
//! The CLI sends our `inputSchema` verbatim to the Messages API as `input_schema`, and the API
//! refuses the whole request (every tool, every turn) when one schema has a top-level
//! `oneOf`/`anyOf`/`allOf`, any `$ref`, or a property name outside `[A-Za-z0-9_.-]{1,64}`. So:
//! - every `$ref` must point into `#/$defs/…` or `#/definitions/…` and is inlined; `$defs` and
//!   `definitions` are dropped. A recursive `$ref` cannot be inlined and is refused, as is any other
//!   reference (another document, another pointer, `$dynamicRef`) and a nested `$id` (it would
//!   move the base the `$ref`s below it resolve against).
//! - the top level must be `"type": "object"` without `oneOf`/`anyOf`/`allOf`, after inlining.
//! - property names are checked everywhere under `properties`.
//!
//! Only keyword positions that hold schemas are walked: `enum`, `const`, `default`, `examples`
//! and unknown keywords hold data, whatever it looks like.

use serde_json::{Map, Value};

/// Why an input schema cannot be advertised.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Refusal {
    /// Where in the schema, as a JSON pointer.
    pub(super) pointer: String,
    /// What is wrong and what to do instead.
    pub(super) problem: String,
}

impl Refusal {
    fn new(pointer: impl Into<String>, problem: impl Into<String>) -> Self {
        Self {
            pointer: pointer.into(),
            problem: problem.into(),
        }
    }
}

/// How many `$ref`s inlining may expand before the copy counts as too large: nested definitions
/// that each use the previous one twice would otherwise grow it exponentially.
const MAX_EXPANSIONS: usize = 1_000;

/// Checks the rules above on a (normalized, meta-valid) input schema and returns the copy to
/// advertise.
pub(super) fn advertised_schema(schema: &Value) -> Result<Value, Refusal> {
    walk(schema, "", &mut |node, pointer| {
        check_node(schema, node, pointer)
    })?;
    let mut expansions = 0;
    let inlined = inline(schema, schema, "", &mut Vec::new(), &mut expansions)?;
    let Value::Object(top) = &inlined else {
        return Err(Refusal::new(
            "",
            "the input schema must be an object schema with `\"type\": \"object\"`",
        ));
    };
    for keyword in ["oneOf", "anyOf", "allOf"] {
        if top.contains_key(keyword) {
            return Err(Refusal::new(
                format!("/{keyword}"),
                format!(
                    "top-level `{keyword}` is not allowed; use one object with optional properties, \
                     or put the `{keyword}` inside a property"
                ),
            ));
        }
    }
    if top.get("type") != Some(&Value::String("object".to_owned())) {
        let found = top
            .get("type")
            .map_or("nothing".to_owned(), |t| t.to_string());
        return Err(Refusal::new(
            "/type",
            format!("the top-level `type` must be \"object\", found {found}"),
        ));
    }
    Ok(inlined)
}

/// The rules that hold for every subschema: references are local into `$defs`, no nested `$id`,
/// property names the API accepts.
fn check_node(root: &Value, node: &Map<String, Value>, pointer: &str) -> Result<(), Refusal> {
    if let Some(reference) = node.get("$ref") {
        let reference = reference.as_str().unwrap_or_default();
        resolve_local_ref(root, reference)
            .map_err(|problem| Refusal::new(format!("{pointer}/$ref"), problem))?;
    }
    for keyword in ["$dynamicRef", "$recursiveRef"] {
        if node.contains_key(keyword) {
            return Err(Refusal::new(
                format!("{pointer}/{}", escape(keyword)),
                format!("`{keyword}` cannot be inlined; use `$ref` into `#/$defs`"),
            ));
        }
    }
    if !pointer.is_empty() && node.contains_key("$id") {
        return Err(Refusal::new(
            format!("{pointer}/$id"),
            "a nested `$id` is not supported in input schemas; put shared parts in the top-level `$defs`",
        ));
    }
    if let Some(Value::Object(properties)) = node.get("properties") {
        for name in properties.keys() {
            if !is_api_property_name(name) {
                return Err(Refusal::new(
                    format!("{pointer}/properties/{}", escape(name)),
                    format!(
                        "property name {name:?} is not accepted by the Messages API, which allows \
                         1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn is_api_property_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// How a keyword holds subschemas.
pub(super) enum Holds {
    One,
    List,
    Named,
}

/// The draft 2020-12 keywords whose values are schemas. `definitions` is not a 2020-12 keyword but
/// a common home for `$ref` targets, so it is treated like `$defs`.
pub(super) fn holds(keyword: &str) -> Option<Holds> {
    match keyword {
        "additionalProperties"
        | "propertyNames"
        | "items"
        | "contains"
        | "not"
        | "if"
        | "then"
        | "else"
        | "unevaluatedItems"
        | "unevaluatedProperties"
        | "contentSchema" => Some(Holds::One),
        "allOf" | "anyOf" | "oneOf" | "prefixItems" => Some(Holds::List),
        "properties" | "patternProperties" | "dependentSchemas" | "$defs" | "definitions" => {
            Some(Holds::Named)
        }
        _ => None,
    }
}

/// What [`walk`] calls on each subschema object, with its JSON pointer.
pub(super) type Visit<'s, 'f> = dyn FnMut(&'s Map<String, Value>, &str) -> Result<(), Refusal> + 'f;

/// Calls `visit` on `schema` and every subschema below it, with its JSON pointer.
pub(super) fn walk<'s>(
    schema: &'s Value,
    pointer: &str,
    visit: &mut Visit<'s, '_>,
) -> Result<(), Refusal> {
    let Value::Object(node) = schema else {
        return Ok(());
    };
    visit(node, pointer)?;
    for (keyword, value) in node {
        let here = format!("{pointer}/{}", escape(keyword));
        match (holds(keyword), value) {
            (Some(Holds::One), _) => walk(value, &here, visit)?,
            (Some(Holds::List), Value::Array(items)) => {
                for (index, item) in items.iter().enumerate() {
                    walk(item, &format!("{here}/{index}"), visit)?;
                }
            }
            (Some(Holds::Named), Value::Object(named)) => {
                for (name, item) in named {
                    walk(item, &format!("{here}/{}", escape(name)), visit)?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// Annotations: when a `$ref` and its sibling both set one, the sibling's wins (a property's own
/// description beats the definition's).
const ANNOTATIONS: [&str; 8] = [
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "$comment",
];

/// A copy of `schema` (found at `pointer` in `root`) with every `$ref` replaced by its target and
/// `$defs`/`definitions` removed. `stack` holds the references being expanded, to catch cycles.
fn inline(
    schema: &Value,
    root: &Value,
    pointer: &str,
    stack: &mut Vec<String>,
    expansions: &mut usize,
) -> Result<Value, Refusal> {
    let Value::Object(node) = schema else {
        return Ok(schema.clone());
    };
    let mut copy = Map::new();
    for (keyword, value) in node {
        if matches!(keyword.as_str(), "$ref" | "$defs" | "definitions") {
            continue;
        }
        let here = format!("{pointer}/{}", escape(keyword));
        let value = match (holds(keyword), value) {
            (Some(Holds::One), _) => inline(value, root, &here, stack, expansions)?,
            (Some(Holds::List), Value::Array(items)) => Value::Array(
                items
                    .iter()
                    .enumerate()
                    .map(|(index, item)| {
                        inline(item, root, &format!("{here}/{index}"), stack, expansions)
                    })
                    .collect::<Result<_, _>>()?,
            ),
            (Some(Holds::Named), Value::Object(named)) => Value::Object(
                named
                    .iter()
                    .map(|(name, item)| {
                        let item = inline(
                            item,
                            root,
                            &format!("{here}/{}", escape(name)),
                            stack,
                            expansions,
                        )?;
                        Ok((name.clone(), item))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            _ => value.clone(),
        };
        copy.insert(keyword.clone(), value);
    }
    let Some(reference) = node.get("$ref").and_then(Value::as_str) else {
        return Ok(Value::Object(copy));
    };

    let at = format!("{pointer}/$ref");
    if stack.iter().any(|seen| seen == reference) {
        let cycle = stack
            .iter()
            .skip_while(|seen| *seen != reference)
            .cloned()
            .collect::<Vec<_>>();
        return Err(Refusal::new(
            at,
            format!(
                "`$ref` {reference:?} is recursive ({} → {reference}); a recursive schema cannot be \
                 inlined and the Messages API takes no `$ref`",
                cycle.join(" → ")
            ),
        ));
    }
    *expansions += 1;
    if *expansions > MAX_EXPANSIONS {
        return Err(Refusal::new(
            at,
            format!("inlining needs more than {MAX_EXPANSIONS} `$ref` expansions; the advertised schema would be too large"),
        ));
    }
    let target =
        resolve_local_ref(root, reference).map_err(|problem| Refusal::new(at.clone(), problem))?;
    let target_pointer = reference.trim_start_matches('#').to_owned();
    stack.push(reference.to_owned());
    let target = inline(target, root, &target_pointer, stack, expansions)?;
    stack.pop();
    merge(target, copy, pointer)
}

/// Combines an inlined `$ref` target with the `$ref`'s sibling keywords. Keywords only one side
/// sets, and annotations, merge into one object; other conflicts become `allOf: [target, siblings]`,
/// which has the same meaning (refused at the top level, where the API allows no `allOf`).
fn merge(target: Value, siblings: Map<String, Value>, pointer: &str) -> Result<Value, Refusal> {
    let mut merged = match target {
        Value::Object(target) => target,
        Value::Bool(true) => Map::new(),
        _ => {
            // `false` or anything meta-invalid: keep the meaning, "nothing is valid".
            let mut never = Map::new();
            never.insert("not".to_owned(), Value::Object(Map::new()));
            never
        }
    };
    let target = merged.clone();
    for (keyword, value) in &siblings {
        match merged.get(keyword) {
            Some(existing) if existing != value && !ANNOTATIONS.contains(&keyword.as_str()) => {
                if pointer.is_empty() {
                    return Err(Refusal::new(
                        format!("/{}", escape(keyword)),
                        format!(
                            "the top-level `{keyword}` conflicts with the one in the `$ref` target; \
                             move it into the definition"
                        ),
                    ));
                }
                let mut both = Map::new();
                both.insert(
                    "allOf".to_owned(),
                    Value::Array(vec![Value::Object(target), Value::Object(siblings)]),
                );
                return Ok(Value::Object(both));
            }
            _ => {
                merged.insert(keyword.clone(), value.clone());
            }
        }
    }
    Ok(Value::Object(merged))
}

/// Finds the target of a `$ref` that must point into this schema's `$defs` (or `definitions`).
pub(super) fn resolve_local_ref<'s>(root: &'s Value, reference: &str) -> Result<&'s Value, String> {
    let refuse = |why: &str| {
        format!("`$ref` {reference:?} {why}; only references into `#/$defs/…` (or `#/definitions/…`) can be inlined")
    };
    let Some(fragment) = reference.strip_prefix('#') else {
        return Err(refuse("points outside this schema"));
    };
    let pointer = percent_decode(fragment).ok_or_else(|| refuse("is not a valid JSON pointer"))?;
    if !(pointer.starts_with("/$defs/") || pointer.starts_with("/definitions/")) {
        return Err(refuse("is not a pointer into `$defs`"));
    }
    root.pointer(&pointer)
        .ok_or_else(|| refuse("points at nothing"))
}

/// Decodes `%XX` escapes (URI fragments may escape pointer characters); `None` if malformed.
fn percent_decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        if byte == b'%' {
            let hex = tail
                .get(..2)
                .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))?;
            bytes.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            rest = &tail[2..];
        } else {
            bytes.push(byte);
            rest = tail;
        }
    }
    String::from_utf8(bytes).ok()
}

/// Escapes one JSON pointer segment (RFC 6901).
pub(super) fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}
