//! Rollups: the sums of an organization's cost events per UTC day and UTC hour under
//! each dimension value the dashboard reads (model, API key × model, source, tool,
//! trace, tag value × model, tag key, and the organization's total). They exist so
//! that summary, attribution and tag-key reads add up a few hundred rows instead of
//! scanning every raw event.
//!
//! The fold keeps them, off the commit that makes an event durable
//! ([`super::fold`]): it aggregates the committed events past its mark in memory
//! ([`partial`]) and upserts each touched row once ([`upsert_rollups!`]), with the
//! new mark in the same transaction. A negative cost (a refund) is simply added.
//! Every read of the rows folds what is pending first ([`super::fold::catch_up`]),
//! so an answer counts every event committed before it.
//!
//! A read window starts at an arbitrary millisecond `since`. It is answered exactly:
//! whole UTC days from day rows, the rest of the first day from hour rows, and the
//! first partial hour from the raw events themselves (index-backed on
//! `(org_id, created_at)`, at most one hour of events), aggregated by the same
//! code that the commit uses, for the dimensions read only. The dashboard's own
//! windows start on an hour (`api::cost_events::hour_start`) and so never reach the
//! raw events.
//!
//! Sums are kept as exact-sum parts (`Σ x / 10^6`, `Σ x % 10^6`, see
//! [`super::exact_sum`]) and joined in `i128` when read, so they never overflow.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use diesel::{ExpressionMethods, Insertable, QueryDsl, Queryable, Selectable, SelectableHelper};

use crate::db::cost_event_queries::BreakdownTotals;
use crate::db::models::CostEvent;
use crate::db::rollup_shape::Shape;
use crate::db::schema::{
    cost_event_tags, cost_events, cost_rollups, fold_marks, rollup_backfill, trace_spans,
};
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
/// Spend sources (label2 a [`source_label`]) of one API key (`name`; keyed events only).
pub const SPEND_KEY: &str = "spend_key";
/// Spend sources of one user (`name`; events with a user only).
pub const SPEND_USER: &str = "spend_user";
/// Spend sources of one customer (`name`; events with a customer only).
pub const SPEND_CUSTOMER: &str = "spend_customer";
/// Spend sources of one tag (`name` its key, label1 its value).
pub const SPEND_TAG: &str = "spend_tag";
/// Proxied requests that were not refused (the plan cap's count; no labels).
pub const GOVERNED: &str = "governed";

/// The grains every dimension is kept at: UTC day and UTC hour.
pub const DAY: &str = "d";
pub const HOUR: &str = "h";
/// The all-time grain (bucket 0): one row per label for ever, so that an all-time
/// read (the margins' cost per customer tag value, a budget's spend sources without
/// a reset) adds up one row per label however many days the events span.
pub const ALL_TIME: &str = "a";

/// The grains of each dimension, the one list of them: what [`partial`] (the
/// accounting's fold) and the rebuild write, and what a read may use.
pub const GRAINS: [(&str, &[&str]); 13] = [
    (TOTAL, &[DAY, HOUR]),
    (MODEL, &[DAY, HOUR]),
    (KEY_MODEL, &[DAY, HOUR]),
    (SOURCE, &[DAY, HOUR]),
    (TOOL, &[DAY, HOUR]),
    (TRACE, &[DAY, HOUR]),
    (TAG_MODEL, &[DAY, HOUR, ALL_TIME]),
    (TAG_KEY, &[DAY, HOUR]),
    (SPEND_KEY, &[DAY, HOUR, ALL_TIME]),
    (SPEND_USER, &[DAY, HOUR, ALL_TIME]),
    (SPEND_CUSTOMER, &[DAY, HOUR, ALL_TIME]),
    (SPEND_TAG, &[DAY, HOUR, ALL_TIME]),
    (GOVERNED, &[DAY, HOUR]),
];

/// Whether dimension `dim` is kept at `grain` (a dimension missing from [`GRAINS`]
/// at day and hour, so that none is ever dropped).
pub fn has_grain(dim: &str, grain: &str) -> bool {
    GRAINS
        .iter()
        .find(|(d, _)| *d == dim)
        .map_or(grain == DAY || grain == HOUR, |(_, grains)| grains.contains(&grain))
}

/// The bucket of an event created at `created_at` at `grain`.
fn bucket_of(grain: &str, created_at: i64) -> i64 {
    match grain {
        DAY => created_at.div_euclid(DAY_MS),
        HOUR => created_at.div_euclid(HOUR_MS),
        _ => 0,
    }
}

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
///
/// The strings are shared (`Arc<str>`): one event counts under about two dozen keys
/// that repeat its organization, model and source, and the commit merges the keys
/// of every job. The fields are ordered so that the derived order (the order rows
/// are upserted in, see [`plan`]) tells keys apart on the short fields first and
/// compares the organization id, the same in almost every key, last.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RollupKey {
    pub dim: &'static str,
    pub grain: &'static str,
    pub bucket: i64,
    pub name: Arc<str>,
    pub label1: Arc<str>,
    pub label2: Arc<str>,
    pub estimated: bool,
    pub org_id: Arc<str>,
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

pub(crate) fn joined(hi: i64, lo: i64) -> i128 {
    i128::from(hi) * i128::from(SPLIT) + i128::from(lo)
}

