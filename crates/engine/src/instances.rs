//! The heartbeat of live processes: each process refreshes its row in `instances`
//! every [`HEARTBEAT_EVERY`]. A process whose row is older than [`STALE_AFTER_MS`]
//! (or absent) is dead, and what it claimed (idempotency claims) is taken over.
//! Each process also holds a lock that ends with it (see [`lock`]), so a crash is
//! seen at once rather than after [`STALE_AFTER_MS`].

pub mod lock;

use std::time::Duration;

use diesel::upsert::excluded;
use diesel::{ExpressionMethods, OptionalExtension, QueryDsl};
use diesel_async::RunQueryDsl;

use crate::db::schema::instances;
use crate::db::{DbError, DbResult, Pool};
use crate::util::time;
use crate::with_conn;

pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(2);
/// Several missed heartbeats: the process is gone (or cut off from the database).
pub const STALE_AFTER_MS: i64 = 10_000;
/// Rows of processes silent this long are deleted.
const FORGET_AFTER_MS: i64 = 3_600_000;

/// Records that `id` is alive now.
pub async fn beat(pool: &Pool, id: &str, started_at: i64) -> DbResult<()> {
    let now = time::now_ms();
    with_conn!(pool, write, |conn| {
        diesel::insert_into(instances::table)
            .values((
                instances::id.eq(id),
                instances::started_at.eq(started_at),
                instances::last_seen.eq(now),
            ))
            .on_conflict(instances::id)
            .do_update()
            .set(instances::last_seen.eq(excluded(instances::last_seen)))
            .execute(conn)
            .await
            .map_err(DbError::from)?;
        Ok(())
    })
}

/// Whether process `id` has beaten within [`STALE_AFTER_MS`] of `now`.
pub async fn is_alive(pool: &Pool, id: &str, now: i64) -> DbResult<bool> {
    let last_seen: Option<i64> = with_conn!(pool, read, |conn| {
        instances::table
            .find(id)
            .select(instances::last_seen)
            .first(conn)
            .await
            .optional()
            .map_err(DbError::from)
    })?;
    Ok(last_seen.is_some_and(|seen| now - seen <= STALE_AFTER_MS))
}

async fn forget_silent(pool: &Pool) -> DbResult<usize> {
    let before = time::now_ms() - FORGET_AFTER_MS;
    with_conn!(pool, write, |conn| {
        diesel::delete(instances::table.filter(instances::last_seen.lt(before)))
            .execute(conn)
            .await
            .map_err(DbError::from)
    })
}

/// Whether process `id` is gone: its lock is free, or (when its lock says nothing)
/// it has not beaten within [`STALE_AFTER_MS`] of `now`.
pub async fn is_gone(pool: &Pool, id: &str, now: i64) -> DbResult<bool> {
    match lock::probe(pool, id).await? {
        lock::Owner::Gone => Ok(true),
        lock::Owner::Alive | lock::Owner::Unknown => Ok(!is_alive(pool, id, now).await?),
    }
}

/// Takes this process's lock and beats once now (so this process is alive before it
/// serves), then keeps beating on the current runtime, holding the lock; also prunes
/// long-silent rows.
///
/// `on_beat` hears the time of every heartbeat written (budget leases stay usable only
/// while the heartbeat is fresh).
pub async fn start(
    pool: Pool,
    id: String,
    started_at: i64,
    on_beat: impl Fn(i64) + Send + 'static,
) -> DbResult<()> {
    // Without its lock a process is still correct, only seen dead later (heartbeat).
    let mut held = lock::take(&pool, &id).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "could not take the process lock; a crash is noticed by the heartbeat only");
        lock::Held::Nothing
    });
    let at = time::now_ms();
    beat(&pool, &id, started_at).await?;
    on_beat(at);
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(HEARTBEAT_EVERY);
        let mut beats: u64 = 0;
        loop {
            tick.tick().await;
            let at = time::now_ms();
            match beat(&pool, &id, started_at).await {
                Ok(()) => on_beat(at),
                Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
            }
            if let Err(e) = lock::keep(&pool, &id, &mut held).await {
                tracing::warn!(error = %e, "could not take the process lock again");
            }
            beats = beats.wrapping_add(1);
            // About every ten minutes.
            if beats.is_multiple_of(300) {
                if let Err(e) = forget_silent(&pool).await {
                    tracing::warn!(error = %e, "could not prune instances");
                }
                lock::forget_gone(&pool, time::now_ms() - FORGET_AFTER_MS);
            }
        }
    });
    Ok(())
}
