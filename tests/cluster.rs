//! Several instances on one PostgreSQL database: two `spendgate` processes share a
//! strict budget, hammered concurrently through both proxies. The database arbitrates
//! (conditional updates of `budgets.reserved_microdollars`), so together they never
//! pass the limit, and every hold is freed once the storm is over.
//!
//! The arbitration tests are PostgreSQL only: SQLite is single-instance by design (one
//! process owns the file), so there is nothing to arbitrate there.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use diesel::sql_types::BigInt;
use diesel::QueryableByName;
use diesel_async::{AsyncConnection, AsyncPgConnection};
use serde_json::json;

use crate::support::mock::MockUpstream;
use crate::support::{backend_is_postgres, create_key, key_client, Server, TestApp};

/// gpt-4o-mini: $0.15 input, $0.60 output per million tokens (`crates/llm/src/pricing/pricing.json`).
const INPUT_PRICE: i64 = 150_000;
const OUTPUT_PRICE: i64 = 600_000;
const INPUT_TOKENS: i64 = 10;
const OUTPUT_TOKENS: i64 = 20;
/// ceil((10 × 150,000 + 20 × 600,000) / 1,000,000) = ceil(13.5) = 14 µ$. The estimate
/// (a token per prompt byte at the input price plus `max_tokens` 50 at the output
/// price, about 65 µ$) is between four and five times that.
const ACTUAL: i64 = (INPUT_TOKENS * INPUT_PRICE + OUTPUT_TOKENS * OUTPUT_PRICE + 999_999) / 1_000_000;
/// Room for about 20 calls at their actual cost.
const LIMIT: i64 = 20 * ACTUAL;
const TASKS: usize = 16;
const PER_TASK: usize = 12;

#[derive(QueryableByName, Debug, Clone, Copy)]
struct Figures {
    #[diesel(sql_type = BigInt)]
    spend: i64,
    #[diesel(sql_type = BigInt)]
    reserved: i64,
    #[diesel(sql_type = BigInt)]
    max: i64,
}

#[derive(QueryableByName)]
struct Count {
    #[diesel(sql_type = BigInt)]
    n: i64,
}

async fn figures(conn: &mut AsyncPgConnection, entity_id: &str) -> Figures {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(
        "SELECT spend_microdollars AS spend, reserved_microdollars AS reserved, \
         max_budget_microdollars AS max FROM budgets WHERE entity_type = 'api_key' AND entity_id = $1",
    )
    .bind::<diesel::sql_types::Text, _>(entity_id)
    .get_result(conn)
    .await
    .expect("budget figures")
}

async fn count(conn: &mut AsyncPgConnection, sql: &str) -> i64 {
    use diesel_async::RunQueryDsl;
    diesel::sql_query(sql).get_result::<Count>(conn).await.expect("count").n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_never_together_pass_a_strict_budget() {
    storm_on_a_strict_budget("1").await;
}

/// The same with budget leases off: every call is arbitrated by the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_never_together_pass_a_strict_budget_without_leases() {
    storm_on_a_strict_budget("0").await;
}

