//! What a refund may give back: the gate charges recorded under one request id. A
//! refund (a negative `gate` cost event) is accepted only against these, so a key can
//! never lower spend that no charge of its own put there.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::bindings::GATE_PROVIDER;
use crate::db::schema::cost_events;
use crate::db::{DbResult, Pool};
use crate::with_conn;

/// The gate charges of one request, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateCharges {
    /// Sum of their costs (at least one charge, so positive).
    pub charged: i64,
    /// The first charge's customer and tags (stored JSON): the refund counts where the
    /// charge counted.
    pub customer_id: Option<String>,
    pub tags: String,
}

/// The gate charges of `api_key_id` in `org_id` under `request_id`, or `None` when
/// there is none. Backed by the (org, request id) index.
pub async fn gate_charges(
    pool: &Pool,
    org_id: &str,
    api_key_id: &str,
    request_id: &str,
) -> DbResult<Option<GateCharges>> {
    let rows: Vec<(i64, Option<String>, String)> = with_conn!(pool, read, |conn| {
        cost_events::table
            .filter(cost_events::org_id.eq(org_id))
            .filter(cost_events::request_id.eq(request_id))
            .filter(cost_events::provider.eq(GATE_PROVIDER))
            .filter(cost_events::api_key_id.eq(api_key_id))
            .filter(cost_events::cost_microdollars.gt(0))
            .order(cost_events::created_at.asc())
            .select((cost_events::cost_microdollars, cost_events::customer_id, cost_events::tags))
            .load(conn)
            .await
    })?;
    let mut rows = rows.into_iter();
    let (first, customer_id, tags) = match rows.next() {
        Some(row) => row,
        None => return Ok(None),
    };
    let charged = rows.fold(first, |sum, (cost, _, _)| sum.saturating_add(cost));
    Ok(Some(GateCharges { charged, customer_id, tags }))
}
