//! Settlement, the last stage of a proxied call: when the answer's body has ended
//! (completed, failed, timed out, or dropped by a client that went away) the call's
//! cost is decided, its cost event committed with its budget effects (freeing its
//! database holds in the same transaction), and its reservation settled on the actors.
//!
//! What a call is charged:
//! - completed on the provider's end marker with usage: the usage at the model's price
//!   (an unknown model's usage at the conservative unknown-model price, tagged
//!   `_svc_estimated` + `_svc_unknown_model`);
//! - completed without usage: the estimate (`_svc_no_usage`);
//! - cancelled by the client: at least the estimate (`_svc_cancelled`);
//! - failed, timed out, or ended without the provider's end marker (an error event, a
//!   transport close): at least the estimate (`_svc_stream_error`);
//! - a Responses `background: true` call, answered before the work is done and without
//!   usage: the estimate (`_svc_background`).
//!
//! Tools the provider ran itself (Responses built-in tools) are counted on the event
//! (`_svc_builtin_tool_calls`, `web_search_call:2,...`) and charged on top at their
//! per-call price from the price table (the code interpreter per container); one
//! without a price makes the event `_svc_estimated` + `_svc_unpriced_builtin_tool`,
//! never silently free.
//!
//! A call whose cost passed what it reserved (non-text parts or provider-run tools the
//! estimate could not bound) is tagged `_svc_over_reservation` with the excess in µ$
//! and counted in `proxy_over_reservation_total`.
//!
//! Every admitted call that reached the provider is charged: a client's reused request
//! id correlates, it never deduplicates a call away.

use std::time::Instant;

use serde_json::json;

use super::admitted::Admitted;
use super::builtin_tools::{self, BuiltinCharge};
use super::meter::{End, Seen, MAX_BODY_RECORD};
use super::reservation::Reservation;
use spendgate_engine::accounting::event::{self, Dedup, EventSpec};
use spendgate_engine::db::cost_events::NewCostEvent;
use spendgate_engine::db::models::CostEventBody;
use spendgate_engine::state::AppState;
use spendgate_engine::util::time;
use spendgate_llm::pricing::{self, Provider, Usage};

/// Tag of a call that settled above its reservation: the excess in microdollars.
pub const OVER_RESERVATION_TAG: &str = "_svc_over_reservation";

/// How far a call's cost passed what it reserved, if it did.
fn over_reservation(cost: i64, reserved: i64) -> Option<i64> {
    (cost > reserved).then(|| cost - reserved)
}

/// What is needed to record and settle a call once its body has ended.
pub struct Settlement {
    pub state: AppState,
    pub reservation: Reservation,
    pub admitted: Admitted,
    pub estimate: i64,
    pub started: Instant,
    pub upstream_ms: i64,
    /// Keep the request and response bodies (Pro and above).
    pub record_bodies: bool,
    /// Told whether the call's record was committed (`durable_answers`: the answer's
    /// end waits for it, see [`super::durable`]).
    pub recorded: Option<tokio::sync::oneshot::Sender<bool>>,
    /// Told once the holds beyond the call's cost are given back (an `exactCeiling`
    /// call: the answer's end waits for it, so the client's next call finds the room).
    pub room_freed: Option<tokio::sync::oneshot::Sender<bool>>,
    /// The call's OpenTelemetry span data (export on only).
    pub trace: Option<Box<spendgate_engine::telemetry::CallTrace>>,
}

/// A settlement on its way to the writer's thread, handed over when dropped (see
/// [`Settlement::spawn`]).
struct Handoff(Option<(Settlement, Seen)>);

impl Drop for Handoff {
    fn drop(&mut self) {
        if let Some((settlement, seen)) = self.0.take() {
            let writer = settlement.state.writer.clone();
            writer.spawn(settlement.run(seen));
        }
    }
}

