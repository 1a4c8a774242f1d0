//! Rollups answer exactly what the raw-event scans answered: random events (models,
//! keys, tags, customers, traces, tools, estimates, breakdowns, a refund) ingested
//! through the API and then spread over 100 days by SQL, compared window by window
//! with the reference scans (`db::cost_event_scans`), including events placed on
//! each window's partial first hour and first day. Also: the rollups the commits
//! kept equal a rebuild from the raw events, and retention deletes old raw events
//! without changing any answer. The budget spend sources, the margins' costs, the
//! unpriced models and the plan cap's count are compared the same way, on windows
//! with arbitrary edges at both ends; a back-fill of the dimensions they added
//! rebuilds those only.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};
use spendgate::db::cost_event_queries::{self as q, Grouping, Member, Summary, Window};
use spendgate::db::cost_event_scans as scan;
use spendgate::db::rollups::{DAY_MS, HOUR_MS};
use spendgate::db::Pool;

use crate::support::{create_key, key_client, Client, TestApp};

const MODELS: [(&str, &str); 5] = [
    ("openai", "gpt-4o"),
    ("openai", "gpt-4o-mini"),
    ("anthropic", "claude-sonnet"),
    ("google", "gemini-flash"),
    ("gate", "search"),
];

fn random_event(rng: &mut StdRng) -> Value {
    let (provider, model) = MODELS[rng.random_range(0..MODELS.len())];
    let source = ["sdk", "api", "proxy", "mcp"][rng.random_range(0..4)];
    let mut e = json!({
        "provider": provider, "model": model,
        "inputTokens": rng.random_range(0..5_000), "outputTokens": rng.random_range(0..2_000),
        "cachedInputTokens": rng.random_range(0..100), "reasoningTokens": rng.random_range(0..50),
        "costMicrodollars": rng.random_range(0..3_000_000_i64),
        "source": source,
    });
    let mut tags = serde_json::Map::new();
    if rng.random_bool(0.7) {
        tags.insert("team".into(), json!(format!("t{}", rng.random_range(0..4))));
    }
    if rng.random_bool(0.5) {
        tags.insert("customer".into(), json!(format!("c{}", rng.random_range(0..12))));
    }
    if rng.random_bool(0.2) {
        tags.insert("env".into(), json!("prod"));
    }
    e["tags"] = Value::Object(tags);
    if rng.random_bool(0.4) {
        e["customer"] = json!(format!("cust-{}", rng.random_range(0..5)));
    }
    if rng.random_bool(0.5) {
        e["traceId"] = json!(format!("{:032x}", rng.random_range(1..10_u32)));
    }
    if rng.random_bool(0.6) {
        e["durationMs"] = json!(rng.random_range(0..10_000));
    }
    if rng.random_bool(0.2) {
        e["eventType"] = json!("tool");
        if rng.random_bool(0.5) {
            let tool = ["search", "fetch"][rng.random_range(0..2)];
            e["toolName"] = json!(tool);
        }
    }
    if rng.random_bool(0.4) {
        e["costBreakdown"] = json!({ "input": rng.random_range(0..1_000), "output": rng.random_range(0..1_000),
            "cached": rng.random_range(0..10), "reasoning": rng.random_range(0..10) });
    }
    if rng.random_bool(0.3) {
        e["sessionId"] = json!(format!("s{}", rng.random_range(0..6)));
    }
    e
}

async fn ingest(keys: &[Client], rng: &mut StdRng, n: usize) {
    let mut left = n;
    while left > 0 {
        let batch = left.min(40);
        let events: Vec<Value> = (0..batch).map(|_| random_event(rng)).collect();
        let key = &keys[rng.random_range(0..keys.len())];
        let r = key.post("/api/cost-events/batch", json!({ "events": events })).await;
        assert_eq!(r.status, 201, "{r:?}");
        left -= batch;
    }
}

fn normalized(mut s: Summary) -> Summary {
    s.models.sort_by(|a, b| (&a.provider, &a.model).cmp(&(&b.provider, &b.model)));
    for list in [&mut s.providers, &mut s.keys, &mut s.sources] {
        list.sort_by(|a, b| a.label.cmp(&b.label));
    }
    s.tools.sort_by(|a, b| a.name.cmp(&b.name));
    s
}

async fn org_of(pool: &Pool) -> String {
    use diesel::{ExpressionMethods, QueryDsl};
    use diesel_async::RunQueryDsl;
    use spendgate::db::schema::cost_events;
    let org: Result<String, spendgate::db::DbError> = async {
        spendgate::with_conn!(pool, read, |conn| {
            Ok(cost_events::table
                .select(cost_events::org_id)
                .order(cost_events::org_id.asc())
                .first(conn)
                .await?)
        })
    }
    .await;
    org.expect("an event")
}

