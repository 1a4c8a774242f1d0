//! The provider routes: the spec's request processing order from rate limiting to
//! reconciliation.
//!
//! 1. Rate limits (IP, then key) and key authentication.
//! 2. Body: size (by `Content-Length`, then by bytes read) and JSON.
//! 3. Context: headers, effective tags, customer, upstream.
//! 4. Key policy (providers, models, customers, mandate), the plan's governed-request cap.
//! 5. Reserve the estimate on every matched budget, all or nothing (and, with shared
//!    budgets, in the database too).
//! 6. Call upstream; stream the answer back while metering it.
//! 7. When the body ends: record the cost event (durable, with its budget effects) and
//!    settle the reservation to the actual cost — or to the estimate, tagged, when the
//!    call was cancelled or reported no usage. Upstream errors release it.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use actix_web::http::header::{self, HeaderName, HeaderValue};
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, HttpResponseBuilder};
use actors::budget::Reserve;
use actors::budget::{messages::CallFingerprint, BudgetSnapshot, DenialReason, EntityType, Policy};
use actors::registry::{ReservationGuard, ReserveAllError};
use actors::store::EntityKey;
use bytes::BytesMut;
use futures_util::StreamExt;
use serde_json::json;

use super::events::{self, Call};
use super::headers::{self, ProxyHeaders};
use super::meter::{End, Metered, Seen, MAX_BODY_RECORD};
use super::plan::PlanDecision;
use super::pricing::{self, ModelPrice, Provider};
use super::trace::ResolvedTrace;
use super::upstream::{self, Route};
use super::usage;
use crate::api::cost_events_ingest::budget_targets;
use crate::auth::keys::KeyIdentity;
use crate::db::cost_events::{NewCostEvent, Outcome};
use crate::db::models::{CostEvent, CostEventBody};
use crate::db::shared_budgets::{self, AcquireError, HoldRequest, SharedHold};
use crate::error::{ApiError, ErrorCode};
use crate::plans::Plan;
use crate::state::AppState;
use crate::util::validate::{is_customer_id, RESERVED_TAG_PREFIX};
use crate::util::{ids, time};

/// Request bodies larger than this are refused (413).
pub const MAX_BODY: usize = 1_048_576;
/// Reservations held in the database outlive the upstream timeout by this margin
/// before the reaper may free them.
const SHARED_HOLD_MARGIN_MS: i64 = 60_000;

const DENIED: HeaderName = HeaderName::from_static("x-service-denied");

/// Milliseconds with microsecond precision, for `Server-Timing` and the overhead header.
fn ms(d: std::time::Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

/// Steps timed for `Server-Timing`.
#[derive(Default)]
struct Timing {
    preflight: Option<std::time::Duration>,
    body: Option<std::time::Duration>,
    budget: Option<std::time::Duration>,
    upstream: std::time::Duration,
}

/// Headers every answer of a provider route carries, errors included.
struct Common {
    request_id: Option<String>,
    session: Option<String>,
    version: String,
    rate_limit: Option<crate::ratelimit::RateLimitSnapshot>,
}

impl Common {
    fn apply(&self, res: &mut HttpResponse) {
        let h = res.headers_mut();
        if let Some(id) = self.request_id.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static("x-service-request-id"), id);
        }
        if let Some(s) = self.session.as_deref().and_then(|v| HeaderValue::from_str(v).ok()) {
            h.insert(HeaderName::from_static("x-service-session"), s);
        }
        if let Ok(v) = HeaderValue::from_str(&self.version) {
            h.insert(HeaderName::from_static("service-version"), v);
        }
        if let Some(rate_limit) = &self.rate_limit {
            // The proxy's own per-key figures; a provider's `x-ratelimit-*` headers are
            // lower case and longer (`x-ratelimit-limit-requests`), so they never collide.
            for (name, value) in rate_limit.headers() {
                h.insert(name, value);
            }
        }
    }
}

pub async fn chat_completions(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    handle(req, body, state, Route::ChatCompletions, None).await
}

pub async fn messages(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    handle(req, body, state, Route::Messages, None).await
}

