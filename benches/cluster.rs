#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a benchmark harness fails loudly"
)]
//! Several instances on one PostgreSQL (issue #28): proxied throughput of one hot key
//! with strict budgets on the key, its user and the tag `team=bench`, driven by `wrk`
//! at a mock OpenAI upstream that answers at once, in the same run:
//!
//! - one embedded SQLite instance (the reference each PostgreSQL instance is held to);
//! - one PostgreSQL instance, then two on the same database (each driven by its own
//!   `wrk` with half the connections), with budget leases on (the default);
//! - the same two with leases off (`SPENDGATE_BUDGET_LEASES=0`: a database round trip
//!   per call and budget, as before leases).
//!
//! After each phase the budgets are read back once the calls are recorded: spend must
//! be the sum of the recorded events and nothing may stay reserved once the leases
//! went quiet. Reported, not asserted (the figures share 2 cores with `wrk` and the
//! mock; the ratios are what to read).
//!
//! Run: `cargo bench --bench cluster` (env `CLUSTER_BENCH_SECONDS`, default 10;
//! `CLUSTER_BENCH_CONNECTIONS`, default 32; needs `wrk` and PostgreSQL at
//! 127.0.0.1:5432).

use std::process::Command;
use std::time::{Duration, Instant};

use actix_web::{web, App, HttpResponse, HttpServer};
use serde_json::{json, Value};

mod support;

const COMPLETION: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"Hello there!"},"finish_reason":"stop"}],"usage":{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30}}"#;

/// The mock upstream, on its own thread and actix system (one worker).
fn start_mock() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        actix_web::rt::System::new().block_on(async move {
            let answer = || async { HttpResponse::Ok().content_type("application/json").body(COMPLETION) };
            HttpServer::new(move || App::new().route("/v1/chat/completions", web::post().to(answer)))
                .workers(1)
                .tcp_nodelay(true)
                .disable_signals()
                .listen(listener)
                .expect("listen")
                .run()
                .await
                .expect("mock");
        });
    });
    format!("http://127.0.0.1:{port}")
}

/// Signs up, creates a key and its three strict budgets; returns the raw key and the
/// key's id.
async fn set_up(control: &str) -> (String, String) {
    let http = reqwest::Client::builder().cookie_store(true).build().expect("client");
    let post = |path: &str, body: Value| {
        http.post(format!("{control}{path}")).header("origin", control).json(&body).send()
    };
    let r = post("/api/auth/signup", json!({ "email": "bench@example.com", "password": "bench-password" }));
    assert!(r.await.expect("signup").status().is_success());
    let key: Value = post("/api/keys", json!({ "name": "bench" })).await.unwrap().json().await.unwrap();
    let raw = key["data"]["rawKey"].as_str().expect("raw key").to_owned();
    let key_id = key["data"]["id"].as_str().expect("key id").to_owned();
    let session: Value =
        http.get(format!("{control}/api/auth/session")).send().await.unwrap().json().await.unwrap();
    let user_id = session["data"]["user"]["id"].as_str().expect("user id").to_owned();
    for (entity_type, entity_id) in
        [("api_key", key_id.clone()), ("user", user_id), ("tag", "team=bench".to_owned())]
    {
        let budget = json!({ "entityType": entity_type, "entityId": entity_id,
                             "maxBudgetMicrodollars": 1_000_000_000_000_i64, "policy": "strict_block" });
        let r = post("/api/budgets", budget).await.unwrap();
        assert_eq!(r.status().as_u16(), 201, "budget {entity_type}");
    }
    (raw, key_id)
}

/// The `wrk` script: distinct bodies (loop detection stays on), `prefix` telling the
/// drivers of one run apart; prints `WRK requests errors`.
fn lua(key: &str, prefix: &str) -> String {
    format!(
        r#"wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["X-Service-Key"] = "{key}"
wrk.headers["X-Service-Tags"] = "team=bench"
local n = 0
request = function()
  n = n + 1
  local body = string.format('{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"{prefix} %010d"}}],"max_tokens":50}}', n)
  return wrk.format(nil, "/v1/chat/completions", nil, body)
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRK %d %d %d %d\n", summary.requests,
    e.connect + e.read + e.write + e.status + e.timeout, latency:percentile(50), latency:percentile(99)))
