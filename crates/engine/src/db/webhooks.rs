//! Webhook endpoints, their deliveries and the delivery leases.

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::models::{OutboxEvent, WebhookDelivery, WebhookEndpoint};
use crate::db::schema::{event_outbox, webhook_deliveries, webhook_endpoints, webhook_leases};
use crate::db::{DbError, DbResult, Pool};
use crate::{with_conn, with_tx};

/// The outcome of [`insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    Created,
    /// The organization already has its tier's number of endpoints.
    LimitReached,
}

/// Inserts `row` unless its organization already holds `max` endpoints (`None` =
/// unlimited).
pub async fn insert(pool: &Pool, row: WebhookEndpoint, max: Option<i64>) -> DbResult<Inserted> {
    with_tx!(pool, |conn| {
        if let Some(max) = max {
            let count: i64 = webhook_endpoints::table
                .filter(webhook_endpoints::org_id.eq(&row.org_id))
                .count()
                .get_result(conn)
                .await?;
            if count >= max {
                return Ok(Inserted::LimitReached);
            }
        }
        diesel::insert_into(webhook_endpoints::table).values(&row).execute(conn).await?;
        Ok(Inserted::Created)
    })
}

/// The organization's endpoints, newest first.
pub async fn list(pool: &Pool, org_id: &str) -> DbResult<Vec<WebhookEndpoint>> {
    with_conn!(pool, read, |conn| {
        Ok(webhook_endpoints::table
            .filter(webhook_endpoints::org_id.eq(org_id))
            .order((webhook_endpoints::created_at.desc(), webhook_endpoints::id.desc()))
            .select(WebhookEndpoint::as_select())
            .load(conn)
            .await?)
    })
}

