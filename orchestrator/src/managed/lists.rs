//! What every list and every body of the door shares: the JSON body extractor, `limit` and
//! `page`, and a page of agents or environments.

use axum::extract::FromRequest;
use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::error::ManagedError;
use super::{ids, owner_of, ManagedState};
use crate::caller::Caller;
use crate::store::{ManagedFilter, ManagedKind, ManagedRow};

/// A JSON body, refused as the API refuses one (`invalid_request_error`).
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ManagedError;

    async fn from_request(
        request: axum::extract::Request,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|err| ManagedError::invalid(err.to_string()))?;
        let bytes = if bytes.is_empty() {
            &b"{}"[..]
        } else {
            &bytes[..]
        };
        serde_json::from_slice(bytes)
            .map(Body)
            .map_err(|err| ManagedError::invalid(format!("the request body: {err}")))
    }
}

/// `limit` and `page`, as every list takes them.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// At most this many (1 to 1000; default 20).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// The `next_page` of the page before.
    pub page: Option<String>,
    #[serde(default)]
    pub include_archived: bool,
    #[serde(rename = "created_at[gte]")]
    #[param(rename = "created_at[gte]")]
    pub created_gte: Option<DateTime<Utc>>,
    #[serde(rename = "created_at[lte]")]
    #[param(rename = "created_at[lte]")]
    pub created_lte: Option<DateTime<Utc>>,
}

/// The page size a list asks for.
pub fn limit_of(limit: Option<i64>) -> Result<i64, ManagedError> {
    match limit.unwrap_or(20) {
        n @ 1..=1000 => Ok(n),
        n => Err(ManagedError::invalid(format!(
            "limit: {n} is not 1 to 1000"
        ))),
    }
}

/// A page of the `kind` rows `caller` sees, one more than asked when there are more.
pub async fn list_rows(
    state: &ManagedState,
    caller: &Caller,
    kind: ManagedKind,
    query: &ListQuery,
) -> Result<Vec<ManagedRow>, ManagedError> {
    let limit = limit_of(query.limit)?;
    let after = match &query.page {
        Some(page) => Some(
            ids::parse_keyset(page)
                .ok_or_else(|| ManagedError::invalid("page: not a cursor this list gave"))?,
        ),
        None => None,
    };
    let filter = ManagedFilter {
        kind,
        owner: (!caller.sees_all()).then(|| owner_of(caller)),
        include_archived: query.include_archived,
        created_gte: query.created_gte,
        created_lte: query.created_lte,
        after: after.map(|(created_at, id)| crate::store::ManagedAfter { created_at, id }),
        limit: limit + 1,
    };
    Ok(state.store.list_managed(filter).await?)
}

/// `rows` cut to `limit`, and the cursor of the next page when there was more.
pub fn page_of(mut rows: Vec<ManagedRow>, limit: i64) -> (Vec<ManagedRow>, Option<String>) {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    if rows.len() <= limit {
        return (rows, None);
    }
    rows.truncate(limit);
    let next = rows.last().map(|row| ids::keyset(row.created_at, &row.id));
    (rows, next)
}
