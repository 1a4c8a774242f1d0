//! Cost events: the one transaction that makes an acknowledged event durable
//! together with its effect on every matched budget and its outbox events.

use std::collections::{BTreeMap, HashMap, HashSet};

use actors::budget::{next_period_start, period_start, ResetInterval};

use crate::db::models::{CostEvent, OutboxEvent};
use crate::db::prepared::Prepared;
use crate::db::schema::{budgets, cost_event_bodies, cost_event_tags, cost_events, fold_marks};
use crate::db::{DbResult, Pool};
use diesel::{ExpressionMethods, QueryDsl};

/// Runs `$body` over `$rows` (a slice of `Copy` rows, e.g. references) cut into
/// fixed-size arrays of 64, then 8, then 1 rows, bound to `$chunk`. A multi-row INSERT
/// of an array has a static query id, so each of the three sizes is prepared once per
/// connection and then reused; a `Vec` insert has new SQL per length and was parsed
/// and planned on every commit (about 10 % of the server's CPU under SQLite ingest).
/// 64 rows × 29 columns stays far below both backends' bind-parameter limits.
macro_rules! for_fixed_chunks {
    ($rows:expr, |$chunk:ident| $body:block) => {{
        let mut rest = $rows;
        while !rest.is_empty() {
            if rest.len() >= 64 {
                let (head, tail) = rest.split_at(64);
                rest = tail;
                if let Ok($chunk) = <[_; 64]>::try_from(head) $body
            } else if rest.len() >= 8 {
                let (head, tail) = rest.split_at(8);
                rest = tail;
                if let Ok($chunk) = <[_; 8]>::try_from(head) $body
            } else {
                let (head, tail) = rest.split_at(1);
                rest = tail;
                if let Ok($chunk) = <[_; 1]>::try_from(head) $body
            }
        }
    }};
}
pub(crate) use for_fixed_chunks;

/// A budget entity an event's spend counts against.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BudgetTarget {
    pub org_id: String,
    pub entity_type: &'static str,
    pub entity_id: String,
}

/// One event to make durable.
#[derive(Debug, Clone)]
pub struct NewCostEvent {
    pub row: CostEvent,
    /// Every tag of the event (internal `_svc_` ones included), for the tag index.
    pub tags: BTreeMap<String, String>,
    /// The budgets its cost is added to.
    pub targets: Vec<BudgetTarget>,
    /// Extra outbox events caused by the same request (denials, ...).
    pub outbox: Vec<OutboxEvent>,
    /// Shared reservations (PostgreSQL, several instances) this event settles: freed in
    /// the same transaction that adds its spend.
    pub holds: Vec<crate::db::shared_budgets::SharedHold>,
    /// What the call consumed of this instance's budget leases: moved from `reserved`
    /// to `spend` in the same transaction, if the event is inserted (a duplicate's
    /// first commit consumed it already).
    pub leased: Vec<crate::db::budget_leases::LeaseUse>,
    /// The proxy reserved this cost on the budget actors and settles it there itself
    /// after the commit; the writer must not count it on the actors again.
    pub reserved: bool,
    /// Request/response bodies to keep with the event (Pro and above).
    pub body: Option<crate::db::models::CostEventBody>,
    /// The actors' reservation this event's cost settles: once the commit is in, the
    /// writer hands it on with the other reservations of the same commit (one message
    /// per budget entity).
    pub ticket: Option<actors::registry::ReservationTicket>,
}

/// The events of one commit.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    pub events: Vec<NewCostEvent>,
}

/// The rollup sums of `events` (each with all of its tags, as the commit indexes
/// them): what the fold adds for them (see [`crate::db::fold_sums`]).
pub fn partial_of<'a>(events: impl IntoIterator<Item = &'a NewCostEvent>) -> crate::db::rollups::Partial {
    crate::db::rollups::partial(
        events.into_iter().map(|e| (&e.row, e.tags.iter().map(|(k, v)| (k.as_str(), v.as_str())))),
    )
}

/// What became of one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Inserted {
        id: String,
        created_at: i64,
    },
    /// The (organization, provider, dedup key) was already recorded: an ingested
    /// event's requestId seen before, or a retried commit of the same call.
    Duplicate {
        id: String,
        created_at: i64,
    },
}

