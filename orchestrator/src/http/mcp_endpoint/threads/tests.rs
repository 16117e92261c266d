//! The thread tools' schemas are the HTTP API's, projected: a field of a body is the same field
//! of a tool, and every schema compiles as a tool's.

use serde_json::Value;

use super::*;

/// The thread tools' specs (the copy without a caller: only its specs are read).
fn specs() -> Vec<ToolSpec> {
    vec![
        Create::spec_only(),
        Send::spec_only(),
        Get::spec_only(),
        List::spec_only(),
    ]
}

fn property<'a>(schema: &'a Value, name: &str) -> &'a Value {
    schema["properties"]
        .get(name)
        .unwrap_or_else(|| panic!("no property {name} in {schema}"))
}

#[test]
fn every_thread_tool_has_a_policy_and_compiles() {
    for spec in specs() {
        let name = format!("{PLUGIN}__{}", spec.name);
        assert!(policy_of(&name).is_some(), "{name} declares no policy");
        crate::mcp::schema::compile_tool(PLUGIN, &spec)
            .unwrap_or_else(|err| panic!("{name}: {err}"));
        let text = format!("{} {:?}", spec.input_schema, spec.output_schema);
        assert!(
            !text.contains("$ref"),
            "{name} is not self-contained: {text}"
        );
    }
    assert_eq!(POLICIES.len(), specs().len(), "a policy names no tool");
    assert_eq!(
        policy_of("threads__send").map(|p| p.runs),
        Some(Runs::Owner)
    );
    assert!(!policy_of("threads__get").is_some_and(|p| p.changes()));
    assert!(policy_of("time__current_time").is_none());
}

#[test]
fn create_takes_the_fields_of_the_http_body() {
    let body = schemas::of::<CreateThread>();
    let input = Create::spec_only().input_schema;
    assert_eq!(input["additionalProperties"], false, "{input}");
    for (field, _) in CREATE_ARGUMENTS.0 {
        assert_eq!(property(&input, field), property(&body, field), "{field}");
    }
}

#[test]
fn list_takes_the_fields_of_the_http_filters() {
    let filters = schemas::of::<ThreadFilters>();
    let input = List::spec_only().input_schema;
    for (field, _) in LIST_ARGUMENTS.0 {
        assert_eq!(
            property(&input, field),
            property(&filters, field),
            "{field}"
        );
    }
}

#[test]
fn results_show_the_http_types_fields_renamed() {
    let thread = schemas::of::<Thread>();
    let created = Create::spec_only().output_schema.expect("an output schema");
    assert_eq!(property(&created, "threadId"), property(&thread, "id"));
    assert_eq!(property(&created, "title"), property(&thread, "title"));
    let required: Vec<&str> = created["required"]
        .as_array()
        .expect("required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(required.contains(&"threadId"), "{created}");
    let page = schemas::of::<MessagePage>();
    let got = Get::spec_only().output_schema.expect("an output schema");
    assert_eq!(
        property(&got, "messages")["items"],
        property(&page, "messages")["items"]
    );
    assert_eq!(
        property(&got, "messagesCursor"),
        property(&page, "nextCursor")
    );
    let listed = List::spec_only().output_schema.expect("an output schema");
    let summary = schemas::of::<ThreadSummary>();
    let items = &property(&listed, "threads")["items"];
    assert_eq!(property(items, "running"), property(&summary, "running"));
    assert_eq!(property(items, "threadId"), property(&summary, "id"));
}

#[test]
fn send_names_the_http_body_model_rule() {
    let body = schemas::of::<PostMessage>();
    let input = Send::spec_only().input_schema;
    let (ours, theirs) = (property(&input, "model"), property(&body, "model"));
    for keyword in ["minLength", "maxLength", "pattern"] {
        assert_eq!(ours[keyword], theirs[keyword], "{keyword}");
    }
}

#[test]
fn a_thread_and_its_page_are_shown_with_mcp_names() {
    let value = serde_json::json!({"id": "thr_1", "title": "t", "createdAt": "x", "extra": 1});
    let shown = Value::Object(THREAD.value(&value));
    assert_eq!(shown["threadId"], "thr_1");
    assert_eq!(shown["workspace"], Value::Null, "absent is null");
    assert!(shown.get("extra").is_none());
    assert!(shown.get("id").is_none());
}
