#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a benchmark harness fails loudly"
)]
//! What an `exactCeiling` clamp adds to a proxied call: the same chat completion
//! through the release binary (SQLite) with two keys, one whose strict budget pays for
//! the whole estimate and one whose `exactCeiling` budget does not, so that every call
//! of the second is forwarded with its output bound rewritten. The two alternate in
//! rounds, one client in sequence, against a local fake provider in this process;
//! reported, not asserted: each key's p50/p99 and the server's CPU per call. Each call
//! goes out the moment the previous answer ends: a clamped call's answer ends once the
//! room it held beyond its cost is given back, so the next one always finds it.
//!
//! Run: `cargo bench --bench clamp` (env `CLAMP_CALLS` calls per key, default 300).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpResponse, HttpServer};
use hdrhistogram::Histogram;
use serde_json::{json, Value};

mod support;

const ROUNDS: u64 = 10;

/// gpt-5 without an output bound: the estimate prices its 128,000 output tokens
/// ($1.28), more than the clamped key's $1 budget, which every call then pays ~95 µ$ of.
fn request() -> String {
    json!({ "model": "gpt-5", "messages": [
        { "role": "system", "content": "You are a terse assistant." },
        { "role": "user", "content": "Summarize the quarterly numbers in one line." } ] })
    .to_string()
}

/// The fake provider: one fixed answer; counts the requests that arrived with an
/// output bound (the clamped ones).
fn fake_provider(bounded: Arc<AtomicU64>) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            HttpServer::new(move || {
                let bounded = bounded.clone();
                App::new().default_service(web::to(move |body: web::Bytes| {
                    let bounded = bounded.clone();
                    async move {
                        if body.windows(21).any(|w| w == b"max_completion_tokens") {
                            bounded.fetch_add(1, Ordering::Relaxed);
                        }
                        HttpResponse::Ok().content_type("application/json").body(ANSWER)
                    }
                }))
            })
            .workers(1)
            .listen(listener)
            .expect("listen")
            .run()
            .await
            .expect("fake provider");
        });
    });
    url
}

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1,"model":"gpt-5","choices":[{"index":0,"message":{"role":"assistant","content":"Revenue up, costs flat."},"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":8,"total_tokens":20}}"#;

/// Signs up and makes a key with a strict budget of `limit` µ$; returns the raw key.
async fn key(http: &reqwest::Client, control: &str, name: &str, limit: i64, exact: bool) -> String {
    let k: Value = http
        .post(format!("{control}/api/keys"))
        .json(&json!({ "name": name }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let budget = json!({ "entityType": "api_key", "entityId": k["data"]["id"], "maxBudgetMicrodollars": limit,
                         "policy": "strict_block", "exactCeiling": exact, "loopMaxCalls": 0 });
    let r = http.post(format!("{control}/api/budgets")).json(&budget).send().await.unwrap();
    assert_eq!(r.status(), 201, "budget: {}", r.text().await.unwrap());
    k["data"]["rawKey"].as_str().expect("raw key").to_owned()
}

/// `n` calls in sequence with `key`; asserts each answer and whether it was clamped.
async fn calls(http: &reqwest::Client, url: &str, key: &str, n: u64, clamped: bool, h: &mut Histogram<u64>) {
    for _ in 0..n {
        let started = Instant::now();
        let r = http.post(url).header("x-service-key", key).bearer_auth("sk-bench-provider-key");
        let r = r.header("content-type", "application/json").body(request());
        let r = r.send().await.unwrap();
        let status = r.status();
        let header = r.headers().get("x-service-clamped-output-tokens").is_some();
        let text = r.text().await.unwrap();
        h.record(started.elapsed().as_micros() as u64).unwrap();
        assert_eq!((status.as_u16(), header), (200, clamped), "clamped: {clamped}: {text}");
    }
}

/// The server's user + system CPU time so far (Linux `/proc`).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
    let ticks: u64 = fields.get(11..13).map_or(0, |f| f.iter().filter_map(|t| t.parse::<u64>().ok()).sum());
    Duration::from_millis(ticks * 10)
}

fn report(name: &str, h: &Histogram<u64>, cpu: Duration) {
    println!(
        "{name:>9}: {:>5} calls  p50 {:>4} µs  p90 {:>4} µs  p99 {:>5} µs  server CPU {:>4.0} µs/call",
        h.len(),
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.9),
        h.value_at_quantile(0.99),
        cpu.as_micros() as f64 / h.len().max(1) as f64
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: u64 = std::env::var("CLAMP_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(300);
    let bounded = Arc::new(AtomicU64::new(0));
    let upstream = fake_provider(bounded.clone());
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("clamp.db").display());
    let server = support::start(&db, &[("SPENDGATE_UPSTREAM_OPENAI", &upstream)], "CLAMP_BENCH_LOG");
    let http = reqwest::Client::builder().cookie_store(true).build().unwrap();
    let signup = json!({ "email": "bench@example.com", "password": "bench-password" });
    http.post(format!("{}/api/auth/signup", server.control)).json(&signup).send().await.unwrap();
    let plain = key(&http, &server.control, "plain", 1_000_000_000_000, false).await;
    let clamped = key(&http, &server.control, "clamped", 1_000_000, true).await;
    let url = format!("{}/v1/chat/completions", server.proxy);
    let (mut hp, mut hc) = (Histogram::new(3).unwrap(), Histogram::new(3).unwrap());
    let (mut cpu_p, mut cpu_c) = (Duration::ZERO, Duration::ZERO);
    // Warm-up, then the two keys in alternating rounds.
    calls(&http, &url, &plain, 200, false, &mut Histogram::new(3).unwrap()).await;
    for _ in 0..ROUNDS {
        let t = cpu(server.pid());
        calls(&http, &url, &plain, n / ROUNDS, false, &mut hp).await;
        let mid = cpu(server.pid());
        calls(&http, &url, &clamped, n / ROUNDS, true, &mut hc).await;
        cpu_p += mid - t;
        cpu_c += cpu(server.pid()) - mid;
    }
    println!("chat completion to gpt-5, one client in sequence, {} rounds alternating:", ROUNDS);
    report("unclamped", &hp, cpu_p);
    report("clamped", &hc, cpu_c);
    println!(
        "clamped − unclamped: p50 {:+} µs, p99 {:+} µs; the fake provider saw {} bounded requests",
        hc.value_at_quantile(0.5) as i64 - hp.value_at_quantile(0.5) as i64,
        hc.value_at_quantile(0.99) as i64 - hp.value_at_quantile(0.99) as i64,
        bounded.load(Ordering::Relaxed)
    );
}
