//! The models the price table did not know, as recorded: proxied cost events tagged
//! `_svc_unknown_model` since a given time, grouped by provider and model. Read by
//! `spendgate pricing check` (every organization) and `GET /v1/policy` (the key's own).

use diesel::dsl::{count_star, max};
use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::schema::{cost_event_tags, cost_events};
use crate::db::{DbResult, Pool};
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
    let mut rows: Vec<UnpricedModel> = with_conn!(pool, read, |conn| {
        let query = cost_events::table
            .group_by((cost_events::provider, cost_events::model))
            .select((cost_events::provider, cost_events::model, count_star(), max(cost_events::created_at)))
            .filter(cost_events::created_at.ge(since_ms))
            .into_boxed();
        let tagged = cost_event_tags::table
            .filter(cost_event_tags::tag_key.eq(UNKNOWN_MODEL_TAG))
            .filter(cost_event_tags::created_at.ge(since_ms));
        let query =
            match org_id {
                Some(org_id) => query.filter(cost_events::org_id.eq(org_id)).filter(cost_events::id.eq_any(
                    tagged.filter(cost_event_tags::org_id.eq(org_id)).select(cost_event_tags::event_id),
                )),
                None => query.filter(cost_events::id.eq_any(tagged.select(cost_event_tags::event_id))),
            };
        query.load::<UnpricedModel>(conn).await
    })?;
    rows.sort_by(|a, b| {
        b.last_seen_ms
            .cmp(&a.last_seen_ms)
            .then_with(|| (&a.provider, &a.model).cmp(&(&b.provider, &b.model)))
    });
    rows.truncate(MAX_LISTED);
    Ok(rows)
}
