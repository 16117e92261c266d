//! `files`; see [`harness_db::FileQueries`].

use chrono::{DateTime, Utc};
use harness_db::{now_text, FileRow, NewFile, StoreError};
use sqlx::SqlitePool;

use crate::Sqlite;

harness_db::file_queries!(Sqlite);

async fn insert_file(pool: &SqlitePool, file: NewFile<'_>) -> Result<FileRow, StoreError> {
    let now = now_text();
    let bytes = i64::try_from(file.data.len()).unwrap_or(i64::MAX);
    sqlx::query!(
        "INSERT INTO files (id, owner, sha256, media_type, bytes, data, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (id) DO NOTHING",
        file.id,
        file.owner,
        file.sha256,
        file.media_type,
        bytes,
        file.data,
        now,
    )
    .execute(pool)
    .await?;
    self::file(pool, file.id)
        .await?
        .ok_or_else(|| StoreError::Corrupt(format!("file {} vanished after its insert", file.id)))
}

async fn file(pool: &SqlitePool, id: &str) -> Result<Option<FileRow>, StoreError> {
    Ok(sqlx::query_as!(
        FileRow,
        r#"SELECT id AS "id!", owner, sha256, media_type, bytes,
                  created_at AS "created_at: DateTime<Utc>"
           FROM files WHERE id = ?1"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn file_data(pool: &SqlitePool, id: &str) -> Result<Option<Vec<u8>>, StoreError> {
    Ok(
        sqlx::query_scalar!("SELECT data FROM files WHERE id = ?1", id)
            .fetch_optional(pool)
            .await?,
    )
}
