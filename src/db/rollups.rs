//! Rollups: the sums of an organization's cost events per UTC day and UTC hour under
//! each dimension value the dashboard reads (model, API key × model, source, tool,
//! trace, tag value × model, tag key, and the organization's total). They exist so
//! that summary, attribution and tag-key reads add up a few hundred rows instead of
//! scanning every raw event.
//!
//! The accounting commit keeps them: it aggregates its batch in memory
//! ([`plan`]) and upserts each touched row once, in the same transaction as the
//! events ([`upsert_rollups!`]). A negative cost (a refund) is simply added.
//!
//! A read window starts at an arbitrary millisecond `since`. It is answered exactly:
//! whole UTC days from day rows, the rest of the first day from hour rows, and the
//! first partial hour from the raw events themselves (index-backed on
//! `(org_id, created_at)`, at most one hour of events), aggregated by the same
//! [`plan`] code that the commit uses.
//!
//! Sums are kept as exact-sum parts (`Σ x / 10^6`, `Σ x % 10^6`, see
//! [`super::exact_sum`]) and joined in `i128` when read, so they never overflow.

use std::collections::{BTreeMap, HashMap};

use diesel::{ExpressionMethods, Insertable, QueryDsl, Queryable, Selectable, SelectableHelper};

use crate::db::cost_event_queries::BreakdownTotals;
use crate::db::models::CostEvent;
use crate::db::schema::{cost_event_tags, cost_events, cost_rollups, rollup_backfill};
use crate::db::{DbResult, Pool};
use crate::with_conn;

pub const HOUR_MS: i64 = 3_600_000;
pub const DAY_MS: i64 = 86_400_000;
const SPLIT: i64 = 1_000_000;

pub const TOTAL: &str = "total";
pub const MODEL: &str = "model";
pub const KEY_MODEL: &str = "key_model";
pub const SOURCE: &str = "source";
pub const TOOL: &str = "tool";
pub const TRACE: &str = "trace";
pub const TAG_MODEL: &str = "tag_model";
pub const TAG_KEY: &str = "tag_key";

/// One stored rollup row.
#[derive(Debug, Clone, PartialEq, Eq, Queryable, Selectable, Insertable)]
#[diesel(table_name = cost_rollups, treat_none_as_default_value = false)]
pub struct RollupRow {
    pub org_id: String,
    pub dim: String,
    pub name: String,
    pub grain: String,
    pub bucket: i64,
    pub label1: String,
    pub label2: String,
    pub estimated: bool,
    pub event_count: i64,
    pub cost_hi: i64,
    pub cost_lo: i64,
    pub input_hi: i64,
    pub input_lo: i64,
    pub output_hi: i64,
    pub output_lo: i64,
    pub cached_hi: i64,
    pub cached_lo: i64,
    pub reasoning_hi: i64,
    pub reasoning_lo: i64,
    pub duration_hi: i64,
    pub duration_lo: i64,
    pub duration_count: i64,
    pub bd_input_hi: i64,
    pub bd_input_lo: i64,
    pub bd_output_hi: i64,
    pub bd_output_lo: i64,
    pub bd_cached_hi: i64,
    pub bd_cached_lo: i64,
    pub bd_reasoning_hi: i64,
    pub bd_reasoning_lo: i64,
}

/// Where a rollup row belongs: everything but the sums.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RollupKey {
    pub org_id: String,
    pub dim: &'static str,
    pub name: String,
    pub grain: &'static str,
    pub bucket: i64,
    pub label1: String,
    pub label2: String,
    pub estimated: bool,
}

/// Exact sums of a set of events (read side, joined parts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sums {
    pub count: i128,
    pub cost: i128,
    pub input: i128,
    pub output: i128,
    pub cached: i128,
    pub reasoning: i128,
    pub duration: i128,
    pub duration_count: i128,
    /// Cost breakdown parts: input, output, cached, reasoning.
    pub breakdown: [i128; 4],
}

