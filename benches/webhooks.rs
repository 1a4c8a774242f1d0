#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    reason = "a benchmark harness fails loudly"
)]
//! Webhook fan-out: 10,000 cost events to 10 endpoints, one of them down. Starts the
//! release `spendgate` binary on a fresh SQLite file (PostgreSQL with
//! `WEBHOOK_BENCH_PG=postgres://…/db`, an empty database), 9 local receivers and one
//! address nobody listens on, ingests the events in batches of 100, and reports how
//! long until every healthy endpoint has every event, deliveries per second, and the
//! server's memory. Reported, not asserted.
//!
//! Run: `cargo bench --bench webhooks` (env `WEBHOOK_EVENTS`, default 10000).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::{json, Value};

mod support;

type Seen = Arc<Mutex<HashSet<String>>>;

/// A receiver that remembers the distinct event ids it got; returns its URL.
fn receiver(seen: Seen) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let data = web::Data::new(seen);
            HttpServer::new(move || {
                App::new().app_data(data.clone()).default_service(web::to(
                    |body: web::Bytes, seen: web::Data<Seen>| async move {
                        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
                        if let Some(id) = v["id"].as_str() {
                            seen.lock().unwrap().insert(id.to_owned());
                        }
                        HttpResponse::Ok().finish()
                    },
                ))
            })
            .workers(1)
            .disable_signals()
            .listen(listener)
            .unwrap()
            .run()
            .await
        })
    });
    format!("http://127.0.0.1:{port}/hook")
}

fn rss_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

async fn run(label: &str, db_url: &str, events: usize) {
    let server = support::start(db_url, &[], "WEBHOOK_BENCH_LOG");
    let base = server.control.clone();
    let http = reqwest::Client::builder().cookie_store(true).build().unwrap();
    let r = http
        .post(format!("{base}/api/auth/signup"))
        .json(&json!({ "email": "bench@example.com", "password": "bench-password" }))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success());
    let receivers: Vec<Seen> = (0..9).map(|_| Seen::default()).collect();
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://127.0.0.1:{}/hook", l.local_addr().unwrap().port())
    };
    let mut urls: Vec<String> = receivers.iter().map(|s| receiver(s.clone())).collect();
    urls.push(dead);
    for url in &urls {
        let r = http.post(format!("{base}/api/webhooks")).json(&json!({ "url": url })).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 201);
    }
    let key: Value = http
        .post(format!("{base}/api/keys"))
        .json(&json!({ "name": "bench" }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let raw = key["data"]["rawKey"].as_str().unwrap().to_owned();
    let rss_before = rss_kib(server.pid(), "VmRSS:");

    let started = Instant::now();
    for batch in 0..events.div_ceil(100) {
        let items: Vec<Value> = (0..100.min(events - batch * 100))
            .map(|i| {
                json!({ "provider": "openai", "model": "gpt-4o", "inputTokens": 10, "outputTokens": 5,
                "costMicrodollars": 1 + i })
            })
            .collect();
        let r = http
            .post(format!("{base}/api/cost-events/batch"))
            .header("x-service-key", &raw)
            .json(&json!({ "events": items }))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.text().await.unwrap_or_default());
    }
    let ingested = started.elapsed();
    let mut peak_rss = 0;
    loop {
        peak_rss = peak_rss.max(rss_kib(server.pid(), "VmRSS:"));
        let least = receivers.iter().map(|s| s.lock().unwrap().len()).min().unwrap_or(0);
        if least >= events {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(600),
            "gave up: slowest receiver at {least}/{events}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all = started.elapsed();
    let delivered = 9 * events;
    println!(
        "{label}: {events} events ingested in {:.2} s; all {delivered} deliveries to the 9 healthy endpoints \
         (1 down) after {:.2} s = {:.0} delivered/s; server RSS {} MiB before, peak {} MiB (VmHWM {} MiB)",
        ingested.as_secs_f64(),
        all.as_secs_f64(),
        delivered as f64 / all.as_secs_f64(),
        rss_before / 1024,
        peak_rss / 1024,
        rss_kib(server.pid(), "VmHWM:") / 1024,
    );
}

fn main() {
    let events: usize = std::env::var("WEBHOOK_EVENTS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    rt.block_on(run("SQLite", &sqlite, events));
    if let Ok(pg) = std::env::var("WEBHOOK_BENCH_PG") {
        rt.block_on(run("PostgreSQL", &pg, events));
    }
}
