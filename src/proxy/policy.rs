//! `GET /v1/policy` (proxy) and `GET /api/policy` (control plane): what a key may do
//! and what it has left, so an agent can pick a model before it calls.
//!
//! Prices are integer microdollars per million tokens (`*_per_mtok`), like every money
//! field of the service. `budget` is the tightest of the key's and its user's budgets
//! (the ones every request of the key counts against), or `null` when neither has one.
//! Beside the spec's fields, `pricing` tells the table's age and the models of the key's
//! organization charged at the unknown-model price in the last days (see
//! `pricing::report`); it is `null` when the database cannot be read.

use actix_web::{web, HttpRequest, HttpResponse};
use actors::budget::{next_period_start, BudgetSnapshot, EntityType};
use actors::store::EntityKey;
use serde_json::{json, Value};

use super::pricing::{report, ModelPrice, Provider};
use crate::auth::keys::KeyIdentity;
use crate::error::ApiError;
use crate::state::AppState;
use crate::util::{ids, time};

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

    let providers: Vec<Provider> = Provider::ALL
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

/// `GET /v1/policy`.
#[utoipa::path(get, path = "/v1/policy", tag = "proxy", security(("serviceKey" = [])),
    description = "The key's budget, allowed models and providers, the cheapest allowed models, and the price table's age with the organization's unpriced models.",
    responses((status = 200, body = crate::api::schemas::PolicyView)))]
pub async fn get_policy(req: HttpRequest, state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let key = super::key_of(&req, &state).await?;
    Ok(HttpResponse::Ok().json(policy_of(&state, &key).await?))
}
