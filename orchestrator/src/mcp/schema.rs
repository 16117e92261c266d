//! Tool schemas: names, normalization, load-time checks, defaults and validation. Pure code, no IO.
//!
//! The `claude` CLI validates nothing and fills no defaults (protocol doc §6.5), so the daemon
//! does both, here. Each tool is checked and compiled once, when its plugin is loaded
//! ([`compile_tool`]); a tool that would break the model's requests is a load error, never a
//! runtime surprise. At call time [`CompiledTool::prepare_input`] fills defaults and lists every
//! violation, which [`render_violations`] turns into text the model can correct itself from.
//!
//! Two schemas per tool:
//! - `input_schema`: the full draft 2020-12 schema (shorthand expanded by [`normalize`]). All
//!   validation uses it.
//! - `advertised_schema`: what `tools/list` sends and the CLI passes verbatim to the Messages API
//!   (§6.6). The API refuses a tool whose schema has a `$ref`, a top-level `oneOf`/`anyOf`/`allOf`
//!   or an odd property name, and one bad tool fails *every* request, so the advertised copy has
//!   its `$ref`s inlined and its `$defs` dropped, and anything that cannot be made safe is refused
//!   at load (see `advertise`).
//!
//! Not here: the registry of plugins, the MCP transport, calling tools.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use jsonschema::{Draft, Validator};
use plugin_contract::ToolSpec;
use serde::Serialize;
use serde_json::{json, Map, Value};

mod advertise;
mod defaults;
mod output;

pub use output::{for_cli, OutputSchema};
#[cfg(test)]
mod tests;

/// One tool, checked and compiled at load time.
#[derive(Clone)]
pub struct CompiledTool {
    /// `<plugin>__<tool>`: what `tools/list` advertises and `tools/call` names.
    pub name: String,
    /// What the tool does; the model reads it.
    pub description: String,
    /// The normalized full JSON Schema (shorthand expanded). Validation and defaults use it.
    pub input_schema: Value,
    /// The API-safe copy for `tools/list`: every `$ref` inlined, `$defs` removed.
    pub advertised_schema: Value,
    /// The schema a tool's `structured` output must satisfy, as the plugin gave it.
    pub output_schema: Option<Value>,
    /// The plugin's per-tool timeout; `None` means the daemon's default.
    pub timeout: Option<Duration>,
    /// `input_schema`, compiled. Behind an `Arc` so the registry can hand out clones cheaply.
    input_validator: Arc<Validator>,
    /// `output_schema`, compiled.
    output_validator: Option<Arc<Validator>>,
}

impl fmt::Debug for CompiledTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompiledTool")
            .field("name", &self.name)
            .field("description", &self.description)
            .field("input_schema", &self.input_schema)
            .field("advertised_schema", &self.advertised_schema)
            .field("output_schema", &self.output_schema)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

/// Checks one tool's name and schemas and compiles its validators.
///
/// In order: the name ([`tool_name`]); the input schema, normalized, must be valid draft 2020-12
/// (checked against the meta-schema; every problem is listed with its path in the schema) and
/// API-safe (top-level `"type": "object"`, no top-level `oneOf`/`anyOf`/`allOf`, `$ref`s only into
/// `#/$defs` or `#/definitions` and not recursive, property names `[A-Za-z0-9_.-]{1,64}`); the
/// output schema, if any, must be valid draft 2020-12 (the API never sees it, so no API rules).
/// A `$schema` other than draft 2020-12 is refused: validation always uses 2020-12. Nothing is ever
/// fetched: a `$ref` to another document fails to compile.
pub fn compile_tool(plugin: &str, spec: &ToolSpec) -> Result<CompiledTool, SchemaError> {
    let name = tool_name(plugin, &spec.name)?;
    compile_as(name, plugin, spec)
}