impl Sums {
    /// The sums of one event.
    pub fn of_event(e: &CostEvent) -> Self {
        let mut bd = BreakdownTotals::default();
        if let Some(stored) = &e.cost_breakdown {
            bd.add_stored(stored);
        }
        Self {
            count: 1,
            cost: e.cost_microdollars.into(),
            input: e.input_tokens.into(),
            output: e.output_tokens.into(),
            cached: e.cached_input_tokens.into(),
            reasoning: e.reasoning_tokens.into(),
            duration: e.duration_ms.unwrap_or(0).into(),
            duration_count: i128::from(e.duration_ms.is_some()),
            breakdown: [bd.input.into(), bd.output.into(), bd.cached.into(), bd.reasoning.into()],
        }
    }

    pub fn add(&mut self, o: &Self) {
        self.count += o.count;
        self.cost += o.cost;
        self.input += o.input;
        self.output += o.output;
        self.cached += o.cached;
        self.reasoning += o.reasoning;
        self.duration += o.duration;
        self.duration_count += o.duration_count;
        for (a, b) in self.breakdown.iter_mut().zip(o.breakdown) {
            *a += b;
        }
    }

    pub fn sub(&mut self, o: &Self) {
        let mut neg = *o;
        neg.count = -o.count;
        neg.cost = -o.cost;
        neg.input = -o.input;
        neg.output = -o.output;
        neg.cached = -o.cached;
        neg.reasoning = -o.reasoning;
        neg.duration = -o.duration;
        neg.duration_count = -o.duration_count;
        neg.breakdown = o.breakdown.map(|b| -b);
        self.add(&neg);
    }
}

/// `x` saturated to the `i64` range (how every exact sum is reported).
pub fn sat(x: i128) -> i64 {
    i64::try_from(x).unwrap_or(if x < 0 { i64::MIN } else { i64::MAX })
}

fn parts(x: i128) -> (i64, i64) {
    // Only used on sums of parts built by `split`, which stay far inside i64.
    let hi = x / i128::from(SPLIT);
    let lo = x % i128::from(SPLIT);
    (sat(hi), sat(lo))
}

fn joined(hi: i64, lo: i64) -> i128 {
    i128::from(hi) * i128::from(SPLIT) + i128::from(lo)
}

/// The rollup keys one event counts under, at the given grains.
fn keys_of<'a>(
    e: &CostEvent,
    tags: impl Iterator<Item = (&'a str, &'a str)> + Clone,
    grains: &[&'static str],
) -> Vec<RollupKey> {
    let mut dims: Vec<(&'static str, String, String, String)> = vec![
        (TOTAL, String::new(), String::new(), String::new()),
        (MODEL, String::new(), e.provider.clone(), e.model.clone()),
        (KEY_MODEL, String::new(), e.api_key_id.clone().unwrap_or_default(), e.model.clone()),
        (SOURCE, String::new(), e.source.clone(), String::new()),
    ];
    if e.event_type == "tool" || e.tool_name.is_some() {
        let label = e.tool_name.clone().unwrap_or_else(|| e.model.clone());
        dims.push((TOOL, String::new(), label, String::new()));
    }
    if let Some(trace) = &e.trace_id {
        dims.push((TRACE, String::new(), trace.clone(), String::new()));
    }
    for (k, v) in tags {
        dims.push((TAG_MODEL, k.to_owned(), v.to_owned(), e.model.clone()));
        dims.push((TAG_KEY, k.to_owned(), String::new(), String::new()));
    }
    let mut keys = Vec::with_capacity(dims.len() * grains.len());
    for &grain in grains {
        let bucket = e.created_at.div_euclid(if grain == "d" { DAY_MS } else { HOUR_MS });
        for (dim, name, label1, label2) in &dims {
            keys.push(RollupKey {
                org_id: e.org_id.clone(),
                dim,
                name: name.clone(),
                grain,
                bucket,
                label1: label1.clone(),
                label2: label2.clone(),
                estimated: e.estimated,
            });
        }
    }
    keys
}

/// Aggregates events (each with every tag it carries) into rollup sums.
pub fn aggregate<'a, I, T>(events: I, grains: &[&'static str]) -> BTreeMap<RollupKey, Sums>
where
    I: IntoIterator<Item = (&'a CostEvent, T)>,
    T: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    let mut out: BTreeMap<RollupKey, Sums> = BTreeMap::new();
    for (e, tags) in events {
        let sums = Sums::of_event(e);
        for key in keys_of(e, tags, grains) {
            out.entry(key).or_default().add(&sums);
        }
    }
    out
}