async fn storm_on_a_strict_budget(leases: &str) {
    if !backend_is_postgres() {
        return;
    }
    let mock = MockUpstream::start();
    let env = [
        ("SPENDGATE_UPSTREAM_OPENAI", mock.base.clone()),
        ("SPENDGATE_SHARED_BUDGETS", "1".to_owned()),
        ("SPENDGATE_BUDGET_LEASES", leases.to_owned()),
    ];
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": LIMIT, "policy": "strict_block",
                // Every call of the storm is the same: no loop detection.
                "loopMaxCalls": 0 }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    let second = Server::start(&app.db.url, &env);
    let proxies = [key_client(&app.server.proxy, &raw_key), key_client(&second.proxy, &raw_key)];

    // The sampler: spend + reserved never passes the limit, at any instant.
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (stop, url, key_id) = (stop.clone(), app.db.url.clone(), key_id.clone());
        tokio::spawn(async move {
            let mut conn = AsyncPgConnection::establish(&url).await.expect("connect");
            let (mut samples, mut max_reserved, mut violations) = (0usize, 0i64, Vec::new());
            while !stop.load(Ordering::Relaxed) {
                let f = figures(&mut conn, &key_id).await;
                samples += 1;
                max_reserved = max_reserved.max(f.reserved);
                if f.spend + f.reserved > f.max {
                    violations.push(f);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            (samples, max_reserved, violations)
        })
    };

    let ok = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let denied = Arc::new(AtomicUsize::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::new()));
    let body = json!({
        "model": "gpt-4o-mini",
        "messages": [{ "role": "user", "content": "hi" }],
        "max_tokens": 50,
        "mock": { "usage": { "input": INPUT_TOKENS, "output": OUTPUT_TOKENS }, "delay_ms": 20 },
    });
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (proxies, ok, denied, unexpected, body) =
            (proxies.clone(), ok.clone(), denied.clone(), unexpected.clone(), body.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_TASK {
                let which = (t + i) % 2;
                let r = proxies[which].post("/v1/chat/completions", body.clone()).await;
                match (r.status, r.code()) {
                    (200, _) => _ = ok[which].fetch_add(1, Ordering::Relaxed),
                    (429, "budget_exceeded") => _ = denied.fetch_add(1, Ordering::Relaxed),
                    _ => unexpected.lock().unwrap().push(format!("instance {which}: {r:?}")),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }

    // Settlement is recorded after the answer: wait until every hold has been freed.
    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let settled = loop {
        let f = figures(&mut conn, &key_id).await;
        let holds = count(&mut conn, "SELECT count(*) AS n FROM budget_reservations").await;
        if (f.reserved == 0 && holds == 0) || Instant::now() > deadline {
            break (f, holds);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    stop.store(true, Ordering::Relaxed);
    let (samples, max_reserved, violations) = sampler.await.unwrap();

    let unexpected = unexpected.lock().unwrap().clone();
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:#?}");
    assert!(violations.is_empty(), "spend + reserved passed the limit {LIMIT}: {violations:?}");
    assert!(samples > 0);
    assert!(max_reserved > 0, "the sampler never saw a shared hold");
    let (f, holds) = settled;
    assert_eq!(f.reserved, 0, "reserved left after the storm: {f:?}");
    assert_eq!(holds, 0, "reservation rows left after the storm");
    let bare = key_id.strip_prefix("svc_key_").expect("key id");
    let recorded = count(
        &mut conn,
        &format!(
            "SELECT COALESCE(SUM(cost_microdollars), 0)::BIGINT AS n FROM cost_events WHERE api_key_id = '{bare}'"
        ),
    )
    .await;
    let (ok0, ok1, denied) =
        (ok[0].load(Ordering::Relaxed), ok[1].load(Ordering::Relaxed), denied.load(Ordering::Relaxed));
    assert_eq!(f.spend, recorded, "spend is the sum of the recorded events ({ok0} + {ok1} calls)");
    assert_eq!(f.spend, i64::try_from(ok0 + ok1).unwrap() * ACTUAL, "every admitted call cost {ACTUAL}");
    assert!(f.spend <= LIMIT, "spend {} passed the limit {LIMIT}", f.spend);
    assert!(denied > 0, "no call was denied");
    assert!(ok0 > 0 && ok1 > 0, "each instance admitted calls: {ok0} and {ok1}");
    drop(second);
}

/// Tool-call spend (`POST /v1/mcp/events`) is arbitrated by the database like a
/// proxied call's: two instances recording tool calls against one strict budget never
/// together pass it, and no hold is left behind.
#[tokio::test]
async fn two_instances_never_together_pass_a_strict_budget_with_tool_events() {
    if !backend_is_postgres() {
        return;
    }
    const TOOL_COST: i64 = 100;
    const TOOL_LIMIT: i64 = 20 * TOOL_COST;
    let env = [("SPENDGATE_SHARED_BUDGETS", "1".to_owned())];
    let app = TestApp::start_with(&env).await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    strict_key_budget(&owner, &key_id, TOOL_LIMIT).await;
    let second = Server::start(&app.db.url, &env);
    let proxies = [key_client(&app.server.proxy, &raw_key), key_client(&second.proxy, &raw_key)];
    let ok = [Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0))];
    let denied = Arc::new(AtomicUsize::new(0));
    let unexpected = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (proxies, ok, denied, unexpected) =
            (proxies.clone(), ok.clone(), denied.clone(), unexpected.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..PER_TASK {
                let which = (t + i) % 2;
                let r = proxies[which].post("/v1/mcp/events", tool(TOOL_COST)).await;
                match (r.status, r.code()) {
                    (201, _) => _ = ok[which].fetch_add(1, Ordering::Relaxed),
                    (429, "budget_exceeded") => _ = denied.fetch_add(1, Ordering::Relaxed),
                    _ => unexpected.lock().unwrap().push(format!("instance {which}: {r:?}")),
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let unexpected = unexpected.lock().unwrap().clone();
    assert!(unexpected.is_empty(), "unexpected answers: {unexpected:#?}");
    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    let f = figures(&mut conn, &key_id).await;
    let holds = count(&mut conn, "SELECT count(*) AS n FROM budget_reservations").await;
    let (ok0, ok1) = (ok[0].load(Ordering::Relaxed), ok[1].load(Ordering::Relaxed));
    assert!(f.spend <= TOOL_LIMIT, "spend {} passed the limit {TOOL_LIMIT} ({ok0} + {ok1} events)", f.spend);
    assert_eq!(
        f.spend,
        i64::try_from(ok0 + ok1).unwrap() * TOOL_COST,
        "spend is the sum of the accepted events"
    );
    assert_eq!((f.reserved, holds), (0, 0), "nothing stays reserved");
    assert!(denied.load(Ordering::Relaxed) > 0, "no event was refused");
    assert!(ok0 > 0 && ok1 > 0, "each instance accepted events: {ok0} and {ok1}");
    drop(second);
}

/// Budget edits through one instance while the other settles calls on the budget: each
/// edit refreshes the busy instance's actor in the middle of its burst, where a row read
/// may or may not already count a commit whose settle is still on its way. The spend the
/// busy instance holds is still exact at the end: every commit counted once (both
/// backends).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refreshes_in_a_burst_count_every_commit_once() {
    const COST: i64 = 7;
    const CALLERS: usize = 8;
    const CALLS: usize = 40;
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    let budget_id = strict_key_budget(&owner, &key_id, 1_000_000_000).await;
    let second = Server::start(&app.db.url, &[]);
    let busy = key_client(&second.proxy, &raw_key);
    let done = Arc::new(AtomicUsize::new(0));
    let mut callers = Vec::new();
    for _ in 0..CALLERS {
        let (busy, done) = (busy.clone(), done.clone());
        callers.push(tokio::spawn(async move {
            for _ in 0..CALLS {
                let r = busy.post("/v1/mcp/events", tool(COST)).await;
                assert_eq!(r.status, 201, "{r:?}");
                done.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    // Edits through the first instance until half the calls are in; each reaches the
    // busy instance's watcher as someone else's change and refreshes its actor. The
    // second half takes longer than the watcher's poll, so the actor's final spend is
    // made of settles after its last refresh as well.
    let mut edits = 0;
    // (A caller that failed stops counting: the loop also ends once none is running.)
    while done.load(Ordering::Relaxed) < CALLERS * CALLS / 2 && !callers.iter().all(|c| c.is_finished()) {
        strict_key_budget(&owner, &key_id, 1_000_000_000).await;
        edits += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for caller in callers {
        caller.await.unwrap();
    }
    let total = i64::try_from(CALLERS * CALLS).unwrap() * COST;
    let list = owner.get("/api/budgets").await;
    let stored =
        list.body["data"].as_array().unwrap().iter().find(|b| b["id"] == budget_id.as_str()).cloned();
    assert_eq!(stored.as_ref().map(|b| b["spendMicrodollars"].clone()), Some(total.into()), "{list:?}");
    // The last edit's refresh is over within the watcher's poll (500 ms); the settles
    // of the last calls are in once their answers are.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let policy = busy.get("/v1/policy").await;
    assert_eq!(
        policy.body["budget"]["spend_microdollars"], total,
        "the busy instance's actor after {edits} edits: {}",
        policy.body["budget"]
    );
    drop(second);
}

/// An MCP tool event costing `cost`.
fn tool(cost: i64) -> serde_json::Value {
    json!({ "toolName": "search", "toolServer": "web", "costMicrodollars": cost })
}

/// Creates (or updates) a `strict_block` budget of `limit` on the key; returns its id.
async fn strict_key_budget(owner: &crate::support::Client, key_id: &str, limit: i64) -> String {
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": limit, "policy": "strict_block" }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    r.body["id"].as_str().unwrap().to_owned()
}

/// Sends tool events of `cost` through `proxy` until one is admitted; each refusal
/// must be `budget_exceeded`, and `what` fails the test after 15 s (a loaded CI
/// host can stall the poller for seconds; the feed itself answers in about one).
async fn admitted_soon(proxy: &crate::support::Client, cost: i64, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = proxy.post("/v1/mcp/events", tool(cost)).await;
        if r.status == 201 {
            return;
        }
        assert_eq!(r.code(), "budget_exceeded", "{r:?}");
        assert!(Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A budget changed through one instance applies on the other within about a second:
/// the other's live actor is refreshed from `budget_changes` (both backends: two
/// processes on one SQLite file is the split control/proxy deployment).
#[tokio::test]
async fn a_budget_change_through_one_instance_reaches_the_other() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    let budget_id = strict_key_budget(&owner, &key_id, 100).await;
    let second = Server::start(&app.db.url, &[]);
    let other = key_client(&second.proxy, &raw_key);
    // The second instance's actor fills the budget, then refuses.
    assert_eq!(other.post("/v1/mcp/events", tool(100)).await.status, 201);
    let r = other.post("/v1/mcp/events", tool(1)).await;
    assert_eq!((r.status, r.code()), (429, "budget_exceeded"), "{r:?}");

    // Reset through the first instance: the second admits again, without a restart.
    let r = owner.post_empty(&format!("/api/budgets/{budget_id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    admitted_soon(&other, 1, "the reset never reached the second instance").await;

    // A higher limit set through the first instance applies there too.
    strict_key_budget(&owner, &key_id, 1_000).await;
    admitted_soon(&other, 500, "the new limit never reached the second instance").await;
    drop(second);
}

/// A burst of changes larger than one page of the feed (here 2,500 unrelated ones in
/// the same millisecond) does not hide the change after it: the watcher reads page
/// after page instead of re-reading the first one.
#[tokio::test]
async fn a_burst_of_changes_does_not_hide_the_next_one() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    let budget_id = strict_key_budget(&owner, &key_id, 100).await;
    let second = Server::start(&app.db.url, &[]);
    let other = key_client(&second.proxy, &raw_key);
    assert_eq!(other.post("/v1/mcp/events", tool(100)).await.status, 201);
    assert_eq!(other.post("/v1/mcp/events", tool(1)).await.code(), "budget_exceeded");
    let now_ms = chrono::Utc::now().timestamp_millis();
    app.exec_sql(&format!(
        "INSERT INTO budget_changes (id, org_id, entity_type, entity_id, changed_at) \
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 2500) \
         SELECT 'burst-' || i, 'org-none', 'tag', 'k=v' || i, {now_ms} FROM n"
    ))
    .await;
    let r = owner.post_empty(&format!("/api/budgets/{budget_id}")).await;
    assert_eq!(r.status, 200, "{r:?}");
    admitted_soon(&other, 1, "the reset behind the burst never reached the second instance").await;
    drop(second);
}

/// A key revoked through one instance stops working on the other within about a
/// second, although the other had it in its key cache (kept two minutes otherwise).
#[tokio::test]
async fn a_key_revoked_through_one_instance_stops_on_the_other() {
    let app = TestApp::start().await;
    let owner = app.owner().await;
    let (key_id, raw_key) = create_key(&owner, "agent").await;
    let second = Server::start(&app.db.url, &[]);
    let other = key_client(&second.proxy, &raw_key);
    // Cached as valid on the second instance.
    assert_eq!(other.get("/v1/policy").await.status, 200);
    assert_eq!(owner.delete(&format!("/api/keys/{key_id}")).await.status, 200);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let r = other.get("/v1/policy").await;
        if r.status == 401 {
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
        assert!(Instant::now() < deadline, "the revocation never reached the second instance");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(second);
}

/// The reaper frees the holds of requests and instances that died: at start, then
/// every 10 s. An expired hold leaves `reserved`; one still live stays.
#[tokio::test]
async fn the_reaper_frees_expired_holds_only() {
    if !backend_is_postgres() {
        return;
    }
    let mut app = TestApp::start_with(&[("SPENDGATE_SHARED_BUDGETS", "1".to_owned())]).await;
    let owner = app.owner().await;
    let (key_id, _) = create_key(&owner, "agent").await;
    let r = owner
        .post(
            "/api/budgets",
            json!({ "entityType": "api_key", "entityId": key_id, "maxBudgetMicrodollars": 1_000 }),
        )
        .await;
    assert_eq!(r.status, 201, "{r:?}");
    // A dead instance's expired hold of 70 and a live hold of 30.
    let budget = format!("(SELECT id FROM budgets WHERE entity_id = '{key_id}')");
    app.exec_sql(&format!(
        "INSERT INTO budget_reservations (id, budget_id, amount_microdollars, instance_id, expires_at) \
         SELECT 'dead', {budget}, 70, 'gone', 1 UNION ALL SELECT 'live', {budget}, 30, 'other', 9000000000000"
    ))
    .await;
    app.exec_sql(&format!("UPDATE budgets SET reserved_microdollars = 100 WHERE entity_id = '{key_id}'"))
        .await;
    app.restart();

    let mut conn = AsyncPgConnection::establish(&app.db.url).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let f = figures(&mut conn, &key_id).await;
        if f.reserved == 30 {
            break;
        }
        assert!(Instant::now() < deadline, "expired hold not reaped: {f:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let left = count(&mut conn, "SELECT count(*) AS n FROM budget_reservations WHERE id = 'live'").await;
    assert_eq!(left, 1);
    assert_eq!(count(&mut conn, "SELECT count(*) AS n FROM budget_reservations").await, 1);
}