/// [`compile_tool`]'s schema checks and validators for a tool listed as `name`, its name checked
/// by the caller (a client's tool is listed under its own name on a server of its own,
/// [`super::client`]); errors name it as a tool of `plugin`.
pub(super) fn compile_as(
    name: String,
    plugin: &str,
    spec: &ToolSpec,
) -> Result<CompiledTool, SchemaError> {
    let err = |role: SchemaRole| ErrorSite::new(plugin, &spec.name, role);

    let input_schema = normalize(&spec.input_schema);
    check_is_2020_12(&input_schema).map_err(|problems| err(SchemaRole::Input).invalid(problems))?;
    let advertised_schema = advertise::advertised_schema(&input_schema)
        .map_err(|refusal| err(SchemaRole::Input).not_api_safe(refusal))?;
    let input_validator =
        build_validator(&input_schema, true).map_err(|e| err(SchemaRole::Input).compile(e))?;

    let output_validator = match &spec.output_schema {
        None => None,
        Some(schema) => {
            check_is_2020_12(schema)
                .map_err(|problems| err(SchemaRole::Output).invalid(problems))?;
            Some(Arc::new(
                build_validator(schema, true).map_err(|e| err(SchemaRole::Output).compile(e))?,
            ))
        }
    };

    Ok(CompiledTool {
        name,
        description: spec.description.clone(),
        input_schema,
        advertised_schema,
        output_schema: spec.output_schema.clone(),
        timeout: spec.timeout,
        input_validator: Arc::new(input_validator),
        output_validator,
    })
}

impl CompiledTool {
    /// Fills in defaults for omitted properties, then validates against the full input schema.
    ///
    /// Defaults are deep clones of the schema's `default`, filled at the top level and inside
    /// nested objects (and array items) that are present, looking through `$ref` and `allOf`. An
    /// omitted object property is created only when it has a `default` of its own; its own
    /// defaults are then filled in too. `null` arguments (a call without arguments) count as `{}`.
    ///
    /// `Err` lists every violation, not just the first.
    pub fn prepare_input(&self, input: Value) -> Result<Value, Vec<Violation>> {
        let mut input = if input.is_null() {
            Value::Object(Map::new())
        } else {
            input
        };
        defaults::fill(&self.input_schema, &mut input);
        let violations = violations(&self.input_validator, &input);
        if violations.is_empty() {
            Ok(input)
        } else {
            Err(violations)
        }
    }

    /// Validates a tool's structured output against its output schema; `Ok` when there is none.
    pub fn check_output(&self, structured: &Value) -> Result<(), Vec<Violation>> {
        let Some(validator) = &self.output_validator else {
            return Ok(());
        };
        let violations = violations(validator, structured);
        if violations.is_empty() {
            Ok(())
        } else {
            Err(violations)
        }
    }
}

/// One reason a value does not match a schema.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Violation {
    /// JSON pointer to the offending value, `""` for the root.
    pub pointer: String,
    /// What is wrong, as `jsonschema` says it (`5 is not of type "string"`).
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let at = if self.pointer.is_empty() {
            "(root)"
        } else {
            &self.pointer
        };
        write!(f, "at {at}: {}", self.message)
    }
}

/// Renders violations for the model: a first line naming the tool, then one `- at /pointer: message`
/// line per violation (`at (root)` for the root), so the model can fix its call and retry.
pub fn render_violations(tool: &str, violations: &[Violation]) -> String {
    let mut text = format!("Invalid input for tool `{tool}`:");
    for violation in violations {
        text.push_str("\n- ");
        text.push_str(&violation.to_string());
    }
    text
}

/// What the model prefixes to our tool names: `mcp__<server>__`.
const MODEL_PREFIX: &str = "mcp__harness__";
/// The Messages API's limit on a tool name, which for the model is `MODEL_PREFIX` + ours.
const MAX_MODEL_NAME_LEN: usize = 64;

/// Checks a plugin and tool name at load and returns `<plugin>__<tool>`.
///
/// Both must match `[A-Za-z0-9_-]+`. A plugin name may not contain `__` (it separates plugin from
/// tool) nor end with `_` (`a_` + `__` + `b` would read as `a` + `__` + `_b`), so the split at the
/// first `__` is always unambiguous. The name the model sees, `mcp__harness__<plugin>__<tool>`, must
/// fit the Messages API's 64 characters.
pub fn tool_name(plugin: &str, tool: &str) -> Result<String, SchemaError> {
    let bad = |reason: String| SchemaError::BadName {
        plugin: plugin.to_owned(),
        tool: tool.to_owned(),
        reason,
    };
    for (what, name) in [("plugin", plugin), ("tool", tool)] {
        if name.is_empty() {
            return Err(bad(format!("the {what} name is empty")));
        }
        if let Some(c) = name
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
        {
            return Err(bad(format!(
                "the {what} name contains {c:?}; names may only use A-Z, a-z, 0-9, `_` and `-`"
            )));
        }
    }
    if plugin.contains("__") {
        return Err(bad(
            "the plugin name contains `__`, which separates plugin from tool".to_owned(),
        ));
    }
    if plugin.ends_with('_') {
        return Err(bad(
            "the plugin name ends with `_`, which makes `<plugin>__<tool>` ambiguous".to_owned(),
        ));
    }
    let name = format!("{plugin}__{tool}");
    let model_name = format!("{MODEL_PREFIX}{name}");
    if model_name.len() > MAX_MODEL_NAME_LEN {
        return Err(SchemaError::NameTooLong {
            plugin: plugin.to_owned(),
            tool: tool.to_owned(),
            len: model_name.len(),
            model_name,
        });
    }
    Ok(name)
}

