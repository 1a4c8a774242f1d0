//! Admission, the first stage of a proxied call: everything decided before any budget
//! is touched. Rate limits (IP, then key) and key authentication; the body (media type,
//! size, JSON in the provider's shape); the call's context (headers, effective tags,
//! customer, upstream); the key's policy (providers, models, customers, mandate) and
//! the plan's governed-request cap. A refusal here is final and leaves a denial record
//! when it is enforcement (policy, plan).

use std::sync::Arc;
use std::time::Instant;

use actix_web::http::header;
use actix_web::{web, HttpRequest};
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::OwnedSemaphorePermit;

use super::admitted::{call_of, Admitted};
use super::common::Common;
use super::credential::{self, own_credential_refused, Credential};
use super::denial::{self, DENIED};
use super::events::{self, Call};
use super::headers::{self};
use super::upstream::{self, Route};
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::plan_usage::PlanDecision;
use spendgate_engine::plans::Plan;
use spendgate_engine::state::AppState;
use spendgate_engine::util::time;
use spendgate_engine::util::validate::{is_customer_id, RESERVED_TAG_PREFIX};
use spendgate_llm::pricing::Provider;
use spendgate_llm::usage::{self, RequestSummary};

/// Request bodies larger than this are refused (413).
pub const MAX_BODY: usize = 1_048_576;
/// Longest model name accepted (the cost event's `model` is 1-200 characters).
const MAX_MODEL_CHARS: usize = 200;

/// Runs the admission checks in the spec's order; `common` collects the headers every
/// answer carries, refusals included.
pub async fn admit(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    route: Route,
    path_model: Option<String>,
    common: &mut Common,
) -> Result<Admitted, ApiError> {
    let provider = route.provider();
    let named = req.match_info().get("upstream").map(str::to_owned);
    if let Some(name) = &named {
        // The path prefix is routing: an unknown name is no route at all.
        upstream::target(&state.config, route, Some(name), None)
            .map_err(|_| no_such_upstream(name, route))?;
    }
    super::check_ip(req, state)?;
    let (key, key_source) = credential::key_of(req, state, provider).await?;
    common.version = key.api_version.clone().unwrap_or_else(|| spendgate_engine::API_VERSION.to_owned());
    let decision = state.rate_limits.check_key(&key.key_id);
    common.rate_limit = decision.snapshot();
    if !decision.allowed {
        let call = call_of(
            &key,
            named.as_deref().unwrap_or(provider.as_str()),
            path_model.as_deref().unwrap_or(""),
            time::now_ms(),
        );
        note_rate_limited(state, &call);
        return Err(super::rate_limited());
    }
    let room = room(state).await?;
    common.timing.preflight = Some(common.started.elapsed());

    let body_started = Instant::now();
    let body = read_body(req, payload).await?;
    let summary = summarize(route, &body)?;
    common.timing.body = Some(body_started.elapsed());

    let headers = headers::parse(req.headers())?;
    common.request_id = Some(headers.request_id.clone());
    common.session.clone_from(&headers.session);
    if let Some(v) = &headers.version {
        common.version.clone_from(v);
    }
    let model = model_of(path_model, &summary, route.cloud_prefix().is_some())?;
    let model = super::cloud::model_for(state, &key, route, model).await?;
    let mut effective_tags = key.default_tags.clone();
    effective_tags.extend(headers.tags.clone());
    effective_tags.retain(|k, _| !k.starts_with(RESERVED_TAG_PREFIX));
    let customer = headers
        .customer
        .clone()
        .or_else(|| effective_tags.get("customer").filter(|c| is_customer_id(c)).cloned());
    let target = upstream_target(state, route, named.as_deref(), headers.upstream.as_deref())?;
    let (resolved, unpriced) = super::priced::price(state, &key.org_id, &target, provider, &model).await?;
    let mut admitted = Admitted {
        key,
        provider,
        route,
        headers,
        body,
        summary,
        price: resolved.as_ref().map(|(_, p)| *p),
        model,
        effective_tags,
        customer,
        target,
        brings_own_credential: credential::brings_own(provider, req.headers(), req.query_string()),
        credential: Credential::Absent,
        trace_id: super::trace::trace_of(req).trace_id,
        now: time::now_ms(),
        _room: room,
    };
    check_policy(state, &admitted, resolved.as_ref().map(|(n, _)| n.as_str())).await?;
    super::priced::refuse_unpriced(state, &admitted, unpriced).await?;
    admitted.credential = credential::resolve(
        state,
        &admitted.key,
        key_source,
        route,
        &admitted.target,
        admitted.brings_own_credential,
    )
    .await?;
    if let Some(base) = super::cloud::base(&admitted.credential) {
        admitted.target.base = base;
    }
    check_plan(state, &admitted).await?;
    Ok(admitted)
}

