//! Operational metrics, kept in one Prometheus registry and exported at
//! `/health/metrics` as Prometheus text or as JSON.

use prometheus::{Encoder, IntCounterVec, IntGauge, Opts, Registry, TextEncoder};

#[derive(Clone)]
pub struct Metrics {
    pub registry: Registry,
    /// HTTP responses by surface and status class.
    pub http_responses: IntCounterVec,
    /// Proxied requests whose model had no price (charged at the fallback estimate).
    pub unknown_model_requests: IntCounterVec,
    pub live_actors: IntGauge,
    pub actor_restarts: IntCounterVec,
}

impl Metrics {
    #[expect(clippy::expect_used, reason = "metric names and labels are constants; an invalid one is a bug")]
    pub fn new() -> Self {
        let registry =
            Registry::new_custom(Some("spendgate".to_owned()), None).expect("valid registry prefix");
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels).expect("valid counter");
            registry.register(Box::new(c.clone())).expect("unique counter");
            c
        };
        let http_responses = counter("http_responses_total", "HTTP responses", &["surface", "status"]);
        let unknown_model_requests = counter(
            "unknown_model_requests_total",
            "Requests for models missing from the pricing table",
            &["provider"],
        );
        let actor_restarts =
            counter("actor_restarts_total", "Budget actors restarted after a failure", &["kind"]);
        let live_actors =
            IntGauge::new("live_budget_actors", "Budget actors currently running").expect("valid gauge");
        registry.register(Box::new(live_actors.clone())).expect("unique gauge");
        Metrics { registry, http_responses, unknown_model_requests, live_actors, actor_restarts }
    }

    /// Prometheus text exposition format.
    pub fn render_text(&self) -> String {
        let mut buf = Vec::new();
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buf);
        String::from_utf8(buf).unwrap_or_default()
    }

    /// The same samples as JSON: `{ name: value }` for plain series and
    /// `{ name: [{ labels, value }] }` for labelled ones.
    pub fn render_json(&self) -> serde_json::Value {
        let mut out = serde_json::Map::new();
        for family in self.registry.gather() {
            let samples: Vec<serde_json::Value> = family
                .get_metric()
                .iter()
                .map(|m| {
                    let labels: serde_json::Map<String, serde_json::Value> = m
                        .get_label()
                        .iter()
                        .map(|l| (l.name().to_owned(), serde_json::Value::from(l.value())))
                        .collect();
                    let value = match family.get_field_type() {
                        prometheus::proto::MetricType::COUNTER => m.get_counter().get_value(),
                        _ => m.get_gauge().get_value(),
                    };
                    serde_json::json!({ "labels": labels, "value": value })
                })
                .collect();
            out.insert(family.name().to_owned(), serde_json::Value::Array(samples));
        }
        serde_json::Value::Object(out)
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}