/// Compares every rollup-backed read with its scan, for the three periods measured
/// back from `now`, with and without the estimates.
async fn compare_all(pool: &Pool, org: &str, now: i64) -> usize {
    let mut compared = 0;
    for days in [7, 30, 90] {
        for exclude_estimated in [false, true] {
            let w = Window { since: now - days * DAY_MS, exclude_estimated };
            let ctx = format!("{days}d exclude_estimated={exclude_estimated}");
            let got = normalized(q::summary(pool, org, w, 5).await.unwrap());
            let want = normalized(scan::summary(pool, org, w, 5).await.unwrap());
            assert_eq!(got, want, "summary {ctx}");
            for top in [0, 1, 3] {
                let got = q::summary(pool, org, w, top).await.unwrap().traces;
                assert_eq!(
                    got,
                    scan::summary(pool, org, w, top).await.unwrap().traces,
                    "top {top} traces {ctx}"
                );
            }
            assert!(want.totals.count > 0, "{ctx}: the window is empty, the test would prove nothing");
            for grouping in
                [Grouping::ApiKey, Grouping::Tag("team"), Grouping::Tag("customer"), Grouping::Tag("nope")]
            {
                for limit in [2, 100] {
                    let got = q::attribution(pool, org, w, grouping, limit).await.unwrap();
                    let want = scan::attribution(pool, org, w, grouping, limit).await.unwrap();
                    assert_eq!(got, want, "attribution {grouping:?} limit {limit} {ctx}");
                }
                let groups = scan::attribution(pool, org, w, grouping, 100).await.unwrap().groups;
                for g in groups.iter().map(|g| g.label.as_deref()).chain([None, Some("missing")]) {
                    let member = match grouping {
                        Grouping::ApiKey => Member::ApiKey(g),
                        Grouping::Tag(key) => Member::Tag { key, value: g },
                    };
                    let mut got = q::attribution_detail(pool, org, w, member).await.unwrap();
                    let mut want = scan::attribution_detail(pool, org, w, member).await.unwrap();
                    got.models.sort_by(|a, b| a.label.cmp(&b.label));
                    want.models.sort_by(|a, b| a.label.cmp(&b.label));
                    assert_eq!(got, want, "detail {member:?} {ctx}");
                    compared += 1;
                }
            }
        }
        let since = now - days * DAY_MS;
        let got: BTreeSet<String> =
            q::recent_tag_keys(pool, org, since, 50).await.unwrap().into_iter().collect();
        let want: BTreeSet<String> =
            scan::recent_tag_keys(pool, org, since, 50).await.unwrap().into_iter().collect();
        assert_eq!(got, want, "tag keys since {days}d");
    }
    compared
}

async fn distinct_of(pool: &Pool, column: &str) -> Vec<String> {
    use diesel::sql_types::{Nullable, Text};
    use diesel_async::RunQueryDsl;
    #[derive(diesel::QueryableByName)]
    struct V {
        #[diesel(sql_type = Nullable<Text>)]
        v: Option<String>,
    }
    let q = format!("SELECT DISTINCT {column} AS v FROM cost_events");
    let r: Result<Vec<V>, spendgate::db::DbError> = async {
        spendgate::with_conn!(pool, read, |conn| Ok(diesel::sql_query(q.as_str()).load(conn).await?))
    }
    .await;
    r.unwrap().into_iter().filter_map(|v| v.v).collect()
}

/// Compares the reads moved onto the rollups (budget spend sources, margins,
/// unpriced models, plan count) with their old scans; returns how many answers
/// were not empty.
async fn compare_moved(pool: &Pool, org: &str, now: i64) -> usize {
    compare_new_dims(pool, org, now).await + compare_margins(pool, org, now).await
}

