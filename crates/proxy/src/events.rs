//! Outbox events raised by the proxy: every denial (`request.blocked` plus its own
//! kind) and the plan-cap alert, with the spec's payload fields.

use actors::budget::{EntityType, LedgerEvent};
use actors::store::EntityKey;
use serde_json::{json, Value};

use spendgate_engine::db::cost_events::outbox_event;
use spendgate_engine::db::models::OutboxEvent;
use spendgate_engine::util::time;

/// What the blocked call was.
pub struct Call<'a> {
    pub org_id: &'a str,
    pub api_key_id: &'a str,
    pub provider: &'a str,
    pub model: &'a str,
    pub now_ms: i64,
}

/// `request.blocked` with `reason` (`budget`, `rate_limit`, `policy`).
pub fn request_blocked(call: &Call<'_>, reason: &str, details: Option<Value>) -> OutboxEvent {
    outbox_event(
        call.org_id,
        "request.blocked",
        json!({
            "reason": reason,
            "model": call.model,
            "provider": call.provider,
            "api_key_id": spendgate_engine::util::ids::prefixed(spendgate_engine::util::ids::API_KEY, call.api_key_id),
            "details": details,
        }),
        call.now_ms,
    )
}

/// The `budget.exceeded` family for a refused reservation at the ceiling: the tag and
/// customer kinds carry their own type and extra fields.
pub fn exceeded(call: &Call<'_>, key: &EntityKey, limit: i64, spend: i64, estimate: i64) -> OutboxEvent {
    let blocked_at = time::iso(call.now_ms);
    let mut object = json!({
        "budget_entity_type": key.entity_type.as_str(),
        "budget_entity_id": key.entity_id,
        "budget_limit_microdollars": limit,
        "budget_spend_microdollars": spend,
        "estimated_request_cost_microdollars": estimate,
        "model": call.model,
        "provider": call.provider,
        "blocked_at": blocked_at,
    });
    let kind = match key.entity_type {
        EntityType::Tag => {
            let (k, v) = key.entity_id.split_once('=').unwrap_or((&key.entity_id, ""));
            object["tag_key"] = json!(k);
            object["tag_value"] = json!(v);
            "tag_budget.exceeded"
        }
        EntityType::Customer => {
            object["customer_id"] = json!(key.entity_id);
            "customer_budget.exceeded"
        }
        EntityType::User | EntityType::ApiKey => "budget.exceeded",
    };
    outbox_event(call.org_id, kind, object, call.now_ms)
}

/// Outbox rows for the events a ledger raised while refusing or admitting a call.
/// Threshold crossings and resets are announced by the accounting commit and the
/// period sweep (in the transactions that cause them), so they are skipped here.
pub fn from_ledger(call: &Call<'_>, key: &EntityKey, events: &[LedgerEvent]) -> Vec<OutboxEvent> {
    let blocked_at = time::iso(call.now_ms);
    let entity = |mut object: Value| {
        object["budget_entity_type"] = json!(key.entity_type.as_str());
        object["budget_entity_id"] = json!(key.entity_id);
        object
    };
    events
        .iter()
        .filter_map(|e| match e {
            LedgerEvent::Exceeded { limit, spend, estimate } => {
                Some(exceeded(call, key, *limit, *spend, *estimate))
            }
            LedgerEvent::VelocityExceeded { limit, window_ms, current, cooldown_ms } => Some(outbox_event(
                call.org_id,
                "velocity.exceeded",
                entity(json!({
                    "velocity_limit_microdollars": limit,
                    "velocity_window_seconds": window_ms / 1000,
                    "velocity_current_microdollars": current,
                    "cooldown_seconds": cooldown_ms / 1000,
                    "model": call.model,
                    "provider": call.provider,
                    "blocked_at": blocked_at,
                })),
                call.now_ms,
            )),
            LedgerEvent::VelocityRecovered { limit, window_ms, cooldown_ms } => Some(outbox_event(
                call.org_id,
                "velocity.recovered",
                entity(json!({
                    "velocity_limit_microdollars": limit,
                    "velocity_window_seconds": window_ms / 1000,
                    "velocity_cooldown_seconds": cooldown_ms / 1000,
                    "recovered_at": blocked_at,
                })),
                call.now_ms,
            )),
            LedgerEvent::SessionLimitExceeded { session_id, session_spend, session_limit } => {
                Some(outbox_event(
                    call.org_id,
                    "session.limit_exceeded",
                    entity(json!({
                        "session_id": session_id,
                        "session_spend_microdollars": session_spend,
                        "session_limit_microdollars": session_limit,
                        "model": call.model,
                        "provider": call.provider,
                        "blocked_at": blocked_at,
                    })),
                    call.now_ms,
                ))
            }
            LedgerEvent::LoopDetected { detection_type, call_count, window_ms, max_calls } => {
                Some(outbox_event(
                    call.org_id,
                    "loop.detected",
                    json!({
                        "detection_type": detection_type.as_str(),
                        "model": call.model,
                        "provider": call.provider,
                        "call_count": call_count,
                        "window_seconds": window_ms / 1000,
                        "max_calls": max_calls,
                        "blocked_at": blocked_at,
                    }),
                    call.now_ms,
                ))
            }
            LedgerEvent::ThresholdCrossed { .. } | LedgerEvent::Reset { .. } => None,
        })
        .collect()
}

/// `plan_limit.exceeded`, mirroring the 429 body's details.
pub fn plan_limit(call: &Call<'_>, details: &Value) -> OutboxEvent {
    let mut object = details.clone();
    object["model"] = json!(call.model);
    object["provider"] = json!(call.provider);
    object["blocked_at"] = json!(time::iso(call.now_ms));
    outbox_event(call.org_id, "plan_limit.exceeded", object, call.now_ms)
}
