//! The refund of gate-recorded spend: `POST /api/cost-events` with provider `gate` and
//! a negative `costMicrodollars`. The spec names this path; what keeps it from being a
//! way for a key to lower its own spend is checked here, before anything is written:
//!
//! - it names its charge: the event's idempotency key (header or body) is the gate
//!   request's id (the gate's `Idempotency-Key`, or its `decisionId` without one);
//! - that request has a gate charge of this same API key;
//! - it gives back at most what was charged;
//! - it counts where the charge counted (the charge's customer and tags, whatever the
//!   refund's body says), and spend never goes below zero (storage and actors);
//! - one refund per request: a second one is the first one's duplicate (200, its id).

use crate::cost_events_input::{set_measured, CostEventInput};
use spendgate_engine::accounting::event::{self, Dedup, EventSpec};
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::db::cost_events::NewCostEvent;
use spendgate_engine::db::{refunds, Pool};
use spendgate_engine::error::ApiError;

/// Builds the refund event of `input` (negative cost, provider `gate`, validated), or
/// refuses it with a `validation_error` on `costMicrodollars`. `named`: the caller
/// gave an idempotency key, so `request_id` is theirs and not a generated one.
pub async fn event(
    pool: &Pool,
    key: &KeyIdentity,
    input: CostEventInput,
    request_id: String,
    named: bool,
    now: i64,
) -> Result<NewCostEvent, ApiError> {
    if !named {
        return Err(refused(
            "a refund names the gate charge it gives back: send the gate request's Idempotency-Key (or its decisionId) as this event's idempotency key",
        ));
    }
    let charges =
        refunds::gate_charges(pool, &key.org_id, &key.key_id, &request_id).await?.ok_or_else(|| {
            refused(&format!("no gate charge of this API key has the request id {request_id:?}"))
        })?;
    let refund = input.cost_microdollars.unsigned_abs();
    if refund > charges.charged.unsigned_abs() {
        return Err(refused(&format!(
            "a refund gives back at most what was charged: {} microdollars for this request",
            charges.charged
        )));
    }
    let tags = serde_json::from_str(&charges.tags).unwrap_or_default();
    let mut built = event::build(
        EventSpec {
            key,
            request_id,
            provider: input.provider.clone(),
            model: input.model.clone(),
            source: input.source.as_deref().unwrap_or("api"),
            event_type: input.event_type.as_deref().unwrap_or("custom"),
            tags,
            customer: charges.customer_id,
            budget_status: "skipped",
            dedup: Dedup::Refund,
            now,
        },
        false,
    );
    set_measured(&mut built.row, input);
    Ok(built)
}

fn refused(message: &str) -> ApiError {
    ApiError::invalid_field(&["costMicrodollars"], message)
}
