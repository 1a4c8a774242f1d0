//! Refusals by enforcement: the 429 (or 403) answers with the spec's codes and budget
//! proximity headers, and the record every refusal leaves: a cost event with cost 0 and
//! `budgetStatus: denied` (so operators see what was blocked, and can filter on it)
//! together with its webhook events, durable before the answer goes out.

use std::collections::BTreeMap;

use actix_web::http::header::{self, HeaderName};
use actors::budget::{BudgetSnapshot, DenialReason, EntityType};
use actors::store::EntityKey;
use serde_json::json;

use spendgate_engine::accounting::event::{self, Dedup, EventSpec};
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::db::models::OutboxEvent;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;
use spendgate_engine::util::time;
use spendgate_llm::pricing::Bound;

pub const DENIED: HeaderName = HeaderName::from_static("x-service-denied");

/// Who a refused call was: what its denial record says.
pub struct Refused<'a> {
    pub key: &'a KeyIdentity,
    pub provider: &'a str,
    pub model: &'a str,
    pub request_id: &'a str,
    pub tags: &'a BTreeMap<String, String>,
    pub customer: Option<&'a str>,
    pub session: Option<&'a str>,
    pub trace_id: Option<&'a str>,
    /// `proxy` or `mcp`.
    pub source: &'a str,
    /// `llm`, `tool` or `custom`.
    pub event_type: &'a str,
    /// Set by a caller that must store its own answer before the denial is recorded
    /// (gate): [`record`] then keeps the rows here instead of writing them.
    pub defer: Option<&'a Deferred>,
}

/// Denial rows held back until their caller records them (see [`Refused::defer`]).
#[derive(Debug, Default)]
pub struct Deferred(std::sync::Mutex<Vec<OutboxEvent>>);

impl Deferred {
    pub fn take(&self) -> Vec<OutboxEvent> {
        self.0.lock().map(|mut rows| std::mem::take(&mut *rows)).unwrap_or_default()
    }

    fn keep(&self, rows: Vec<OutboxEvent>) {
        if let Ok(mut kept) = self.0.lock() {
            kept.extend(rows);
        }
    }
}

/// Writes the denial record (cost 0, `budgetStatus: denied`) with `rows`, its webhook
/// events, in one commit, before the answer goes out. A failure is logged: the denial
/// itself stands.
pub async fn record(state: &AppState, who: &Refused<'_>, rows: Vec<OutboxEvent>) {
    if let Some(deferred) = who.defer {
        deferred.keep(rows);
        return;
    }
    let mut event = event::build(
        EventSpec {
            key: who.key,
            request_id: who.request_id.to_owned(),
            provider: who.provider.to_owned(),
            model: who.model.to_owned(),
            source: who.source,
            event_type: who.event_type,
            tags: who.tags.clone(),
            customer: who.customer.map(str::to_owned),
            budget_status: "denied",
            dedup: Dedup::Never,
            now: time::now_ms(),
        },
        false,
    );
    // Nothing was spent: no budget to touch.
    event.targets.clear();
    event.row.session_id = who.session.map(str::to_owned);
    event.row.trace_id = who.trace_id.map(str::to_owned);
    event.outbox = rows;
    if let Err(e) = state.writer.commit(vec![event]).await {
        tracing::error!(error = %e, request_id = %who.request_id, "could not record a denial");
    }
}

/// Writes webhook events that come with no cost event (a plan cap passed on a paid
/// tier, a key rate limit). A failure is logged.
pub async fn record_events(state: &AppState, rows: Vec<OutboxEvent>) {
    if let Err(e) = spendgate_engine::outbox::enqueue_now(&state.pool, &state.outbox, rows).await {
        tracing::error!(error = %e, "could not record events");
    }
}

/// The budget with the least effective room left.
pub(crate) fn tightest(snapshots: &[(EntityKey, BudgetSnapshot)]) -> Option<&(EntityKey, BudgetSnapshot)> {
    snapshots.iter().min_by_key(|(_, s)| s.effective_remaining())
}