/// The cost of a call and the `_svc_` reasons it was estimated for (none: charged
/// its usage at its own price).
struct Charge {
    cost: i64,
    usage: Option<Usage>,
    breakdown: Option<pricing::CostBreakdown>,
    estimated: Vec<&'static str>,
    /// The provider-run tools' part of `cost`.
    tools: BuiltinCharge,
}

impl Settlement {
    /// Records and settles detached from the response (which may be gone already), on
    /// the accounting writer's thread: reading the answer and building the cost event
    /// is work neither the client nor the worker's next request should wait for. Runs
    /// exactly once per call.
    ///
    /// On an HTTP worker the handoff waits for the worker's next turn: the body's end is
    /// seen inside the poll that then writes the answer's last bytes, and waking the
    /// writer's thread before that write puts a syscall, and on two busy cores often a
    /// preemption, in front of it. A handoff whose turn never comes (the worker stopping)
    /// happens when its task is dropped, so no call goes unrecorded.
    pub fn spawn(mut self, seen: Seen) {
        if let Some(trace) = self.trace.as_mut() {
            trace.ended = Some(Instant::now());
        }
        let handoff = Handoff(Some((self, seen)));
        if actix::Arbiter::try_current().is_some() {
            actix::spawn(async move { drop(handoff) });
        }
    }

    async fn run(mut self, seen: Seen) {
        let seen = seen.read();
        let state = self.state.clone();
        let a = &self.admitted;
        let outcome = match seen.end {
            End::Completed => "ok",
            End::Cancelled => "cancelled",
            End::UpstreamFailed | End::TimedOut | End::Incomplete => "failed",
        };
        state.metrics.proxy_requests.with_label_values(&[a.provider.as_str(), outcome]).inc();
        let charge = charge(&state, a, self.estimate, &seen);
        for reason in &charge.estimated {
            state.metrics.proxy_estimated.with_label_values(&[reason]).inc();
        }
        if let Some(excess) = over_reservation(charge.cost, self.estimate) {
            let over = &state.metrics.proxy_over_reservation;
            over.with_label_values(&["calls"]).inc();
            over.with_label_values(&["microdollars"]).inc_by(u64::try_from(excess).unwrap_or(0));
        }
        if self.reservation.exact_ceiling() {
            self.reservation.give_back(charge.cost).await;
        }
        if let Some(room_freed) = self.room_freed.take() {
            let _ = room_freed.send(true);
        }
        let mut event = self.event(&seen, &charge);
        self.reservation.attach(&mut event);
        if let (Some(telemetry), Some(trace)) = (state.telemetry.as_deref(), self.trace.take()) {
            self.export(telemetry, &trace, &seen, &charge, &event.row);
        }
        let a = &self.admitted;
        let request_id = a.headers.request_id.clone();
        let recorded = self.recorded.take();
        let reservation = self.reservation;
        let committed = match state.writer.record(vec![event]).await {
            // Inserted, or already inserted by a commit retried after an unclear
            // failure: either way this call's cost is in storage once.
            // ... and its commit settled the reservation on the actors.
            Ok(_) => {
                reservation.committed();
                true
            }
            Err(e) => {
                // Dropping the reservation releases its holds.
                tracing::error!(error = %e, request_id = %request_id, "could not record a proxied call");
                false
            }
        };
        if let Some(recorded) = recorded {
            let _ = recorded.send(committed);
        }
    }

