//! `GET /v1/policy` (proxy) and `GET /api/policy` (control plane): what a key may do
//! and what it has left, so an agent can pick a model before it calls.
//!
//! Prices are integer microdollars per million tokens (`*_per_mtok`), like every money
//! field of the service. `budget` is the tightest of the key's and its user's budgets
//! (the ones every request of the key counts against), or `null` when neither has one.
//! Beside the spec's fields, `pricing` tells the table's age and the models of the key's
//! organization charged at the unknown-model price in the last days (see
//! `pricing::report`); it is `null` when the database cannot be read.

use actors::budget::{next_period_start, BudgetSnapshot, EntityType};
use actors::store::EntityKey;
use serde_json::{json, Value};

use crate::auth::identity::KeyIdentity;
use crate::error::ApiError;
use crate::pricing_report as report;
use crate::state::AppState;
use crate::util::{ids, time};
use spendgate_llm::pricing::{ModelPrice, Provider};

/// The providers the proxy serves routes for, which the document lists: Vertex AI's
/// prices are in the table, but its routes are not served yet.
const SERVED: [Provider; 5] =
    [Provider::OpenAi, Provider::Anthropic, Provider::Google, Provider::Azure, Provider::Bedrock];

/// The policy document of a key.
pub async fn policy_of(state: &AppState, key: &KeyIdentity) -> Result<Value, ApiError> {
    let registry = state.budgets.registry();
    let mut tightest: Option<(EntityKey, BudgetSnapshot)> = None;
    for entity in [
        EntityKey::new(key.org_id.clone(), EntityType::ApiKey, ids::prefixed(ids::API_KEY, &key.key_id)),
        EntityKey::new(key.org_id.clone(), EntityType::User, ids::prefixed(ids::USER, &key.user_id)),
    ] {
        let snapshot = registry.snapshot(&entity).await.map_err(ApiError::unavailable)?;
        if let Some(s) = snapshot {
            if tightest.as_ref().is_none_or(|(_, t)| s.remaining < t.remaining) {
                tightest = Some((entity, s));
            }
        }
    }
    let budget = tightest.map(|(entity, s)| {
        let period_end = match (s.reset_interval, s.period_start) {
            (Some(interval), Some(start)) => Some(time::iso(next_period_start(interval, start))),
            _ => None,
        };
        json!({
            "remaining_microdollars": s.remaining_clamped(),
            "max_microdollars": s.limit,
            "spend_microdollars": s.spend,
            "period_end": period_end,
            "entity_type": entity.entity_type.as_str(),
            "entity_id": entity.entity_id,
        })
    });

    let providers: Vec<Provider> = SERVED
        .into_iter()
        .filter(|p| key.allowed_providers.as_ref().is_none_or(|a| a.iter().any(|n| n == p.as_str())))
        .collect();
    let model_allowed =
        |model: &str| key.allowed_models.as_ref().is_none_or(|a| a.iter().any(|m| m == model));
    let mut cheapest: Vec<(Provider, &str, &ModelPrice)> = Vec::new();
    let mut overall: Option<(Provider, &str, &ModelPrice)> = None;
    let mut models: Vec<String> = Vec::new();
    for (provider, model, price) in state.pricing.iter() {
        if !providers.contains(&provider) || !model_allowed(model) {
            continue;
        }
        models.push(model.to_owned());
        let better =
            |current: &(Provider, &str, &ModelPrice)| rank(price, model) < rank(current.2, current.1);
        match cheapest.iter_mut().find(|c| c.0 == provider) {
            Some(current) if better(current) => *current = (provider, model, price),
            Some(_) => {}
            None => cheapest.push((provider, model, price)),
        }
        if overall.as_ref().is_none_or(better) {
            overall = Some((provider, model, price));
        }
    }
    models.sort();
    let per_provider: serde_json::Map<String, Value> = cheapest
        .iter()
        .map(|(p, m, price)| {
            (
                p.as_str().to_owned(),
                json!({ "model": m, "input_per_mtok": price.input, "output_per_mtok": price.output }),
            )
        })
        .collect();
    let restrictions_active = key.allowed_models.is_some() || key.allowed_providers.is_some();
    let pricing = match report::report(&state.pool, &state.pricing, Some(&key.org_id), time::now_ms()).await {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the unpriced models for the policy document");
            None
        }
    };
    Ok(json!({
        "budget": budget,
        "allowed_models": key.allowed_models.clone().unwrap_or(models),
        "allowed_providers": providers.iter().map(|p| p.as_str()).collect::<Vec<_>>(),
        "cheapest_per_provider": per_provider,
        "cheapest_overall": overall.map(|(p, m, price)| json!({
            "model": m,
            "provider": p.as_str(),
            "input_per_mtok": price.input,
            "output_per_mtok": price.output,
        })),
        "restrictions_active": restrictions_active,
        "pricing": pricing,
    }))
}

/// Cheapest first: input plus output price, ties by name for a stable answer.
fn rank<'a>(price: &ModelPrice, model: &'a str) -> (i64, &'a str) {
    (price.input.saturating_add(price.output), model)
}

pub use schema::PolicyView;

/// The document's shape, for the OpenAPI document of both surfaces (documentation
/// only: the document itself is built with `json!`, and the contract test holds the
/// two together).
mod schema {
    #![allow(dead_code, reason = "the fields exist for the OpenAPI document only")]

    use utoipa::ToSchema;

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
}
