//! `/v1/files`: a file uploaded as the SDKs upload one (`multipart/form-data`, its part `file`),
//! stored with the daemon's files ([`crate::files::Files::upload_any`]: any media type, within
//! `files.max_file_bytes`, once per owner and content), for a session's `resources`: its bytes
//! are put in the session's folder at its `mount_path` ([`mount`]).

use std::path::{Component, Path, PathBuf};

use axum::extract::{Multipart, Path as UrlPath, State};
use axum::{Extension, Json};
use chrono::{DateTime, Utc};
use serde::Serialize;

use super::error::ManagedError;
use super::{ManagedState, TAG};
use crate::caller::Caller;
use crate::files::FileError;
use crate::store::FileRow;

/// A stored file.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FileMetadata {
    /// Always `file`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    /// The name it was uploaded with (later reads show its id: the daemon keeps bytes, not
    /// names).
    pub filename: String,
    pub mime_type: String,
    pub size_bytes: i64,
    pub created_at: DateTime<Utc>,
    pub downloadable: bool,
}

impl FileMetadata {
    fn of(row: FileRow, filename: Option<String>) -> FileMetadata {
        FileMetadata {
            kind: "file",
            filename: filename.unwrap_or_else(|| row.id.clone()),
            id: row.id,
            mime_type: row.media_type,
            size_bytes: row.bytes,
            created_at: row.created_at,
            downloadable: false,
        }
    }
}

/// What an upload is made of, for the document: the part `file`, and no other.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)] // Never built: it names the form in the document.
pub struct Upload {
    /// The file, with its name and `Content-Type`.
    #[schema(value_type = String, format = Binary)]
    file: Vec<u8>,
}

/// Uploads a file.
#[utoipa::path(post, path = "/files", operation_id = "uploadManagedFile", tag = TAG,
    request_body(content = Upload, content_type = "multipart/form-data"),
    responses((status = 200, description = "The file, stored.", body = FileMetadata)))]
pub async fn upload(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    mut form: Multipart,
) -> Result<Json<FileMetadata>, ManagedError> {
    let bad =
        |err: axum::extract::multipart::MultipartError| ManagedError::invalid(err.body_text());
    while let Some(field) = form.next_field().await.map_err(bad)? {
        if field.name() != Some("file") {
            continue;
        }
        let filename = field.file_name().map(str::to_owned);
        let declared = field
            .content_type()
            .unwrap_or("application/octet-stream")
            .to_owned();
        let data = field.bytes().await.map_err(bad)?;
        let row = (state.pipeline.files())
            .upload_any(&caller, &declared, &data)
            .await
            .map_err(file_error)?;
        return Ok(Json(FileMetadata::of(row, filename)));
    }
    Err(ManagedError::invalid("the form has no part `file`"))
}

/// A file's metadata.
#[utoipa::path(get, path = "/files/{file_id}", operation_id = "getManagedFile", tag = TAG,
    params(("file_id" = String, Path, description = "`file_…`")),
    responses((status = 200, description = "The file.", body = FileMetadata)))]
pub async fn retrieve(
    State(state): State<ManagedState>,
    Extension(caller): Extension<Caller>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<FileMetadata>, ManagedError> {
    let row = (state.pipeline.files())
        .visible(&caller, &id)
        .await
        .map_err(file_error)?;
    Ok(Json(FileMetadata::of(row, None)))
}

/// The bytes of the caller's file `id`.
pub async fn read(
    state: &ManagedState,
    caller: &Caller,
    id: &str,
) -> Result<Vec<u8>, ManagedError> {
    let row = (state.pipeline.files())
        .visible(caller, id)
        .await
        .map_err(file_error)?;
    (state.store.file_data(&row.id).await?)
        .ok_or_else(|| ManagedError::not_found(format!("file {id} not found")))
}

/// A files error in the API's words.
pub fn file_error(err: FileError) -> ManagedError {
    match err {
        FileError::NotFound(id) => ManagedError::not_found(format!("file {id} not found")),
        FileError::TooLarge { .. } => {
            ManagedError::new(axum::http::StatusCode::PAYLOAD_TOO_LARGE, err.to_string())
        }
        FileError::Store(err) => err.into(),
        other => ManagedError::invalid(other.to_string()),
    }
}

/// Where in `folder` a file mounted at `mount_path` goes: the path taken below the folder
/// (`/mnt/session/uploads/x` is `<folder>/mnt/session/uploads/x`), never above it.
pub fn mount(folder: &Path, mount_path: &str) -> Result<PathBuf, ManagedError> {
    let mut path = folder.to_path_buf();
    let mut parts = 0;
    for component in Path::new(mount_path).components() {
        match component {
            Component::Normal(part) => {
                path.push(part);
                parts += 1;
            }
            Component::RootDir | Component::CurDir => {}
            Component::ParentDir | Component::Prefix(_) => {
                return Err(ManagedError::invalid(format!(
                    "mount_path {mount_path:?}: a path in the session's folder, without `..`"
                )))
            }
        }
    }
    if parts == 0 {
        return Err(ManagedError::invalid(
            "mount_path: a file's path, not the folder",
        ));
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mount_path_stays_in_the_folder() {
        let folder = Path::new("/threads/t");
        assert_eq!(
            mount(folder, "/mnt/session/uploads/f").unwrap(),
            Path::new("/threads/t/mnt/session/uploads/f")
        );
        assert_eq!(
            mount(folder, "data/a.csv").unwrap(),
            Path::new("/threads/t/data/a.csv")
        );
        assert!(mount(folder, "/../etc/passwd").is_err());
        assert!(mount(folder, "a/../../b").is_err());
        assert!(mount(folder, "/").is_err());
    }
}
