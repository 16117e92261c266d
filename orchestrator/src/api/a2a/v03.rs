//! A2A v0.3's JSON from v1.0's and back, for the callers that still speak v0.3 (its JSON-RPC
//! method names, `http::a2a::legacy`; its push notifications, `crate::webhooks`). No IO.
//!
//! v0.3 tags each object with `kind` (`task`, `message`, `status-update`, `artifact-update`,
//! and `text`, `data`, `file` for a part), writes states and roles in lower case
//! (`input-required`, `agent`), keeps a file in a `file` object (`uri` or `bytes`, `mimeType`,
//! `name`), and answers a stream's events bare where v1.0 wraps each in a `StreamResponse`.
//! These functions follow `a2a.compat.v0_3.conversions` of the official Python SDK.

use serde_json::{json, Map, Value};

/// v0.3's state for v1.0's (`TASK_STATE_INPUT_REQUIRED` → `input-required`).
pub fn state(v1: &str) -> String {
    let name = v1.strip_prefix("TASK_STATE_").unwrap_or(v1);
    name.to_ascii_lowercase().replace('_', "-")
}

/// Whether a status update in v0.3 `state` ends its stream (`final`): a final state, or the
/// input a stream of Harness's stops at.
fn ends(state: &str) -> bool {
    matches!(
        state,
        "completed" | "canceled" | "failed" | "rejected" | "input-required"
    )
}

/// A v1.0 part in v0.3's shape.
pub fn part(v1: &Value) -> Value {
    let mut out = Map::new();
    if let Some(text) = v1.get("text") {
        out.insert("kind".into(), json!("text"));
        out.insert("text".into(), text.clone());
    } else if let Some(data) = v1.get("data") {
        out.insert("kind".into(), json!("data"));
        out.insert("data".into(), data.clone());
    } else {
        let mut file = Map::new();
        match (v1.get("url"), v1.get("raw")) {
            (Some(url), _) => file.insert("uri".into(), url.clone()),
            (None, raw) => file.insert("bytes".into(), raw.cloned().unwrap_or(json!(""))),
        };
        for (from, to) in [("mediaType", "mimeType"), ("filename", "name")] {
            if let Some(value) = v1.get(from) {
                file.insert(to.into(), value.clone());
            }
        }
        out.insert("kind".into(), json!("file"));
        out.insert("file".into(), Value::Object(file));
    }
    if let Some(metadata) = v1.get("metadata") {
        out.insert("metadata".into(), metadata.clone());
    }
    Value::Object(out)
}

/// A v0.3 part in v1.0's shape; `None` for one of no kind v0.3 has.
pub fn part_v1(v03: &Value) -> Option<Value> {
    let mut out = match v03.get("kind").and_then(Value::as_str)? {
        "text" => json!({"text": v03.get("text")?}),
        "data" => json!({"data": v03.get("data")?}),
        "file" => {
            let file = v03.get("file")?;
            let mut out = match (file.get("uri"), file.get("bytes")) {
                (Some(uri), _) => json!({"url": uri}),
                (None, Some(bytes)) => json!({"raw": bytes}),
                (None, None) => return None,
            };
            for (from, to) in [("mimeType", "mediaType"), ("name", "filename")] {
                if let Some(value) = file.get(from) {
                    out[to] = value.clone();
                }
            }
            out
        }
        _ => return None,
    };
    if let Some(metadata) = v03.get("metadata") {
        out["metadata"] = metadata.clone();
    }
    Some(out)
}

/// A v1.0 message in v0.3's shape.
pub fn message(v1: &Value) -> Value {
    let mut out = copied(v1, &["messageId", "contextId", "taskId", "metadata"]);
    out.insert("kind".into(), json!("message"));
    let role = match v1.get("role").and_then(Value::as_str) {
        Some("ROLE_USER") => "user",
        _ => "agent",
    };
    out.insert("role".into(), json!(role));
    out.insert("parts".into(), parts(v1));
    Value::Object(out)
}

