//! The provider routes. A proxied call reads top-down as its stages, one module each:
//!
//! 1. [`admission`](super::admission): rate limits and key, body, context, key policy,
//!    plan cap.
//! 2. Estimate ([`clamp`](super::clamp)): a safe upper bound, the model's highest prices
//!    (or the conservative unknown-model price) applied to the prompt's bytes and the
//!    output maximum; and the floor an `exactCeiling` budget may clamp the call down to.
//! 3. [`reservation`](super::reservation): the estimate reserved on every matched
//!    budget, all or nothing; one owner of every hold, whose drop releases them.
//! 4. [`forward`](super::forward): the provider call.
//! 5. [`meter`](super::meter): the answer streamed back while usage is read, complete
//!    only on the provider's end marker.
//! 6. [`settlement`](super::settlement): the cost event committed with its budget
//!    effects, the reservation settled to the actual cost.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::body::SizedStream;
use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse, HttpResponseBuilder};
use actors::budget::messages::CallFingerprint;
use actors::budget::{BudgetSnapshot, Reserve};
use actors::store::EntityKey;

use super::admission;
use super::admitted::Admitted;
use super::clamp;
use super::common::{Common, Timing};
use super::crossing;
use super::denial::{proximity, DENIED};
use super::forward::{self, Forwarded};
use super::meter::{Metered, Seen};
use super::reservation::{Ask, Reservation};
use super::settlement::Settlement;
use super::traced;
use super::upstream::Route;
use spendgate_engine::accounting::targets::entity_keys;
use spendgate_engine::error::{ApiError, ErrorCode};
use spendgate_engine::state::AppState;
use spendgate_llm::pricing::Provider;

pub async fn chat_completions(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    handle(req, body, state, Route::ChatCompletions, None).await
}

/// `POST /v1/responses` (OpenAI Responses API), streaming or not.
pub async fn responses(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    handle(req, body, state, Route::Responses, None).await
}

/// `POST /v1/embeddings`.
pub async fn embeddings(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    handle(req, body, state, Route::Embeddings, None).await
}

pub async fn messages(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    handle(req, body, state, Route::Messages, None).await
}

/// Azure OpenAI chat completions: `/azure/openai/deployments/{deployment}/chat/completions`
/// (the deployment stands for the model) and `/azure/openai/v1/chat/completions`.
pub async fn azure_chat(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    let deployment = req.match_info().get("deployment").map(str::to_owned);
    handle(req, body, state, Route::AzureChat, deployment).await
}

/// Azure OpenAI Responses, deployment or v1 path.
pub async fn azure_responses(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let deployment = req.match_info().get("deployment").map(str::to_owned);
    handle(req, body, state, Route::AzureResponses, deployment).await
}

/// Azure OpenAI embeddings, deployment or v1 path.
pub async fn azure_embeddings(
    req: HttpRequest,
    body: web::Payload,
    state: web::Data<AppState>,
) -> HttpResponse {
    let deployment = req.match_info().get("deployment").map(str::to_owned);
    handle(req, body, state, Route::AzureEmbeddings, deployment).await
}

/// Amazon Bedrock: `/bedrock/model/{modelId}/converse`, `/converse-stream`, `/invoke`
/// and `/invoke-with-response-stream` (Anthropic's messages for a Claude model,
/// Converse's shape for Amazon Nova). The model is the path's id, an ARN reduced to the
/// id it names. A streamed answer is an AWS event stream, told by its content type.
pub async fn bedrock(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    let raw = req.match_info().get("model").unwrap_or_default();
    let model = spendgate_llm::usage::bedrock_model(raw);
    let path = req.path();
    let route = if path.ends_with("/converse") || path.ends_with("/converse-stream") {
        Route::BedrockConverse
    } else if spendgate_llm::usage::invokes_anthropic(&model) {
        Route::BedrockInvokeAnthropic
    } else {
        Route::BedrockInvoke
    };
    handle(req, body, state, route, Some(model)).await
}

