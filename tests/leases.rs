//! Budget leases (PostgreSQL, shared budgets): each instance admits calls against a
//! slice of a budget's room it holds in `budget_leases`, grown by one conditional
//! update. These tests show the slices come back (quiet, changed budget, another
//! instance refused, an instance killed) and that the cap is still reached exactly.
//!
//! PostgreSQL only: on SQLite one process owns the budgets and there is nothing to lease.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::json;

use crate::support::{backend_is_postgres, create_key, key_client, Client, Server, TestApp};

#[derive(QueryableByName, Debug, Clone, Copy, PartialEq, Eq)]
struct Figures {
    #[diesel(sql_type = BigInt)]
    spend: i64,
    #[diesel(sql_type = BigInt)]
    reserved: i64,
    /// What the lease rows on the budget hold.
    #[diesel(sql_type = BigInt)]
    leased: i64,
}

async fn figures(conn: &mut AsyncPgConnection, key_id: &str) -> Figures {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(
        "SELECT b.spend_microdollars AS spend, b.reserved_microdollars AS reserved, \
         COALESCE((SELECT SUM(l.amount_microdollars) FROM budget_leases l WHERE l.budget_id = b.id), 0)::BIGINT AS leased \
         FROM budgets b WHERE b.entity_type = 'api_key' AND b.entity_id = $1",
    )
    .bind::<diesel::sql_types::Text, _>(key_id)
    .get_result(conn)
    .await
    .expect("budget figures")
}

/// An MCP tool event costing `cost`: reserved, then committed before it is answered.
fn tool(cost: i64) -> serde_json::Value {
    json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": cost })
}

async fn strict_key_budget(owner: &Client, key_id: &str, limit: i64) {
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": limit, "policy": "strict_block" }),
        )
        .await;
    assert!(r.status == 201 || r.status == 200, "{r:?}");
}

/// An instance on a fresh database, its owner, and a key with a strict budget of `limit`.
async fn key_with_budget(limit: i64) -> (TestApp, Client, String, String) {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    strict_key_budget(&owner, &key_id, limit).await;
    (app, owner, key_id, raw_key)
}

/// `spendgate_budget_lease_operations_total{operation}` of one instance.
async fn lease_operations(proxy: &Client, operation: &str) -> f64 {
    let metrics = proxy.get("/health/metrics").await;
    metrics.body["spendgate_budget_lease_operations_total"]
        .as_array()
        .and_then(|v| v.iter().find(|m| m["labels"]["operation"] == operation))
        .and_then(|m| m["value"].as_f64())
        .unwrap_or(0.0)
}

