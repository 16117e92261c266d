//! A2A v0.3's JSON-RPC methods on the same door, for the agent frameworks that still speak it
//! (a2a-sdk 0.3, and the SDKs' v0.3 compatibility transports): `message/send`,
//! `message/stream`, `tasks/get`, `tasks/cancel`, `tasks/resubscribe`,
//! `tasks/pushNotificationConfig/{set,get,list,delete}` and
//! `agent/getAuthenticatedExtendedCard`. Each is read into its v1.0 method and params, answered
//! by the same handlers, and the answer written back in v0.3's shape (`api::a2a::v03`); a push
//! endpoint registered in v0.3 is sent v0.3's push (the task). Errors keep A2A's codes, which
//! v0.3 shares. No IO.

use serde_json::{json, Value};

use super::wire::{Method, RpcError};
use crate::api::a2a::v03;

/// Which version of A2A a request spoke, and its answer speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    V1,
    V03,
}

/// The method and dialect of the JSON-RPC method `name`; `None`: neither version's.
pub fn method(name: &str) -> Option<(Method, Dialect)> {
    if let Some(method) = Method::parse(name) {
        return Some((method, Dialect::V1));
    }
    let method = match name {
        "message/send" => Method::SendMessage,
        "message/stream" => Method::SendStreamingMessage,
        "tasks/get" => Method::GetTask,
        "tasks/cancel" => Method::CancelTask,
        "tasks/resubscribe" => Method::SubscribeToTask,
        "tasks/pushNotificationConfig/set" => Method::CreateTaskPushNotificationConfig,
        "tasks/pushNotificationConfig/get" => Method::GetTaskPushNotificationConfig,
        "tasks/pushNotificationConfig/list" => Method::ListTaskPushNotificationConfigs,
        "tasks/pushNotificationConfig/delete" => Method::DeleteTaskPushNotificationConfig,
        "agent/getAuthenticatedExtendedCard" => Method::GetExtendedAgentCard,
        _ => return None,
    };
    Some((method, Dialect::V03))
}

impl Dialect {
    /// The params of `method` as the v1.0 handlers read them.
    pub fn params(self, method: Method, params: Value) -> Result<Value, RpcError> {
        if self == Dialect::V1 {
            return Ok(params);
        }
        let field = |name: &str| params.get(name).cloned().unwrap_or(Value::Null);
        Ok(match method {
            Method::SendMessage | Method::SendStreamingMessage => send_params(&params)?,
            // `{taskId, pushNotificationConfig: {id, url, token}}`.
            Method::CreateTaskPushNotificationConfig => {
                let mut config = field("pushNotificationConfig");
                if !config.is_object() {
                    let why = "params.pushNotificationConfig is required";
                    return Err(RpcError::invalid_params(why));
                }
                config["taskId"] = field("taskId");
                config
            }
            // `{id: the task, pushNotificationConfigId}`.
            Method::GetTaskPushNotificationConfig
            | Method::ListTaskPushNotificationConfigs
            | Method::DeleteTaskPushNotificationConfig => {
                json!({"taskId": field("id"), "id": field("pushNotificationConfigId")})
            }
            // `{id, historyLength}` and `{id}`, as v1.0 has them.
            _ => params,
        })
    }

    /// The v1.0 result of `method` as this dialect answers it.
    pub fn result(self, method: Method, result: Value) -> Value {
        if self == Dialect::V1 {
            return result;
        }
        match method {
            // `{task}` or `{message}`: the object itself, with its kind.
            Method::SendMessage => v03::event(&result),
            Method::GetTask | Method::CancelTask => v03::task(&result),
            Method::CreateTaskPushNotificationConfig | Method::GetTaskPushNotificationConfig => {
                push_config(&result)
            }
            Method::ListTaskPushNotificationConfigs => {
                let configs = result["configs"].as_array().cloned().unwrap_or_default();
                configs.iter().map(push_config).collect()
            }
            _ => result,
        }
    }

    /// One event of a stream (a v1.0 `StreamResponse`) as this dialect sends it.
    pub fn event(self, event: Value) -> Value {
        match self {
            Dialect::V1 => event,
            Dialect::V03 => v03::event(&event),
        }
    }
}

