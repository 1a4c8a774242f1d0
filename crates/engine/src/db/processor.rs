//! Storage of the payment-processor side of margins: the connection, the customers
//! and revenue items a sync learned, and the lease of the scheduled sync.

use std::collections::{BTreeMap, HashMap};

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::exact_sum::{self, SumParts};
use crate::db::schema::{processor_connections, processor_customers, revenue_items, sync_leases};
use crate::db::{DbError, DbResult, Pool};
use crate::margins::revenue::RevenueItem;
use crate::processor::types::Customer;
use crate::{with_conn, with_tx};

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = processor_connections, treat_none_as_default_value = false)]
pub struct Connection {
    pub org_id: String,
    pub id: String,
    pub key_ciphertext: String,
    pub key_prefix: String,
    pub status: String,
    pub created_at: i64,
    pub last_sync_at: Option<i64>,
    pub sync_status: String,
    pub last_error: Option<String>,
    pub skipped_currencies: String,
}

#[derive(Debug, Clone, Queryable, Selectable, Insertable)]
#[diesel(table_name = processor_customers, treat_none_as_default_value = false)]
pub struct CustomerRow {
    pub org_id: String,
    pub processor_customer_id: String,
    pub name: Option<String>,
    pub email: Option<String>,
    pub metadata: String,
    pub updated_at: i64,
}

impl CustomerRow {
    pub fn to_customer(&self) -> Customer {
        Customer {
            id: self.processor_customer_id.clone(),
            name: self.name.clone(),
            email: self.email.clone(),
            metadata: serde_json::from_str(&self.metadata).unwrap_or_default(),
        }
    }
}

/// Inside a sync's write transaction: touches the connection row `$id` of `$org`
/// and evaluates to whether it still exists. On PostgreSQL the touch holds the row
/// lock until commit, so a disconnect waits for the transaction and then deletes
/// what it wrote; SQLite's single writer serializes them anyway. A sync that finds
/// its connection gone writes nothing (no revenue outlives a disconnect).
#[macro_export]
macro_rules! touch_connection {
    ($conn:expr, $org:expr, $id:expr) => {{
        use diesel::{ExpressionMethods as _, QueryDsl as _};
        use diesel_async::RunQueryDsl as _;
        use $crate::db::schema::processor_connections as pc;
        diesel::update(pc::table.filter(pc::org_id.eq($org)).filter(pc::id.eq($id)))
            .set(pc::status.eq(pc::status))
            .execute($conn)
            .await?
            == 1
    }};
}

