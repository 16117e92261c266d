//! ACP's vocabulary against the daemon's, with no IO: a prompt's content blocks become a
//! message's content, a thread event becomes a `session/update`, a stored message and its
//! turn's stored events become the updates that replay them. Every case is a value test.

use serde_json::{json, Value};

/// The `session/update` a thread event becomes while a turn runs, when it has one.
/// `deltas_seen`: text came as `text_delta`s, so the complete `assistant_text` is not sent again.
pub fn update_for(kind: &str, data: &Value, deltas_seen: bool) -> Option<Value> {
    match kind {
        "text_delta" => Some(chunk("agent_message_chunk", data["text"].as_str()?)),
        "assistant_text" if !deltas_seen => {
            Some(chunk("agent_message_chunk", data["text"].as_str()?))
        }
        "assistant_thinking" => {
            let thinking = data["thinking"].as_str().filter(|t| !t.is_empty())?;
            Some(chunk("agent_thought_chunk", thinking))
        }
        // The CLI's to-do list is the agent's plan: shown as one, not as a tool call.
        "tool_call_started" if data["name"] == "TodoWrite" => plan(&data["input"]),
        "tool_call_finished" if data["name"] == "TodoWrite" => None,
        "tool_call_started" => Some(tool_call(data)),
        "tool_call_finished" => Some(tool_call_update(data)),
        _ => None,
    }
}

/// ACP's `plan` from a `TodoWrite` input (`{todos: [{content, status, activeForm}]}`): each
/// to-do an entry, its status as the CLI keeps it (`pending`, `in_progress`, `completed`, which
/// are ACP's too), all of one priority (the CLI has none).
pub fn plan(input: &Value) -> Option<Value> {
    let entries: Vec<Value> = input["todos"]
        .as_array()?
        .iter()
        .filter_map(|todo| {
            let status = match todo["status"].as_str()? {
                status @ ("pending" | "in_progress" | "completed") => status,
                _ => "pending",
            };
            Some(json!({"content": todo["content"].as_str()?, "priority": "medium", "status": status}))
        })
        .collect();
    Some(json!({"sessionUpdate": "plan", "entries": entries}))
}

/// `{sessionUpdate, content: {type: text, text}}`.
pub fn chunk(update: &str, text: &str) -> Value {
    json!({"sessionUpdate": update, "content": {"type": "text", "text": text}})
}

/// `tool_call` from `tool_call_started` (`tool_use_id`, `name`, `input`).
pub fn tool_call(data: &Value) -> Value {
    let name = data["name"].as_str().unwrap_or("tool");
    json!({
        "sessionUpdate": "tool_call",
        "toolCallId": data["tool_use_id"],
        "title": tool_title(name, &data["input"]),
        "kind": tool_kind(name),
        "status": "in_progress",
        "rawInput": data["input"],
    })
}

/// `tool_call_update` from `tool_call_finished` (`tool_use_id`, `is_error`, `content`).
pub fn tool_call_update(data: &Value) -> Value {
    let failed = data["is_error"].as_bool().unwrap_or(false);
    let text = tool_output_text(&data["content"]);
    json!({
        "sessionUpdate": "tool_call_update",
        "toolCallId": data["tool_use_id"],
        "status": if failed { "failed" } else { "completed" },
        "content": [{"type": "content", "content": {"type": "text", "text": text}}],
        "rawOutput": data["content"],
    })
}

/// The ACP tool kind of a Claude Code tool, for the editor's icon.
pub fn tool_kind(name: &str) -> &'static str {
    match name {
        "Read" | "NotebookRead" | "LS" => "read",
        "Write" | "Edit" | "MultiEdit" | "NotebookEdit" => "edit",
        "Bash" | "BashOutput" | "KillShell" => "execute",
        "Glob" | "Grep" => "search",
        "WebFetch" | "WebSearch" => "fetch",
        "Task" | "TodoWrite" | "ExitPlanMode" => "think",
        _ => "other",
    }
}

/// A short title: the command, the path or the pattern the tool works on, else its name.
pub fn tool_title(name: &str, input: &Value) -> String {
    let detail = ["command", "file_path", "path", "pattern", "url", "query"]
        .iter()
        .find_map(|key| input[*key].as_str());
    match detail {
        Some(detail) => format!("{name}: {detail}"),
        None => name.to_owned(),
    }
}

