//! The `Idempotency-Key` layer shared by every POST the spec lists.
//!
//! Scope is (API key hash, route, key). The first request claims the key with a
//! `pending` row (a unique insert, so concurrent duplicates cannot both run); when
//! it finishes, a response below 500 is stored for 24 hours and replayed with
//! `X-Idempotent-Replayed: true`; a 5xx, or a request dropped midway (the client went
//! away), releases the claim so a retry runs again.
//! A concurrent duplicate polls for up to one second, then gets 503
//! `request_in_progress` with `Retry-After: 1`. The same key with a different body
//! is 409 `idempotency_conflict`. Rows live in the database, so all of this holds
//! across restarts and across instances.
//!
//! A claim records the process that owns it. After a crash its claims would block
//! retries: a claim whose owner is gone (its process lock is free, or it has no
//! fresh heartbeat; see [`crate::instances`]) is taken over at once. This process's own claims are never taken over (its requests
//! release them); another live process's after [`ABANDONED_AFTER_MS`], as a safety
//! net, like claims written before owners were recorded.

use std::future::Future;
use std::time::Duration;

use actix_web::http::header::{HeaderName, RETRY_AFTER};
use actix_web::http::StatusCode;
use actix_web::{HttpRequest, HttpResponse};
use diesel::{ExpressionMethods, QueryDsl};
use diesel_async::RunQueryDsl;

use crate::db::models::IdempotencyRecord;
use crate::db::schema::idempotency_keys;
use crate::db::{DbError, DbResult, Pool};
use crate::error::{ApiError, ErrorCode};
use crate::util::time;
use crate::with_conn;

pub const TTL_MS: i64 = 24 * 3600 * 1000;
/// A `pending` claim of another live process (or of no recorded process) older than
/// this is taken over.
pub const ABANDONED_AFTER_MS: i64 = 60_000;
const POLL_FOR: Duration = Duration::from_secs(1);
const POLL_EVERY: Duration = Duration::from_millis(25);
pub const REPLAYED: HeaderName = HeaderName::from_static("x-idempotent-replayed");
pub const MAX_KEY_LEN: usize = 256;

/// The request's `Idempotency-Key`, validated: 1-256 printable ASCII characters.
pub fn header_key(req: &HttpRequest) -> Result<Option<String>, ApiError> {
    let Some(value) = req.headers().get("idempotency-key") else { return Ok(None) };
    let key = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= MAX_KEY_LEN && k.bytes().all(|b| (0x20..0x7f).contains(&b)));
    match key {
        Some(k) => Ok(Some(k.to_owned())),
        None => Err(ApiError::new(
            ErrorCode::InvalidIdempotencyKey,
            "Idempotency-Key must be 1 to 256 printable ASCII characters",
        )),
    }
}

enum Claim {
    Run,
    Replay { status: u16, body: String },
    Conflict,
    InProgress,
}

/// Releases a claim whose request was dropped before it finished (the client went
/// away): nothing was acknowledged, so a retry must run.
struct ClaimGuard {
    pool: Pool,
    id: Option<String>,
}

impl ClaimGuard {
    /// The request finished; its outcome decides what happens to the claim.
    fn disarm(&mut self) {
        self.id = None;
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(id) = self.id.take() else { return };
        let pool = self.pool.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                if let Err(e) = release(&pool, &id).await {
                    tracing::warn!(error = %e, "could not release a dropped idempotency claim");
                }
            });
        }
    }
}

/// Runs `handler` at most once per (key hash, route, idempotency key); `instance`
/// is this process's id (the claim's owner). Without a key the handler simply runs.
pub async fn run<F, Fut>(
    pool: &Pool,
    instance: &str,
    key: Option<String>,
    key_hash: &str,
    route: &str,
    body: &[u8],
    handler: F,
) -> Result<HttpResponse, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(StatusCode, serde_json::Value), ApiError>>,
{
    let scope = Scope { pool, instance, key, key_hash, route, body, replay_header: REPLAYED };
    Ok(run_in(scope, handler).await?.0)
}

