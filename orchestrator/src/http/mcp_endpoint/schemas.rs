//! JSON Schemas for `/mcp`'s thread tools, derived from the types the HTTP API documents
//! (`utoipa::ToSchema`), so a field added to a body is in the tool's schema by the same edit.
//!
//! [`of`] gives a type's schema self-contained: every `$ref` into the OpenAPI components is
//! replaced by the component, and an `allOf` of objects (a `#[serde(flatten)]`) is merged into
//! one object. [`Fields`] names the properties a tool shows, some renamed (`id` is `threadId`
//! over MCP); it projects the schema and the values alike, so the two cannot differ. No IO.

use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `T`'s schema, self-contained (see the module's doc).
pub fn of<T: ToSchema>() -> Value {
    let mut components = Vec::new();
    T::schemas(&mut components);
    let components: Map<String, Value> = components
        .into_iter()
        .map(|(name, schema)| (name, serde_json::to_value(schema).unwrap_or_default()))
        .collect();
    let root = serde_json::to_value(T::schema()).unwrap_or_default();
    merge_all_of(inline(root, &components, &mut Vec::new()))
}

/// The properties a tool shows of a type: `(the type's name, the tool's name)`.
#[derive(Clone, Copy)]
pub struct Fields(pub &'static [(&'static str, &'static str)]);

impl Fields {
    /// `schema` (an object schema) with these properties only, renamed; `required` kept for
    /// those that stay. Other keywords (`additionalProperties`) are left out.
    pub fn schema(&self, schema: &Value) -> Value {
        let properties = schema.get("properties").and_then(Value::as_object);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let mut kept = Map::new();
        let mut needed = Vec::new();
        for (from, to) in self.0 {
            let property = properties.and_then(|p| p.get(*from)).cloned();
            kept.insert((*to).to_owned(), property.unwrap_or(Value::Bool(true)));
            if required.contains(from) {
                needed.push(Value::String((*to).to_owned()));
            }
        }
        let mut out = Map::new();
        out.insert("type".into(), Value::String("object".into()));
        out.insert("properties".into(), Value::Object(kept));
        if !needed.is_empty() {
            out.insert("required".into(), Value::Array(needed));
        }
        Value::Object(out)
    }

    /// `value` (an object) with these properties only, renamed; one it leaves out is `null`.
    pub fn value(&self, value: &Value) -> Map<String, Value> {
        self.0
            .iter()
            .map(|(from, to)| {
                let field = value.get(*from).cloned().unwrap_or(Value::Null);
                ((*to).to_owned(), field)
            })
            .collect()
    }
}

/// Two object schemas as one: the properties and `required` of both.
pub fn merged(mut first: Value, second: &Value) -> Value {
    for key in ["properties", "required"] {
        let Some(more) = second.get(key).cloned() else {
            continue;
        };
        match (first.get_mut(key), more) {
            (Some(Value::Object(have)), Value::Object(more)) => have.extend(more),
            (Some(Value::Array(have)), Value::Array(more)) => have.extend(more),
            (_, more) => {
                if let Some(object) = first.as_object_mut() {
                    object.insert(key.to_owned(), more);
                }
            }
        }
    }
    first
}

/// `schema` refusing properties it does not name (a tool's arguments).
pub fn closed(mut schema: Value) -> Value {
    if let Some(object) = schema.as_object_mut() {
        object.insert("additionalProperties".into(), Value::Bool(false));
    }
    schema
}

/// `value` with every `{"$ref": "#/components/schemas/X"}` replaced by `X` (its siblings, a
/// description, kept). A component met again inside itself is left open (`true`).
fn inline(value: Value, components: &Map<String, Value>, seen: &mut Vec<String>) -> Value {
    match value {
        Value::Object(mut map) => {
            let target = map
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
                .map(str::to_owned);
            if let Some(name) = target {
                map.remove("$ref");
                if seen.contains(&name) {
                    return Value::Bool(true);
                }
                let component = components.get(&name).cloned().unwrap_or(Value::Bool(true));
                seen.push(name);
                let mut resolved = inline(component, components, seen);
                seen.pop();
                if let Value::Object(resolved) = &mut resolved {
                    for (key, sibling) in map {
                        resolved.insert(key, inline(sibling, components, seen));
                    }
                }
                return resolved;
            }
            let map = map
                .into_iter()
                .map(|(key, v)| (key, inline(v, components, seen)))
                .collect();
            Value::Object(map)
        }
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| inline(v, components, seen))
                .collect(),
        ),
        other => other,
    }
}

/// An `allOf` whose members are all object schemas, as one object schema.
fn merge_all_of(schema: Value) -> Value {
    let Some(members) = schema.get("allOf").and_then(Value::as_array) else {
        return schema;
    };
    let objects = members
        .iter()
        .all(|m| m.get("type").and_then(Value::as_str) == Some("object"));
    if !objects {
        return schema;
    }
    let mut one = serde_json::json!({"type": "object", "properties": {}});
    for member in members {
        one = merged(one, &merge_all_of(member.clone()));
    }
    one
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn references_are_inlined_and_flattened_objects_merged() {
        let schema = of::<crate::api::ThreadSummary>();
        let text = schema.to_string();
        assert!(!text.contains("$ref"), "{text}");
        assert_eq!(schema["type"], "object", "{schema}");
        for field in ["id", "createdAt", "lastActivityAt", "running", "tags"] {
            assert!(
                schema["properties"].get(field).is_some(),
                "{field}: {schema}"
            );
        }
        // The workspace, a component of its own, is there in full.
        let workspace = schema["properties"]["workspace"].to_string();
        assert!(workspace.contains("worktree"), "{workspace}");
        jsonschema::validator_for(&schema).expect("a valid JSON Schema");
    }

    #[test]
    fn fields_project_the_schema_and_the_value_alike() {
        let fields = Fields(&[("id", "threadId"), ("title", "title")]);
        let schema = json!({
            "type": "object",
            "properties": {"id": {"type": "string"}, "title": {"type": ["string", "null"]},
                           "secret": {"type": "string"}},
            "required": ["id", "secret"],
            "additionalProperties": false
        });
        assert_eq!(
            fields.schema(&schema),
            json!({
                "type": "object",
                "properties": {"threadId": {"type": "string"}, "title": {"type": ["string", "null"]}},
                "required": ["threadId"]
            })
        );
        let value = json!({"id": "thr_1", "secret": "s"});
        assert_eq!(
            Value::Object(fields.value(&value)),
            json!({"threadId": "thr_1", "title": null})
        );
    }
}