/// A budget whose spend moved in a commit, with the threshold crossings it caused.
#[derive(Debug, Clone)]
pub struct SpendChange {
    pub target: BudgetTarget,
    /// The row updated and the `spend_seq` the commit gave it.
    pub budget_id: String,
    pub spend_seq: i64,
    pub added: i64,
    /// The part of `added` from events without a reservation (SDK events); the rest is
    /// settled on the actors by the proxy request that reserved it.
    pub unreserved: i64,
    pub spend_after: i64,
}

pub struct CommitResult {
    pub outcomes: Vec<Outcome>,
    pub changes: Vec<SpendChange>,
    /// Webhook deliveries queued by the commit.
    pub deliveries: usize,
    /// The commit numbers it took (see [`super::fold`]): its inserted events carry
    /// them; a duplicate's number is left unused.
    pub numbers: std::ops::RangeInclusive<i64>,
}

/// Builds an outbox row (the webhook `data.object` is `object`).
pub fn outbox_event(org_id: &str, event_type: &str, object: serde_json::Value, now: i64) -> OutboxEvent {
    OutboxEvent {
        id: crate::util::ids::new_id(),
        org_id: org_id.to_owned(),
        event_type: event_type.to_owned(),
        payload: object.to_string(),
        created_at: now,
        dispatched_at: None,
    }
}

/// The new period start when a budget's period (`interval`, started at `start`) has
/// ended at `now`.
pub fn period_due(interval: Option<&str>, start: Option<i64>, now: i64) -> Option<(ResetInterval, i64)> {
    let interval: ResetInterval = interval?.parse().ok()?;
    (now >= next_period_start(interval, start?)).then(|| (interval, period_start(interval, now)))
}

/// `budget.reset` of a budget (organization, entity type, entity id) whose period
/// ended with `previous_spend`.
pub fn reset_event(
    target: (&str, &str, &str),
    limit: i64,
    previous_spend: i64,
    interval: ResetInterval,
    new_start: i64,
    now: i64,
) -> OutboxEvent {
    let (org_id, entity_type, entity_id) = target;
    outbox_event(
        org_id,
        "budget.reset",
        serde_json::json!({
            "budget_entity_type": entity_type,
            "budget_entity_id": entity_id,
            "budget_limit_microdollars": limit,
            "previous_spend_microdollars": previous_spend,
            "new_period_start": crate::util::time::iso(new_start),
            "reset_interval": interval.as_str(),
        }),
        now,
    )
}

/// Threshold percentages crossed upward when spend moved from `before` to `after`.
pub fn crossed_thresholds(thresholds: &[i64], limit: i64, before: i64, after: i64) -> Vec<i64> {
    let (limit, before, after) = (i128::from(limit), i128::from(before), i128::from(after));
    thresholds
        .iter()
        .copied()
        .filter(|&p| {
            let line = limit * i128::from(p);
            before * 100 < line && after * 100 >= line
        })
        .collect()
}

