//! Cost-event ingest: `POST /api/cost-events` and `POST /api/cost-events/batch`
//! (API key). Events go through the idempotency layer, then the group-commit
//! writer; a 2xx means the event and its budget effects are durable.

use actix_web::http::StatusCode;
use actix_web::{post, web, HttpRequest, HttpResponse};
use serde_json::json;

use crate::cost_events_input::{to_new_event, validate, BatchInput, CostEventInput, Refunds, MAX_BATCH};
use crate::cost_events_refund as refund;
use crate::schemas::{BatchIngested, IngestedEvent};
use spendgate_engine::auth::keys::KeyAuth;
use spendgate_engine::db::cost_events::{NewCostEvent, Outcome};
use spendgate_engine::error::{ApiError, Issues};
use spendgate_engine::idempotency;
use spendgate_engine::openapi::Data;
use spendgate_engine::state::AppState;
use spendgate_engine::util::json::JsonBody;
use spendgate_engine::util::{ids, time};

fn outcome_json(o: &Outcome) -> (bool, serde_json::Value) {
    match o {
        Outcome::Inserted { id, created_at } => {
            (true, json!({ "id": ids::prefixed(ids::COST_EVENT, id), "createdAt": time::iso(*created_at) }))
        }
        Outcome::Duplicate { id, created_at } => {
            (false, json!({ "id": ids::prefixed(ids::COST_EVENT, id), "createdAt": time::iso(*created_at) }))
        }
    }
}

/// Records one cost event. 201 for a new event; 200 with the original id when the
/// (requestId, provider) pair was already recorded.
#[utoipa::path(post, path = "/api/cost-events", tag = "cost-events", request_body = CostEventInput,
    security(("serviceKey" = [])),
    params(("Idempotency-Key" = Option<String>, Header, description = "Dedup key (max 256 printable ASCII); takes priority over the body's idempotencyKey")),
    responses((status = 201, description = "A new event", body = Data<IngestedEvent>),
        (status = 200, description = "A duplicate: the original event", body = Data<IngestedEvent>),
        (status = 400, description = "validation_error, invalid_json or invalid_idempotency_key"),
        (status = 409, description = "idempotency_conflict: same Idempotency-Key, different body"),
        (status = 503, description = "request_in_progress (Retry-After: 1), idempotency_unavailable or service_unavailable")))]
#[post("/cost-events")]
pub async fn create_cost_event(
    state: web::Data<AppState>,
    req: HttpRequest,
    key: KeyAuth,
    body: JsonBody<CostEventInput>,
) -> Result<HttpResponse, ApiError> {
    let header_key = idempotency::header_key(&req)?;
    let mut issues = Issues::new();
    validate(&body.value, &[], Refunds::Allowed, &mut issues);
    issues.finish()?;
    let key = key.0;
    let named = header_key.is_some() || body.value.idempotency_key.is_some();
    let request_id = header_key
        .clone()
        .or_else(|| body.value.idempotency_key.clone())
        .unwrap_or_else(|| format!("sdk_{}", uuid::Uuid::now_v7()));
    let input = body.value;
    idempotency::run(
        &state.pool,
        &state.instance_id,
        header_key,
        &key.key_hash,
        "/api/cost-events",
        &body.raw,
        || async {
            let event = if input.cost_microdollars < 0 {
                refund::event(&state.pool, &key, input, request_id, named, time::now_ms()).await?
            } else {
                to_new_event(&key, input, request_id, time::now_ms())
            };
            let outcomes = state.writer.commit(vec![event]).await?;
            let outcome = outcomes.first().ok_or_else(|| ApiError::internal("writer returned no outcome"))?;
            let (inserted, data) = outcome_json(outcome);
            Ok((if inserted { StatusCode::CREATED } else { StatusCode::OK }, json!({ "data": data })))
        },
    )
    .await
}

/// Records 1 to 100 events in one transaction. `inserted` counts only new events;
/// `ids` lists every event's id in order (a duplicate carries the original id).
#[utoipa::path(post, path = "/api/cost-events/batch", tag = "cost-events", request_body = BatchInput,
    security(("serviceKey" = [])),
    params(("Idempotency-Key" = Option<String>, Header, description = "Dedup key of the whole batch")),
    responses((status = 201, description = "`{ inserted, ids }` (not wrapped in `data`)", body = BatchIngested),
        (status = 400, description = "validation_error (0 or over 100 events, invalid fields), invalid_json or invalid_idempotency_key"),
        (status = 409, description = "idempotency_conflict: same Idempotency-Key, different body"),
        (status = 503, description = "request_in_progress (Retry-After: 1), idempotency_unavailable or service_unavailable")))]
#[post("/cost-events/batch")]
pub async fn create_cost_event_batch(
    state: web::Data<AppState>,
    req: HttpRequest,
    key: KeyAuth,
    body: JsonBody<BatchInput>,
) -> Result<HttpResponse, ApiError> {
    let header_key = idempotency::header_key(&req)?;
    let mut issues = Issues::new();
    if body.value.events.is_empty() || body.value.events.len() > MAX_BATCH {
        issues.push(&["events"], "must contain 1 to 100 events");
    }
    for (i, e) in body.value.events.iter().enumerate() {
        let index = i.to_string();
        validate(e, &["events", &index], Refunds::Refused, &mut issues);
    }
    issues.finish()?;
    let key = key.0;
    let inputs = body.value.events;
    idempotency::run(
        &state.pool,
        &state.instance_id,
        header_key,
        &key.key_hash,
        "/api/cost-events/batch",
        &body.raw,
        || async {
            let now = time::now_ms();
            let events: Vec<NewCostEvent> = inputs
                .into_iter()
                .map(|e| {
                    let request_id =
                        e.idempotency_key.clone().unwrap_or_else(|| format!("sdk_{}", uuid::Uuid::now_v7()));
                    to_new_event(&key, e, request_id, now)
                })
                .collect();
            let outcomes = state.writer.commit(events).await?;
            let mut inserted = 0;
            let mut ids_out = Vec::with_capacity(outcomes.len());
            for o in &outcomes {
                let (new, data) = outcome_json(o);
                inserted += usize::from(new);
                ids_out.push(data["id"].clone());
            }
            Ok((StatusCode::CREATED, json!({ "inserted": inserted, "ids": ids_out })))
        },
    )
    .await
}

pub fn configure(cfg: &mut web::ServiceConfig) {
    cfg.service(create_cost_event_batch).service(create_cost_event);
}

#[derive(utoipa::OpenApi)]
#[openapi(paths(create_cost_event, create_cost_event_batch))]
pub struct ApiDoc;