/// Polls until `done` holds of the budget's figures, or fails with `what` after `secs`.
async fn until(
    conn: &mut AsyncPgConnection,
    key_id: &str,
    secs: u64,
    what: &str,
    done: impl Fn(&Figures) -> bool,
) -> Figures {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let f = figures(conn, key_id).await;
        if done(&f) {
            return f;
        }
        assert!(Instant::now() < deadline, "{what}: {f:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn calls_take_their_room_from_a_lease_that_returns_it_when_quiet() {
    if !backend_is_postgres() {
        return;
    }
    let (app, _owner, key_id, raw_key) = key_with_budget(1_000_000_000).await;
    let proxy = key_client(&app.server.proxy, &raw_key);
    for _ in 0..48 {
        let r = proxy.post("/v1/mcp/events", tool(100)).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    // A slice holds at least 16 calls of the size in hand: 48 calls grew the lease a
    // few times, not 48.
    let grown = lease_operations(&app.proxy(), "grown").await;
    assert!((1.0..=6.0).contains(&grown), "lease grown {grown} times for 48 calls");
    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    let f = figures(&mut conn, &key_id).await;
    assert_eq!(f.spend, 4_800, "{f:?}");
    assert!(f.reserved > 0 && f.reserved == f.leased, "the lease holds room between calls: {f:?}");
    let held = proxy.get("/health/metrics").await;
    assert!(held.text.contains("spendgate_budget_lease_microdollars"), "{}", held.text);
    // Quiet for the idle time (1 s by default): the room goes back.
    let f = until(&mut conn, &key_id, 10, "a quiet lease kept its room", |f| f.reserved == 0).await;
    assert_eq!((f.spend, f.leased), (4_800, 0));
    assert!(lease_operations(&app.proxy(), "returned").await >= 1.0);
}

/// `spendgate_budget_lease_microdollars` of a key's budget on one instance, `None` when
/// the instance has no series for it.
async fn lease_series(proxy: &Client, key_id: &str) -> Option<f64> {
    let metrics = proxy.get("/health/metrics").await;
    metrics.body["spendgate_budget_lease_microdollars"]
        .as_array()?
        .iter()
        .find(|m| m["labels"]["entity_type"] == "api_key" && m["labels"]["entity_id"] == key_id)
        .and_then(|m| m["value"].as_f64())
}

/// Polls the key's lease series until `done` holds of it, or fails with `what` after 10 s.
async fn until_series(proxy: &Client, key_id: &str, what: &str, done: impl Fn(Option<f64>) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let series = lease_series(proxy, key_id).await;
        if done(series) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {series:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// An instance shows a budget's lease series while the lease holds room, and has none
/// once the room went back (quiet, or its budget deleted): it does not keep a series
/// for every budget it ever served. A lease taken again right after has it again.
#[tokio::test]
async fn a_budget_has_a_lease_series_only_while_its_lease_holds_room() {
    if !backend_is_postgres() {
        return;
    }
    let app = TestApp::start_with(&[("SPENDGATE_BUDGET_LEASE_IDLE_MS", "300".to_owned())]).await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    strict_key_budget(&owner, &key_id, 1_000_000_000).await;
    let proxy = key_client(&app.server.proxy, &raw_key);
    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    for round in ["leased", "leased again"] {
        let r = proxy.post("/v1/mcp/events", tool(100)).await;
        assert_eq!(r.status, 201, "{r:?}");
        until_series(&proxy, &key_id, &format!("{round}: no series"), |v| v.is_some_and(|v| v > 0.0)).await;
        until(&mut conn, &key_id, 10, &format!("{round}: a quiet lease kept its room"), |f| f.reserved == 0)
            .await;
        until_series(&proxy, &key_id, &format!("{round}: a series after the return"), |v| v.is_none()).await;
    }

    // An instance that keeps its room for a minute: the lease goes with its budget.
    let holder = Server::start(&app.db.url, &[("SPENDGATE_BUDGET_LEASE_IDLE_MS", "60000".to_owned())]);
    let on_holder = key_client(&holder.proxy, &raw_key);
    let r = on_holder.post("/v1/mcp/events", tool(100)).await;
    assert_eq!(r.status, 201, "{r:?}");
    until_series(&on_holder, &key_id, "no series on the holder", |v| v.is_some_and(|v| v > 0.0)).await;
    let budgets = owner.get("/api/budgets").await;
    let budget = budgets.body["data"].as_array().unwrap().iter().find(|b| b["entityId"] == key_id.as_str());
    let id = budget.and_then(|b| b["id"].as_str()).unwrap_or_else(|| panic!("{budgets:?}"));
    let r = owner.delete(&format!("/api/budgets/{id}")).await;
    assert!(r.status == 200 || r.status == 204, "{r:?}");
    until_series(&on_holder, &key_id, "a series after the budget was deleted", |v| v.is_none()).await;
}

/// A lowered limit made through one instance reaches the instance holding the lease
/// through the change feed: it returns its free room at once, not when it goes quiet.
#[tokio::test]
async fn a_budget_change_returns_the_leased_room_on_every_instance() {
    if !backend_is_postgres() {
        return;
    }
    let (app, owner, key_id, raw_key) = key_with_budget(1_000_000_000).await;
    // The holder would keep its room for a minute on its own.
    let holder = Server::start(&app.db.url, &[("SPENDGATE_BUDGET_LEASE_IDLE_MS", "60000".to_owned())]);
    let r = key_client(&holder.proxy, &raw_key).post("/v1/mcp/events", tool(100)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    let f = figures(&mut conn, &key_id).await;
    assert!(f.leased > 0, "{f:?}");
    strict_key_budget(&owner, &key_id, 500_000_000).await;
    let f =
        until(&mut conn, &key_id, 10, "the holder kept its room after the change", |f| f.reserved == 0).await;
    assert_eq!((f.spend, f.leased), (100, 0));
    // It grows again under the new limit.
    let r = key_client(&holder.proxy, &raw_key).post("/v1/mcp/events", tool(100)).await;
    assert_eq!(r.status, 201, "{r:?}");
    assert_eq!(figures(&mut conn, &key_id).await.spend, 200);
}

/// Room one instance holds unused is not lost to another: refused, the other asks
/// every instance for its unused room back, waits a moment and is admitted; the budget
/// is spent to exactly its limit.
#[tokio::test]
async fn an_instance_refused_gets_the_room_another_holds_unused() {
    if !backend_is_postgres() {
        return;
    }
    const COST: i64 = 100;
    // The holder's first call leases 16 calls' worth (1,600 of 6,800: a quarter of the
    // room is more); the other finds a quarter of what is left below its slice and is
    // arbitrated call by call.
    const LIMIT: i64 = 6_800;
    let (app, _owner, key_id, raw_key) = key_with_budget(LIMIT).await;
    let holder = Server::start(&app.db.url, &[("SPENDGATE_BUDGET_LEASE_IDLE_MS", "60000".to_owned())]);
    let r = key_client(&holder.proxy, &raw_key).post("/v1/mcp/events", tool(COST)).await;
    assert_eq!(r.status, 201, "{r:?}");
    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    assert_eq!(figures(&mut conn, &key_id).await.leased, 1_500, "the holder's slice after its call");
    let other = key_client(&app.server.proxy, &raw_key);
    let mut admitted = 0;
    loop {
        let r = other.post("/v1/mcp/events", tool(COST)).await;
        match r.status {
            201 => admitted += 1,
            429 => break,
            _ => panic!("{r:?}"),
        }
    }
    let f = figures(&mut conn, &key_id).await;
    assert_eq!(
        admitted,
        (LIMIT - COST) / COST,
        "the other instance spent the holder's unused room too: {f:?}"
    );
    assert_eq!(f.spend, LIMIT, "spent to exactly the limit: {f:?}");
    assert_eq!((f.reserved, f.leased), (0, 0), "{f:?}");
}

/// One of two instances is killed (SIGKILL) in the middle of a burst: the room its
/// lease held is stranded until its heartbeat lapses, then reaped, and the survivor
/// spends the budget to exactly its limit. Nothing is counted twice or lost: the spend
/// is the sum of the recorded events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_instance_leaves_its_room_to_the_survivor_once_its_heartbeat_lapses() {
    if !backend_is_postgres() {
        return;
    }
    const COST: i64 = 100;
    const LIMIT: i64 = 20_000;
    let (app, _owner, key_id, raw_key) = key_with_budget(LIMIT).await;
    let mut victim = Server::start(&app.db.url, &[]);
    let survivor = key_client(&app.server.proxy, &raw_key);
    let doomed = key_client(&victim.proxy, &raw_key);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicUsize::new(0));
    let mut burst = Vec::new();
    for _ in 0..4 {
        let (doomed, stop, sent) = (doomed.clone(), stop.clone(), sent.clone());
        burst.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                // The kill cuts some of these off: their answers never come.
                let sending = doomed.request(reqwest::Method::POST, "/v1/mcp/events").json(&tool(COST));
                if sending.send().await.is_err() {
                    return;
                }
                sent.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    while sent.load(Ordering::Relaxed) < 40 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    victim.kill();
    stop.store(true, Ordering::Relaxed);
    for task in burst {
        task.await.unwrap();
    }
    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    let stranded = figures(&mut conn, &key_id).await;
    assert!(stranded.leased > 0, "the victim died holding room: {stranded:?}");

    // The survivor spends what it can (eight callers, so that it meets the stranded
    // room well before the victim's heartbeat lapses); the victim's room comes back
    // once it has (10 s) and a reaper round (every 2 s) has run.
    let started = Instant::now();
    let refused = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for _ in 0..8 {
        let (survivor, refused, url, key_id) =
            (survivor.clone(), refused.clone(), app.db.url.clone(), key_id.clone());
        callers.push(tokio::spawn(async move {
            let mut conn = AsyncPgConnection::establish(&url).await.unwrap();
            loop {
                let r = survivor.post("/v1/mcp/events", tool(COST)).await;
                match r.status {
                    201 => {}
                    429 => {
                        let f = figures(&mut conn, &key_id).await;
                        if f.spend == LIMIT {
                            return;
                        }
                        refused.fetch_add(1, Ordering::Relaxed);
                        assert!(
                            started.elapsed() < Duration::from_secs(45),
                            "the victim's room never came back: {f:?}"
                        );
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    _ => panic!("{r:?}"),
                }
            }
        }));
    }
    for caller in callers {
        caller.await.unwrap();
    }
    assert!(refused.load(Ordering::Relaxed) > 0, "the survivor never met the stranded room");
    let f = until(&mut conn, &key_id, 10, "room left reserved", |f| f.reserved == 0).await;
    assert_eq!(f.spend, LIMIT);
    assert_eq!(f.leased, 0);
    let bare = key_id.strip_prefix("svc_key_").expect("key id");
    let recorded = scalar(
        &mut conn,
        &format!("SELECT COALESCE(SUM(cost_microdollars), 0)::BIGINT AS n FROM cost_events WHERE api_key_id = '{bare}'"),
    )
    .await;
    assert_eq!(recorded, LIMIT, "the spend is the sum of the recorded events");
    let holding =
        scalar(&mut conn, "SELECT count(*) AS n FROM budget_leases WHERE amount_microdollars > 0").await;
    assert_eq!(holding, 0, "no lease holds room any more");
}

#[derive(QueryableByName)]
struct Scalar {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn scalar(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(sql).get_result::<Scalar>(conn).await.expect("scalar").n
}
