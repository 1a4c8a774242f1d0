//! OpenTelemetry export over real OTLP/HTTP: the span tree of a proxied call under the
//! caller's `traceparent` (streamed, and denied by a budget), the span of an MCP
//! budget check, the GenAI metrics, and a collector that is down or hangs.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::proxy::{openai, setup_with, usage, Setup, MINI_COST, MINI_USAGE};
use crate::support::otlp::{self, Collector, Span};
use crate::support::read;

const PARENT_SPAN: &str = "00f067aa0ba902b7";
const CLIENT: i32 = 3;
const ERROR: i32 = 2;

fn traceparent(trace_id: &str) -> String {
    format!("00-{trace_id}-{PARENT_SPAN}-01")
}

fn trace_id() -> String {
    uuid::Uuid::new_v4().simple().to_string()
}

/// A server exporting to `endpoint`, with short batch and metric intervals.
async fn exporting_to(endpoint: &str, extra: &[(&'static str, String)]) -> Setup {
    let mut env = vec![
        ("SPENDGATE_OTEL_ENDPOINT", endpoint.to_owned()),
        ("OTEL_SERVICE_NAME", "gateway-under-test".to_owned()),
        ("OTEL_BSP_SCHEDULE_DELAY", "50".to_owned()),
        ("OTEL_METRIC_EXPORT_INTERVAL", "300".to_owned()),
    ];
    env.extend(extra.iter().cloned());
    setup_with(&env).await
}

fn named<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    spans.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no span {name}: {spans:#?}"))
}

#[tokio::test]
async fn a_streamed_call_is_a_genai_span_tree_under_the_callers_span() {
    let collector = Collector::start();
    let s = exporting_to(&collector.base, &[]).await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000_000 }))
        .await;
    let tid = trace_id();
    let body = openai(json!({ "stream": true, "mock": { "usage": usage(MINI_USAGE) } }));
    let r = s
        .send(
            "/v1/chat/completions",
            &body,
            &[("traceparent", &traceparent(&tid)), ("x-service-session", "run-7")],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text.contains("[DONE]"));
    assert_eq!(r.header("x-service-trace-id"), Some(tid.as_str()));

    let spans = collector.wait_for_trace(&tid, 3).await;
    let call = named(&spans, "chat gpt-4o-mini");
    assert_eq!(call.kind, CLIENT);
    assert_eq!(call.parent_span_id, PARENT_SPAN, "a child of the caller's span");
    assert_eq!(call.resource["service.name"], "gateway-under-test");
    let expect = [
        ("gen_ai.operation.name", json!("chat")),
        ("gen_ai.provider.name", json!("openai")),
        ("gen_ai.request.model", json!("gpt-4o-mini")),
        ("gen_ai.request.max_tokens", json!(100)),
        ("gen_ai.response.model", json!("gpt-4o-mini")),
        ("gen_ai.response.finish_reasons", json!(["stop"])),
        ("gen_ai.usage.input_tokens", json!(1000)),
        ("gen_ai.usage.output_tokens", json!(500)),
        ("spendgate.cost_microdollars", json!(MINI_COST)),
        ("spendgate.cost_estimated", json!(false)),
        ("spendgate.budget_status", json!("approved")),
        ("spendgate.stream", json!(true)),
        ("spendgate.session.id", json!("run-7")),
    ];
    for (key, value) in expect {
        assert_eq!(call.attr(key), &value, "{key}: {call:#?}");
    }
    assert!(call.attr("gen_ai.response.id").is_string(), "{call:#?}");
    assert!(s.key_id.ends_with(call.attr("spendgate.api_key.id").as_str().unwrap()), "{call:#?}");
    let entity = call.attr("spendgate.budget.entity").as_str().unwrap();
    assert!(entity.starts_with("api_key:") && s.key_id.ends_with(&entity["api_key:".len()..]), "{entity}");
    assert!(call.attr("error.type").is_null());
    assert!(call.attr("spendgate.request.body").is_null(), "no content unless the operator opts in");
    for child in ["spendgate.reservation", "upstream openai"] {
        let c = named(&spans, child);
        assert_eq!(c.parent_span_id, call.span_id, "{child}");
        assert!(c.start_ns >= call.start_ns && c.end_ns <= call.end_ns, "{child} within the call");
    }
    // The upstream call lasts until the stream's end, after the reservation.
    let (reservation, upstream) = (named(&spans, "spendgate.reservation"), named(&spans, "upstream openai"));
    assert!(upstream.start_ns >= reservation.end_ns);

    // The collector's answer counts as exported, and nothing was dropped.
    for _ in 0..50 {
        if sample(&s, "spendgate_otel_exported_spans_total").await >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(sample(&s, "spendgate_otel_exported_spans_total").await >= 3);
    assert_eq!(dropped(&s).await, (0, 0));
    for _ in 0..50 {
        if sample(&s, r#"spendgate_otel_metric_exports_total{outcome="ok"}"#).await > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(sample(&s, r#"spendgate_otel_metric_exports_total{outcome="ok"}"#).await > 0);
    assert_eq!(sample(&s, r#"spendgate_otel_metric_exports_total{outcome="failed"}"#).await, 0);

    collector
        .wait_for_metrics(&[
            "gen_ai.client.token.usage",
            "gen_ai.client.operation.duration",
            "spendgate.spend",
            "spendgate.calls",
        ])
        .await;
    let tokens = collector.metric_points("gen_ai.client.token.usage");
    let types: Vec<&Value> = tokens.iter().map(|p| &p["gen_ai.token.type"]).collect();
    assert!(types.contains(&&json!("input")) && types.contains(&&json!("output")), "{tokens:?}");
    let spend = collector.metric_points("spendgate.spend");
    assert!(spend
        .iter()
        .any(|p| p["gen_ai.request.model"] == "gpt-4o-mini" && p["spendgate.budget_status"] == "approved"));
}

#[tokio::test]
async fn a_denied_call_is_a_span_with_its_denial_and_no_upstream_child() {
    let collector = Collector::start();
    let s = exporting_to(&collector.base, &[]).await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1 })).await;
    let tid = trace_id();
    let r = s.send("/v1/chat/completions", &openai(json!({})), &[("traceparent", &traceparent(&tid))]).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");

    let spans = collector.wait_for_trace(&tid, 2).await;
    let call = named(&spans, "chat gpt-4o-mini");
    assert_eq!(call.parent_span_id, PARENT_SPAN);
    assert_eq!(call.status, ERROR);
    assert_eq!(call.attr("error.type"), "budget_exceeded");
    assert_eq!(call.attr("spendgate.budget_status"), "denied");
    assert_eq!(call.attr("spendgate.denial_code"), "budget_exceeded");
    assert_eq!(call.attr("spendgate.cost_microdollars"), 0);
    assert!(call.attr("spendgate.budget.entity").as_str().unwrap().starts_with("api_key:"), "{call:#?}");
    let reservation = named(&spans, "spendgate.reservation");
    assert_eq!(reservation.parent_span_id, call.span_id);
    assert_eq!(reservation.status, ERROR);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let all: Vec<Span> = collector.spans().into_iter().filter(|s| s.trace_id == tid).collect();
    assert!(all.iter().all(|s| !s.name.starts_with("upstream")), "nothing reached the provider: {all:#?}");
    assert_eq!(s.mock.count(), 0);
}

#[tokio::test]
async fn mcp_and_gate_decisions_are_spans_and_content_is_captured_only_when_asked() {
    let collector = Collector::start();
    let s = exporting_to(&collector.base, &[("SPENDGATE_OTEL_CAPTURE_CONTENT", "1".to_owned())]).await;
    s.budget(json!({ "entityType": "api_key", "entityId": s.key_id, "maxBudgetMicrodollars": 1_000 })).await;
    let tid = trace_id();
    let check = json!({ "estimateMicrodollars": 5_000, "toolName": "search" });
    let r = s.send("/v1/mcp/budget/check", &check, &[("traceparent", &traceparent(&tid))]).await;
    assert_eq!((r.status, r.body["allowed"].as_bool()), (200, Some(false)), "{r:?}");
    let spans = collector.wait_for_trace(&tid, 1).await;
    let span = named(&spans, "mcp.budget_check");
    assert_eq!(span.parent_span_id, PARENT_SPAN);
    assert_eq!(span.attr("spendgate.decision"), "denied");
    assert_eq!(span.attr("spendgate.denial_code"), "budget_exceeded");
    assert_eq!(span.attr("gen_ai.tool.name"), "search");
    assert_eq!(span.attr("spendgate.estimate_microdollars"), 5_000);

    // The gate's decision on its span (no binding: refused).
    let tid = trace_id();
    let gate = json!({ "customerId": "ghost", "estimatedCostMicrodollars": 10, "sendEvent": false });
    let r = s.send("/v1/gate", &gate, &[("traceparent", &traceparent(&tid))]).await;
    assert_eq!((r.status, r.body["reason"].as_str()), (200, Some("bind_not_found")), "{r:?}");
    let spans = collector.wait_for_trace(&tid, 1).await;
    let span = named(&spans, "gate");
    assert_eq!(span.parent_span_id, PARENT_SPAN);
    assert_eq!(span.attr("spendgate.decision"), "denied");
    assert_eq!(span.attr("spendgate.denial_code"), "bind_not_found");
    assert_eq!(span.attr("spendgate.customer.id"), "ghost");

    // With capture on, a call's span carries its prompt and completion.
    let tid = trace_id();
    let r = s
        .send(
            "/v1/chat/completions",
            &openai(json!({ "max_tokens": 5, "mock": { "usage": usage(r#"{"input":3,"output":2}"#) } })),
            &[("traceparent", &traceparent(&tid))],
        )
        .await;
    assert_eq!(r.status, 200, "{r:?}");
    let spans = collector.wait_for_trace(&tid, 3).await;
    let call = named(&spans, "chat gpt-4o-mini");
    assert!(call.attr("spendgate.request.body").as_str().unwrap().contains("\"messages\""), "{call:#?}");
    assert!(call.attr("spendgate.response.body").as_str().unwrap().contains("Hello from mock"), "{call:#?}");
}

#[tokio::test]
async fn action_decisions_are_spans_of_the_control_plane() {
    let collector = Collector::start();
    let s = exporting_to(&collector.base, &[]).await;
    let agent = crate::support::key_client(&s.app.server.control, &s.raw);
    let tid = trace_id();
    let tp = traceparent(&tid);
    let body = json!({ "agentId": "agent-1", "actionType": "send_email", "payload": { "to": "a@b.c" } });
    let r = read(
        agent
            .request(reqwest::Method::POST, "/api/actions")
            .header("traceparent", &tp)
            .json(&body)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 201, "{r:?}");
    let id = r.body["data"]["id"].as_str().unwrap().to_owned();
    let approve = format!("/api/actions/{id}/approve");
    for expected in [200, 409] {
        let r = read(
            s.owner.request(reqwest::Method::POST, &approve).header("traceparent", &tp).send().await.unwrap(),
        )
        .await;
        assert_eq!(r.status, expected, "{r:?}");
    }
    let spans = collector.wait_for_trace(&tid, 3).await;
    let create = named(&spans, "action.create");
    assert_eq!((create.kind, create.parent_span_id.as_str()), (2, PARENT_SPAN));
    assert_eq!(create.attr("http.response.status_code"), 201);
    let approvals: Vec<&Span> = spans.iter().filter(|s| s.name == "action.approve").collect();
    assert_eq!(approvals.len(), 2, "{spans:#?}");
    assert!(approvals.iter().all(|a| a.attr("spendgate.action.id") == id.as_str()));
    let refused = approvals.iter().find(|a| a.status == ERROR).expect("the second approval failed");
    assert_eq!(refused.attr("error.type"), "409");
}

/// A sample of the proxy's Prometheus endpoint (0 when absent).
async fn sample(s: &Setup, series: &str) -> u64 {
    let r = s.app.proxy().request(reqwest::Method::GET, "/health/metrics").header("Accept", "text/plain");
    let text = read(r.send().await.unwrap()).await.text;
    text.lines()
        .find(|l| l.strip_prefix(series).is_some_and(|rest| rest.starts_with(' ')))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The drop counters: (queue_full, export_failed).
async fn dropped(s: &Setup) -> (u64, u64) {
    (
        sample(s, r#"spendgate_otel_dropped_spans_total{reason="queue_full"}"#).await,
        sample(s, r#"spendgate_otel_dropped_spans_total{reason="export_failed"}"#).await,
    )
}

/// Calls through a server whose collector is unusable stay fast and correct, and every
/// span they made is counted as dropped.
async fn calls_unaffected_by(endpoint: String) {
    let s = exporting_to(
        &endpoint,
        &[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000".to_owned()),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "8".to_owned()),
            ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "4".to_owned()),
        ],
    )
    .await;
    const CALLS: u64 = 12;
    for i in 0..CALLS {
        let started = Instant::now();
        let body = openai(json!({ "stream": i % 2 == 0, "mock": { "usage": usage(MINI_USAGE) } }));
        let r = s.send("/v1/chat/completions", &body, &[]).await;
        assert_eq!(r.status, 200, "{r:?}");
        // An export that held a call would hold it for the exporter's 2 s timeout.
        assert!(started.elapsed() < Duration::from_secs(1), "call {i} took {:?}", started.elapsed());
    }
    let events = s.events(usize::try_from(CALLS).unwrap()).await;
    assert!(events.iter().all(|e| e["costMicrodollars"] == MINI_COST));
    // Three spans per call, every one dropped: for a full queue or a failed export.
    // A hanging collector holds each batch for the exporter's 2 s timeout.
    let mut last = (0, 0);
    for _ in 0..200 {
        last = dropped(&s).await;
        if last.0 + last.1 == 3 * CALLS {
            metric_exports_fail(&s).await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("dropped spans (queue_full, export_failed) = {last:?}, expected {} in all", 3 * CALLS);
}

/// Waits until the metric exports failed at least once.
async fn metric_exports_fail(s: &Setup) {
    for _ in 0..200 {
        if sample(s, r#"spendgate_otel_metric_exports_total{outcome="failed"}"#).await > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no failed metric export counted");
}

#[tokio::test]
async fn a_collector_that_is_down_never_slows_a_call_and_drops_are_counted() {
    calls_unaffected_by(crate::support::receiver::dead_url().trim_end_matches("/hook").to_owned()).await;
}

#[tokio::test]
async fn a_collector_that_hangs_never_slows_a_call_and_drops_are_counted() {
    calls_unaffected_by(otlp::hanging()).await;
}