/// A tool result's text: a string as it is, a list of content blocks as their texts.
fn tool_output_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// The message content for a prompt's ACP blocks: a string when it is all text, else the
/// Messages API blocks the daemon takes (images and PDFs as base64; text resources as text).
pub fn message_content(prompt: &[Value]) -> Result<Value, String> {
    let blocks = prompt
        .iter()
        .map(message_block)
        .collect::<Result<Vec<_>, _>>()?;
    if blocks.iter().all(|b| b["type"] == "text") {
        let texts: Vec<&str> = blocks.iter().filter_map(|b| b["text"].as_str()).collect();
        return Ok(Value::String(texts.join("\n\n")));
    }
    Ok(Value::Array(blocks))
}

fn message_block(block: &Value) -> Result<Value, String> {
    match block["type"].as_str().unwrap_or("") {
        "text" => Ok(json!({"type": "text", "text": block["text"].as_str().unwrap_or("")})),
        "image" => Ok(base64_block("image", &block["mimeType"], &block["data"])),
        "resource" => resource_block(&block["resource"]),
        "resource_link" => {
            let uri = block["uri"].as_str().unwrap_or("");
            let name = block["name"].as_str().unwrap_or(uri);
            Ok(json!({"type": "text", "text": format!("[{name}]({uri})")}))
        }
        other => Err(format!(
            "content blocks of type `{other}` are not supported"
        )),
    }
}

/// An embedded resource: its text with the URI above it, or a PDF as a document.
fn resource_block(resource: &Value) -> Result<Value, String> {
    let uri = resource["uri"].as_str().unwrap_or("");
    if let Some(text) = resource["text"].as_str() {
        return Ok(json!({"type": "text", "text": format!("{uri}:\n```\n{text}\n```")}));
    }
    match resource["mimeType"].as_str() {
        Some("application/pdf") => Ok(base64_block(
            "document",
            &resource["mimeType"],
            &resource["blob"],
        )),
        Some(image) if image.starts_with("image/") => Ok(base64_block(
            "image",
            &resource["mimeType"],
            &resource["blob"],
        )),
        other => Err(format!(
            "the resource {uri} ({}) is neither text, an image nor a PDF",
            other.unwrap_or("no media type")
        )),
    }
}

fn base64_block(kind: &str, media_type: &Value, data: &Value) -> Value {
    json!({"type": kind, "source": {"type": "base64", "media_type": media_type, "data": data}})
}

/// The update that replays one stored event of a turn between its prompt and its reply: its
/// thoughts, tool calls with their results, and plan. Not its text: the stored reply holds that.
pub fn replay_event(kind: &str, data: &Value) -> Option<Value> {
    match kind {
        "assistant_thinking" | "tool_call_started" | "tool_call_finished" => {
            update_for(kind, data, true)
        }
        _ => None,
    }
}

