#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss,
    reason = "a benchmark harness fails loudly"
)]
//! Dashboard reads at scale: loads realistic cost events (tags `team` and
//! `customer`, sessions of 50 events, 6 models, 10 API keys, spread over 35 days)
//! straight into the database with multi-row SQL INSERTs while the server is down,
//! marks the rollup back-fill pending, starts the release server (which back-fills
//! the rollups from the raw events before it listens, the same path a database from
//! before the rollups takes), then times each read over HTTP: median of 5 (after one
//! warm-up). Reported, not asserted. Besides the dashboard reads: the event list
//! (unfiltered, by session, by a rare tag, by a tag and a model), budget spend
//! sources (API key, tag, customer budgets, all time) and the margins' unmatched
//! list (all-time cost per `customer` tag value), which read the rollups too.
//!
//! Run: `cargo bench --bench reads` (SQLite); `READS_BENCH_BACKEND=postgres` for
//! PostgreSQL at 127.0.0.1:5432; `READS_BENCH_EVENTS=10000000` for 10M (default 1M).

use std::time::{Duration, Instant};

use diesel_async::SimpleAsyncConnection;
use serde_json::{json, Value};
use spendgate::db::Pool;

mod support;

const DAY_MS: i64 = 86_400_000;
const MODELS: [(&str, &str); 6] = [
    ("openai", "gpt-4o"),
    ("openai", "gpt-4o-mini"),
    ("anthropic", "claude-sonnet-4"),
    ("anthropic", "claude-haiku-4"),
    ("google", "gemini-2.0-flash"),
    ("google", "gemini-2.5-pro"),
];
/// Events inserted per INSERT statement, and per transaction.
const ROWS_PER_INSERT: usize = 500;
const ROWS_PER_TX: usize = 50_000;

/// Signs up, creates the API keys; returns the organization's key ids.
async fn prepare(base: &str) -> Vec<String> {
    let http = reqwest::Client::builder().cookie_store(true).build().expect("client");
    let r = http
        .post(format!("{base}/api/auth/signup"))
        .json(&json!({ "email": "bench@example.com", "password": "bench-password" }))
        .send()
        .await
        .expect("signup");
    assert!(r.status().is_success());
    let mut ids = Vec::new();
    for i in 0..10 {
        let key: Value = http
            .post(format!("{base}/api/keys"))
            .json(&json!({ "name": format!("key-{i}") }))
            .send()
            .await
            .expect("key")
            .json()
            .await
            .expect("json");
        let id = key["data"]["id"].as_str().expect("key id");
        ids.push(id.trim_start_matches("svc_key_").to_owned());
    }
    ids
}

async fn org_id(pool: &Pool) -> String {
    use diesel::QueryDsl;
    use diesel_async::RunQueryDsl;
    use spendgate::db::schema::organizations;
    let org: Result<String, spendgate::db::DbError> = async {
        spendgate::with_conn!(pool, read, |conn| {
            Ok(organizations::table.select(organizations::id).first(conn).await?)
        })
    }
    .await;
    org.expect("organization")
}

async fn exec(pool: &Pool, sql: &str) {
    let r: Result<(), spendgate::db::DbError> = async {
        spendgate::with_conn!(pool, write, |conn| {
            conn.batch_execute(sql).await.map_err(spendgate::db::DbError::from)
        })
    }
    .await;
    r.expect("bulk SQL");
}

