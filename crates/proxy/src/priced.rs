//! The price a proxied call is charged at, and the refusal of a call to a model
//! without one when its organization's `unpricedModels` is `block`.
//!
//! The organization's runtime prices come first (`spendgate_engine::model_prices`), then the
//! table (the built-in prices with the operator's file over them). A call to a model
//! neither prices is charged at the conservative fallback price (`estimate`), or
//! refused before anything is reserved or forwarded (`block`): 400
//! `model_not_priced`, naming the model and the endpoint that prices it. The refusal
//! leaves a denial record tagged `_svc_unknown_model`, so the model is listed among
//! those seen unpriced.

use serde_json::json;

use super::admitted::Admitted;
use super::denial::{self, Refused, DENIED};
use super::events;
use super::upstream::Target;
use spendgate_engine::db::unpriced::UNKNOWN_MODEL_TAG;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::model_prices::UnpricedPolicy;
use spendgate_engine::state::AppState;
use spendgate_llm::pricing::{ModelPrice, Provider};

/// The price of `model` for the organization, with the name the price is known by,
/// and the organization's `unpricedModels` setting.
pub(super) async fn price(
    state: &AppState,
    org_id: &str,
    target: &Target,
    format: Provider,
    model: &str,
) -> Result<(Option<(String, ModelPrice)>, UnpricedPolicy), ApiError> {
    let org =
        state.model_prices.of(&state.pool, &state.config, org_id).await.map_err(ApiError::unavailable)?;
    let resolved = org.resolve(&state.pricing, &target.provider, format, target.named, model);
    Ok((resolved, org.policy))
}

/// Refuses a call to a model without a price under `block`, recording the denial.
pub(super) async fn refuse_unpriced(
    state: &AppState,
    a: &Admitted,
    policy: UnpricedPolicy,
) -> Result<(), ApiError> {
    if a.price.is_some() || policy != UnpricedPolicy::Block {
        return Ok(());
    }
    let err = not_priced(a.event_provider(), &a.model);
    let details = json!({ "code": err.code, "message": err.message });
    let rows = vec![events::request_blocked(&a.call(), "unpriced_model", Some(details))];
    let mut tags = a.effective_tags.clone();
    tags.insert(UNKNOWN_MODEL_TAG.to_owned(), "true".to_owned());
    denial::record(state, &Refused { tags: &tags, ..a.refused() }, rows).await;
    Err(err.with_header(DENIED, "1"))
}

/// The 400 that names the model and how to price it.
pub fn not_priced(provider: &str, model: &str) -> ApiError {
    let path = format!("/api/model-prices/{provider}/{model}");
    ApiError::new(
        ErrorCode::ModelNotPriced,
        format!(
            "Model {model:?} of {provider} has no price, and this organization refuses calls to unpriced models \
             (unpricedModels: block). An admin can price it with PUT {path}, or set unpricedModels to estimate \
             with PATCH /api/orgs/{{id}}"
        ),
    )
    .with_details(json!({ "provider": provider, "model": model, "pricePath": path }))
}