/// One idempotent request: where claims live, who owns them, and what identifies it.
pub struct Scope<'a> {
    pub pool: &'a Pool,
    /// This process's id (the claim's owner).
    pub instance: &'a str,
    /// The validated `Idempotency-Key`, if the request sent one.
    pub key: Option<String>,
    pub key_hash: &'a str,
    pub route: &'a str,
    pub body: &'a [u8],
    /// The header a replay carries (`X-Idempotent-Replayed`; the per-customer
    /// endpoints use `Idempotent-Replayed`).
    pub replay_header: HeaderName,
}

/// Whether [`run_in`] ran the handler (and, with a key, stored its answer) or
/// replayed a stored answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ran {
    /// The handler ran; with a key, its answer is stored for replay (or, for a 5xx,
    /// the claim was released).
    Handler,
    Replayed,
}

/// [`run`] with a chosen replay header, telling the caller whether the handler ran:
/// work that must follow a durably stored answer (a webhook) happens only then.
pub async fn run_in<F, Fut>(scope: Scope<'_>, handler: F) -> Result<(HttpResponse, Ran), ApiError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(StatusCode, serde_json::Value), ApiError>>,
{
    let Scope { pool, instance, key, key_hash, route, body, replay_header } = scope;
    let Some(key) = key else {
        let (status, value) = handler().await?;
        return Ok((HttpResponse::build(status).json(value), Ran::Handler));
    };
    let id = crate::auth::sha256_hex(&format!("{key_hash}\n{route}\n{key}"));
    let request_hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(body));
    match claim(pool, instance, &id, &request_hash).await.map_err(idempotency_unavailable)? {
        Claim::Replay { status, body } => {
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::OK);
            let replay = HttpResponse::build(status)
                .insert_header((replay_header, "true"))
                .content_type("application/json")
                .body(body);
            return Ok((replay, Ran::Replayed));
        }
        Claim::Conflict => {
            return Err(ApiError::new(
                ErrorCode::IdempotencyConflict,
                "This Idempotency-Key was used with a different request body",
            ))
        }
        Claim::InProgress => {
            return Err(ApiError::new(
                ErrorCode::RequestInProgress,
                "A request with this Idempotency-Key is still running",
            )
            .with_header(RETRY_AFTER, "1"))
        }
        Claim::Run => {}
    }
    let mut guard = ClaimGuard { pool: pool.clone(), id: Some(id.clone()) };
    let outcome = handler().await;
    guard.disarm();
    match outcome {
        Ok((status, value)) => {
            let text = value.to_string();
            if status.is_server_error() {
                let _ = release(pool, &id).await;
            } else if let Err(e) = complete(pool, &id, status.as_u16(), &text).await {
                // The work is done and durable; only the replay record is missing.
                tracing::warn!(error = %e, "could not store idempotent response");
                let _ = release(pool, &id).await;
            }
            Ok((HttpResponse::build(status).content_type("application/json").body(text), Ran::Handler))
        }
        Err(err) => {
            if err.code.status().is_server_error() {
                let _ = release(pool, &id).await;
            } else {
                let text = serde_json::json!({ "error": {
                    "code": err.code, "message": err.message, "details": err.details
                }})
                .to_string();
                let _ = complete(pool, &id, err.code.status().as_u16(), &text).await;
            }
            Err(err)
        }
    }
}

fn idempotency_unavailable(err: DbError) -> ApiError {
    tracing::error!(error = %err, "idempotency store unavailable");
    ApiError::new(ErrorCode::IdempotencyUnavailable, "Idempotency persistence is unavailable; retry later")
}