fn to_row(key: RollupKey, s: &Sums) -> RollupRow {
    let (cost_hi, cost_lo) = parts(s.cost);
    let (input_hi, input_lo) = parts(s.input);
    let (output_hi, output_lo) = parts(s.output);
    let (cached_hi, cached_lo) = parts(s.cached);
    let (reasoning_hi, reasoning_lo) = parts(s.reasoning);
    let (duration_hi, duration_lo) = parts(s.duration);
    let (bd_input_hi, bd_input_lo) = parts(s.breakdown[0]);
    let (bd_output_hi, bd_output_lo) = parts(s.breakdown[1]);
    let (bd_cached_hi, bd_cached_lo) = parts(s.breakdown[2]);
    let (bd_reasoning_hi, bd_reasoning_lo) = parts(s.breakdown[3]);
    RollupRow {
        org_id: key.org_id,
        dim: key.dim.to_owned(),
        name: key.name,
        grain: key.grain.to_owned(),
        bucket: key.bucket,
        label1: key.label1,
        label2: key.label2,
        estimated: key.estimated,
        event_count: sat(s.count),
        cost_hi,
        cost_lo,
        input_hi,
        input_lo,
        output_hi,
        output_lo,
        cached_hi,
        cached_lo,
        reasoning_hi,
        reasoning_lo,
        duration_hi,
        duration_lo,
        duration_count: sat(s.duration_count),
        bd_input_hi,
        bd_input_lo,
        bd_output_hi,
        bd_output_lo,
        bd_cached_hi,
        bd_cached_lo,
        bd_reasoning_hi,
        bd_reasoning_lo,
    }
}

/// The exact sums a stored row holds.
pub fn sums_of(r: &RollupRow) -> Sums {
    Sums {
        count: r.event_count.into(),
        cost: joined(r.cost_hi, r.cost_lo),
        input: joined(r.input_hi, r.input_lo),
        output: joined(r.output_hi, r.output_lo),
        cached: joined(r.cached_hi, r.cached_lo),
        reasoning: joined(r.reasoning_hi, r.reasoning_lo),
        duration: joined(r.duration_hi, r.duration_lo),
        duration_count: r.duration_count.into(),
        breakdown: [
            joined(r.bd_input_hi, r.bd_input_lo),
            joined(r.bd_output_hi, r.bd_output_lo),
            joined(r.bd_cached_hi, r.bd_cached_lo),
            joined(r.bd_reasoning_hi, r.bd_reasoning_lo),
        ],
    }
}

/// The rows a batch of new events adds, day and hour grain, in key order (every
/// commit touches rows in the same order, so concurrent PostgreSQL commits cannot
/// deadlock on them). Each event comes with all of its tags.
pub fn plan<'a, I, T>(events: I) -> Vec<RollupRow>
where
    I: IntoIterator<Item = (&'a CostEvent, T)>,
    T: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    rows(partial(events))
}

/// Rollup sums not written yet: one job's, or a whole commit's.
pub type Partial = BTreeMap<RollupKey, Sums>;

