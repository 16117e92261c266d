//! `[threads]`: what happens to a thread's children when it is deleted.

use serde::Deserialize;

/// `[threads]`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThreadsConfig {
    /// `DELETE /api/threads/{id}` and the threads it forked or delegated to: `keep` (the
    /// default: they stay, with no parent) or `cascade` (deleted with it).
    pub delete_children: DeleteChildren,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeleteChildren {
    #[default]
    Keep,
    Cascade,
}

impl ThreadsConfig {
    pub fn cascade_delete(&self) -> bool {
        self.delete_children == DeleteChildren::Cascade
    }
}
