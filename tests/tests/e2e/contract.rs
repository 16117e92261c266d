//! A property-based fuzz of the API against its own OpenAPI document, on a live daemon: for every
//! operation that takes a body, bodies generated at random from the documented request schema
//! (seeded, so a failure repeats). Each must be taken or refused for a reason the schema cannot
//! state (an unknown profile, a workspace outside the roots): never refused as malformed (400,
//! 415, or 422 `invalid_body`), but for the Managed Agents door's 400s that `openapi.rs`'s
//! `NOT_STATEABLE` names. Every answer's status must be one the operation documents, and
//! every JSON answer must match the schema documented for that status.

use serde_json::{json, Map, Value};

use harness_tests::daemon::TestDaemon;
use harness_tests::mock::MockApi;

use super::http_api::schema_problems;

/// Bodies per operation.
const CASES: usize = 25;

/// A small seeded generator (xorshift64*): the same seed, the same bodies.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    fn coin(&mut self) -> bool {
        self.below(2) == 0
    }
}

/// The schema `schema` stands for, its `$ref` followed in `doc`.
fn resolved<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(reference) => {
            let pointer = reference.trim_start_matches('#');
            resolved(doc, doc.pointer(pointer).unwrap_or(&Value::Null))
        }
        None => schema,
    }
}

/// A branch of a rule across an object's fields, as an object schema: its required fields with
/// their schemas from `parent` (the branch may narrow them).
fn branch_of(doc: &Value, parent: &Value, branch: &Value) -> Value {
    let branch = resolved(doc, branch);
    let mut properties = Map::new();
    for name in branch["required"].as_array().into_iter().flatten() {
        if let Some(name) = name.as_str() {
            let own = &parent["properties"][name];
            properties.insert(name.to_owned(), own.clone());
        }
    }
    json!({"type": "object", "properties": properties, "required": branch["required"].clone()})
}

