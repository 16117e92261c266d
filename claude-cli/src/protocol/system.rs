//! `system` lines: every subtype the crate knows is in [`SYSTEM_SUBTYPES`], either mapped to a
//! [`TurnEvent`] (or to the turn's start) or ignored with the reason written beside it. A subtype
//! not in the table is passed by like an ignored one; a test holds the table, so taking a new
//! subtype in is a decision someone wrote down.

use serde::{Deserialize, Serialize};

use super::{lenient, lenient_list, ApiRetry, Progress, TurnEvent};

/// What the host does with a `system` subtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SystemHandling {
    /// It becomes a [`TurnEvent`], or starts the turn (`init`).
    Mapped,
    /// It is passed by, for the reason given.
    Ignored(&'static str),
}

use SystemHandling::{Ignored, Mapped};

/// Every `system` subtype the crate knows, and what it does with each.
pub const SYSTEM_SUBTYPES: &[(&str, SystemHandling)] = &[
    ("init", Mapped),
    ("api_retry", Mapped),
    ("model_refusal_fallback", Mapped),
    ("memory_recall", Mapped),
    ("mirror_error", Mapped),
    (
        "files_persisted",
        Ignored("cloud file persistence (a remote session's files uploaded); the host uses none"),
    ),
    (
        "status",
        Ignored("`requesting`, `compacting`; the mode in effect is read from each turn's `init`"),
    ),
    (
        "permission_denied",
        Ignored("the denial was the host's own answer, recorded when it was given"),
    ),
    (
        "session_state_changed",
        Ignored("`running`/`idle`: the host reads a turn's start and end from `init` and `result`"),
    ),
    ("ui_invalidate", Ignored("a terminal UI's repaint")),
    (
        "session_title_changed",
        Ignored("the title the host gave, or the CLI's own, which the host does not show"),
    ),
    (
        "compact_boundary",
        Ignored("the CLI compacted its context; the host's history is its own store"),
    ),
    (
        "task_started",
        Ignored("background tasks: their turns reach the host as the CLI's own turns"),
    ),
    (
        "task_progress",
        Ignored("background tasks, as `task_started`"),
    ),
    (
        "task_updated",
        Ignored("background tasks, as `task_started`"),
    ),
    (
        "task_notification",
        Ignored("background tasks, as `task_started`"),
    ),
    (
        "background_tasks_changed",
        Ignored("background tasks, as `task_started`"),
    ),
    (
        "hook_started",
        Ignored("hooks' progress; the host registers its hooks over the control channel"),
    ),
    (
        "hook_progress",
        Ignored("hooks' progress, as `hook_started`"),
    ),
    (
        "hook_response",
        Ignored("hooks' progress, as `hook_started`"),
    ),
];

impl SystemHandling {
    /// What the host does with `subtype`; `None` for one the crate does not know (passed by).
    pub fn of(subtype: &str) -> Option<SystemHandling> {
        SYSTEM_SUBTYPES
            .iter()
            .find(|(name, _)| *name == subtype)
            .map(|(_, handling)| *handling)
    }
}

/// The reply came from another model than the one asked (`system/model_refusal_fallback`): the
/// first refused, and the CLI asked `fallback_model`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ModelRefusalFallback {
    /// What made the CLI switch: `refusal`.
    #[serde(default, deserialize_with = "lenient")]
    pub trigger: String,
    /// `retry` (this request again on the fallback), `revert` (back to the original) or
    /// `sticky` (the fallback stays).
    #[serde(default, deserialize_with = "lenient")]
    pub direction: String,
    /// How long the switch holds: `session` or `local` (this request).
    #[serde(default, deserialize_with = "lenient")]
    pub scope: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub original_model: String,
    #[serde(default, deserialize_with = "lenient")]
    pub fallback_model: String,
    /// The refused request's id at the API.
    #[serde(default, deserialize_with = "lenient")]
    pub request_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    pub api_refusal_category: Option<String>,
}