/// The reads on the dimensions the spend-sources migration added: budget spend
/// sources, unpriced models (tag spend sources), plan count.
async fn compare_new_dims(pool: &Pool, org: &str, now: i64) -> usize {
    use spendgate::db::budgets::{self, SpendFilter};
    use spendgate::db::unpriced;
    let mut filled = 0;
    let mut filters = vec![
        SpendFilter::User("u1".into()),
        SpendFilter::User("u2".into()),
        SpendFilter::User("nobody".into()),
        SpendFilter::Tag { key: "nope".into(), value: "x".into() },
        SpendFilter::Tag { key: "_svc_unknown_model".into(), value: "true".into() },
    ];
    filters.extend(distinct_of(pool, "api_key_id").await.into_iter().map(SpendFilter::ApiKey));
    filters.extend(distinct_of(pool, "customer_id").await.into_iter().map(SpendFilter::Customer));
    filters.extend((0..4).map(|i| SpendFilter::Tag { key: "team".into(), value: format!("t{i}") }));
    filters.extend((0..3).map(|i| SpendFilter::Tag { key: "customer".into(), value: format!("c{i}") }));
    let odd = now - 30 * DAY_MS + 1_234_567;
    for since in [None, Some(now - 7 * DAY_MS), Some(odd), Some(now - 90 * DAY_MS)] {
        for f in &filters {
            let got = budgets::spend_sources(pool, org, f, since).await.unwrap();
            let want = scan::spend_sources(pool, org, f, since).await.unwrap();
            assert_eq!(got, want, "spend sources {f:?} since {since:?}");
            filled += usize::from(!want.is_empty());
        }
    }
    for since in [now - 7 * DAY_MS, odd, now - 90 * DAY_MS, 0] {
        for org_id in [Some(org), None, Some("other")] {
            let got = unpriced::recent(pool, org_id, since).await.unwrap();
            let want = scan::unpriced_recent(pool, org_id, since).await.unwrap();
            assert_eq!(got, want, "unpriced {org_id:?} since {since}");
            filled += usize::from(!want.is_empty());
        }
        let got = spendgate::plan_usage::recorded_since(pool, org, since).await.unwrap();
        assert_eq!(got, scan::governed_since(pool, org, since).await.unwrap(), "plan count since {since}");
        filled += usize::from(got > 0);
    }
    filled
}

/// The margins' costs (from `tag_model`) on windows with arbitrary edges.
async fn compare_margins(pool: &Pool, org: &str, now: i64) -> usize {
    use spendgate::db::margins;
    let mut filled = 0;
    let odd = now - 30 * DAY_MS + 1_234_567;
    let windows = [
        (0, i64::MAX),
        // All time: the all-time rows alone.
        (i64::MIN, i64::MAX),
        (now - 30 * DAY_MS, now - 7 * DAY_MS),
        (now - 90 * DAY_MS + 12_345, now - 7 * DAY_MS - 54_321),
        (odd, odd + 2 * HOUR_MS + 17),
        (odd, odd + 1_000),
        (now - 99 * DAY_MS, now + DAY_MS),
    ];
    for (from, to) in windows {
        for key in ["team", "customer", "nope"] {
            let got = margins::cost_by_tag_value(pool, org, key, from, to).await.unwrap();
            let want = scan::cost_by_tag_value(pool, org, key, from, to).await.unwrap();
            assert_eq!(got, want, "margins by value {key} [{from}, {to})");
            filled += usize::from(!want.is_empty());
        }
        for (key, value) in [("team", "t1"), ("customer", "c3"), ("team", "none")] {
            let got = margins::cost_by_model(pool, org, key, value, from, to).await.unwrap();
            let want = scan::cost_by_model(pool, org, (key, value), from, to).await.unwrap();
            assert_eq!(got, want, "margins by model {key}={value} [{from}, {to})");
        }
    }
    filled
}

type RollupEntry =
    ((String, String, String, String, i64, String, String, bool), spendgate::db::rollups::Sums);

/// Every stored rollup row as (key, exact sums), sorted: two rows holding the same
/// sums in different hi/lo parts compare equal.
async fn all_rollups(pool: &Pool) -> Vec<RollupEntry> {
    use diesel::{QueryDsl, SelectableHelper};
    use diesel_async::RunQueryDsl;
    use spendgate::db::rollups::{sums_of, RollupRow};
    use spendgate::db::schema::cost_rollups;
    let rows: Result<Vec<RollupRow>, spendgate::db::DbError> = async {
        spendgate::with_conn!(pool, read, |conn| {
            Ok(cost_rollups::table.select(RollupRow::as_select()).load(conn).await?)
        })
    }
    .await;
    let mut rows: Vec<RollupEntry> = rows
        .unwrap()
        .into_iter()
        .map(|r| {
            let sums = sums_of(&r);
            ((r.org_id, r.dim, r.name, r.grain, r.bucket, r.label1, r.label2, r.estimated), sums)
        })
        .collect();
    rows.sort_by(|a, b| a.0.cmp(&b.0));
    rows
}

/// Asserts two rollup snapshots are equal, naming the first difference only.
fn assert_same_rollups(got: &[RollupEntry], want: &[RollupEntry], ctx: &str) {
    let diff = got.iter().zip(want).find(|(a, b)| a != b);
    assert!(
        diff.is_none() && got.len() == want.len(),
        "{ctx}: {} vs {} rows, first difference {diff:?}",
        got.len(),
        want.len()
    );
}