/// Waits (at most `admission_deadline`) for room among the unsettled calls.
async fn room(state: &AppState) -> Result<OwnedSemaphorePermit, ApiError> {
    let deadline = state.config.admission_deadline;
    match tokio::time::timeout(deadline, Arc::clone(&state.unsettled).acquire_owned()).await {
        Ok(Ok(permit)) => Ok(permit),
        Ok(Err(closed)) => Err(ApiError::unavailable(closed)),
        Err(_) => {
            let busy = format!(
                "The gateway is busy: {} calls are waiting to be recorded, and this one waited longer than {} ms for room",
                state.config.max_unsettled_calls,
                deadline.as_millis()
            );
            tracing::warn!("{busy}");
            Err(ApiError::new(ErrorCode::ServiceUnavailable, busy).with_header(header::RETRY_AFTER, "1"))
        }
    }
}

/// The request body, at most [`MAX_BODY`] bytes, JSON when it says what it is.
pub(super) async fn read_body(req: &HttpRequest, mut payload: web::Payload) -> Result<Bytes, ApiError> {
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) {
        if !ct.trim_start().to_ascii_lowercase().starts_with("application/json") {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "Content-Type must be application/json",
            ));
        }
    }
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return Err(too_large());
    }
    let mut buf = BytesMut::with_capacity(declared.unwrap_or(1024).min(MAX_BODY));
    while let Some(chunk) = payload.next().await {
        let chunk =
            chunk.map_err(|_| ApiError::new(ErrorCode::InvalidJson, "Could not read the request body"))?;
        if buf.len() + chunk.len() > MAX_BODY {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}

fn summarize(route: Route, body: &[u8]) -> Result<RequestSummary, ApiError> {
    usage::request_summary_in(route.format(), body).ok_or_else(|| {
        match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Err(_) => ApiError::new(ErrorCode::InvalidJson, "Request body is not valid JSON"),
            Ok(_) => {
                ApiError::invalid_field(&[], "request body must be a JSON object in the provider's format")
            }
        }
    })
}

/// The model from the URL (Gemini, the clouds) or the body: 1-200 characters, no
/// control characters (it becomes the cost event's `model`, and a NUL cannot be stored
/// on PostgreSQL). A cloud's path goes upstream as it came (`cloud`), so its model need
/// not form a URL segment (Bedrock's `…-v1:0`).
fn model_of(path_model: Option<String>, summary: &RequestSummary, cloud: bool) -> Result<String, ApiError> {
    let model = match (path_model, &summary.model) {
        (Some(m), _) if cloud && !m.is_empty() => m,
        (Some(m), _) => {
            if !is_path_model(&m) {
                return Err(ApiError::invalid_field(
                    &["model"],
                    "the model in the path must be 1 to 200 of A-Z a-z 0-9 . _ - (no \"..\"), so that it forms the provider's URL",
                ));
            }
            m
        }
        (None, Some(m)) if !m.is_empty() => m.clone(),
        _ => return Err(ApiError::invalid_field(&["model"], "model is required")),
    };
    if model.chars().count() > MAX_MODEL_CHARS || model.chars().any(char::is_control) {
        return Err(ApiError::invalid_field(
            &["model"],
            "model must be 1 to 200 characters without control characters",
        ));
    }
    Ok(model)
}

/// Whether a model taken from the URL (Gemini) can be put back into the provider's
/// URL as one path segment: no separators, query or fragment marks, escapes, spaces,
/// control characters or `..`.
fn is_path_model(model: &str) -> bool {
    (1..=MAX_MODEL_CHARS).contains(&model.len())
        && model.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !model.contains("..")
}

/// Where the call goes (see [`upstream::target`]). `X-Service-Upstream` names an
/// allow-listed provider on the OpenAI-compatible route, or an operator-defined
/// upstream of the route's format on any route: an Anthropic or Gemini request carries
/// that provider's key, which must never reach a provider the operator did not name.
pub(super) fn upstream_target(
    state: &AppState,
    route: Route,
    named: Option<&str>,
    requested: Option<&str>,
) -> Result<upstream::Target, ApiError> {
    upstream::target(&state.config, route, named, requested).map_err(|e| match e {
        upstream::TargetError::UnknownName => no_such_upstream(named.unwrap_or_default(), route),
        upstream::TargetError::NotAllowed if named.is_some() => ApiError::new(
            ErrorCode::InvalidUpstream,
            "X-Service-Upstream differs from the upstream named in the path",
        ),
        upstream::TargetError::NotAllowed if route.provider() == Provider::OpenAi => ApiError::new(
            ErrorCode::InvalidUpstream,
            "X-Service-Upstream is neither on the allow-list nor a configured upstream's base URL",
        ),
        upstream::TargetError::NotAllowed => ApiError::new(
            ErrorCode::InvalidUpstream,
            "X-Service-Upstream on this route must be the base URL of a configured upstream of its format",
        ),
    })
}

/// 404 for `/upstreams/{name}/...` when no upstream of that name speaks the route's format.
fn no_such_upstream(name: &str, route: Route) -> ApiError {
    let format = spendgate_engine::upstreams::format_name(route.provider());
    let shown: String = name.chars().take(64).collect();
    ApiError::new(ErrorCode::NotFound, format!("No configured upstream {shown:?} speaks the {format} format"))
}