    /// The call's span and metrics, from its cost event: built once, here, where every
    /// figure is known.
    fn export(
        &self,
        telemetry: &spendgate_engine::telemetry::Telemetry,
        trace: &spendgate_engine::telemetry::CallTrace,
        seen: &Seen,
        charge: &Charge,
        row: &spendgate_engine::db::models::CostEvent,
    ) {
        let error_type = match seen.end {
            End::Completed => None,
            End::Cancelled => Some("cancelled"),
            End::UpstreamFailed => Some("upstream_failed"),
            End::TimedOut => Some("timeout"),
            End::Incomplete => Some("incomplete"),
        };
        let content = telemetry.capture_content.then(|| {
            let answer = seen.body.as_ref().map_or(&[][..], |(bytes, _)| bytes.as_slice());
            (&self.admitted.body[..], answer)
        });
        let outcome = spendgate_engine::telemetry::Outcome {
            response_id: seen.response_id.as_deref(),
            response_model: seen.model.as_deref(),
            finish_reason: seen.finish_reason.as_deref(),
            input_tokens: charge.usage.map(|_| row.input_tokens),
            output_tokens: charge.usage.map(|_| row.output_tokens),
            cost_microdollars: Some(row.cost_microdollars),
            estimated: row.estimated,
            budget_status: Some(&row.budget_status),
            denial_code: None,
            error_type: error_type.map(std::borrow::Cow::Borrowed),
            estimated_reasons: &charge.estimated,
            content,
        };
        telemetry.record_call(trace, &outcome, trace.ended.unwrap_or_else(Instant::now));
    }

    fn event(&self, seen: &Seen, charge: &Charge) -> NewCostEvent {
        let a = &self.admitted;
        let now = time::now_ms();
        let mut tags = a.effective_tags.clone();
        for reason in &charge.estimated {
            tags.insert("_svc_estimated".to_owned(), "true".to_owned());
            tags.insert(format!("_svc_{reason}"), "true".to_owned());
        }
        if let Some(counts) = charge.tools.tag() {
            tags.insert("_svc_builtin_tool_calls".to_owned(), counts);
        }
        if let Some(excess) = over_reservation(charge.cost, self.estimate) {
            tags.insert(OVER_RESERVATION_TAG.to_owned(), excess.to_string());
        }
        if a.provider == Provider::Google {
            if let Some(id) = &seen.response_id {
                tags.insert("_svc_google_response_id".to_owned(), id.clone());
            }
            if let Some(u) = charge.usage.filter(|u| u.reasoning_tokens > 0) {
                tags.insert("_svc_thinking_tokens".to_owned(), u.reasoning_tokens.to_string());
            }
        }
        let mut event = event::build(
            EventSpec {
                key: &a.key,
                request_id: a.headers.request_id.clone(),
                provider: a.event_provider().to_owned(),
                model: super::cloud::answer_price(&self.state, a, seen)
                    .map_or_else(|| a.model.clone(), |(m, _)| m),
                source: "proxy",
                event_type: "llm",
                tags,
                customer: a.customer.clone(),
                budget_status: self.reservation.budget_status(),
                dedup: Dedup::Never,
                now,
            },
            true,
        );
        let tokens = |v: Option<u64>| i64::try_from(v.unwrap_or(0)).unwrap_or(i64::MAX);
        let usage = charge.usage;
        let row = &mut event.row;
        row.input_tokens = tokens(usage.map(|u| u.input_tokens));
        row.output_tokens = tokens(usage.map(|u| u.output_tokens));
        row.cached_input_tokens = tokens(usage.map(|u| u.cached_input_tokens));
        row.reasoning_tokens = tokens(usage.map(|u| u.reasoning_tokens));
        row.cost_microdollars = charge.cost;
        row.duration_ms = Some(i64::try_from(self.started.elapsed().as_millis()).unwrap_or(i64::MAX));
        row.upstream_duration_ms = Some(self.upstream_ms);
        row.session_id.clone_from(&a.headers.session);
        row.trace_id = Some(a.trace_id.clone());
        let tools_cost = charge.tools.cost;
        row.cost_breakdown = charge.breakdown.map(|b| {
            let mut parts = json!({ "input": b.input + b.cache_write, "output": b.output, "cached": b.cached, "reasoning": b.reasoning });
            if tools_cost > 0 {
                parts["tools"] = json!(tools_cost);
            }
            parts.to_string()
        });
        row.action_id =
            a.headers.action_id.as_deref().and_then(|id| id.strip_prefix("svc_act_")).map(str::to_owned);
        row.tool_calls_requested = (!seen.tool_calls.is_empty()).then(|| {
            let calls: Vec<_> =
                seen.tool_calls.iter().map(|c| json!({ "name": c.name, "id": c.id })).collect();
            serde_json::Value::from(calls).to_string()
        });
        row.tool_definition_tokens = tool_definition_tokens(&a.body);
        event.body = self.record_bodies.then(|| body_record(&event.row, &a.body, seen, now));
        event
    }
}