pub async fn connection(pool: &Pool, org_id: &str) -> DbResult<Option<Connection>> {
    with_conn!(pool, read, |conn| {
        Ok(processor_connections::table
            .find(org_id)
            .select(Connection::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// Stores a new connection; `false` when the organization already has one.
pub async fn insert_connection(pool: &Pool, row: &Connection) -> DbResult<bool> {
    let inserted = with_conn!(pool, write, |conn| {
        Ok::<_, DbError>(
            diesel::insert_into(processor_connections::table)
                .values(row)
                .on_conflict_do_nothing()
                .execute(conn)
                .await?,
        )
    })?;
    Ok(inserted == 1)
}

/// Deletes, on `$conn` (inside the caller's transaction), an organization's
/// processor connection and every revenue item, customer, mapping and tier; it
/// evaluates to the number of connections deleted (0 or 1). Used by disconnect and
/// by organization deletion.
#[macro_export]
macro_rules! delete_margins_data {
    ($conn:expr, $org:expr) => {{
        use diesel::{ExpressionMethods as _, QueryDsl as _};
        use diesel_async::RunQueryDsl as _;
        use $crate::db::schema::{
            customer_mappings as cm, margin_tiers as mt, processor_connections as pc,
            processor_customers as pcu, revenue_items as ri,
        };
        let n = diesel::delete(pc::table.filter(pc::org_id.eq($org))).execute($conn).await?;
        diesel::delete(ri::table.filter(ri::org_id.eq($org))).execute($conn).await?;
        diesel::delete(pcu::table.filter(pcu::org_id.eq($org))).execute($conn).await?;
        diesel::delete(cm::table.filter(cm::org_id.eq($org))).execute($conn).await?;
        diesel::delete(mt::table.filter(mt::org_id.eq($org))).execute($conn).await?;
        n
    }};
}

/// Removes the connection with every revenue item, customer, mapping and tier of
/// the organization, in one transaction. `false` when there was no connection.
pub async fn delete_connection(pool: &Pool, org_id: &str) -> DbResult<bool> {
    with_tx!(pool, |conn| Ok(crate::delete_margins_data!(conn, org_id) == 1))
}

/// Every connected organization's id.
pub async fn connected_orgs(pool: &Pool) -> DbResult<Vec<String>> {
    with_conn!(pool, read, |conn| {
        Ok(processor_connections::table.select(processor_connections::org_id).load(conn).await?)
    })
}

/// Records how a sync ended. A connection deleted meanwhile stays deleted.
pub async fn record_sync(
    pool: &Pool,
    org_id: &str,
    now: i64,
    error: Option<&str>,
    skipped: &BTreeMap<String, i64>,
) -> DbResult<()> {
    let skipped = serde_json::to_string(skipped).unwrap_or_else(|_| "{}".to_owned());
    with_conn!(pool, write, |conn| {
        let target = processor_connections::table.find(org_id);
        let status = if error.is_some() { "error" } else { "ok" };
        let q = diesel::update(target).set((
            processor_connections::last_sync_at.eq(Some(now)),
            processor_connections::sync_status.eq(status),
            processor_connections::last_error.eq(error),
        ));
        q.execute(conn).await?;
        if error.is_none() {
            diesel::update(processor_connections::table.find(org_id))
                .set(processor_connections::skipped_currencies.eq(&skipped))
                .execute(conn)
                .await?;
        }
        Ok(())
    })
}

/// Writes the customers a sync fetched; `false` (nothing written) when the
/// connection `connection_id` is gone.
pub async fn upsert_customers(
    pool: &Pool,
    org_id: &str,
    connection_id: &str,
    customers: &[Customer],
    now: i64,
) -> DbResult<bool> {
    let rows: Vec<CustomerRow> = customers
        .iter()
        .map(|c| CustomerRow {
            org_id: org_id.to_owned(),
            processor_customer_id: c.id.clone(),
            name: c.name.clone(),
            email: c.email.clone(),
            metadata: serde_json::Value::Object(c.metadata.clone()).to_string(),
            updated_at: now,
        })
        .collect();
    with_tx!(pool, |conn| {
        if !crate::touch_connection!(conn, org_id, connection_id) {
            return Ok(false);
        }
        for row in &rows {
            diesel::insert_into(processor_customers::table)
                .values(row)
                .on_conflict((processor_customers::org_id, processor_customers::processor_customer_id))
                .do_update()
                .set((
                    processor_customers::name.eq(&row.name),
                    processor_customers::email.eq(&row.email),
                    processor_customers::metadata.eq(&row.metadata),
                    processor_customers::updated_at.eq(now),
                ))
                .execute(conn)
                .await?;
        }
        Ok(true)
    })
}

pub async fn customers(pool: &Pool, org_id: &str) -> DbResult<Vec<CustomerRow>> {
    with_conn!(pool, read, |conn| {
        Ok(processor_customers::table
            .filter(processor_customers::org_id.eq(org_id))
            .order(processor_customers::processor_customer_id)
            .select(CustomerRow::as_select())
            .load(conn)
            .await?)
    })
}

/// `(gross, net)` cents of every stored invoice of the organization.
pub async fn known_invoices(pool: &Pool, org_id: &str) -> DbResult<HashMap<String, (i64, i64)>> {
    let rows: Vec<(String, i64, i64)> = with_conn!(pool, read, |conn| {
        Ok::<_, DbError>(
            revenue_items::table
                .filter(revenue_items::org_id.eq(org_id))
                .filter(revenue_items::kind.eq("invoice"))
                .select((revenue_items::object_id, revenue_items::gross_cents, revenue_items::net_cents))
                .load(conn)
                .await?,
        )
    })?;
    Ok(rows.into_iter().map(|(id, g, n)| (id, (g, n))).collect())
}

/// Writes items keyed by their processor object id; returns the distinct
/// (customer, month) pairs touched, or `None` (nothing written) when the connection
/// is gone. A re-sync rewrites each row, so nothing is counted twice.
pub async fn upsert_items(
    pool: &Pool,
    org_id: &str,
    connection_id: &str,
    items: &[RevenueItem],
) -> DbResult<Option<usize>> {
    let written = with_tx!(pool, |conn| {
        if !crate::touch_connection!(conn, org_id, connection_id) {
            return Ok(false);
        }
        for it in items {
            let values = (
                revenue_items::org_id.eq(org_id),
                revenue_items::object_id.eq(&it.object_id),
                revenue_items::kind.eq(it.kind),
                revenue_items::processor_customer_id.eq(&it.customer),
                revenue_items::period.eq(&it.period),
                revenue_items::amount_microdollars.eq(it.amount_microdollars),
                revenue_items::gross_cents.eq(it.gross_cents),
                revenue_items::net_cents.eq(it.net_cents),
                revenue_items::occurred_at.eq(it.occurred_at_ms),
            );
            diesel::insert_into(revenue_items::table)
                .values(values)
                .on_conflict((revenue_items::org_id, revenue_items::object_id))
                .do_update()
                .set((
                    revenue_items::processor_customer_id.eq(&it.customer),
                    revenue_items::period.eq(&it.period),
                    revenue_items::amount_microdollars.eq(it.amount_microdollars),
                    revenue_items::gross_cents.eq(it.gross_cents),
                    revenue_items::net_cents.eq(it.net_cents),
                    revenue_items::occurred_at.eq(it.occurred_at_ms),
                ))
                .execute(conn)
                .await?;
        }
        Ok(true)
    })?;
    if !written {
        return Ok(None);
    }
    let months: std::collections::BTreeSet<(&str, &str)> =
        items.iter().map(|i| (i.customer.as_str(), i.period.as_str())).collect();
    Ok(Some(months.len()))
}

/// Revenue per processor customer in `period` (`None`: all time), exact.
pub async fn revenue_by_customer(
    pool: &Pool,
    org_id: &str,
    period: Option<&str>,
) -> DbResult<HashMap<String, i64>> {
    let (hi, lo) = exact_sum::parts("revenue_items.amount_microdollars");
    let rows: Vec<(String, i64, i64)> = with_conn!(pool, read, |conn| {
        let mut q = revenue_items::table
            .filter(revenue_items::org_id.eq(org_id))
            .group_by(revenue_items::processor_customer_id)
            .select((revenue_items::processor_customer_id, hi.clone(), lo.clone()))
            .into_boxed();
        if let Some(p) = period {
            q = q.filter(revenue_items::period.eq(p.to_owned()));
        }
        Ok::<_, DbError>(q.load(conn).await?)
    })?;
    Ok(rows.into_iter().map(|(c, hi, lo)| (c, exact_sum::join((hi, lo) as SumParts))).collect())
}

/// Takes (or renews) the lease `name` for `holder` until `now + ttl_ms`; `true` when
/// this holder has it. A lease whose expiry has passed is free for anyone.
pub async fn try_lease(pool: &Pool, name: &str, holder: &str, now: i64, ttl_ms: i64) -> DbResult<bool> {
    with_conn!(pool, write, |conn| {
        diesel::insert_into(sync_leases::table)
            .values((
                sync_leases::name.eq(name),
                sync_leases::holder.eq(holder),
                sync_leases::expires_at.eq(0i64),
            ))
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
        let taken = diesel::update(
            sync_leases::table
                .filter(sync_leases::name.eq(name))
                .filter(sync_leases::expires_at.lt(now).or(sync_leases::holder.eq(holder))),
        )
        .set((sync_leases::holder.eq(holder), sync_leases::expires_at.eq(now.saturating_add(ttl_ms))))
        .execute(conn)
        .await?;
        Ok(taken == 1)
    })
}
