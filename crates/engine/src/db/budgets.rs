//! Budget rows: the upsert behind `POST /api/budgets` (under the tier's budget count),
//! the organization's list, delete, manual reset, the rows of one API key's entities,
//! and the cost events that make up a budget's spend (from the rollups).
//!
//! `entity_id` is stored in its wire form (`svc_usr_<uuid>`, `svc_key_<uuid>`,
//! `key=value`, the customer identifier): the column is shared by four kinds of
//! entity, and the same string names the entity in headers and webhooks.
//! `threshold_percentages` is a JSON array of integers.

use std::collections::{BTreeMap, HashMap};

use diesel::dsl::case_when;
use diesel::prelude::*;
use diesel::sql_types::BigInt;
use diesel::upsert::excluded;
use diesel_async::RunQueryDsl;

use crate::db::change_feed::change_feed;
use crate::db::models::Budget;
use crate::db::rollups::{self, Spec, Sums};
use crate::db::schema::{
    api_keys, budget_changes, budget_leases, budget_reservations, budgets, organizations,
};
use crate::db::{DbResult, Pool};
use crate::{with_conn, with_tx};

/// The outcome of [`upsert`].
#[derive(Debug, Clone)]
pub enum Upserted {
    /// No budget existed for the entity; this one was inserted.
    Created(Budget),
    /// The entity's budget was reconfigured (its spend kept).
    Updated(Budget),
    /// Creating the budget would take the organization past its tier's budget count.
    LimitReached,
}

/// Inserts `row` as the budget of its (organization, entity type, entity id), or, when
/// that entity already has one, replaces its configuration with `row`'s.
///
/// An update keeps the id, spend, reservations and creation time. Its period start
/// follows the reset interval: it is kept while an interval stays set, starts at
/// `row.current_period_start` (the caller's "now") when an interval is set where there
/// was none, and is cleared when the interval is removed. That rule is written into the
/// `ON CONFLICT DO UPDATE` itself, so it applies to the row as it is at write time even
/// if a budget actor rolled the period in between.
///
/// Creation is refused when the organization already has `max_budgets` budgets
/// (`None` = unlimited); updates are never counted. The count and the write share one
/// transaction that first takes a write lock on the organization row, so concurrent
/// upserts of one organization run one after the other: they cannot overshoot the
/// limit, and concurrent upserts of the same entity converge on one row.
/// Records in `budget_changes`, inside the caller's transaction, that `$budget`'s
/// row changed: every instance's change watcher refreshes its live actor.
/// The change is also noted as this process's own ([`note_own_change`]): the caller
/// refreshes its actor in place once the transaction is in.
macro_rules! note_change {
    ($conn:ident, $budget:expr) => {{
        let b: &Budget = $budget;
        let (id, at) = (crate::util::ids::new_id(), crate::util::time::now_ms());
        diesel::insert_into(budget_changes::table)
            .values((
                budget_changes::id.eq(&id),
                budget_changes::org_id.eq(&b.org_id),
                budget_changes::entity_type.eq(&b.entity_type),
                budget_changes::entity_id.eq(&b.entity_id),
                budget_changes::changed_at.eq(at),
            ))
            .execute($conn)
            .await?;
        crate::db::budgets::note_own_change(id, at);
    }};
}
pub(crate) use note_change;

/// Budget changes written by this process (change id → when). Its change watcher
/// skips them: the writer already refreshed its own actor in place, and a second
/// refresh, arriving while the entity's calls settle, only adds a row read racing
/// their commits (the read cannot tell which settles it already counts).
static OWN_CHANGES: std::sync::LazyLock<std::sync::Mutex<HashMap<String, i64>>> =
    std::sync::LazyLock::new(Default::default);

pub fn note_own_change(id: String, at: i64) {
    if let Ok(mut own) = OWN_CHANGES.lock() {
        own.insert(id, at);
    }
}

/// Whether change `id` was written by this process (forgetting it), after dropping the
/// notes from before `prune_before` (changes whose transaction rolled back are never read).
pub fn take_own_change(id: &str, prune_before: i64) -> bool {
    let Ok(mut own) = OWN_CHANGES.lock() else { return false };
    own.retain(|_, at| *at >= prune_before);
    own.remove(id).is_some()
}

