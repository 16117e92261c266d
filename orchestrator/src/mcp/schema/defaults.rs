//! Filling schema `default`s into a tool's input before it is validated.
//!
//! The CLI sends `{}` when the model leaves everything out (protocol doc §6.5), so the daemon fills
//! the defaults the model was shown. Only values that are present are descended into: an omitted
//! object property is created only when it has a `default` of its own.

use serde_json::{Map, Value};

use super::advertise::resolve_local_ref;

/// How deep defaults are filled and how many `$ref`/`allOf` hops are followed in one place; a
/// guard against pathological schemas, far beyond any real tool input.
const MAX_DEPTH: usize = 64;

/// Fills omitted properties of `instance` from `schema`'s defaults, recursively.
pub(super) fn fill(schema: &Value, instance: &mut Value) {
    fill_at(schema, schema, instance, 0);
}

fn fill_at(root: &Value, schema: &Value, instance: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut views = Vec::new();
    applicable(root, schema, &mut views, 0);
    match instance {
        Value::Object(object) => {
            for view in &views {
                let Some(Value::Object(properties)) = view.get("properties") else {
                    continue;
                };
                for (name, property) in properties {
                    if let Some(value) = object.get_mut(name) {
                        fill_at(root, property, value, depth + 1);
                    } else if let Some(default) = default_of(root, property) {
                        let mut value = default.clone();
                        fill_at(root, property, &mut value, depth + 1);
                        object.insert(name.clone(), value);
                    }
                }
            }
        }
        Value::Array(items) => {
            for view in &views {
                let prefix = match view.get("prefixItems") {
                    Some(Value::Array(prefix)) => prefix.as_slice(),
                    _ => &[],
                };
                for (index, item) in items.iter_mut().enumerate() {
                    match prefix.get(index).or_else(|| view.get("items")) {
                        Some(item_schema) => fill_at(root, item_schema, item, depth + 1),
                        None => break,
                    }
                }
            }
        }
        _ => {}
    }
}

/// The schema objects that apply unconditionally at one place: `schema` itself, then what its
/// `$ref` and `allOf` lead to. Conditional branches (`oneOf`, `anyOf`, `if`) are not followed: a
/// default there would depend on which branch the input takes.
fn applicable<'s>(
    root: &'s Value,
    schema: &'s Value,
    views: &mut Vec<&'s Map<String, Value>>,
    hops: usize,
) {
    let Value::Object(node) = schema else {
        return;
    };
    if hops > MAX_DEPTH {
        return;
    }
    views.push(node);
    if let Some(target) = node
        .get("$ref")
        .and_then(Value::as_str)
        .and_then(|r| resolve_local_ref(root, r).ok())
    {
        applicable(root, target, views, hops + 1);
    }
    if let Some(Value::Array(all)) = node.get("allOf") {
        for member in all {
            applicable(root, member, views, hops + 1);
        }
    }
}

/// A property's `default`: its own first, then one found through `$ref` or `allOf`.
fn default_of<'s>(root: &'s Value, property: &'s Value) -> Option<&'s Value> {
    let mut views = Vec::new();
    applicable(root, property, &mut views, 0);
    views.into_iter().find_map(|view| view.get("default"))
}