async fn setup(app: &TestApp) -> Vec<Client> {
    let owner = app.owner().await;
    let mut keys = Vec::new();
    for name in ["k1", "k2", "k3"] {
        let (_, raw) = create_key(&owner, name).await;
        keys.push(key_client(&app.server.control, &raw));
    }
    keys
}

#[tokio::test]
async fn rollups_answer_exactly_what_the_scans_answered() {
    let app = TestApp::start().await;
    let keys = setup(&app).await;
    let mut rng = StdRng::seed_from_u64(13);
    let pool = Pool::connect(&app.db.url, 2).unwrap();

    // Fold: the rollups folded from the commits equal a rebuild, and every read agrees.
    ingest(&keys, &mut rng, 160).await;
    let org = org_of(&pool).await;
    spendgate::db::fold::catch_up(&pool).await.unwrap();
    let kept = all_rollups(&pool).await;
    assert!(!kept.is_empty());
    assert_eq!(app.rebuild_rollups().await, 160);
    assert_same_rollups(&all_rollups(&pool).await, &kept, "commit-maintained rollups against a rebuild");
    let now = spendgate::util::time::now_ms();
    assert!(compare_all(&pool, &org, now).await > 0);

    // Spread the events over 100 days, with some on each window's edges (the partial
    // first hour, the rest of the first day, just before the window), some estimated,
    // some without a key, one refund; then rebuild and compare again.
    let ids: Vec<String> = {
        use diesel::{ExpressionMethods, QueryDsl};
        use diesel_async::RunQueryDsl;
        use spendgate::db::schema::cost_events;
        let r: Result<Vec<String>, spendgate::db::DbError> = async {
            spendgate::with_conn!(&pool, read, |conn| {
                Ok(cost_events::table.select(cost_events::id).order(cost_events::id.asc()).load(conn).await?)
            })
        }
        .await;
        r.unwrap()
    };
    let now = spendgate::util::time::now_ms();
    for (i, id) in ids.iter().enumerate() {
        let at = match i % 8 {
            0 => now - [7, 30, 90][i % 3] * DAY_MS + rng.random_range(0..HOUR_MS / 2),
            1 => now - [7, 30, 90][i % 3] * DAY_MS + rng.random_range(HOUR_MS..DAY_MS / 2),
            2 => now - [7, 30, 90][i % 3] * DAY_MS - rng.random_range(1..HOUR_MS),
            _ => now - rng.random_range(0..100 * DAY_MS),
        };
        app.exec_sql(&format!("UPDATE cost_events SET created_at = {at} WHERE id = '{id}'")).await;
        app.exec_sql(&format!("UPDATE cost_event_tags SET created_at = {at} WHERE event_id = '{id}'")).await;
    }
    app.exec_sql("UPDATE cost_events SET estimated = TRUE WHERE id IN (SELECT id FROM cost_events ORDER BY request_id LIMIT 40)").await;
    app.exec_sql("UPDATE cost_events SET api_key_id = NULL WHERE id IN (SELECT id FROM cost_events ORDER BY dedup_key DESC LIMIT 25)").await;
    app.exec_sql(&format!("UPDATE cost_events SET cost_microdollars = -750000 WHERE id = '{}'", ids[5]))
        .await;
    vary_moved_fields(&app).await;
    app.rebuild_rollups().await;
    assert!(compare_all(&pool, &org, now).await > 0);
    assert!(compare_moved(&pool, &org, now).await > 40, "the moved reads' answers are mostly empty");

    // New events on top of rebuilt rows.
    ingest(&keys, &mut rng, 60).await;
    // Batches that mix new events with duplicates (a retried batch): a duplicate must
    // add nothing.
    let key = &keys[0];
    let mut seen = Vec::new();
    for round in 0..3 {
        let mut events: Vec<Value> = (0..6)
            .map(|i| {
                let mut e = random_event(&mut rng);
                e["idempotencyKey"] = json!(format!("mixed-{round}-{i}"));
                e
            })
            .collect();
        events.extend(seen.iter().cloned());
        let r = key.post("/api/cost-events/batch", json!({ "events": events })).await;
        assert_eq!(r.status, 201, "{r:?}");
        assert_eq!(r.body["inserted"], json!(6), "{r:?}");
        seen.extend(events.into_iter().take(6));
    }
    spendgate::db::fold::catch_up(&pool).await.unwrap();
    let kept = all_rollups(&pool).await;
    app.rebuild_rollups().await;
    assert_same_rollups(&all_rollups(&pool).await, &kept, "incremental rollups against a rebuild");
    assert!(compare_all(&pool, &org, spendgate::util::time::now_ms()).await > 0);
    assert!(compare_moved(&pool, &org, spendgate::util::time::now_ms()).await > 40);
}