/// One event's row and its two tag rows, as SQL value tuples.
fn event_sql(i: usize, n: usize, now: i64, org: &str, keys: &[String], ev: &mut String, tags: &mut String) {
    let id = format!("00000000-0000-4000-8000-{i:012}");
    let (provider, model) = MODELS[i % MODELS.len()];
    let key = &keys[(i / 7) % keys.len()];
    let session = i / 50;
    let team = format!("team-{}", session % 20);
    let customer = format!("cust-{}", session % 1000);
    // Spread evenly over 35 days, oldest first; a session's events are seconds apart.
    let at = now - 35 * DAY_MS + (i as i64) * (35 * DAY_MS / n as i64);
    let cost = 200 + (i as i64 * 7919) % 50_000;
    let estimated = if i % 100 == 99 { "TRUE" } else { "FALSE" };
    if !ev.is_empty() {
        ev.push(',');
        tags.push(',');
    }
    ev.push_str(&format!(
        "('{id}','{org}','req-{i}','{key}',NULL,'{provider}','{model}',{},{},0,0,{cost},{},NULL,'sess-{session}',\
         '{session:032x}','llm',NULL,NULL,'{{\"team\":\"{team}\",\"customer\":\"{customer}\"}}','{customer}',\
         '{{\"input\":{},\"output\":{}}}','sdk','approved',NULL,{estimated},{at},NULL,0,'req-{i}')",
        1000 + i % 3000,
        200 + i % 500,
        300 + i % 2000,
        cost / 3,
        cost - cost / 3,
    ));
    tags.push_str(&format!(
        "('{id}','{org}','team','{team}',{at}),('{id}','{org}','customer','{customer}',{at})"
    ));
}

const EVENT_COLUMNS: &str = "id, org_id, request_id, api_key_id, user_id, provider, model, input_tokens, \
    output_tokens, cached_input_tokens, reasoning_tokens, cost_microdollars, duration_ms, upstream_duration_ms, \
    session_id, trace_id, event_type, tool_name, tool_server, tags, customer_id, cost_breakdown, source, \
    budget_status, action_id, estimated, created_at, tool_calls_requested, tool_definition_tokens, dedup_key";

/// Inserts `n` events (and their tags) with multi-row INSERTs, `ROWS_PER_TX` a
/// transaction.
async fn load(pool: &Pool, org: &str, keys: &[String], n: usize, now: i64) {
    let mut i = 0;
    while i < n {
        let mut script = String::from("BEGIN;");
        let tx_end = (i + ROWS_PER_TX).min(n);
        while i < tx_end {
            let end = (i + ROWS_PER_INSERT).min(tx_end);
            let (mut ev, mut tags) = (String::new(), String::new());
            for j in i..end {
                event_sql(j, n, now, org, keys, &mut ev, &mut tags);
            }
            script.push_str(&format!("INSERT INTO cost_events ({EVENT_COLUMNS}) VALUES {ev};"));
            script.push_str(&format!(
                "INSERT INTO cost_event_tags (event_id, org_id, tag_key, tag_value, created_at) VALUES {tags};"
            ));
            i = end;
        }
        script.push_str("COMMIT;");
        exec(pool, &script).await;
    }
}

/// Creates a budget (no reset: its sources cover all time); returns its id.
async fn budget(http: &reqwest::Client, base: &str, entity_type: &str, entity_id: &str) -> String {
    let body = json!({ "entityType": entity_type, "entityId": entity_id, "maxBudgetMicrodollars": 1_000_000_000_i64 });
    let r: Value = http
        .post(format!("{base}/api/budgets"))
        .json(&body)
        .send()
        .await
        .expect("budget")
        .json()
        .await
        .expect("json");
    r["id"].as_str().unwrap_or_else(|| panic!("budget: {r}")).to_owned()
}

/// Median of 5 timed GETs (after one warm-up) of `path`.
async fn time(http: &reqwest::Client, base: &str, path: &str) -> Duration {
    let get = || async {
        let r = http.get(format!("{base}{path}")).send().await.expect("request");
        assert!(r.status().is_success(), "{path}: {}", r.status());
        r.bytes().await.expect("body");
    };
    get().await;
    let mut times = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        get().await;
        times.push(t.elapsed());
    }
    times.sort();
    times[2]
}

