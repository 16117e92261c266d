//! Images and documents of user messages: what is accepted, how it is stored, and how a turn
//! gets the bytes back.
//!
//! A message's [`UserContent`] is carried whole from the API to the CLI. On its way in
//! ([`Files::accept`]) every image or document becomes a file reference: base64 bytes are
//! decoded, checked and stored, a reference to a file uploaded before (`POST /api/files`,
//! [`Files::upload`]) is checked to exist and be the caller's. So the store, the history, the
//! thread's API view and an idempotent retry all hold references, never megabytes of base64.
//! Just before the CLI sees a prompt ([`Files::resolve`]) each reference becomes its bytes again.
//!
//! What is checked, each with its own [`FileError`] (4xx, nothing stored):
//! - the media type is one the Messages API takes ([`MEDIA_TYPES`]), and the bytes' magic numbers
//!   say the same type (a PNG sent as `image/jpeg` is refused);
//! - an image block holds an image and a document block a PDF;
//! - base64 decodes (standard alphabet);
//! - one file is at most `files.max_file_bytes`, a message's files together at most
//!   `files.max_message_bytes`.
//!
//! **Storage.** A file is stored once per owner (the tenant, `""` for the operator) and content:
//! its id is derived from both ([`file_id`]), so every node of a cluster computes the same id and
//! an upload repeated is one row. A tenant's caller sees only its own tenant's files (another's
//! answer 404, as if they did not exist); the operator and `admin` see all.
//!
//! [`folder`]: files out, from a thread's folder.

pub mod folder;

use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use plugin_contract::{ContentBlock, MediaSource, UserContent};

use crate::caller::Caller;
use crate::secret::hex;
use crate::store::{FileRow, NewFile, Store, StoreError};

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

/// The media types an image or document may have: what the Messages API accepts.
pub const MEDIA_TYPES: [&str; 5] = [
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "application/pdf",
];

/// Why a file or a message's media was refused.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("unsupported media type {0:?}: send image/png, image/jpeg, image/gif, image/webp or application/pdf")]
    Unsupported(String),
    #[error("the bytes are not {declared}{}", found.as_ref().map(|f| format!(" but {f}")).unwrap_or_default())]
    Mismatch {
        declared: String,
        found: Option<String>,
    },
    #[error("content block {index}: {reason}")]
    Block { index: usize, reason: String },
    #[error("{what} is {bytes} bytes; the limit is {limit} (files.{setting})")]
    TooLarge {
        what: &'static str,
        bytes: usize,
        limit: usize,
        setting: &'static str,
    },
    #[error("no file {0}")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The daemon's files: the store and the limits.
#[derive(Clone)]
pub struct Files {
    store: Store,
    limits: FilesConfig,
}

impl Files {
    pub fn new(store: Store, limits: FilesConfig) -> Files {
        Files { store, limits }
    }

    pub fn limits(&self) -> &FilesConfig {
        &self.limits
    }

    /// Stores `data`, said to be `declared` (a `Content-Type`, parameters ignored), for `caller`.
    pub async fn upload(
        &self,
        caller: &Caller,
        declared: &str,
        data: &[u8],
    ) -> Result<FileRow, FileError> {
        let media_type = checked_type(declared, data)?;
        self.store_bytes(caller, media_type, data).await
    }