/// Checks a set of tool names (`<plugin>__<tool>`) for duplicates; the error names the first one.
pub fn check_unique<'a>(names: impl IntoIterator<Item = &'a str>) -> Result<(), SchemaError> {
    let mut seen = HashSet::new();
    for name in names {
        if !seen.insert(name) {
            // Plugin names hold no `__`, so the first one ends the plugin name.
            let (plugin, tool) = name.split_once("__").unwrap_or((name, ""));
            return Err(SchemaError::Duplicate {
                name: name.to_owned(),
                plugin: plugin.to_owned(),
                tool: tool.to_owned(),
            });
        }
    }
    Ok(())
}

/// The JSON types a shorthand property may name.
const TYPE_NAMES: [&str; 7] = [
    "string", "integer", "number", "boolean", "array", "object", "null",
];

/// Top-level keys that make a schema explicit whatever their value. Every `$` keyword counts too.
const STRUCTURAL_KEYWORDS: &[&str] = &[
    "type",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "unevaluatedProperties",
    "propertyNames",
    "dependentRequired",
    "dependentSchemas",
    "minProperties",
    "maxProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "if",
    "then",
    "else",
    "enum",
    "const",
    "definitions",
];

/// The other draft 2020-12 keywords: explicit only when their value could not be a shorthand
/// property (see [`normalize`]).
const OTHER_KEYWORDS: &[&str] = &[
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "format",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "items",
    "prefixItems",
    "contains",
    "minContains",
    "maxContains",
    "minItems",
    "maxItems",
    "uniqueItems",
    "unevaluatedItems",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
];

/// Expands the shorthand form; explicit schemas pass through unchanged.
///
/// - `null` and `{}` become `{"type": "object", "properties": {}}`.
/// - An object is an **explicit** schema when one of its top-level keys is a `$` keyword or a
///   structural one (`type`, `properties`, `required`, `additionalProperties`, `oneOf`, `enum`, …,
///   see `STRUCTURAL_KEYWORDS`), or when another JSON Schema keyword holds a value no shorthand
///   property could have: a number, an array, or a string that is not a type name
///   (`{"minLength": "x"}` is an explicit, invalid schema). So `title`, `description`, `pattern`
///   or `format` can still be shorthand property names (`{"title": "string"}`).
/// - Otherwise it is **shorthand**: property name → type name (`"integer"`) or property schema
///   (`{"type": "string", "default": "UTC", "description": "…"}`). It becomes
///   `{"type": "object", "properties": {…}, "required": […]}` where `required` lists the properties
///   *without* a `default` (and is left out when empty). Descriptions and defaults are kept. A
///   property that is optional but has no default needs the explicit form.
/// - Shorthand leaves `additionalProperties` unset, so extra arguments are allowed: the model is
///   told the properties, and a tool that must refuse extras says so with an explicit schema.
/// - Anything else (`true`, a number) passes through and is refused by the checks that follow.
pub fn normalize(schema: &Value) -> Value {
    match schema {
        Value::Null => json!({"type": "object", "properties": {}}),
        Value::Object(map) if !is_explicit(map) => {
            let mut properties = Map::new();
            let mut required = Vec::new();
            for (name, property) in map {
                let property = match property {
                    Value::String(type_name) => json!({"type": type_name}),
                    other => other.clone(),
                };
                if property.get("default").is_none() {
                    required.push(Value::String(name.clone()));
                }
                properties.insert(name.clone(), property);
            }
            let mut normalized = Map::new();
            normalized.insert("type".to_owned(), json!("object"));
            normalized.insert("properties".to_owned(), Value::Object(properties));
            if !required.is_empty() {
                normalized.insert("required".to_owned(), Value::Array(required));
            }
            Value::Object(normalized)
        }
        other => other.clone(),
    }
}

