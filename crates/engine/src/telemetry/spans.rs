//! The span of a proxied call, per the OpenTelemetry GenAI semantic conventions, and
//! its two children (the reservation and the upstream call). A call's span is built
//! once, at its end, from what its cost event already holds, with the start and end
//! times the call measured: no live span is carried across the call's awaits.

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
use opentelemetry::{Array, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_sdk::trace::SpanData;

/// Bytes of a prompt or completion body kept on a span when content capture is on.
pub const MAX_CONTENT_BYTES: usize = 64 * 1024;

/// Where a span belongs: its trace, and the caller's span when a `traceparent` named
/// one. A caller that sent its trace unsampled (flags `00`) gets no spans from us,
/// as with the SDK's default parent-based sampler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parent {
    pub trace_id: TraceId,
    /// The caller's span (a remote parent).
    pub span_id: Option<SpanId>,
    pub sampled: bool,
}

impl Parent {
    /// From the trace id the proxy resolved and the caller's `traceparent`, when it
    /// sent a valid one (its trace id is then the resolved one). `None` for a trace id
    /// that is not 32 hex digits.
    pub fn of(trace_id: &str, traceparent: Option<&str>) -> Option<Parent> {
        let trace_id = TraceId::from_hex(trace_id).ok().filter(|t| *t != TraceId::INVALID)?;
        let (span_id, sampled) = match traceparent.and_then(parse_traceparent) {
            Some((tid, sid, flags)) if tid == trace_id => (Some(sid), flags.is_sampled()),
            _ => (None, true),
        };
        Some(Parent { trace_id, span_id, sampled })
    }

    /// From a request's `traceparent` alone, else a new trace.
    pub fn from_traceparent(traceparent: Option<&str>) -> Parent {
        match traceparent.and_then(parse_traceparent) {
            Some((trace_id, span_id, flags)) => {
                Parent { trace_id, span_id: Some(span_id), sampled: flags.is_sampled() }
            }
            None => Parent { trace_id: new_trace_id(), span_id: None, sampled: true },
        }
    }
}

/// `00-{trace id}-{span id}-{flags}` with neither id all zeros.
fn parse_traceparent(value: &str) -> Option<(TraceId, SpanId, TraceFlags)> {
    let mut parts = value.trim().split('-');
    let (version, trace_id, span_id, flags) = (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || version != "00" || trace_id.len() != 32 || span_id.len() != 16 {
        return None;
    }
    let lower = |s: &str| s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !lower(trace_id) || !lower(span_id) || flags.len() != 2 {
        return None;
    }
    let trace_id = TraceId::from_hex(trace_id).ok().filter(|t| *t != TraceId::INVALID)?;
    let span_id = SpanId::from_hex(span_id).ok().filter(|s| *s != SpanId::INVALID)?;
    let flags = u8::from_str_radix(flags, 16).ok()?;
    Some((trace_id, span_id, TraceFlags::new(flags)))
}

fn new_trace_id() -> TraceId {
    TraceId::from_bytes(*uuid::Uuid::new_v4().as_bytes())
}

fn new_span_id() -> SpanId {
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let mut id = [0u8; 8];
    id.copy_from_slice(&bytes[..8]);
    SpanId::from_bytes(id)
}

/// A wall-clock time for every `Instant` of a call: spans carry wall times, the call
/// measures with a monotonic clock.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    wall: SystemTime,
    at: Instant,
}

/// The wall clock, read for span timestamps only.
#[expect(
    clippy::disallowed_methods,
    reason = "span timestamps need sub-millisecond wall time; accounting keeps util::time::now_ms"
)]
fn wall_now() -> SystemTime {
    SystemTime::now()
}

impl Clock {
    /// The wall time of `at` (the call's start).
    pub fn since(at: Instant) -> Clock {
        let now = wall_now();
        Clock { wall: now.checked_sub(at.elapsed()).unwrap_or(now), at }
    }

    pub fn wall(&self, t: Instant) -> SystemTime {
        self.wall + t.saturating_duration_since(self.at)
    }
}

