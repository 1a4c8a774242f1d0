#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a benchmark harness fails loudly"
)]
//! Proxy overhead: starts an in-process mock OpenAI upstream (answers instantly) and
//! the release `spendgate` binary on a fresh SQLite file, with budgets on the key, its
//! user and the tag `team=bench`, then drives `POST /v1/chat/completions` with the same
//! client code at the mock directly (A), through a plain nginx reverse proxy (N: the
//! floor of any extra hop on this machine, see [`nginx`]), through a bare forwarder
//! (F: actix-web and awc like spendgate, forwarding the body and streaming the answer
//! back, nothing else: what this stack pays for the hop), and through the proxy (B):
//!
//! - stalls: each target alone at concurrency 1, back to back for a few seconds (like
//!   `wrk -c1`), with p50, p99, p99.9, the maximum and every call over 10 ms (see
//!   [`stalls`]);
//! - latency at concurrency 1 (the targets taking turns in blocks), and the proxy's own
//!   `x-service-overhead-ms` and `Server-Timing` phases;
//! - time to first body byte of a streamed answer, concurrency 1;
//! - throughput at saturation from concurrent clients (last, so that the recording
//!   backlog it leaves does not disturb the other phases).
//!
//! The same run also drives `POST /v1/responses` (the Responses API, plain and streamed
//! as typed events) at the mock directly (AR) and through the proxy (R), so that the
//! Responses route's added latency and throughput stand beside the chat route's.
//!
//! Each figure is also given as what spendgate adds above the floor (B - N), against
//! the targets of issue #13 (p50 ≤ 35 µs, p99 ≤ 250 µs, throughput ≥ 0.8 × the
//! floor's). The load generator shares the 2 cores with the proxy and the mock, and the
//! 1-minute load average is printed (other builds may share the cores). Reported, not
//! asserted.
//!
//! Run: `cargo bench --bench proxy` (env `PROXY_BENCH_REQUESTS`, default 5000;
//! `PROXY_BENCH_SECONDS`, default 5; `PROXY_BENCH_CLIENTS`, default 32;
//! `PROXY_BENCH_LOG`, default `warn`; `PROXY_BENCH_FIXED_BODY=1`, see [`body`];
//! `PROXY_BENCH_STALL_SECONDS`, default 10, 0 skips the stalls phase).
//!
//! `PROXY_BENCH_OTEL=1`: spendgate exports traces and metrics over OTLP to a local sink
//! that discards them (see [`otel`]); run with and without it to measure the export.
//!
//! `PROXY_BENCH_MODE=soak cargo bench --bench proxy`: the soak run instead (see
//! [`soak`]; `PROXY_BENCH_SOAK_SECONDS`, default 300; `PROXY_BENCH_SOAK_CLIENTS`,
//! default `32,256`).

#[path = "proxy/cpu.rs"]
mod cpu;
#[path = "proxy/nginx.rs"]
mod nginx;
#[path = "proxy/otel.rs"]
mod otel;
#[path = "proxy/soak.rs"]
mod soak;
#[path = "proxy/stalls.rs"]
mod stalls;

use std::error::Error;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpResponse, HttpServer};
use hdrhistogram::Histogram;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE, ORIGIN};
use serde_json::{json, Value};

type BoxError = Box<dyn Error>;

/// The request body. By default each request says `hello <n>` with its own `n`: the
/// budgets' loop detection (on, at its defaults) blocks the 51st identical body within
/// a minute, as it should. `PROXY_BENCH_FIXED_BODY=1` sends the same `hello` every time
/// and creates the budgets with `loopMaxCalls: 0` (loop detection off) instead.
fn body(stream: bool) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let content = if fixed_body() {
        "hello".to_owned()
    } else {
        format!("hello {:010}", SEQ.fetch_add(1, Ordering::Relaxed))
    };
    let stream = if stream { r#","stream":true,"stream_options":{"include_usage":true}"# } else { "" };
    format!(
        r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"{content}"}}],"max_tokens":50{stream}}}"#
    )
}

