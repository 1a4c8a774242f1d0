#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    reason = "a benchmark harness fails loudly"
)]
//! Batch ingest over HTTP: starts the release `spendgate` binary on a fresh SQLite
//! file (and on PostgreSQL when it answers at 127.0.0.1:5432), then drives
//! `POST /api/cost-events/batch` with 100-event batches from concurrent clients
//! and reports events per second. Each event carries tags `team` and `customer`, a
//! session (50 events) with its trace, and a customer. Reported, not asserted.
//!
//! The load generator shares the machine with the server, so the CPU time each used
//! during the run is printed beside the rate (from `/proc/<pid>/stat`), with the load
//! average.
//!
//! Run: `cargo bench --bench ingest` (env `INGEST_SECONDS`, default 5;
//! `INGEST_CLIENTS`, default 8).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod support;

async fn run(label: &str, db_url: &str, seconds: u64, clients: usize) {
    let server = support::start(db_url, &[], "INGEST_LOG");
    let base = server.control.clone();
    let http = reqwest::Client::builder().cookie_store(true).build().expect("client");
    let r = http
        .post(format!("{base}/api/auth/signup"))
        .json(&json!({ "email": "bench@example.com", "password": "bench-password" }))
        .send()
        .await
        .expect("signup");
    assert!(r.status().is_success());
    let key: Value = http
        .post(format!("{base}/api/keys"))
        .json(&json!({ "name": "bench" }))
        .send()
        .await
        .expect("key")
        .json()
        .await
        .expect("json");
    let raw = key["data"]["rawKey"].as_str().expect("raw key").to_owned();
    let kid = key["data"]["id"].as_str().expect("key id").to_owned();
    http.post(format!("{base}/api/budgets"))
        .json(&json!({ "entityType": "api_key", "entityId": kid, "maxBudgetMicrodollars": 1_000_000_000_000i64 }))
        .send()
        .await
        .expect("budget");

    let deadline = Instant::now() + Duration::from_secs(seconds);
    let cpu_before = (cpu_seconds(server.pid()), cpu_seconds(std::process::id()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let base = base.clone();
        let raw = raw.clone();
        tasks.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut sent = 0u64;
            let mut n = 0u64;
            while Instant::now() < deadline {
                let events: Vec<Value> = (0..100)
                    .map(|i| {
                        n += 1;
                        // Tags (team, customer), a session of 50 events with its trace,
                        // and the customer, as a realistic SDK batch carries them.
                        let session = n / 50;
                        json!({ "provider": "openai", "model": "gpt-4o-mini", "inputTokens": 1200, "outputTokens": 300,
                                "costMicrodollars": 450 + i, "idempotencyKey": format!("c{c}-{n}"),
                                "sessionId": format!("c{c}-s{session}"), "traceId": format!("{:016x}{session:016x}", c + 1),
                                "customer": format!("cust-{}", session % 1000),
                                "tags": { "team": format!("team-{}", session % 20), "customer": format!("cust-{}", session % 1000) } })
                    })
                    .collect();
                let resp = client
                    .post(format!("{base}/api/cost-events/batch"))
                    .header("x-service-key", &raw)
                    .json(&json!({ "events": events }))
                    .send()
                    .await;
                match resp {
                    Ok(r) if r.status().as_u16() == 201 => sent += 100,
                    Ok(r) => panic!("unexpected status {}", r.status()),
                    Err(e) => panic!("request failed: {e}"),
                }
            }
            sent
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await.expect("client task");
    }
    let elapsed = started.elapsed().as_secs_f64();
    let server_cpu = cpu_seconds(server.pid()) - cpu_before.0;
    let generator_cpu = cpu_seconds(std::process::id()) - cpu_before.1;
    println!(
        "{label:<10} {total:>9} events in {elapsed:.2} s = {:>9.0} events/s ({clients} clients, 100/batch)",
        total as f64 / elapsed
    );
    println!(
        "{:<10} CPU: server {server_cpu:.2} s ({:.1} µs/event), load generator {generator_cpu:.2} s ({:.1} µs/event); load average {}",
        "",
        server_cpu * 1e6 / total as f64,
        generator_cpu * 1e6 / total as f64,
        std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim()
    );
}

/// CPU time (user + system, every thread) a process has used so far, in seconds:
/// fields 14 and 15 of `/proc/<pid>/stat`, in clock ticks of 1/100 s (Linux's
/// `USER_HZ`). Zero where there is no `/proc`.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The command name (field 2) may hold spaces; the fields after it do not.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let ticks: u64 =
        after_name.split_whitespace().skip(11).take(2).filter_map(|f| f.parse::<u64>().ok()).sum();
    ticks as f64 / 100.0
}

fn main() {
    let seconds = std::env::var("INGEST_SECONDS").ok().and_then(|s| s.parse().ok()).unwrap_or(5);
    let clients = std::env::var("INGEST_CLIENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(8);
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        run("sqlite", &format!("sqlite://{}", dir.path().join("bench.db").display()), seconds, clients).await;
        if let Some(db) = support::PgDb::create("sg_bench") {
            run("postgres", &db.url(), seconds, clients).await;
        }
    });
}