/// What a proxied call collects for its span while it runs; only when export is on.
#[derive(Debug)]
pub struct CallTrace {
    pub parent: Parent,
    pub clock: Clock,
    pub started: Instant,
    /// `gen_ai.operation.name` of the route.
    pub operation: &'static str,
    /// `gen_ai.provider.name` of the route's wire format.
    pub provider: &'static str,
    /// Known once admitted.
    pub admitted: Option<Admitted>,
    /// The reservation, from asking to the answer.
    pub reservation: Option<(Instant, Instant)>,
    /// When the provider call started.
    pub upstream_started: Option<Instant>,
    /// When the answer's body ended (the settlement's start).
    pub ended: Option<Instant>,
    /// `{entityType}:{entityId}` of the tightest budget.
    pub tightest: Option<String>,
}

/// Who and what a call was, once admitted.
#[derive(Debug, Clone, Default)]
pub struct Admitted {
    pub model: String,
    /// The upstream's name when it is an operator-defined one (the cost event's
    /// provider), else the built-in provider's.
    pub upstream: String,
    pub max_tokens: Option<u32>,
    pub stream: bool,
    pub api_key_id: String,
    pub session: Option<String>,
    pub customer: Option<String>,
    pub request_id: String,
}

impl CallTrace {
    pub fn new(parent: Parent, started: Instant, operation: &'static str, provider: &'static str) -> Self {
        CallTrace {
            parent,
            clock: Clock::since(started),
            started,
            operation,
            provider,
            admitted: None,
            reservation: None,
            upstream_started: None,
            ended: None,
            tightest: None,
        }
    }
}

/// How a call ended, for its span.
#[derive(Debug, Clone, Default)]
pub struct Outcome<'a> {
    pub response_id: Option<&'a str>,
    /// The model that answered, as the provider names it.
    pub response_model: Option<&'a str>,
    /// Why the generation stopped, as the provider says it.
    pub finish_reason: Option<&'a str>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cost_microdollars: Option<i64>,
    pub estimated: bool,
    /// `approved`, `skipped` or `denied`; `None` when no budget was asked.
    pub budget_status: Option<&'a str>,
    /// The spec's error code of a refusal (`budget_exceeded`, ...).
    pub denial_code: Option<&'a str>,
    /// `error.type`: an error code, or the provider's HTTP status.
    pub error_type: Option<Cow<'a, str>>,
    /// Why a call was charged its estimate (`_svc_` reasons), if it was.
    pub estimated_reasons: &'a [&'static str],
    /// Prompt and completion bodies (content capture only).
    pub content: Option<(&'a [u8], &'a [u8])>,
}

/// `{gen_ai.operation.name} {gen_ai.request.model}`, the operation alone before the
/// model is known.
pub fn span_name(operation: &str, model: Option<&str>) -> String {
    match model.filter(|m| !m.is_empty()) {
        Some(model) => format!("{operation} {model}"),
        None => operation.to_owned(),
    }
}