/// A Responses request, distinct per request like [`body`].
fn responses_body(stream: bool) -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let content = if fixed_body() {
        "hello".to_owned()
    } else {
        format!("hello {:010}", SEQ.fetch_add(1, Ordering::Relaxed))
    };
    let stream = if stream { r#","stream":true"# } else { "" };
    format!(r#"{{"model":"gpt-4o-mini","input":"{content}","max_output_tokens":50{stream}}}"#)
}

fn fixed_body() -> bool {
    static FIXED: OnceLock<bool> = OnceLock::new();
    *FIXED.get_or_init(|| std::env::var("PROXY_BENCH_FIXED_BODY").is_ok_and(|v| v == "1"))
}

const WARMUP: usize = 500;
/// Requests per target before switching to the other one (latency phases).
const BLOCK: usize = 100;

// ---------------------------------------------------------------------------------
// Mock upstream

const COMPLETION: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}"#;
const CHUNKS: [&str; 3] = [
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hello\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\" there!\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-4o-mini\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
];
const USAGE_CHUNK: &str = "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"gpt-4o-mini\",\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":20,\"total_tokens\":30}}\n\n";
const DONE: &str = "data: [DONE]\n\n";

const RESPONSE: &str = r#"{"id":"resp_bench","object":"response","created_at":1700000000,"status":"completed","model":"gpt-4o-mini","output":[{"type":"message","id":"msg_bench","status":"completed","role":"assistant","content":[{"type":"output_text","text":"Hello there!","annotations":[]}]}],"usage":{"input_tokens":10,"input_tokens_details":{"cached_tokens":0},"output_tokens":20,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":30}}"#;
const RESPONSE_EVENTS: [&str; 4] = [
    "event: response.created\ndata: {\"type\":\"response.created\",\"sequence_number\":0,\"response\":{\"id\":\"resp_bench\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-4o-mini\",\"output\":[],\"usage\":null}}\n\n",
    "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":1,\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"delta\":\"Hello\"}\n\n",
    "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"sequence_number\":2,\"item_id\":\"msg_bench\",\"output_index\":0,\"content_index\":0,\"delta\":\" there!\"}\n\n",
    "event: response.completed\ndata: {\"type\":\"response.completed\",\"sequence_number\":3,\"response\":{\"id\":\"resp_bench\",\"object\":\"response\",\"status\":\"completed\",\"model\":\"gpt-4o-mini\",\"output\":[{\"type\":\"message\",\"id\":\"msg_bench\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Hello there!\"}]}],\"usage\":{\"input_tokens\":10,\"output_tokens\":20,\"total_tokens\":30}}}\n\n",
];

async fn mock_responses(body: web::Bytes) -> HttpResponse {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !req["stream"].as_bool().unwrap_or(false) {
        return HttpResponse::Ok()
            .content_type("application/json")
            .insert_header(("x-request-id", "req_bench"))
            .body(RESPONSE);
    }
    events(RESPONSE_EVENTS.to_vec())
}

async fn mock_chat(body: web::Bytes) -> HttpResponse {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if !req["stream"].as_bool().unwrap_or(false) {
        return HttpResponse::Ok()
            .content_type("application/json")
            .insert_header(("x-request-id", "req_bench"))
            .body(COMPLETION);
    }
    let mut parts: Vec<&'static str> = CHUNKS.to_vec();
    if req["stream_options"]["include_usage"].as_bool().unwrap_or(false) {
        parts.push(USAGE_CHUNK);
    }
    parts.push(DONE);
    events(parts)
}