/// The path prefix of an operator-defined upstream (`{upstream}` is its name).
pub const UPSTREAM_PREFIX: &str = "/upstreams/{upstream}";

/// `/v1beta/models/{model}:generateContent` and `:streamGenerateContent`.
pub async fn gemini(req: HttpRequest, body: web::Payload, state: web::Data<AppState>) -> HttpResponse {
    let tail = req.match_info().get("tail").unwrap_or_default().to_owned();
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
    let trace = state.telemetry.as_ref().and_then(|_| traced::start(&req, route, started));
    let mut common = Common {
        started,
        timing: Timing::default(),
        request_id: None,
        session: None,
        version: spendgate_engine::API_VERSION.to_owned(),
        rate_limit: None,
        trace,
    };
    let result = proxy(&req, body, &state, route, path_model, &mut common).await;
    let mut res = match result {
        Ok(res) => res,
        Err(e) => {
            use actix_web::ResponseError;
            if e.code.status() == StatusCode::TOO_MANY_REQUESTS || e.headers.iter().any(|(n, _)| n == DENIED)
            {
                state.metrics.proxy_requests.with_label_values(&[route.provider().as_str(), "denied"]).inc();
            }
            if let (Some(telemetry), Some(trace)) = (&state.telemetry, common.trace.take()) {
                traced::refused(telemetry, *trace, &e);
            }
            e.error_response()
        }
    };
    common.apply(&mut res);
    res
}

async fn proxy(
    req: &HttpRequest,
    payload: web::Payload,
    state: &AppState,
    route: Route,
    path_model: Option<String>,
    common: &mut Common,
) -> Result<HttpResponse, ApiError> {
    let mut admitted = admission::admit(req, payload, state, route, path_model, common).await?;
    if let Some(trace) = common.trace.as_mut() {
        trace.admitted = Some(traced::admitted(&admitted));
    }
    let plan = clamp::plan(state, &admitted);

    let budget_started = Instant::now();
    let reserved = reserve(state, &admitted, &plan).await;
    if let Some(trace) = common.trace.as_mut() {
        trace.reservation = Some((budget_started, Instant::now()));
    }
    let reservation = reserved?;
    // An `exactCeiling` budget may have granted less than the estimate: the call is
    // clamped to it, and what it holds is its estimate from here on.
    let clamped = match clamp::apply(&mut admitted, &reservation, &plan) {
        Ok(clamped) => clamped,
        Err(err) => {
            // Refused like a budget denial: a record, and the holds released.
            reservation.release().await;
            let details = serde_json::json!({ "code": err.code, "message": err.message });
            let rows = vec![super::events::request_blocked(&admitted.call(), "budget", Some(details))];
            super::denial::record(state, &admitted.refused(), rows).await;
            return Err(err);
        }
    };
    let estimate = reservation.granted();
    let snapshots = reservation.snapshots();
    common.timing.budget = Some(budget_started.elapsed());
    if let Some(trace) = common.trace.as_mut() {
        trace.tightest = super::denial::tightest(&snapshots)
            .map(|(entity, _)| format!("{}:{}", entity.entity_type.as_str(), entity.entity_id));
        trace.upstream_started = Some(Instant::now());
    }

    // An error here drops the reservation, which releases every hold. A client that
    // goes away first aborts the provider call (its request is dropped) and is charged
    // the estimate at once, like a cancelled stream.
    let sent = tokio::select! {
        sent = forward::send(state, req, &admitted) => Some(sent?),
        () = super::peer::gone(req) => None,
    };
    let Some(Forwarded { response, strip_usage, upstream_time }) = sent else {
        let trace = common.trace.take();
        return Err(client_gone(state, reservation, admitted, estimate, common, trace));
    };
    common.timing.upstream = upstream_time;

    let status = response.status();
    let mut builder = answer_head(&response, &admitted, &snapshots, estimate, common);
    if let Some(n) = clamped {
        builder.insert_header((clamp::HEADER, clamp::header_value(n)));
    }
    if !status.is_success() {
        // Upstream errors pass through as they are; nothing was spent.
        state.metrics.proxy_requests.with_label_values(&[admitted.provider.as_str(), "upstream_error"]).inc();
        if let (Some(telemetry), Some(trace)) = (&state.telemetry, common.trace.take()) {
            traced::upstream_error(telemetry, &trace, reservation.budget_status(), status);
        }
        reservation.release().await;
        return Ok(builder.streaming(response));
    }
    let sse = is_event_stream(&response);
    let aws_events = is_aws_event_stream(&response);
    let length = passed_length(&response, sse || aws_events);
    let record_bodies = admitted.key.plan.is_paid();
    // Content capture (opt-in) needs the answer's bytes whatever the plan.
    let keep_answer = record_bodies || state.telemetry.as_ref().is_some_and(|t| t.capture_content);
    let format = admitted.route.format();
    let EndWaits { recorded, room_freed, durable } =
        end_waits(state.config.durable_answers, reservation.exact_ceiling());
    let settlement = Settlement {
        state: state.clone(),
        reservation,
        admitted,
        estimate,
        started: common.started,
        upstream_ms: i64::try_from(upstream_time.as_millis()).unwrap_or(i64::MAX),
        record_bodies,
        recorded,
        room_freed,
        trace: common.trace.take(),
    };
    let finish = Box::new(move |seen: Seen| settlement.spawn(seen));
    let metered =
        Metered::new(response, format, sse, strip_usage, keep_answer, state.config.upstream_timeout, finish);
    let metered = if aws_events { metered.aws_event_stream() } else { metered };
    let Some(rx) = durable else {
        return Ok(match length {
            Some(length) => builder.body(SizedStream::new(length, metered)),
            None => builder.streaming(metered),
        });
    };
    // The end waits, and with it an event stream's end marker.
    let end_marker = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let metered = metered.signal_end_marker(end_marker.clone());
    let durable = super::durable::DurableEnd::new(metered, sse, rx).hold_from_end_marker(end_marker);
    Ok(match length {
        Some(length) => builder.body(SizedStream::new(length, durable)),
        None => builder.streaming(durable),
    })
}