/// The day and hour sums of `events` (each with all of its tags). The accounting
/// writer's callers compute them for their own events on their own threads, so that
/// the one writer merges a few dozen keys per job ([`merge`]) instead of building
/// and sorting about eighteen keys per event.
pub fn partial<'a, I, T>(events: I) -> Partial
where
    I: IntoIterator<Item = (&'a CostEvent, T)>,
    T: Iterator<Item = (&'a str, &'a str)> + Clone,
{
    aggregate(events, &["d", "h"])
}

/// Adds the sums of `from` into `into`.
pub fn merge(into: &mut Partial, from: &Partial) {
    for (key, sums) in from {
        match into.get_mut(key) {
            Some(total) => total.add(sums),
            None => {
                into.insert(key.clone(), *sums);
            }
        }
    }
}

/// The stored rows of `sums`, in key order (see [`plan`] for why the order matters).
pub fn rows(sums: Partial) -> Vec<RollupRow> {
    sums.into_iter().map(|(k, s)| to_row(k, &s)).collect()
}

/// Upserts planned rollup rows (`$rows: &[RollupRow]`) inside the caller's
/// transaction: new rows are inserted, existing ones get the sums added. Expanded
/// for the sync SQLite and the async PostgreSQL connection like the commit itself
/// (`$($aw)*` is `.await` or nothing). Chunks of 64, 8 and 1 rows (the commit's
/// `for_fixed_chunks!`) keep the statement shapes few, so they stay prepared.
macro_rules! upsert_rollups {
    ($conn:ident, $rows:expr, $($aw:tt)*) => {{
        use diesel::upsert::excluded;
        use $crate::db::schema::cost_rollups as r;
        let refs: Vec<&$crate::db::rollups::RollupRow> = $rows.iter().collect();
        $crate::db::cost_events::for_fixed_chunks!(refs.as_slice(), |chunk| {
            diesel::insert_into(r::table)
                .values(chunk)
                .on_conflict((r::org_id, r::dim, r::name, r::grain, r::bucket, r::label1, r::label2, r::estimated))
                .do_update()
                .set((
                    r::event_count.eq(r::event_count + excluded(r::event_count)),
                    r::cost_hi.eq(r::cost_hi + excluded(r::cost_hi)),
                    r::cost_lo.eq(r::cost_lo + excluded(r::cost_lo)),
                    r::input_hi.eq(r::input_hi + excluded(r::input_hi)),
                    r::input_lo.eq(r::input_lo + excluded(r::input_lo)),
                    r::output_hi.eq(r::output_hi + excluded(r::output_hi)),
                    r::output_lo.eq(r::output_lo + excluded(r::output_lo)),
                    r::cached_hi.eq(r::cached_hi + excluded(r::cached_hi)),
                    r::cached_lo.eq(r::cached_lo + excluded(r::cached_lo)),
                    r::reasoning_hi.eq(r::reasoning_hi + excluded(r::reasoning_hi)),
                    r::reasoning_lo.eq(r::reasoning_lo + excluded(r::reasoning_lo)),
                    r::duration_hi.eq(r::duration_hi + excluded(r::duration_hi)),
                    r::duration_lo.eq(r::duration_lo + excluded(r::duration_lo)),
                    r::duration_count.eq(r::duration_count + excluded(r::duration_count)),
                    r::bd_input_hi.eq(r::bd_input_hi + excluded(r::bd_input_hi)),
                    r::bd_input_lo.eq(r::bd_input_lo + excluded(r::bd_input_lo)),
                    r::bd_output_hi.eq(r::bd_output_hi + excluded(r::bd_output_hi)),
                    r::bd_output_lo.eq(r::bd_output_lo + excluded(r::bd_output_lo)),
                    r::bd_cached_hi.eq(r::bd_cached_hi + excluded(r::bd_cached_hi)),
                    r::bd_cached_lo.eq(r::bd_cached_lo + excluded(r::bd_cached_lo)),
                    r::bd_reasoning_hi.eq(r::bd_reasoning_hi + excluded(r::bd_reasoning_hi)),
                    r::bd_reasoning_lo.eq(r::bd_reasoning_lo + excluded(r::bd_reasoning_lo)),
                ))
                .execute($conn) $($aw)* ?;
        });
    }};
}
pub(crate) use upsert_rollups;

/// What one read needs: the rows of dimension `dim` (with tag key `name`; `""` for
/// the dimensions without one), optionally only those whose first label is `label1`.
#[derive(Debug, Clone, Copy)]
pub struct Spec<'a> {
    pub dim: &'static str,
    /// `None`: every tag key.
    pub name: Option<&'a str>,
    pub label1: Option<&'a str>,
}

/// A row of a read window: its labels, UTC day and exact sums.
#[derive(Debug, Clone)]
pub struct WindowRow {
    pub dim: String,
    pub name: String,
    pub day: i64,
    pub label1: String,
    pub label2: String,
    pub sums: Sums,
}

/// The smallest multiple of `unit` at or after `x`, divided by `unit`.
fn ceil_div(x: i64, unit: i64) -> i64 {
    let q = x.div_euclid(unit);
    if x.rem_euclid(unit) == 0 {
        q
    } else {
        q.saturating_add(1)
    }
}

type TagsById = HashMap<String, Vec<(String, String)>>;

