//! `[files]`: how large the images and documents of messages may be (see `crate::files`).

use serde::Deserialize;

/// `[files]`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FilesConfig {
    /// Largest image or document, in bytes (decoded, not base64): 413 beyond.
    pub max_file_bytes: usize,
    /// Most bytes of images and documents one message may carry together: 413 beyond. A
    /// message's request body may be this much (as base64) beyond `max_body_bytes`.
    pub max_message_bytes: usize,
}

impl Default for FilesConfig {
    fn default() -> Self {
        // The Messages API's own limit for a request.
        FilesConfig {
            max_file_bytes: 32 * 1024 * 1024,
            max_message_bytes: 32 * 1024 * 1024,
        }
    }
}

impl FilesConfig {
    /// The largest request body a message may have: `max_body_bytes` and its files as base64.
    pub fn message_body_limit(&self, max_body_bytes: usize) -> usize {
        max_body_bytes.saturating_add(self.max_message_bytes.saturating_mul(4) / 3 + 4096)
    }
}