/// A v0.3 message in v1.0's shape: its parts, its role; `Err` names what is not v0.3's.
pub fn message_v1(v03: &Value) -> Result<Value, String> {
    let mut out = copied(v03, &["messageId", "contextId", "taskId", "metadata"]);
    let role = match v03.get("role").and_then(Value::as_str) {
        Some("user") | None => "ROLE_USER",
        Some("agent") => "ROLE_AGENT",
        Some(other) => return Err(format!("message.role {other:?} is neither user nor agent")),
    };
    out.insert("role".into(), json!(role));
    let parts = v03.get("parts").and_then(Value::as_array);
    let parts: Option<Vec<Value>> = parts.and_then(|p| p.iter().map(part_v1).collect());
    let parts = parts.ok_or("message.parts holds parts of kind text, data or file")?;
    out.insert("parts".into(), Value::Array(parts));
    Ok(Value::Object(out))
}

/// A v1.0 task status in v0.3's shape.
pub fn status(v1: &Value) -> Value {
    let mut out = copied(v1, &["timestamp"]);
    let state_v1 = v1.get("state").and_then(Value::as_str).unwrap_or("unknown");
    out.insert("state".into(), json!(state(state_v1)));
    if let Some(said) = v1.get("message") {
        out.insert("message".into(), message(said));
    }
    Value::Object(out)
}

/// A v1.0 artifact in v0.3's shape.
pub fn artifact(v1: &Value) -> Value {
    let mut out = copied(v1, &["artifactId", "name", "description", "metadata"]);
    out.insert("parts".into(), parts(v1));
    Value::Object(out)
}

/// A v1.0 task in v0.3's shape.
pub fn task(v1: &Value) -> Value {
    let mut out = copied(v1, &["id", "contextId", "metadata"]);
    out.insert("kind".into(), json!("task"));
    out.insert("status".into(), status(&v1["status"]));
    if let Some(artifacts) = v1.get("artifacts").and_then(Value::as_array) {
        out.insert("artifacts".into(), artifacts.iter().map(artifact).collect());
    }
    Value::Object(out)
}

/// A v1.0 `StreamResponse` (`task`, `message`, `statusUpdate` or `artifactUpdate`) as v0.3's
/// bare event.
pub fn event(v1: &Value) -> Value {
    if let Some(task_v1) = v1.get("task") {
        return task(task_v1);
    }
    if let Some(said) = v1.get("message") {
        return message(said);
    }
    if let Some(update) = v1.get("statusUpdate") {
        let mut out = copied(update, &["taskId", "contextId", "metadata"]);
        let status = status(&update["status"]);
        let last = ends(status["state"].as_str().unwrap_or_default());
        out.insert("kind".into(), json!("status-update"));
        out.insert("status".into(), status);
        out.insert("final".into(), json!(last));
        return Value::Object(out);
    }
    if let Some(update) = v1.get("artifactUpdate") {
        let mut out = copied(
            update,
            &["taskId", "contextId", "append", "lastChunk", "metadata"],
        );
        out.insert("kind".into(), json!("artifact-update"));
        out.insert("artifact".into(), artifact(&update["artifact"]));
        return Value::Object(out);
    }
    v1.clone()
}

/// A v1.0 push notification (a `StreamResponse` with the task's status update) as v0.3 sends
/// one: the task, with that status.
pub fn push(v1: &Value) -> Value {
    let update = &v1["statusUpdate"];
    json!({
        "kind": "task",
        "id": update["taskId"],
        "contextId": update["contextId"],
        "status": status(&update["status"]),
    })
}

/// The parts of a v1.0 message or artifact, in v0.3's shape.
fn parts(v1: &Value) -> Value {
    let parts = v1.get("parts").and_then(Value::as_array);
    parts
        .map_or_else(Vec::new, |p| p.iter().map(part).collect())
        .into()
}

/// The `fields` of `value` that it has.
fn copied(value: &Value, fields: &[&str]) -> Map<String, Value> {
    fields
        .iter()
        .filter_map(|field| Some(((*field).to_owned(), value.get(*field)?.clone())))
        .collect()
}

#[cfg(test)]
mod tests;