/// The label of one spend source (API key, provider, model) in one string, without
/// ambiguity whatever the names hold: `-` for no key or `<len>:<key>`, then
/// `<len>:<provider>`, then the model.
pub fn source_label(api_key_id: Option<&str>, provider: &str, model: &str) -> String {
    let key = api_key_id.map_or_else(|| "-".to_owned(), |k| format!("{}:{k}", k.len()));
    format!("{key}{}:{provider}{model}", provider.len())
}

/// The (API key, provider, model) of a [`source_label`]; `None` for anything else.
pub fn parse_source_label(label: &str) -> Option<(Option<String>, String, String)> {
    fn take(s: &str) -> Option<(&str, &str)> {
        let (len, rest) = s.split_once(':')?;
        let len: usize = len.parse().ok()?;
        Some((rest.get(..len)?, rest.get(len..)?))
    }
    let (key, rest) = match label.strip_prefix('-') {
        Some(rest) => (None, rest),
        None => take(label).map(|(k, rest)| (Some(k.to_owned()), rest))?,
    };
    let (provider, model) = take(rest)?;
    Some((key, provider.to_owned(), model.to_owned()))
}

/// The empty label, shared.
static EMPTY: LazyLock<Arc<str>> = LazyLock::new(|| Arc::from(""));

/// A row's dimension, name, label1 and label2.
type Dim = (&'static str, Arc<str>, Arc<str>, Arc<str>);

/// The [`Dim`] of every row one event counts under, of the dimensions `wanted`.
fn dims_of<'a>(
    e: &CostEvent,
    tags: impl Iterator<Item = (&'a str, &'a str)>,
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<Dim> {
    let empty = || EMPTY.clone();
    let model: Arc<str> = Arc::from(e.model.as_str());
    let source = Arc::from(source_label(e.api_key_id.as_deref(), &e.provider, &e.model));
    let mut dims = Vec::with_capacity(16);
    dims.push((TOTAL, empty(), empty(), empty()));
    dims.push((MODEL, empty(), Arc::from(e.provider.as_str()), model.clone()));
    let key = e.api_key_id.as_deref().map_or_else(empty, Arc::from);
    dims.push((KEY_MODEL, empty(), key, model.clone()));
    dims.push((SOURCE, empty(), Arc::from(e.source.as_str()), empty()));
    if e.event_type == "tool" || e.tool_name.is_some() {
        let label = e.tool_name.as_deref().map_or_else(|| model.clone(), Arc::from);
        dims.push((TOOL, empty(), label, empty()));
    }
    if let Some(trace) = &e.trace_id {
        dims.push((TRACE, empty(), Arc::from(trace.as_str()), empty()));
    }
    let entities = [(SPEND_KEY, &e.api_key_id), (SPEND_USER, &e.user_id), (SPEND_CUSTOMER, &e.customer_id)];
    for (dim, id) in entities {
        if let Some(id) = id {
            dims.push((dim, Arc::from(id.as_str()), empty(), Arc::clone(&source)));
        }
    }
    if e.source == "proxy" && e.budget_status != "denied" {
        dims.push((GOVERNED, empty(), empty(), empty()));
    }
    if wanted(TAG_MODEL) || wanted(TAG_KEY) || wanted(SPEND_TAG) {
        for (k, v) in tags {
            let (k, v): (Arc<str>, Arc<str>) = (Arc::from(k), Arc::from(v));
            dims.push((TAG_MODEL, k.clone(), v.clone(), model.clone()));
            dims.push((TAG_KEY, k.clone(), empty(), empty()));
            dims.push((SPEND_TAG, k, v, Arc::clone(&source)));
        }
    }
    dims.retain(|d| wanted(d.0));
    dims
}

/// The rollup keys one event counts under, at the given grains.
fn keys_of<'a>(
    e: &CostEvent,
    tags: impl Iterator<Item = (&'a str, &'a str)>,
    grains: &[&'static str],
    wanted: &dyn Fn(&str) -> bool,
) -> Vec<RollupKey> {
    let dims = dims_of(e, tags, wanted);
    let org: Arc<str> = Arc::from(e.org_id.as_str());
    let mut keys = Vec::with_capacity(dims.len() * grains.len());
    for &grain in grains {
        let bucket = bucket_of(grain, e.created_at);
        for (dim, name, label1, label2) in dims.iter().filter(|d| has_grain(d.0, grain)) {
            keys.push(RollupKey {
                dim,
                grain,
                bucket,
                name: name.clone(),
                label1: label1.clone(),
                label2: label2.clone(),
                estimated: e.estimated,
                org_id: org.clone(),
            });
        }
    }
    keys
}

/// Aggregates events (each with every tag it carries) into rollup sums.
pub fn aggregate<'a, I, T>(events: I, grains: &[&'static str]) -> BTreeMap<RollupKey, Sums>
where
    I: IntoIterator<Item = (&'a CostEvent, T)>,
    T: Iterator<Item = (&'a str, &'a str)>,
{
    aggregate_dims(events, grains, &|_| true)
}

/// [`aggregate`], of the dimensions `wanted` only.
fn aggregate_dims<'a, I, T>(events: I, grains: &[&'static str], wanted: &dyn Fn(&str) -> bool) -> Partial
where
    I: IntoIterator<Item = (&'a CostEvent, T)>,
    T: Iterator<Item = (&'a str, &'a str)>,
{
    use std::collections::hash_map::Entry;
    let mut out: BTreeMap<RollupKey, Sums> = BTreeMap::new();
    // Sums per shape first (see `rollup_shape`); the trace, the one key that differs
    // between calls of one shape, per event.
    let mut shapes: HashMap<Shape<'a>, (&'a CostEvent, Sums)> = HashMap::new();
    let traced = wanted(TRACE);
    for (e, tags) in events {
        let sums = Sums::of_event(e);
        if let Some(trace) = e.trace_id.as_deref().filter(|_| traced) {
            add_trace(&mut out, e, trace, grains, &sums);
        }
        match shapes.entry(Shape::of(e, tags)) {
            Entry::Occupied(mut slot) => slot.get_mut().1.add(&sums),
            Entry::Vacant(slot) => {
                slot.insert((e, sums));
            }
        }
    }
    let untraced = |dim: &str| dim != TRACE && wanted(dim);
    for (shape, (e, sums)) in &shapes {
        for key in keys_of(e, shape.tags(), grains, &untraced) {
            out.entry(key).or_default().add(sums);
        }
    }
    out
}

