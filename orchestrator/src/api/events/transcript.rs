//! The events of a thread's stored transcript (`transcript_*`): history at risk, repaired, or
//! given up on. The pool says what happened ([`TranscriptNote`]); a `system/mirror_error` the CLI
//! would pass on (an SDK host's; Harness is the host, and its own refusals are notes) reads the
//! same way, as entries at risk that no one holds.

use serde::Serialize;
use utoipa::ToSchema;

use super::ThreadEvent;
use crate::pool::TranscriptNote;

/// `transcript_at_risk`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptAtRisk {
    /// The CLI session the entries belong to.
    pub session_id: Option<String>,
    /// How many entries the store refused (0: not known).
    pub entries: u64,
    /// The store's error.
    pub error: String,
    /// True when the daemon holds them and writes them first, before the thread's next frame;
    /// they are gone if it stops before.
    pub held: bool,
}

/// `transcript_repaired`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptRepaired {
    /// How many held entries were written.
    pub entries: u64,
}

/// `transcript_unrepaired`.
#[derive(Clone, Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptUnrepaired {
    /// The session that was not resumed.
    pub session_id: String,
    /// Why its stored transcript cannot be made whole.
    pub reason: String,
}

impl From<TranscriptNote> for ThreadEvent {
    fn from(note: TranscriptNote) -> Self {
        match note {
            TranscriptNote::AtRisk {
                session,
                entries,
                error,
            } => ThreadEvent::TranscriptAtRisk(TranscriptAtRisk {
                session_id: Some(session.as_str().to_owned()),
                entries,
                error,
                held: true,
            }),
            TranscriptNote::Repaired { entries } => {
                ThreadEvent::TranscriptRepaired(TranscriptRepaired { entries })
            }
            TranscriptNote::Unrepaired { session, reason } => {
                ThreadEvent::TranscriptUnrepaired(TranscriptUnrepaired {
                    session_id: session.as_str().to_owned(),
                    reason,
                })
            }
        }
    }
}

impl From<claude_cli::MirrorError> for TranscriptAtRisk {
    fn from(error: claude_cli::MirrorError) -> Self {
        TranscriptAtRisk {
            session_id: error.session_id,
            entries: 0,
            error: error.error,
            held: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use plugin_contract::CliSessionId;
    use serde_json::json;

    use super::*;

    #[test]
    fn the_pool_notes_and_a_mirror_error_are_the_transcript_events() {
        let event = |e: ThreadEvent| (e.kind().as_str(), e.data());
        let at_risk = TranscriptNote::AtRisk {
            session: CliSessionId::from_string("s1"),
            entries: 3,
            error: "refused".into(),
        };
        assert_eq!(
            event(at_risk.into()),
            (
                "transcript_at_risk",
                json!({"sessionId": "s1", "entries": 3, "error": "refused", "held": true})
            )
        );
        // An SDK host's line: at risk, but nothing held to write.
        let mirror = claude_cli::TurnEvent::MirrorError(claude_cli::MirrorError {
            error: "disk full".into(),
            session_id: Some("s2".into()),
            subpath: None,
        });
        assert_eq!(
            event(mirror.into()),
            (
                "transcript_at_risk",
                json!({"sessionId": "s2", "entries": 0, "error": "disk full", "held": false})
            )
        );
        assert_eq!(
            event(TranscriptNote::Repaired { entries: 3 }.into()),
            ("transcript_repaired", json!({"entries": 3}))
        );
        let unrepaired = TranscriptNote::Unrepaired {
            session: CliSessionId::from_string("s1"),
            reason: "gone".into(),
        };
        assert_eq!(
            event(unrepaired.into()),
            (
                "transcript_unrepaired",
                json!({"sessionId": "s1", "reason": "gone"})
            )
        );
    }
}