async fn check_policy(state: &AppState, a: &Admitted, canonical: Option<&str>) -> Result<(), ApiError> {
    let refusal = policy_refusal(&a.key, a.event_provider(), &a.model, canonical, a.customer.as_deref())
        .or_else(|| {
            (a.key.require_stored_credentials && a.brings_own_credential)
                .then(|| own_credential_refused(a.provider))
        });
    let Some(err) = refusal else {
        return Ok(());
    };
    let details = json!({ "code": err.code, "message": err.message });
    let rows = vec![events::request_blocked(&a.call(), "policy", Some(details))];
    denial::record(state, &a.refused(), rows).await;
    Err(err.with_header(DENIED, "1"))
}

async fn check_plan(state: &AppState, a: &Admitted) -> Result<(), ApiError> {
    let key = &a.key;
    let cap = state.config.governed_request_cap(key.plan);
    let decision = state.plan_usage.check(&state.pool, &key.org_id, cap, key.plan == Plan::Free, a.now).await;
    match decision {
        Ok(PlanDecision::Allowed) => Ok(()),
        Ok(PlanDecision::AllowedOverCap { current_count, block_at }) => {
            let details = plan_details(state, key.plan, current_count, block_at);
            denial::record_events(state, vec![events::plan_limit(&a.call(), &details)]).await;
            Ok(())
        }
        Ok(PlanDecision::Blocked { current_count, block_at }) => {
            let details = plan_details(state, key.plan, current_count, block_at);
            let rows = vec![
                events::plan_limit(&a.call(), &details),
                events::request_blocked(&a.call(), "rate_limit", Some(details.clone())),
            ];
            denial::record(state, &a.refused(), rows).await;
            Err(ApiError::new(
                ErrorCode::PlanLimitExceeded,
                format!(
                    "The {} tier's governed-request cap of {block_at} per month is reached",
                    key.plan.as_str()
                ),
            )
            .with_details(details)
            .with_header(DENIED, "1"))
        }
        Err(e) => Err(ApiError::unavailable(e)),
    }
}

fn too_large() -> ApiError {
    ApiError::new(ErrorCode::PayloadTooLarge, "Request body exceeds 1 MB (1,048,576 bytes)")
}

/// A key-rate-limited request is announced as `request.blocked` at most once per key
/// per minute: a client hammering a limit must not turn into a write per request.
fn note_rate_limited(state: &AppState, call: &Call<'_>) {
    static LAST: std::sync::OnceLock<dashmap::DashMap<String, i64>> = std::sync::OnceLock::new();
    let last = LAST.get_or_init(dashmap::DashMap::new);
    let mut entry = last.entry(call.api_key_id.to_owned()).or_insert(i64::MIN);
    if call.now_ms.saturating_sub(*entry) < 60_000 {
        return;
    }
    *entry = call.now_ms;
    drop(entry);
    let row = events::request_blocked(call, "rate_limit", Some(json!({ "code": "rate_limit_exceeded" })));
    let state = state.clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move { denial::record_events(&state, vec![row]).await });
    }
}

fn plan_details(state: &AppState, plan: Plan, current_count: i64, block_at: i64) -> serde_json::Value {
    json!({
        "current_count": current_count,
        "block_at": block_at,
        "tier": plan.as_str(),
        "upgrade_url": state.config.upgrade_url,
        "self_host_url": state.config.self_host_url,
    })
}
/// `allowedProviders` names the cost events' providers: `openai` also covers the
/// allow-listed OpenAI-compatible providers (their events say `openai`), and an
/// operator-defined upstream is allowed only by its own name.
fn policy_refusal(
    key: &KeyIdentity,
    provider: &str,
    model: &str,
    canonical: Option<&str>,
    customer: Option<&str>,
) -> Option<ApiError> {
    if let Some(allowed) = &key.allowed_providers {
        if !allowed.iter().any(|p| p == provider) {
            return Some(ApiError::forbidden(format!("Provider {provider} is not allowed for this key")));
        }
    }
    if let Some(allowed) = &key.allowed_models {
        if !allowed.iter().any(|m| m == model || Some(m.as_str()) == canonical) {
            return Some(ApiError::forbidden(format!("Model {model} is not allowed for this key")));
        }
    }
    match customer {
        Some(c) => {
            if let Some(allowed) = &key.allowed_customers {
                if !allowed.iter().any(|a| a == c) {
                    return Some(
                        ApiError::new(
                            ErrorCode::CustomerNotAllowed,
                            format!("Customer {c} is not allowed for this key"),
                        )
                        .with_details(json!({ "customer_id": c })),
                    );
                }
            }
        }
        None if key.require_customer_id => {
            return Some(ApiError::new(
                ErrorCode::MandateViolation,
                "This key requires a customer: send X-Service-Customer or a customer tag",
            ));
        }
        None => {}
    }
    None
}
