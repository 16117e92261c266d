//! ACP's methods over the daemon: `initialize`, `session/new` (a thread in the editor's folder),
//! `session/load` (the thread's history replayed), `session/prompt` (a turn, in [`super::turn`])
//! and `session/cancel` (the daemon's interrupt). The session id is the thread id; the only
//! state here is which message of a session is running, so a cancel can name it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::http::Method;
use serde_json::{json, Value};

use super::choices::Choices;
use super::rpc::{Peer, RpcError, INVALID_PARAMS, METHOD_NOT_FOUND};
use super::translate;
use super::turn;
use crate::remote::Daemon;

/// The ACP protocol version this agent speaks.
pub const PROTOCOL_VERSION: u64 = 1;

/// The agent: the daemon to drive, the client to tell, the turns running now.
#[derive(Clone)]
pub struct Agent {
    daemon: Daemon,
    peer: Peer,
    /// Per session (thread): the `clientMessageId` of the prompt running now, and the last event
    /// id a turn of it saw (the next turn's stream starts there instead of replaying the log).
    sessions: Arc<Mutex<HashMap<String, SessionState>>>,
}

#[derive(Default)]
struct SessionState {
    running: Option<String>,
    last_event_id: Option<String>,
    /// The editor's mode and model for this session's prompts (known once it was made or
    /// loaded on this connection).
    choices: Option<Choices>,
}

impl Agent {
    pub fn new(daemon: Daemon, peer: Peer) -> Agent {
        Agent {
            daemon,
            peer,
            sessions: Arc::default(),
        }
    }