/// The CLI's memory surfaced files into the turn (`system/memory_recall`; only with its auto
/// memory on, `claude.auto_memory`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MemoryRecall {
    /// `select` (memories picked as they are) or `synthesize` (a summary made of them).
    #[serde(default, deserialize_with = "lenient")]
    pub mode: String,
    #[serde(default, deserialize_with = "lenient_list")]
    pub memories: Vec<RecalledMemory>,
}

/// One memory of a [`MemoryRecall`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RecalledMemory {
    /// The memory file.
    pub path: String,
    /// `personal`, `team` or `organization`.
    #[serde(default, deserialize_with = "lenient")]
    pub scope: String,
    /// What was recalled, when the line carries it (`synthesize`).
    #[serde(
        default,
        deserialize_with = "lenient",
        skip_serializing_if = "Option::is_none"
    )]
    pub content: Option<String>,
}

/// A transcript-mirror write failed (`system/mirror_error`): entries of the session are missing
/// from the host's store. An SDK host emits it when its store refused a `transcript_mirror`
/// batch; the CLI does not write it itself.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct MirrorError {
    pub error: String,
    /// The session the lost entries belong to.
    pub session_id: Option<String>,
    /// The file under the session, when not its main transcript (a sub-agent's).
    pub subpath: Option<String>,
}

/// A `system` line, with the fields of every mapped subtype.
#[derive(Deserialize)]
pub(super) struct SystemLine {
    #[serde(default, deserialize_with = "lenient")]
    subtype: String,
    #[serde(default, deserialize_with = "lenient")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    attempt: u64,
    #[serde(default, deserialize_with = "lenient")]
    max_retries: u64,
    #[serde(default, deserialize_with = "lenient")]
    retry_delay_ms: u64,
    #[serde(default, deserialize_with = "lenient")]
    error: String,
    #[serde(default, deserialize_with = "lenient")]
    error_status: Option<u64>,
    /// On `init`: the permission mode the turn runs in.
    #[serde(default, rename = "permissionMode", deserialize_with = "lenient")]
    permission_mode: Option<String>,
    /// `mirror_error`'s: the store key the batch was for.
    #[serde(default, deserialize_with = "lenient")]
    key: MirrorKey,
    /// The rest, for the subtypes whose fields are a payload type's own.
    #[serde(flatten)]
    rest: serde_json::Map<String, serde_json::Value>,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MirrorKey {
    #[serde(default, deserialize_with = "lenient")]
    session_id: Option<String>,
    #[serde(default, deserialize_with = "lenient")]
    subpath: Option<String>,
}

impl SystemLine {
    /// `init` starts a turn; each other mapped subtype is one event; the rest carry only the
    /// session id.
    pub(super) fn into_progress(self) -> Progress {
        let rest = serde_json::Value::Object(self.rest);
        let event = match self.subtype.as_str() {
            "api_retry" => Some(TurnEvent::ApiRetry(ApiRetry {
                attempt: self.attempt,
                max_retries: self.max_retries,
                retry_delay_ms: self.retry_delay_ms,
                error: self.error,
                status: self.error_status,
            })),
            "model_refusal_fallback" => serde_json::from_value(rest)
                .ok()
                .map(TurnEvent::ModelRefusalFallback),
            "memory_recall" => serde_json::from_value(rest)
                .ok()
                .map(TurnEvent::MemoryRecall),
            "mirror_error" => Some(TurnEvent::MirrorError(MirrorError {
                error: self.error,
                session_id: self.key.session_id.or(self.session_id.clone()),
                subpath: self.key.subpath,
            })),
            _ => None,
        };
        Progress {
            starts_turn: self.subtype == "init",
            events: event.into_iter().collect(),
            session_id: self.session_id,
            model_call: None,
            permission_mode: self.permission_mode,
        }
    }
}
