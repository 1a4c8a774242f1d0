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

/// `GET /v1/policy` and `GET /api/policy`.
#[derive(ToSchema)]
pub struct PolicyView {
    /// The tightest of the key's and the user's budgets; null when neither has one.
    budget: Option<PolicyBudget>,
    allowed_models: Vec<String>,
    allowed_providers: Vec<String>,
    /// Provider name to its cheapest allowed model.
    cheapest_per_provider: std::collections::BTreeMap<String, CheapestModel>,
    cheapest_overall: Option<CheapestOverall>,
    restrictions_active: bool,
    /// The price table's size and age, and the organization's models it could not
    /// price in the last 7 days (`{ models, checked_at, age_days, window_days,
    /// unpriced_models: [{ provider, model, calls, last_seen }] }`); null when the
    /// database cannot be read.
    #[schema(value_type = Option<Object>)]
    pricing: Option<serde_json::Value>,
}

#[derive(ToSchema)]
pub struct PolicyBudget {
    remaining_microdollars: i64,
    max_microdollars: i64,
    spend_microdollars: i64,
    period_end: Option<String>,
    entity_type: String,
    entity_id: String,
}

#[derive(ToSchema)]
pub struct CheapestModel {
    model: String,
    input_per_mtok: i64,
    output_per_mtok: i64,
}

#[derive(ToSchema)]
pub struct CheapestOverall {
    model: String,
    provider: String,
    input_per_mtok: i64,
    output_per_mtok: i64,
}