/// A budget changed since `since` (`changed_at` ≥ it): (change id, org, type, id, when).
pub type BudgetChange = (String, String, String, String, i64);

change_feed!(budget_changes, BudgetChange, (id, org_id, entity_type, entity_id, changed_at));

pub async fn upsert(pool: &Pool, row: Budget, max_budgets: Option<i64>) -> DbResult<Upserted> {
    with_tx!(pool, |conn| {
        diesel::update(organizations::table.find(&row.org_id))
            .set(organizations::updated_at.eq(organizations::updated_at))
            .execute(conn)
            .await?;
        if let Some(max) = max_budgets {
            let existing: Option<String> = budgets::table
                .filter(budgets::org_id.eq(&row.org_id))
                .filter(budgets::entity_type.eq(&row.entity_type))
                .filter(budgets::entity_id.eq(&row.entity_id))
                .select(budgets::id)
                .first(conn)
                .await
                .optional()?;
            if existing.is_none() {
                let count: i64 =
                    budgets::table.filter(budgets::org_id.eq(&row.org_id)).count().get_result(conn).await?;
                if count >= max {
                    return Ok(Upserted::LimitReached);
                }
            }
        }
        let interval_toggled =
            budgets::reset_interval.is_null().or(excluded(budgets::reset_interval).is_null());
        let saved: Budget = diesel::insert_into(budgets::table)
            .values(&row)
            .on_conflict((budgets::org_id, budgets::entity_type, budgets::entity_id))
            .do_update()
            .set((
                budgets::max_budget_microdollars.eq(excluded(budgets::max_budget_microdollars)),
                budgets::policy.eq(excluded(budgets::policy)),
                budgets::reset_interval.eq(excluded(budgets::reset_interval)),
                budgets::current_period_start.eq(case_when(
                    interval_toggled,
                    excluded(budgets::current_period_start),
                )
                .otherwise(budgets::current_period_start)),
                budgets::threshold_percentages.eq(excluded(budgets::threshold_percentages)),
                budgets::velocity_limit_microdollars.eq(excluded(budgets::velocity_limit_microdollars)),
                budgets::velocity_window_seconds.eq(excluded(budgets::velocity_window_seconds)),
                budgets::velocity_cooldown_seconds.eq(excluded(budgets::velocity_cooldown_seconds)),
                budgets::session_limit_microdollars.eq(excluded(budgets::session_limit_microdollars)),
                budgets::finalization_reserve_microdollars
                    .eq(excluded(budgets::finalization_reserve_microdollars)),
                budgets::loop_max_calls.eq(excluded(budgets::loop_max_calls)),
                budgets::loop_window_seconds.eq(excluded(budgets::loop_window_seconds)),
                budgets::loop_aggregate_max_keys.eq(excluded(budgets::loop_aggregate_max_keys)),
                budgets::exact_ceiling.eq(excluded(budgets::exact_ceiling)),
                budgets::updated_at.eq(excluded(budgets::updated_at)),
            ))
            .returning(Budget::as_returning())
            .get_result(conn)
            .await?;
        note_change!(conn, &saved);
        Ok(if saved.id == row.id { Upserted::Created(saved) } else { Upserted::Updated(saved) })
    })
}

/// Every budget of an organization, newest first.
pub async fn list(pool: &Pool, org_id: &str) -> DbResult<Vec<Budget>> {
    with_conn!(pool, read, |conn| {
        Ok(budgets::table
            .filter(budgets::org_id.eq(org_id))
            .order((budgets::created_at.desc(), budgets::id.desc()))
            .select(Budget::as_select())
            .load(conn)
            .await?)
    })
}