/// An event-stream answer of `parts`, each in its own write.
fn events(parts: Vec<&'static str>) -> HttpResponse {
    // Yielding between chunks makes the body stream pending once, so actix flushes each
    // chunk in its own write instead of coalescing them; no timer is involved.
    let stream = futures_util::stream::unfold((parts.into_iter(), true), |(mut it, first)| async move {
        let part = it.next()?;
        if !first {
            tokio::task::yield_now().await;
        }
        Some((Ok::<_, std::convert::Infallible>(web::Bytes::from_static(part.as_bytes())), (it, false)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("cache-control", "no-cache"))
        .insert_header(("x-request-id", "req_bench"))
        .streaming(stream)
}

struct Mock {
    base: String,
    handle: actix_web::dev::ServerHandle,
}

impl Drop for Mock {
    fn drop(&mut self) {
        drop(self.handle.stop(false));
    }
}

fn start_mock() -> Mock {
    serve("mock-upstream", 1, |cfg| {
        cfg.route("/v1/chat/completions", web::post().to(mock_chat))
            .route("/v1/responses", web::post().to(mock_responses));
    })
}

/// Runs an HTTP server with `workers` workers on its own thread and actix system,
/// configured per worker by `configure`; returns its base URL and handle.
fn serve(
    name: &str,
    workers: usize,
    configure: impl Fn(&mut web::ServiceConfig) + Send + Clone + 'static,
) -> Mock {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("local address").port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            actix_web::rt::System::new().block_on(async move {
                let server = HttpServer::new(move || App::new().configure(configure.clone()))
                    .workers(workers)
                    // A provider does not hold small writes back (Nagle); nor may the mock.
                    .tcp_nodelay(true)
                    .disable_signals()
                    .shutdown_timeout(0)
                    .keep_alive(Duration::from_secs(120))
                    .listen(listener)
                    .expect("listen")
                    .run();
                let _ = tx.send(server.handle());
                let _ = server.await;
            });
        })
        .expect("spawn server thread");
    let handle = rx.recv().expect("server started");
    Mock { base: format!("http://127.0.0.1:{port}"), handle }
}

// ---------------------------------------------------------------------------------
// The bare forwarder (F)

async fn forward(
    body: web::Bytes,
    client: web::Data<awc::Client>,
    upstream: web::Data<String>,
) -> HttpResponse {
    let sent = client
        .post(upstream.get_ref())
        .insert_header((CONTENT_TYPE.as_str(), "application/json"))
        .insert_header(("authorization", "Bearer sk-bench"))
        .send_body(body)
        .await;
    match sent {
        Ok(response) => {
            let mut builder = HttpResponse::build(response.status());
            for (name, value) in response.headers() {
                if !matches!(name.as_str(), "content-length" | "transfer-encoding" | "connection" | "date") {
                    builder.append_header((name.clone(), value.clone()));
                }
            }
            builder.streaming(response)
        }
        Err(e) => HttpResponse::BadGateway().body(e.to_string()),
    }
}

/// Starts the bare forwarder on its own thread with two workers (as spendgate has on
/// two cores); returns its base URL.
fn start_forwarder(upstream: &str) -> Mock {
    let upstream = format!("{upstream}/v1/chat/completions");
    serve("bare-forwarder", 2, move |cfg| {
        cfg.app_data(web::Data::new(awc::Client::default()))
            .app_data(web::Data::new(upstream.clone()))
            .route("/v1/chat/completions", web::post().to(forward));
    })
}

// ---------------------------------------------------------------------------------
// The spendgate binary

struct Server {
    child: std::process::Child,
    control: String,
    proxy: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(db_url: &str, upstream: &str) -> Server {
    let mut command = Command::new(env!("CARGO_BIN_EXE_spendgate"));
    if let Some(endpoint) = otel::endpoint() {
        command.env("SPENDGATE_OTEL_ENDPOINT", endpoint);
    }
    let mut child = command
        .arg("serve")
        .env("SPENDGATE_DATABASE_URL", db_url)
        .env("SPENDGATE_CONTROL_ADDR", "127.0.0.1:0")
        .env("SPENDGATE_PROXY_ADDR", "127.0.0.1:0")
        .env("SPENDGATE_DEV", "1")
        .env("SPENDGATE_UPSTREAM_OPENAI", upstream)
        .env("SPENDGATE_DEFAULT_PLAN", "scale")
        .env("SPENDGATE_RATE_LIMIT_IP_PER_MINUTE", "0")
        .env("SPENDGATE_RATE_LIMIT_KEY_PER_MINUTE", "0")
        .env("SPENDGATE_GOVERNED_REQUESTS_FREE", "0")
        .env("SPENDGATE_LOG", std::env::var("PROXY_BENCH_LOG").unwrap_or_else(|_| "warn".to_owned()))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn spendgate");
    let stdout = child.stdout.take().expect("stdout");
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    reader.read_line(&mut line).expect("ready line");
    let field = |name: &str| {
        line.split_whitespace()
            .find_map(|p| p.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} in the ready line {line:?}"))
            .to_owned()
    };
    let (control, proxy) = (field("control="), field("proxy="));
    // Keep draining stdout so that a later print cannot hit a closed pipe.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    Server { child, control, proxy }
}

/// Signs up, creates a key and the three budgets; returns the raw key.
async fn set_up(http: &reqwest::Client, control: &str) -> Result<String, BoxError> {
    let r = http
        .post(format!("{control}/api/auth/signup"))
        .header(ORIGIN, control)
        .json(&json!({ "email": "bench@example.com", "password": "bench-password" }))
        .send()
        .await?;
    expect_status(r, 201, "signup").await?;
    let r = http
        .post(format!("{control}/api/keys"))
        .header(ORIGIN, control)
        .json(&json!({ "name": "bench" }))
        .send()
        .await?;
    let key = expect_status(r, 201, "create key").await?;
    let raw = key["data"]["rawKey"].as_str().ok_or("no data.rawKey")?.to_owned();
    let key_id = key["data"]["id"].as_str().ok_or("no data.id")?.to_owned();
    let session =
        expect_status(http.get(format!("{control}/api/auth/session")).send().await?, 200, "session").await?;
    let user_id = session["data"]["user"]["id"].as_str().ok_or("no data.user.id")?.to_owned();
    for (entity_type, entity_id) in [("api_key", key_id), ("user", user_id), ("tag", "team=bench".to_owned())]
    {
        let r = http
            .post(format!("{control}/api/budgets"))
            .header(ORIGIN, control)
            .json(&json!({ "entityType": entity_type, "entityId": entity_id,
                           "maxBudgetMicrodollars": 1_000_000_000_000i64, "policy": "strict_block",
                           "loopMaxCalls": if fixed_body() { Some(0) } else { None } }))
            .send()
            .await?;
        expect_status(r, 201, &format!("budget {entity_type}")).await?;
    }
    Ok(raw)
}

async fn expect_status(r: reqwest::Response, want: u16, what: &str) -> Result<Value, BoxError> {
    let status = r.status().as_u16();
    let text = r.text().await?;
    if status != want {
        return Err(format!("{what}: status {status}, body: {text}").into());
    }
    Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
}

// ---------------------------------------------------------------------------------
// Load generator

#[derive(Clone)]
struct Target {
    name: &'static str,
    url: String,
    headers: HeaderMap,
    /// Sends Responses requests (AR, R) instead of chat completions.
    responses: bool,
}

/// One request, read to the end. `first_byte`: also time the first body chunk.
struct Sample {
    total: Duration,
    first_byte: Duration,
    overhead_ms: Option<f64>,
    /// The proxy's `Server-Timing` phases (`preflight`, `body`, `budget`, ...), in ms.
    timing: Vec<(String, f64)>,
}

async fn once(http: &reqwest::Client, t: &Target, stream: bool) -> Result<Sample, BoxError> {
    let payload = if t.responses { responses_body(stream) } else { body(stream) };
    let request = http.post(&t.url).headers(t.headers.clone()).body(payload);
    let started = Instant::now();
    let mut r = request.send().await?;
    let status = r.status();
    if !status.is_success() {
        let headers = format!("{:?}", r.headers());
        let text = r.text().await.unwrap_or_default();
        return Err(format!("{} answered {status}\nheaders: {headers}\nbody: {text}", t.name).into());
    }
    let overhead_ms = r
        .headers()
        .get("x-service-overhead-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<f64>().ok());
    let timing = r
        .headers()
        .get("server-timing")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(',')
                .filter_map(|part| {
                    let (name, dur) = part.trim().split_once(";dur=")?;
                    Some((name.to_owned(), dur.parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_default();
    let mut first_byte = None;
    while let Some(chunk) = r.chunk().await? {
        if first_byte.is_none() && !chunk.is_empty() {
            first_byte = Some(started.elapsed());
        }
    }
    let total = started.elapsed();
    Ok(Sample { total, first_byte: first_byte.unwrap_or(total), overhead_ms, timing })
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram bounds")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

struct Latency {
    /// One histogram per target, in the order given.
    targets: Vec<Histogram<u64>>,
    overhead: Option<Histogram<u64>>,
    /// The proxy's `Server-Timing` phases, in µs.
    phases: std::collections::BTreeMap<String, Histogram<u64>>,
}

/// `n` requests to each target at concurrency 1, taking turns in blocks of [`BLOCK`];
/// records the total time, or for streamed answers the time to the first body byte.
async fn latency(
    http: &reqwest::Client,
    targets: &[&Target],
    n: usize,
    stream: bool,
) -> Result<Latency, BoxError> {
    let mut hs: Vec<Histogram<u64>> = targets.iter().map(|_| histogram()).collect();
    let mut ho = histogram();
    let mut phases = std::collections::BTreeMap::new();
    let mut done = 0;
    while done < n {
        let block = BLOCK.min(n - done);
        for (t, h) in targets.iter().zip(hs.iter_mut()) {
            for _ in 0..block {
                let s = once(http, t, stream).await?;
                h.saturating_record(micros(if stream { s.first_byte } else { s.total }));
                if let Some(ms) = s.overhead_ms.filter(|_| t.name == "B") {
                    ho.saturating_record((ms * 1000.0).round().max(0.0) as u64);
                }
                if t.name == "B" {
                    for (name, ms) in s.timing {
                        phases
                            .entry(name)
                            .or_insert_with(histogram)
                            .saturating_record((ms * 1000.0).round().max(0.0) as u64);
                    }
                }
            }
        }
        done += block;
    }
    Ok(Latency { targets: hs, overhead: (!ho.is_empty()).then_some(ho), phases })
}

/// Requests per second from `clients` concurrent loops for `seconds`.
async fn throughput(
    http: &reqwest::Client,
    t: &Target,
    clients: usize,
    seconds: u64,
) -> Result<(u64, f64), BoxError> {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let http = http.clone();
        let t = t.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                once(&http, &t, false).await.map_err(|e| e.to_string())?;
                n += 1;
            }
            Ok::<u64, String>(n)
        }));
    }
    let mut total = 0;
    let mut first_error = None;
    for task in tasks {
        match task.await? {
            Ok(n) => total += n,
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e.into());
    }
    Ok((total, total as f64 / started.elapsed().as_secs_f64()))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn pct(h: &Histogram<u64>, q: f64) -> u64 {
    h.value_at_quantile(q)
}

fn added(b: &Histogram<u64>, a: &Histogram<u64>, q: f64) -> i64 {
    i64::try_from(pct(b, q)).unwrap_or(i64::MAX) - i64::try_from(pct(a, q)).unwrap_or(i64::MAX)
}
/// The 1-minute load average (other builds share the cores; the figures depend on it).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".to_owned())
}

fn label(name: &str) -> &'static str {
    match name {
        "A" => "mock direct",
        "N" => "nginx reverse proxy (floor)",
        "F" => "actix-web + awc forwarder",
        "AR" => "mock direct, /v1/responses",
        "R" => "through spendgate, /v1/responses",
        _ => "through spendgate",
    }
}

/// One line per target: p50, p90, p99 and what it adds over the mock (A, first).
fn print_latency(title: &str, targets: &[&Target], hs: &[Histogram<u64>]) {
    println!("{title:<36}      p50      p90      p99    p99.9  added p50  added p99");
    for (t, h) in targets.iter().zip(hs) {
        println!(
            "{:<2} {:<32} {:>8} {:>8} {:>8} {:>8} {:>10} {:>10}",
            t.name,
            label(t.name),
            pct(h, 0.5),
            pct(h, 0.9),
            pct(h, 0.99),
            pct(h, 0.999),
            added(h, &hs[0], 0.5),
            added(h, &hs[0], 0.99)
        );
    }
}

/// The histogram of target `name`, if it was measured.
fn of<'a>(targets: &[&Target], hs: &'a [Histogram<u64>], name: &str) -> Option<&'a Histogram<u64>> {
    targets.iter().position(|t| t.name == name).map(|i| &hs[i])
}

