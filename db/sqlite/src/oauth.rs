//! The built-in authorization server's tables; see [`harness_db::OAuthQueries`].

use chrono::{DateTime, Utc};
use harness_db::{
    now_text, CodeRow, NewCode, NewToken, OAuthClientRow, StoreError, TokenRow, UnusedClients,
};
use sqlx::types::Json;
use sqlx::SqlitePool;

use crate::Sqlite;

harness_db::oauth_queries!(Sqlite);

async fn create_oauth_client(
    pool: &SqlitePool,
    id: &str,
    name: Option<&str>,
    redirect_uris: &[String],
) -> Result<OAuthClientRow, StoreError> {
    let now = now_text();
    let uris = serde_json::to_string(redirect_uris)
        .map_err(|err| StoreError::Corrupt(format!("redirect URIs: {err}")))?;
    Ok(sqlx::query_as!(
        OAuthClientRow,
        r#"INSERT INTO oauth_clients (id, name, redirect_uris, created_at) VALUES (?1, ?2, ?3, ?4)
           RETURNING id AS "id!", name, redirect_uris AS "redirect_uris: Json<Vec<String>>",
                     created_at AS "created_at: DateTime<Utc>""#,
        id,
        name,
        uris,
        now,
    )
    .fetch_one(pool)
    .await?)
}

async fn oauth_client(pool: &SqlitePool, id: &str) -> Result<Option<OAuthClientRow>, StoreError> {
    Ok(sqlx::query_as!(
        OAuthClientRow,
        r#"SELECT id AS "id!", name, redirect_uris AS "redirect_uris: Json<Vec<String>>",
                  created_at AS "created_at: DateTime<Utc>"
           FROM oauth_clients WHERE id = ?1"#,
        id,
    )
    .fetch_optional(pool)
    .await?)
}

async fn create_oauth_code(pool: &SqlitePool, code: NewCode<'_>) -> Result<(), StoreError> {
    sqlx::query!(
        "INSERT INTO oauth_codes (hash, client_id, redirect_uri, challenge, tenant, scopes,
                                  resource, expires_at, used)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, 0)",
        code.hash,
        code.client_id,
        code.redirect_uri,
        code.challenge,
        code.tenant,
        code.scopes,
        code.resource,
        code.expires_at,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn take_oauth_code(pool: &SqlitePool, hash: &str) -> Result<Option<CodeRow>, StoreError> {
    Ok(sqlx::query_as!(
        CodeRow,
        r#"UPDATE oauth_codes SET used = 1 WHERE hash = ?1 AND used = 0
           RETURNING client_id, redirect_uri, challenge, tenant, scopes, resource,
                     expires_at AS "expires_at: DateTime<Utc>""#,
        hash,
    )
    .fetch_optional(pool)
    .await?)
}

async fn create_oauth_token(pool: &SqlitePool, token: NewToken<'_>) -> Result<(), StoreError> {
    sqlx::query!(
        "INSERT INTO oauth_tokens (hash, kind, family, client_id, tenant, scopes, resource,
                                   expires_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
        token.hash,
        token.kind,
        token.family,
        token.client_id,
        token.tenant,
        token.scopes,
        token.resource,
        token.expires_at,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn oauth_token(pool: &SqlitePool, hash: &str) -> Result<Option<TokenRow>, StoreError> {
    Ok(sqlx::query_as!(
        TokenRow,
        r#"SELECT kind, family, client_id, tenant, scopes, resource,
                  expires_at AS "expires_at: DateTime<Utc>",
                  spent_at AS "spent_at: DateTime<Utc>",
                  revoked_at AS "revoked_at: DateTime<Utc>"
           FROM oauth_tokens WHERE hash = ?1"#,
        hash,
    )
    .fetch_optional(pool)
    .await?)
}

async fn spend_oauth_token(pool: &SqlitePool, hash: &str) -> Result<bool, StoreError> {
    let now = now_text();
    let done = sqlx::query!(
        "UPDATE oauth_tokens SET spent_at = ?2
         WHERE hash = ?1 AND spent_at IS NULL AND revoked_at IS NULL",
        hash,
        now,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

async fn revoke_oauth_family(pool: &SqlitePool, family: &str) -> Result<(), StoreError> {
    let now = now_text();
    sqlx::query!(
        "UPDATE oauth_tokens SET revoked_at = ?2 WHERE family = ?1 AND revoked_at IS NULL",
        family,
        now,
    )
    .execute(pool)
    .await?;
    Ok(())
}

async fn oauth_client_used(pool: &SqlitePool, client_id: &str) -> Result<bool, StoreError> {
    Ok(sqlx::query_scalar!(
        r#"SELECT EXISTS (SELECT 1 FROM oauth_tokens WHERE client_id = ?1) AS "used!: bool""#,
        client_id,
    )
    .fetch_one(pool)
    .await?)
}

async fn unused_oauth_clients(pool: &SqlitePool, since: &str) -> Result<UnusedClients, StoreError> {
    let row = sqlx::query!(
        r#"SELECT COUNT(*) AS "count!: i64", MIN(created_at) AS "oldest: DateTime<Utc>"
           FROM oauth_clients
           WHERE created_at >= ?1 AND id NOT IN (SELECT client_id FROM oauth_tokens)"#,
        since,
    )
    .fetch_one(pool)
    .await?;
    Ok(UnusedClients {
        count: row.count,
        oldest: row.oldest,
    })
}

async fn delete_unused_oauth_clients(pool: &SqlitePool, before: &str) -> Result<u64, StoreError> {
    let now = now_text();
    let done = sqlx::query!(
        "DELETE FROM oauth_clients
         WHERE created_at < ?1
           AND id NOT IN (SELECT client_id FROM oauth_tokens)
           AND id NOT IN (SELECT client_id FROM oauth_codes WHERE used = 0 AND expires_at > ?2)",
        before,
        now,
    )
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
