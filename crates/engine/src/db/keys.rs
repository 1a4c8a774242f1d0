//! API keys: creation under the tier's key limit, the organization's list, updates,
//! revocation, and the lookup behind key authentication.
//!
//! List-valued settings are stored as JSON text: `default_tags` as an object,
//! `allowed_*` as an array or NULL (NULL = unrestricted).

use diesel::prelude::*;
use diesel_async::RunQueryDsl;

use crate::db::change_feed::change_feed;
use crate::db::models::ApiKey;
use crate::db::schema::{api_keys, key_changes, organizations};
use crate::db::{DbResult, Pool};
use crate::util::pagination::After;
use crate::{with_conn, with_tx};

/// Records in `key_changes`, inside the caller's transaction, that a key (`Some`
/// hash) or every key of an organization (`None`) changed: every instance's change
/// watcher flushes it from its key cache.
macro_rules! note_key_change {
    ($conn:ident, $org_id:expr, $key_hash:expr) => {{
        let key_hash: Option<&str> = $key_hash;
        diesel::insert_into(key_changes::table)
            .values((
                key_changes::id.eq(crate::util::ids::new_id()),
                key_changes::org_id.eq($org_id),
                key_changes::key_hash.eq(key_hash),
                key_changes::changed_at.eq(crate::util::time::now_ms()),
            ))
            .execute($conn)
            .await?;
    }};
}
pub(crate) use note_key_change;

/// Records that every key of `org_id` changed (revoked with a membership or the
/// organization): each instance flushes its key cache.
pub async fn note_org_keys_changed(pool: &Pool, org_id: &str) -> DbResult<()> {
    with_conn!(pool, write, |conn| {
        note_key_change!(conn, org_id, None);
        Ok(())
    })
}

/// A key change: (change id, key hash or `None` for every key, when).
pub type KeyChange = (String, Option<String>, i64);

change_feed!(key_changes, KeyChange, (id, key_hash, changed_at));

/// `last_used_at` is written at most this often per key.
pub const TOUCH_INTERVAL_MS: i64 = 60_000;

/// The outcome of [`insert`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    Created,
    /// The organization already holds `max_active` non-revoked keys.
    LimitReached,
}

/// The columns a PATCH may change. `None` leaves a column alone; for the nullable
/// allow-lists and version, `Some(None)` writes NULL.
#[derive(Debug, Default, Clone, AsChangeset)]
#[diesel(table_name = api_keys)]
pub struct KeyChanges {
    pub name: Option<String>,
    pub default_tags: Option<String>,
    pub allowed_models: Option<Option<String>>,
    pub allowed_providers: Option<Option<String>>,
    pub allowed_customers: Option<Option<String>>,
    pub allowed_tools: Option<Option<String>>,
    pub require_customer_id: Option<bool>,
    pub require_stored_credentials: Option<bool>,
    pub api_version: Option<Option<String>>,
}

impl KeyChanges {
    pub fn is_empty(&self) -> bool {
        self.name.is_none()
            && self.default_tags.is_none()
            && self.allowed_models.is_none()
            && self.allowed_providers.is_none()
            && self.allowed_customers.is_none()
            && self.allowed_tools.is_none()
            && self.require_customer_id.is_none()
            && self.require_stored_credentials.is_none()
            && self.api_version.is_none()
    }
}

/// Inserts `key` unless its organization already has `max_active` non-revoked keys
/// (`None` = unlimited).
///
/// The count and the insert share one transaction that first takes a write lock on
/// the organization row (a no-op UPDATE), so concurrent creates for one
/// organization run one after the other and cannot overshoot the limit. On SQLite
/// the single writer connection serializes them anyway.
pub async fn insert(pool: &Pool, key: ApiKey, max_active: Option<i64>) -> DbResult<Inserted> {
    with_tx!(pool, |conn| {
        diesel::update(organizations::table.find(&key.org_id))
            .set(organizations::updated_at.eq(organizations::updated_at))
            .execute(conn)
            .await?;
        if let Some(max) = max_active {
            let active: i64 = api_keys::table
                .filter(api_keys::org_id.eq(&key.org_id))
                .filter(api_keys::revoked_at.is_null())
                .count()
                .get_result(conn)
                .await?;
            if active >= max {
                return Ok(Inserted::LimitReached);
            }
        }
        diesel::insert_into(api_keys::table).values(&key).execute(conn).await?;
        Ok(Inserted::Created)
    })
}

/// The number of non-revoked keys of an organization.
pub async fn count_active(pool: &Pool, org_id: &str) -> DbResult<i64> {
    with_conn!(pool, read, |conn| {
        Ok(api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::revoked_at.is_null())
            .count()
            .get_result(conn)
            .await?)
    })
}

