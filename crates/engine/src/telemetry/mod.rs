//! OpenTelemetry export: every governed call as a span (the GenAI semantic conventions
//! for proxied calls), and the GenAI client metrics with spend counters, sent over
//! OTLP HTTP/protobuf to a collector. Off unless an endpoint is configured
//! (`otel_endpoint`, else `OTEL_EXPORTER_OTLP_ENDPOINT`); then `AppState::telemetry`
//! is `Some` and the proxy collects a little timing per call.
//!
//! Exporting never slows or fails a call: spans are built at the call's end and handed
//! to a bounded queue whose own thread exports them (`export`), and metrics are read
//! and sent by the SDK's periodic reader on its thread. Both use the exporter's
//! blocking HTTP client on those threads, never on an HTTP worker.

pub mod export;
pub mod governed;
pub mod metrics;
pub mod spans;

use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::{InstrumentationScope, Key, KeyValue};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SpanData, SpanExporter as _};
use opentelemetry_sdk::Resource;

use crate::config::OtelSettings;
pub use export::SpanCounters;
pub use spans::{CallTrace, Outcome, Parent};

/// The running export: span queue, metric instruments and their provider.
pub struct Telemetry {
    spans: export::SpanQueue,
    instruments: metrics::Instruments,
    meters: SdkMeterProvider,
    scope: InstrumentationScope,
    /// Prompt and completion bodies go on the spans (`otel_capture_content`).
    pub capture_content: bool,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").field("capture_content", &self.capture_content).finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Starts the export when an endpoint is configured; `None` otherwise.
    /// `metric_exports` counts the metric exports by outcome.
    pub fn start(
        settings: &OtelSettings,
        counters: SpanCounters,
        metric_exports: prometheus::IntCounterVec,
    ) -> Result<Option<Arc<Telemetry>>, String> {
        let Some(endpoint) = &settings.endpoint else {
            return Ok(None);
        };
        let resource = resource();
        let mut span_exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_endpoint(format!("{endpoint}/v1/traces"))
            .build()
            .map_err(|e| format!("OpenTelemetry span exporter: {e}"))?;
        span_exporter.set_resource(&resource);
        let bounds = export::Bounds {
            queue_size: settings.queue_size,
            batch_size: settings.batch_size,
            batch_delay: settings.batch_delay,
        };
        let spans = export::SpanQueue::start(span_exporter, bounds, counters)
            .map_err(|e| format!("OpenTelemetry span export thread: {e}"))?;
        let metric_exporter = opentelemetry_otlp::MetricExporter::builder()
            .with_http()
            .with_endpoint(format!("{endpoint}/v1/metrics"))
            .build()
            .map_err(|e| format!("OpenTelemetry metric exporter: {e}"))?;
        let meters = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(
                PeriodicReader::builder(metrics::Counted { inner: metric_exporter, exports: metric_exports })
                    .build(),
            )
            .build();
        let scope =
            InstrumentationScope::builder("spendgate").with_version(env!("CARGO_PKG_VERSION")).build();
        let instruments = metrics::Instruments::new(&meters.meter_with_scope(scope.clone()));
        tracing::info!(endpoint = %endpoint, capture_content = settings.capture_content, "OpenTelemetry export on");
        Ok(Some(Arc::new(Telemetry {
            spans,
            instruments,
            meters,
            scope,
            capture_content: settings.capture_content,
        })))
    }

    /// Exports a proxied call: its span tree and its metrics.
    pub fn record_call(&self, t: &CallTrace, o: &Outcome<'_>, end: Instant) {
        for span in spans::call_spans(t, o, end, &self.scope) {
            self.spans.push(span);
        }
        self.instruments.record(&metrics::CallFigures {
            operation: t.operation,
            provider: t.provider,
            model: t.admitted.as_ref().map_or("", |a| a.model.as_str()),
            budget_status: o.budget_status.unwrap_or("none"),
            error_type: o.error_type.as_deref(),
            duration: end.saturating_duration_since(t.started),
            input_tokens: o.input_tokens,
            output_tokens: o.output_tokens,
            cost_microdollars: o.cost_microdollars.unwrap_or(0),
        });
    }

    fn push(&self, span: SpanData) {
        self.spans.push(span);
    }

    fn scope(&self) -> &InstrumentationScope {
        &self.scope
    }

    /// Sends what is queued and the last metrics, waiting at most a few seconds (a
    /// collector that is down must not hold the process's exit).
    pub fn shutdown(&self) {
        const WAIT: Duration = Duration::from_secs(5);
        self.spans.flush(WAIT);
        let meters = self.meters.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("otel-shutdown".to_owned()).spawn(move || {
            let _ = meters.shutdown();
            let _ = tx.send(());
        });
        if spawned.is_ok() {
            let _ = rx.recv_timeout(WAIT);
        }
    }
}

/// The resource: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` as the SDK reads
/// them, with `service.name` `spendgate` when neither names the service.
fn resource() -> Resource {
    let detected = Resource::builder().build();
    let named = detected
        .get(&Key::from_static_str("service.name"))
        .is_some_and(|v| !v.as_str().starts_with("unknown_service"));
    let builder =
        if named { Resource::builder() } else { Resource::builder().with_service_name("spendgate") };
    let versioned = detected.get(&Key::from_static_str("service.version")).is_some();
    if versioned {
        builder.build()
    } else {
        builder.with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION"))).build()
    }
}