fn is_explicit(map: &Map<String, Value>) -> bool {
    map.iter().any(|(key, value)| {
        key.starts_with('$')
            || STRUCTURAL_KEYWORDS.contains(&key.as_str())
            || (OTHER_KEYWORDS.contains(&key.as_str())
                && match value {
                    Value::Object(_) | Value::Bool(_) => false,
                    Value::String(s) => !TYPE_NAMES.contains(&s.as_str()),
                    Value::Null | Value::Number(_) | Value::Array(_) => true,
                })
    })
}

/// Which of a tool's schemas an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchemaRole {
    Input,
    Output,
}

impl fmt::Display for SchemaRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SchemaRole::Input => "input schema",
            SchemaRole::Output => "output schema",
        })
    }
}

/// Why a tool could not be loaded. Each message names the plugin, the tool and the problem, with
/// the path in the schema where there is one; the daemon refuses to start with it.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// A plugin or tool name our naming scheme or the Messages API cannot carry.
    #[error("plugin `{plugin}`, tool `{tool}`: bad name: {reason}")]
    BadName {
        plugin: String,
        tool: String,
        reason: String,
    },
    /// `mcp__harness__<plugin>__<tool>` is over the Messages API's 64 characters.
    #[error(
        "plugin `{plugin}`, tool `{tool}`: the name the model sees, `{model_name}`, has {len} characters; \
         the Messages API allows at most 64"
    )]
    NameTooLong {
        plugin: String,
        tool: String,
        model_name: String,
        len: usize,
    },
    /// Two tools share a name; `tools/call` could not tell them apart.
    #[error("plugin `{plugin}`, tool `{tool}`: the tool name `{name}` is registered twice")]
    Duplicate {
        name: String,
        plugin: String,
        tool: String,
    },
    /// The schema is not valid draft 2020-12 (checked against the meta-schema). Each problem's
    /// pointer is a path in the (normalized) schema, ending at the bad keyword.
    #[error(
        "plugin `{plugin}`, tool `{tool}`: the {role} is not a valid JSON Schema (draft 2020-12):{}",
        render_problems(problems)
    )]
    InvalidSchema {
        plugin: String,
        tool: String,
        role: SchemaRole,
        problems: Vec<Violation>,
    },
    /// Valid JSON Schema, but the Messages API would refuse it, which would fail every request.
    #[error(
        "plugin `{plugin}`, tool `{tool}`: the input schema would be refused by the Messages API: \
         at `{pointer}`: {problem}"
    )]
    NotApiSafe {
        plugin: String,
        tool: String,
        pointer: String,
        problem: String,
    },
    /// The schema passed the meta-schema but `jsonschema` could not compile it (a bad regex, a
    /// `$ref` it cannot resolve).
    #[error(
        "plugin `{plugin}`, tool `{tool}`: the {role} does not compile: at `{pointer}`: {message}"
    )]
    Compile {
        plugin: String,
        tool: String,
        role: SchemaRole,
        pointer: String,
        message: String,
    },
}

fn render_problems(problems: &[Violation]) -> String {
    problems
        .iter()
        .map(|p| format!("\n- at `{}`: {}", p.pointer, p.message))
        .collect()
}

/// Builds [`SchemaError`]s for one schema of one tool.
struct ErrorSite<'a> {
    plugin: &'a str,
    tool: &'a str,
    role: SchemaRole,
}

impl<'a> ErrorSite<'a> {
    fn new(plugin: &'a str, tool: &'a str, role: SchemaRole) -> Self {
        Self { plugin, tool, role }
    }

    fn invalid(&self, problems: Vec<Violation>) -> SchemaError {
        SchemaError::InvalidSchema {
            plugin: self.plugin.to_owned(),
            tool: self.tool.to_owned(),
            role: self.role,
            problems,
        }
    }

    fn not_api_safe(&self, refusal: advertise::Refusal) -> SchemaError {
        SchemaError::NotApiSafe {
            plugin: self.plugin.to_owned(),
            tool: self.tool.to_owned(),
            pointer: refusal.pointer,
            problem: refusal.problem,
        }
    }

    fn compile(&self, failure: Violation) -> SchemaError {
        SchemaError::Compile {
            plugin: self.plugin.to_owned(),
            tool: self.tool.to_owned(),
            role: self.role,
            pointer: failure.pointer,
            message: failure.message,
        }
    }
}

