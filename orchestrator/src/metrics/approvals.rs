//! The approvals' series: tool permissions as decided, and those waiting for a person.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::gauge_value;

series! {
    /// Owned by the approvals: every tool-permission decision, by what was decided and by whom,
    /// and the requests a person has not answered yet.
    pub struct ApprovalMetrics {
        decisions: Family<DecisionLabel, Counter> => "permission_decisions",
            "Tool permissions the CLI asked for, by decision (allow, deny) and by whom (rule, person, timeout, policy, interrupt)";
        pending: Gauge => "permissions_pending", "Tool permissions waiting for a person";
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DecisionLabel {
    decision: &'static str,
    by: &'static str,
}

impl ApprovalMetrics {
    /// `decision`: `allow` or `deny`; `by`: `rule`, `person`, `timeout`, `policy`, `interrupt`.
    pub fn decided(&self, decision: &'static str, by: &'static str) {
        self.decisions
            .get_or_create(&DecisionLabel { decision, by })
            .inc();
    }

    /// How many decisions of this kind so far.
    pub fn count(&self, decision: &'static str, by: &'static str) -> u64 {
        self.decisions
            .get_or_create(&DecisionLabel { decision, by })
            .get()
    }

    pub fn set_pending(&self, pending: usize) {
        self.pending.set(gauge_value(pending));
    }
}