/// What spendgate adds above the floor (B - N) at p50 and p99, against the targets
/// (≤ 35 µs, ≤ 250 µs); `None` without a floor.
fn above_floor(targets: &[&Target], hs: &[Histogram<u64>]) -> Option<(i64, i64)> {
    let (n, b) = (of(targets, hs, "N")?, of(targets, hs, "B")?);
    Some((added(b, n, 0.5), added(b, n, 0.99)))
}

/// What each route adds through spendgate over the mock answering it directly: the
/// chat route (B - A) and the Responses route (R - AR), at p50 and p99.
fn print_route_added(what: &str, targets: &[&Target], hs: &[Histogram<u64>]) {
    let pair = |via: &str, direct: &str| {
        let (v, d) = (of(targets, hs, via)?, of(targets, hs, direct)?);
        Some((added(v, d, 0.5), added(v, d, 0.99)))
    };
    if let (Some((c50, c99)), Some((r50, r99))) = (pair("B", "A"), pair("R", "AR")) {
        println!(
            "   {what} added by spendgate (µs): chat p50 {c50}, p99 {c99}; Responses p50 {r50}, p99 {r99}"
        );
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "MISSED"
    }
}

fn print_above_floor(what: &str, above: Option<(i64, i64)>) {
    match above {
        Some((p50, p99)) => println!(
            "   spendgate above the floor (B - N): p50 {p50} µs (target ≤ 35: {}), p99 {p99} µs (target ≤ 250: {})",
            verdict(p50 <= 35),
            verdict(p99 <= 250)
        ),
        None => println!("   {what}: {}", nginx::INSTALL),
    }
}