/// What the end of an answer waits for, and the settlement's side of it.
struct EndWaits {
    recorded: Option<tokio::sync::oneshot::Sender<bool>>,
    room_freed: Option<tokio::sync::oneshot::Sender<bool>>,
    durable: Option<tokio::sync::oneshot::Receiver<bool>>,
}

/// With `durable_answers`, an answer ends once its record is committed (the holds
/// beyond its cost are given back before that). Otherwise a call an `exactCeiling`
/// budget admitted ends once those holds are given back: it may have held the whole
/// room left, and the client's next call, sent the moment this one ends, must find
/// it. Every other answer ends as soon as its bytes are passed.
fn end_waits(durable_answers: bool, exact_ceiling: bool) -> EndWaits {
    if !durable_answers && !exact_ceiling {
        return EndWaits { recorded: None, room_freed: None, durable: None };
    }
    let (tx, rx) = super::durable::channel();
    if durable_answers {
        EndWaits { recorded: Some(tx), room_freed: None, durable: Some(rx) }
    } else {
        EndWaits { recorded: None, room_freed: Some(tx), durable: Some(rx) }
    }
}

/// The provider's `Content-Length` when the body reaches the client byte for byte (a
/// JSON answer awc did not decompress): the answer then carries it instead of
/// chunked framing, so the client has the whole answer with its last byte, as behind
/// nginx, rather than after a terminating chunk that may be written on its own.
fn passed_length<S>(response: &awc::ClientResponse<S>, sse: bool) -> Option<u64> {
    use actix_web::http::header::{CONTENT_ENCODING, CONTENT_LENGTH};
    let headers = response.headers();
    let identity =
        headers.get(CONTENT_ENCODING).is_none_or(|v| v.as_bytes().eq_ignore_ascii_case(b"identity"));
    if sse || !identity {
        return None;
    }
    headers.get(CONTENT_LENGTH)?.to_str().ok()?.parse().ok()
}

