#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a benchmark harness fails loudly"
)]
//! `POST /v1/gate` latency over HTTP against the release binary, on SQLite and (when
//! it answers) PostgreSQL, `sendEvent` true and false: one client in sequence, a
//! steady open-loop rate, and saturation by concurrent clients. Reported, not
//! asserted. The latency is the client's (loopback HTTP included).
//!
//! Run: `cargo bench --bench gate` (env `GATE_SECONDS` per phase, default 5;
//! `GATE_RATE` requests/s of the steady phase, default 2000; `GATE_CLIENTS` of the
//! saturation phase, default 32).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};
use tokio::sync::Mutex;

mod support;

struct Target {
    http: reqwest::Client,
    url: String,
    key: String,
}

async fn set_up(server: &support::Server) -> Target {
    let http = reqwest::Client::builder().cookie_store(true).build().expect("client");
    let control = &server.control;
    let signup = json!({ "email": "bench@example.com", "password": "bench-password" });
    assert!(http
        .post(format!("{control}/api/auth/signup"))
        .json(&signup)
        .send()
        .await
        .unwrap()
        .status()
        .is_success());
    let key: Value = http
        .post(format!("{control}/api/keys"))
        .json(&json!({ "name": "gate" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let key = key["data"]["rawKey"].as_str().expect("raw key").to_owned();
    let bind = json!({ "customerId": "acme", "planRef": "bench", "budgetCap": 1_000_000_000_000_000_i64 });
    let r = http
        .post(format!("{}/v1/bind", server.proxy))
        .header("x-service-key", &key)
        .json(&bind)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "bind");
    Target { http: reqwest::Client::new(), url: format!("{}/v1/gate", server.proxy), key }
}

/// Answers other than an allowed 200 (a 503 when the database pool is exhausted, a
/// dropped connection): counted and reported, never timed.
static FAILED: AtomicU64 = AtomicU64::new(0);

/// One gate; `None` when it was not an allowed 200.
async fn once(t: &Target, send_event: bool) -> Option<Duration> {
    let body = json!({ "customerId": "acme", "estimatedCostMicrodollars": 1, "sendEvent": send_event });
    let started = Instant::now();
    let answer = match t.http.post(&t.url).header("x-service-key", &t.key).json(&body).send().await {
        Ok(r) if r.status().as_u16() == 200 => r.json::<Value>().await.ok(),
        _ => None,
    };
    if answer.is_some_and(|a| a["allowed"] == true) {
        Some(started.elapsed())
    } else {
        FAILED.fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn record(h: &mut Histogram<u64>, d: Option<Duration>) {
    if let Some(d) = d {
        h.record(d.as_micros() as u64).unwrap();
    }
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram")
}

fn report(label: &str, h: &Histogram<u64>, elapsed: Duration) {
    println!(
        "{label:<38} n={:>7} {:>8.0} req/s  p50 {:>6} µs  p99 {:>6} µs  max {:>7} µs  failed {}",
        h.len(),
        h.len() as f64 / elapsed.as_secs_f64(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.max(),
        FAILED.swap(0, Ordering::Relaxed),
    );
}

async fn sequential(t: &Target, send_event: bool, seconds: u64) -> (Histogram<u64>, Duration) {
    let mut h = histogram();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        record(&mut h, once(t, send_event).await);
    }
    (h, started.elapsed())
}

/// Open loop: one request every `1/rate` s whatever the answers do.
async fn steady(t: Arc<Target>, send_event: bool, seconds: u64, rate: u64) -> (Histogram<u64>, Duration) {
    let h = Arc::new(Mutex::new(histogram()));
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..rate * seconds {
        tick.tick().await;
        let (t, h) = (t.clone(), h.clone());
        tasks.push(tokio::spawn(async move {
            let d = once(&t, send_event).await;
            record(&mut *h.lock().await, d);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = started.elapsed();
    let h = h.lock().await.clone();
    (h, elapsed)
}

async fn saturate(
    t: Arc<Target>,
    send_event: bool,
    seconds: u64,
    clients: usize,
) -> (Histogram<u64>, Duration) {
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let t = t.clone();
            tokio::spawn(async move {
                let mut h = histogram();
                while Instant::now() < deadline {
                    record(&mut h, once(&t, send_event).await);
                }
                h
            })
        })
        .collect();
    let mut all = histogram();
    for task in tasks {
        all.add(task.await.unwrap()).unwrap();
    }
    (all, started.elapsed())
}

/// The floor of any answer over this loopback HTTP client: `GET /health` of the same
/// proxy listener, in sequence (no authentication, no body, no storage).
async fn floor(t: &Target, health: &str, seconds: u64) -> (Histogram<u64>, Duration) {
    let mut h = histogram();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(seconds) {
        let sent = Instant::now();
        let r = t.http.get(health).send().await.expect("health");
        assert!(r.status().is_success());
        r.bytes().await.expect("body");
        h.record(sent.elapsed().as_micros() as u64).unwrap();
    }
    (h, started.elapsed())
}

async fn run(backend: &str, db_url: &str) {
    let seconds = env_or("GATE_SECONDS", 5);
    let rate = env_or("GATE_RATE", 2_000);
    let clients = env_or("GATE_CLIENTS", 32) as usize;
    let server = support::start(db_url, &[], "GATE_LOG");
    let t = Arc::new(set_up(&server).await);
    let (h, e) = floor(&t, &format!("{}/health", server.proxy), seconds).await;
    report(&format!("{backend} floor: GET /health sequential"), &h, e);
    for send_event in [false, true] {
        let mode = format!("{backend} sendEvent={send_event}");
        let (h, e) = sequential(&t, send_event, seconds).await;
        report(&format!("{mode} sequential"), &h, e);
        let (h, e) = steady(t.clone(), send_event, seconds, rate).await;
        report(&format!("{mode} steady {rate}/s"), &h, e);
        let (h, e) = saturate(t.clone(), send_event, seconds, clients).await;
        report(&format!("{mode} {clients} clients"), &h, e);
    }
}

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        run("sqlite", &format!("sqlite://{}", dir.path().join("gate.db").display())).await;
        if let Some(db) = support::PgDb::create("sg_gate") {
            run("postgres", &db.url()).await;
        }
    });
}