/// The call span's attributes.
pub fn call_attributes(t: &CallTrace, o: &Outcome<'_>) -> Vec<KeyValue> {
    let mut a = Vec::with_capacity(24);
    a.push(KeyValue::new("gen_ai.operation.name", t.operation));
    a.push(KeyValue::new("gen_ai.provider.name", t.provider));
    if let Some(ad) = &t.admitted {
        a.push(KeyValue::new("gen_ai.request.model", ad.model.clone()));
        if let Some(n) = ad.max_tokens {
            a.push(KeyValue::new("gen_ai.request.max_tokens", i64::from(n)));
        }
        a.push(KeyValue::new("spendgate.stream", ad.stream));
        a.push(KeyValue::new("spendgate.upstream", ad.upstream.clone()));
        a.push(KeyValue::new("spendgate.api_key.id", ad.api_key_id.clone()));
        a.push(KeyValue::new("spendgate.request.id", ad.request_id.clone()));
        if let Some(s) = &ad.session {
            a.push(KeyValue::new("spendgate.session.id", s.clone()));
        }
        if let Some(c) = &ad.customer {
            a.push(KeyValue::new("spendgate.customer.id", c.clone()));
        }
    }
    if let Some(id) = o.response_id {
        a.push(KeyValue::new("gen_ai.response.id", id.to_owned()));
    }
    if let Some(model) = o.response_model {
        a.push(KeyValue::new("gen_ai.response.model", model.to_owned()));
    }
    if let Some(reason) = o.finish_reason {
        let reasons = Array::String(vec![StringValue::from(reason.to_owned())]);
        a.push(KeyValue::new("gen_ai.response.finish_reasons", Value::Array(reasons)));
    }
    if let Some(n) = o.input_tokens {
        a.push(KeyValue::new("gen_ai.usage.input_tokens", n));
    }
    if let Some(n) = o.output_tokens {
        a.push(KeyValue::new("gen_ai.usage.output_tokens", n));
    }
    if let Some(cost) = o.cost_microdollars {
        a.push(KeyValue::new("spendgate.cost_microdollars", cost));
        a.push(KeyValue::new("spendgate.cost_estimated", o.estimated));
    }
    if !o.estimated_reasons.is_empty() {
        let reasons: Vec<StringValue> = o.estimated_reasons.iter().map(|r| StringValue::from(*r)).collect();
        a.push(KeyValue::new("spendgate.estimated_reasons", Value::Array(Array::String(reasons))));
    }
    if let Some(status) = o.budget_status {
        a.push(KeyValue::new("spendgate.budget_status", status.to_owned()));
    }
    if let Some(code) = o.denial_code {
        a.push(KeyValue::new("spendgate.denial_code", code.to_owned()));
    }
    if let Some(entity) = &t.tightest {
        a.push(KeyValue::new("spendgate.budget.entity", entity.clone()));
    }
    if let Some(e) = &o.error_type {
        a.push(KeyValue::new("error.type", e.to_string()));
    }
    if let Some((request, response)) = o.content {
        a.push(KeyValue::new("spendgate.request.body", capped(request)));
        a.push(KeyValue::new("spendgate.response.body", capped(response)));
    }
    a
}

fn capped(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(MAX_CONTENT_BYTES)]).into_owned()
}

/// The call's span and its children (reservation, upstream call), ending at `end`;
/// empty when the caller's trace is not sampled.
pub fn call_spans(
    t: &CallTrace,
    o: &Outcome<'_>,
    end: Instant,
    scope: &InstrumentationScope,
) -> Vec<SpanData> {
    if !t.parent.sampled {
        return Vec::new();
    }
    let model = t.admitted.as_ref().map(|a| a.model.as_str());
    let call_id = new_span_id();
    let status = match &o.error_type {
        Some(e) => Status::error(e.to_string()),
        None => Status::Unset,
    };
    let mut spans = Vec::with_capacity(3);
    spans.push(span(
        t.parent.trace_id,
        call_id,
        t.parent.span_id.map(|id| (id, true)),
        SpanKind::Client,
        span_name(t.operation, model).into(),
        (t.clock.wall(t.started), t.clock.wall(end)),
        call_attributes(t, o),
        status,
        scope,
    ));
    if let Some((from, to)) = t.reservation {
        let mut attrs = vec![KeyValue::new("spendgate.operation", "reservation")];
        if let Some(status) = o.budget_status {
            attrs.push(KeyValue::new("spendgate.budget_status", status.to_owned()));
        }
        if let Some(code) = o.denial_code {
            attrs.push(KeyValue::new("spendgate.denial_code", code.to_owned()));
        }
        let failed = o.denial_code.map(|c| Status::error(c.to_owned())).unwrap_or(Status::Unset);
        spans.push(span(
            t.parent.trace_id,
            new_span_id(),
            Some((call_id, false)),
            SpanKind::Internal,
            "spendgate.reservation".into(),
            (t.clock.wall(from), t.clock.wall(to)),
            attrs,
            failed,
            scope,
        ));
    }
    if let Some(from) = t.upstream_started {
        let mut attrs = vec![
            KeyValue::new("spendgate.operation", "upstream"),
            KeyValue::new("gen_ai.provider.name", t.provider),
        ];
        if let Some(ad) = &t.admitted {
            attrs.push(KeyValue::new("spendgate.upstream", ad.upstream.clone()));
        }
        spans.push(span(
            t.parent.trace_id,
            new_span_id(),
            Some((call_id, false)),
            SpanKind::Client,
            format!("upstream {}", t.provider).into(),
            (t.clock.wall(from), t.clock.wall(end.max(from))),
            attrs,
            Status::Unset,
            scope,
        ));
    }
    spans
}