end
"#
    )
}

struct Driven {
    requests: u64,
    errors: u64,
    p50_us: u64,
    p99_us: u64,
}

/// Drives each proxy with its own `wrk` (the connections split between them), all at
/// once; returns what each measured.
fn drive(proxies: &[&str], key: &str, connections: usize, seconds: u64) -> Vec<Driven> {
    let dir = tempfile::tempdir().expect("temp dir");
    let per = (connections / proxies.len()).max(1);
    let children: Vec<_> = proxies
        .iter()
        .enumerate()
        .map(|(i, proxy)| {
            let script = dir.path().join(format!("{i}.lua"));
            std::fs::write(&script, lua(key, &format!("i{i}"))).expect("script");
            Command::new("wrk")
                .args(["-t1", &format!("-c{per}"), &format!("-d{seconds}s"), "-s"])
                .arg(&script)
                .arg(proxy)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("wrk (apt-get install -y wrk)")
        })
        .collect();
    children
        .into_iter()
        .map(|child| {
            let out = child.wait_with_output().expect("wrk");
            let text = String::from_utf8_lossy(&out.stdout);
            let line = text.lines().find_map(|l| l.strip_prefix("WRK ")).unwrap_or_else(|| panic!("{text}"));
            let n: Vec<u64> = line.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
            Driven { requests: n[0], errors: n[1], p50_us: n[2], p99_us: n[3] }
        })
        .collect()
}

