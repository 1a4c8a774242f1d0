//! Soak mode (`PROXY_BENCH_MODE=soak`): one key with three budgets (key, user, tag),
//! `PROXY_BENCH_SOAK_CLIENTS` (default `32,256`) concurrent clients, each phase for
//! `PROXY_BENCH_SOAK_SECONDS` (default 300), against the instant mock, while a busy
//! loop child process (pinned to core 0 with `taskset` when available) keeps a core
//! spinning beside it. Per phase: answers that were not 2xx (by status), RSS of the
//! spendgate process at start and end (and the most seen), requests/s, latency p50/p99,
//! the mailbox wait p99 per entity type read from `/health/metrics` (the bucket bound;
//! the difference over the phase), the refused reservations, and the transport errors
//! (no HTTP answer, or an answer whose body broke off) by kind (see [`error_kind`]).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use reqwest::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use serde_json::Value;

use super::{body, env_or, histogram, micros, pct, set_up, start_mock, start_server, BoxError, Server};

/// A busy loop beside the gateway; killed on drop.
struct Neighbour(std::process::Child);

impl Neighbour {
    fn start() -> Neighbour {
        let spin = "while :; do :; done";
        let pinned = std::process::Command::new("taskset").args(["-c", "0", "sh", "-c", spin]).spawn();
        let child = pinned
            .or_else(|_| std::process::Command::new("sh").args(["-c", spin]).spawn())
            .expect("spawn the busy neighbour");
        Neighbour(child)
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Resident set of `pid` in MiB (Linux).
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// The metrics as JSON.
async fn metrics(http: &reqwest::Client, proxy: &str) -> Result<Value, BoxError> {
    Ok(http.get(format!("{proxy}/health/metrics")).send().await?.json().await?)
}

/// Per entity type: waits counted, and the cumulative buckets `(le, count)`.
fn wait_buckets(metrics: &Value) -> BTreeMap<String, (u64, Vec<(f64, u64)>)> {
    let mut out = BTreeMap::new();
    for m in metrics["spendgate_budget_mailbox_wait_seconds"].as_array().into_iter().flatten() {
        let entity_type = m["labels"]["entity_type"].as_str().unwrap_or("?").to_owned();
        let buckets = m["buckets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| (b["le"].as_f64().unwrap_or(f64::INFINITY), b["count"].as_u64().unwrap_or(0)))
            .collect();
        out.insert(entity_type, (m["count"].as_u64().unwrap_or(0), buckets));
    }
    out
}

/// The p99 bucket bound (seconds) of the waits between two metric snapshots, per entity
/// type with samples, with their number; `None` when it falls past the last bound.
fn wait_p99(before: &Value, after: &Value) -> BTreeMap<String, (u64, Option<f64>)> {
    let before = wait_buckets(before);
    let mut out = BTreeMap::new();
    for (entity_type, (count, buckets)) in wait_buckets(after) {
        let (earlier_count, earlier) = before.get(&entity_type).cloned().unwrap_or_default();
        let total = count.saturating_sub(earlier_count);
        if total == 0 {
            continue;
        }
        let rank = (total as f64 * 0.99).ceil() as u64;
        let bound = buckets
            .iter()
            .enumerate()
            .map(|(i, (le, n))| (*le, n.saturating_sub(earlier.get(i).map_or(0, |b| b.1))))
            .find(|(_, n)| *n >= rank)
            .map(|(le, _)| le);
        out.insert(entity_type, (total, bound));
    }
    out
}

fn refused(metrics: &Value) -> u64 {
    metrics["spendgate_refused_reservations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["value"].as_f64().unwrap_or(0.0) as u64)
        .sum()
}

struct Phase {
    clients: usize,
    seconds: u64,
    ok: u64,
    not_2xx: BTreeMap<u16, u64>,
    errors: BTreeMap<String, u64>,
    rss_start: f64,
    rss_end: f64,
    rss_max: f64,
    latency: Histogram<u64>,
    elapsed: Duration,
    waits: BTreeMap<String, (u64, Option<f64>)>,
    refused: u64,
}

async fn phase(
    http: &reqwest::Client,
    server: &Server,
    target: &(String, HeaderMap),
    clients: usize,
    seconds: u64,
) -> Result<Phase, BoxError> {
    let pid = server.child.id();
    let before = metrics(http, &server.proxy).await?;
    let rss_start = rss_mib(pid);
    let stop = Arc::new(AtomicBool::new(false));
    let rss_max = Arc::new(AtomicU64::new(rss_start.to_bits()));
    let sampler = {
        let (stop, rss_max) = (stop.clone(), rss_max.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let now = rss_mib(pid);
                if now > f64::from_bits(rss_max.load(Ordering::Relaxed)) {
                    rss_max.store(now.to_bits(), Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };
    let latency = Arc::new(Mutex::new(histogram()));
    let statuses = Arc::new(Mutex::new(BTreeMap::<u16, u64>::new()));
    let ok = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Mutex::new(BTreeMap::<String, u64>::new()));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::with_capacity(clients);
    for _ in 0..clients {
        let (http, (url, headers)) = (http.clone(), target.clone());
        let (latency, statuses, ok, errors) = (latency.clone(), statuses.clone(), ok.clone(), errors.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = histogram();
            while Instant::now() < deadline {
                let sent = Instant::now();
                let answer = match http.post(&url).headers(headers.clone()).body(body(false)).send().await {
                    Ok(r) => {
                        let status = r.status();
                        r.bytes().await.map(|_| status)
                    }
                    Err(e) => Err(e),
                };
                match answer {
                    Ok(status) => {
                        mine.saturating_record(micros(sent.elapsed()));
                        if status.is_success() {
                            ok.fetch_add(1, Ordering::Relaxed);
                        } else {
                            *statuses.lock().unwrap().entry(status.as_u16()).or_default() += 1;
                        }
                    }
                    Err(e) => {
                        *errors.lock().unwrap().entry(error_kind(&e)).or_default() += 1;
                    }
                }
            }
            latency.lock().unwrap().add(&mine).expect("same bounds");
        }));
    }
    for task in tasks {
        task.await?;
    }
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let _ = sampler.await;
    let rss_end = rss_mib(pid);
    let after = metrics(http, &server.proxy).await?;
    let latency = latency.lock().unwrap().clone();
    let not_2xx = statuses.lock().unwrap().clone();
    let errors = errors.lock().unwrap().clone();
    Ok(Phase {
        clients,
        seconds,
        ok: ok.load(Ordering::Relaxed),
        not_2xx,
        errors,
        rss_start,
        rss_end,
        rss_max: f64::from_bits(rss_max.load(Ordering::Relaxed)),
        latency,
        elapsed,
        waits: wait_p99(&before, &after),
        refused: refused(&after).saturating_sub(refused(&before)),
    })
}

/// A transport error's kind: the stage reqwest failed in (connect, request, body,
/// timeout) and the innermost cause (for example `connection reset by peer`,
/// `connection closed before message completed`, `Address not available`).
fn error_kind(e: &reqwest::Error) -> String {
    let stage = if e.is_connect() {
        "connect"
    } else if e.is_timeout() {
        "timeout"
    } else if e.is_body() || e.is_decode() {
        "body"
    } else if e.is_request() {
        "request"
    } else {
        "other"
    };
    let mut cause: &dyn std::error::Error = e;
    while let Some(inner) = cause.source() {
        cause = inner;
    }
    format!("{stage}: {cause}")
}

pub async fn run() -> Result<(), BoxError> {
    let seconds: u64 = env_or("PROXY_BENCH_SOAK_SECONDS", 300);
    let phases: Vec<usize> = std::env::var("PROXY_BENCH_SOAK_CLIENTS")
        .unwrap_or_else(|_| "32,256".to_owned())
        .split(',')
        .filter_map(|c| c.trim().parse().ok())
        .collect();
    let mock = start_mock();
    let dir = tempfile::tempdir()?;
    let server = start_server(&format!("sqlite://{}", dir.path().join("soak.db").display()), &mock.base);
    let admin = reqwest::Client::builder().cookie_store(true).build()?;
    let raw_key = set_up(&admin, &server.control).await?;
    let mut headers = HeaderMap::new();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("authorization", HeaderValue::from_static("Bearer sk-bench"));
    headers.insert("x-service-key", HeaderValue::from_str(&raw_key)?);
    headers.insert("x-service-tags", HeaderValue::from_static(r#"{"team":"bench"}"#));
    let target = (format!("{}/v1/chat/completions", server.proxy), headers);
    let http = reqwest::Client::builder().tcp_nodelay(true).pool_max_idle_per_host(usize::MAX).build()?;
    let neighbour = Neighbour::start();
    println!(
        "proxy soak: {phases:?} clients, {seconds} s each, a busy loop beside (pid {})",
        neighbour.0.id()
    );
    println!();
    println!("| clients | seconds | 2xx | non-2xx | errors | RSS start → end (max) MiB | req/s | p50 ms | p99 ms | mailbox wait p99 (per entity type) | refused |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut results = Vec::new();
    for clients in phases {
        let p = phase(&http, &server, &target, clients, seconds).await?;
        let not_2xx: u64 = p.not_2xx.values().sum();
        let waits: Vec<String> = p
            .waits
            .iter()
            .map(|(t, (n, bound))| match bound {
                Some(b) => format!("{t} ≤ {} ms ({n})", b * 1000.0),
                None => format!("{t} > 10 s ({n})"),
            })
            .collect();
        println!(
            "| {} | {} | {} | {}{} | {}{} | {:.0} → {:.0} ({:.0}) | {:.0} | {:.1} | {:.1} | {} | {} |",
            p.clients,
            p.seconds,
            p.ok,
            not_2xx,
            if p.not_2xx.is_empty() { String::new() } else { format!(" {:?}", p.not_2xx) },
            p.errors.values().sum::<u64>(),
            if p.errors.is_empty() { String::new() } else { format!(" {:?}", p.errors) },
            p.rss_start,
            p.rss_end,
            p.rss_max,
            p.ok as f64 / p.elapsed.as_secs_f64(),
            pct(&p.latency, 0.5) as f64 / 1000.0,
            pct(&p.latency, 0.99) as f64 / 1000.0,
            waits.join(", "),
            p.refused,
        );
        results.push(p);
    }
    drop(neighbour);
    let failed: u64 =
        results.iter().map(|p| p.not_2xx.values().sum::<u64>() + p.errors.values().sum::<u64>()).sum();
    println!();
    println!("non-2xx and transport errors over all phases: {failed} (goal 0)");
    drop(server);
    drop(mock);
    Ok(())
}
