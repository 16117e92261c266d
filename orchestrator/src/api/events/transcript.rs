//! The events of a thread's stored transcript (`transcript_*`): history at risk, repaired, or
//! given up on. The pool says what happened (`pool::TranscriptNote`, which it turns into these events); a `system/mirror_error` the CLI
//! would pass on (an SDK host's; Harness is the host, and its own refusals are notes) reads the
//! same way, as entries at risk that no one holds.

use serde::Serialize;
use utoipa::ToSchema;

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