/// One budget of an organization.
pub async fn find(pool: &Pool, org_id: &str, id: &str) -> DbResult<Option<Budget>> {
    with_conn!(pool, read, |conn| {
        Ok(budgets::table
            .filter(budgets::id.eq(id))
            .filter(budgets::org_id.eq(org_id))
            .select(Budget::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// The budgets of an organization whose `(entity_type, entity_id)` is one of
/// `entities`, in the order of `entities`.
pub async fn for_entities(pool: &Pool, org_id: &str, entities: &[(&str, String)]) -> DbResult<Vec<Budget>> {
    let ids: Vec<&str> = entities.iter().map(|(_, id)| id.as_str()).collect();
    let rows: Vec<Budget> = with_conn!(pool, read, |conn| {
        budgets::table
            .filter(budgets::org_id.eq(org_id))
            .filter(budgets::entity_id.eq_any(&ids))
            .select(Budget::as_select())
            .load(conn)
            .await
    })?;
    Ok(entities
        .iter()
        .filter_map(|(kind, id)| rows.iter().find(|b| b.entity_type == *kind && b.entity_id == *id).cloned())
        .collect())
}

/// The budget of one entity, if it has one.
pub async fn find_by_entity(
    pool: &Pool,
    org_id: &str,
    entity_type: &str,
    entity_id: &str,
) -> DbResult<Option<Budget>> {
    Ok(find_for_actor(pool, org_id, entity_type, entity_id).await?.map(|(budget, _)| budget))
}

/// [`find_by_entity`] with the row's `spend_seq`, read in the same statement: what a
/// budget actor loads (see `actors::store::SpendMark`).
pub async fn find_for_actor(
    pool: &Pool,
    org_id: &str,
    entity_type: &str,
    entity_id: &str,
) -> DbResult<Option<(Budget, i64)>> {
    with_conn!(pool, read, |conn| {
        Ok(budgets::table
            .filter(budgets::org_id.eq(org_id))
            .filter(budgets::entity_type.eq(entity_type))
            .filter(budgets::entity_id.eq(entity_id))
            .select((Budget::as_select(), budgets::spend_seq))
            .first(conn)
            .await
            .optional()?)
    })
}

/// Deletes a budget of an organization with its persisted reservations (they would
/// name a budget that no longer exists). Returns the deleted row, or `None` when the
/// organization has no such budget.
pub async fn delete(pool: &Pool, org_id: &str, id: &str) -> DbResult<Option<Budget>> {
    with_tx!(pool, |conn| {
        // Reservations first, the budget row after: the same lock order as the
        // accounting commit (which frees holds before it updates budgets), so the two
        // cannot deadlock on PostgreSQL.
        let owned: Option<String> = budgets::table
            .filter(budgets::id.eq(id))
            .filter(budgets::org_id.eq(org_id))
            .select(budgets::id)
            .first(conn)
            .await
            .optional()?;
        if owned.is_none() {
            return Ok(None);
        }
        diesel::delete(budget_reservations::table.filter(budget_reservations::budget_id.eq(id)))
            .execute(conn)
            .await?;
        diesel::delete(budget_leases::table.filter(budget_leases::budget_id.eq(id))).execute(conn).await?;
        let deleted: Option<Budget> =
            diesel::delete(budgets::table.filter(budgets::id.eq(id)).filter(budgets::org_id.eq(org_id)))
                .returning(Budget::as_returning())
                .get_result(conn)
                .await
                .optional()?;
        if let Some(b) = &deleted {
            note_change!(conn, b);
        }
        Ok(deleted)
    })
}

/// Sets a budget's spend to zero and, when it has a reset interval, starts a new
/// period at `now` (a budget without one keeps a null period start). Configuration
/// and reservations in flight are untouched. `None` when the organization has no such
/// budget.
pub async fn reset(pool: &Pool, org_id: &str, id: &str, now: i64) -> DbResult<Option<Budget>> {
    with_tx!(pool, |conn| {
        let reset: Option<Budget> =
            diesel::update(budgets::table.filter(budgets::id.eq(id)).filter(budgets::org_id.eq(org_id)))
                .set((
                    budgets::spend_microdollars.eq(0),
                    budgets::current_period_start
                        .eq(case_when(budgets::reset_interval.is_not_null(), now.into_sql::<BigInt>())),
                    budgets::updated_at.eq(now),
                ))
                .returning(Budget::as_returning())
                .get_result(conn)
                .await
                .optional()?;
        if let Some(b) = &reset {
            note_change!(conn, b);
        }
        Ok(reset)
    })
}

/// Which cost events count toward a budget entity. IDs are the bare UUIDs the
/// cost events store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpendFilter {
    User(String),
    ApiKey(String),
    Tag { key: String, value: String },
    Customer(String),
}

/// Cost of one (API key, provider, model) group of events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpendSource {
    /// Bare key id; `None` for events recorded without a key.
    pub api_key_id: Option<String>,
    pub provider: String,
    pub model: String,
    pub total_cost_microdollars: i64,
    pub request_count: i64,
}

/// The organization's cost events matching `filter` since `since` (all time when
/// `None`), grouped by API key, provider and model, costliest first. From the
/// rollups (`spend_*` dimensions, see [`rollups`]), so events that retention
/// deleted still count.
pub async fn spend_sources(
    pool: &Pool,
    org_id: &str,
    filter: &SpendFilter,
    since: Option<i64>,
) -> DbResult<Vec<SpendSource>> {
    let spec = match filter {
        SpendFilter::User(id) => Spec { dim: rollups::SPEND_USER, name: Some(id), label1: Some("") },
        SpendFilter::ApiKey(id) => Spec { dim: rollups::SPEND_KEY, name: Some(id), label1: Some("") },
        SpendFilter::Customer(id) => Spec { dim: rollups::SPEND_CUSTOMER, name: Some(id), label1: Some("") },
        SpendFilter::Tag { key, value } => {
            Spec { dim: rollups::SPEND_TAG, name: Some(key), label1: Some(value) }
        }
    };
    let window = (since.unwrap_or(i64::MIN), None);
    let rows = crate::db::rollup_labels::window_labels(pool, org_id, window, false, &[spec]).await?;
    let mut by_source: BTreeMap<&str, Sums> = BTreeMap::new();
    for r in &rows {
        by_source.entry(&r.label2).or_default().add(&r.sums);
    }
    let mut out: Vec<SpendSource> = by_source
        .into_iter()
        .filter(|(_, s)| s.count != 0)
        .filter_map(|(label, s)| {
            let (api_key_id, provider, model) = rollups::parse_source_label(label)?;
            let (total_cost_microdollars, request_count) = (rollups::sat(s.cost), rollups::sat(s.count));
            Some(SpendSource { api_key_id, provider, model, total_cost_microdollars, request_count })
        })
        .collect();
    out.sort_by(|a, b| {
        b.total_cost_microdollars
            .cmp(&a.total_cost_microdollars)
            .then_with(|| (&a.api_key_id, &a.provider, &a.model).cmp(&(&b.api_key_id, &b.provider, &b.model)))
    });
    Ok(out)
}

/// Names of an organization's API keys by bare id, revoked keys included (their
/// past spend still names them).
pub async fn key_names(pool: &Pool, org_id: &str, ids: &[String]) -> DbResult<HashMap<String, String>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows: Vec<(String, String)> = with_conn!(pool, read, |conn| {
        api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::id.eq_any(ids))
            .select((api_keys::id, api_keys::name))
            .load(conn)
            .await
    })?;
    Ok(rows.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_changes_are_taken_once_and_forgotten_after_the_feed_keeps_them() {
        let (mine, rolled_back) = ("own-change-test-mine".to_owned(), "own-change-test-gone".to_owned());
        note_own_change(mine.clone(), 10_000);
        note_own_change(rolled_back.clone(), 1_000);
        assert!(!take_own_change("own-change-test-other", 0), "another process's change");
        assert!(take_own_change(&mine, 0));
        assert!(!take_own_change(&mine, 0), "taken once");
        // A note whose transaction rolled back is never read: pruned by age.
        assert!(!take_own_change(&rolled_back, 5_000));
        note_own_change(rolled_back.clone(), 1_000);
        assert!(take_own_change(&rolled_back, 1_000));
    }
}