/// The statements of one commit, written once and expanded for the synchronous
/// SQLite connection (run whole inside one blocking task, as one IMMEDIATE
/// transaction: no per-statement thread hops) and for the async PostgreSQL one.
/// `$($aw)*` is `.await` for the async expansion and nothing for the sync one.
macro_rules! commit_statements {
    ($conn:ident, $subs:ident, $batch:ident, $now:ident, $($aw:tt)*) => {{
        let events = &$batch.events;
        let mut inserted_ids = HashSet::new();
        // The commit's place in commit order (see `crate::db::fold`): taken first, so
        // that on PostgreSQL the row lock orders the commits of every instance.
        let clock: i64 = Prepared(
            diesel::update(fold_marks::table.filter(fold_marks::name.eq(crate::db::fold::CLOCK)))
                .set(fold_marks::seq.eq(fold_marks::seq + events.len() as i64))
                .returning(fold_marks::seq),
        )
        .get_result($conn) $($aw)* ?;
        let first = clock - events.len() as i64 + 1;
        let rows: Vec<(&CostEvent, _)> = events
            .iter()
            .zip(first..)
            .map(|(e, seq)| (&e.row, cost_events::fold_seq.eq(Some(seq))))
            .collect();
        for_fixed_chunks!(rows.as_slice(), |chunk| {
            let ids: Vec<String> = diesel::insert_into(cost_events::table)
                .values(chunk)
                .on_conflict((cost_events::org_id, cost_events::provider, cost_events::dedup_key))
                .do_nothing()
                .returning(cost_events::id)
                .get_results($conn) $($aw)* ?;
            inserted_ids.extend(ids);
        });
        let mut outcomes = Vec::with_capacity(events.len());
        for e in events.iter() {
            if inserted_ids.contains(&e.row.id) {
                outcomes.push(Outcome::Inserted { id: e.row.id.clone(), created_at: e.row.created_at });
            } else {
                let (id, created_at): (String, i64) = cost_events::table
                    .filter(cost_events::org_id.eq(&e.row.org_id))
                    .filter(cost_events::provider.eq(&e.row.provider))
                    .filter(cost_events::dedup_key.eq(&e.row.dedup_key))
                    .select((cost_events::id, cost_events::created_at))
                    .first($conn) $($aw)* ?;
                outcomes.push(Outcome::Duplicate { id, created_at });
            }
        }
        let plan = plan_inserted(events, &inserted_ids, |org| $subs.may_want(org, CREATED), $now);
        let tag_rows: Vec<&TagRow<'_>> = plan.tags.iter().collect();
        for_fixed_chunks!(tag_rows.as_slice(), |chunk| {
            diesel::insert_into(cost_event_tags::table).values(chunk).on_conflict_do_nothing().execute($conn) $($aw)* ?;
        });
        let body_rows: Vec<&crate::db::models::CostEventBody> = plan.bodies.iter().collect();
        for_fixed_chunks!(body_rows.as_slice(), |chunk| {
            diesel::insert_into(cost_event_bodies::table).values(chunk).on_conflict_do_nothing().execute($conn) $($aw)* ?;
        });
        // The shared holds of every event in the batch (inserted or duplicate: a
        // duplicate's request held budget too) leave `reserved` in this transaction:
        // their rows are deleted now, before any budget row is locked, and each
        // budget's reserved goes down in lock order, interleaved with the spend updates.
        let mut held = HashMap::new();
        crate::db::shared_budgets::take_holds!(
            $conn, events.iter().flat_map(|e| e.holds.iter()), &mut held, $($aw)*
        );
        // Leases are consumed for inserted events only: a duplicate is a retried
        // commit whose first attempt consumed them already.
        crate::db::budget_leases::consume_leases!(
            $conn,
            events.iter().filter(|e| inserted_ids.contains(&e.row.id)).flat_map(|e| e.leased.iter()),
            &mut held,
            $($aw)*
        );
        let mut freed = crate::db::shared_budgets::freed_in_lock_order!($conn, held, $($aw)*).into_iter().peekable();
        let mut outbox = plan.outbox;
        let mut changes = Vec::new();
        for (target, (added, contributions, unreserved)) in plan.sums {
            crate::db::shared_budgets::free_upto!(
                $conn, freed, Some((target.org_id.as_str(), target.entity_type, target.entity_id.as_str())), $($aw)*
            );
            if added == 0 {
                continue;
            }
            let updated: Vec<(i64, i64, String, Option<String>, Option<i64>, String, i64)> = Prepared(diesel::update(
                budgets::table
                    .filter(budgets::org_id.eq(&target.org_id))
                    .filter(budgets::entity_type.eq(target.entity_type))
                    .filter(budgets::entity_id.eq(&target.entity_id)),
            )
            .set((
                budgets::spend_microdollars.eq(saturating_add_spend(added)),
                budgets::spend_seq.eq(budgets::spend_seq + 1),
                budgets::updated_at.eq($now),
            ))
            .returning((
                budgets::spend_microdollars,
                budgets::max_budget_microdollars,
                budgets::threshold_percentages,
                budgets::reset_interval,
                budgets::current_period_start,
                budgets::id,
                budgets::spend_seq,
            )))
            .get_results($conn) $($aw)* ?;
            for (mut spend_after, limit, thresholds, interval, start, budget_id, spend_seq) in updated {
                // A refund (negative `added`) may have stopped at zero: what it found
                // was at least `spend_after - added`; thresholds only look upward.
                let mut spend_before = spend_after.saturating_sub(added);
                // The budget's period ended before this commit and the sweep has not
                // rolled it yet: roll it here, so this commit's spend counts in the new
                // period (the sweep, conditional on the period start, then skips it).
                if let Some((interval, new_start)) = period_due(interval.as_deref(), start, $now) {
                    // The new period holds this commit's spend only; a refund (of a
                    // charge of the old period) leaves it at zero.
                    let kept = added.max(0);
                    diesel::update(
                        budgets::table
                            .filter(budgets::org_id.eq(&target.org_id))
                            .filter(budgets::entity_type.eq(target.entity_type))
                            .filter(budgets::entity_id.eq(&target.entity_id))
                            .filter(budgets::current_period_start.eq(start)),
                    )
                    .set((
                        budgets::spend_microdollars.eq(budgets::spend_microdollars - (spend_after - kept)),
                        budgets::current_period_start.eq(Some(new_start)),
                    ))
                    .execute($conn) $($aw)* ?;
                    let entity = (target.org_id.as_str(), target.entity_type, target.entity_id.as_str());
                    let previous = if added < 0 { spend_after } else { spend_before };
                    outbox.push(reset_event(entity, limit, previous, interval, new_start, $now));
                    spend_after = kept;
                    spend_before = 0;
                }
                outbox.extend(threshold_events(&target, &contributions, spend_before, limit, &thresholds, $now));
                changes.push(SpendChange {
                    target: target.clone(),
                    budget_id,
                    spend_seq,
                    added,
                    unreserved,
                    spend_after,
                });
            }
        }
        crate::db::shared_budgets::free_upto!($conn, freed, None, $($aw)*);
        let deliveries = crate::outbox::enqueue!(@run $conn, &$subs, outbox, $($aw)*);
        Ok::<_, diesel::result::Error>(CommitResult { outcomes, changes, deliveries, numbers: first..=clock })
    }};
}

