//! `/api/keys` (an `admin`'s: make, list and revoke API keys, as `harness keys` does) and
//! `/api/me` (any caller: who the daemon takes it for). The rules are `crate::keys`'.

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::Json;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::error::ErrorBody;
use super::{ApiError, ApiJson, ApiPath, ApiState};
use crate::caller::{Caller, Scope};
use crate::keys::KeySpec;
use crate::store::KeyRow;

/// `POST /api/keys`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateKey {
    /// The tenant whose threads the key reaches: 1 to 64 letters, digits, `.`, `_`, `-`.
    #[schema(example = "acme", pattern = r"^[A-Za-z0-9._-]{1,64}$")]
    pub tenant: String,
    /// What the key may do: `threads:read`, `threads:write`, `approvals`, `admin`, `metrics`;
    /// at least one.
    #[schema(value_type = Vec<Scope>, min_items = 1, example = json!(["threads:read", "threads:write"]))]
    pub scopes: Vec<String>,
    /// Most USD the turns it sends may cost per UTC day (zero or more).
    #[schema(minimum = 0.0)]
    pub daily_usd: Option<f64>,
    /// Most of its turns running at once on a node; more wait their turn.
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1)]
    pub max_concurrent_turns: Option<u32>,
    /// Most requests per minute on a node; more get `429` with `Retry-After`.
    #[serde(default, deserialize_with = "whole_number")]
    #[schema(minimum = 1)]
    pub rpm: Option<u32>,
}

/// A count that JSON may spell `5` or `5.0` (JSON Schema's `integer` takes both, and so do
/// clients that hold every number as a float); `null` is none. Anything else is refused.
fn whole_number<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<u32>, D::Error> {
    use serde::de::Error;
    let Some(number) = Option::<serde_json::Number>::deserialize(deserializer)? else {
        return Ok(None);
    };
    let whole = match (number.as_u64(), number.as_f64()) {
        (Some(n), _) => u32::try_from(n).ok(),
        (None, Some(f)) if f.fract() == 0.0 && (0.0..=f64::from(u32::MAX)).contains(&f) =>
        {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            Some(f as u32)
        }
        _ => None,
    };
    whole.map(Some).ok_or_else(|| {
        D::Error::custom(format!(
            "invalid value: {number}, expected a whole number from 0 to {}",
            u32::MAX
        ))
    })
}

/// An API key as the API shows it (never the key itself, but once, when made).
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Key {
    /// `key_…`: how the key is named in messages, decisions and the audit log.
    pub id: String,
    pub tenant: String,
    #[schema(value_type = Vec<String>)]
    pub scopes: Vec<Scope>,
    pub daily_usd: Option<f64>,
    pub max_concurrent_turns: Option<i64>,
    pub rpm: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// What the turns it sent cost so far today (UTC): what its `dailyUsd` is checked against.
    /// Only in `GET /api/keys`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spent_today_usd: Option<f64>,
}

impl From<KeyRow> for Key {
    fn from(row: KeyRow) -> Self {
        let scopes = crate::keys::caller_of(&row).scopes;
        Key {
            id: row.id,
            tenant: row.tenant,
            scopes,
            daily_usd: row.daily_usd,
            max_concurrent_turns: row.max_concurrent_turns,
            rpm: row.rpm,
            created_at: row.created_at,
            revoked_at: row.revoked_at,
            spent_today_usd: None,
        }
    }
}

/// A key just made.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct MadeKey {
    /// The key (`hk_…`): shown this once; the daemon keeps only its hash.
    pub key: String,
    #[serde(flatten)]
    pub info: Key,
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct KeyList {
    pub keys: Vec<Key>,
}

/// Makes an API key for a tenant.
#[utoipa::path(post, path = "/keys", operation_id = "createKey", tag = "keys",
    request_body = CreateKey,
    responses(
        (status = 201, description = "The key, shown this once.", body = MadeKey),
        (status = 400, description = "Malformed JSON.", body = ErrorBody),
        (status = 403, description = "The caller is not an `admin`.", body = ErrorBody),
        (status = 415, description = "A body that is not `application/json`.", body = ErrorBody),
        (status = 422, description = "A bad tenant, an unknown scope, a limit out of range.", body = ErrorBody),
    ))]