/// `/v1beta/models/{model}:generateContent` and `:streamGenerateContent`.
pub async fn gemini(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> HttpResponse {
    let tail = path.into_inner();
    let route = match tail.rsplit_once(':') {
        Some((model, "generateContent")) if !model.is_empty() => {
            Some((Route::GenerateContent, model.to_owned()))
        }
        Some((model, "streamGenerateContent")) if !model.is_empty() => {
            Some((Route::StreamGenerateContent, model.to_owned()))
        }
        _ => None,
    };
    match route {
        Some((route, model)) => handle(req, body, state, route, Some(model)).await,
        None => {
            use actix_web::ResponseError;
            ApiError::new(ErrorCode::NotFound, "No such route").error_response()
        }
    }
}

async fn handle(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
    route: Route,
    path_model: Option<String>,
) -> HttpResponse {
    let started = Instant::now();
    let mut common =
        Common { request_id: None, session: None, version: crate::API_VERSION.to_owned(), rate_limit: None };
    let result = proxy(&req, body, &state, route, path_model, started, &mut common).await;
    let mut res = match result {
        Ok(res) => res,
        Err(e) => {
            use actix_web::ResponseError;
            if e.code.status() == StatusCode::TOO_MANY_REQUESTS || e.headers.iter().any(|(n, _)| n == DENIED)
            {
                state.metrics.proxy_requests.with_label_values(&[route.provider().as_str(), "denied"]).inc();
            }
            e.error_response()
        }
    };
    common.apply(&mut res);
    res
}

/// Everything decided about a request before the upstream call.
struct Prepared {
    key: Arc<KeyIdentity>,
    headers: ProxyHeaders,
    model: String,
    /// Known price; `None` for a model the table does not know (charged its estimate).
    price: Option<ModelPrice>,
    estimate: i64,
    effective_tags: BTreeMap<String, String>,
    customer: Option<String>,
}

#[allow(clippy::too_many_lines, reason = "the processing order reads best as one sequence")]
async fn proxy(
    req: &HttpRequest,
    mut payload: web::Payload,
    state: &AppState,
    route: Route,
    path_model: Option<String>,
    started: Instant,
    common: &mut Common,
) -> Result<HttpResponse, ApiError> {
    let provider = route.provider();
    let mut timing = Timing::default();

    // 1. Rate limits and authentication.
    super::check_ip(req, state)?;
    let key = super::key_of(req, state).await?;
    common.version = key.api_version.clone().unwrap_or_else(|| crate::API_VERSION.to_owned());
    let decision = state.rate_limits.check_key(&key.key_id);
    common.rate_limit = decision.snapshot();
    if !decision.allowed {
        let call = call_of(&key, provider.as_str(), path_model.as_deref().unwrap_or(""), time::now_ms());
        note_rate_limited(state, &call);
        return Err(super::rate_limited());
    }
    timing.preflight = Some(started.elapsed());

    // 2. Body.
    let body_started = Instant::now();
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
    let body = buf.freeze();
    let summary = match usage::request_summary(provider, &body) {
        Some(s) => s,
        None => {
            return Err(match serde_json::from_slice::<serde::de::IgnoredAny>(&body) {
                Err(_) => ApiError::new(ErrorCode::InvalidJson, "Request body is not valid JSON"),
                Ok(_) => ApiError::invalid_field(
                    &[],
                    "request body must be a JSON object in the provider's format",
                ),
            })
        }
    };
    timing.body = Some(body_started.elapsed());

    // 3. Context.
    let headers = headers::parse(req.headers())?;
    common.request_id = Some(headers.request_id.clone());
    common.session.clone_from(&headers.session);
    if let Some(v) = &headers.version {
        common.version.clone_from(v);
    }
    let model = match (&path_model, &summary.model) {
        (Some(m), _) => m.clone(),
        (None, Some(m)) if !m.is_empty() => m.clone(),
        _ => return Err(ApiError::invalid_field(&["model"], "model is required")),
    };
    let mut effective_tags = key.default_tags.clone();
    effective_tags.extend(headers.tags.clone());
    effective_tags.retain(|k, _| !k.starts_with(RESERVED_TAG_PREFIX));
    let customer = headers
        .customer
        .clone()
        .or_else(|| effective_tags.get("customer").filter(|c| is_customer_id(c)).cloned());
    let base = upstream::base_url(&state.config, route, headers.upstream.as_deref())
        .map_err(|_| {
            ApiError::new(ErrorCode::InvalidUpstream, "X-Service-Upstream is not on the allow-list")
        })?
        .to_owned();

    // 4. Key policy and plan cap.
    let now = time::now_ms();
    let call = call_of(&key, provider.as_str(), &model, now);
    let resolved = state.pricing.lookup_in(provider, &model).map(|(name, price)| (name.to_owned(), *price));
    if let Some(err) = policy_refusal(
        &key,
        provider,
        &model,
        resolved.as_ref().map(|(n, _)| n.as_str()),
        customer.as_deref(),
    ) {
        let details = json!({ "code": err.code, "message": err.message });
        record_denial(state, vec![events::request_blocked(&call, "policy", Some(details))]).await;
        return Err(err.with_header(DENIED, "1"));
    }
    let hard = key.plan == Plan::Free;
    match state
        .plan_usage
        .check(&state.pool, &key.org_id, state.config.governed_request_cap(key.plan), hard, now)
        .await
    {
        Ok(PlanDecision::Allowed) => {}
        Ok(PlanDecision::AllowedOverCap { current_count, block_at }) => {
            let details = plan_details(state, key.plan, current_count, block_at);
            record_denial(state, vec![events::plan_limit(&call, &details)]).await;
        }
        Ok(PlanDecision::Blocked { current_count, block_at }) => {
            let details = plan_details(state, key.plan, current_count, block_at);
            record_denial(
                state,
                vec![
                    events::plan_limit(&call, &details),
                    events::request_blocked(&call, "rate_limit", Some(details.clone())),
                ],
            )
            .await;
            return Err(ApiError::new(
                ErrorCode::PlanLimitExceeded,
                format!(
                    "The {} tier's governed-request cap of {block_at} per month is reached",
                    key.plan.as_str()
                ),
            )
            .with_details(details)
            .with_header(DENIED, "1"));
        }
        Err(e) => return Err(ApiError::unavailable(e)),
    }
    let (price, unknown) = match &resolved {
        Some((_, p)) => (*p, false),
        None => (state.pricing.fallback_price(provider.as_str()), true),
    };
    let estimate = pricing::estimate(&price, body.len(), summary.max_output_tokens);
    let prepared = Prepared {
        key: key.clone(),
        headers,
        model: model.clone(),
        price: (!unknown).then_some(price),
        estimate,
        effective_tags,
        customer,
    };

    // 5. Budgets.
    let budget_started = Instant::now();
    let entity_keys = entity_keys(&prepared.key, &prepared.effective_tags, prepared.customer.as_deref());
    let mut hasher = std::hash::DefaultHasher::new();
    body.hash(&mut hasher);
    let registry = state.budgets.registry();
    let reserve = Reserve {
        reservation_id: registry.next_reservation_id(),
        estimate,
        session_id: prepared.headers.session.as_deref().map(Arc::from),
        finalize: prepared.headers.finalize,
        fingerprint: Some(CallFingerprint {
            provider: Arc::from(provider.as_str()),
            model: Arc::from(prepared.model.as_str()),
            hash: hasher.finish(),
        }),
        now_ms: now,
    };
    let guard = match registry.reserve_guarded(&entity_keys, &reserve).await {
        Ok(guard) => guard,
        Err(ReserveAllError::Denied { key: entity, denial }) => {
            let mut rows = events::from_ledger(&call, &entity, &denial.events);
            let err = denial_error(
                &entity,
                &denial.reason,
                &denial.snapshot,
                estimate,
                prepared.headers.session.as_deref(),
            );
            if !rows.iter().any(|r| r.event_type.ends_with("exceeded") || r.event_type == "loop.detected")
                && matches!(denial.reason, DenialReason::BudgetExceeded)
            {
                rows.push(events::exceeded(
                    &call,
                    &entity,
                    denial.snapshot.limit,
                    denial.snapshot.committed(),
                    estimate,
                ));
            }
            rows.push(events::request_blocked(&call, "budget", Some(json!({ "code": err.code, "budget_entity_type": entity.entity_type.as_str(), "budget_entity_id": entity.entity_id }))));
            record_denial(state, rows).await;
            return Err(with_budget_headers(err, &[(entity, denial.snapshot)]));
        }
        Err(ReserveAllError::Unavailable { key: entity, error }) => {
            return Err(ApiError::unavailable(format!("budget of {entity} unavailable: {error}")));
        }
    };
    let admitted_events: Vec<_> =
        guard.admissions().iter().flat_map(|(k, a)| events::from_ledger(&call, k, &a.events)).collect();
    if !admitted_events.is_empty() {
        record_denial(state, admitted_events).await;
    }
    let holds = acquire_shared(state, &guard, &call, estimate, prepared.headers.finalize).await?;
    let snapshots: Vec<(EntityKey, BudgetSnapshot)> =
        guard.admissions().iter().map(|(k, a)| (k.clone(), a.snapshot)).collect();
    timing.budget = Some(budget_started.elapsed());

    // 6. Upstream.
    let trace = req.extensions_get_trace();
    let strip_usage = provider == Provider::OpenAi && summary.stream && !summary.include_usage;
    let upstream_body =
        if strip_usage { usage::openai_add_include_usage(&body).map(bytes::Bytes::from) } else { None };
    let strip_usage = upstream_body.is_some();
    let url = upstream::url(&base, route, &prepared.model, req.query_string());
    let client = upstream::client(&state.config);
    let forwarded = upstream::forwarded_headers(route, req.headers(), trace.traceparent.as_deref());
    let upstream_body = upstream_body.unwrap_or_else(|| body.clone());
    let send = || {
        let mut request = client
            .post(&url)
            .insert_header((header::CONTENT_TYPE, "application/json"))
            .insert_header((header::ACCEPT_ENCODING, "identity"));
        for (name, value) in &forwarded {
            request = request.insert_header((name.clone(), value.clone()));
        }
        request.send_body(upstream_body.clone())
    };
    let upstream_started = Instant::now();
    let sent = tokio::time::timeout(state.config.upstream_timeout, async {
        match send().await {
            // A pooled keep-alive connection the provider had closed: the request never
            // got an answer; send it once more on a fresh connection.
            Err(awc::error::SendRequestError::Connect(awc::error::ConnectError::Disconnected)) => {
                send().await
            }
            other => other,
        }
    })
    .await;
    timing.upstream = upstream_started.elapsed();
    let response = match sent {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, url = %url, "upstream request failed");
            release(state, guard, holds);
            state.metrics.proxy_requests.with_label_values(&[provider.as_str(), "upstream_error"]).inc();
            return Err(ApiError::new(
                ErrorCode::UpstreamError,
                format!("Could not reach the provider: {e}"),
            ));
        }
        Err(_) => {
            release(state, guard, holds);
            state.metrics.proxy_requests.with_label_values(&[provider.as_str(), "upstream_error"]).inc();
            return Err(ApiError::new(ErrorCode::UpstreamTimeout, "The provider did not answer in time"));
        }
    };

    // 7. The answer, metered on its way to the client.
    let status = response.status();
    let mut builder = HttpResponse::build(status);
    for (name, value) in response.headers() {
        if upstream::passes_back(name) {
            builder.append_header((name.clone(), value.clone()));
        }
    }
    if provider == Provider::Google {
        // Gemini reports no request id: the proxy's stands in.
        builder.insert_header(("x-request-id", prepared.headers.request_id.as_str()));
    }
    add_context_headers(&mut builder, &prepared, &snapshots, estimate);
    let total = started.elapsed();
    let overhead = total.saturating_sub(timing.upstream);
    builder.insert_header(("x-service-overhead-ms", format!("{:.3}", ms(overhead))));
    builder.insert_header(("server-timing", server_timing(&timing, overhead, total)));

    let sse = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"));
    if !status.is_success() {
        // Upstream errors pass through as they are; nothing was spent.
        release(state, guard, holds);
        state.metrics.proxy_requests.with_label_values(&[provider.as_str(), "upstream_error"]).inc();
        return Ok(builder.streaming(response));
    }
    let record_bodies = key.plan.is_paid();
    let settlement = Settlement {
        state: state.clone(),
        guard: Some(guard),
        holds,
        prepared,
        provider,
        trace_id: trace.trace_id,
        started,
        upstream_ms: i64::try_from(timing.upstream.as_millis()).unwrap_or(i64::MAX),
        request_body: record_bodies.then(|| body.clone()),
        tool_definition_tokens: tool_definition_tokens(&body),
    };
    let finish = Box::new(move |seen: Seen| settlement.spawn(seen));
    let metered = Metered::new(
        response,
        provider,
        sse,
        strip_usage,
        record_bodies,
        state.config.upstream_timeout,
        finish,
    );
    Ok(builder.streaming(metered))
}