fn aggregate_loaded(events: &[CostEvent], tags: &TagsById) -> BTreeMap<RollupKey, Sums> {
    static NONE: Vec<(String, String)> = Vec::new();
    aggregate(
        events.iter().map(|e| {
            let t = tags.get(&e.id).unwrap_or(&NONE);
            (e, t.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        }),
        &["h"],
    )
}

/// The organization's events created in `[from, to)` with their tags.
macro_rules! load_events_body {
    ($conn:ident, $org_id:expr, $from:expr, $to:expr) => {{
        let events: Vec<CostEvent> = cost_events::table
            .filter(cost_events::org_id.eq($org_id))
            .filter(cost_events::created_at.ge($from))
            .filter(cost_events::created_at.lt($to))
            .select(CostEvent::as_select())
            .load($conn)
            .await?;
        let mut tags: TagsById = HashMap::new();
        for chunk in events.chunks(500) {
            let ids: Vec<&str> = chunk.iter().map(|e| e.id.as_str()).collect();
            let rows: Vec<(String, String, String)> = cost_event_tags::table
                .filter(cost_event_tags::event_id.eq_any(ids))
                .select((cost_event_tags::event_id, cost_event_tags::tag_key, cost_event_tags::tag_value))
                .load($conn)
                .await?;
            for (id, k, v) in rows {
                tags.entry(id).or_default().push((k, v));
            }
        }
        Ok::<_, crate::db::DbError>((events, tags))
    }};
}

/// The organization's rows of `specs` for the events created at or after `since`
/// (without estimates when `exclude_estimated`): whole days from day rows, the rest of
/// the first day from hour rows, the first partial hour aggregated from raw events.
pub async fn window(
    pool: &Pool,
    org_id: &str,
    since: i64,
    exclude_estimated: bool,
    specs: &[Spec<'_>],
) -> DbResult<Vec<WindowRow>> {
    let first_day = ceil_div(since, DAY_MS);
    let first_hour = ceil_div(since, HOUR_MS);
    let edge_end = first_hour.saturating_mul(HOUR_MS);
    use diesel_async::RunQueryDsl;
    let mut out = Vec::new();
    with_conn!(pool, read, |conn| {
        for spec in specs {
            let ranges = [("d", first_day, i64::MAX), ("h", first_hour, first_day.saturating_mul(24))];
            for (grain, from, to) in ranges {
                if from >= to {
                    continue;
                }
                let mut q = cost_rollups::table
                    .filter(cost_rollups::org_id.eq(org_id))
                    .filter(cost_rollups::dim.eq(spec.dim))
                    .filter(cost_rollups::grain.eq(grain))
                    .filter(cost_rollups::bucket.ge(from))
                    .filter(cost_rollups::bucket.lt(to))
                    .select(RollupRow::as_select())
                    .into_boxed();
                if let Some(n) = spec.name {
                    q = q.filter(cost_rollups::name.eq(n));
                }
                if let Some(l) = spec.label1 {
                    q = q.filter(cost_rollups::label1.eq(l));
                }
                if exclude_estimated {
                    q = q.filter(cost_rollups::estimated.eq(false));
                }
                let rows: Vec<RollupRow> = q.load(conn).await?;
                out.extend(rows.iter().map(|r| WindowRow {
                    dim: r.dim.clone(),
                    name: r.name.clone(),
                    day: if grain == "d" { r.bucket } else { r.bucket.div_euclid(24) },
                    label1: r.label1.clone(),
                    label2: r.label2.clone(),
                    sums: sums_of(r),
                }));
            }
        }
        if since < edge_end {
            let (events, tags) = load_events_body!(conn, org_id, since, edge_end)?;
            let edge = aggregate_loaded(&events, &tags);
            for (key, sums) in edge {
                let wanted = specs.iter().any(|s| {
                    s.dim == key.dim
                        && s.name.is_none_or(|n| n == key.name)
                        && s.label1.is_none_or(|l| l == key.label1)
                });
                if wanted && !(exclude_estimated && key.estimated) {
                    out.push(WindowRow {
                        dim: key.dim.to_owned(),
                        name: key.name,
                        day: key.bucket.div_euclid(24),
                        label1: key.label1,
                        label2: key.label2,
                        sums,
                    });
                }
            }
        }
        Ok::<_, crate::db::DbError>(())
    })?;
    Ok(out)
}

/// The statements of [`rebuild`], expanded for the sync SQLite connection (inside
/// one blocking task, like the accounting commit) and the async PostgreSQL one.
macro_rules! rebuild_statements {
    ($conn:ident, $($aw:tt)*) => {{
        diesel::delete(cost_rollups::table).execute($conn) $($aw)* ?;
        let mut acc: BTreeMap<RollupKey, Sums> = BTreeMap::new();
        let mut last = String::new();
        let mut seen = 0u64;
        loop {
            let page: Vec<CostEvent> = cost_events::table
                .filter(cost_events::id.gt(&last))
                .order(cost_events::id.asc())
                .limit(REBUILD_PAGE)
                .select(CostEvent::as_select())
                .load($conn) $($aw)* ?;
            let Some(tail) = page.last() else { break };
            last = tail.id.clone();
            seen += page.len() as u64;
            let mut tags: TagsById = HashMap::new();
            for chunk in page.chunks(500) {
                let ids: Vec<&str> = chunk.iter().map(|e| e.id.as_str()).collect();
                let rows: Vec<(String, String, String)> = cost_event_tags::table
                    .filter(cost_event_tags::event_id.eq_any(ids))
                    .select((cost_event_tags::event_id, cost_event_tags::tag_key, cost_event_tags::tag_value))
                    .load($conn) $($aw)* ?;
                for (id, k, v) in rows {
                    tags.entry(id).or_default().push((k, v));
                }
            }
            let part = aggregate(
                page.iter().map(|e| {
                    let t = tags.get(&e.id).map(Vec::as_slice).unwrap_or(&[]);
                    (e, t.iter().map(|(k, v)| (k.as_str(), v.as_str())))
                }),
                &["d", "h"],
            );
            for (k, s) in part {
                acc.entry(k).or_default().add(&s);
            }
        }
        let rows: Vec<RollupRow> = acc.into_iter().map(|(k, s)| to_row(k, &s)).collect();
        upsert_rollups!($conn, &rows, $($aw)*);
        diesel::update(rollup_backfill::table)
            .set(rollup_backfill::done_at.eq(Some(crate::util::time::now_ms())))
            .execute($conn) $($aw)* ?;
        Ok::<u64, diesel::result::Error>(seen)
    }};
}

/// Rebuilds every rollup from the raw events, in one write transaction: the
/// back-fill of existing events, and the loader of the read benchmark. Returns the
/// number of events read.
pub async fn rebuild(pool: &Pool) -> DbResult<u64> {
    Ok(match pool {
        Pool::Sqlite(p) => {
            let mut conn = p.write().await?;
            conn.spawn_blocking(|c| {
                use diesel::RunQueryDsl;
                c.immediate_transaction(|c| rebuild_statements!(c,))
            })
            .await?
        }
        Pool::Pg(p) => {
            let mut conn = p.write().await?;
            use diesel_async::{AsyncConnection, RunQueryDsl};
            conn.transaction::<_, diesel::result::Error, _>(async |c| {
                // Writers (another instance's commits) wait until the rebuild is in,
                // so no event is counted twice or missed; a second rebuild waits too.
                diesel::sql_query("LOCK TABLE cost_events IN SHARE ROW EXCLUSIVE MODE").execute(c).await?;
                rebuild_statements!(c, .await)
            })
            .await?
        }
    })
}

const REBUILD_PAGE: i64 = 20_000;

/// Runs [`rebuild`] once, when the migration that created the rollups left the
/// back-fill pending (a database with events from before the rollups).
pub async fn backfill_if_pending(pool: &Pool) -> DbResult<()> {
    use diesel_async::RunQueryDsl;
    let pending: bool = with_conn!(pool, read, |conn| {
        let rows: Vec<Option<i64>> =
            rollup_backfill::table.select(rollup_backfill::done_at).load(conn).await?;
        Ok::<_, crate::db::DbError>(rows.iter().any(Option::is_none))
    })?;
    if pending {
        let n = rebuild(pool).await?;
        tracing::info!(events = n, "rollups back-filled from existing cost events");
    }
    Ok(())
}