/// Budget proximity headers of the tightest budget.
pub(crate) fn proximity(
    snapshots: &[(EntityKey, BudgetSnapshot)],
    estimate: i64,
) -> Vec<(&'static str, String)> {
    let Some((entity, s)) = tightest(snapshots) else {
        return Vec::new();
    };
    let mut out = vec![
        ("x-service-budget-limit", s.limit.to_string()),
        ("x-service-budget-spent", s.committed().to_string()),
        ("x-service-budget-remaining", s.remaining.to_string()),
        ("x-service-budget-entity", format!("{}:{}", entity.entity_type.as_str(), entity.entity_id)),
    ];
    if s.finalization_reserve > 0 {
        out.push(("x-service-budget-finalization-reserve", s.finalization_reserve.to_string()));
        out.push(("x-service-budget-effective-remaining", s.effective_remaining().to_string()));
        if estimate > 0 {
            // The current request's estimate stands in for the average cost.
            out.push((
                "x-service-budget-requests-remaining",
                (s.effective_remaining().max(0) / estimate).to_string(),
            ));
        }
    }
    out
}

pub(crate) fn with_budget_headers(mut err: ApiError, snapshots: &[(EntityKey, BudgetSnapshot)]) -> ApiError {
    let estimate =
        err.details.as_ref().and_then(|d| d["estimated_request_cost_microdollars"].as_i64()).unwrap_or(0);
    for (name, value) in proximity(snapshots, estimate) {
        err = err.with_header(HeaderName::from_static(name), value);
    }
    err
}
/// Microdollars as dollars, exactly: `$0.500000`.
pub(crate) fn dollars(micros: i64) -> String {
    let sign = if micros < 0 { "-" } else { "" };
    let abs = micros.unsigned_abs();
    format!("{sign}${}.{:06}", abs / 1_000_000, abs % 1_000_000)
}

/// Why a budget refused, in words a person acts on: what the call would have reserved
/// against the room left.
fn why_refused(reserved: i64, room: i64, snapshot: &BudgetSnapshot) -> String {
    if snapshot.exact_ceiling {
        format!(
            "even the call's prompt and minimum useful output would reserve {} and the budget has {} left",
            dollars(reserved),
            dollars(room)
        )
    } else if snapshot.policy == actors::budget::Policy::SoftBlock {
        format!("its spend has reached the limit; the budget has {} left", dollars(room))
    } else {
        format!(
            "this call would reserve {} (its prompt and output bound at the model's price) and the budget has {} left",
            dollars(reserved),
            dollars(room)
        )
    }
}

fn recovery(snapshot: &BudgetSnapshot) -> &'static str {
    if snapshot.exact_ceiling || snapshot.policy != actors::budget::Policy::StrictBlock {
        "Raise or reset the budget, or wait for its next period"
    } else {
        "Send a smaller output bound (max_tokens, max_output_tokens, maxOutputTokens), turn on exactCeiling on the budget to have calls clamped to the room left, or raise or reset the budget"
    }
}

/// What a model call refused by a budget can do instead, added to the refusal's
/// message and `details.suggestions`: the largest output bound the room left pays for
/// after this prompt (when even one token fits), and `exactCeiling` on a strict budget
/// that does not have it (calls are then clamped to the room left).
pub(crate) fn with_suggestions(
    mut err: ApiError,
    reason: &DenialReason,
    bound: Option<&Bound>,
    snapshot: &BudgetSnapshot,
) -> ApiError {
    let (DenialReason::BudgetExceeded, Some(bound)) = (reason, bound) else { return err };
    let room = snapshot.effective_remaining().max(0);
    let mut said = Vec::new();
    let mut suggestions = Vec::new();
    if let Some(tokens) = bound.tokens_for(room).filter(|&n| n > 0) {
        said.push(format!("send max_tokens ≤ {tokens} (what {} pays for after this prompt)", dollars(room)));
        suggestions.push(json!({ "type": "max_output_tokens", "maxOutputTokens": tokens }));
    }
    if !snapshot.exact_ceiling && snapshot.policy == actors::budget::Policy::StrictBlock {
        said.push("turn on exactCeiling on the budget to have calls clamped to the room left".to_owned());
        suggestions.push(json!({ "type": "exact_ceiling" }));
    }
    if said.is_empty() {
        return err;
    }
    err.message = format!("{}. To go on: {}", err.message, said.join(", or "));
    if let Some(details) = err.details.as_mut() {
        details["suggestions"] = json!(suggestions);
    }
    err
}