trait TraceExt {
    fn extensions_get_trace(&self) -> ResolvedTrace;
}

impl TraceExt for HttpRequest {
    fn extensions_get_trace(&self) -> ResolvedTrace {
        use actix_web::HttpMessage;
        self.extensions()
            .get::<ResolvedTrace>()
            .cloned()
            .unwrap_or_else(|| super::trace::resolve(self.headers()))
    }
}

pub(crate) fn call_of<'a>(key: &'a KeyIdentity, provider: &'a str, model: &'a str, now_ms: i64) -> Call<'a> {
    Call { org_id: &key.org_id, api_key_id: &key.key_id, provider, model, now_ms }
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
    let pool = state.pool.clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            if let Err(e) = crate::db::cost_events::insert_outbox(&pool, vec![row]).await {
                tracing::error!(error = %e, "could not record request.blocked");
            }
        });
    }
}

/// Writes denial events to the outbox before the response goes out. A failure is
/// logged: the denial itself stands.
pub(crate) async fn record_denial(state: &AppState, rows: Vec<crate::db::models::OutboxEvent>) {
    if let Err(e) = crate::db::cost_events::insert_outbox(&state.pool, rows).await {
        tracing::error!(error = %e, "could not record denial events");
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

/// The key's allow-lists and customer mandate. `canonical` is the pricing table's name
/// of the model (dated aliases resolve to it); either name satisfies an allow-list.
fn policy_refusal(
    key: &KeyIdentity,
    provider: Provider,
    model: &str,
    canonical: Option<&str>,
    customer: Option<&str>,
) -> Option<ApiError> {
    if let Some(allowed) = &key.allowed_providers {
        if !allowed.iter().any(|p| p == provider.as_str()) {
            return Some(ApiError::forbidden(format!(
                "Provider {} is not allowed for this key",
                provider.as_str()
            )));
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

/// The budget entities a request counts against: its key, the key's user, each
/// effective tag, and the customer.
pub(crate) fn entity_keys(
    key: &KeyIdentity,
    effective_tags: &BTreeMap<String, String>,
    customer: Option<&str>,
) -> Vec<EntityKey> {
    let org = &key.org_id;
    let mut keys = vec![
        EntityKey::new(org.clone(), EntityType::ApiKey, ids::prefixed(ids::API_KEY, &key.key_id)),
        EntityKey::new(org.clone(), EntityType::User, ids::prefixed(ids::USER, &key.user_id)),
    ];
    for (k, v) in effective_tags {
        keys.push(EntityKey::new(org.clone(), EntityType::Tag, format!("{k}={v}")));
    }
    if let Some(c) = customer {
        keys.push(EntityKey::new(org.clone(), EntityType::Customer, c));
    }
    keys
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
        "budget_spend_microdollars": snapshot.committed(),
        "estimated_request_cost_microdollars": estimate,
    });
    let err = match reason {
        DenialReason::BudgetExceeded => {
            let mut details = base;
            details["recovery"] = json!("Raise or reset the budget, or wait for its next period");
            match entity.entity_type {
                EntityType::Tag => {
                    ApiError::new(ErrorCode::TagBudgetExceeded, format!("Tag budget {entity_name} exceeded"))
                }
                EntityType::Customer => {
                    details["customer_id"] = json!(entity.entity_id);
                    ApiError::new(
                        ErrorCode::CustomerBudgetExceeded,
                        format!("Customer budget {entity_name} exceeded"),
                    )
                }
                EntityType::User | EntityType::ApiKey => {
                    ApiError::new(ErrorCode::BudgetExceeded, format!("Budget {entity_name} exceeded"))
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

/// Budget proximity headers of the tightest budget (the least effective room left).
/// The budget with the least effective room left.
pub(crate) fn tightest(snapshots: &[(EntityKey, BudgetSnapshot)]) -> Option<&(EntityKey, BudgetSnapshot)> {
    snapshots.iter().min_by_key(|(_, s)| s.effective_remaining())
}

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

fn add_context_headers(
    builder: &mut HttpResponseBuilder,
    p: &Prepared,
    snapshots: &[(EntityKey, BudgetSnapshot)],
    estimate: i64,
) {
    if !p.effective_tags.is_empty() {
        if let Ok(tags) = serde_json::to_string(&p.effective_tags) {
            builder.insert_header(("x-service-effective-tags", tags));
        }
    }
    if p.headers.customer_invalid {
        builder.insert_header(("x-service-warning", "invalid_customer"));
    }
    for (name, value) in proximity(snapshots, estimate) {
        builder.insert_header((name, value));
    }
}

fn server_timing(t: &Timing, overhead: std::time::Duration, total: std::time::Duration) -> String {
    let mut parts = Vec::with_capacity(6);
    for (name, d) in [("preflight", t.preflight), ("body", t.body), ("budget", t.budget)] {
        if let Some(d) = d {
            parts.push(format!("{name};dur={:.3}", ms(d)));
        }
    }
    parts.push(format!("overhead;dur={:.3}", ms(overhead)));
    parts.push(format!("upstream;dur={:.3}", ms(t.upstream)));
    parts.push(format!("total;dur={:.3}", ms(total)));
    parts.join(", ")
}

/// Tokens spent on tool definitions, estimated like the prompt (4 bytes per token)
/// from the request's `tools` array.
fn tool_definition_tokens(body: &[u8]) -> i64 {
    #[derive(serde::Deserialize)]
    struct Tools<'a> {
        #[serde(borrow)]
        tools: Option<&'a serde_json::value::RawValue>,
    }
    serde_json::from_slice::<Tools<'_>>(body)
        .ok()
        .and_then(|t| t.tools)
        .map_or(0, |raw| i64::try_from(raw.get().len().div_ceil(4)).unwrap_or(i64::MAX))
}

/// With shared budgets (several instances on one PostgreSQL), holds the reservation in
/// the database for every admitted budget that can refuse (strict and soft): the
/// database decides. A refusal there is answered like the actors' budget denial, and
/// recorded (`budget.exceeded`, `request.blocked`); the caller drops its guard. Without
/// shared budgets, nothing to hold.
pub(crate) async fn acquire_shared(
    state: &AppState,
    guard: &ReservationGuard,
    call: &Call<'_>,
    amount: i64,
    finalize: bool,
) -> Result<Vec<SharedHold>, ApiError> {
    if !state.config.shared_budgets {
        return Ok(Vec::new());
    }
    let requests: Vec<HoldRequest> = guard
        .admissions()
        .iter()
        .filter(|(_, a)| a.snapshot.policy != Policy::Warn)
        .map(|(k, a)| HoldRequest {
            org_id: k.org_id.clone(),
            entity_type: k.entity_type.as_str().to_owned(),
            entity_id: k.entity_id.clone(),
            amount,
            policy: a.snapshot.policy,
            keep_free: if finalize { 0 } else { a.snapshot.finalization_reserve },
        })
        .collect();
    if requests.is_empty() {
        return Ok(Vec::new());
    }
    let timeout_ms = i64::try_from(state.config.upstream_timeout.as_millis()).unwrap_or(i64::MAX);
    let expires_at = time::now_ms().saturating_add(timeout_ms).saturating_add(SHARED_HOLD_MARGIN_MS);
    let (entity_type, entity_id, limit, spend, reserved) =
        match shared_budgets::acquire(&state.pool, &state.instance_id, &requests, expires_at).await {
            Ok(holds) => return Ok(holds),
            Err(AcquireError::Denied { entity_type, entity_id, limit, spend, reserved }) => {
                (entity_type, entity_id, limit, spend, reserved)
            }
            Err(AcquireError::Db(e)) => return Err(ApiError::unavailable(e.to_string())),
        };
    let entity_type: EntityType = entity_type.parse().unwrap_or(EntityType::ApiKey);
    let Some(snapshot) = guard
        .admissions()
        .iter()
        .find(|(k, _)| k.entity_type == entity_type && k.entity_id == entity_id)
        .map(|(_, a)| BudgetSnapshot {
            limit,
            spend,
            reserved,
            remaining: limit - spend - reserved,
            ..a.snapshot
        })
    else {
        return Err(ApiError::unavailable("shared budget refused an unknown entity"));
    };
    let entity = EntityKey::new(call.org_id.to_owned(), entity_type, entity_id);
    let err = denial_error(&entity, &DenialReason::BudgetExceeded, &snapshot, amount, None);
    let rows = vec![
        events::exceeded(call, &entity, snapshot.limit, snapshot.committed(), amount),
        events::request_blocked(
            call,
            "budget",
            Some(
                json!({ "code": err.code, "budget_entity_type": entity.entity_type.as_str(), "budget_entity_id": entity.entity_id }),
            ),
        ),
    ];
    record_denial(state, rows).await;
    Err(with_budget_headers(err, &[(entity, snapshot)]))
}

/// Frees a reservation whose call cost nothing (upstream error, never reached).
fn release(state: &AppState, guard: ReservationGuard, holds: Vec<SharedHold>) {
    drop(guard);
    release_holds(state, holds);
}

pub(crate) fn release_holds(state: &AppState, holds: Vec<SharedHold>) {
    if holds.is_empty() {
        return;
    }
    let pool = state.pool.clone();
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        rt.spawn(async move {
            if let Err(e) = shared_budgets::release(&pool, &holds).await {
                tracing::warn!(error = %e, "could not release shared reservations; the reaper will");
            }
        });
    }
}

/// What is needed to record and settle a call once its body has ended.
struct Settlement {
    state: AppState,
    guard: Option<ReservationGuard>,
    holds: Vec<SharedHold>,
    prepared: Prepared,
    provider: Provider,
    trace_id: String,
    started: Instant,
    upstream_ms: i64,
    request_body: Option<bytes::Bytes>,
    tool_definition_tokens: i64,
}

impl Settlement {
    /// Records and settles on the runtime, detached from the response (which may be
    /// gone already). Runs exactly once per call.
    fn spawn(self, seen: Seen) {
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(self.run(seen));
            }
            Err(_) => tracing::error!("no runtime to record a proxied call on; its reservation is released"),
        }
    }

    async fn run(mut self, seen: Seen) {
        let state = self.state.clone();
        let p = &self.prepared;
        let provider = self.provider;
        let now = time::now_ms();
        let mut internal: BTreeMap<String, String> = BTreeMap::new();
        let estimated = |reason: &str, internal: &mut BTreeMap<String, String>| {
            internal.insert("_svc_estimated".to_owned(), "true".to_owned());
            internal.insert(format!("_svc_{reason}"), "true".to_owned());
            state.metrics.proxy_estimated.with_label_values(&[reason]).inc();
        };
        let outcome = match seen.end {
            End::Completed => "ok",
            End::Cancelled => "cancelled",
            End::UpstreamFailed | End::TimedOut => "failed",
        };
        state.metrics.proxy_requests.with_label_values(&[provider.as_str(), outcome]).inc();
        if p.price.is_none() {
            state.unpriced.note(provider, &p.model);
        }
        let (usage, cost, breakdown) = match (seen.end, seen.usage, p.price) {
            (End::Completed, Some(usage), Some(price)) => {
                let b = pricing::cost(&price, &usage);
                (Some(usage), b.total, Some(b))
            }
            (End::Completed, Some(usage), None) => {
                estimated("unknown_model", &mut internal);
                let b = pricing::cost(&state.pricing.fallback_price(provider.as_str()), &usage);
                (Some(usage), b.total, Some(b))
            }
            (End::Completed, None, _) => {
                estimated("no_usage", &mut internal);
                (None, p.estimate, None)
            }
            (End::Cancelled, _, _) => {
                estimated("cancelled", &mut internal);
                (seen.usage, p.estimate, None)
            }
            (End::UpstreamFailed | End::TimedOut, _, _) => {
                estimated("stream_error", &mut internal);
                (seen.usage, p.estimate, None)
            }
        };
        if provider == Provider::Google {
            if let Some(id) = &seen.response_id {
                internal.insert("_svc_google_response_id".to_owned(), id.clone());
            }
            if let Some(u) = usage.filter(|u| u.reasoning_tokens > 0) {
                internal.insert("_svc_thinking_tokens".to_owned(), u.reasoning_tokens.to_string());
            }
        }
        let mut tags = p.effective_tags.clone();
        tags.extend(internal);
        let targets = budget_targets(&p.key, &p.effective_tags, p.customer.as_deref());
        let tokens = |v: Option<u64>| i64::try_from(v.unwrap_or(0)).unwrap_or(i64::MAX);
        let tool_calls = (!seen.tool_calls.is_empty()).then(|| {
            serde_json::to_string(
                &seen.tool_calls.iter().map(|c| json!({ "name": c.name, "id": c.id })).collect::<Vec<_>>(),
            )
            .unwrap_or_default()
        });
        let id = ids::new_id();
        let body = self.request_body.take().map(|request| {
            let (response, truncated) = seen.body.clone().unwrap_or_default();
            CostEventBody {
                event_id: id.clone(),
                org_id: p.key.org_id.clone(),
                request_body: Some(
                    String::from_utf8_lossy(&request[..request.len().min(MAX_BODY_RECORD)]).into_owned(),
                ),
                response_body: Some(String::from_utf8_lossy(&response).into_owned()),
                request_truncated: request.len() > MAX_BODY_RECORD,
                response_truncated: truncated,
                created_at: now,
            }
        });
        let row = CostEvent {
            id,
            org_id: p.key.org_id.clone(),
            request_id: p.headers.request_id.clone(),
            api_key_id: Some(p.key.key_id.clone()),
            user_id: Some(p.key.user_id.clone()),
            provider: provider.as_str().to_owned(),
            model: p.model.clone(),
            input_tokens: tokens(usage.map(|u| u.input_tokens)),
            output_tokens: tokens(usage.map(|u| u.output_tokens)),
            cached_input_tokens: tokens(usage.map(|u| u.cached_input_tokens)),
            reasoning_tokens: tokens(usage.map(|u| u.reasoning_tokens)),
            cost_microdollars: cost,
            duration_ms: Some(i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX)),
            upstream_duration_ms: Some(self.upstream_ms),
            session_id: p.headers.session.clone(),
            trace_id: Some(self.trace_id.clone()),
            event_type: "llm".to_owned(),
            tool_name: None,
            tool_server: None,
            tags: serde_json::to_string(&tags).unwrap_or_else(|_| "{}".to_owned()),
            customer_id: p.customer.clone(),
            cost_breakdown: breakdown.map(|b| {
                json!({ "input": b.input + b.cache_write, "output": b.output, "cached": b.cached, "reasoning": b.reasoning })
                    .to_string()
            }),
            source: "proxy".to_owned(),
            budget_status: if self.guard.as_ref().is_some_and(|g| !g.admissions().is_empty()) {
                "approved".to_owned()
            } else {
                "skipped".to_owned()
            },
            action_id: p.headers.action_id.as_deref().and_then(|a| a.strip_prefix("svc_act_")).map(str::to_owned),
            estimated: tags.contains_key("_svc_estimated"),
            created_at: now,
            tool_calls_requested: tool_calls,
            tool_definition_tokens: self.tool_definition_tokens,
        };
        let event = NewCostEvent {
            row,
            tags,
            targets,
            outbox: Vec::new(),
            holds: std::mem::take(&mut self.holds),
            reserved: true,
            body,
        };
        let holds = event.holds.clone();
        let guard = self.guard.take();
        match state.writer.record(vec![event]).await {
            Ok(outcomes) => match (outcomes.first(), guard) {
                (Some(Outcome::Inserted { .. }), Some(guard)) => {
                    guard.settle(cost, time::now_ms()).await;
                }
                // A reused request id: the first call was recorded; this one is not
                // counted again.
                (_, Some(guard)) => guard.release().await,
                (_, None) => {}
            },
            Err(e) => {
                tracing::error!(error = %e, request_id = %p.headers.request_id, "could not record a proxied call");
                drop(guard);
                release_holds(&state, holds);
            }
        }
    }
}