async fn run(label: &str, db_url: &str, n: usize) {
    let keys = {
        let server = support::start(db_url, &[], "READS_LOG");
        prepare(&server.control).await
    };
    let pool = Pool::connect(db_url, 2).expect("pool");
    let org = org_id(&pool).await;
    let now = spendgate::util::time::now_ms();
    let t = Instant::now();
    load(&pool, &org, &keys, n, now).await;
    exec(&pool, "UPDATE rollup_backfill SET done_at = NULL").await;
    // Margins are a paid-tier read.
    exec(&pool, "UPDATE organizations SET plan = 'pro'").await;
    let loaded = t.elapsed();
    drop(pool);

    let t = Instant::now();
    let server = support::start(db_url, &[], "READS_LOG");
    let backfill = t.elapsed();
    println!(
        "{label}: {n} events loaded in {:.1} s ({:.0}/s, SQL bulk insert); rollups back-filled at start in {:.1} s",
        loaded.as_secs_f64(),
        n as f64 / loaded.as_secs_f64(),
        backfill.as_secs_f64()
    );
    if db_url.starts_with("postgres") {
        // A database that grew over time has planner statistics (autovacuum's
        // ANALYZE); one loaded in bulk a minute ago has none, and without them
        // PostgreSQL scans `cost_event_tags` whole for a lookup by 500 event ids.
        let pool = Pool::connect(db_url, 1).expect("pool");
        exec(&pool, "ANALYZE").await;
    }
    let base = server.control.clone();
    let http = reqwest::Client::builder().cookie_store(true).build().expect("client");
    let r = http
        .post(format!("{base}/api/auth/login"))
        .json(&json!({ "email": "bench@example.com", "password": "bench-password" }))
        .send()
        .await
        .expect("login");
    assert!(r.status().is_success());
    let session = format!("sess-{}", (n / 50) / 2);
    let reads = [
        "/api/cost-events/summary?period=30d".to_owned(),
        "/api/cost-events/summary?period=90d".to_owned(),
        "/api/cost-events/attribution?groupBy=team".to_owned(),
        "/api/cost-events/attribution?groupBy=api_key".to_owned(),
        "/api/cost-events/attribution/team-7?groupBy=team".to_owned(),
        format!("/api/cost-events?sessionId={session}"),
        "/api/cost-events?tag.customer=cust-7".to_owned(),
        "/api/cost-events?tag.team=team-7&model=gpt-4o".to_owned(),
        "/api/cost-events".to_owned(),
        format!("/api/cost-events/sessions/{session}"),
        "/api/cost-events/tag-keys".to_owned(),
    ];
    let mut reads = reads.to_vec();
    for (entity_type, entity_id) in [
        ("api_key", format!("svc_key_{}", keys[0])),
        ("tag", "team=team-7".to_owned()),
        ("customer", "cust-7".to_owned()),
    ] {
        let id = budget(&http, &base, entity_type, &entity_id).await;
        reads.push(format!("/api/budgets/{id}/sources"));
    }
    reads.push("/api/margins/unmatched".to_owned());
    for path in &reads {
        let median = time(&http, &base, path).await;
        println!("{label:<9} {:>9.1} ms  GET {path}", median.as_secs_f64() * 1000.0);
    }
}

fn main() {
    let n = std::env::var("READS_BENCH_EVENTS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let postgres = std::env::var("READS_BENCH_BACKEND").is_ok_and(|b| b == "postgres");
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        if postgres {
            let db = support::PgDb::create("sg_reads").expect("PostgreSQL at 127.0.0.1:5432");
            run("postgres", &db.url(), n).await;
        } else {
            let dir = tempfile::tempdir().expect("tempdir");
            run("sqlite", &format!("sqlite://{}", dir.path().join("reads.db").display()), n).await;
            // `BENCH_KEEP_DB=1` keeps the SQLite file too, for a look at its plans.
            if std::env::var("BENCH_KEEP_DB").is_ok_and(|v| v == "1") {
                eprintln!("kept database {}", dir.keep().join("reads.db").display());
            }
        }
    });
}