/// The rules in the module documentation. A model the table does not know is also
/// noted (a warning and a metric the first time), and tagged whatever else happened.
fn charge(state: &AppState, a: &Admitted, estimate: i64, seen: &Seen) -> Charge {
    let answered = super::cloud::answer_price(state, a, seen).map(|(_, p)| p);
    let unknown = a.price.is_none() && answered.is_none();
    if unknown {
        state.unpriced.note(a.event_provider(), &a.model);
    }
    let price = answered.or(a.price).unwrap_or_else(|| state.pricing.fallback_price(a.event_provider()));
    let priced = |u: Usage| {
        let b = pricing::cost(&price, &u);
        (b.total, b)
    };
    let tools = builtin_tools::charge(&state.pricing, a.provider, &seen.builtin_calls);
    let mut charge = match (seen.end, seen.usage) {
        // Answered before the work: whatever the body says, the estimate.
        (End::Completed, _) if a.summary.background => Charge {
            cost: estimate,
            usage: None,
            breakdown: None,
            estimated: vec!["background"],
            tools: BuiltinCharge::default(),
        },
        (End::Completed, Some(usage)) => {
            let (cost, breakdown) = priced(usage);
            let cost = cost.saturating_add(tools.cost);
            Charge { cost, usage: Some(usage), breakdown: Some(breakdown), estimated: Vec::new(), tools }
        }
        (end, usage) => {
            let reason = match end {
                End::Completed => "no_usage",
                End::Cancelled => "cancelled",
                End::UpstreamFailed | End::TimedOut | End::Incomplete => "stream_error",
            };
            let partial = usage.map_or(0, |u| priced(u).0).saturating_add(tools.cost);
            Charge { cost: partial.max(estimate), usage, breakdown: None, estimated: vec![reason], tools }
        }
    };
    if charge.tools.unpriced {
        charge.estimated.push("unpriced_builtin_tool");
    }
    if unknown {
        charge.estimated.push("unknown_model");
    }
    charge
}

fn body_record(
    row: &spendgate_engine::db::models::CostEvent,
    request: &[u8],
    seen: &Seen,
    now: i64,
) -> CostEventBody {
    let (response, truncated) = seen.body.clone().unwrap_or_default();
    CostEventBody {
        event_id: row.id.clone(),
        org_id: row.org_id.clone(),
        request_body: Some(
            String::from_utf8_lossy(&request[..request.len().min(MAX_BODY_RECORD)]).into_owned(),
        ),
        response_body: Some(String::from_utf8_lossy(&response).into_owned()),
        request_truncated: request.len() > MAX_BODY_RECORD,
        response_truncated: truncated,
        created_at: now,
    }
}

/// Tokens spent on tool definitions, estimated like the prompt (4 bytes per token)
/// from the request's `tools` array. A body without the bytes `tools` (and without a
/// `\u` escape that could spell them) has none: most calls skip a second parse.
fn tool_definition_tokens(body: &[u8]) -> i64 {
    let has = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    if !has(b"tools") && !has(b"\\u") {
        return 0;
    }
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

#[cfg(test)]
mod tests {
    use super::tool_definition_tokens;

    #[test]
    fn tool_tokens_with_and_without_tools() {
        assert_eq!(tool_definition_tokens(br#"{"model":"m","messages":[]}"#), 0);
        assert_eq!(tool_definition_tokens(br#"{"tools":[{"a":1}]}"#), 3);
        // An escaped key is still a `tools` key.
        assert_eq!(tool_definition_tokens(br#"{"\u0074ools":[{"a":1}]}"#), 3);
    }
}
