//! Tools the client runs: the custom tools of a Managed Agents API agent, served to its
//! sessions' CLI as an in-process MCP server of their own ([`CLIENT_SERVER`], so the model calls
//! `mcp__custom__NAME`), each call answered by the session's client rather than run here.
//!
//! - [`ClientTools`]: one agent version's tools, checked and compiled once with the plugin
//!   tools' machinery (draft 2020-12, API-safe), so a call's input is validated before anyone
//!   waits on it.
//! - [`ClientCalls`]: the owner of the calls waiting for their answer, one per (thread, tool use
//!   id). A call waits as a [`Waiting`]; [`ClientCalls::answer`] resolves it. Dropping the
//!   `Waiting` (the CLI cancelled the call on an interrupt, or the turn ended and its tool calls
//!   were stopped) takes the call off the list, so a late answer is refused as one for a call that
//!   never waited. Nothing else is kept: no answer outlives its call. The API lets a client
//!   answer as soon as it reads the tool use, which the CLI reports a moment before it makes the
//!   call: an answer waits a little for its call to register ([`ClientCalls::answer_within`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use plugin_contract::{ThreadId, ToolSpec};
use rmcp::model::ContentBlock;
use serde_json::{json, Value};
use tokio::sync::{oneshot, Notify};

use super::schema::{self, CompiledTool, SchemaError};
use crate::sync::lock;

/// The name of the MCP server of the client's tools, as the CLI knows it.
pub const CLIENT_SERVER: &str = "custom";

/// The Messages API's limit on a tool name, which the model sees as `mcp__custom__NAME`.
const MAX_MODEL_NAME_LEN: usize = 64;

/// One agent version's custom tools, compiled.
#[derive(Debug, Default)]
pub struct ClientTools {
    tools: BTreeMap<String, CompiledTool>,
}

impl ClientTools {
    /// Checks each tool's name (`[A-Za-z0-9_-]`, unique, `mcp__custom__NAME` within the Messages
    /// API's 64 characters) and compiles its input schema; the first problem is the error.
    pub fn compile(specs: impl IntoIterator<Item = ToolSpec>) -> Result<ClientTools, SchemaError> {
        let mut tools = BTreeMap::new();
        for spec in specs {
            let name = spec.name.clone();
            let bad = |reason: String| SchemaError::BadName {
                plugin: CLIENT_SERVER.to_owned(),
                tool: name.clone(),
                reason,
            };
            let pattern = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
            if name.is_empty() || !name.chars().all(pattern) {
                return Err(bad(
                    "a name is 1 to 64 of A-Z, a-z, 0-9, `_` and `-`".to_owned()
                ));
            }
            let model_name = model_name(&name);
            if model_name.len() > MAX_MODEL_NAME_LEN {
                return Err(SchemaError::NameTooLong {
                    plugin: CLIENT_SERVER.to_owned(),
                    len: model_name.len(),
                    tool: name,
                    model_name,
                });
            }
            if tools.contains_key(&name) {
                return Err(SchemaError::Duplicate {
                    name: name.clone(),
                    plugin: CLIENT_SERVER.to_owned(),
                    tool: name,
                });
            }
            let compiled = schema::compile_as(name.clone(), CLIENT_SERVER, &spec)?;
            tools.insert(name, compiled);
        }
        Ok(ClientTools { tools })
    }

    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The `tools/list` entries: each tool under its own name, its API-safe schema.
    pub fn list(&self) -> Vec<rmcp::model::Tool> {
        let object = |schema: &Value| Arc::new(schema.as_object().cloned().unwrap_or_default());
        (self.tools.values())
            .map(|t| {
                rmcp::model::Tool::new(
                    t.name.clone(),
                    t.description.clone(),
                    object(&t.advertised_schema),
                )
            })
            .collect()
    }

    /// The server's handshake as the CLI would get it (`sdkMcpServerManifests`), as
    /// [`super::McpAdapter::manifest`] is the plugin tools'.
    pub fn manifest(&self) -> Value {
        let initialize = super::adapter::initialize_result(
            rmcp::model::ProtocolVersion::V_2025_11_25,
            CLIENT_SERVER,
        );
        json!({"initializeResult": initialize, "toolsListResult": {"tools": self.list()}})
    }

    /// The input of a call to `name` with its defaults filled in, or the text the model reads
    /// when there is no such tool or the input does not match its schema.
    pub fn prepare(&self, name: &str, input: Value) -> Result<Value, String> {
        let Some(tool) = self.tools.get(name) else {
            let known: Vec<&str> = self.tools.keys().map(String::as_str).collect();
            return Err(format!(
                "unknown tool `{name}`; known tools: {}",
                known.join(", ")
            ));
        };
        tool.prepare_input(input)
            .map_err(|violations| schema::render_violations(name, &violations))
    }
}