/// Up to `limit` non-revoked keys of an organization, newest first, strictly after
/// `after` in that order. Callers pass `limit + 1` to learn whether a next page
/// exists.
pub async fn list_page(
    pool: &Pool,
    org_id: &str,
    after: Option<&After>,
    limit: i64,
) -> DbResult<Vec<ApiKey>> {
    with_conn!(pool, read, |conn| {
        let mut query = api_keys::table
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::revoked_at.is_null())
            .order((api_keys::created_at.desc(), api_keys::id.desc()))
            .limit(limit)
            .select(ApiKey::as_select())
            .into_boxed();
        if let Some(a) = after {
            query = query.filter(
                api_keys::created_at
                    .lt(a.created_at)
                    .or(api_keys::created_at.eq(a.created_at).and(api_keys::id.lt(a.id.clone()))),
            );
        }
        Ok(query.load(conn).await?)
    })
}

/// A non-revoked key of an organization.
pub async fn find_active(pool: &Pool, org_id: &str, id: &str) -> DbResult<Option<ApiKey>> {
    with_conn!(pool, read, |conn| {
        Ok(api_keys::table
            .filter(api_keys::id.eq(id))
            .filter(api_keys::org_id.eq(org_id))
            .filter(api_keys::revoked_at.is_null())
            .select(ApiKey::as_select())
            .first(conn)
            .await
            .optional()?)
    })
}

/// Applies `changes` to a non-revoked key of an organization; `None` when there is
/// no such key. `changes` must not be empty.
pub async fn update(pool: &Pool, org_id: &str, id: &str, changes: KeyChanges) -> DbResult<Option<ApiKey>> {
    with_tx!(pool, |conn| {
        let row: Option<ApiKey> = diesel::update(
            api_keys::table
                .filter(api_keys::id.eq(id))
                .filter(api_keys::org_id.eq(org_id))
                .filter(api_keys::revoked_at.is_null()),
        )
        .set(&changes)
        .returning(ApiKey::as_returning())
        .get_result(conn)
        .await
        .optional()?;
        if let Some(k) = &row {
            note_key_change!(conn, &k.org_id, Some(k.key_hash.as_str()));
        }
        Ok(row)
    })
}

/// Revokes a non-revoked key of an organization at `now`; returns the revoked row
/// (its hash is needed to flush caches), or `None` when there is no such key.
pub async fn revoke(pool: &Pool, org_id: &str, id: &str, now: i64) -> DbResult<Option<ApiKey>> {
    with_tx!(pool, |conn| {
        let row: Option<ApiKey> = diesel::update(
            api_keys::table
                .filter(api_keys::id.eq(id))
                .filter(api_keys::org_id.eq(org_id))
                .filter(api_keys::revoked_at.is_null()),
        )
        .set(api_keys::revoked_at.eq(Some(now)))
        .returning(ApiKey::as_returning())
        .get_result(conn)
        .await
        .optional()?;
        if let Some(k) = &row {
            note_key_change!(conn, &k.org_id, Some(k.key_hash.as_str()));
        }
        Ok(row)
    })
}

/// The non-revoked key with this SHA-256 hash, with its organization's plan.
pub async fn find_active_by_hash(pool: &Pool, key_hash: &str) -> DbResult<Option<(ApiKey, String)>> {
    with_conn!(pool, read, |conn| {
        Ok(api_keys::table
            .inner_join(organizations::table.on(organizations::id.eq(api_keys::org_id)))
            .filter(api_keys::key_hash.eq(key_hash))
            .filter(api_keys::revoked_at.is_null())
            .select((ApiKey::as_select(), organizations::plan))
            .first::<(ApiKey, String)>(conn)
            .await
            .optional()?)
    })
}

/// Records a use of the key at `now`, unless one was recorded within the last
/// [`TOUCH_INTERVAL_MS`] (several processes may share the database, so the guard
/// lives in the statement).
pub async fn touch_last_used(pool: &Pool, id: &str, now: i64) -> DbResult<()> {
    let cutoff = now.saturating_sub(TOUCH_INTERVAL_MS);
    with_tx!(pool, |conn| {
        diesel::update(
            api_keys::table
                .filter(api_keys::id.eq(id))
                .filter(api_keys::last_used_at.is_null().or(api_keys::last_used_at.le(cutoff))),
        )
        .set(api_keys::last_used_at.eq(Some(now)))
        .execute(conn)
        .await?;
        Ok(())
    })
}