/// Adds one event's sums under its trace's keys.
fn add_trace(out: &mut Partial, e: &CostEvent, trace: &str, grains: &[&'static str], sums: &Sums) {
    let (org, label): (Arc<str>, Arc<str>) = (Arc::from(e.org_id.as_str()), Arc::from(trace));
    for &grain in grains.iter().filter(|g| has_grain(TRACE, g)) {
        let key = RollupKey {
            dim: TRACE,
            grain,
            bucket: bucket_of(grain, e.created_at),
            name: EMPTY.clone(),
            label1: label.clone(),
            label2: EMPTY.clone(),
            estimated: e.estimated,
            org_id: org.clone(),
        };
        out.entry(key).or_default().add(sums);
    }
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
        org_id: key.org_id.to_string(),
        dim: key.dim.to_owned(),
        name: key.name.to_string(),
        grain: key.grain.to_owned(),
        bucket: key.bucket,
        label1: key.label1.to_string(),
        label2: key.label2.to_string(),
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
    T: Iterator<Item = (&'a str, &'a str)>,
{
    rows(partial(events))
}

/// Rollup sums not written yet: one job's, or a whole commit's.
pub type Partial = BTreeMap<RollupKey, Sums>;

/// The sums of `events` (each with all of its tags) at every grain of [`GRAINS`]:
/// what the fold adds for a page of committed events.
pub fn partial<'a, I, T>(events: I) -> Partial
where
    I: IntoIterator<Item = (&'a CostEvent, T)>,
    T: Iterator<Item = (&'a str, &'a str)>,
{
    aggregate(events, &[DAY, HOUR, ALL_TIME])
}

/// Adds the sums of `from` into `into`.
pub fn merge(into: &mut Partial, from: Partial) {
    use std::collections::btree_map::Entry;
    for (key, sums) in from {
        match into.entry(key) {
            Entry::Occupied(mut total) => total.get_mut().add(&sums),
            Entry::Vacant(slot) => {
                slot.insert(sums);
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
/// `for_fixed_chunks!`) keep the statement shapes few, and [`RollupUpsert`] lets the
/// connection keep each prepared.
macro_rules! upsert_rollups {
    ($conn:ident, $rows:expr, $($aw:tt)*) => {{
        let refs: Vec<&$crate::db::rollups::RollupRow> = $rows.iter().collect();
        $crate::db::cost_events::for_fixed_chunks!(refs.as_slice(), |chunk| {
            $crate::db::rollups::RollupUpsert(chunk).execute($conn) $($aw)* ?;
        });
    }};
}
pub(crate) use upsert_rollups;

/// The upsert of `N` rollup rows, written out by hand. Diesel's own upsert
/// (`on_conflict().do_update()`) is never kept prepared: its SQL could change with
/// the values of an update changeset, so every commit parsed and planned it again
/// (about 3 % of the writer's time under SQLite ingest). This statement's SQL depends
/// on `N` alone, so its query id is static and each connection prepares it once.
pub struct RollupUpsert<'a, const N: usize>(pub [&'a RollupRow; N]);

/// The query id of [`RollupUpsert`] with `N` rows.
pub struct RollupUpsertId<const N: usize>;

impl<const N: usize> diesel::query_builder::QueryId for RollupUpsert<'_, N> {
    type QueryId = RollupUpsertId<N>;
    const HAS_STATIC_QUERY_ID: bool = true;
}

impl<Conn, const N: usize> diesel::RunQueryDsl<Conn> for RollupUpsert<'_, N> {}

/// The columns of `cost_rollups` in insert order: the key, then the sums.
const ROLLUP_COLUMNS: &str = "org_id, dim, name, grain, bucket, label1, label2, estimated, event_count, \
     cost_hi, cost_lo, input_hi, input_lo, output_hi, output_lo, cached_hi, cached_lo, reasoning_hi, \
     reasoning_lo, duration_hi, duration_lo, duration_count, bd_input_hi, bd_input_lo, bd_output_hi, \
     bd_output_lo, bd_cached_hi, bd_cached_lo, bd_reasoning_hi, bd_reasoning_lo";

/// The sums of `cost_rollups`, added to an existing row's on conflict.
const ROLLUP_SUMS: [&str; 22] = [
    "event_count",
    "cost_hi",
    "cost_lo",
    "input_hi",
    "input_lo",
    "output_hi",
    "output_lo",
    "cached_hi",
    "cached_lo",
    "reasoning_hi",
    "reasoning_lo",
    "duration_hi",
    "duration_lo",
    "duration_count",
    "bd_input_hi",
    "bd_input_lo",
    "bd_output_hi",
    "bd_output_lo",
    "bd_cached_hi",
    "bd_cached_lo",
    "bd_reasoning_hi",
    "bd_reasoning_lo",
];

impl<DB, const N: usize> diesel::query_builder::QueryFragment<DB> for RollupUpsert<'_, N>
where
    DB: diesel::backend::Backend
        + diesel::sql_types::HasSqlType<diesel::sql_types::Text>
        + diesel::sql_types::HasSqlType<diesel::sql_types::BigInt>
        + diesel::sql_types::HasSqlType<diesel::sql_types::Bool>,
    str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
    i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
    bool: diesel::serialize::ToSql<diesel::sql_types::Bool, DB>,
{
    fn walk_ast<'b>(
        &'b self,
        mut out: diesel::query_builder::AstPass<'_, 'b, DB>,
    ) -> diesel::QueryResult<()> {
        use diesel::sql_types::{BigInt, Bool, Text};
        out.push_sql("INSERT INTO cost_rollups (");
        out.push_sql(ROLLUP_COLUMNS);
        out.push_sql(") VALUES ");
        for (i, r) in self.0.iter().enumerate() {
            out.push_sql(if i == 0 { "(" } else { ", (" });
            for text in [&r.org_id, &r.dim, &r.name, &r.grain] {
                out.push_bind_param::<Text, str>(text.as_str())?;
                out.push_sql(", ");
            }
            out.push_bind_param::<BigInt, i64>(&r.bucket)?;
            for text in [&r.label1, &r.label2] {
                out.push_sql(", ");
                out.push_bind_param::<Text, str>(text.as_str())?;
            }
            out.push_sql(", ");
            out.push_bind_param::<Bool, bool>(&r.estimated)?;
            let sums = [
                &r.event_count,
                &r.cost_hi,
                &r.cost_lo,
                &r.input_hi,
                &r.input_lo,
                &r.output_hi,
                &r.output_lo,
                &r.cached_hi,
                &r.cached_lo,
                &r.reasoning_hi,
                &r.reasoning_lo,
                &r.duration_hi,
                &r.duration_lo,
                &r.duration_count,
                &r.bd_input_hi,
                &r.bd_input_lo,
                &r.bd_output_hi,
                &r.bd_output_lo,
                &r.bd_cached_hi,
                &r.bd_cached_lo,
                &r.bd_reasoning_hi,
                &r.bd_reasoning_lo,
            ];
            for sum in sums {
                out.push_sql(", ");
                out.push_bind_param::<BigInt, i64>(sum)?;
            }
            out.push_sql(")");
        }
        out.push_sql(
            " ON CONFLICT (org_id, dim, name, grain, bucket, label1, label2, estimated) DO UPDATE SET ",
        );
        for (i, column) in ROLLUP_SUMS.iter().enumerate() {
            if i > 0 {
                out.push_sql(", ");
            }
            out.push_sql(column);
            out.push_sql(" = cost_rollups.");
            out.push_sql(column);
            out.push_sql(" + excluded.");
            out.push_sql(column);
        }
        Ok(())
    }
}

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

pub(crate) type TagsById = HashMap<String, Vec<(String, String)>>;

/// Whether any of `specs` reads a tag dimension.
fn reads_tags(specs: &[Spec<'_>]) -> bool {
    specs.iter().any(|s| [TAG_MODEL, TAG_KEY, SPEND_TAG].contains(&s.dim))
}

/// The hour-grain sums of loaded events (with their tags) under the dimensions of
/// `specs` only.
fn aggregate_loaded(events: &[CostEvent], tags: &TagsById, specs: &[Spec<'_>]) -> Partial {
    static NONE: Vec<(String, String)> = Vec::new();
    let wanted = |dim: &str| specs.iter().any(|s| s.dim == dim);
    aggregate_dims(
        events.iter().map(|e| {
            let t = tags.get(&e.id).unwrap_or(&NONE);
            (e, t.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        }),
        &["h"],
        &wanted,
    )
}

/// The organization's events created in `[from, to)`, with their tags when
/// `$with_tags` (a read of a tag dimension).
macro_rules! load_events_body {
    ($conn:ident, $org_id:expr, $from:expr, $to:expr, $with_tags:expr) => {{
        let events: Vec<CostEvent> = cost_events::table
            .filter(cost_events::org_id.eq($org_id))
            .filter(cost_events::created_at.ge($from))
            .filter(cost_events::created_at.lt($to))
            .select(CostEvent::as_select())
            .load($conn)
            .await?;
        let mut tags: TagsById = HashMap::new();
        for chunk in events.chunks(500).filter(|_| $with_tags) {
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

/// How a window `[since, until)` is read: whole UTC days from day rows, whole hours
/// from hour rows, and what is left at either edge (under an hour each) from raw
/// events. `until: None` is open-ended.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Cover {
    /// Day buckets `[from, to)`.
    pub(crate) days: Option<(i64, i64)>,
    /// Hour buckets `[from, to)`, before and after the days.
    pub(crate) hours: Vec<(i64, i64)>,
    /// Milliseconds `[from, to)` read from raw events.
    pub(crate) raw: Vec<(i64, i64)>,
}

pub(crate) fn cover(since: i64, until: Option<i64>) -> Cover {
    let mut c = Cover::default();
    let h0 = ceil_div(since, HOUR_MS);
    let h1 = until.map(|u| u.div_euclid(HOUR_MS));
    if h1.is_some_and(|h1| h0 >= h1) {
        let until = until.unwrap_or(i64::MAX);
        if since < until {
            c.raw.push((since, until));
        }
        return c;
    }
    if since < h0.saturating_mul(HOUR_MS) {
        c.raw.push((since, h0.saturating_mul(HOUR_MS)));
    }
    let d0 = ceil_div(h0, 24);
    let d1 = h1.map_or(i64::MAX, |h1| h1.div_euclid(24));
    let h1 = h1.unwrap_or(i64::MAX);
    if d0 < d1 {
        c.days = Some((d0, d1));
        c.hours.push((h0, d0.saturating_mul(24)));
        if h1 != i64::MAX {
            c.hours.push((d1 * 24, h1));
        }
    } else {
        c.hours.push((h0, h1));
    }
    c.hours.retain(|(a, b)| a < b);
    if let Some(until) = until {
        if h1.saturating_mul(HOUR_MS) < until {
            c.raw.push((h1 * HOUR_MS, until));
        }
    }
    c
}

/// A stored-row condition, boxed so that either backend's query can take it.
pub(crate) type RowCondition<'a, DB> =
    Box<dyn diesel::BoxableExpression<cost_rollups::table, DB, SqlType = diesel::sql_types::Bool> + 'a>;

/// The organization's stored rows of `spec` in one range of buckets (`grain`,
/// `[from, to)`), without estimates when `exclude_estimated`: what every window read
/// filters `cost_rollups` on.
pub(crate) fn stored_rows<'a, DB>(
    org_id: &'a str,
    spec: Spec<'a>,
    (grain, from, to): (&'a str, i64, i64),
    exclude_estimated: bool,
) -> RowCondition<'a, DB>
where
    DB: diesel::backend::Backend
        + diesel::backend::DieselReserveSpecialization
        + diesel::sql_types::HasSqlType<diesel::sql_types::Bool>
        + 'a,
    str: diesel::serialize::ToSql<diesel::sql_types::Text, DB>,
    i64: diesel::serialize::ToSql<diesel::sql_types::BigInt, DB>,
    bool: diesel::serialize::ToSql<diesel::sql_types::Bool, DB>,
{
    use diesel::BoolExpressionMethods;
    let in_grain = cost_rollups::org_id
        .eq(org_id)
        .and(cost_rollups::dim.eq(spec.dim))
        .and(cost_rollups::grain.eq(grain));
    // One bucket (the all-time one) by equality: the primary key then walks in label
    // order, and a `GROUP BY` on the labels needs no sort.
    let mut cond: RowCondition<'a, DB> = if to == from.saturating_add(1) {
        Box::new(in_grain.and(cost_rollups::bucket.eq(from)))
    } else {
        Box::new(in_grain.and(cost_rollups::bucket.ge(from)).and(cost_rollups::bucket.lt(to)))
    };
    if let Some(n) = spec.name {
        cond = Box::new(cond.and(cost_rollups::name.eq(n)));
    }
    if let Some(l) = spec.label1 {
        cond = Box::new(cond.and(cost_rollups::label1.eq(l)));
    }
    if exclude_estimated {
        cond = Box::new(cond.and(cost_rollups::estimated.eq(false)));
    }
    cond
}

/// The organization's rows of `specs` for the events created at or after `since`
/// (without estimates when `exclude_estimated`), see [`window_between`].
pub async fn window(
    pool: &Pool,
    org_id: &str,
    since: i64,
    exclude_estimated: bool,
    specs: &[Spec<'_>],
) -> DbResult<Vec<WindowRow>> {
    window_between(pool, org_id, (since, None), exclude_estimated, specs).await
}

/// The organization's rows of `specs` for the events created in `[since, until)`
/// (`until: None`: no end), without estimates when `exclude_estimated`: whole days
/// from day rows, whole hours from hour rows, the partial hours at either edge
/// aggregated from raw events (see [`cover`]).
pub async fn window_between(
    pool: &Pool,
    org_id: &str,
    (since, until): (i64, Option<i64>),
    exclude_estimated: bool,
    specs: &[Spec<'_>],
) -> DbResult<Vec<WindowRow>> {
    crate::db::fold::catch_up(pool).await?;
    let c = cover(since, until);
    let ranges: Vec<(&str, i64, i64)> = c
        .days
        .map(|(a, b)| ("d", a, b))
        .into_iter()
        .chain(c.hours.iter().map(|&(a, b)| ("h", a, b)))
        .collect();
    use diesel_async::RunQueryDsl;
    let mut out = Vec::new();
    with_conn!(pool, read, |conn| {
        for spec in specs {
            for &(grain, from, to) in &ranges {
                let rows: Vec<RollupRow> = cost_rollups::table
                    .filter(stored_rows(org_id, *spec, (grain, from, to), exclude_estimated))
                    .select(RollupRow::as_select())
                    .load(conn)
                    .await?;
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
        Ok::<_, crate::db::DbError>(())
    })?;
    out.extend(raw_rows(pool, org_id, &c.raw, exclude_estimated, specs).await?);
    Ok(out)
}

/// The rows of `specs` aggregated from the organization's raw events created in
/// each of `ranges` (milliseconds `[from, to)`, each under an hour).
pub(crate) async fn raw_rows(
    pool: &Pool,
    org_id: &str,
    ranges: &[(i64, i64)],
    exclude_estimated: bool,
    specs: &[Spec<'_>],
) -> DbResult<Vec<WindowRow>> {
    use diesel_async::RunQueryDsl;
    let mut out = Vec::new();
    if ranges.is_empty() {
        return Ok(out);
    }
    with_conn!(pool, read, |conn| {
        for &(from, to) in ranges {
            let (events, tags) = load_events_body!(conn, org_id, from, to, reads_tags(specs))?;
            out.extend(edge_rows(&aggregate_loaded(&events, &tags, specs), specs, exclude_estimated));
        }
        Ok::<_, crate::db::DbError>(())
    })?;
    Ok(out)
}

/// The rows of `specs` among raw-event aggregates (hour grain).
fn edge_rows(
    edge: &BTreeMap<RollupKey, Sums>,
    specs: &[Spec<'_>],
    exclude_estimated: bool,
) -> Vec<WindowRow> {
    let wanted = |key: &RollupKey| {
        specs.iter().any(|s| {
            s.dim == key.dim
                && s.name.is_none_or(|n| n == &*key.name)
                && s.label1.is_none_or(|l| l == &*key.label1)
        }) && !(exclude_estimated && key.estimated)
    };
    edge.iter()
        .filter(|(key, _)| wanted(key))
        .map(|(key, sums)| WindowRow {
            dim: key.dim.to_owned(),
            name: key.name.to_string(),
            day: key.bucket.div_euclid(24),
            label1: key.label1.to_string(),
            label2: key.label2.to_string(),
            sums: *sums,
        })
        .collect()
}

/// The statements of [`rebuild`], expanded for the sync SQLite connection (inside
/// one blocking task, like the accounting commit) and the async PostgreSQL one.
macro_rules! rebuild_statements {
    ($conn:ident, $scope:expr, $($aw:tt)*) => {{
        let scope: &Scope = $scope;
        match &scope.dims {
            None => diesel::delete(cost_rollups::table).execute($conn) $($aw)* ?,
            Some(dims) => diesel::delete(cost_rollups::table.filter(cost_rollups::dim.eq_any(dims)))
                .execute($conn) $($aw)* ?,
        };
        // The trace spans go with the trace rows.
        let spans_too = scope.dims.as_ref().is_none_or(|d| d.iter().any(|d| d == TRACE));
        if spans_too {
            diesel::delete(trace_spans::table).execute($conn) $($aw)* ?;
        }
        let mut spans = crate::db::trace_spans::Spans::new();
        // A full rebuild counts every event and moves the folded mark past them all
        // (a fold that read a page before it then finds the mark moved and drops the
        // page); a rebuild of some dimensions leaves the events past the mark to the
        // fold, which adds them to every dimension (see `crate::db::fold`).
        let mark: i64 = fold_marks::table
            .filter(fold_marks::name.eq(crate::db::fold::FOLDED))
            .select(fold_marks::seq)
            .get_result($conn) $($aw)* ?;
        let upto = if scope.dims.is_some() { mark } else { i64::MAX };
        let mut acc: BTreeMap<RollupKey, Sums> = BTreeMap::new();
        let mut last = String::new();
        let mut seen = 0u64;
        let mut new_mark = mark;
        loop {
            let loaded: Vec<(CostEvent, Option<i64>)> = cost_events::table
                .filter(cost_events::id.gt(&last))
                .filter(diesel::BoolExpressionMethods::or(cost_events::fold_seq.is_null(), cost_events::fold_seq.le(upto)))
                .order(cost_events::id.asc())
                .limit(REBUILD_PAGE)
                .select((CostEvent::as_select(), cost_events::fold_seq))
                .load($conn) $($aw)* ?;
            new_mark = loaded.iter().filter_map(|(_, seq)| *seq).fold(new_mark, i64::max);
            let page: Vec<CostEvent> = loaded.into_iter().map(|(e, _)| e).collect();
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
            if spans_too {
                crate::db::trace_spans::add_events(&mut spans, &page);
            }
            let part = partial(page.iter().map(|e| {
                let t = tags.get(&e.id).map(Vec::as_slice).unwrap_or(&[]);
                (e, t.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            }));
            for (k, s) in part {
                if scope.dims.as_ref().is_none_or(|d| d.iter().any(|d| d == k.dim)) {
                    acc.entry(k).or_default().add(&s);
                }
            }
            // Written in parts past a bound (the upsert adds into the rows deleted
            // above, so parts sum exactly): all of time at once does not fit in memory
            // at 10M events.
            if acc.len() >= REBUILD_HELD_KEYS {
                let rows: Vec<RollupRow> =
                    std::mem::take(&mut acc).into_iter().map(|(k, s)| to_row(k, &s)).collect();
                upsert_rollups!($conn, &rows, $($aw)*);
            }
        }
        let rows: Vec<RollupRow> = acc.into_iter().map(|(k, s)| to_row(k, &s)).collect();
        upsert_rollups!($conn, &rows, $($aw)*);
        let spans = crate::db::trace_spans::rows(spans);
        crate::db::trace_spans::upsert_spans!($conn, &spans, $($aw)*);
        diesel::update(fold_marks::table.filter(fold_marks::name.eq(crate::db::fold::FOLDED)))
            .set(fold_marks::seq.eq(new_mark))
            .execute($conn) $($aw)* ?;
        let done = rollup_backfill::done_at.eq(Some(crate::util::time::now_ms()));
        match scope.id {
            None => diesel::update(rollup_backfill::table).set(done).execute($conn) $($aw)* ?,
            Some(id) => diesel::update(rollup_backfill::table.filter(rollup_backfill::id.eq(id)))
                .set(done)
                .execute($conn) $($aw)* ?,
        };
        Ok::<u64, diesel::result::Error>(seen)
    }};
}

/// What a rebuild recomputes: every dimension (and every pending back-fill is then
/// done), or only the dimensions a later migration added (back-fill row `id`).
#[derive(Debug, Clone, Default)]
struct Scope {
    id: Option<i64>,
    dims: Option<Vec<String>>,
}

/// Rebuilds every rollup from the raw events, in one write transaction: the
/// back-fill of existing events, and the loader of the read benchmark. Returns the
/// number of events read.
pub async fn rebuild(pool: &Pool) -> DbResult<u64> {
    rebuild_scope(pool, Scope::default()).await
}

async fn rebuild_scope(pool: &Pool, scope: Scope) -> DbResult<u64> {
    Ok(match pool {
        Pool::Sqlite(p) => {
            let mut conn = p.write().await?;
            conn.spawn_blocking(move |c| {
                use diesel::RunQueryDsl;
                c.immediate_transaction(|c| rebuild_statements!(c, &scope,))
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
                // And a fold waits too: the rows it would add are the ones deleted here.
                diesel::sql_query("SELECT seq FROM fold_marks WHERE name = 'folded' FOR UPDATE")
                    .execute(c)
                    .await?;
                rebuild_statements!(c, &scope, .await)
            })
            .await?
        }
    })
}

const REBUILD_PAGE: i64 = 20_000;
/// Rollup sums a rebuild holds in memory before it writes them.
const REBUILD_HELD_KEYS: usize = 200_000;

/// Runs the back-fills a migration left pending: a full [`rebuild`] for the one that
/// created the rollups (a database with events from before them), or, for a
/// migration that added dimensions (`dims`, comma-separated), a rebuild of those
/// dimensions only. The others keep their rows: with retention on, the raw events
/// of old days are gone, and only rows already kept hold them. A new dimension
/// starts with the events still stored.
pub async fn backfill_if_pending(pool: &Pool) -> DbResult<()> {
    use diesel_async::RunQueryDsl;
    let pending: Vec<(i64, Option<String>)> = with_conn!(pool, read, |conn| {
        let rows: Vec<(i64, Option<String>)> = rollup_backfill::table
            .filter(rollup_backfill::done_at.is_null())
            .order(rollup_backfill::id.asc())
            .select((rollup_backfill::id, rollup_backfill::dims))
            .load(conn)
            .await?;
        Ok::<_, crate::db::DbError>(rows)
    })?;
    if pending.iter().any(|(_, dims)| dims.is_none()) {
        let n = rebuild(pool).await?;
        tracing::info!(events = n, "rollups back-filled from existing cost events");
        return Ok(());
    }
    for (id, dims) in pending {
        let dims: Vec<String> = dims.unwrap_or_default().split(',').map(str::to_owned).collect();
        let n = rebuild_scope(pool, Scope { id: Some(id), dims: Some(dims.clone()) }).await?;
        tracing::info!(events = n, ?dims, "new rollup dimensions back-filled from stored cost events");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(n: i64) -> CostEvent {
        CostEvent {
            dedup_key: format!("r{n}"),
            id: format!("e{n}"),
            org_id: "org".to_owned(),
            request_id: format!("r{n}"),
            api_key_id: Some("k".to_owned()),
            user_id: Some("u".to_owned()),
            provider: "openai".to_owned(),
            model: "gpt-4o".to_owned(),
            input_tokens: 10 + n,
            output_tokens: 5,
            cached_input_tokens: 1,
            reasoning_tokens: 0,
            cost_microdollars: 100 + n,
            duration_ms: Some(7),
            upstream_duration_ms: None,
            session_id: None,
            trace_id: None,
            event_type: "llm".to_owned(),
            tool_name: None,
            tool_server: None,
            tags: "{}".to_owned(),
            customer_id: Some("c".to_owned()),
            cost_breakdown: Some(r#"{"input":60,"output":40,"cached":0}"#.to_owned()),
            source: "proxy".to_owned(),
            budget_status: "approved".to_owned(),
            action_id: None,
            estimated: false,
            created_at: 5 * HOUR_MS + n,
            tool_calls_requested: None,
            tool_definition_tokens: 0,
        }
    }

    /// Events that share a shape are summed before their keys are made; each field of
    /// the shape, changed alone, must still give its own keys: the grouped sums equal
    /// the sums of each event aggregated alone.
    #[test]
    fn events_summed_by_shape_equal_each_event_aggregated_alone() {
        type Change = fn(&mut CostEvent);
        let changes: [Change; 14] = [
            |_| {},
            |e| e.org_id = "org2".to_owned(),
            |e| e.provider = "anthropic".to_owned(),
            |e| e.model = "gpt-4o-mini".to_owned(),
            |e| e.api_key_id = None,
            |e| e.user_id = Some("u2".to_owned()),
            |e| e.customer_id = None,
            |e| e.source = "sdk".to_owned(),
            |e| e.event_type = "tool".to_owned(),
            |e| e.tool_name = Some("search".to_owned()),
            |e| e.budget_status = "denied".to_owned(),
            |e| e.estimated = true,
            |e| e.created_at += HOUR_MS,
            |e| e.created_at += DAY_MS,
        ];
        let mut events = Vec::new();
        for (n, change) in (0i64..).zip(changes) {
            for copy in 0..3 {
                let mut e = event(n * 3 + copy);
                change(&mut e);
                e.trace_id = (copy > 0).then(|| format!("trace{}", copy % 2));
                events.push(e);
            }
        }
        let tags: [&[(&str, &str)]; 3] = [&[], &[("team", "a")], &[("team", "b"), ("env", "prod")]];
        let tags_of = |i: usize| tags[i % 3].iter().copied();
        let grouped = partial(events.iter().enumerate().map(|(i, e)| (e, tags_of(i))));
        let mut alone = Partial::new();
        for (i, e) in events.iter().enumerate() {
            merge(&mut alone, partial(std::iter::once((e, tags_of(i)))));
        }
        assert_eq!(grouped, alone);
        assert!(grouped.keys().any(|k| k.dim == TRACE), "traces are counted");
    }

    #[test]
    fn every_dimension_keeps_day_and_hour_and_only_the_listed_ones_all_time() {
        for (dim, grains) in GRAINS {
            assert!(has_grain(dim, DAY) && has_grain(dim, HOUR), "{dim}");
            assert_eq!(has_grain(dim, ALL_TIME), grains.contains(&ALL_TIME), "{dim}");
        }
        assert!(has_grain(TAG_MODEL, ALL_TIME) && !has_grain(TRACE, ALL_TIME));
        assert!(has_grain("unlisted", DAY) && !has_grain("unlisted", ALL_TIME));
        assert_eq!(
            (bucket_of(DAY, DAY_MS + 1), bucket_of(HOUR, -1), bucket_of(ALL_TIME, 12_345)),
            (1, -1, 0)
        );
    }

    #[test]
    fn source_labels_read_back_whatever_the_names_hold() {
        let cases = [
            (None, "openai", "gpt-4o"),
            (Some("k1"), "openai", "gpt-4o"),
            (Some("-"), "a:b", "1:c"),
            (Some(""), "", ""),
            (Some("12:x"), "3:yz", "-"),
        ];
        let mut labels = std::collections::BTreeSet::new();
        for (key, provider, model) in cases {
            let label = source_label(key, provider, model);
            assert!(labels.insert(label.clone()), "{label} is not unique");
            let back = parse_source_label(&label).unwrap();
            assert_eq!(back, (key.map(str::to_owned), provider.to_owned(), model.to_owned()));
        }
        assert_eq!(parse_source_label("9:short"), None);
    }

    #[test]
    fn a_window_is_covered_once_by_days_hours_and_raw_edges() {
        let day = 20_000 * DAY_MS;
        // Open-ended from a midnight: days only.
        assert_eq!(cover(day, None), Cover { days: Some((20_000, i64::MAX)), ..Cover::default() });
        // Mid-hour to mid-hour three days later.
        let (since, until) = (day + 5 * HOUR_MS + 7, day + 3 * DAY_MS + 2 * HOUR_MS + 9);
        let c = cover(since, Some(until));
        assert_eq!(c.days, Some((20_001, 20_003)));
        assert_eq!(c.hours, vec![(20_000 * 24 + 6, 20_001 * 24), (20_003 * 24, 20_003 * 24 + 2)]);
        assert_eq!(c.raw, vec![(since, day + 6 * HOUR_MS), (day + 3 * DAY_MS + 2 * HOUR_MS, until)]);
        // Within one hour: raw only; empty: nothing.
        assert_eq!(cover(day + 1, Some(day + 99)).raw, vec![(day + 1, day + 99)]);
        assert_eq!(cover(day + 99, Some(day + 1)), Cover::default());
        // Within one day: hours and edges, no day rows.
        let c = cover(day + 1, Some(day + 3 * HOUR_MS));
        assert_eq!((c.days, c.hours), (None, vec![(20_000 * 24 + 1, 20_000 * 24 + 3)]));
        assert_eq!(c.raw, vec![(day + 1, day + HOUR_MS)]);
        // Every millisecond of a random-ish window is in exactly one piece.
        for (since, until) in [(day - 3 * HOUR_MS - 5, day + DAY_MS + 1), (day + 17, day + 2 * HOUR_MS)] {
            let c = cover(since, Some(until));
            for t in (since - 2..until + 2).step_by(997) {
                let h = t.div_euclid(HOUR_MS);
                let n = usize::from(c.days.is_some_and(|(a, b)| (a..b).contains(&t.div_euclid(DAY_MS))))
                    + c.hours.iter().filter(|(a, b)| (*a..*b).contains(&h)).count()
                    + c.raw.iter().filter(|(a, b)| (*a..*b).contains(&t)).count();
                assert_eq!(n, usize::from((since..until).contains(&t)), "t = {t}");
            }
        }
    }
}