/// `mcp__custom__NAME`: what the model calls the client's tool `name`.
pub fn model_name(name: &str) -> String {
    format!("mcp__{CLIENT_SERVER}__{name}")
}

/// The client's answer to a call: what the model reads as the tool's result.
#[derive(Clone, Debug, PartialEq)]
pub struct ClientAnswer {
    pub content: Vec<ContentBlock>,
    pub is_error: bool,
}

/// Why an answer was refused: no call of that thread waits under that id (it never did, it was
/// answered already, or it was cancelled).
#[derive(Debug, thiserror::Error)]
#[error("tool use {0} is not waiting for a result")]
pub struct NotWaiting(pub String);

/// The calls waiting for the client's answer, by (thread, the model's tool use id). Cheap to
/// clone: clones share the list.
#[derive(Clone, Debug, Default)]
pub struct ClientCalls {
    waiting: Arc<Mutex<HashMap<Key, oneshot::Sender<ClientAnswer>>>>,
    /// Wakes the answers waiting for their call to register.
    registered: Arc<Notify>,
}

type Key = (ThreadId, String);

impl ClientCalls {
    /// Registers the call `tool_use_id` of `thread` as waiting; `None` when one waits under that
    /// id already (the model's ids are unique: a second is a bug of the caller's).
    pub fn wait(&self, thread: &ThreadId, tool_use_id: &str) -> Option<Waiting> {
        let key = (thread.clone(), tool_use_id.to_owned());
        let (tx, rx) = oneshot::channel();
        let mut waiting = lock(&self.waiting);
        if waiting.contains_key(&key) {
            return None;
        }
        waiting.insert(key.clone(), tx);
        drop(waiting);
        self.registered.notify_waiters();
        Some(Waiting {
            calls: self.clone(),
            key,
            answer: rx,
        })
    }

    /// Whether the call `tool_use_id` of `thread` waits for its answer.
    pub fn is_waiting(&self, thread: &ThreadId, tool_use_id: &str) -> bool {
        lock(&self.waiting).contains_key(&(thread.clone(), tool_use_id.to_owned()))
    }

    /// Resolves the call `tool_use_id` of `thread` with `answer`.
    pub fn answer(
        &self,
        thread: &ThreadId,
        tool_use_id: &str,
        answer: ClientAnswer,
    ) -> Result<(), NotWaiting> {
        self.answer_now(thread, tool_use_id, answer)
            .map_err(|_| NotWaiting(tool_use_id.to_owned()))
    }

    /// [`ClientCalls::answer`], waiting at most `grace` for the call to register when it is not
    /// waiting yet.
    pub async fn answer_within(
        &self,
        thread: &ThreadId,
        tool_use_id: &str,
        answer: ClientAnswer,
        grace: std::time::Duration,
    ) -> Result<(), NotWaiting> {
        let deadline = tokio::time::Instant::now() + grace;
        let mut answer = answer;
        loop {
            let registered = self.registered.notified();
            tokio::pin!(registered);
            registered.as_mut().enable();
            answer = match self.answer_now(thread, tool_use_id, answer) {
                Ok(()) => return Ok(()),
                Err(Some(back)) => back,
                Err(None) => return Err(NotWaiting(tool_use_id.to_owned())),
            };
            if tokio::time::timeout_at(deadline, registered).await.is_err() {
                return Err(NotWaiting(tool_use_id.to_owned()));
            }
        }
    }

    /// Resolves the call when it waits; else the answer back when no such call is registered,
    /// or nothing when it was, but no longer waits.
    fn answer_now(
        &self,
        thread: &ThreadId,
        tool_use_id: &str,
        answer: ClientAnswer,
    ) -> Result<(), Option<ClientAnswer>> {
        let key = (thread.clone(), tool_use_id.to_owned());
        let sender = lock(&self.waiting).remove(&key);
        match sender {
            Some(sender) => sender.send(answer).map_err(|_| None),
            None => Err(Some(answer)),
        }
    }
}

/// A call waiting for its answer; dropped, it waits no more.
#[derive(Debug)]
pub struct Waiting {
    calls: ClientCalls,
    key: Key,
    answer: oneshot::Receiver<ClientAnswer>,
}

impl Waiting {
    /// The client's answer, once it comes.
    pub async fn answered(mut self) -> ClientAnswer {
        // The sender lives in the list until it answers, and only `Drop` takes it out unanswered.
        match (&mut self.answer).await {
            Ok(answer) => answer,
            Err(_) => std::future::pending().await,
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        lock(&self.calls.waiting).remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn spec(name: &str, input_schema: Value) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: "d".to_owned(),
            input_schema,
            output_schema: None,
            timeout: None,
        }
    }