/// `spend_microdollars + added`, saturating at `i64::MAX` on both backends: SQLite
/// would silently turn an overflowing sum into a REAL, PostgreSQL would fail the whole
/// commit. (Events are bounded, so reaching the bound takes millions of maximal events;
/// the sum must still never wrap or change type.) A negative `added` (refunds) stops
/// at zero: spend is never negative.
fn saturating_add_spend(
    added: i64,
) -> diesel::expression::SqlLiteral<
    diesel::sql_types::BigInt,
    impl diesel::query_builder::QueryFragment<diesel::sqlite::Sqlite>
        + diesel::query_builder::QueryFragment<diesel::pg::Pg>
        + Send,
> {
    use diesel::dsl::sql;
    use diesel::sql_types::BigInt;
    sql::<BigInt>("CASE WHEN spend_microdollars > ")
        .bind::<BigInt, _>(i64::MAX - added.max(0))
        .sql(" THEN ")
        .bind::<BigInt, _>(i64::MAX)
        .sql(" WHEN spend_microdollars < ")
        .bind::<BigInt, _>(added.saturating_neg())
        .sql(" THEN 0 ELSE spend_microdollars + ")
        .bind::<BigInt, _>(added)
        .sql(" END")
}

/// Commits a batch of events in ONE transaction: inserts the new ones (duplicates
/// on (org, provider, dedup key) are skipped and reported with the original id),
/// indexes their tags, stamps them with their place in commit order (the rollups
/// are folded from them afterwards, see [`super::fold`]), adds their cost to every
/// matched budget, and writes their `cost_event.created` and threshold
/// events to the outbox.
pub async fn commit_batch(
    pool: &Pool,
    outbox: &crate::outbox::Outbox,
    batch: std::sync::Arc<Batch>,
    now: i64,
) -> DbResult<CommitResult> {
    let result = match pool {
        Pool::Sqlite(p) => {
            let mut conn = p.write().await?;
            conn.spawn_blocking({
                let subs = outbox.clone();
                move |c| {
                    use diesel::RunQueryDsl;
                    c.immediate_transaction(|c| commit_statements!(c, subs, batch, now,))
                }
            })
            .await?
        }
        Pool::Pg(p) => {
            let mut conn = p.write().await?;
            use diesel_async::AsyncConnection;
            let subs = outbox;
            conn.transaction::<_, diesel::result::Error, _>(async |c| {
                use diesel_async::RunQueryDsl;
                commit_statements!(c, subs, batch, now, .await)
            })
            .await?
        }
    };
    if result.deliveries > 0 {
        outbox.wake();
    }
    Ok(result)
}