/// Waits until every call is recorded and the leases went quiet, then prints the key
/// budget's spend against the recorded events (PostgreSQL only).
fn check_recorded(db: &str, key_id: &str) {
    let bare = key_id.trim_start_matches("svc_key_");
    let sql = format!(
        "SELECT b.spend_microdollars, b.reserved_microdollars, \
         (SELECT COALESCE(SUM(cost_microdollars), 0) FROM cost_events WHERE api_key_id = '{bare}') \
         FROM budgets b WHERE b.entity_type = 'api_key' AND b.entity_id = '{key_id}'"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let out = Command::new("psql")
            .args(["-h", "127.0.0.1", "-U", "postgres", "-d", db, "-Atc", &sql])
            .output()
            .expect("psql");
        let row = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let v: Vec<i64> = row.split('|').map(|s| s.parse().unwrap_or(-1)).collect();
        if (v.len() == 3 && v[1] == 0 && v[0] == v[2]) || Instant::now() > deadline {
            let verdict = if v.len() == 3 && v[1] == 0 && v[0] == v[2] { "exact" } else { "NOT EXACT" };
            println!(
                "    key budget: spend {} µ$, reserved {}, recorded events {} µ$: {verdict}",
                v[0], v[1], v[2]
            );
            return;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// CPU time (user + system, µs) of the processes `pids`, from `/proc` (0 elsewhere).
fn cpu_us(pids: &[u32]) -> u64 {
    let tick_us = 1_000_000 / 100; // USER_HZ is 100 on Linux
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command's closing parenthesis: utime is the 12th, stime the 13th.
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<u64> = rest.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
            Some((f.get(11)? + f.get(12)?) * tick_us)
        })
        .sum()
}

fn postgres_pids() -> Vec<u32> {
    let out = Command::new("pgrep").arg("-x").arg("postgres").output().map(|o| o.stdout).unwrap_or_default();
    String::from_utf8_lossy(&out).split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// Busy and total jiffies of the whole machine (`/proc/stat`).
fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let total: u64 = f.iter().sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

fn report(name: &str, driven: &[Driven], seconds: u64) -> f64 {
    let total: u64 = driven.iter().map(|d| d.requests).sum();
    let errors: u64 = driven.iter().map(|d| d.errors).sum();
    let rate = total as f64 / seconds as f64;
    let each: Vec<String> = driven
        .iter()
        .map(|d| {
            format!("{:.0}/s p50 {} µs p99 {} µs", d.requests as f64 / seconds as f64, d.p50_us, d.p99_us)
        })
        .collect();
    println!("{name:<44} {rate:>8.0} req/s  errors {errors}  [{}]", each.join("; "));
    rate
}

fn phase(
    name: &str,
    urls: (&str, &str),
    env: &[(&str, &str)],
    instances: usize,
    seconds: u64,
    connections: usize,
) -> f64 {
    let (db_url, upstream) = urls;
    let mut env: Vec<(&str, &str)> = env.to_vec();
    env.push(("SPENDGATE_UPSTREAM_OPENAI", upstream));
    env.push(("SPENDGATE_SECRET_KEY", "cluster-bench-secret-key-0123456789abcdef"));
    let servers: Vec<support::Server> =
        (0..instances).map(|_| support::start(db_url, &env, "CLUSTER_BENCH_LOG")).collect();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (key, key_id) = rt.block_on(set_up(&servers[0].control));
    // Warm up: connections, actors, leases.
    let proxies: Vec<&str> = servers.iter().map(|s| s.proxy.as_str()).collect();
    drive(&proxies, &key, connections, 1);
    let pids: Vec<u32> = servers.iter().map(support::Server::pid).collect();
    let pg = postgres_pids();
    let (cpu0, pg0, machine0) = (cpu_us(&pids), cpu_us(&pg), machine_jiffies());
    let driven = drive(&proxies, &key, connections, seconds);
    let (cpu1, pg1, machine1) = (cpu_us(&pids), cpu_us(&pg), machine_jiffies());
    let rate = report(name, &driven, seconds);
    let calls = driven.iter().map(|d| d.requests).sum::<u64>().max(1) as f64;
    let busy = (machine1.0 - machine0.0) as f64 / ((machine1.1 - machine0.1).max(1)) as f64;
    println!(
        "    CPU per call: spendgate {:.0} µs (all instances), PostgreSQL {:.0} µs; machine busy {:.0} %",
        (cpu1 - cpu0) as f64 / calls,
        (pg1 - pg0) as f64 / calls,
        busy * 100.0
    );
    if let Some(db) = db_url.rsplit('/').next().filter(|_| db_url.starts_with("postgres")) {
        check_recorded(db, &key_id);
    }
    rate
}

fn main() {
    let seconds: u64 = std::env::var("CLUSTER_BENCH_SECONDS").ok().and_then(|v| v.parse().ok()).unwrap_or(10);
    let connections: usize =
        std::env::var("CLUSTER_BENCH_CONNECTIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(32);
    let upstream = start_mock();
    println!(
        "cluster bench: {connections} connections, {seconds} s per phase, hot key with key/user/tag budgets"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    let embedded = phase("SQLite, one instance", (&sqlite, &upstream), &[], 1, seconds, connections);
    let mut rates = Vec::new();
    for (name, leases, instances) in [
        ("PostgreSQL, one instance, leases", "1", 1),
        ("PostgreSQL, two instances, leases", "1", 2),
        ("PostgreSQL, one instance, leases off", "0", 1),
        ("PostgreSQL, two instances, leases off", "0", 2),
    ] {
        let Some(db) = support::PgDb::create("spendgate_cluster_bench") else {
            println!("PostgreSQL at 127.0.0.1:5432 does not answer: PostgreSQL phases skipped");
            return;
        };
        let env = [("SPENDGATE_BUDGET_LEASES", leases)];
        rates.push(phase(name, (&db.url(), &upstream), &env, instances, seconds, connections));
    }
    let (one, pair, one_off, pair_off) = (rates[0], rates[1], rates[2], rates[3]);
    println!();
    println!("leases: pair / one instance = {:.2} (target ≥ 1.6)", pair / one);
    println!("leases: each of the pair / SQLite = {:.2} (target ≥ 0.8)", pair / 2.0 / embedded);
    println!("leases: one PostgreSQL instance / SQLite = {:.2}", one / embedded);
    println!(
        "leases off: pair / one = {:.2}; each of the pair / SQLite = {:.2}",
        pair_off / one_off,
        pair_off / 2.0 / embedded
    );
}
