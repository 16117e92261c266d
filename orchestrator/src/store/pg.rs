//! Reading PostgreSQL rows: what the SQLite side's `query!` macros decode for it. The schema
//! keeps SQLite's shapes (timestamps as RFC 3339 text, JSON as text, enums as their names), so
//! each column is read as its stored type and parsed here; a value that does not parse is
//! [`StoreError::Corrupt`], as on SQLite. No SQL here.

use std::str::FromStr;

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;

use super::StoreError;

/// A timestamp column.
pub(super) fn time(row: &PgRow, column: &str) -> Result<DateTime<Utc>, StoreError> {
    let text: String = row.try_get(column)?;
    parse_time(column, &text)
}

/// A timestamp column that may be NULL.
pub(super) fn opt_time(row: &PgRow, column: &str) -> Result<Option<DateTime<Utc>>, StoreError> {
    let text: Option<String> = row.try_get(column)?;
    text.map(|t| parse_time(column, &t)).transpose()
}

fn parse_time(column: &str, text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|err| StoreError::Corrupt(format!("{column} `{text}`: {err}")))
}

/// A JSON column.
pub(super) fn json(row: &PgRow, column: &str) -> Result<serde_json::Value, StoreError> {
    let text: String = row.try_get(column)?;
    parse_json(column, &text)
}

/// A JSON column that may be NULL.
pub(super) fn opt_json(row: &PgRow, column: &str) -> Result<Option<serde_json::Value>, StoreError> {
    let text: Option<String> = row.try_get(column)?;
    text.map(|t| parse_json(column, &t)).transpose()
}

fn parse_json(column: &str, text: &str) -> Result<serde_json::Value, StoreError> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt(format!("{column}: {err}")))
}

/// A text column holding one of an enum's stored names ([`super::Role`], [`super::MessageStatus`]).
pub(super) fn parsed<T>(row: &PgRow, column: &str) -> Result<T, StoreError>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    let text: String = row.try_get(column)?;
    text.parse()
        .map_err(|err: T::Err| StoreError::Corrupt(format!("{column}: {err}")))
}
