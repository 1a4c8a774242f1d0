//! A local OTLP/HTTP receiver: accepts `POST /v1/traces` and `POST /v1/metrics` in
//! protobuf, decodes them with the maintained `opentelemetry-proto` messages, and keeps
//! what arrived. Also a collector that accepts connections and never answers.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use serde_json::{json, Value};

/// One span as received, ids in lower-case hex.
#[derive(Debug, Clone)]
pub struct Span {
    pub trace_id: String,
    pub span_id: String,
    pub parent_span_id: String,
    pub name: String,
    /// The protobuf enum's value: 1 internal, 2 server, 3 client.
    pub kind: i32,
    /// 0 unset, 1 ok, 2 error.
    pub status: i32,
    pub attributes: BTreeMap<String, Value>,
    pub resource: BTreeMap<String, Value>,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl Span {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

/// The attributes of one metric data point.
pub type Point = BTreeMap<String, Value>;

#[derive(Default)]
struct Shared {
    spans: Mutex<Vec<Span>>,
    /// Metric names, with the attributes of each data point.
    metrics: Mutex<Vec<(String, Vec<Point>)>>,
}

/// A running receiver; stops when dropped.
pub struct Collector {
    /// `http://127.0.0.1:PORT`, the OTLP base URL.
    pub base: String,
    shared: Arc<Shared>,
    handle: ServerHandle,
}

fn value(v: Option<&Any>) -> Value {
    match v {
        Some(Any::StringValue(s)) => json!(s),
        Some(Any::BoolValue(b)) => json!(b),
        Some(Any::IntValue(i)) => json!(i),
        Some(Any::DoubleValue(d)) => json!(d),
        Some(Any::ArrayValue(a)) => Value::Array(a.values.iter().map(|v| value(v.value.as_ref())).collect()),
        _ => Value::Null,
    }
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, Value> {
    kvs.iter().map(|kv| (kv.key.clone(), value(kv.value.as_ref().and_then(|v| v.value.as_ref())))).collect()
}

async fn traces(body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return HttpResponse::BadRequest().finish();
    };
    let mut spans = Vec::new();
    for rs in request.resource_spans {
        let resource = rs.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
        for ss in rs.scope_spans {
            for s in ss.spans {
                spans.push(Span {
                    trace_id: hex::encode(&s.trace_id),
                    span_id: hex::encode(&s.span_id),
                    parent_span_id: hex::encode(&s.parent_span_id),
                    name: s.name,
                    kind: s.kind,
                    status: s.status.map_or(0, |st| st.code),
                    attributes: attributes(&s.attributes),
                    resource: resource.clone(),
                    start_ns: s.start_time_unix_nano,
                    end_ns: s.end_time_unix_nano,
                });
            }
        }
    }
    shared.spans.lock().unwrap_or_else(PoisonError::into_inner).extend(spans);
    HttpResponse::Ok().content_type("application/x-protobuf").finish()
}

async fn metrics(body: web::Bytes, shared: web::Data<Shared>) -> HttpResponse {
    use opentelemetry_proto::tonic::metrics::v1::metric::Data;
    let Ok(request) = ExportMetricsServiceRequest::decode(body) else {
        return HttpResponse::BadRequest().finish();
    };
    let mut got = Vec::new();
    for rm in request.resource_metrics {
        for sm in rm.scope_metrics {
            for m in sm.metrics {
                let points = match &m.data {
                    Some(Data::Histogram(h)) => {
                        h.data_points.iter().map(|p| attributes(&p.attributes)).collect()
                    }
                    Some(Data::Sum(s)) => s.data_points.iter().map(|p| attributes(&p.attributes)).collect(),
                    Some(Data::Gauge(g)) => g.data_points.iter().map(|p| attributes(&p.attributes)).collect(),
                    _ => Vec::new(),
                };
                got.push((m.name, points));
            }
        }
    }
    shared.metrics.lock().unwrap_or_else(PoisonError::into_inner).extend(got);
    HttpResponse::Ok().content_type("application/x-protobuf").finish()
}

async fn other(_req: HttpRequest) -> HttpResponse {
    HttpResponse::NotFound().finish()
}

impl Collector {
    pub fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind collector");
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared::default());
        let data = web::Data::from(Arc::clone(&shared));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || {
                    App::new()
                        .app_data(data.clone())
                        .app_data(web::PayloadConfig::new(16 * 1024 * 1024))
                        .route("/v1/traces", web::post().to(traces))
                        .route("/v1/metrics", web::post().to(metrics))
                        .default_service(web::to(other))
                })
                .workers(1)
                .disable_signals()
                .shutdown_timeout(0)
                .listen(listener)
                .expect("collector listen")
                .run();
                let _ = tx.send(server.handle());
                let _ = server.await;
            });
        });
        let handle = rx.recv().expect("collector started");
        Collector { base: format!("http://127.0.0.1:{port}"), shared, handle }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.shared.spans.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The data points' attributes of every metric of that name received so far.
    pub fn metric_points(&self, name: &str) -> Vec<Point> {
        let metrics = self.shared.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        metrics.iter().filter(|(n, _)| n == name).flat_map(|(_, points)| points.clone()).collect()
    }

    /// Waits (up to 30 s, then panics) until the spans of `trace_id` number `n`.
    pub async fn wait_for_trace(&self, trace_id: &str, n: usize) -> Vec<Span> {
        for _ in 0..300 {
            let spans: Vec<Span> = self.spans().into_iter().filter(|s| s.trace_id == trace_id).collect();
            if spans.len() >= n {
                return spans;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("collector: gave up waiting for {n} spans of trace {trace_id}; have {:?}", self.spans());
    }

    /// Waits until a metric of each name arrived.
    pub async fn wait_for_metrics(&self, names: &[&str]) {
        for _ in 0..300 {
            if names.iter().all(|n| !self.metric_points(n).is_empty()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let metrics = self.shared.metrics.lock().unwrap_or_else(PoisonError::into_inner);
        let got: Vec<&String> = metrics.iter().map(|(n, _)| n).collect();
        panic!("collector: gave up waiting for metrics {names:?}; have {got:?}");
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

/// A collector that accepts connections, reads nothing and never answers, for as
/// long as the test lasts (its thread ends with the test process).
pub fn hanging() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind hanging collector");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().take(10_000).flatten() {
            held.push(stream);
        }
    });
    format!("http://127.0.0.1:{port}")
}