/// One endpoint of the organization.
pub async fn get(pool: &Pool, org_id: &str, id: &str) -> DbResult<Option<WebhookEndpoint>> {
    with_conn!(pool, read, |conn| {
        Ok(webhook_endpoints::table
            .filter(webhook_endpoints::org_id.eq(org_id))
            .filter(webhook_endpoints::id.eq(id))
            .select(WebhookEndpoint::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// One endpoint, whatever its organization (the delivering actor).
pub async fn by_id(pool: &Pool, id: &str) -> DbResult<Option<WebhookEndpoint>> {
    with_conn!(pool, read, |conn| {
        Ok(webhook_endpoints::table
            .filter(webhook_endpoints::id.eq(id))
            .select(WebhookEndpoint::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// The columns a PATCH may change; `None` leaves a column alone.
#[derive(Debug, Default, Clone, AsChangeset)]
#[diesel(table_name = webhook_endpoints)]
pub struct EndpointChanges {
    pub url: Option<String>,
    pub description: Option<Option<String>>,
    pub event_types: Option<String>,
    pub enabled: Option<bool>,
    pub payload_mode: Option<String>,
    pub updated_at: Option<i64>,
}

pub async fn update(
    pool: &Pool,
    org_id: &str,
    id: &str,
    changes: EndpointChanges,
) -> DbResult<Option<WebhookEndpoint>> {
    with_conn!(pool, write, |conn| {
        Ok(diesel::update(
            webhook_endpoints::table
                .filter(webhook_endpoints::org_id.eq(org_id))
                .filter(webhook_endpoints::id.eq(id)),
        )
        .set(&changes)
        .returning(WebhookEndpoint::as_returning())
        .get_result(conn)
        .await
        .optional()?)
    })
}

/// Deletes an endpoint with its delivery history and lease; false when there was none.
pub async fn delete(pool: &Pool, org_id: &str, id: &str) -> DbResult<bool> {
    with_tx!(pool, |conn| {
        let n = diesel::delete(
            webhook_endpoints::table
                .filter(webhook_endpoints::org_id.eq(org_id))
                .filter(webhook_endpoints::id.eq(id)),
        )
        .execute(conn)
        .await?;
        if n == 0 {
            return Ok(false);
        }
        diesel::delete(webhook_deliveries::table.filter(webhook_deliveries::endpoint_id.eq(id)))
            .execute(conn)
            .await?;
        diesel::delete(webhook_leases::table.filter(webhook_leases::endpoint_id.eq(id)))
            .execute(conn)
            .await?;
        Ok(true)
    })
}

/// Makes `secret` current; the old one keeps signing until `previous_until`.
pub async fn rotate(
    pool: &Pool,
    org_id: &str,
    id: &str,
    secret: &str,
    now: i64,
    previous_until: i64,
) -> DbResult<Option<WebhookEndpoint>> {
    with_conn!(pool, write, |conn| {
        Ok(diesel::update(
            webhook_endpoints::table
                .filter(webhook_endpoints::org_id.eq(org_id))
                .filter(webhook_endpoints::id.eq(id)),
        )
        .set((
            webhook_endpoints::previous_secret.eq(webhook_endpoints::signing_secret.nullable()),
            webhook_endpoints::previous_secret_expires_at.eq(Some(previous_until)),
            webhook_endpoints::signing_secret.eq(secret),
            webhook_endpoints::secret_rotated_at.eq(Some(now)),
            webhook_endpoints::updated_at.eq(now),
        ))
        .returning(WebhookEndpoint::as_returning())
        .get_result(conn)
        .await
        .optional()?)
    })
}

/// The endpoint's most recent deliveries, newest first.
pub async fn recent_deliveries(pool: &Pool, endpoint_id: &str, limit: i64) -> DbResult<Vec<WebhookDelivery>> {
    with_conn!(pool, read, |conn| {
        Ok(webhook_deliveries::table
            .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
            .order((webhook_deliveries::created_at.desc(), webhook_deliveries::id.desc()))
            .limit(limit)
            .select(WebhookDelivery::as_select())
            .load(conn)
            .await?)
    })
}

/// Every enabled endpoint: (id, failing since).
pub async fn enabled(pool: &Pool) -> DbResult<Vec<(String, Option<i64>)>> {
    with_conn!(pool, read, |conn| {
        Ok(webhook_endpoints::table
            .filter(webhook_endpoints::enabled.eq(true))
            .select((webhook_endpoints::id, webhook_endpoints::failing_since))
            .load(conn)
            .await?)
    })
}

/// Up to `limit` pending deliveries of an endpoint due at `now`, oldest first, each
/// with its outbox row (`None` when the row is gone).
pub async fn due(
    pool: &Pool,
    endpoint_id: &str,
    now: i64,
    limit: i64,
) -> DbResult<Vec<(WebhookDelivery, Option<OutboxEvent>)>> {
    with_conn!(pool, read, |conn| {
        let deliveries: Vec<WebhookDelivery> = webhook_deliveries::table
            .filter(webhook_deliveries::endpoint_id.eq(endpoint_id))
            .filter(webhook_deliveries::status.eq("pending"))
            .filter(webhook_deliveries::next_attempt_at.le(now))
            .order((webhook_deliveries::next_attempt_at.asc(), webhook_deliveries::id.asc()))
            .limit(limit)
            .select(WebhookDelivery::as_select())
            .load(conn)
            .await?;
        let ids: Vec<&str> = deliveries.iter().map(|d| d.outbox_id.as_str()).collect();
        let rows: Vec<OutboxEvent> = event_outbox::table
            .filter(event_outbox::id.eq_any(&ids))
            .select(OutboxEvent::as_select())
            .load(conn)
            .await?;
        let mut by_id: std::collections::HashMap<String, OutboxEvent> =
            rows.into_iter().map(|r| (r.id.clone(), r)).collect();
        Ok::<_, DbError>(
            deliveries
                .into_iter()
                .map(|d| {
                    let row = by_id.remove(&d.outbox_id);
                    (d, row)
                })
                .collect(),
        )
    })
}

/// What an attempt changes on its delivery.
#[derive(Debug, Clone, AsChangeset)]
#[diesel(table_name = webhook_deliveries)]
pub struct AttemptRecord {
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at: i64,
    pub last_attempt_at: Option<i64>,
    pub response_status: Option<i64>,
    pub last_error: Option<String>,
}

/// Records an attempt, and the endpoint's health: `failing_since` is set at a
/// failure (kept when already set) and cleared by a success.
pub async fn record_attempt(
    pool: &Pool,
    endpoint_id: &str,
    delivery_id: &str,
    record: AttemptRecord,
    succeeded: bool,
    now: i64,
) -> DbResult<()> {
    with_tx!(pool, |conn| {
        diesel::update(webhook_deliveries::table.filter(webhook_deliveries::id.eq(delivery_id)))
            .set(&record)
            .execute(conn)
            .await?;
        let endpoint = webhook_endpoints::table.filter(webhook_endpoints::id.eq(endpoint_id));
        if succeeded {
            diesel::update(endpoint.filter(webhook_endpoints::failing_since.is_not_null()))
                .set(webhook_endpoints::failing_since.eq(None::<i64>))
                .execute(conn)
                .await?;
        } else {
            diesel::update(endpoint.filter(webhook_endpoints::failing_since.is_null()))
                .set(webhook_endpoints::failing_since.eq(Some(now)))
                .execute(conn)
                .await?;
        }
        Ok(())
    })
}

/// Takes or renews this instance's lease on delivering an endpoint: true when this
/// instance holds it until `now + ttl_ms`. Another instance's lease is taken only
/// once it has expired (its holder stopped renewing).
pub async fn claim_lease(pool: &Pool, endpoint_id: &str, me: &str, now: i64, ttl_ms: i64) -> DbResult<bool> {
    with_conn!(pool, write, |conn| {
        let renewed = diesel::update(
            webhook_leases::table
                .filter(webhook_leases::endpoint_id.eq(endpoint_id))
                .filter(webhook_leases::owner_instance.eq(me).or(webhook_leases::expires_at.lt(now))),
        )
        .set((webhook_leases::owner_instance.eq(me), webhook_leases::expires_at.eq(now + ttl_ms)))
        .execute(conn)
        .await?;
        if renewed == 1 {
            return Ok(true);
        }
        let inserted = diesel::insert_into(webhook_leases::table)
            .values((
                webhook_leases::endpoint_id.eq(endpoint_id),
                webhook_leases::owner_instance.eq(me),
                webhook_leases::expires_at.eq(now + ttl_ms),
            ))
            .on_conflict_do_nothing()
            .execute(conn)
            .await?;
        Ok(inserted == 1)
    })
}

/// Gives up this instance's lease (shutdown, endpoint disabled).
pub async fn release_lease(pool: &Pool, endpoint_id: &str, me: &str) -> DbResult<()> {
    with_conn!(pool, write, |conn| {
        diesel::delete(
            webhook_leases::table
                .filter(webhook_leases::endpoint_id.eq(endpoint_id))
                .filter(webhook_leases::owner_instance.eq(me)),
        )
        .execute(conn)
        .await?;
        Ok(())
    })
}

/// Deletes finished deliveries created before `before`, then outbox rows created
/// before it that no pending delivery needs. Returns (deliveries, outbox rows).
pub async fn prune(pool: &Pool, before: i64) -> DbResult<(usize, usize)> {
    with_conn!(pool, write, |conn| {
        let deliveries = diesel::delete(
            webhook_deliveries::table
                .filter(webhook_deliveries::created_at.lt(before))
                .filter(webhook_deliveries::status.ne("pending")),
        )
        .execute(conn)
        .await?;
        let pending = webhook_deliveries::table
            .filter(webhook_deliveries::outbox_id.eq(event_outbox::id))
            .filter(webhook_deliveries::status.eq("pending"));
        let rows = diesel::delete(
            event_outbox::table
                .filter(event_outbox::created_at.lt(before))
                .filter(diesel::dsl::not(diesel::dsl::exists(pending))),
        )
        .execute(conn)
        .await?;
        Ok((deliveries, rows))
    })
}
