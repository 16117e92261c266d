//! `GET /api/profiles`: the kinds of agent a thread can be created as.

use axum::extract::State;
use axum::Json;
use serde::Serialize;

use super::{ApiError, ApiState};
use crate::launch::ProfileInfo;

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProfileList {
    pub profiles: Vec<ProfileInfo>,
}

/// Every profile: the built-in `standard` and `lean`, then each `[profiles.NAME]`, with what its
/// processes run with (never a secret of its MCP servers) and what a caller may choose.
#[utoipa::path(get, path = "/profiles", operation_id = "listProfiles", tag = "threads",
    responses((status = 200, description = "The profiles, by name.", body = ProfileList)))]
pub async fn list(State(state): State<ApiState>) -> Result<Json<ProfileList>, ApiError> {
    Ok(Json(ProfileList {
        profiles: state.pool.profiles(),
    }))
}
