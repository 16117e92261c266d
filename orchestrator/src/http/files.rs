//! Files in and out: `POST /api/files` (an image or PDF to send with messages later),
//! `GET /api/files/{id}`, and a thread's own folder: `GET /api/threads/{id}/files` and
//! `GET /api/threads/{id}/files/{path}` (see `crate::files` and `crate::files::folder`).

use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Serialize;

use plugin_contract::ThreadId;

use super::error::ErrorBody;
use super::{ApiError, ApiPath, ApiState};
use crate::caller::Caller;
use crate::files::folder::{self, Folder, FolderError, FolderListing};
use crate::store::FileRow;

/// A stored file.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct StoredFile {
    /// `file_…`: what a message's block names as `{"type": "file", "fileId": …}`.
    pub id: String,
    pub media_type: String,
    pub bytes: i64,
    /// The SHA-256 of the bytes, lowercase hex.
    pub sha256: String,
}

impl From<FileRow> for StoredFile {
    fn from(row: FileRow) -> Self {
        StoredFile {
            id: row.id,
            media_type: row.media_type,
            bytes: row.bytes,
            sha256: row.sha256,
        }
    }
}

/// Stores an image or a PDF, sent as the raw body under its own `Content-Type`, for messages to
/// name later. The same bytes from the same tenant are stored once (the same `id` again).
#[utoipa::path(post, path = "/files", operation_id = "uploadFile", tag = "files",
    request_body(content = Vec<u8>, description = "The file's bytes, under its own `Content-Type`: image/png, image/jpeg, image/gif, image/webp or application/pdf.",
        content_type = "application/octet-stream"),
    responses(
        (status = 201, description = "Stored.", body = StoredFile),
        (status = 413, description = "Larger than `files.max_file_bytes`.", body = ErrorBody),
        (status = 415, description = "A type the Messages API does not take, or a form's type.", body = ErrorBody),
        (status = 422, description = "The bytes are not of the type the `Content-Type` names (`media_type_mismatch`).", body = ErrorBody),
    ))]
pub async fn upload(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
    // Bounded by `http::guard`: past its bound the read fails (413).
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let declared = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let bytes = body?;
    let row = state
        .pipeline
        .files()
        .upload(&caller, &declared, &bytes)
        .await?;
    Ok((StatusCode::CREATED, Json(StoredFile::from(row))).into_response())
}

/// A stored file's bytes, under its media type.
#[utoipa::path(get, path = "/files/{id}", operation_id = "getFile", tag = "files",
    params(("id" = String, Path, description = "The file's id (`file_…`).")),
    responses(
        (status = 200, description = "The bytes.", content_type = "application/octet-stream"),
        (status = 404, description = "No such file (or another tenant's).", body = ErrorBody),
    ))]
pub async fn download(
    State(state): State<ApiState>,
    Extension(caller): Extension<Caller>,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    let (row, data) = state.pipeline.files().download(&caller, &id).await?;
    let media_type = HeaderValue::from_str(&row.media_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    Ok(served(media_type, "inline", &row.id, Body::from(data)))
}

/// The files in the thread's folder (or its workspace), `.git`, symlinks and files with more
/// than one hard link left out.
#[utoipa::path(get, path = "/threads/{id}/files", operation_id = "listThreadFiles", tag = "threads",
    params(("id" = String, Path, description = "The thread's id (`thr_…`).")),
    responses(
        (status = 200, description = "The files, by path.", body = FolderListing),
        (status = 404, description = "Unknown thread.", body = ErrorBody),
        (status = 409, description = "The folder is not where it was made: a symlink or a file in its place, or outside `workspaces.roots` (`workspace_unavailable`).", body = ErrorBody),
    ))]
pub async fn list_thread_files(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<FolderListing>, ApiError> {
    let listing = in_thread_folder(&state, id, |folder| match folder {
        Some(folder) => folder.list(),
        None => Ok(FolderListing {
            files: Vec::new(),
            truncated: false,
        }),
    })
    .await?
    .map_err(|err| ApiError::internal(&err))?;
    Ok(Json(listing))
}

/// One file of the thread's folder, as an attachment. A path that is not plain names, that
/// leads (through a symlink too) out of the folder, or a file with more than one hard link, is
/// not found.
#[utoipa::path(get, path = "/threads/{id}/files/{*path}", operation_id = "getThreadFile", tag = "threads",
    params(
        ("id" = String, Path, description = "The thread's id (`thr_…`)."),
        ("path" = String, Path, description = "The file's path in the folder, as listed."),
    ),
    responses(
        (status = 200, description = "The bytes.", content_type = "application/octet-stream"),
        (status = 404, description = "Unknown thread, or no such file in its folder.", body = ErrorBody),
        (status = 409, description = "The folder is not where it was made: a symlink or a file in its place, or outside `workspaces.roots` (`workspace_unavailable`).", body = ErrorBody),
    ))]
pub async fn get_thread_file(
    State(state): State<ApiState>,
    ApiPath((id, path)): ApiPath<(String, String)>,
) -> Result<Response, ApiError> {
    let wanted = path.clone();
    let opened = in_thread_folder(&state, id, move |folder| folder?.file(&wanted)).await?;
    let Some((file, bytes)) = opened else {
        return Err(ApiError::not_found(format!(
            "no file {path:?} in the thread's folder"
        )));
    };
    let stream = tokio_util::io::ReaderStream::new(tokio::fs::File::from_std(file));
    let name = path.rsplit('/').next().unwrap_or(&path);
    let mut response = served(
        HeaderValue::from_static("application/octet-stream"),
        "attachment",
        name,
        Body::from_stream(stream),
    );
    response
        .headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(bytes));
    Ok(response)
}

/// `then` of the folder the thread's process works in (its workspace, else its own folder;
/// `None` when it does not exist yet), opened off the async workers. A folder that is not where
/// it was made is refused as a turn would be (`crate::files::folder`).
async fn in_thread_folder<T: Send + 'static>(
    state: &ApiState,
    id: String,
    then: impl FnOnce(Option<Folder>) -> T + Send + 'static,
) -> Result<T, ApiError> {
    let thread = state
        .store
        .require_thread(&ThreadId::from_string(id))
        .await?;
    let spec = state.pool.spec(&thread, None).map_err(|err| {
        ApiError::new(StatusCode::CONFLICT, "profile_unavailable", err.to_string())
    })?;
    let anchors = folder::anchors(&state.config.folder_roots(), thread.workspace.as_deref());
    let unavailable =
        |message: String| ApiError::new(StatusCode::CONFLICT, "workspace_unavailable", message);
    let Some((anchor, below)) = folder::anchored(&spec.workdir, &anchors) else {
        return Err(unavailable(format!(
            "{} no longer lies under the folders it may (workspaces.roots)",
            spec.workdir.display()
        )));
    };
    tokio::task::spawn_blocking(move || Folder::open(&anchor, &below).map(then))
        .await
        .map_err(|err| ApiError::internal(&err))?
        .map_err(|err| match err {
            FolderError::Moved(why) => unavailable(why),
            FolderError::Io(err) => ApiError::internal(&err),
        })
}

/// Bytes served under `media_type`, never sniffed into something else, never run as a page.
fn served(media_type: HeaderValue, disposition: &str, name: &str, body: Body) -> Response {
    let safe_name: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-_".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, media_type);
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox"),
    );
    if let Ok(value) = HeaderValue::from_str(&format!("{disposition}; filename=\"{safe_name}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, value);
    }
    response
}