    fn weather() -> ClientTools {
        let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
            "required": ["city"]});
        ClientTools::compile([spec("get_weather", schema)]).unwrap()
    }

    fn text(text: &str) -> ClientAnswer {
        ClientAnswer {
            content: vec![ContentBlock::text(text)],
            is_error: false,
        }
    }

    #[test]
    fn a_tool_is_listed_under_its_own_name_and_its_input_is_checked() {
        let tools = weather();
        let listed: Vec<String> = tools.list().iter().map(|t| t.name.to_string()).collect();
        assert_eq!(listed, ["get_weather"]);
        assert_eq!(model_name("get_weather"), "mcp__custom__get_weather");
        let manifest = tools.manifest();
        assert_eq!(
            manifest["toolsListResult"]["tools"][0]["name"],
            "get_weather"
        );
        assert_eq!(
            manifest["initializeResult"]["serverInfo"]["name"],
            CLIENT_SERVER
        );
        assert!(tools
            .prepare("get_weather", json!({"city": "Paris"}))
            .is_ok());
        let refused = tools
            .prepare("get_weather", json!({"city": 5}))
            .unwrap_err();
        assert!(refused.contains("/city"), "{refused}");
        let unknown = tools.prepare("nope", json!({})).unwrap_err();
        assert!(unknown.contains("unknown tool `nope`"), "{unknown}");
    }

    #[test]
    fn bad_names_and_schemas_are_refused_by_what_is_wrong() {
        let object = json!({"type": "object"});
        let cases = [
            (vec![spec("bad name", object.clone())], "1 to 64"),
            (vec![spec("", object.clone())], "1 to 64"),
            (vec![spec(&"x".repeat(52), object.clone())], "at most 64"),
            (
                vec![spec("a", object.clone()), spec("a", object.clone())],
                "twice",
            ),
            (
                vec![spec(
                    "a",
                    json!({"type": "object", "properties": {"n": {"type": 5}}}),
                )],
                "not a valid JSON Schema",
            ),
            (
                vec![spec(
                    "a",
                    json!({"type": "object", "anyOf": [{"required": ["a"]}]}),
                )],
                "refused by the Messages API",
            ),
        ];
        for (specs, expected) in cases {
            let err = ClientTools::compile(specs).expect_err(expected).to_string();
            assert!(err.contains(expected), "{err}");
        }
        assert!(ClientTools::compile([spec(&"x".repeat(51), object)]).is_ok());
    }

    #[tokio::test]
    async fn an_answer_resolves_the_call_that_waits_and_only_that_one() {
        let calls = ClientCalls::default();
        let thread = ThreadId::from_string("t1".to_owned());
        let other = ThreadId::from_string("t2".to_owned());
        let waiting = calls.wait(&thread, "toolu_1").unwrap();
        assert!(calls.wait(&thread, "toolu_1").is_none(), "one call per id");
        assert!(calls.is_waiting(&thread, "toolu_1"));
        assert!(
            calls.answer(&other, "toolu_1", text("x")).is_err(),
            "another thread's"
        );
        assert!(
            calls.answer(&thread, "toolu_2", text("x")).is_err(),
            "an unknown id"
        );
        calls.answer(&thread, "toolu_1", text("42")).unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting.answered())
            .await
            .unwrap();
        assert_eq!(answer, text("42"));
        assert!(!calls.is_waiting(&thread, "toolu_1"));
        assert!(calls.answer(&thread, "toolu_1", text("again")).is_err());
    }

    #[tokio::test]
    async fn an_answer_before_its_call_registers_waits_for_it_a_little() {
        let calls = ClientCalls::default();
        let thread = ThreadId::from_string("t1".to_owned());
        let early = {
            let (calls, thread) = (calls.clone(), thread.clone());
            tokio::spawn(async move {
                let grace = Duration::from_secs(10);
                calls
                    .answer_within(&thread, "toolu_1", text("early"), grace)
                    .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        let waiting = calls.wait(&thread, "toolu_1").unwrap();
        let answer = tokio::time::timeout(Duration::from_secs(5), waiting.answered())
            .await
            .unwrap();
        assert_eq!(answer, text("early"));
        early.await.unwrap().unwrap();
        let unknown = calls.answer_within(&thread, "toolu_9", text("x"), Duration::from_millis(20));
        assert!(unknown.await.is_err(), "no call registers: refused");
    }

    #[test]
    fn a_call_dropped_unanswered_waits_no_more() {
        let calls = ClientCalls::default();
        let thread = ThreadId::from_string("t1".to_owned());
        let waiting = calls.wait(&thread, "toolu_1").unwrap();
        drop(waiting);
        assert!(!calls.is_waiting(&thread, "toolu_1"));
        let err = calls.answer(&thread, "toolu_1", text("late")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "tool use toolu_1 is not waiting for a result"
        );
    }
}