/// One span of another governed operation (MCP, gate, actions), from its request's
/// start to its answer.
pub fn operation_span(
    parent: Parent,
    name: &'static str,
    times: (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    error: Option<String>,
    scope: &InstrumentationScope,
) -> Option<SpanData> {
    parent.sampled.then(|| {
        span(
            parent.trace_id,
            new_span_id(),
            parent.span_id.map(|id| (id, true)),
            SpanKind::Server,
            name.into(),
            times,
            attributes,
            error.map(Status::error).unwrap_or(Status::Unset),
            scope,
        )
    })
}

#[expect(clippy::too_many_arguments, reason = "the fields of one span, each named at the call")]
fn span(
    trace_id: TraceId,
    span_id: SpanId,
    // The parent span, and whether it is the caller's (remote).
    parent: Option<(SpanId, bool)>,
    kind: SpanKind,
    name: Cow<'static, str>,
    (start, end): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    status: Status,
    scope: &InstrumentationScope,
) -> SpanData {
    SpanData {
        span_context: SpanContext::new(trace_id, span_id, TraceFlags::SAMPLED, false, TraceState::NONE),
        parent_span_id: parent.map_or(SpanId::INVALID, |(id, _)| id),
        parent_span_is_remote: parent.is_some_and(|(_, remote)| remote),
        span_kind: kind,
        name,
        start_time: start,
        end_time: end,
        attributes,
        dropped_attributes_count: 0,
        events: Default::default(),
        links: Default::default(),
        status,
        instrumentation_scope: scope.clone(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::time::Duration;

    use super::*;

    const TID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

    #[test]
    fn parents_follow_the_callers_traceparent() {
        let p = Parent::of(TID, Some(&format!("00-{TID}-00f067aa0ba902b7-01"))).unwrap();
        assert_eq!(p.trace_id, TraceId::from_hex(TID).unwrap());
        assert_eq!(p.span_id, Some(SpanId::from_hex("00f067aa0ba902b7").unwrap()));
        assert!(p.sampled);
        let unsampled = Parent::of(TID, Some(&format!("00-{TID}-00f067aa0ba902b7-00"))).unwrap();
        assert!(!unsampled.sampled);
        // No traceparent: the resolved trace id, no parent span.
        let own = Parent::of(TID, None).unwrap();
        assert_eq!((own.span_id, own.sampled), (None, true));
        assert!(Parent::of("nope", None).is_none());
        assert!(Parent::of(&"0".repeat(32), None).is_none());
        let fresh = Parent::from_traceparent(Some("00-abc"));
        assert_eq!(fresh.span_id, None);
        assert_ne!(fresh.trace_id, TraceId::INVALID);
    }

    fn traced() -> CallTrace {
        let start = Instant::now();
        let mut t = CallTrace::new(Parent::of(TID, None).unwrap(), start, "chat", "openai");
        t.admitted = Some(Admitted {
            model: "gpt-4o-mini".into(),
            upstream: "openai".into(),
            max_tokens: Some(100),
            stream: true,
            api_key_id: "key1".into(),
            session: Some("s1".into()),
            customer: None,
            request_id: "r1".into(),
        });
        t.reservation = Some((start, start + Duration::from_millis(1)));
        t.upstream_started = Some(start + Duration::from_millis(2));
        t.tightest = Some("api_key:key1".into());
        t
    }

    fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
        attrs.iter().find(|kv| kv.key.as_str() == key).map(|kv| &kv.value)
    }

    #[test]
    fn a_completed_call_maps_to_genai_attributes() {
        let t = traced();
        let o = Outcome {
            response_id: Some("chatcmpl-1"),
            response_model: Some("gpt-4o-mini-2024-07-18"),
            finish_reason: Some("stop"),
            input_tokens: Some(10),
            output_tokens: Some(20),
            cost_microdollars: Some(435),
            budget_status: Some("approved"),
            ..Outcome::default()
        };
        let a = call_attributes(&t, &o);
        assert_eq!(attr(&a, "gen_ai.operation.name"), Some(&Value::from("chat")));
        assert_eq!(attr(&a, "gen_ai.request.model"), Some(&Value::from("gpt-4o-mini")));
        assert_eq!(attr(&a, "gen_ai.response.model"), Some(&Value::from("gpt-4o-mini-2024-07-18")));
        let reasons = Value::Array(Array::String(vec![StringValue::from("stop")]));
        assert_eq!(attr(&a, "gen_ai.response.finish_reasons"), Some(&reasons));
        assert_eq!(attr(&a, "gen_ai.request.max_tokens"), Some(&Value::I64(100)));
        assert_eq!(attr(&a, "gen_ai.usage.output_tokens"), Some(&Value::I64(20)));
        assert_eq!(attr(&a, "spendgate.cost_microdollars"), Some(&Value::I64(435)));
        assert_eq!(attr(&a, "spendgate.cost_estimated"), Some(&Value::Bool(false)));
        assert_eq!(attr(&a, "spendgate.budget.entity"), Some(&Value::from("api_key:key1")));
        assert_eq!(attr(&a, "spendgate.session.id"), Some(&Value::from("s1")));
        assert!(attr(&a, "error.type").is_none());
        assert!(attr(&a, "spendgate.request.body").is_none(), "no content unless captured");
    }

    #[test]
    fn a_call_has_a_tree_of_three_spans_in_its_times() {
        let t = traced();
        let scope = InstrumentationScope::builder("spendgate").build();
        let end = t.started + Duration::from_millis(5);
        let spans = call_spans(&t, &Outcome::default(), end, &scope);
        let names: Vec<_> = spans.iter().map(|s| s.name.as_ref()).collect();
        assert_eq!(names, ["chat gpt-4o-mini", "spendgate.reservation", "upstream openai"]);
        let call = &spans[0];
        assert_eq!(call.span_kind, SpanKind::Client);
        assert_eq!(call.parent_span_id, SpanId::INVALID);
        assert!(!call.parent_span_is_remote);
        assert_eq!(call.end_time.duration_since(call.start_time).unwrap(), Duration::from_millis(5));
        for child in &spans[1..] {
            assert_eq!(child.parent_span_id, call.span_context.span_id());
            assert_eq!(child.span_context.trace_id(), call.span_context.trace_id());
            assert!(child.start_time >= call.start_time && child.end_time <= call.end_time);
        }
    }

    #[test]
    fn the_callers_span_is_a_remote_parent() {
        let mut t = traced();
        t.parent = Parent::of(TID, Some(&format!("00-{TID}-00f067aa0ba902b7-01"))).unwrap();
        let scope = InstrumentationScope::builder("spendgate").build();
        let spans = call_spans(&t, &Outcome::default(), t.started, &scope);
        assert_eq!(spans[0].parent_span_id, SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(spans[0].parent_span_is_remote);
        assert!(spans[1..].iter().all(|s| !s.parent_span_is_remote));
    }

    #[test]
    fn an_unsampled_caller_gets_no_spans() {
        let mut t = traced();
        t.parent = Parent::of(TID, Some(&format!("00-{TID}-00f067aa0ba902b7-00"))).unwrap();
        let scope = InstrumentationScope::builder("spendgate").build();
        assert!(call_spans(&t, &Outcome::default(), Instant::now(), &scope).is_empty());
    }

    #[test]
    fn span_names_and_content() {
        assert_eq!(span_name("chat", Some("gpt-4o")), "chat gpt-4o");
        assert_eq!(span_name("embeddings", None), "embeddings");
        let t = traced();
        let body = vec![b'x'; MAX_CONTENT_BYTES + 10];
        let o = Outcome { content: Some((&body, b"ok")), ..Outcome::default() };
        let a = call_attributes(&t, &o);
        match attr(&a, "spendgate.request.body") {
            Some(Value::String(s)) => assert_eq!(s.as_str().len(), MAX_CONTENT_BYTES),
            other => panic!("{other:?}"),
        }
    }
}