/// Per budget target: total added, each (amount, request id) in order, and the part no
/// reservation covers.
type TargetSum = (i64, Vec<(i64, String)>, i64);

/// The outbox event every inserted cost event may cause.
const CREATED: &str = "cost_event.created";

/// A tag row of an event in the commit, borrowing its strings from the event: a
/// commit writes a few per event, and owned rows cost four string copies each.
#[derive(Debug, Clone, Copy, diesel::Insertable)]
#[diesel(table_name = cost_event_tags, treat_none_as_default_value = false)]
struct TagRow<'a> {
    event_id: &'a str,
    org_id: &'a str,
    tag_key: &'a str,
    tag_value: &'a str,
    created_at: i64,
}

/// What the inserted events of a batch add: tag rows, outbox rows, and the sum
/// per budget target (with each contribution, in order, for threshold events).
struct InsertPlan<'a> {
    tags: Vec<TagRow<'a>>,
    bodies: Vec<crate::db::models::CostEventBody>,
    outbox: Vec<OutboxEvent>,
    /// Per target: total added, each contribution, and the part no reservation covers.
    sums: BTreeMap<BudgetTarget, TargetSum>,
}

/// Plans the writes of the inserted events. `may_want_created` says whether an
/// organization may have a webhook subscriber for `cost_event.created`: when it
/// surely has none, the outbox rows the enqueue would drop anyway are not built (a
/// new id and a JSON payload per event, in the one writer).
fn plan_inserted<'a>(
    events: &'a [NewCostEvent],
    inserted: &std::collections::HashSet<String>,
    may_want_created: impl Fn(&str) -> bool,
    now: i64,
) -> InsertPlan<'a> {
    let mut plan =
        InsertPlan { tags: Vec::new(), bodies: Vec::new(), outbox: Vec::new(), sums: BTreeMap::new() };
    let mut wanted: Option<(&str, bool)> = None;
    for e in events.iter().filter(|e| inserted.contains(&e.row.id)) {
        for (k, v) in &e.tags {
            plan.tags.push(TagRow {
                event_id: &e.row.id,
                org_id: &e.row.org_id,
                tag_key: k,
                tag_value: v,
                created_at: e.row.created_at,
            });
        }
        for t in &e.targets {
            let entry = match plan.sums.get_mut(t) {
                Some(entry) => entry,
                None => plan.sums.entry(t.clone()).or_default(),
            };
            entry.0 = entry.0.saturating_add(e.row.cost_microdollars);
            entry.1.push((e.row.cost_microdollars, e.row.request_id.clone()));
            if !e.reserved {
                entry.2 = entry.2.saturating_add(e.row.cost_microdollars);
            }
        }
        plan.bodies.extend(e.body.iter().cloned());
        let org = e.row.org_id.as_str();
        let wants = match wanted {
            Some((o, w)) if o == org => w,
            _ => {
                let w = may_want_created(org);
                wanted = Some((org, w));
                w
            }
        };
        if wants {
            plan.outbox.push(outbox_event(
                org,
                CREATED,
                serde_json::json!({ "cost_event_id": e.row.id }),
                now,
            ));
        }
        plan.outbox.extend(e.outbox.iter().cloned());
    }
    plan
}

