//! The exported metrics: the GenAI client metrics of the semantic conventions
//! (`gen_ai.client.token.usage`, `gen_ai.client.operation.duration`) and spendgate's
//! spend counters by provider, model and budget decision. They go out over OTLP beside
//! the Prometheus endpoint, which stays as it is.

use std::time::Duration;

use opentelemetry::metrics::{Counter, Histogram, Meter};
use opentelemetry::KeyValue;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;

/// Bucket boundaries the conventions advise for token counts.
const TOKEN_BUCKETS: [f64; 14] = [
    1.0,
    4.0,
    16.0,
    64.0,
    256.0,
    1024.0,
    4096.0,
    16384.0,
    65536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
];
/// Bucket boundaries the conventions advise for operation durations, in seconds.
const DURATION_BUCKETS: [f64; 14] =
    [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];

pub struct Instruments {
    token_usage: Histogram<u64>,
    duration: Histogram<f64>,
    spend: Counter<u64>,
    calls: Counter<u64>,
}

/// One call's figures.
pub struct CallFigures<'a> {
    pub operation: &'static str,
    pub provider: &'static str,
    /// Empty before the model is known.
    pub model: &'a str,
    pub budget_status: &'a str,
    pub error_type: Option<&'a str>,
    pub duration: Duration,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cost_microdollars: i64,
}

impl Instruments {
    pub fn new(meter: &Meter) -> Instruments {
        Instruments {
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Tokens used by a proxied call, by gen_ai.token.type (input, output)")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            duration: meter
                .f64_histogram("gen_ai.client.operation.duration")
                .with_unit("s")
                .with_description("Duration of a proxied call, from its request to the end of its answer")
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build(),
            spend: meter
                .u64_counter("spendgate.spend")
                .with_unit("{microdollar}")
                .with_description("Cost charged for proxied calls, in microdollars")
                .build(),
            calls: meter
                .u64_counter("spendgate.calls")
                .with_unit("{call}")
                .with_description("Proxied calls, by provider, model and budget decision")
                .build(),
        }
    }

    pub fn record(&self, f: &CallFigures<'_>) {
        let mut attrs = attributes(f);
        self.calls.add(1, &attrs);
        if let Ok(cost) = u64::try_from(f.cost_microdollars) {
            if cost > 0 {
                self.spend.add(cost, &attrs);
            }
        }
        // The conventions' metrics carry no spendgate attribute but the error type.
        attrs.retain(|kv| kv.key.as_str().starts_with("gen_ai."));
        if let Some(e) = f.error_type {
            attrs.push(KeyValue::new("error.type", e.to_owned()));
        }
        self.duration.record(f.duration.as_secs_f64(), &attrs);
        for (kind, n) in [("input", f.input_tokens), ("output", f.output_tokens)] {
            if let Some(n) = n.and_then(|n| u64::try_from(n).ok()) {
                let mut with_type = attrs.clone();
                with_type.push(KeyValue::new("gen_ai.token.type", kind));
                self.token_usage.record(n, &with_type);
            }
        }
    }
}

/// The OTLP metric exporter, with each export's outcome counted in
/// `spendgate_otel_metric_exports_total{outcome}` (`ok`, `failed`): a collector that
/// is down shows there too, not only in the spans dropped.
#[derive(Debug)]
pub struct Counted<E> {
    pub inner: E,
    pub exports: prometheus::IntCounterVec,
}

impl<E: PushMetricExporter> PushMetricExporter for Counted<E> {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let result = self.inner.export(metrics).await;
        let outcome = if result.is_ok() { "ok" } else { "failed" };
        self.exports.with_label_values(&[outcome]).inc();
        result
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// Attributes of the spend counters: provider, model, budget decision.
fn attributes(f: &CallFigures<'_>) -> Vec<KeyValue> {
    let mut attrs = vec![
        KeyValue::new("gen_ai.operation.name", f.operation),
        KeyValue::new("gen_ai.provider.name", f.provider),
    ];
    if !f.model.is_empty() {
        attrs.push(KeyValue::new("gen_ai.request.model", f.model.to_owned()));
    }
    attrs.push(KeyValue::new("spendgate.budget_status", f.budget_status.to_owned()));
    attrs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spend_attributes_name_provider_model_and_decision() {
        let f = CallFigures {
            operation: "chat",
            provider: "openai",
            model: "gpt-4o",
            budget_status: "denied",
            error_type: Some("budget_exceeded"),
            duration: Duration::from_millis(3),
            input_tokens: None,
            output_tokens: None,
            cost_microdollars: 0,
        };
        let keys: Vec<String> = attributes(&f).iter().map(|kv| kv.key.to_string()).collect();
        assert_eq!(
            keys,
            [
                "gen_ai.operation.name",
                "gen_ai.provider.name",
                "gen_ai.request.model",
                "spendgate.budget_status"
            ]
        );
        let unknown = CallFigures { model: "", ..f };
        assert_eq!(attributes(&unknown).len(), 3, "no model attribute before the model is known");
    }
}
