//! `PROXY_BENCH_OTEL=1`: spendgate exports its spans and metrics over OTLP to a sink
//! in this process that accepts every request and discards it, so that a run with
//! export on can be set beside one with it off. The run's summary then carries the
//! span counters (`otel`): exported, and dropped by reason.

use std::sync::OnceLock;

use actix_web::{web, HttpResponse};
use serde_json::{json, Value};

/// Whether this run exports.
pub fn on() -> bool {
    std::env::var("PROXY_BENCH_OTEL").is_ok_and(|v| v == "1")
}

/// The sink's base URL, started on first use (it lives as long as the process).
pub fn endpoint() -> Option<String> {
    static SINK: OnceLock<String> = OnceLock::new();
    on().then(|| {
        SINK.get_or_init(|| {
            let sink = super::serve("otel-sink", 1, |cfg| {
                cfg.default_service(web::to(|| async {
                    HttpResponse::Ok().content_type("application/x-protobuf").finish()
                }));
            });
            let base = sink.base.clone();
            // Stopped with the process, not before the server that exports to it.
            std::mem::forget(sink);
            base
        })
        .clone()
    })
}

/// The span counters from the proxy's Prometheus endpoint.
pub async fn counters(http: &reqwest::Client, proxy: &str) -> Value {
    let text = match http.get(format!("{proxy}/health/metrics")).header("accept", "text/plain").send().await {
        Ok(r) => r.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    };
    let value = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse::<f64>().ok())
    };
    json!({
        "exported": value("spendgate_otel_exported_spans_total"),
        "dropped_queue_full": value("spendgate_otel_dropped_spans_total{reason=\"queue_full\"}"),
        "dropped_export_failed": value("spendgate_otel_dropped_spans_total{reason=\"export_failed\"}"),
    })
}