async fn run() -> Result<(), BoxError> {
    let n: usize = env_or("PROXY_BENCH_REQUESTS", 5000);
    let seconds: u64 = env_or("PROXY_BENCH_SECONDS", 5);
    let clients: usize = env_or("PROXY_BENCH_CLIENTS", 32);

    let mock = start_mock();
    let floor = match nginx::binary() {
        Some(binary) => Some(nginx::Nginx::start(binary, &mock.base)?),
        None => {
            println!("{}", nginx::INSTALL);
            None
        }
    };
    let forwarder = start_forwarder(&mock.base);
    let dir = tempfile::tempdir()?;
    let server = start_server(&format!("sqlite://{}", dir.path().join("bench.db").display()), &mock.base);
    let control = server.control.clone();
    let admin = reqwest::Client::builder().cookie_store(true).build()?;
    let raw_key = set_up(&admin, &control).await?;

    let mut common = HeaderMap::new();
    common.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    common.insert("authorization", HeaderValue::from_static("Bearer sk-bench"));
    let to = |name, base: &str, headers: &HeaderMap| Target {
        name,
        url: format!("{base}/v1/chat/completions"),
        headers: headers.clone(),
        responses: false,
    };
    let to_responses = |name, base: &str, headers: &HeaderMap| Target {
        name,
        url: format!("{base}/v1/responses"),
        headers: headers.clone(),
        responses: true,
    };
    let a = to("A", &mock.base, &common);
    let nx = floor.as_ref().map(|ng| to("N", &ng.base, &common));
    let f = to("F", &forwarder.base, &common);
    let mut hb = common.clone();
    hb.insert("x-service-key", HeaderValue::from_str(&raw_key)?);
    hb.insert("x-service-tags", HeaderValue::from_static(r#"{"team":"bench"}"#));
    if std::env::var_os("PROXY_BENCH_ONE_TRACE").is_some() {
        hb.insert("x-service-trace-id", HeaderValue::from_static("0af7651916cd43dd8448eb211c80319c"));
    }
    let b = to("B", &server.proxy, &hb);
    let ar = to_responses("AR", &mock.base, &common);
    let r = to_responses("R", &server.proxy, &hb);
    let targets: Vec<&Target> =
        [Some(&a), nx.as_ref(), Some(&f), Some(&b), Some(&ar), Some(&r)].into_iter().flatten().collect();

    let http = reqwest::Client::builder().tcp_nodelay(true).pool_max_idle_per_host(usize::MAX).build()?;
    let mut proxied: u64 = 0;

    // Warm-up, every target, plain and streamed.
    for t in &targets {
        for _ in 0..WARMUP {
            once(&http, t, false).await?;
        }
        for _ in 0..WARMUP / 5 {
            once(&http, t, true).await?;
        }
    }
    proxied += 2 * (WARMUP + WARMUP / 5) as u64;

    println!(
        "proxy bench: {n} requests per target at concurrency 1, {clients} clients x {seconds} s, {}",
        if fixed_body() { "fixed body, loop detection off" } else { "distinct bodies, loop detection on" }
    );
    let load_start = load_average();
    let stall_seconds: u64 = env_or("PROXY_BENCH_STALL_SECONDS", 10);
    let stall_runs = stalls::measure(&http, &targets, stall_seconds).await?;
    proxied += stall_runs.iter().filter(|r| r.is_proxy()).map(stalls::Run::calls).sum::<u64>();
    let wrk_runs = stalls::wrk(&targets, stall_seconds)?;
    proxied += wrk_runs.iter().map(stalls::Wrk::proxied).sum::<u64>();
    let lat = latency(&http, &targets, n, false).await?;
    proxied += 2 * n as u64;
    let overhead = lat.overhead.ok_or("the proxy sent no x-service-overhead-ms header")?;
    let st = latency(&http, &targets, n, true).await?;
    proxied += 2 * n as u64;

    // Saturation last: the proxy records its calls in the background, and the backlog
    // must not spill into the concurrency-1 phases.
    let mut rps = Vec::with_capacity(targets.len());
    let mut cpu_per_call = None;
    for t in &targets {
        let before = cpu::Snapshot::of(server.child.id());
        let (count, per_second) = throughput(&http, t, clients, seconds).await?;
        if t.name == "B" || t.name == "R" {
            proxied += count;
        }
        if t.name == "B" {
            // A call's CPU is whole once its record has committed.
            recorded_quietly(&admin, &control, proxied).await?;
            cpu_per_call = Some(before.per_call(&cpu::Snapshot::of(server.child.id()), count));
        }
        rps.push((count, per_second));
    }
    let load_end = load_average();

    println!();
    stalls::print(&stall_runs, stall_seconds);
    stalls::print_wrk(&wrk_runs, stall_seconds);
    println!();
    print_latency("latency, concurrency 1 (µs)", &targets, &lat.targets);
    let lat_above = above_floor(&targets, &lat.targets);
    print_above_floor("latency", lat_above);
    print_route_added("latency", &targets, &lat.targets);
    let us = |v: u64| format!("{v:>8}");
    println!(
        "   x-service-overhead-ms (µs)      {} {} {}",
        us(pct(&overhead, 0.5)),
        us(pct(&overhead, 0.9)),
        us(pct(&overhead, 0.99))
    );
    for (name, h) in &lat.phases {
        println!("   Server-Timing {name:<18}{} {} {}", us(pct(h, 0.5)), us(pct(h, 0.9)), us(pct(h, 0.99)));
    }
    println!();
    print_latency("streaming time to first byte (µs)", &targets, &st.targets);
    let ttfb_above = above_floor(&targets, &st.targets);
    print_above_floor("time to first byte", ttfb_above);
    print_route_added("time to first byte", &targets, &st.targets);
    println!();
    let rps_of = |name: &str| targets.iter().position(|t| t.name == name).map(|i| rps[i].1);
    println!("throughput, {clients} clients, {seconds} s     req/s   / mock  / floor");
    for (t, (count, per_second)) in targets.iter().zip(&rps) {
        let to_floor =
            rps_of("N").map_or_else(|| "       -".to_owned(), |n| format!("{:>8.3}", per_second / n));
        println!(
            "{:<2} {:<32} {per_second:>8.0} {:>8.3} {to_floor}  ({count} requests)",
            t.name,
            label(t.name),
            per_second / rps[0].1
        );
    }
    let responses_ratio = rps_of("AR").zip(rps_of("R")).map(|(ar, r)| r / ar);
    let chat_ratio = rps_of("A").zip(rps_of("B")).map(|(a, b)| b / a);
    if let (Some(chat), Some(resp)) = (chat_ratio, responses_ratio) {
        println!("   through spendgate / mock direct: chat {chat:.3}, Responses {resp:.3}");
    }
    let ratio = rps_of("N").zip(rps_of("B")).map(|(n, b)| b / n);
    match ratio {
        Some(r) => println!("   spendgate / floor: {r:.3} (issue #25's target ≥ 0.5: {})", verdict(r >= 0.5)),
        None => println!("   throughput: {}", nginx::INSTALL),
    }
    if let Some((total, split)) = &cpu_per_call {
        let split: Vec<String> = split.iter().map(|(name, us)| format!("{name} {us:.0}")).collect();
        println!(
            "   spendgate CPU per call at saturation (B, until recorded): {total:.0} µs ({})",
            split.join(", ")
        );
    }
    println!(
        "   load average (1 min) at the start of the measured phases {load_start}, at the end {load_end}"
    );

    let recorded = recorded(&admin, &control, proxied).await?;
    let hist = |hs: &[Histogram<u64>], name: &str| {
        of(&targets, hs, name).map(|h| json!({ "p50": pct(h, 0.5), "p90": pct(h, 0.9), "p99": pct(h, 0.99) }))
    };
    let per_target = |hs: &[Histogram<u64>]| json!({ "a": hist(hs, "A"), "n": hist(hs, "N"), "f": hist(hs, "F"), "b": hist(hs, "B"), "ar": hist(hs, "AR"), "r": hist(hs, "R") });
    let summary = json!({
        "bench": "proxy",
        "requests": n, "clients": clients, "seconds": seconds, "fixed_body": fixed_body(),
        "load_average": [load_start, load_end],
        "stalls_c1_us": stalls::summary(&stall_runs),
        "latency_us": per_target(&lat.targets),
        "latency_above_floor_us": lat_above.map(|(p50, p99)| json!({ "p50": p50, "p99": p99 })),
        "overhead_header_us": { "p50": pct(&overhead, 0.5), "p99": pct(&overhead, 0.99) },
        "stream_ttfb_us": per_target(&st.targets),
        "stream_ttfb_above_floor_us": ttfb_above.map(|(p50, p99)| json!({ "p50": p50, "p99": p99 })),
        "throughput_rps": { "a": rps_of("A").map(f64::round), "n": rps_of("N").map(f64::round),
                            "f": rps_of("F").map(f64::round), "b": rps_of("B").map(f64::round),
                            "ar": rps_of("AR").map(f64::round), "r": rps_of("R").map(f64::round),
                            "b_over_floor": ratio.map(|r| (r * 1000.0).round() / 1000.0) },
        "cpu_us_per_call": cpu_per_call.as_ref().map(|(total, split)| json!({
            "total": total.round(),
            "threads": split.iter().map(|(name, us)| (name.clone(), json!(us.round()))).collect::<serde_json::Map<_, _>>(),
        })),
        "recorded": { "requests": recorded.0, "proxied": proxied, "cost_microdollars": recorded.1 },
        "otel": if otel::on() { otel::counters(&http, &server.proxy).await } else { Value::Null },
    });
    println!("{summary}");
    if recorded.0 == 0 || recorded.1 == 0 {
        return Err("the proxied requests were not recorded (no spend)".into());
    }
    drop(server);
    drop(forwarder);
    drop(floor);
    drop(mock);
    Ok(())
}

/// Waits (a bounded time) until at least `proxied` calls are recorded.
async fn recorded_quietly(admin: &reqwest::Client, control: &str, proxied: u64) -> Result<(), BoxError> {
    let want = i64::try_from(proxied).unwrap_or(i64::MAX);
    for _ in 0..200 {
        let r = admin.get(format!("{control}/api/cost-events/summary")).send().await?;
        let s = expect_status(r, 200, "summary").await?;
        if s["data"]["totals"]["totalRequests"].as_i64().unwrap_or(0) >= want {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "   (fewer than {proxied} calls recorded after 10 s: the CPU per call below misses some commits)"
    );
    Ok(())
}

/// Sanity: the proxied calls were recorded and spent. Settlement is asynchronous: waits
/// (a bounded time) until the count stops moving; prints and returns (requests, µ$).
async fn recorded(admin: &reqwest::Client, control: &str, proxied: u64) -> Result<(i64, i64), BoxError> {
    let mut recorded = (0i64, 0i64);
    for _ in 0..50 {
        let r = admin.get(format!("{control}/api/cost-events/summary")).send().await?;
        let s = expect_status(r, 200, "summary").await?;
        let now = (
            s["data"]["totals"]["totalRequests"].as_i64().unwrap_or(0),
            s["data"]["totals"]["totalCostMicrodollars"].as_i64().unwrap_or(0),
        );
        if now.0 >= i64::try_from(proxied).unwrap_or(i64::MAX) || (now == recorded && now.0 > 0) {
            recorded = now;
            break;
        }
        recorded = now;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let budgets =
        expect_status(admin.get(format!("{control}/api/budgets")).send().await?, 200, "budgets").await?;
    let spends: Vec<String> = budgets["data"]
        .as_array()
        .map(|v| {
            v.iter()
                .map(|b| {
                    format!(
                        "{}={}",
                        b["entityType"].as_str().unwrap_or("?"),
                        b["spendMicrodollars"].as_i64().unwrap_or(0)
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    println!();
    println!(
        "recorded: {} of {proxied} proxied requests, {} µ$ total; budget spend (µ$): {}",
        recorded.0,
        recorded.1,
        spends.join(", ")
    );
    Ok(recorded)
}

fn main() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let soak = std::env::var("PROXY_BENCH_MODE").is_ok_and(|m| m == "soak");
    let result = if soak { rt.block_on(soak::run()) } else { rt.block_on(run()) };
    drop(rt);
    if let Err(e) = result {
        eprintln!("proxy bench failed: {e}");
        std::process::exit(1);
    }
}