    /// Stores `data` of any media type (`declared`, parameters ignored; a malformed one is
    /// `application/octet-stream`) for `caller`: a file to put in a session's folder, never
    /// attached to a message as an image or document (only [`MEDIA_TYPES`] are).
    pub async fn upload_any(
        &self,
        caller: &Caller,
        declared: &str,
        data: &[u8],
    ) -> Result<FileRow, FileError> {
        let essence = essence(declared);
        let token = |part: &str| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$&^_.+-".contains(&b))
        };
        let media_type = match essence.split_once('/') {
            Some((kind, sub)) if token(kind) && token(sub) => essence.as_str(),
            _ => "application/octet-stream",
        };
        self.store_bytes(caller, media_type, data).await
    }

    async fn store_bytes(
        &self,
        caller: &Caller,
        media_type: &str,
        data: &[u8],
    ) -> Result<FileRow, FileError> {
        self.check_size(
            "the file",
            data.len(),
            self.limits.max_file_bytes,
            "max_file_bytes",
        )?;
        let owner = owner_of(caller);
        let sha256 = hex(&Sha256::digest(data));
        let id = file_id(owner, &sha256);
        Ok(self
            .store
            .insert_file(NewFile {
                id: &id,
                owner,
                sha256: &sha256,
                media_type,
                data,
            })
            .await?)
    }

    /// The file `id` and its bytes, when `caller` may see it.
    pub async fn download(
        &self,
        caller: &Caller,
        id: &str,
    ) -> Result<(FileRow, Vec<u8>), FileError> {
        let row = self.visible(caller, id).await?;
        let data = self
            .store
            .file_data(id)
            .await?
            .ok_or_else(|| FileError::NotFound(id.to_owned()))?;
        Ok((row, data))
    }

    /// The file `id` without its bytes, when `caller` may see it.
    pub async fn visible(&self, caller: &Caller, id: &str) -> Result<FileRow, FileError> {
        match self.store.file(id).await? {
            Some(row) if caller.sees(owner_tenant(&row.owner)) => Ok(row),
            _ => Err(FileError::NotFound(id.to_owned())),
        }
    }

    /// `content` as it is stored: every image and document a reference to a stored file, its
    /// media type and size filled in; base64 bytes stored on the way.
    pub async fn accept(
        &self,
        caller: &Caller,
        content: UserContent,
    ) -> Result<UserContent, FileError> {
        let UserContent::Blocks(blocks) = content else {
            return Ok(content);
        };
        let mut total = 0;
        let mut stored = Vec::with_capacity(blocks.len());
        for (index, block) in blocks.into_iter().enumerate() {
            let (is_image, source) = match block {
                ContentBlock::Text { .. } => {
                    stored.push(block);
                    continue;
                }
                ContentBlock::Image { source } => (true, source),
                ContentBlock::Document { source } => (false, source),
            };
            let row = match source {
                MediaSource::Base64 { media_type, data } => {
                    let bytes = base64::engine::general_purpose::STANDARD
                        .decode(data.trim())
                        .map_err(|err| FileError::Block {
                            index,
                            reason: format!("the base64 data does not decode: {err}"),
                        })?;
                    self.upload(caller, &media_type, &bytes)
                        .await
                        .map_err(|err| in_block(index, err))?
                }
                MediaSource::File { file_id, .. } => self
                    .visible(caller, &file_id)
                    .await
                    .map_err(|err| in_block(index, err))?,
            };
            let attachable = MEDIA_TYPES.contains(&row.media_type.as_str());
            if !attachable || row.media_type.starts_with("image/") != is_image {
                return Err(FileError::Block {
                    index,
                    reason: format!(
                        "{} is {}: an image block takes an image, a document block a PDF",
                        row.id, row.media_type
                    ),
                });
            }
            total += usize::try_from(row.bytes).unwrap_or(usize::MAX);
            let source = reference(&row);
            stored.push(if is_image {
                ContentBlock::Image { source }
            } else {
                ContentBlock::Document { source }
            });
        }
        self.check_size(
            "the message's files together",
            total,
            self.limits.max_message_bytes,
            "max_message_bytes",
        )?;
        Ok(UserContent::Blocks(stored))
    }

    /// `content` with every file reference replaced by its bytes (base64), for the CLI.
    pub async fn resolve(&self, content: UserContent) -> Result<UserContent, FileError> {
        if !content.unresolved() {
            return Ok(content);
        }
        let mut loaded = std::collections::HashMap::new();
        for source in content.media() {
            if let MediaSource::File { file_id, .. } = source {
                if loaded.contains_key(file_id) {
                    continue;
                }
                let row = self
                    .store
                    .file(file_id)
                    .await?
                    .ok_or_else(|| FileError::NotFound(file_id.clone()))?;
                let data = self
                    .store
                    .file_data(file_id)
                    .await?
                    .ok_or_else(|| FileError::NotFound(file_id.clone()))?;
                let encoded = base64::engine::general_purpose::STANDARD.encode(data);
                loaded.insert(file_id.clone(), (row.media_type, encoded));
            }
        }
        content.map_sources(|source| match source {
            MediaSource::File { file_id, .. } => {
                let (media_type, data) = loaded
                    .remove(&file_id)
                    .ok_or_else(|| FileError::NotFound(file_id.clone()))?;
                Ok(MediaSource::Base64 { media_type, data })
            }
            other => Ok(other),
        })
    }

    fn check_size(
        &self,
        what: &'static str,
        bytes: usize,
        limit: usize,
        setting: &'static str,
    ) -> Result<(), FileError> {
        if bytes > limit {
            return Err(FileError::TooLarge {
                what,
                bytes,
                limit,
                setting,
            });
        }
        Ok(())
    }
}

/// The reference a message stores for `row`.
pub fn reference(row: &FileRow) -> MediaSource {
    MediaSource::File {
        file_id: row.id.clone(),
        media_type: Some(row.media_type.clone()),
        bytes: u64::try_from(row.bytes).ok(),
    }
}

/// `file_…`: the id of `owner`'s file whose content hashes to `sha256`.
pub fn file_id(owner: &str, sha256: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(owner.as_bytes());
    hasher.update([0]);
    hasher.update(sha256.as_bytes());
    let digest = hex(&hasher.finalize());
    format!("file_{}", &digest[..32])
}

/// Whose a caller's upload is: its tenant's, `""` for the operator's.
fn owner_of(caller: &Caller) -> &str {
    caller.tenant.as_deref().unwrap_or("")
}

fn owner_tenant(owner: &str) -> Option<&str> {
    (!owner.is_empty()).then_some(owner)
}

/// A `Content-Type`'s media type, without its parameters, in lower case.
fn essence(declared: &str) -> String {
    declared
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

/// The supported media type `declared` names, when the bytes agree.
fn checked_type<'a>(declared: &str, data: &[u8]) -> Result<&'a str, FileError> {
    let essence = essence(declared);
    let Some(media_type) = MEDIA_TYPES.iter().copied().find(|t| *t == essence) else {
        return Err(FileError::Unsupported(essence));
    };
    let found = infer::get(data).map(|kind| kind.mime_type());
    if found != Some(media_type) {
        return Err(FileError::Mismatch {
            declared: media_type.to_owned(),
            found: found.map(str::to_owned),
        });
    }
    Ok(media_type)
}

fn in_block(index: usize, err: FileError) -> FileError {
    match err {
        FileError::Store(_) | FileError::TooLarge { .. } => err,
        other => FileError::Block {
            index,
            reason: other.to_string(),
        },
    }
}

#[cfg(test)]
mod tests;