    /// Answers one request.
    pub async fn handle(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => Ok(initialize(&params)),
            // No authentication methods are offered: the daemon's token comes from the
            // environment or `--token-file`, as for `harness send`.
            "authenticate" => Ok(json!({})),
            "session/new" => self.new_session(&params).await,
            "session/load" => self.load_session(&params).await,
            "session/prompt" => self.prompt(&params).await,
            "session/set_mode" => self.set_mode(&params),
            "session/set_config_option" => self.set_option(&params),
            other => Err(RpcError::new(
                METHOD_NOT_FOUND,
                format!("`{other}` is not supported by harness acp"),
            )),
        }
    }

    /// Handles one notification; `session/cancel` is the only one ACP sends an agent.
    pub async fn notified(&self, method: &str, params: Value) {
        if method != "session/cancel" {
            return;
        }
        let Some(session) = params["sessionId"].as_str() else {
            return;
        };
        let running = self.state(session, |s| s.running.clone());
        if let Some(client_message_id) = running {
            let path =
                format!("/api/threads/{session}/interrupt?clientMessageId={client_message_id}");
            if let Err(err) = self.daemon.call(Method::POST, &path, None).await {
                tracing::warn!(thread_id = %session, error = %err.chain(), "ACP: an interrupt failed.");
            }
        }
    }

    /// `session/new`: a thread whose workspace is the editor's folder. `mcpServers` are not
    /// passed on (the daemon's profiles say which MCP servers a thread has).
    async fn new_session(&self, params: &Value) -> Result<Value, RpcError> {
        let cwd = params["cwd"]
            .as_str()
            .ok_or_else(|| RpcError::new(INVALID_PARAMS, "`cwd` is required"))?;
        let body = json!({"title": title_for(cwd), "workspace": {"path": cwd}});
        let thread = self
            .daemon
            .call(Method::POST, "/api/threads", Some(body))
            .await?;
        let id = thread["id"].as_str().unwrap_or_default();
        let choices = self.choices_for(&thread).await;
        let answer = json!({
            "sessionId": id,
            "modes": choices.modes(),
            "configOptions": choices.config_options(),
        });
        self.state(id, |s| s.choices = Some(choices));
        Ok(answer)
    }

    /// A session's choices at its start, from its thread and the thread's profile (the
    /// profile's own mode bounds the modes offered; a profile that cannot be read offers the
    /// default's).
    async fn choices_for(&self, thread: &Value) -> Choices {
        let model = thread["model"].as_str();
        let profile = thread["profile"].as_str();
        let profiles = self.daemon.call(Method::GET, "/api/profiles", None).await;
        let mode = profiles.ok().and_then(|all| {
            all["profiles"]
                .as_array()?
                .iter()
                .find(|p| match profile {
                    Some(name) => p["name"] == name,
                    None => p["default"] == true,
                })
                .and_then(|p| p["permissionMode"].as_str().map(str::to_owned))
        });
        Choices::new(mode.as_deref(), model)
    }

    /// `session/set_mode`: the mode of the session's next prompts.
    fn set_mode(&self, params: &Value) -> Result<Value, RpcError> {
        let session = session_id(params)?;
        let mode = params["modeId"]
            .as_str()
            .ok_or_else(|| RpcError::new(INVALID_PARAMS, "`modeId` is required"))?;
        self.choose(session, |choices| choices.set_mode(mode))?;
        let update = json!({"sessionUpdate": "current_mode_update", "currentModeId": mode});
        self.peer.notify(
            "session/update",
            json!({"sessionId": session, "update": update}),
        );
        Ok(json!({}))
    }

    /// `session/set_config_option`: the model of the session's next prompts.
    fn set_option(&self, params: &Value) -> Result<Value, RpcError> {
        let session = session_id(params)?;
        let id = params["configId"].as_str().unwrap_or_default();
        let value = params["value"]
            .as_str()
            .ok_or_else(|| RpcError::new(INVALID_PARAMS, "`value` must be a string"))?;
        let options = self.choose(session, |choices| {
            choices.set_option(id, value)?;
            Ok(choices.config_options())
        })?;
        Ok(json!({"configOptions": options}))
    }

    /// Changes the session's choices; a session not made or loaded on this connection has none.
    fn choose<T>(
        &self,
        session: &str,
        change: impl FnOnce(&mut Choices) -> Result<T, String>,
    ) -> Result<T, RpcError> {
        self.state(session, |s| match &mut s.choices {
            Some(choices) => change(choices).map_err(|why| RpcError::new(INVALID_PARAMS, why)),
            None => Err(RpcError::new(
                INVALID_PARAMS,
                format!("session {session} was not made or loaded on this connection"),
            )),
        })
    }

    /// `session/load`: every stored message of the thread as `session/update`s, oldest first,
    /// each prompt followed by its turn's thoughts, tool calls and plan where the event log still
    /// holds them (retention compacts old turns), then the answer.
    async fn load_session(&self, params: &Value) -> Result<Value, RpcError> {
        let session = session_id(params)?;
        let thread = self
            .daemon
            .call(Method::GET, &format!("/api/threads/{session}"), None)
            .await?;
        let mut older = Vec::new();
        let mut cursor = thread["messagesCursor"].as_str().map(str::to_owned);
        while let Some(before) = cursor {
            let path = format!("/api/threads/{session}/messages?limit=500&before={before}");
            let page = self.daemon.call(Method::GET, &path, None).await?;
            older.extend(page["messages"].as_array().cloned().unwrap_or_default());
            cursor = page["nextCursor"].as_str().map(str::to_owned);
        }
        let newest = thread["messages"].as_array().cloned().unwrap_or_default();
        let choices = self.choices_for(&thread).await;
        // Each turn's updates, by its user message.
        let mut turns: HashMap<String, Vec<Value>> = HashMap::new();
        for event in self.daemon.stored_events(session).await? {
            let update = translate::replay_event(&event.kind, &event.data);
            if let (Some(message), Some(update)) = (event.message_id, update) {
                turns.entry(message).or_default().push(update);
            }
        }
        let notify = |update| {
            let params = json!({"sessionId": session, "update": update});
            self.peer.notify("session/update", params);
        };
        for message in older.iter().rev().chain(newest.iter()) {
            if let Some(update) = translate::replay(message) {
                notify(update);
            }
            let turn = message["id"].as_str().and_then(|id| turns.remove(id));
            turn.into_iter().flatten().for_each(notify);
        }
        let answer = json!({"modes": choices.modes(), "configOptions": choices.config_options()});
        self.state(session, |s| s.choices = Some(choices));
        Ok(answer)
    }

    /// `session/prompt`: one turn, streamed, to its stop reason.
    async fn prompt(&self, params: &Value) -> Result<Value, RpcError> {
        let session = session_id(params)?.to_owned();
        let blocks = params["prompt"].as_array().cloned().unwrap_or_default();
        let content = translate::message_content(&blocks)
            .map_err(|reason| RpcError::new(INVALID_PARAMS, reason))?;
        let client_message_id = format!("acp-{}", uuid::Uuid::new_v4());
        let (after, options) = self.state(&session, |s| {
            s.running = Some(client_message_id.clone());
            let options = s.choices.as_ref().map(Choices::message_options);
            (s.last_event_id.clone(), options)
        });
        let turn = turn::Turn {
            daemon: &self.daemon,
            peer: &self.peer,
            session: &session,
            client_message_id: &client_message_id,
        };
        let ended = turn.run(content, options, after.as_deref()).await;
        self.state(&session, |s| {
            s.running = None;
            if let Ok((_, Some(last))) = &ended {
                s.last_event_id = Some(last.clone());
            }
        });
        let (stop_reason, _) = ended?;
        Ok(json!({"stopReason": stop_reason}))
    }

    fn state<T>(&self, session: &str, f: impl FnOnce(&mut SessionState) -> T) -> T {
        let mut sessions = self
            .sessions
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(sessions.entry(session.to_owned()).or_default())
    }
}

/// `initialize`'s answer: version 1, sessions load, prompts take images and embedded resources.
fn initialize(_params: &Value) -> Value {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        "agentCapabilities": {
            "loadSession": true,
            "promptCapabilities": {"image": true, "audio": false, "embeddedContext": true},
            "mcpCapabilities": {"http": false, "sse": false},
        },
        "authMethods": [],
        "agentInfo": {"name": "harness", "title": "Harness", "version": env!("CARGO_PKG_VERSION")},
    })
}

fn session_id(params: &Value) -> Result<&str, RpcError> {
    params["sessionId"]
        .as_str()
        .ok_or_else(|| RpcError::new(INVALID_PARAMS, "`sessionId` is required"))
}

/// A thread title naming the editor's folder.
fn title_for(cwd: &str) -> String {
    let folder = std::path::Path::new(cwd)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or(cwd);
    format!("ACP: {folder}")
}