/// The 429 for a refused reservation, with the spec's code per entity and reason.
pub(crate) fn denial_error(
    entity: &EntityKey,
    reason: &DenialReason,
    snapshot: &BudgetSnapshot,
    estimate: i64,
    session: Option<&str>,
) -> ApiError {
    let entity_name = format!("{}:{}", entity.entity_type.as_str(), entity.entity_id);
    let base = json!({
        "budget_entity_type": entity.entity_type.as_str(),
        "budget_entity_id": entity.entity_id,
        "budget_limit_microdollars": snapshot.limit,
        // Settled spend, and apart from it what calls in flight hold: a budget whose
        // room is all held reads "spend 0, reserved N", not "spend N".
        "budget_spend_microdollars": snapshot.spend,
        "budget_reserved_microdollars": snapshot.reserved,
        "estimated_request_cost_microdollars": estimate,
    });
    let err = match reason {
        DenialReason::BudgetExceeded => {
            let mut details = base;
            let room = snapshot.effective_remaining().max(0);
            details["reserved_microdollars"] = json!(estimate);
            details["room_microdollars"] = json!(room);
            details["exact_ceiling"] = json!(snapshot.exact_ceiling);
            details["recovery"] = json!(recovery(snapshot));
            let why = why_refused(estimate, room, snapshot);
            match entity.entity_type {
                EntityType::Tag => ApiError::new(
                    ErrorCode::TagBudgetExceeded,
                    format!("Tag budget {entity_name} exceeded: {why}"),
                ),
                EntityType::Customer => {
                    details["customer_id"] = json!(entity.entity_id);
                    ApiError::new(
                        ErrorCode::CustomerBudgetExceeded,
                        format!("Customer budget {entity_name} exceeded: {why}"),
                    )
                }
                EntityType::User | EntityType::ApiKey => {
                    ApiError::new(ErrorCode::BudgetExceeded, format!("Budget {entity_name} exceeded: {why}"))
                }
            }
            .with_details(details)
        }
        DenialReason::VelocityExceeded { retry_after_ms } => {
            let secs = (retry_after_ms.max(&0) + 999) / 1000;
            let mut details = base;
            details["retry_after_seconds"] = json!(secs);
            details["recovery"] = json!("Spending too fast: retry after the cooldown");
            ApiError::new(ErrorCode::VelocityExceeded, format!("Velocity limit of {entity_name} exceeded"))
                .with_details(details)
                .with_header(header::RETRY_AFTER, secs.max(1).to_string())
        }
        DenialReason::SessionLimitExceeded { session_id, session_spend, session_limit } => ApiError::new(
            ErrorCode::SessionLimitExceeded,
            format!("Session {} reached its limit", session.unwrap_or(session_id)),
        )
        .with_details(json!({
            "session_id": session_id,
            "session_spend_microdollars": session_spend,
            "session_limit_microdollars": session_limit,
            "budget_entity_type": entity.entity_type.as_str(),
            "budget_entity_id": entity.entity_id,
            "recovery": "Start a new session or raise the session limit",
        })),
        DenialReason::LoopDetected { detection_type, call_count, window_ms, max_calls } => {
            ApiError::new(ErrorCode::LoopDetected, "The same call repeats too often: likely an agent loop")
                .with_details(json!({
                    "detection_type": detection_type.as_str(),
                    "call_count": call_count,
                    "window_seconds": window_ms / 1000,
                    "max_calls": max_calls,
                    "budget_entity_type": entity.entity_type.as_str(),
                    "budget_entity_id": entity.entity_id,
                    "recovery": "Change the request or wait for the loop window to pass",
                }))
        }
    };
    err.with_header(DENIED, "1")
}