/// The `$schema` values we accept: validation always runs draft 2020-12.
const DRAFT_2020_12_URIS: [&str; 2] = [
    "https://json-schema.org/draft/2020-12/schema",
    "https://json-schema.org/draft/2020-12/schema#",
];

/// Checks a schema against the draft 2020-12 meta-schema; `Err` lists every problem, with the path
/// in the schema.
fn check_is_2020_12(schema: &Value) -> Result<(), Vec<Violation>> {
    if let Some(declared) = schema.get("$schema") {
        if !declared
            .as_str()
            .is_some_and(|uri| DRAFT_2020_12_URIS.contains(&uri))
        {
            return Err(vec![Violation {
                pointer: "/$schema".to_owned(),
                message: format!(
                    "{declared} is not supported: tool schemas are draft 2020-12 ({})",
                    DRAFT_2020_12_URIS[0]
                ),
            }]);
        }
    }
    let mut problems: Vec<Violation> = Vec::new();
    for problem in violations(&jsonschema::draft202012::meta::validator(), schema) {
        if !problems.contains(&problem) {
            problems.push(problem);
        }
    }
    if problems.is_empty() {
        problems = bad_regexes(schema);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// Every `pattern` and `patternProperties` key that is not a regular expression. The meta-schema
/// only annotates them as `"format": "regex"`, and `jsonschema`'s own compile error would name the
/// enclosing schema, not the keyword; so each one is compiled alone, by the same engine.
fn bad_regexes(schema: &Value) -> Vec<Violation> {
    let compiles = |probe: Value| build_validator(&probe, true).is_ok();
    let mut bad = Vec::new();
    let _ = advertise::walk(schema, "", &mut |node, pointer| {
        if let Some(Value::String(pattern)) = node.get("pattern") {
            if !compiles(json!({ "pattern": pattern })) {
                bad.push(Violation {
                    pointer: format!("{pointer}/pattern"),
                    message: format!("{pattern:?} is not a valid regular expression"),
                });
            }
        }
        if let Some(Value::Object(patterns)) = node.get("patternProperties") {
            for pattern in patterns.keys() {
                if !compiles(json!({ "patternProperties": { pattern: true } })) {
                    bad.push(Violation {
                        pointer: format!(
                            "{pointer}/patternProperties/{}",
                            advertise::escape(pattern)
                        ),
                        message: format!("{pattern:?} is not a valid regular expression"),
                    });
                }
            }
        }
        Ok(())
    });
    bad
}

/// Every error `validator` finds in `instance`, ordered by pointer (root first) so that related
/// problems sit together; `jsonschema`'s order is kept among problems at one place.
fn violations(validator: &Validator, instance: &Value) -> Vec<Violation> {
    let mut violations: Vec<Violation> = validator
        .iter_errors(instance)
        .map(|error| Violation {
            pointer: error.instance_path().as_str().to_owned(),
            message: error.to_string(),
        })
        .collect();
    violations.sort_by(|a, b| pointer_order(&a.pointer, &b.pointer));
    violations
}

/// Orders JSON pointers segment by segment, array indexes by number (`/tags/2` before `/tags/10`).
fn pointer_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut a, mut b) = (a.split('/'), b.split('/'));
    loop {
        let order = match (a.next(), b.next()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) => match (x.parse::<u64>(), y.parse::<u64>()) {
                (Ok(x), Ok(y)) => x.cmp(&y),
                _ => x.cmp(y),
            },
        };
        if order.is_ne() {
            return order;
        }
    }
}

/// Compiles a schema as draft 2020-12 with no fetching, `format` asserted when `formats`. `Err`
/// says where (the pointer `jsonschema` reports) and what.
fn build_validator(schema: &Value, formats: bool) -> Result<Validator, Violation> {
    jsonschema::options()
        .with_draft(Draft::Draft202012)
        .should_validate_formats(formats)
        .with_retriever(NoFetch)
        .build(schema)
        .map_err(|error| Violation {
            pointer: error.instance_path().as_str().to_owned(),
            message: error.to_string(),
        })
}

/// Refuses to fetch anything: schemas are self-contained and loading a tool does no IO.
struct NoFetch;

impl jsonschema::Retrieve for NoFetch {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        Err(format!("`{uri}` is not fetched: tool schemas must be self-contained").into())
    }
}
