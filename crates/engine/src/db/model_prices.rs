//! Prices an organization sets at run time: stored (upserted per provider and model),
//! listed, deleted, and read with the organization's `unpricedModels` setting by the
//! proxy's price cache. Every change writes an audit row and a `model_price_changes`
//! row in its own transaction, so each instance's cache reloads the organization.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::audit::{self, actions, resources, Entry};
use crate::db::change_feed::change_feed;
use crate::db::models::RuntimePrice;
use crate::db::schema::{model_prices, organizations};
use crate::db::{DbError, DbResult, Pool};
use crate::util::time;
use crate::{record_audit, with_conn, with_tx};

/// The `unpricedModels` values (see `crate::model_prices::UnpricedPolicy`).
pub const ESTIMATE: &str = "estimate";
pub const BLOCK: &str = "block";

/// Records in the caller's transaction that the prices (or the `unpricedModels`
/// setting) of `org_id` changed: every instance's price cache reloads it.
macro_rules! note_price_change {
    ($conn:ident, $org_id:expr, $now:expr) => {{
        diesel::insert_into(crate::db::schema::model_price_changes::table)
            .values((
                crate::db::schema::model_price_changes::id.eq(crate::util::ids::new_id()),
                crate::db::schema::model_price_changes::org_id.eq($org_id),
                crate::db::schema::model_price_changes::changed_at.eq($now),
            ))
            .execute($conn)
            .await?;
    }};
}
pub(crate) use note_price_change;

/// The price's resource id in audit rows: `provider/model`.
fn resource_id(row: &RuntimePrice) -> String {
    format!("{}/{}", row.provider, row.model)
}

fn audit_entry<'a>(row: &'a RuntimePrice, actor: &'a str, action: &'a str) -> Entry<'a> {
    Entry {
        org_id: &row.org_id,
        actor_user_id: Some(actor),
        action,
        resource_type: resources::MODEL_PRICE,
        resource_id: Some(resource_id(row)),
        metadata: serde_json::json!({
            "provider": row.provider,
            "model": row.model,
            "input": row.input,
            "output": row.output,
            "cachedInput": row.cached_input,
            "cacheWrite5m": row.cache_write_5m,
            "cacheWrite1h": row.cache_write_1h,
            "reasoningOutput": row.reasoning_output,
        }),
    }
}

/// Stores `new` as the organization's price of its provider and model, replacing the
/// whole entry of an existing one (its id and `created_at` kept).
pub async fn store(pool: &Pool, new: RuntimePrice, actor: &str) -> DbResult<RuntimePrice> {
    use model_prices as p;
    with_tx!(pool, |conn| {
        let row: RuntimePrice = diesel::insert_into(p::table)
            .values(&new)
            .on_conflict((p::org_id, p::provider, p::model))
            .do_update()
            .set((
                p::input.eq(new.input),
                p::output.eq(new.output),
                p::cached_input.eq(new.cached_input),
                p::cache_write_5m.eq(new.cache_write_5m),
                p::cache_write_1h.eq(new.cache_write_1h),
                p::reasoning_output.eq(new.reasoning_output),
                p::updated_at.eq(new.updated_at),
            ))
            .returning(RuntimePrice::as_returning())
            .get_result(conn)
            .await?;
        let entry = audit_entry(&row, actor, actions::MODEL_PRICE_SET);
        record_audit!(conn, audit::new_event(entry, new.updated_at))?;
        note_price_change!(conn, &row.org_id, new.updated_at);
        Ok(row)
    })
}

/// The organization's runtime prices, by provider and model.
pub async fn list(pool: &Pool, org_id: &str) -> DbResult<Vec<RuntimePrice>> {
    with_conn!(pool, read, |conn| {
        Ok(model_prices::table
            .filter(model_prices::org_id.eq(org_id))
            .order((model_prices::provider.asc(), model_prices::model.asc()))
            .select(RuntimePrice::as_select())
            .load(conn)
            .await?)
    })
}

/// Every organization's runtime prices (for `spendgate pricing check`).
pub async fn list_all(pool: &Pool) -> DbResult<Vec<RuntimePrice>> {
    with_conn!(pool, read, |conn| {
        Ok(model_prices::table
            .order((model_prices::org_id.asc(), model_prices::provider.asc(), model_prices::model.asc()))
            .select(RuntimePrice::as_select())
            .load(conn)
            .await?)
    })
}

/// The organization's `unpricedModels` and `unpricedTools` settings and runtime
/// prices, read together; `None` when the organization does not exist.
pub async fn org_prices(
    pool: &Pool,
    org_id: &str,
) -> DbResult<Option<((String, String), Vec<RuntimePrice>)>> {
    with_conn!(pool, read, |conn| {
        let setting: Option<(String, String)> = organizations::table
            .find(org_id)
            .select((organizations::unpriced_models, organizations::unpriced_tools))
            .first(conn)
            .await
            .optional()?;
        let Some(setting) = setting else {
            return Ok::<_, DbError>(None);
        };
        let rows = model_prices::table
            .filter(model_prices::org_id.eq(org_id))
            .select(RuntimePrice::as_select())
            .load(conn)
            .await?;
        Ok(Some((setting, rows)))
    })
}

/// Deletes the organization's price of `provider`/`model`; `None` when it sets none.
pub async fn delete(
    pool: &Pool,
    org_id: &str,
    provider: &str,
    model: &str,
    actor: &str,
) -> DbResult<Option<RuntimePrice>> {
    use model_prices as p;
    with_tx!(pool, |conn| {
        let row: Option<RuntimePrice> = diesel::delete(
            p::table.filter(p::org_id.eq(org_id)).filter(p::provider.eq(provider)).filter(p::model.eq(model)),
        )
        .returning(RuntimePrice::as_returning())
        .get_result(conn)
        .await
        .optional()?;
        if let Some(row) = &row {
            let now = time::now_ms();
            let entry = audit_entry(row, actor, actions::MODEL_PRICE_DELETED);
            record_audit!(conn, audit::new_event(entry, now))?;
            note_price_change!(conn, &row.org_id, now);
        }
        Ok(row)
    })
}

/// A price change: (change id, organization, when).
pub type PriceChange = (String, String, i64);

change_feed!(model_price_changes, PriceChange, (id, org_id, changed_at));
