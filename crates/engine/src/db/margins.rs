//! Storage of the margins side: customer mappings, the cost of a mapped customer
//! tag per month (exact sums from the `tag_model` rollups), and the
//! last seen health tier that makes `margin.threshold_crossed` fire once per
//! worsening.

use std::collections::{BTreeMap, HashMap};

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::models::OutboxEvent;
use crate::db::rollup_labels;
use crate::db::rollups::{self, Spec, Sums};
use crate::db::schema::{customer_mappings, margin_tiers};
use crate::db::{DbError, DbResult, Pool};
use crate::{with_conn, with_tx};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = customer_mappings, treat_none_as_default_value = false)]
pub struct Mapping {
    pub id: String,
    pub org_id: String,
    pub processor_customer_id: String,
    pub tag_key: String,
    pub tag_value: String,
    pub match_type: String,
    pub confidence: Option<f64>,
    pub created_at: i64,
}

/// Cost and request count of one tag value.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CostCount {
    pub cost: i64,
    pub requests: i64,
}

pub async fn mappings(pool: &Pool, org_id: &str) -> DbResult<Vec<Mapping>> {
    with_conn!(pool, read, |conn| {
        Ok(customer_mappings::table
            .filter(customer_mappings::org_id.eq(org_id))
            .order((customer_mappings::created_at.desc(), customer_mappings::id.desc()))
            .select(Mapping::as_select())
            .load(conn)
            .await?)
    })
}

/// Inserts or, on (org, processor customer, tag key), updates the tag value, match
/// type and confidence. Returns the stored mapping.
pub async fn upsert_mapping(pool: &Pool, row: &Mapping) -> DbResult<Mapping> {
    with_tx!(pool, |conn| {
        diesel::insert_into(customer_mappings::table)
            .values(row)
            .on_conflict((
                customer_mappings::org_id,
                customer_mappings::processor_customer_id,
                customer_mappings::tag_key,
            ))
            .do_update()
            .set((
                customer_mappings::tag_value.eq(&row.tag_value),
                customer_mappings::match_type.eq(&row.match_type),
                customer_mappings::confidence.eq(row.confidence),
            ))
            .execute(conn)
            .await?;
        Ok(customer_mappings::table
            .filter(customer_mappings::org_id.eq(&row.org_id))
            .filter(customer_mappings::processor_customer_id.eq(&row.processor_customer_id))
            .filter(customer_mappings::tag_key.eq(&row.tag_key))
            .select(Mapping::as_select())
            .first(conn)
            .await?)
    })
}

/// Adds an auto mapping unless the processor customer already has one for the key
/// or the sync's connection is gone; `true` when added.
pub async fn insert_auto(pool: &Pool, connection_id: &str, row: &Mapping) -> DbResult<bool> {
    with_tx!(pool, |conn| {
        if !crate::touch_connection!(conn, &row.org_id, connection_id) {
            return Ok(false);
        }
        let n = diesel::insert_into(customer_mappings::table)
            .values(row)
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
        Ok(n == 1)
    })
}

pub async fn delete_mapping(pool: &Pool, org_id: &str, id: &str) -> DbResult<bool> {
    let n = with_conn!(pool, write, |conn| {
        Ok::<_, DbError>(
            diesel::delete(
                customer_mappings::table
                    .filter(customer_mappings::org_id.eq(org_id))
                    .filter(customer_mappings::id.eq(id)),
            )
            .execute(conn)
            .await?,
        )
    })?;
    Ok(n == 1)
}

/// Cost and requests per value of tag `tag_key` among events created in
/// `[from, to)` (milliseconds, any: both edges exact); `(i64::MIN, i64::MAX)` for all
/// time, read from the all-time rows (one per value and model). From the `tag_model`
/// rollups, so events deleted by retention still count.
pub async fn cost_by_tag_value(
    pool: &Pool,
    org_id: &str,
    tag_key: &str,
    from: i64,
    to: i64,
) -> DbResult<HashMap<String, CostCount>> {
    let spec = Spec { dim: rollups::TAG_MODEL, name: Some(tag_key), label1: None };
    let sums = rollup_labels::window_costs(pool, org_id, (from, Some(to)), spec).await?;
    Ok(cost_counts(sums.iter().map(|(label, s)| (label.as_str(), s))).into_iter().collect())
}

