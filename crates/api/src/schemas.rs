//! Documentation-only schemas of responses whose handlers build their JSON by hand
//! (`serde_json::json!`). The contract test (`.ci/contract`) checks the real bodies
//! against them.

#![allow(dead_code, reason = "the fields exist for the OpenAPI document only")]

use utoipa::ToSchema;

/// `POST /api/cost-events`: the new (201) or original (200) event.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct IngestedEvent {
    /// `svc_evt_<uuid>`.
    id: String,
    created_at: String,
}

/// `POST /api/cost-events/batch`.
#[derive(ToSchema)]
pub struct BatchIngested {
    /// How many events were new (duplicates are skipped silently).
    inserted: u64,
    /// Every event's id in input order; a duplicate carries the original's id.
    ids: Vec<String>,
}

/// `GET /api/cost-events/{id}/bodies`.
#[derive(ToSchema)]
#[schema(rename_all = "camelCase")]
pub struct EventBodies {
    event_id: String,
    request_body: Option<String>,
    response_body: Option<String>,
    request_truncated: bool,
    response_truncated: bool,
    created_at: String,
}