/// Whether a pending claim can no longer finish, so a retry takes it over.
async fn abandoned(pool: &Pool, claim: &IdempotencyRecord, instance: &str, now: i64) -> DbResult<bool> {
    let old = now - claim.created_at > ABANDONED_AFTER_MS;
    match claim.owner_instance.as_deref() {
        Some(owner) if owner == instance => Ok(false),
        Some(owner) => Ok(old || crate::instances::is_gone(pool, owner, now).await?),
        None => Ok(old),
    }
}

async fn claim(pool: &Pool, instance: &str, id: &str, request_hash: &str) -> DbResult<Claim> {
    let deadline = tokio::time::Instant::now() + POLL_FOR;
    loop {
        let now = time::now_ms();
        let row = IdempotencyRecord {
            id: id.to_owned(),
            request_hash: request_hash.to_owned(),
            state: "pending".to_owned(),
            response_status: None,
            response_body: None,
            created_at: now,
            expires_at: now + TTL_MS,
            owner_instance: Some(instance.to_owned()),
        };
        let inserted = with_conn!(pool, write, |conn| {
            diesel::insert_into(idempotency_keys::table)
                .values(&row)
                .on_conflict_do_nothing()
                .execute(conn)
                .await
                .map_err(DbError::from)
        })?;
        if inserted == 1 {
            return Ok(Claim::Run);
        }
        let existing: Option<IdempotencyRecord> = with_conn!(pool, read, |conn| {
            use diesel::OptionalExtension;
            idempotency_keys::table.find(id).first(conn).await.optional().map_err(DbError::from)
        })?;
        let Some(existing) = existing else { continue };
        let stale = existing.expires_at <= now
            || (existing.state == "pending" && abandoned(pool, &existing, instance, now).await?);
        if stale {
            with_conn!(pool, write, |conn| {
                diesel::delete(
                    idempotency_keys::table
                        .filter(idempotency_keys::id.eq(id))
                        .filter(idempotency_keys::created_at.eq(existing.created_at)),
                )
                .execute(conn)
                .await
                .map_err(DbError::from)
            })?;
            continue;
        }
        if existing.request_hash != request_hash {
            return Ok(Claim::Conflict);
        }
        if existing.state == "complete" {
            return Ok(Claim::Replay {
                status: existing.response_status.and_then(|s| u16::try_from(s).ok()).unwrap_or(200),
                body: existing.response_body.unwrap_or_default(),
            });
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(Claim::InProgress);
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

async fn complete(pool: &Pool, id: &str, status: u16, body: &str) -> DbResult<()> {
    with_conn!(pool, write, |conn| {
        diesel::update(idempotency_keys::table.find(id))
            .set((
                idempotency_keys::state.eq("complete"),
                idempotency_keys::response_status.eq(Some(i64::from(status))),
                idempotency_keys::response_body.eq(Some(body)),
            ))
            .execute(conn)
            .await
            .map_err(DbError::from)?;
        Ok(())
    })
}

async fn release(pool: &Pool, id: &str) -> DbResult<()> {
    with_conn!(pool, write, |conn| {
        diesel::delete(idempotency_keys::table.find(id)).execute(conn).await.map_err(DbError::from)?;
        Ok(())
    })
}

/// How often expired records are deleted.
const PURGE_EVERY: std::time::Duration = std::time::Duration::from_secs(600);

/// Deletes expired records every [`PURGE_EVERY`] on the current runtime.
pub fn start_purger(pool: Pool) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(PURGE_EVERY);
        loop {
            tick.tick().await;
            if let Err(e) = purge_expired(&pool).await {
                tracing::warn!(error = %e, "could not purge idempotency records");
            }
        }
    });
}

/// Deletes expired records.
pub async fn purge_expired(pool: &Pool) -> DbResult<usize> {
    let now = time::now_ms();
    with_conn!(pool, write, |conn| {
        diesel::delete(idempotency_keys::table.filter(idempotency_keys::expires_at.le(now)))
            .execute(conn)
            .await
            .map_err(DbError::from)
    })
}