/// The client went away before the provider's answer head: the provider call is
/// aborted (its request future dropped) and the call charged its estimate at once.
fn client_gone(
    state: &AppState,
    reservation: Reservation,
    admitted: Admitted,
    estimate: i64,
    common: &Common,
    trace: Option<Box<spendgate_engine::telemetry::CallTrace>>,
) -> ApiError {
    let settlement = Settlement {
        state: state.clone(),
        reservation,
        admitted,
        estimate,
        started: common.started,
        upstream_ms: i64::try_from(common.started.elapsed().as_millis()).unwrap_or(i64::MAX),
        record_bodies: false,
        recorded: None,
        room_freed: None,
        trace,
    };
    settlement.spawn(Seen::cancelled());
    ApiError::new(ErrorCode::UpstreamError, "The client went away before the provider answered")
}

async fn reserve(state: &AppState, a: &Admitted, plan: &clamp::Plan) -> Result<Reservation, ApiError> {
    let keys = entity_keys(&a.key, &a.effective_tags, a.customer.as_deref());
    let mut hasher = std::hash::DefaultHasher::new();
    a.body.hash(&mut hasher);
    let reserve = Reserve {
        reservation_id: state.budgets.registry().next_reservation_id(),
        estimate: plan.estimate,
        floor: plan.floor,
        session_id: a.headers.session.as_deref().map(Arc::from),
        finalize: a.headers.finalize,
        fingerprint: Some(CallFingerprint {
            provider: Arc::from(a.event_provider()),
            model: Arc::from(a.model.as_str()),
            hash: hasher.finish(),
        }),
        now_ms: a.now,
    };
    let bound = Some(plan.bound());
    Reservation::acquire(
        state,
        Ask { keys: &keys, reserve: &reserve, call: a.call(), refused: a.refused(), bound },
    )
    .await
}

/// The answer's status and headers: the provider's pass-through headers, the proxy's
/// context and budget headers, and its timings.
fn answer_head<S>(
    response: &awc::ClientResponse<S>,
    a: &Admitted,
    snapshots: &[(EntityKey, BudgetSnapshot)],
    estimate: i64,
    common: &Common,
) -> HttpResponseBuilder {
    let mut builder = HttpResponse::build(response.status());
    for (name, value) in response.headers() {
        if crossing::passes_back(name) {
            builder.append_header((name.clone(), value.clone()));
        }
    }
    if a.provider == Provider::Google {
        // Gemini reports no request id: the proxy's stands in.
        builder.insert_header(("x-request-id", a.headers.request_id.as_str()));
    }
    if !a.effective_tags.is_empty() {
        if let Ok(tags) = serde_json::to_string(&a.effective_tags) {
            builder.insert_header(("x-service-effective-tags", tags));
        }
    }
    if a.headers.customer_invalid {
        builder.insert_header(("x-service-warning", "invalid_customer"));
    }
    for (name, value) in proximity(snapshots, estimate) {
        builder.insert_header((name, value));
    }
    let total = common.started.elapsed();
    let overhead = total.saturating_sub(common.timing.upstream);
    builder.insert_header(("x-service-overhead-ms", format!("{:.3}", ms(overhead))));
    builder.insert_header(("server-timing", server_timing(&common.timing, overhead, total)));
    builder
}

fn is_event_stream<S>(response: &awc::ClientResponse<S>) -> bool {
    response
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("text/event-stream"))
}

/// Bedrock's streamed answers: AWS event streams.
fn is_aws_event_stream<S>(response: &awc::ClientResponse<S>) -> bool {
    response
        .headers()
        .get(actix_web::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| ct.starts_with("application/vnd.amazon.eventstream"))
}

/// Milliseconds with microsecond precision, for `Server-Timing` and the overhead header.
fn ms(d: Duration) -> f64 {
    (d.as_micros() as f64) / 1000.0
}

fn server_timing(t: &Timing, overhead: Duration, total: Duration) -> String {
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
