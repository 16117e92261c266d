//! Tests for tool schemas: one `check` helper per feature, data in the tests, inline snapshots
//! (`UPDATE_EXPECT=1 cargo test -p orchestrator --lib mcp::schema` rewrites them).

use std::time::Duration;

use expect_test::{expect, Expect};
use plugin_contract::{Plugin, ToolSpec};
use serde_json::{json, Value};

use super::*;

fn spec(input_schema: Value, output_schema: Option<Value>) -> ToolSpec {
    ToolSpec {
        name: "probe".to_owned(),
        description: "A probe.".to_owned(),
        input_schema,
        output_schema,
        timeout: None,
    }
}

#[track_caller]
fn compile(input_schema: Value) -> CompiledTool {
    compile_tool("test", &spec(input_schema, None)).unwrap_or_else(|err| panic!("{err}"))
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).expect("JSON values serialize")
}

/// Every key anywhere in `value`, at any depth.
fn all_keys(value: &Value, keys: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, item) in map {
                keys.push(key.clone());
                all_keys(item, keys);
            }
        }
        Value::Array(items) => items.iter().for_each(|item| all_keys(item, keys)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------
// Normalization

#[track_caller]
fn check_normalize(schema: Value, expect: Expect) {
    let normalized = normalize(&schema);
    expect.assert_eq(&pretty(&normalized));
    // What normalize produces must be a loadable input schema.
    compile(schema);
}

#[test]
fn shorthand_primitives_are_required() {
    check_normalize(
        json!({"name": "string", "count": "integer", "ratio": "number", "on": "boolean", "nothing": "null"}),
        expect![[r#"
            {
              "properties": {
                "count": {
                  "type": "integer"
                },
                "name": {
                  "type": "string"
                },
                "nothing": {
                  "type": "null"
                },
                "on": {
                  "type": "boolean"
                },
                "ratio": {
                  "type": "number"
                }
              },
              "required": [
                "count",
                "name",
                "nothing",
                "on",
                "ratio"
              ],
              "type": "object"
            }"#]],
    );
}

#[test]
fn shorthand_defaulted_fields_are_optional_and_keep_descriptions() {
    check_normalize(
        json!({
            "timezone": {"type": "string", "default": "UTC", "description": "IANA timezone name"},
            "count": "integer",
            "limit": {"type": "integer", "description": "at most this many"}
        }),
        expect![[r#"
            {
              "properties": {
                "count": {
                  "type": "integer"
                },
                "limit": {
                  "description": "at most this many",
                  "type": "integer"
                },
                "timezone": {
                  "default": "UTC",
                  "description": "IANA timezone name",
                  "type": "string"
                }
              },
              "required": [
                "count",
                "limit"
              ],
              "type": "object"
            }"#]],
    );
}

#[test]
fn shorthand_all_defaulted_has_no_required() {
    check_normalize(
        json!({"verbose": {"type": "boolean", "default": false}, "depth": {"type": "integer", "default": 0}}),
        expect![[r#"
            {
              "properties": {
                "depth": {
                  "default": 0,
                  "type": "integer"
                },
                "verbose": {
                  "default": false,
                  "type": "boolean"
                }
              },
              "type": "object"
            }"#]],
    );
}

#[test]
fn shorthand_nested_arrays_and_enums_pass_through() {
    check_normalize(
        json!({
            "address": {
                "type": "object",
                "properties": {"zip": {"type": "string"}, "city": {"type": "string"}},
                "required": ["zip"]
            },
            "tags": {"type": "array", "items": {"type": "string"}, "description": "labels"},
            "unit": {"enum": ["celsius", "fahrenheit"], "default": "celsius"},
            "anything": true
        }),
        expect![[r#"
            {
              "properties": {
                "address": {
                  "properties": {
                    "city": {
                      "type": "string"
                    },
                    "zip": {
                      "type": "string"
                    }
                  },
                  "required": [
                    "zip"
                  ],
                  "type": "object"
                },
                "anything": true,
                "tags": {
                  "description": "labels",
                  "items": {
                    "type": "string"
                  },
                  "type": "array"
                },
                "unit": {
                  "default": "celsius",
                  "enum": [
                    "celsius",
                    "fahrenheit"
                  ]
                }
              },
              "required": [
                "address",
                "anything",
                "tags"
              ],
              "type": "object"
            }"#]],
    );
}

#[test]
fn shorthand_may_use_annotation_words_as_property_names() {
    check_normalize(
        json!({"title": "string", "description": "string", "pattern": {"type": "string"}, "format": "string"}),
        expect![[r#"
            {
              "properties": {
                "description": {
                  "type": "string"
                },
                "format": {
                  "type": "string"
                },
                "pattern": {
                  "type": "string"
                },
                "title": {
                  "type": "string"
                }
              },
              "required": [
                "description",
                "format",
                "pattern",
                "title"
              ],
              "type": "object"
            }"#]],
    );
}

#[test]
fn empty_and_null_schemas_take_no_arguments() {
    for schema in [json!({}), Value::Null] {
        check_normalize(
            schema,
            expect![[r#"
                {
                  "properties": {},
                  "type": "object"
                }"#]],
        );
    }
}

#[test]
fn explicit_schemas_pass_through_unchanged() {
    let explicit = [
        json!({"type": "object", "properties": {"a": {"type": "string"}}}),
        json!({"type": "object"}),
        json!({"properties": {"a": "not a schema"}}),
        json!({"type": "strng"}),
        json!({"minLength": "x"}),
        json!({"description": "No type here", "query": "string"}),
        json!({"$ref": "#/$defs/input", "$defs": {"input": {"type": "object"}}}),
        json!({"oneOf": [{"type": "object"}]}),
        json!({"required": ["a"], "a": "string"}),
        json!({"additionalProperties": false}),
        json!({"x-custom": 1, "type": "object"}),
        json!(true),
        json!("string"),
    ];
    for schema in explicit {
        assert_eq!(normalize(&schema), schema, "{schema} is explicit");
    }
}

// ---------------------------------------------------------------------------------------------
// Validation and defaults

/// A schema with a bit of everything the validator must handle.
fn person_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 1},
            "age": {"type": "integer", "minimum": 0},
            "score": {"type": "number"},
            "email": {"type": "string", "format": "email"},
            "born": {"type": "string", "format": "date-time"},
            "role": {"enum": ["admin", "user"], "default": "user"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "address": {"$ref": "#/$defs/address", "description": "where they live"},
            "contact": {
                "oneOf": [
                    {"type": "object", "properties": {"phone": {"type": "string"}}, "required": ["phone"]},
                    {"type": "object", "properties": {"email": {"type": "string"}}, "required": ["email"]}
                ]
            },
            "id": {"anyOf": [{"type": "integer"}, {"type": "string", "pattern": "^u-"}]}
        },
        "required": ["name"],
        "additionalProperties": false,
        "$defs": {
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string"},
                    "zip": {"type": "string", "pattern": "^[0-9]{5}$"},
                    "country": {"type": "string", "default": "DE"}
                },
                "required": ["zip"]
            }
        }
    })
}

/// Prepares each input and renders the outcome as the model or the tool would see it.
#[track_caller]
fn check_prepare(schema: Value, cases: Vec<(Value, Expect)>) {
    let tool = compile(schema.clone());
    for (input, expect) in cases {
        let rendered = match tool.prepare_input(input) {
            Ok(prepared) => format!("ok {prepared}"),
            Err(violations) => render_violations(&tool.name, &violations),
        };
        expect.assert_eq(&rendered);
    }
    assert_eq!(
        tool.input_schema,
        normalize(&schema),
        "defaults are cloned, never moved out of the schema"
    );
}

#[test]
fn valid_input_gets_defaults_and_passes() {
    check_prepare(
        person_schema(),
        vec![
            (
                json!({"name": "Ada"}),
                expect![[r#"ok {"name":"Ada","role":"user"}"#]],
            ),
            (
                json!({"name": "Ada", "role": "admin", "age": 36, "score": 1.5, "tags": ["x", "y"]}),
                expect![[
                    r#"ok {"age":36,"name":"Ada","role":"admin","score":1.5,"tags":["x","y"]}"#
                ]],
            ),
            (
                json!({"name": "Ada", "score": 2}),
                expect![[r#"ok {"name":"Ada","role":"user","score":2}"#]],
            ),
            (
                json!({"name": "Ada", "email": "ada@example.org", "born": "1815-12-10T08:00:00Z"}),
                expect![[
                    r#"ok {"born":"1815-12-10T08:00:00Z","email":"ada@example.org","name":"Ada","role":"user"}"#
                ]],
            ),
            (
                json!({"name": "Ada", "contact": {"phone": "123"}, "id": "u-7"}),
                expect![[
                    r#"ok {"contact":{"phone":"123"},"id":"u-7","name":"Ada","role":"user"}"#
                ]],
            ),
            (
                json!({"name": "Ada", "id": 7}),
                expect![[r#"ok {"id":7,"name":"Ada","role":"user"}"#]],
            ),
        ],
    );
}

#[test]
fn defaults_fill_nested_objects_through_ref_but_invent_none() {
    check_prepare(
        person_schema(),
        vec![
            (
                json!({"name": "Ada", "address": {"zip": "12345"}}),
                expect![[
                    r#"ok {"address":{"country":"DE","zip":"12345"},"name":"Ada","role":"user"}"#
                ]],
            ),
            (
                json!({"name": "Ada", "address": {"zip": "12345", "country": "FR"}}),
                expect![[
                    r#"ok {"address":{"country":"FR","zip":"12345"},"name":"Ada","role":"user"}"#
                ]],
            ),
            // Omitted `address` has no default of its own: not created.
            (
                json!({"name": "Ada"}),
                expect![[r#"ok {"name":"Ada","role":"user"}"#]],
            ),
        ],
    );
}

#[test]
fn defaults_fill_created_objects_array_items_and_all_of() {
    check_prepare(
        json!({
            "type": "object",
            "properties": {
                "options": {
                    "type": "object",
                    "default": {},
                    "properties": {
                        "verbose": {"type": "boolean", "default": false},
                        "limits": {"type": "object", "properties": {"max": {"type": "integer", "default": 10}}}
                    }
                },
                "jobs": {
                    "type": "array",
                    "items": {"type": "object", "properties": {"retries": {"type": "integer", "default": 3}}}
                },
                "pair": {
                    "type": "array",
                    "prefixItems": [{"type": "object", "properties": {"first": {"default": 1}}}],
                    "items": {"type": "object", "properties": {"rest": {"default": 2}}}
                },
                "mixed": {
                    "allOf": [
                        {"type": "object", "properties": {"a": {"default": "from allOf"}}},
                        {"$ref": "#/$defs/b"}
                    ]
                },
                "list": {"type": "array", "default": [1, 2]},
                "tz": {"$ref": "#/$defs/tz"}
            },
            "required": ["tz"],
            "$defs": {
                "b": {"type": "object", "properties": {"b": {"default": "from $ref"}}},
                "tz": {"type": "string", "default": "UTC"}
            }
        }),
        vec![
            (
                Value::Null,
                expect![[r#"ok {"list":[1,2],"options":{"verbose":false},"tz":"UTC"}"#]],
            ),
            (
                json!({
                    "options": {"limits": {}},
                    "jobs": [{}, {"retries": 0}],
                    "pair": [{}, {}, {}],
                    "mixed": {},
                    "tz": "Europe/Berlin"
                }),
                expect![[
                    r#"ok {"jobs":[{"retries":3},{"retries":0}],"list":[1,2],"mixed":{"a":"from allOf","b":"from $ref"},"options":{"limits":{"max":10},"verbose":false},"pair":[{"first":1},{"rest":2},{"rest":2}],"tz":"Europe/Berlin"}"#
                ]],
            ),
            // A present value is never replaced, not even by a default when it is null.
            (
                json!({"tz": null, "list": []}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /tz: null is not of type "string""#]],
            ),
        ],
    );
}

#[test]
fn violations_name_the_path_and_the_problem() {
    check_prepare(
        person_schema(),
        vec![
            (
                json!({}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at (root): "name" is a required property"#]],
            ),
            (
                json!({"name": 5}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /name: 5 is not of type "string""#]],
            ),
            (
                json!({"name": "Ada", "age": 1.5}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /age: 1.5 is not of type "integer""#]],
            ),
            (
                json!({"name": "Ada", "role": "root"}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /role: "root" is not one of "admin" or "user""#]],
            ),
            (
                json!({"name": "Ada", "address": {"zip": "1234"}}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /address/zip: "1234" does not match "^[0-9]{5}$""#]],
            ),
            (
                json!({"name": "Ada", "address": {"street": "Main St"}}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /address: "zip" is a required property"#]],
            ),
            (
                json!({"name": "Ada", "tags": ["ok", 2]}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /tags/1: 2 is not of type "string""#]],
            ),
            (
                json!({"name": "Ada", "email": "not an address", "born": "yesterday"}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /born: "yesterday" is not a "date-time"
                    - at /email: "not an address" is not a "email""#]],
            ),
            (
                json!({"name": "Ada", "contact": {"fax": "1"}}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /contact: {"fax":"1"} is not valid under any of the schemas listed in the 'oneOf' keyword"#]],
            ),
            (
                json!({"name": "Ada", "contact": {"phone": "1", "email": "a@b.c"}}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /contact: {"email":"a@b.c","phone":"1"} is valid under more than one of the schemas listed in the 'oneOf' keyword"#]],
            ),
            (
                json!({"name": "Ada", "id": "7"}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /id: "7" is not valid under any of the schemas listed in the 'anyOf' keyword"#]],
            ),
            (
                json!({"name": "Ada", "nickname": "A"}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at (root): Additional properties are not allowed ('nickname' was unexpected)"#]],
            ),
            (
                json!("Ada"),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at (root): "Ada" is not of type "object""#]],
            ),
        ],
    );
}

#[test]
fn every_violation_is_listed() {
    let tool = compile(person_schema());
    let violations = tool
        .prepare_input(json!({
            "age": -1,
            "score": "high",
            "tags": [1, "two", 3, "a", "a", "a", "a", "a", "a", "a", 11],
            "address": {"zip": 12345},
            "extra": true
        }))
        .expect_err("everything is wrong");
    expect![[r#"
        Invalid input for tool `test__probe`:
        - at (root): Additional properties are not allowed ('extra' was unexpected)
        - at (root): "name" is a required property
        - at /address/zip: 12345 is not of type "string"
        - at /age: -1 is less than the minimum of 0
        - at /score: "high" is not of type "number"
        - at /tags/0: 1 is not of type "string"
        - at /tags/2: 3 is not of type "string"
        - at /tags/10: 11 is not of type "string""#]]
    .assert_eq(&render_violations(&tool.name, &violations));
    assert_eq!(violations.len(), 8);
}

#[test]
fn shorthand_validates_like_its_expansion() {
    check_prepare(
        json!({"count": "integer", "timezone": {"type": "string", "default": "UTC"}}),
        vec![
            (
                json!({"count": 2}),
                expect![[r#"ok {"count":2,"timezone":"UTC"}"#]],
            ),
            // Shorthand leaves additionalProperties unset: extras are allowed.
            (
                json!({"count": 2, "extra": 1}),
                expect![[r#"ok {"count":2,"extra":1,"timezone":"UTC"}"#]],
            ),
            (
                json!({"count": 1.5, "timezone": 5}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /count: 1.5 is not of type "integer"
                    - at /timezone: 5 is not of type "string""#]],
            ),
            (
                json!({}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at (root): "count" is a required property"#]],
            ),
        ],
    );
}

#[test]
fn unknown_keywords_are_allowed() {
    check_prepare(
        json!({
            "type": "object",
            "x-vendor": {"anything": ["goes"]},
            "properties": {
                "body": {"type": "string", "x-widget": "textarea", "$comment": "free text", "format": "not-a-known-format"}
            }
        }),
        vec![
            (json!({"body": "hi"}), expect![[r#"ok {"body":"hi"}"#]]),
            (
                json!({"body": 1}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /body: 1 is not of type "string""#]],
            ),
        ],
    );
}

#[test]
fn render_violations_names_tool_and_root() {
    let violations = [
        Violation {
            pointer: String::new(),
            message: "\"a\" is a required property".to_owned(),
        },
        Violation {
            pointer: "/b/0".to_owned(),
            message: "1 is not of type \"string\"".to_owned(),
        },
    ];
    expect![[r#"
        Invalid input for tool `time__current_time`:
        - at (root): "a" is a required property
        - at /b/0: 1 is not of type "string""#]]
    .assert_eq(&render_violations("time__current_time", &violations));
    assert_eq!(
        serde_json::to_value(&violations[1]).expect("serializes"),
        json!({"pointer": "/b/0", "message": "1 is not of type \"string\""})
    );
}

// ---------------------------------------------------------------------------------------------
// API safety and the advertised schema

#[track_caller]
fn check_advertised(schema: Value, expect: Expect) {
    let tool = compile(schema.clone());
    expect.assert_eq(&pretty(&tool.advertised_schema));
    let mut keys = Vec::new();
    all_keys(&tool.advertised_schema, &mut keys);
    for banned in ["$ref", "$defs", "definitions"] {
        assert!(
            !keys.iter().any(|key| key == banned),
            "{banned} left in the advertised schema"
        );
    }
    assert_eq!(
        tool.input_schema,
        normalize(&schema),
        "validation keeps the full schema"
    );
}

#[test]
fn refs_are_inlined_and_defs_dropped() {
    check_advertised(
        json!({
            "type": "object",
            "properties": {
                "home": {"$ref": "#/$defs/address", "description": "where they live"},
                "work": {"$ref": "#/$defs/address"},
                "legacy": {"$ref": "#/definitions/point"}
            },
            "$defs": {
                "address": {
                    "type": "object",
                    "description": "a postal address",
                    "properties": {"zip": {"$ref": "#/$defs/zip"}}
                },
                "zip": {"type": "string", "pattern": "^[0-9]{5}$"}
            },
            "definitions": {"point": {"type": "array", "items": {"type": "number"}}}
        }),
        expect![[r#"
            {
              "properties": {
                "home": {
                  "description": "where they live",
                  "properties": {
                    "zip": {
                      "pattern": "^[0-9]{5}$",
                      "type": "string"
                    }
                  },
                  "type": "object"
                },
                "legacy": {
                  "items": {
                    "type": "number"
                  },
                  "type": "array"
                },
                "work": {
                  "description": "a postal address",
                  "properties": {
                    "zip": {
                      "pattern": "^[0-9]{5}$",
                      "type": "string"
                    }
                  },
                  "type": "object"
                }
              },
              "type": "object"
            }"#]],
    );
}

#[test]
fn top_level_ref_is_inlined() {
    check_advertised(
        json!({
            "$ref": "#/$defs/input",
            "description": "the tool's input",
            "$defs": {"input": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}
        }),
        expect![[r#"
            {
              "description": "the tool's input",
              "properties": {
                "q": {
                  "type": "string"
                }
              },
              "required": [
                "q"
              ],
              "type": "object"
            }"#]],
    );
}

#[test]
fn ref_with_conflicting_siblings_becomes_all_of() {
    check_advertised(
        json!({
            "type": "object",
            "properties": {
                "code": {"$ref": "#/$defs/code", "maxLength": 4},
                "items": {"type": "array", "items": {"$ref": "#/$defs/code"}}
            },
            "$defs": {"code": {"type": "string", "maxLength": 8}}
        }),
        expect![[r#"
            {
              "properties": {
                "code": {
                  "allOf": [
                    {
                      "maxLength": 8,
                      "type": "string"
                    },
                    {
                      "maxLength": 4
                    }
                  ]
                },
                "items": {
                  "items": {
                    "maxLength": 8,
                    "type": "string"
                  },
                  "type": "array"
                }
              },
              "type": "object"
            }"#]],
    );
}

#[test]
fn top_level_ref_with_conflicting_siblings_is_refused() {
    // The API allows no top-level allOf, so the conflict cannot be expressed.
    check_load_error(
        json!({
            "$ref": "#/$defs/input",
            "type": "object",
            "required": ["b"],
            "$defs": {"input": {"type": "object", "required": ["a"]}}
        }),
        None,
        expect!["plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/required`: the top-level `required` conflicts with the one in the `$ref` target; move it into the definition"],
    );
}

#[test]
fn shorthand_is_advertised_expanded() {
    check_advertised(
        json!({"city": {"type": "string", "description": "a city"}}),
        expect![[r#"
            {
              "properties": {
                "city": {
                  "description": "a city",
                  "type": "string"
                }
              },
              "required": [
                "city"
              ],
              "type": "object"
            }"#]],
    );
}

#[test]
fn validation_still_follows_refs_after_inlining() {
    check_prepare(
        json!({
            "type": "object",
            "properties": {"code": {"$ref": "#/$defs/code", "maxLength": 4}},
            "$defs": {"code": {"type": "string", "pattern": "^[A-Z]+$"}}
        }),
        vec![
            (json!({"code": "ABC"}), expect![[r#"ok {"code":"ABC"}"#]]),
            (
                json!({"code": "abcdef"}),
                expect![[r#"
                    Invalid input for tool `test__probe`:
                    - at /code: "abcdef" is longer than 4 characters
                    - at /code: "abcdef" does not match "^[A-Z]+$""#]],
            ),
        ],
    );
}

/// Loads a tool (plugin `test`, tool `probe`) and renders the load error.
#[track_caller]
fn check_load_error(input_schema: Value, output_schema: Option<Value>, expect: Expect) {
    match compile_tool("test", &spec(input_schema, output_schema)) {
        Ok(tool) => panic!("expected a load error, got {tool:?}"),
        Err(err) => {
            let message = err.to_string();
            assert!(message.contains("plugin `test`, tool `probe`"), "{message}");
            expect.assert_eq(&message);
        }
    }
}

#[test]
fn top_level_combinators_are_refused() {
    check_load_error(
        json!({"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/oneOf`: top-level `oneOf` is not allowed; use one object with optional properties, or put the `oneOf` inside a property"#
        ]],
    );
    check_load_error(
        json!({"anyOf": [{"type": "object"}]}),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/anyOf`: top-level `anyOf` is not allowed; use one object with optional properties, or put the `anyOf` inside a property"#
        ]],
    );
    check_load_error(
        json!({"type": "object", "allOf": [{"properties": {"a": {"type": "string"}}}]}),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/allOf`: top-level `allOf` is not allowed; use one object with optional properties, or put the `allOf` inside a property"#
        ]],
    );
    // Through a top-level $ref, too.
    check_load_error(
        json!({"$ref": "#/$defs/either", "$defs": {"either": {"type": "object", "oneOf": [true]}}}),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/oneOf`: top-level `oneOf` is not allowed; use one object with optional properties, or put the `oneOf` inside a property"#
        ]],
    );
}

#[test]
fn top_level_must_be_an_object() {
    check_load_error(
        json!({"type": "string"}),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/type`: the top-level `type` must be "object", found "string""#
        ]],
    );
    check_load_error(
        json!({"properties": {"a": {"type": "string"}}}),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/type`: the top-level `type` must be "object", found nothing"#
        ]],
    );
    check_load_error(
        json!(true),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at ``: the input schema must be an object schema with `"type": "object"`"#
        ]],
    );
}

#[test]
fn recursive_refs_are_refused() {
    check_load_error(
        json!({
            "type": "object",
            "properties": {"tree": {"$ref": "#/$defs/node"}},
            "$defs": {"node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}}}
        }),
        None,
        expect![[
            r##"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/$defs/node/properties/children/items/$ref`: `$ref` "#/$defs/node" is recursive (#/$defs/node → #/$defs/node); a recursive schema cannot be inlined and the Messages API takes no `$ref`"##
        ]],
    );
    check_load_error(
        json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/a"}},
            "$defs": {
                "a": {"type": "object", "properties": {"b": {"$ref": "#/$defs/b"}}},
                "b": {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}}
            }
        }),
        None,
        expect![[
            r##"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/$defs/b/properties/a/$ref`: `$ref` "#/$defs/a" is recursive (#/$defs/a → #/$defs/b → #/$defs/a); a recursive schema cannot be inlined and the Messages API takes no `$ref`"##
        ]],
    );
}

#[test]
fn non_local_refs_are_refused() {
    let cases = [
        (
            "https://example.com/schemas/address.json",
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/$ref`: `$ref` "https://example.com/schemas/address.json" points outside this schema; only references into `#/$defs/…` (or `#/definitions/…`) can be inlined"#
            ]],
        ),
        (
            "address.json#/$defs/zip",
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/$ref`: `$ref` "address.json#/$defs/zip" points outside this schema; only references into `#/$defs/…` (or `#/definitions/…`) can be inlined"#
            ]],
        ),
        (
            "#/properties/b",
            expect![[
                r##"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/$ref`: `$ref` "#/properties/b" is not a pointer into `$defs`; only references into `#/$defs/…` (or `#/definitions/…`) can be inlined"##
            ]],
        ),
        (
            "#zip",
            expect![[
                r##"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/$ref`: `$ref` "#zip" is not a pointer into `$defs`; only references into `#/$defs/…` (or `#/definitions/…`) can be inlined"##
            ]],
        ),
        (
            "#/$defs/missing",
            expect![[
                r##"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/$ref`: `$ref` "#/$defs/missing" points at nothing; only references into `#/$defs/…` (or `#/definitions/…`) can be inlined"##
            ]],
        ),
    ];
    for (reference, expect) in cases {
        check_load_error(
            json!({
                "type": "object",
                "properties": {"a": {"$ref": reference}, "b": {"type": "string"}},
                "$defs": {"zip": {"$anchor": "zip", "type": "string"}}
            }),
            None,
            expect,
        );
    }
}

#[test]
fn percent_encoded_refs_resolve() {
    check_advertised(
        json!({
            "type": "object",
            "properties": {"a": {"$ref": "#/$defs/post%20code"}},
            "$defs": {"post code": {"type": "string"}}
        }),
        expect![[r#"
            {
              "properties": {
                "a": {
                  "type": "string"
                }
              },
              "type": "object"
            }"#]],
    );
}

#[test]
fn other_reference_forms_are_refused() {
    check_load_error(
        json!({"type": "object", "properties": {"a": {"$dynamicRef": "#node"}}}),
        None,
        expect![[
            r##"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/$dynamicRef`: `$dynamicRef` cannot be inlined; use `$ref` into `#/$defs`"##
        ]],
    );
    check_load_error(
        json!({"type": "object", "properties": {"a": {"$id": "https://example.com/a", "type": "string"}}}),
        None,
        expect![[
            r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/$id`: a nested `$id` is not supported in input schemas; put shared parts in the top-level `$defs`"#
        ]],
    );
}

#[test]
fn exponential_inlining_is_refused() {
    // d0 uses nothing; every dN uses d(N-1) twice: inlining d12 means 2^12 expansions.
    let mut defs = serde_json::Map::new();
    defs.insert("d0".to_owned(), json!({"type": "string"}));
    for n in 1..=12 {
        let previous = format!("#/$defs/d{}", n - 1);
        defs.insert(
            format!("d{n}"),
            json!({"type": "object", "properties": {"l": {"$ref": previous}, "r": {"$ref": previous}}}),
        );
    }
    let schema =
        json!({"type": "object", "properties": {"top": {"$ref": "#/$defs/d12"}}, "$defs": defs});
    let err = compile_tool("test", &spec(schema, None)).expect_err("too large");
    let message = err.to_string();
    assert!(
        message.contains("more than 1000 `$ref` expansions"),
        "{message}"
    );
    // A tree 2^8 wide is fine.
    let mut defs = serde_json::Map::new();
    defs.insert("d0".to_owned(), json!({"type": "string"}));
    for n in 1..=8 {
        let previous = format!("#/$defs/d{}", n - 1);
        defs.insert(
            format!("d{n}"),
            json!({"type": "object", "properties": {"l": {"$ref": previous}, "r": {"$ref": previous}}}),
        );
    }
    compile(
        json!({"type": "object", "properties": {"top": {"$ref": "#/$defs/d8"}}, "$defs": defs}),
    );
}

#[test]
fn property_names_outside_the_api_pattern_are_refused() {
    let long = "p".repeat(65);
    let cases = [
        (
            json!({"type": "object", "properties": {"first name": {"type": "string"}}}),
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/first name`: property name "first name" is not accepted by the Messages API, which allows 1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`"#
            ]],
        ),
        (
            json!({"straße": "string"}),
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/straße`: property name "straße" is not accepted by the Messages API, which allows 1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`"#
            ]],
        ),
        (
            json!({"type": "object", "properties": {"": {"type": "string"}}}),
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/`: property name "" is not accepted by the Messages API, which allows 1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`"#
            ]],
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "object", "properties": {"x/y": {}}}}}),
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/a/properties/x~1y`: property name "x/y" is not accepted by the Messages API, which allows 1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`"#
            ]],
        ),
        (
            json!({"type": "object", "properties": {"list": {"type": "array", "items": {"$ref": "#/$defs/item"}}}, "$defs": {"item": {"type": "object", "properties": {"bad$": {}}}}}),
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/$defs/item/properties/bad$`: property name "bad$" is not accepted by the Messages API, which allows 1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`"#
            ]],
        ),
        (
            json!({"type": "object", "properties": {long.clone(): {"type": "string"}}}),
            expect![[
                r#"plugin `test`, tool `probe`: the input schema would be refused by the Messages API: at `/properties/ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp`: property name "ppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppppp" is not accepted by the Messages API, which allows 1 to 64 of A-Z, a-z, 0-9, `_`, `.` and `-`"#
            ]],
        ),
    ];
    for (schema, expect) in cases {
        check_load_error(schema, None, expect);
    }
    // The edges of the pattern are fine.
    let ok = "p".repeat(64);
    compile(json!({"type": "object", "properties": {ok: {}, "a.b-c_D9": {}}}));
}

// ---------------------------------------------------------------------------------------------
// Invalid schemas

#[test]
fn invalid_schemas_name_plugin_tool_and_keyword() {
    check_load_error(
        json!({"type": "strng"}),
        None,
        expect![[r#"
            plugin `test`, tool `probe`: the input schema is not a valid JSON Schema (draft 2020-12):
            - at `/type`: "strng" is not valid under any of the schemas listed in the 'anyOf' keyword"#]],
    );
    check_load_error(
        json!({"minLength": "x"}),
        None,
        expect![[r#"
            plugin `test`, tool `probe`: the input schema is not a valid JSON Schema (draft 2020-12):
            - at `/minLength`: "x" is not of type "integer""#]],
    );
    check_load_error(
        json!({"count": "strng", "limit": {"type": "integer", "minimum": "zero"}}),
        None,
        expect![[r#"
            plugin `test`, tool `probe`: the input schema is not a valid JSON Schema (draft 2020-12):
            - at `/properties/count/type`: "strng" is not valid under any of the schemas listed in the 'anyOf' keyword
            - at `/properties/limit/minimum`: "zero" is not of type "number""#]],
    );
    check_load_error(
        json!({"type": "object", "required": "a", "properties": {"a": {"enum": "x"}}}),
        None,
        expect![[r#"
            plugin `test`, tool `probe`: the input schema is not a valid JSON Schema (draft 2020-12):
            - at `/properties/a/enum`: "x" is not of type "array"
            - at `/required`: "a" is not of type "array""#]],
    );
    check_load_error(
        json!({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}),
        None,
        expect![[r#"
            plugin `test`, tool `probe`: the input schema is not a valid JSON Schema (draft 2020-12):
            - at `/$schema`: "http://json-schema.org/draft-07/schema#" is not supported: tool schemas are draft 2020-12 (https://json-schema.org/draft/2020-12/schema)"#]],
    );
    check_load_error(
        json!({
            "type": "object",
            "properties": {"a": {"type": "string", "pattern": "(["}},
            "patternProperties": {"^ok$": true, "x{2,1}": {"type": "integer"}}
        }),
        None,
        expect![[r#"
            plugin `test`, tool `probe`: the input schema is not a valid JSON Schema (draft 2020-12):
            - at `/patternProperties/x{2,1}`: "x{2,1}" is not a valid regular expression
            - at `/properties/a/pattern`: "([" is not a valid regular expression"#]],
    );
}

#[test]
fn declared_2020_12_is_accepted() {
    compile(json!({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"}));
}

// ---------------------------------------------------------------------------------------------
// Output schemas

#[test]
fn output_schema_is_checked() {
    let output = json!({
        "type": "object",
        "properties": {"n": {"$ref": "#/$defs/n"}},
        "required": ["n"],
        "additionalProperties": false,
        "$defs": {"n": {"type": "integer"}}
    });
    let tool = compile_tool("test", &spec(json!({}), Some(output.clone()))).expect("loads");
    assert_eq!(tool.output_schema, Some(output));
    let cases = [
        (json!({"n": 1}), expect![[r#"ok"#]]),
        (
            json!({"n": "1", "m": 2}),
            expect![[r#"
                - at (root): Additional properties are not allowed ('m' was unexpected)
                - at /n: "1" is not of type "integer""#]],
        ),
        (
            json!({}),
            expect![[r#"- at (root): "n" is a required property"#]],
        ),
    ];
    for (structured, expect) in cases {
        let rendered = match tool.check_output(&structured) {
            Ok(()) => "ok".to_owned(),
            Err(violations) => violations
                .iter()
                .map(|v| format!("- {v}"))
                .collect::<Vec<_>>()
                .join("\n"),
        };
        expect.assert_eq(&rendered);
    }
}

#[test]
fn no_output_schema_accepts_anything() {
    let tool = compile_tool("test", &spec(json!({}), None)).expect("loads");
    for structured in [json!({"anything": 1}), json!([1]), json!(null)] {
        assert_eq!(tool.check_output(&structured), Ok(()));
    }
}

#[test]
fn output_schemas_skip_api_rules_but_not_validity() {
    // Not an object, a top-level oneOf: fine for output, the API never sees it.
    let output = json!({"oneOf": [{"type": "string"}, {"type": "integer"}]});
    let tool = compile_tool("test", &spec(json!({}), Some(output))).expect("loads");
    assert_eq!(tool.check_output(&json!(3)), Ok(()));
    assert_eq!(tool.check_output(&json!(1.5)).map_err(|v| v.len()), Err(1));

    check_load_error(
        json!({}),
        Some(json!({"type": "object", "properties": {"n": {"type": "int"}}})),
        expect![[r#"
            plugin `test`, tool `probe`: the output schema is not a valid JSON Schema (draft 2020-12):
            - at `/properties/n/type`: "int" is not valid under any of the schemas listed in the 'anyOf' keyword"#]],
    );
    // Nothing is fetched, so a remote $ref cannot compile.
    check_load_error(
        json!({}),
        Some(json!({"$ref": "https://example.com/output.json"})),
        expect!["plugin `test`, tool `probe`: the output schema does not compile: at ``: Resource 'https://example.com/output.json' is not present in a registry and retrieving it failed: `https://example.com/output.json` is not fetched: tool schemas must be self-contained"],
    );
}

// ---------------------------------------------------------------------------------------------
// Names

#[test]
fn tool_names_are_checked() {
    let long_tool_ok = "t".repeat(64 - "mcp__harness__p__".len());
    let long_tool_bad = "t".repeat(65 - "mcp__harness__p__".len());
    let cases = [
        (
            "time",
            "current_time",
            expect![[r#"
                Ok(
                    "time__current_time",
                )
            "#]],
        ),
        (
            "my-plugin",
            "do-it",
            expect![[r#"
            Ok(
                "my-plugin__do-it",
            )
        "#]],
        ),
        (
            "_private",
            "a__b",
            expect![[r#"
            Ok(
                "_private__a__b",
            )
        "#]],
        ),
        (
            "p",
            long_tool_ok.as_str(),
            expect![[r#"
                Ok(
                    "p__ttttttttttttttttttttttttttttttttttttttttttttttt",
                )
            "#]],
        ),
        (
            "p",
            long_tool_bad.as_str(),
            expect![[r#"
                Err(
                    "plugin `p`, tool `tttttttttttttttttttttttttttttttttttttttttttttttt`: the name the model sees, `mcp__harness__p__tttttttttttttttttttttttttttttttttttttttttttttttt`, has 65 characters; the Messages API allows at most 64",
                )
            "#]],
        ),
        (
            "ti me",
            "now",
            expect![[r#"
                Err(
                    "plugin `ti me`, tool `now`: bad name: the plugin name contains ' '; names may only use A-Z, a-z, 0-9, `_` and `-`",
                )
            "#]],
        ),
        (
            "time",
            "now!",
            expect![[r#"
                Err(
                    "plugin `time`, tool `now!`: bad name: the tool name contains '!'; names may only use A-Z, a-z, 0-9, `_` and `-`",
                )
            "#]],
        ),
        (
            "time",
            "zeit.jetzt",
            expect![[r#"
                Err(
                    "plugin `time`, tool `zeit.jetzt`: bad name: the tool name contains '.'; names may only use A-Z, a-z, 0-9, `_` and `-`",
                )
            "#]],
        ),
        (
            "zeit",
            "jetzt_ü",
            expect![[r#"
                Err(
                    "plugin `zeit`, tool `jetzt_ü`: bad name: the tool name contains 'ü'; names may only use A-Z, a-z, 0-9, `_` and `-`",
                )
            "#]],
        ),
        (
            "",
            "now",
            expect![[r#"
                Err(
                    "plugin ``, tool `now`: bad name: the plugin name is empty",
                )
            "#]],
        ),
        (
            "time",
            "",
            expect![[r#"
                Err(
                    "plugin `time`, tool ``: bad name: the tool name is empty",
                )
            "#]],
        ),
        (
            "my__plugin",
            "now",
            expect![[r#"
                Err(
                    "plugin `my__plugin`, tool `now`: bad name: the plugin name contains `__`, which separates plugin from tool",
                )
            "#]],
        ),
        (
            "time_",
            "now",
            expect![[r#"
                Err(
                    "plugin `time_`, tool `now`: bad name: the plugin name ends with `_`, which makes `<plugin>__<tool>` ambiguous",
                )
            "#]],
        ),
    ];
    for (plugin, tool, expect) in cases {
        let result = tool_name(plugin, tool).map_err(|err| err.to_string());
        expect.assert_debug_eq(&result);
    }
    assert_eq!(format!("mcp__harness__p__{long_tool_ok}").len(), 64);
}

#[test]
fn compile_tool_checks_the_name_first() {
    let mut bad = spec(json!({"type": "strng"}), None);
    bad.name = "bad name".to_owned();
    let err = compile_tool("test", &bad).expect_err("bad name");
    assert!(matches!(err, SchemaError::BadName { .. }), "{err}");
}

#[test]
fn duplicate_names_are_refused() {
    let cases: [(&[&str], Expect); 4] = [
        (
            &[],
            expect![[r#"
            Ok(
                (),
            )
        "#]],
        ),
        (
            &["time__now", "time__today", "calc__now"],
            expect![[r#"
                Ok(
                    (),
                )
            "#]],
        ),
        (
            &["time__now", "calc__add", "time__now"],
            expect![[r#"
                Err(
                    "plugin `time`, tool `now`: the tool name `time__now` is registered twice",
                )
            "#]],
        ),
        (
            &["a__x__y", "b__z", "a__x__y", "b__z"],
            expect![[r#"
                Err(
                    "plugin `a`, tool `x__y`: the tool name `a__x__y` is registered twice",
                )
            "#]],
        ),
    ];
    for (names, expect) in cases {
        let result = check_unique(names.iter().copied()).map_err(|err| err.to_string());
        expect.assert_debug_eq(&result);
    }
}

// ---------------------------------------------------------------------------------------------
// The time plugin's tool, as the daemon loads it

#[test]
fn time_tool_compiles_and_behaves() {
    let plugin = harness_plugin_time::TimePlugin;
    let tools = plugin.tools();
    let [tool] = tools.as_slice() else {
        panic!("the time plugin serves one tool");
    };
    let spec = tool.spec();
    let compiled = compile_tool(plugin.name(), &spec).unwrap_or_else(|err| panic!("{err}"));
    assert_eq!(compiled.name, "time__current_time");
    assert_eq!(compiled.description, spec.description);
    assert_eq!(compiled.timeout, None);
    assert_eq!(
        compiled.input_schema, spec.input_schema,
        "explicit schemas are not rewritten"
    );
    assert_eq!(
        compiled.advertised_schema, spec.input_schema,
        "nothing to inline"
    );
    check_unique([compiled.name.as_str()]).expect("one name");

    let cases = [
        (json!({}), expect![[r#"ok {"timezone":"UTC"}"#]]),
        (
            json!({"timezone": "Europe/Berlin"}),
            expect![[r#"ok {"timezone":"Europe/Berlin"}"#]],
        ),
        (
            json!({"timezone": 5, "tz": "UTC"}),
            expect![[r#"
                Invalid input for tool `time__current_time`:
                - at (root): Additional properties are not allowed ('tz' was unexpected)
                - at /timezone: 5 is not of type "string""#]],
        ),
    ];
    for (input, expect) in cases {
        let rendered = match compiled.prepare_input(input) {
            Ok(prepared) => format!("ok {prepared}"),
            Err(violations) => render_violations(&compiled.name, &violations),
        };
        expect.assert_eq(&rendered);
    }

    let good = json!({"iso": "2026-11-21T23:41:07+01:00", "unix": 1_795_300_867, "timezone": "Europe/Berlin"});
    assert_eq!(compiled.check_output(&good), Ok(()));
    let bad = json!({"iso": "2026-11-21T23:41:07+01:00", "unix": "1795300867"});
    assert_eq!(compiled.check_output(&bad).map_err(|v| v.len()), Err(2));
}

#[test]
fn timeout_is_carried_over() {
    let mut with_timeout = spec(json!({}), None);
    with_timeout.timeout = Some(Duration::from_secs(300));
    let tool = compile_tool("delegation", &with_timeout).expect("loads");
    assert_eq!(tool.timeout, Some(Duration::from_secs(300)));
    assert_eq!(tool.name, "delegation__probe");
    assert_eq!(tool.description, "A probe.");
}