pub async fn create(
    State(state): State<ApiState>,
    ApiJson(body): ApiJson<CreateKey>,
) -> Result<(StatusCode, Json<MadeKey>), ApiError> {
    let scopes = Scope::parse_list(&body.scopes.join(",")).map_err(ApiError::unprocessable)?;
    let spec = KeySpec {
        tenant: body.tenant,
        scopes,
        daily_usd: body.daily_usd,
        max_concurrent_turns: body.max_concurrent_turns,
        rpm: body.rpm,
    };
    let made = crate::keys::create(&state.store, &spec)
        .await?
        .map_err(ApiError::unprocessable)?;
    tracing::info!(key_id = %made.row.id, tenant = %made.row.tenant, "API key created.");
    Ok((
        StatusCode::CREATED,
        Json(MadeKey {
            key: made.key,
            info: made.row.into(),
        }),
    ))
}

/// Every API key, revoked ones too, oldest first.
#[utoipa::path(get, path = "/keys", operation_id = "listKeys", tag = "keys",
    responses(
        (status = 200, description = "The keys.", body = KeyList),
        (status = 403, description = "The caller is not an `admin`.", body = ErrorBody),
    ))]
pub async fn list(State(state): State<ApiState>) -> Result<Json<KeyList>, ApiError> {
    let today = Utc::now().date_naive();
    let mut keys = Vec::new();
    for row in state.store.list_keys().await? {
        let spent = state.store.caller_day_cost(&row.id, today).await?;
        keys.push(Key {
            spent_today_usd: Some(spent),
            ..Key::from(row)
        });
    }
    Ok(Json(KeyList { keys }))
}

/// Revokes an API key: from now on it is refused (`401`). Its row stays, so what it did keeps
/// its name.
#[utoipa::path(delete, path = "/keys/{id}", operation_id = "revokeKey", tag = "keys",
    params(("id" = String, Path, description = "The key's id (`key_…`).")),
    responses(
        (status = 200, description = "The key, revoked.", body = Key),
        (status = 403, description = "The caller is not an `admin`.", body = ErrorBody),
        (status = 404, description = "Unknown key.", body = ErrorBody),
    ))]
pub async fn revoke(
    State(state): State<ApiState>,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Key>, ApiError> {
    let row = state
        .store
        .revoke_key(&id)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("key {id} not found")))?;
    tracing::info!(key_id = %row.id, "API key revoked.");
    Ok(Json(row.into()))
}

/// Who the daemon takes the caller for.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct Me {
    /// `operator`, or the API key's id.
    pub subject: String,
    /// The tenant whose threads it reaches; `null`: every tenant's.
    pub tenant: Option<String>,
    #[schema(value_type = Vec<String>)]
    pub scopes: Vec<Scope>,
}

/// The caller: its subject, tenant and scopes (the page shows them).
#[utoipa::path(get, path = "/me", operation_id = "whoAmI", tag = "keys",
    responses((status = 200, description = "The caller.", body = Me)))]
pub async fn me(Extension(caller): Extension<Caller>) -> Json<Me> {
    Json(Me {
        subject: caller.subject,
        tenant: caller.tenant,
        scopes: caller.scopes,
    })
}

#[cfg(test)]
mod tests {
    use super::CreateKey;

    /// JSON Schema's `integer` takes `5.0`; so does the body, and nothing that is not whole.
    #[test]
    fn counts_are_whole_numbers_however_json_spells_them() {
        let key = |rpm: serde_json::Value| {
            serde_json::from_value::<CreateKey>(
                serde_json::json!({"tenant": "a", "scopes": ["admin"], "rpm": rpm}),
            )
            .map(|key| key.rpm)
        };
        assert_eq!(key(serde_json::json!(5)).unwrap(), Some(5));
        assert_eq!(key(serde_json::json!(5.0)).unwrap(), Some(5));
        assert_eq!(key(serde_json::Value::Null).unwrap(), None);
        assert_eq!(
            key(serde_json::json!(4_294_967_295_u64)).unwrap(),
            Some(u32::MAX)
        );
        for refused in [
            serde_json::json!(5.5),
            serde_json::json!(-1),
            serde_json::json!(4_294_967_296_u64),
            serde_json::json!("5"),
        ] {
            assert!(key(refused.clone()).is_err(), "{refused}");
        }
        let absent = serde_json::from_value::<CreateKey>(
            serde_json::json!({"tenant": "a", "scopes": ["admin"]}),
        );
        assert_eq!(absent.unwrap().rpm, None);
    }
}