/// The updates that replay one stored message (`GET /api/threads/{id}`'s `messages`).
pub fn replay(message: &Value) -> Option<Value> {
    let text = message["content"].as_str().filter(|t| !t.is_empty())?;
    match message["role"].as_str()? {
        "user" => Some(chunk("user_message_chunk", text)),
        "assistant" => Some(chunk("agent_message_chunk", text)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_to_do_list_is_the_plan_and_not_a_tool_call() {
        let input = json!({"todos": [
            {"content": "Read the parser", "status": "completed", "activeForm": "Reading"},
            {"content": "Fix the bug", "status": "in_progress", "activeForm": "Fixing"},
            {"content": "Test it", "status": "pending", "activeForm": "Testing"},
        ]});
        let started = json!({"tool_use_id": "t1", "name": "TodoWrite", "input": input});
        let plan = update_for("tool_call_started", &started, false).expect("a plan");
        assert_eq!(plan["sessionUpdate"], "plan");
        let entries = plan["entries"].as_array().unwrap();
        let shown: Vec<(&str, &str)> = entries
            .iter()
            .map(|e| {
                (
                    e["content"].as_str().unwrap(),
                    e["status"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("Read the parser", "completed"),
                ("Fix the bug", "in_progress"),
                ("Test it", "pending")
            ]
        );
        let finished = json!({"tool_use_id": "t1", "name": "TodoWrite", "content": "ok"});
        assert_eq!(update_for("tool_call_finished", &finished, false), None);
    }

    #[test]
    fn turn_events_become_session_updates() {
        let delta = update_for("text_delta", &json!({"text": "he"}), false);
        assert_eq!(delta, Some(chunk("agent_message_chunk", "he")));
        assert_eq!(
            update_for("assistant_text", &json!({"text": "hello"}), true),
            None
        );
        assert_eq!(
            update_for("assistant_text", &json!({"text": "hello"}), false),
            Some(chunk("agent_message_chunk", "hello"))
        );
        assert_eq!(
            update_for("assistant_thinking", &json!({"thinking": "hm"}), false),
            Some(chunk("agent_thought_chunk", "hm"))
        );
        assert_eq!(
            update_for("assistant_thinking", &json!({"thinking": ""}), false),
            None
        );
        assert_eq!(update_for("process_ready", &json!({}), false), None);
        let started = json!({"tool_use_id": "t1", "name": "Bash", "input": {"command": "ls"}});
        let call = update_for("tool_call_started", &started, false).expect("a tool call");
        assert_eq!(call["toolCallId"], "t1");
        assert_eq!(call["kind"], "execute");
        assert_eq!(call["title"], "Bash: ls");
        assert_eq!(call["rawInput"], json!({"command": "ls"}));
        let finished = json!({"tool_use_id": "t1", "is_error": true, "content": [{"type": "text", "text": "no"}]});
        let update = update_for("tool_call_finished", &finished, false).expect("an update");
        assert_eq!(update["status"], "failed");
        assert_eq!(update["content"][0]["content"]["text"], "no");
    }

    #[test]
    fn prompts_become_message_content() {
        let text = json!({"type": "text", "text": "hi"});
        assert_eq!(
            message_content(std::slice::from_ref(&text)),
            Ok(json!("hi"))
        );
        let resource =
            json!({"type": "resource", "resource": {"uri": "file:///a.rs", "text": "fn a() {}"}});
        assert_eq!(
            message_content(&[text.clone(), resource]),
            Ok(json!("hi\n\nfile:///a.rs:\n```\nfn a() {}\n```"))
        );
        let image = json!({"type": "image", "mimeType": "image/png", "data": "AAA"});
        assert_eq!(
            message_content(&[text, image]),
            Ok(json!([
                {"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}
            ]))
        );
        assert!(message_content(&[json!({"type": "audio"})]).is_err());
    }

    #[test]
    fn a_replayed_turn_shows_thoughts_and_tools_but_not_its_text_twice() {
        let started = json!({"tool_use_id": "t1", "name": "Bash", "input": {"command": "ls"}});
        let finished = json!({"tool_use_id": "t1", "is_error": false, "content": "a\nb"});
        let call = replay_event("tool_call_started", &started).expect("a tool call");
        assert_eq!(call["sessionUpdate"], "tool_call");
        assert_eq!(call["title"], "Bash: ls");
        let done = replay_event("tool_call_finished", &finished).expect("its result");
        assert_eq!(done["status"], "completed");
        assert_eq!(done["content"][0]["content"]["text"], "a\nb");
        let thought = replay_event("assistant_thinking", &json!({"thinking": "hmm"}));
        assert_eq!(thought, Some(chunk("agent_thought_chunk", "hmm")));
        for kind in ["text_delta", "assistant_text", "turn_finished"] {
            assert_eq!(replay_event(kind, &json!({"text": "x"})), None, "{kind}");
        }
    }

    #[test]
    fn stored_messages_replay_by_role() {
        let user = json!({"role": "user", "content": "q"});
        assert_eq!(replay(&user), Some(chunk("user_message_chunk", "q")));
        let reply = json!({"role": "assistant", "content": "a"});
        assert_eq!(replay(&reply), Some(chunk("agent_message_chunk", "a")));
        assert_eq!(replay(&json!({"role": "user", "content": ""})), None);
    }
}