/// The fold runs off the commit path: events committed but not folded yet when the
/// process is killed (-9) are folded once after the restart, and those folded before
/// the kill are not folded again.
#[tokio::test]
async fn a_kill_between_commit_and_fold_neither_doubles_nor_misses() {
    // The server folds at start and then once an hour: only a read folds before that.
    let mut app = TestApp::start_with(&[("SPENDGATE_ROLLUP_FOLD_MS", "3600000".to_owned())]).await;
    let keys = setup(&app).await;
    let mut rng = StdRng::seed_from_u64(5);
    let pool = Pool::connect(&app.db.url, 2).unwrap();
    let folded = "SELECT seq AS n FROM fold_marks WHERE name = 'folded'";
    let committed = "SELECT COALESCE(MAX(fold_seq), 0) AS n FROM cost_events";

    // Folded before the kill: a read folds what is pending first.
    ingest(&keys, &mut rng, 120).await;
    let org = org_of(&pool).await;
    let all_time = Window { since: 0, exclude_estimated: false };
    assert_eq!(q::summary(&pool, &org, all_time, 5).await.unwrap().totals.count, 120);
    assert_eq!(app.query_n(folded).await, app.query_n(committed).await);
    // Committed, not folded, when the process dies.
    ingest(&keys, &mut rng, 80).await;
    let mark = app.query_n(folded).await;
    assert!(app.query_n(committed).await > mark, "the new events wait for the fold");
    app.restart();

    // The restarted server folds at start: exactly the events past the mark.
    let mut now = mark;
    for _ in 0..600 {
        now = app.query_n(folded).await;
        if now > mark {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(now, app.query_n(committed).await, "the restarted server folded what was pending");
    let kept = all_rollups(&pool).await;
    assert_eq!(app.rebuild_rollups().await, 200);
    assert_same_rollups(&all_rollups(&pool).await, &kept, "rollups folded across a kill against a rebuild");
    assert_eq!(scan::summary(&pool, &org, all_time, 5).await.unwrap().totals.count, 200);
    assert!(compare_all(&pool, &org, spendgate::util::time::now_ms()).await > 0);
}

/// What the moved reads filter on that ingestion does not vary: users, the
/// unknown-model tag (with its events' creation time), refused proxied calls.
async fn vary_moved_fields(app: &TestApp) {
    app.exec_sql("UPDATE cost_events SET user_id = 'u1' WHERE id IN (SELECT id FROM cost_events ORDER BY request_id LIMIT 70)").await;
    app.exec_sql("UPDATE cost_events SET user_id = 'u2' WHERE id IN (SELECT id FROM cost_events ORDER BY dedup_key LIMIT 30)").await;
    app.exec_sql(
        "INSERT INTO cost_event_tags (event_id, org_id, tag_key, tag_value, created_at) \
         SELECT id, org_id, '_svc_unknown_model', 'true', created_at FROM cost_events \
         WHERE id IN (SELECT id FROM cost_events ORDER BY request_id DESC LIMIT 50)",
    )
    .await;
    app.exec_sql("UPDATE cost_events SET budget_status = 'denied' WHERE source = 'proxy' AND id IN (SELECT id FROM cost_events ORDER BY id DESC LIMIT 80)").await;
}

#[tokio::test]
async fn new_dimensions_are_back_filled_alone() {
    let mut app = TestApp::start().await;
    let keys = setup(&app).await;
    let mut rng = StdRng::seed_from_u64(21);
    ingest(&keys, &mut rng, 80).await;
    vary_moved_fields(&app).await;
    app.rebuild_rollups().await;
    let pool = Pool::connect(&app.db.url, 2).unwrap();
    let kept = all_rollups(&pool).await;

    // A database from before the migration: no rows of the new dimensions, their
    // back-fill pending. One raw event is gone (as retention would have it): the
    // rows of the older dimensions still count it, and must keep doing so.
    let new_dims = "('spend_key', 'spend_user', 'spend_customer', 'spend_tag', 'governed')";
    let rows = app
        .query_n(&format!("SELECT COUNT(*) AS n FROM cost_rollups WHERE dim IN {new_dims} AND grain = 'd'"))
        .await;
    assert!(rows > 10, "the new dimensions hold rows");
    app.exec_sql(&format!("DELETE FROM cost_rollups WHERE dim IN {new_dims}")).await;
    app.exec_sql("UPDATE rollup_backfill SET done_at = NULL WHERE id = 2").await;
    app.exec_sql("DELETE FROM cost_event_tags WHERE event_id = (SELECT MIN(id) FROM cost_events)").await;
    app.exec_sql("DELETE FROM cost_events WHERE id = (SELECT MIN(id) FROM cost_events)").await;
    app.restart();

    let now = all_rollups(&pool).await;
    let old_dims = |rows: &[RollupEntry]| -> Vec<RollupEntry> {
        rows.iter().filter(|r| !new_dims.contains(&format!("'{}'", r.0 .1))).cloned().collect()
    };
    assert_same_rollups(&old_dims(&now), &old_dims(&kept), "older dimensions untouched by the back-fill");
    assert!(now.len() > old_dims(&now).len(), "the new dimensions are back");
    assert_eq!(app.query_n("SELECT COUNT(*) AS n FROM rollup_backfill WHERE done_at IS NULL").await, 0);
    let org = org_of(&pool).await;
    assert!(compare_new_dims(&pool, &org, spendgate::util::time::now_ms()).await > 10);
}

/// The migration that added the all-time grain seeds it from the day rows: what it
/// seeds equals what the accounting keeps (and a rebuild computes), and the all-time
/// reads it serves (margins' all-time costs, budget spend sources without a reset)
/// still equal the raw scans.
#[tokio::test]
async fn all_time_rows_seeded_from_day_rows_equal_a_rebuild() {
    let app = TestApp::start().await;
    let keys = setup(&app).await;
    let mut rng = StdRng::seed_from_u64(25);
    ingest(&keys, &mut rng, 80).await;
    app.exec_sql(&format!(
        "UPDATE cost_events SET created_at = created_at - {} WHERE id IN \
         (SELECT id FROM cost_events ORDER BY id LIMIT 40)",
        45 * DAY_MS
    ))
    .await;
    app.exec_sql(
        "UPDATE cost_event_tags SET created_at = \
         (SELECT e.created_at FROM cost_events e WHERE e.id = cost_event_tags.event_id)",
    )
    .await;
    vary_moved_fields(&app).await;
    app.rebuild_rollups().await;
    let pool = Pool::connect(&app.db.url, 2).unwrap();
    let kept = all_rollups(&pool).await;
    let all_time = kept.iter().filter(|r| r.0 .3 == "a").count();
    assert!(all_time > 20, "the rebuild keeps all-time rows ({all_time})");
    assert!(kept.iter().filter(|r| r.0 .3 == "a").all(|r| r.0 .4 == 0), "all-time rows are bucket 0");

    app.exec_sql("DELETE FROM cost_rollups WHERE grain = 'a'").await;
    let up = include_str!("../migrations/2026-11-27-000023_all_time_rollups/up.sql");
    let seed = up.split("DROP INDEX").next().unwrap();
    assert!(seed.contains("INSERT INTO cost_rollups"));
    app.exec_sql(seed).await;
    assert_same_rollups(&all_rollups(&pool).await, &kept, "all-time rows seeded from the day rows");
    let org = org_of(&pool).await;
    let now = spendgate::util::time::now_ms();
    assert!(compare_margins(&pool, &org, now).await > 5);
    assert!(compare_new_dims(&pool, &org, now).await > 10);
}

#[tokio::test]
async fn retention_deletes_old_raw_events_and_keeps_the_rollups() {
    let mut app = TestApp::start_with(&[("SPENDGATE_COST_EVENT_RETENTION_DAYS", "91".to_owned())]).await;
    let keys = setup(&app).await;
    let mut rng = StdRng::seed_from_u64(7);
    ingest(&keys, &mut rng, 80).await;
    let pool = Pool::connect(&app.db.url, 2).unwrap();
    let org = org_of(&pool).await;

    // Half the events become 200 days old (their tags too); the rollups follow.
    app.exec_sql(&format!(
        "UPDATE cost_events SET created_at = created_at - {} WHERE id IN \
         (SELECT id FROM cost_events ORDER BY id LIMIT 40)",
        200 * DAY_MS
    ))
    .await;
    app.exec_sql(
        "UPDATE cost_event_tags SET created_at = \
         (SELECT e.created_at FROM cost_events e WHERE e.id = cost_event_tags.event_id)",
    )
    .await;
    vary_moved_fields(&app).await;
    app.rebuild_rollups().await;
    let all_time = Window { since: 0, exclude_estimated: false };
    let recent = Window { since: spendgate::util::time::now_ms() - 30 * DAY_MS, exclude_estimated: false };
    let moved_before = moved_answers(&pool, &org).await;
    let before = normalized(q::summary(&pool, &org, all_time, 5).await.unwrap());
    let before_recent = normalized(q::summary(&pool, &org, recent, 5).await.unwrap());
    assert_eq!(before.totals.count, 80);
    assert_eq!(scan::summary(&pool, &org, all_time, 5).await.unwrap().totals.count, 80);

    // A restarted server runs a retention pass at once.
    app.restart();
    let mut left = i64::MAX;
    for _ in 0..300 {
        left = app.query_n("SELECT COUNT(*) AS n FROM cost_events").await;
        if left == 40 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(left, 40, "the 40 old events are deleted, the 40 recent ones kept");
    let cutoff = spendgate::util::time::now_ms() - 91 * DAY_MS;
    let old =
        app.query_n(&format!("SELECT COUNT(*) AS n FROM cost_events WHERE created_at < {cutoff}")).await;
    assert_eq!(old, 0);
    let orphans = app
        .query_n(
            "SELECT COUNT(*) AS n FROM cost_event_tags WHERE event_id NOT IN (SELECT id FROM cost_events)",
        )
        .await;
    assert_eq!(orphans, 0, "tags go with their events");

    // The raw scan now misses them; the rollup answers do not change.
    assert_eq!(scan::summary(&pool, &org, all_time, 5).await.unwrap().totals.count, 40);
    assert_eq!(normalized(q::summary(&pool, &org, all_time, 5).await.unwrap()), before);
    assert_eq!(normalized(q::summary(&pool, &org, recent, 5).await.unwrap()), before_recent);
    let moved_after = moved_answers(&pool, &org).await;
    assert_eq!(moved_after, moved_before, "budget sources, margins, unpriced counts and plan count survive");
    let scanned = scan::spend_sources(&pool, &org, &moved_filter(&pool).await, None).await.unwrap();
    assert_ne!(moved_after.0, scanned, "the old scan would have lost the deleted events");
    let r = app.login("owner@example.com").await.get("/api/cost-events/summary?period=90d").await;
    assert_eq!(r.status, 200, "{r:?}");
}

/// The API key with the most events: its spend sources span old and new events.
async fn moved_filter(pool: &Pool) -> spendgate::db::budgets::SpendFilter {
    let keys = distinct_of(pool, "api_key_id").await;
    spendgate::db::budgets::SpendFilter::ApiKey(keys.into_iter().max().expect("a key"))
}

type MovedAnswers = (
    Vec<spendgate::db::budgets::SpendSource>,
    Vec<(String, i64, i64)>,
    Vec<(String, String, i64, Option<i64>)>,
    i64,
);

/// All-time answers of the moved reads; unpriced sightings to the hour (the raw
/// events that pin the millisecond may be gone: the live read looks back 7 days).
async fn moved_answers(pool: &Pool, org: &str) -> MovedAnswers {
    use spendgate::db::{budgets, margins, unpriced};
    let sources = budgets::spend_sources(pool, org, &moved_filter(pool).await, None).await.unwrap();
    let mut by_value: Vec<(String, i64, i64)> = margins::cost_by_tag_value(pool, org, "team", 0, i64::MAX)
        .await
        .unwrap()
        .into_iter()
        .map(|(v, c)| (v, c.cost, c.requests))
        .collect();
    by_value.sort();
    let mut unpriced: Vec<_> = unpriced::recent(pool, Some(org), 0)
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.provider, m.model, m.calls, m.last_seen_ms.map(|t| t.div_euclid(HOUR_MS))))
        .collect();
    unpriced.sort();
    let plan = spendgate::plan_usage::recorded_since(pool, org, 0).await.unwrap();
    (sources, by_value, unpriced, plan)
}

/// Spreads the events of each trace over a span that starts at a random time in the
/// last 100 days (some on a window's start, to the millisecond): spans of minutes,
/// hours, days, weeks, months and over a year, so that every span class is read.
async fn spread_traces(app: &TestApp, pool: &Pool, rng: &mut StdRng, now: i64) {
    use diesel::{ExpressionMethods, QueryDsl};
    use diesel_async::RunQueryDsl;
    use spendgate::db::schema::cost_events;
    let rows: Result<Vec<(String, Option<String>)>, spendgate::db::DbError> = async {
        spendgate::with_conn!(pool, read, |conn| {
            Ok(cost_events::table
                .select((cost_events::id, cost_events::trace_id))
                .order(cost_events::id.asc())
                .load(conn)
                .await?)
        })
    }
    .await;
    let lengths = [10 * 60_000, 5 * HOUR_MS, 3 * DAY_MS, 20 * DAY_MS, 200 * DAY_MS, 400 * DAY_MS];
    let mut spans = std::collections::BTreeMap::new();
    for (id, trace) in rows.unwrap() {
        let trace = trace.unwrap_or_default();
        let (start, length) = *spans.entry(trace).or_insert_with(|| {
            let length = lengths[rng.random_range(0..lengths.len())];
            let start = match rng.random_range(0..4) {
                0 => now - [7, 30, 90][rng.random_range(0..3)] * DAY_MS - rng.random_range(0..length),
                _ => now - rng.random_range(0..100 * DAY_MS),
            };
            (start, length)
        });
        let at = (start + rng.random_range(0..=length)).min(now - 1);
        app.exec_sql(&format!("UPDATE cost_events SET created_at = {at} WHERE id = '{id}'")).await;
        app.exec_sql(&format!("UPDATE cost_event_tags SET created_at = {at} WHERE event_id = '{id}'")).await;
    }
}

/// The summary's top traces against the scan, on windows starting on a day, an hour
/// and an odd millisecond, with and without estimates, for several list lengths.
async fn compare_traces(pool: &Pool, org: &str, now: i64) -> usize {
    let mut filled = 0;
    for since in [now - 7 * DAY_MS, now - 30 * DAY_MS + 1_234_567, now - 90 * DAY_MS, 0] {
        for exclude_estimated in [false, true] {
            let w = Window { since, exclude_estimated };
            for top in [0, 1, 3, 10, 1000] {
                let got = q::summary(pool, org, w, top).await.unwrap().traces;
                let want = scan::summary(pool, org, w, top).await.unwrap().traces;
                assert_eq!(got, want, "top {top} traces since {since} exclude_estimated={exclude_estimated}");
                filled += want.len();
            }
        }
    }
    filled
}

/// Top traces come from the trace spans: traces that started in the window are
/// ranked by their all-time sums, the others summed over the window. Against the
/// scan with many traces of every span length; after the fold, a rebuild, the
/// migration's seed (whole-day spans) and the fold on top of seeded rows.
#[tokio::test]
async fn top_traces_from_trace_spans_equal_the_scan() {
    let app = TestApp::start().await;
    let keys = setup(&app).await;
    let mut rng = StdRng::seed_from_u64(31);
    let pool = Pool::connect(&app.db.url, 2).unwrap();
    let mut events: Vec<Value> = (0..240)
        .map(|_| {
            let mut e = random_event(&mut rng);
            e["traceId"] = json!(format!("{:032x}", rng.random_range(1..90_u32)));
            e
        })
        .collect();
    // Two traces of equal cost: the tie goes to the smaller id.
    for (e, id) in events.iter_mut().take(2).zip(["f".repeat(31) + "b", "f".repeat(31) + "a"]) {
        e["traceId"] = json!(id);
        e["costMicrodollars"] = json!(5_000_000);
    }
    for chunk in events.chunks(40) {
        let r = keys[0].post("/api/cost-events/batch", json!({ "events": chunk })).await;
        assert_eq!(r.status, 201, "{r:?}");
    }
    let org = org_of(&pool).await;
    let now = spendgate::util::time::now_ms();
    spread_traces(&app, &pool, &mut rng, now).await;
    app.exec_sql("UPDATE cost_events SET estimated = TRUE WHERE id IN (SELECT id FROM cost_events ORDER BY request_id LIMIT 50)").await;
    app.exec_sql("UPDATE cost_events SET cost_microdollars = -900000 WHERE id IN (SELECT id FROM cost_events ORDER BY dedup_key LIMIT 3)").await;
    app.rebuild_rollups().await;
    let classes = app.query_n("SELECT COUNT(DISTINCT span_class) AS n FROM trace_spans").await;
    assert!(classes >= 5, "spans of {classes} classes only");
    assert!(compare_traces(&pool, &org, now).await > 100);

    // Seeded from the day rows, as the migration does for an existing database.
    app.exec_sql("DELETE FROM trace_spans").await;
    let up = include_str!("../migrations/2026-11-27-000024_trace_spans/up.sql");
    let seed = &up[up.find("INSERT INTO trace_spans").unwrap()..];
    app.exec_sql(seed).await;
    assert!(app.query_n("SELECT COUNT(*) AS n FROM trace_spans").await > 80);
    assert!(compare_traces(&pool, &org, now).await > 100);

    // The fold on top of seeded rows, new traces and old ones.
    let more: Vec<Value> = (0..40)
        .map(|_| {
            let mut e = random_event(&mut rng);
            e["traceId"] = json!(format!("{:032x}", rng.random_range(60..120_u32)));
            e
        })
        .collect();
    let r = keys[1].post("/api/cost-events/batch", json!({ "events": more })).await;
    assert_eq!(r.status, 201, "{r:?}");
    // Let the periodic fold take them from the sums the writer held (the read's own
    // catch-up would read them back from the database instead).
    tokio::time::sleep(std::time::Duration::from_millis(800)).await;
    assert!(compare_traces(&pool, &org, spendgate::util::time::now_ms()).await > 100);
}
