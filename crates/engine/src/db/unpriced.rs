//! The models the price table did not know, as recorded: proxied cost events tagged
//! `_svc_unknown_model` since a given time, grouped by provider and model. Read by
//! `spendgate pricing check` (every organization) and `GET /v1/policy` (the key's own).
//!
//! Counts come from the `spend_tag` rollups of that tag (its spend sources name the
//! provider and model). The last sighting is exact to the millisecond: the latest
//! hour row says which hour, and the tagged raw events of that one hour say when.

use std::collections::BTreeMap;

use diesel::dsl::max;
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::rollups::{self, Spec, Sums, HOUR_MS, SPEND_TAG};
use crate::db::schema::{cost_event_tags, cost_events, cost_rollups, organizations};
use crate::db::{DbError, DbResult, Pool};
use crate::with_conn;

/// The tag the proxy puts on a call charged at the unknown-model price.
pub const UNKNOWN_MODEL_TAG: &str = "_svc_unknown_model";

/// Most (provider, model) pairs returned, the most recently seen first.
pub const MAX_LISTED: usize = 100;

/// One model charged at the unknown-model price.
#[derive(Debug, Clone, PartialEq, Eq, Queryable)]
pub struct UnpricedModel {
    pub provider: String,
    pub model: String,
    /// Calls recorded since the start of the window.
    pub calls: i64,
    /// The latest of them, Unix milliseconds.
    pub last_seen_ms: Option<i64>,
}

/// The models recorded as unknown since `since_ms`, in `org_id` or in every organization,
/// most recently seen first, at most [`MAX_LISTED`].
pub async fn recent(pool: &Pool, org_id: Option<&str>, since_ms: i64) -> DbResult<Vec<UnpricedModel>> {
    let orgs: Vec<String> = match org_id {
        Some(id) => vec![id.to_owned()],
        None => with_conn!(pool, read, |conn| {
            Ok::<_, DbError>(organizations::table.select(organizations::id).load(conn).await?)
        })?,
    };
    let mut all: BTreeMap<(String, String), (Sums, Option<i64>)> = BTreeMap::new();
    for org in &orgs {
        for (pair, (sums, last)) in in_org(pool, org, since_ms).await? {
            let entry = all.entry(pair).or_default();
            entry.0.add(&sums);
            entry.1 = entry.1.max(last);
        }
    }
    let mut rows: Vec<UnpricedModel> = all
        .into_iter()
        .filter(|(_, (s, _))| s.count != 0)
        .map(|((provider, model), (s, last_seen_ms))| UnpricedModel {
            provider,
            model,
            calls: rollups::sat(s.count),
            last_seen_ms,
        })
        .collect();
    rows.sort_by(|a, b| {
        b.last_seen_ms
            .cmp(&a.last_seen_ms)
            .then_with(|| (&a.provider, &a.model).cmp(&(&b.provider, &b.model)))
    });
    rows.truncate(MAX_LISTED);
    Ok(rows)
}

type PairSums = BTreeMap<(String, String), (Sums, Option<i64>)>;

/// One organization's unknown models since `since_ms`: counts and last sighting.
async fn in_org(pool: &Pool, org_id: &str, since_ms: i64) -> DbResult<PairSums> {
    let spec = Spec { dim: SPEND_TAG, name: Some(UNKNOWN_MODEL_TAG), label1: None };
    let rows =
        crate::db::rollup_labels::window_labels(pool, org_id, (since_ms, None), false, &[spec]).await?;
    let mut out: PairSums = BTreeMap::new();
    for r in &rows {
        if let Some((_, provider, model)) = rollups::parse_source_label(&r.label2) {
            out.entry((provider, model)).or_default().0.add(&r.sums);
        }
    }
    for (pair, hour) in last_hours(pool, org_id, since_ms).await? {
        if let Some(entry) = out.get_mut(&pair) {
            entry.1 = last_in_hour(pool, org_id, &pair, since_ms.max(hour * HOUR_MS), (hour + 1) * HOUR_MS)
                .await?
                // Exact while that hour's raw events are stored: the policy and the
                // pricing report look back 7 days, retention keeps at least 91.
                .or(Some(hour * HOUR_MS));
        }
    }
    Ok(out)
}

/// The latest hour bucket at or after the hour of `since_ms` in which each
/// (provider, model) was recorded unknown.
async fn last_hours(pool: &Pool, org_id: &str, since_ms: i64) -> DbResult<BTreeMap<(String, String), i64>> {
    let rows: Vec<(i64, String)> = with_conn!(pool, read, |conn| {
        Ok::<_, DbError>(
            cost_rollups::table
                .filter(cost_rollups::org_id.eq(org_id))
                .filter(cost_rollups::dim.eq(SPEND_TAG))
                .filter(cost_rollups::name.eq(UNKNOWN_MODEL_TAG))
                .filter(cost_rollups::grain.eq("h"))
                .filter(cost_rollups::bucket.ge(since_ms.div_euclid(HOUR_MS)))
                .select((cost_rollups::bucket, cost_rollups::label2))
                .load(conn)
                .await?,
        )
    })?;
    let mut out = BTreeMap::new();
    for (bucket, label) in rows {
        if let Some((_, provider, model)) = rollups::parse_source_label(&label) {
            let last = out.entry((provider, model)).or_insert(bucket);
            *last = (*last).max(bucket);
        }
    }
    Ok(out)
}

/// The latest tagged event of (provider, model) created in `[from, to)`.
async fn last_in_hour(
    pool: &Pool,
    org_id: &str,
    (provider, model): &(String, String),
    from: i64,
    to: i64,
) -> DbResult<Option<i64>> {
    with_conn!(pool, read, |conn| {
        let tagged = cost_event_tags::table
            .filter(cost_event_tags::org_id.eq(org_id))
            .filter(cost_event_tags::tag_key.eq(UNKNOWN_MODEL_TAG))
            .filter(cost_event_tags::created_at.ge(from))
            .filter(cost_event_tags::created_at.lt(to))
            .select(cost_event_tags::event_id);
        Ok::<_, DbError>(
            cost_events::table
                .filter(cost_events::org_id.eq(org_id))
                .filter(cost_events::provider.eq(provider))
                .filter(cost_events::model.eq(model))
                .filter(cost_events::created_at.ge(from))
                .filter(cost_events::created_at.lt(to))
                .filter(cost_events::id.eq_any(tagged))
                .select(max(cost_events::created_at))
                .first(conn)
                .await?,
        )
    })
}