/// Cost and requests per model (byte order) of the events tagged
/// `tag_key=tag_value` in `[from, to)`, from the `tag_model` rollups.
pub async fn cost_by_model(
    pool: &Pool,
    org_id: &str,
    tag_key: &str,
    tag_value: &str,
    from: i64,
    to: i64,
) -> DbResult<Vec<(String, CostCount)>> {
    let spec = Spec { dim: rollups::TAG_MODEL, name: Some(tag_key), label1: Some(tag_value) };
    let rows = rollup_labels::window_labels(pool, org_id, (from, Some(to)), false, &[spec]).await?;
    Ok(cost_counts(rows.iter().map(|r| (r.label2.as_str(), &r.sums))))
}

/// Window rows added up by a label, groups without events left out.
fn cost_counts<'a>(rows: impl Iterator<Item = (&'a str, &'a Sums)>) -> Vec<(String, CostCount)> {
    let mut by_label: BTreeMap<&str, Sums> = BTreeMap::new();
    for (label, s) in rows {
        by_label.entry(label).or_default().add(s);
    }
    by_label
        .into_iter()
        .filter(|(_, s)| s.count != 0)
        .map(|(l, s)| {
            (l.to_owned(), CostCount { cost: rollups::sat(s.cost), requests: rollups::sat(s.count) })
        })
        .collect()
}

/// Which mapped customer and month a tier belongs to.
#[derive(Debug, Clone)]
pub struct TierKey<'a> {
    pub org_id: &'a str,
    /// The connection of the sync recording it; nothing is recorded once it is gone.
    pub connection_id: &'a str,
    pub processor_customer_id: &'a str,
    pub tag_key: &'a str,
    pub period: &'a str,
}

/// Records `tier` as the customer's tier of the month. Returns the previous tier
/// when this call changed it (`None` for the first observation or no change). The
/// change is a conditional update on the tier read, so of two concurrent syncs only
/// one sees (and announces) a transition; `event` (built from the previous tier)
/// goes to the outbox in the same transaction when it returns `Some`.
pub async fn record_tier(
    pool: &Pool,
    outbox: &crate::outbox::Outbox,
    key: &TierKey<'_>,
    (tier, margin): (&str, Option<f64>),
    now: i64,
    event: impl Fn(&str, Option<f64>) -> Option<OutboxEvent> + Send + Sync,
) -> DbResult<Option<String>> {
    with_tx!(pool, |conn| {
        if !crate::touch_connection!(conn, key.org_id, key.connection_id) {
            return Ok(None);
        }
        let target = margin_tiers::table
            .filter(margin_tiers::org_id.eq(key.org_id))
            .filter(margin_tiers::processor_customer_id.eq(key.processor_customer_id))
            .filter(margin_tiers::tag_key.eq(key.tag_key))
            .filter(margin_tiers::period.eq(key.period));
        let previous: Option<(String, Option<f64>)> =
            target.select((margin_tiers::tier, margin_tiers::margin)).first(conn).await.optional()?;
        let Some((previous, previous_margin)) = previous else {
            diesel::insert_into(margin_tiers::table)
                .values((
                    margin_tiers::org_id.eq(key.org_id),
                    margin_tiers::processor_customer_id.eq(key.processor_customer_id),
                    margin_tiers::tag_key.eq(key.tag_key),
                    margin_tiers::period.eq(key.period),
                    margin_tiers::tier.eq(tier),
                    margin_tiers::margin.eq(margin),
                    margin_tiers::updated_at.eq(now),
                ))
                .on_conflict_do_nothing()
                .execute(conn)
                .await?;
            return Ok(None);
        };
        if previous == tier {
            diesel::update(target).set(margin_tiers::margin.eq(margin)).execute(conn).await?;
            return Ok(None);
        }
        let changed = diesel::update(target.filter(margin_tiers::tier.eq(&previous)))
            .set((
                margin_tiers::tier.eq(tier),
                margin_tiers::margin.eq(margin),
                margin_tiers::updated_at.eq(now),
            ))
            .execute(conn)
            .await?;
        if changed != 1 {
            return Ok(None);
        }
        if let Some(row) = event(&previous, previous_margin) {
            crate::enqueue!(conn, outbox, vec![row]);
        }
        Ok(Some(previous))
    })
}