/// Threshold events for one budget: walks the batch's contributions in order so
/// each event names the request that actually crossed the line.
fn threshold_events(
    target: &BudgetTarget,
    contributions: &[(i64, String)],
    spend_before: i64,
    limit: i64,
    thresholds_json: &str,
    now: i64,
) -> Vec<OutboxEvent> {
    let thresholds: Vec<i64> = serde_json::from_str(thresholds_json).unwrap_or_default();
    let mut out = Vec::new();
    let mut running = spend_before;
    for (amount, request_id) in contributions {
        let before = running;
        running = running.saturating_add(*amount);
        for p in crossed_thresholds(&thresholds, limit, before, running) {
            let kind = if p >= 90 { "budget.threshold.critical" } else { "budget.threshold.warning" };
            out.push(outbox_event(
                &target.org_id,
                kind,
                serde_json::json!({
                    "budget_entity_type": target.entity_type,
                    "budget_entity_id": target.entity_id,
                    "threshold_percent": p,
                    "budget_spend_microdollars": running,
                    "budget_limit_microdollars": limit,
                    "budget_remaining_microdollars": (limit - running).max(0),
                    "triggered_by_request_id": request_id,
                }),
                now,
            ));
        }
    }
    out
}

/// The webhook `data.object` of an outbox row. A `cost_event.created` row holds only
/// a reference (`{"cost_event_id"}`): the event itself is in the same commit and never
/// changes, so copying it as JSON would double what every ingest writes. The object
/// is built from the event row when it is delivered. Other kinds hold their object.
pub async fn outbox_object(pool: &Pool, row: &OutboxEvent) -> DbResult<serde_json::Value> {
    let payload: serde_json::Value = serde_json::from_str(&row.payload).unwrap_or(serde_json::Value::Null);
    if row.event_type != CREATED {
        return Ok(payload);
    }
    let id = payload["cost_event_id"].as_str().unwrap_or_default().to_owned();
    let org_id = row.org_id.clone();
    let event: CostEvent = crate::with_conn!(pool, read, |conn| {
        use diesel::SelectableHelper;
        use diesel_async::RunQueryDsl;
        let event = cost_events::table
            .filter(cost_events::org_id.eq(&org_id))
            .filter(cost_events::id.eq(&id))
            .select(CostEvent::as_select())
            .first(conn)
            .await?;
        Ok::<_, crate::db::DbError>(event)
    })?;
    Ok(cost_event_object(&event))
}

/// The `cost_event.created` webhook object.
pub fn cost_event_object(e: &CostEvent) -> serde_json::Value {
    let tags: HashMap<String, String> = serde_json::from_str(&e.tags).unwrap_or_default();
    serde_json::json!({
        "request_id": e.request_id,
        "event_type": e.event_type,
        "provider": e.provider,
        "model": e.model,
        "input_tokens": e.input_tokens,
        "output_tokens": e.output_tokens,
        "cached_input_tokens": e.cached_input_tokens,
        "cost_microdollars": e.cost_microdollars,
        "duration_ms": e.duration_ms,
        "upstream_duration_ms": e.upstream_duration_ms,
        "session_id": e.session_id,
        "trace_id": e.trace_id,
        "tool_name": e.tool_name,
        "tool_server": e.tool_server,
        "tool_calls_requested": e
            .tool_calls_requested
            .as_deref()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .unwrap_or(serde_json::Value::Null),
        "tool_definition_tokens": e.tool_definition_tokens,
        "api_key_id": e.api_key_id.as_deref().map(|k| crate::util::ids::prefixed(crate::util::ids::API_KEY, k)),
        "source": e.source,
        "tags": tags,
        "created_at": crate::util::time::iso(e.created_at),
    })
}

#[cfg(test)]
mod tests {
    use super::crossed_thresholds;

    #[test]
    fn thresholds_cross_once_upward() {
        assert_eq!(crossed_thresholds(&[50, 80, 100], 1000, 0, 499), Vec::<i64>::new());
        assert_eq!(crossed_thresholds(&[50, 80, 100], 1000, 0, 500), vec![50]);
        assert_eq!(crossed_thresholds(&[50, 80, 100], 1000, 499, 1000), vec![50, 80, 100]);
        assert_eq!(crossed_thresholds(&[50, 80, 100], 1000, 500, 700), Vec::<i64>::new());
        assert_eq!(crossed_thresholds(&[50], 1000, 600, 400), Vec::<i64>::new());
    }
}