/// A value `schema` allows, at random.
fn generate(doc: &Value, schema: &Value, rng: &mut Rng, depth: usize) -> Value {
    let schema = resolved(doc, schema);
    for key in ["oneOf", "anyOf"] {
        if let Some(branches) = schema.get(key).and_then(Value::as_array) {
            let pick = &branches[rng.below(branches.len() as u64) as usize];
            if schema.get("properties").is_none() {
                return generate(doc, pick, rng, depth);
            }
            // An object with a rule across its fields (exactly one of two, say): the object's
            // own fields, and the branch's over them.
            let mut parent = schema.clone();
            if let Some(parent) = parent.as_object_mut() {
                parent.remove(key);
            }
            let mut object = generate(doc, &parent, rng, depth);
            if let (Some(object), Value::Object(branch)) = (
                object.as_object_mut(),
                generate(doc, &branch_of(doc, &parent, pick), rng, depth),
            ) {
                // Fields only another branch requires are left out: exactly one branch holds.
                let required = |b: &Value| -> Vec<String> {
                    let names = resolved(doc, b)["required"].as_array().cloned();
                    let names = names.unwrap_or_default().into_iter();
                    names
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect()
                };
                let own = required(pick);
                let others: Vec<String> = branches
                    .iter()
                    .flat_map(required)
                    .filter(|n| !own.contains(n))
                    .collect();
                object.retain(|name, _| !others.contains(name));
                object.extend(branch);
            }
            return object;
        }
    }
    if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
        return choices[rng.below(choices.len() as u64) as usize].clone();
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ if schema.get("properties").is_some() => vec!["object"],
        _ => vec!["any"],
    };
    let chosen = types[rng.below(types.len() as u64) as usize];
    match chosen {
        "null" => Value::Null,
        "boolean" => Value::Bool(rng.coin()),
        "integer" => {
            let low = schema.get("minimum").and_then(Value::as_i64).unwrap_or(0);
            json!(low + rng.below(10) as i64)
        }
        "number" => {
            let low = schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
            json!(low + rng.below(1000) as f64 / 100.0)
        }
        "string" => {
            let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0);
            let max = schema
                .get("maxLength")
                .and_then(Value::as_u64)
                .unwrap_or(12)
                .min(12);
            let len = (min + rng.below(max.saturating_sub(min) + 1)).max(min);
            let letters: String = (0..len)
                .map(|_| char::from(b'a' + rng.below(26) as u8))
                .collect();
            // The one pattern random letters cannot match: a URL's.
            let url = schema
                .get("pattern")
                .and_then(Value::as_str)
                .is_some_and(|p| p.contains("://"));
            match url {
                true => format!("https://{letters}x").into(),
                false => letters.into(),
            }
        }
        "array" => {
            let items = schema.get("items").cloned().unwrap_or(json!({}));
            let most = schema.get("maxItems").and_then(Value::as_u64).unwrap_or(2);
            let n = if depth > 3 { 0 } else { rng.below(3).min(most) };
            Value::Array(
                (0..n)
                    .map(|_| generate(doc, &items, rng, depth + 1))
                    .collect(),
            )
        }
        "object" => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut object = Map::new();
            if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                for (name, property) in properties {
                    if required.contains(&name.as_str()) || (depth < 3 && rng.coin()) {
                        object.insert(name.clone(), generate(doc, property, rng, depth + 1));
                    }
                }
            }
            Value::Object(object)
        }
        // No type: anything at all.
        _ => match rng.below(3) {
            0 => json!({"k": rng.below(100)}),
            1 => json!("any"),
            _ => json!(rng.below(100)),
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_bodies_from_the_document_get_documented_answers_and_no_malformed_refusal() {
    let mock = MockApi::start().await;
    let daemon = TestDaemon::start(&mock, |_| {}).await;
    let (_, doc) = daemon.get("/api/openapi.json").await;
    let thread = daemon.create_thread().await;
    let http = reqwest::Client::new();
    let mut rng = Rng(0x5EED_1234_ABCD_0001);
    let mut sent = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        if path == "/mcp" {
            continue;
        }
        for (method, operation) in item.as_object().expect("an item") {
            let Some(body_schema) =
                operation["requestBody"]["content"]["application/json"].get("schema")
            else {
                continue;
            };
            let url = format!(
                "{}{}",
                daemon.base,
                path.replace("{id}", &thread)
                    .replace("{request_id}", "perm_nothing")
                    .replace("{name}", "time__current_time")
            );
            for _ in 0..CASES {
                let body = generate(&doc, body_schema, &mut rng, 0);
                let request = match method.as_str() {
                    "post" => http.post(&url),
                    "patch" => http.patch(&url),
                    "put" => http.put(&url),
                    other => panic!("a body on {other}"),
                };
                let response = request.json(&body).send().await.expect("an answer");
                sent += 1;
                let status = response.status().as_u16();
                let what = format!("{method} {path} {body}: {status}");

                let documented = &operation["responses"][status.to_string()];
                assert!(documented.is_object(), "{what}: not documented");
                let json = response
                    .headers()
                    .get("content-type")
                    .is_some_and(|t| t.to_str().unwrap_or("").starts_with("application/json"));
                let text = response.text().await.expect("a body");
                // A refusal JSON Schema cannot state, said in the field's description.
                let operation = format!("{} {path}", method.to_uppercase());
                let not_stateable = crate::openapi::NOT_STATEABLE
                    .iter()
                    .any(|(op, needle, _)| *op == operation && text.contains(needle));
                assert!(
                    (status != 400 || not_stateable) && status != 415,
                    "{what}: {text}"
                );
                if !json {
                    continue;
                }
                let answer: Value = serde_json::from_str(&text).expect("JSON as it says");
                if status == 422 {
                    assert_ne!(answer["error"]["code"], "invalid_body", "{what}: {text}");
                }
                if let Some(schema) = documented["content"]["application/json"].get("schema") {
                    let problems = schema_problems(&doc, schema, &answer);
                    assert!(problems.is_empty(), "{what}: {text}: {problems:?}");
                }
            }
        }
    }
    assert!(
        sent >= 6 * CASES,
        "every operation with a body was tried: {sent}"
    );
    daemon.stop().await;
}
