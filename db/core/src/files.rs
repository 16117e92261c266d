//! The operations on `files`: the bytes of images and documents, stored once per owner and
//! content.

use chrono::{DateTime, Utc};

use crate::StoreError;

/// A file to store. `id` is derived from `owner` and `sha256`, so storing the same bytes for the
/// same owner again keeps the first row.
#[derive(Clone, Copy, Debug)]
pub struct NewFile<'a> {
    pub id: &'a str,
    /// The tenant the file belongs to; `""` for the operator's.
    pub owner: &'a str,
    /// The SHA-256 of `data`, lowercase hex.
    pub sha256: &'a str,
    pub media_type: &'a str,
    pub data: &'a [u8],
}

/// A stored file without its bytes.
#[derive(Clone, Debug, PartialEq)]
pub struct FileRow {
    pub id: String,
    pub owner: String,
    pub sha256: String,
    pub media_type: String,
    pub bytes: i64,
    pub created_at: DateTime<Utc>,
}

#[allow(async_fn_in_trait)]
pub trait FileQueries {
    /// Stores `file` unless a file with its id is stored; the stored row either way.
    async fn insert_file(&self, file: NewFile<'_>) -> Result<FileRow, StoreError>;

    /// The file `id` without its bytes, or `None`.
    async fn file(&self, id: &str) -> Result<Option<FileRow>, StoreError>;

    /// The bytes of the file `id`, or `None`.
    async fn file_data(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError>;
}

/// `file_queries!(Backend)`: the [`FileQueries`] of a database crate's `Backend`, calling the
/// functions of the same names in the invoking module.
#[macro_export]
macro_rules! file_queries {
    ($backend:ty) => {
        impl $crate::FileQueries for $backend {
            async fn insert_file(&self, file: NewFile<'_>) -> Result<FileRow, StoreError> {
                insert_file(self.pool(), file).await
            }

            async fn file(&self, id: &str) -> Result<Option<FileRow>, StoreError> {
                file(self.pool(), id).await
            }

            async fn file_data(&self, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
                file_data(self.pool(), id).await
            }
        }
    };
}