/// `message/send`'s params: the message in v1.0's shape, `configuration.blocking` as
/// `returnImmediately`, the push config under v1.0's name.
fn send_params(params: &Value) -> Result<Value, RpcError> {
    let message = params
        .get("message")
        .ok_or_else(|| RpcError::invalid_params("params.message is required"))?;
    let message = v03::message_v1(message).map_err(RpcError::invalid_params)?;
    let mut out = json!({"message": message, "configuration": {}});
    if let Some(metadata) = params.get("metadata") {
        out["metadata"] = metadata.clone();
    }
    let config = params.get("configuration").cloned().unwrap_or_default();
    if let Some(blocking) = config.get("blocking").and_then(Value::as_bool) {
        out["configuration"]["returnImmediately"] = json!(!blocking);
    }
    if let Some(push) = config.get("pushNotificationConfig") {
        out["configuration"]["taskPushNotificationConfig"] = push.clone();
    }
    Ok(out)
}

/// A v1.0 `TaskPushNotificationConfig` (`{id, taskId, url}`) in v0.3's shape.
fn push_config(v1: &Value) -> Value {
    json!({
        "taskId": v1["taskId"],
        "pushNotificationConfig": {"id": v1["id"], "url": v1["url"]},
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_name_the_same_methods() {
        assert_eq!(
            method("SendMessage"),
            Some((Method::SendMessage, Dialect::V1))
        );
        let legacy = [
            ("message/send", Method::SendMessage),
            ("message/stream", Method::SendStreamingMessage),
            ("tasks/get", Method::GetTask),
            ("tasks/cancel", Method::CancelTask),
            ("tasks/resubscribe", Method::SubscribeToTask),
            (
                "tasks/pushNotificationConfig/list",
                Method::ListTaskPushNotificationConfigs,
            ),
        ];
        for (name, expected) in legacy {
            assert_eq!(method(name), Some((expected, Dialect::V03)), "{name}");
        }
        assert_eq!(method("tasks/send"), None, "v0.2's name is not taken");
    }

    #[test]
    fn a_v03_send_reads_as_v1s() {
        let params = json!({
            "message": {"kind": "message", "messageId": "m1", "role": "user",
                        "contextId": "thr_1", "parts": [{"kind": "text", "text": "hi"}]},
            "configuration": {"blocking": false,
                              "pushNotificationConfig": {"url": "https://x/p", "token": "t"}},
            "metadata": {"skill": "lean"},
        });
        let v1 = Dialect::V03.params(Method::SendMessage, params).unwrap();
        assert_eq!(v1["message"]["parts"], json!([{"text": "hi"}]));
        assert_eq!(v1["message"]["role"], "ROLE_USER");
        assert_eq!(v1["configuration"]["returnImmediately"], true);
        assert_eq!(
            v1["configuration"]["taskPushNotificationConfig"]["url"],
            "https://x/p"
        );
        assert_eq!(v1["metadata"]["skill"], "lean");
        let send = super::super::wire::send(&v1).unwrap();
        assert_eq!((send.text.as_str(), send.return_immediately), ("hi", true));

        let no_kind = json!({"message": {"messageId": "m", "parts": [{"text": "v1 part"}]}});
        let err = Dialect::V03
            .params(Method::SendMessage, no_kind)
            .unwrap_err();
        assert_eq!(err.code, RpcError::INVALID_PARAMS);
    }

    #[test]
    fn push_configs_move_between_shapes() {
        let set = json!({"taskId": "msg_1",
                         "pushNotificationConfig": {"url": "https://x/p", "token": "tok"}});
        let v1 = Dialect::V03
            .params(Method::CreateTaskPushNotificationConfig, set)
            .unwrap();
        assert_eq!(
            v1,
            json!({"taskId": "msg_1", "url": "https://x/p", "token": "tok"})
        );
        let get = json!({"id": "msg_1", "pushNotificationConfigId": "thr_1"});
        let v1 = Dialect::V03
            .params(Method::GetTaskPushNotificationConfig, get)
            .unwrap();
        assert_eq!(v1, json!({"taskId": "msg_1", "id": "thr_1"}));
        let config = json!({"id": "thr_1", "taskId": "msg_1", "url": "https://x/p"});
        let listed = Dialect::V03.result(
            Method::ListTaskPushNotificationConfigs,
            json!({"configs": [config]}),
        );
        assert_eq!(
            listed,
            json!([{"taskId": "msg_1",
                    "pushNotificationConfig": {"id": "thr_1", "url": "https://x/p"}}])
        );
        let missing = json!({"taskId": "msg_1"});
        assert!(Dialect::V03
            .params(Method::CreateTaskPushNotificationConfig, missing)
            .is_err());
    }

    #[test]
    fn v1_is_left_as_it_is() {
        let params = json!({"message": {"parts": [{"text": "x"}]}});
        let same = Dialect::V1.params(Method::SendMessage, params.clone());
        assert_eq!(same.unwrap(), params);
        let result = json!({"task": {"id": "msg_1"}});
        assert_eq!(
            Dialect::V1.result(Method::SendMessage, result.clone()),
            result
        );
    }
}
