//! The API-key validator the proxy and the control plane share.
//!
//! Validation follows the spec's order: format check (no database), SHA-256, the
//! positive cache, the negative cache, then the database. Only a definite "no such
//! key" is cached negatively; a database failure is returned to the caller (503)
//! and leaves no trace, so an outage cannot lock valid keys out after it ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moka::sync::Cache;
use moka::Expiry;
use subtle::ConstantTimeEq;

use super::identity::{is_raw_key, KeyIdentity};
use crate::db::{self, DbError, Pool};
use crate::util::time;

const POSITIVE_CAPACITY: u64 = 256;
const POSITIVE_TTL: Duration = Duration::from_secs(120);
/// Each positive entry lives `POSITIVE_TTL` ± up to this, so entries filled together
/// (after a restart) do not all expire, and hit the database, together.
const POSITIVE_JITTER_MS: i64 = 10_000;
const NEGATIVE_CAPACITY: u64 = 2_048;
const NEGATIVE_TTL: Duration = Duration::from_secs(30);
/// Keys whose `last_used_at` was written in the last minute; bounds the writes.
const TOUCHED_CAPACITY: u64 = 100_000;

/// Gives each positive cache entry its own lifetime: 120 s ± 10 s.
struct JitteredTtl;

impl Expiry<String, Arc<KeyIdentity>> for JitteredTtl {
    fn expire_after_create(&self, _: &String, _: &Arc<KeyIdentity>, _: Instant) -> Option<Duration> {
        Some(jittered(POSITIVE_TTL, rand::random_range(-POSITIVE_JITTER_MS..=POSITIVE_JITTER_MS)))
    }
}

fn jittered(base: Duration, offset_ms: i64) -> Duration {
    let magnitude = Duration::from_millis(offset_ms.unsigned_abs());
    if offset_ms < 0 {
        base.saturating_sub(magnitude)
    } else {
        base.saturating_add(magnitude)
    }
}

/// Validates raw API keys against the database behind two caches.
pub struct KeyValidator {
    pool: Pool,
    /// Key hash → identity.
    positive: Cache<String, Arc<KeyIdentity>>,
    /// Key hashes known not to name an active key.
    negative: Cache<String, ()>,
    /// Key ids whose use was recorded within the last minute.
    touched: Cache<String, ()>,
    /// Bumped by every invalidation. A lookup that started before an invalidation
    /// does not cache its (possibly stale) answer, so a revocation racing an
    /// in-flight lookup cannot be undone by it.
    generation: AtomicU64,
}

impl KeyValidator {
    pub fn new(pool: Pool) -> Self {
        Self {
            pool,
            positive: Cache::builder().max_capacity(POSITIVE_CAPACITY).expire_after(JitteredTtl).build(),
            negative: Cache::builder().max_capacity(NEGATIVE_CAPACITY).time_to_live(NEGATIVE_TTL).build(),
            touched: Cache::builder()
                .max_capacity(TOUCHED_CAPACITY)
                .time_to_live(Duration::from_millis(
                    u64::try_from(db::keys::TOUCH_INTERVAL_MS).unwrap_or(60_000),
                ))
                .build(),
            generation: AtomicU64::new(0),
        }
    }

    /// The identity of an active key, or `None` for a malformed, unknown or revoked
    /// one. A database failure is an error (the caller answers 503), never a `None`.
    pub async fn validate(&self, raw: &str) -> Result<Option<Arc<KeyIdentity>>, DbError> {
        if !is_raw_key(raw) {
            return Ok(None);
        }
        let hash = crate::auth::sha256_hex(raw);
        if let Some(identity) = self.positive.get(&hash) {
            self.record_use(&identity.key_id);
            return Ok(Some(identity));
        }
        if self.negative.contains_key(&hash) {
            return Ok(None);
        }
        let generation = self.generation.load(Ordering::Acquire);
        let found = db::keys::find_active_by_hash(&self.pool, &hash).await?;
        // The lookup is by hash already; the timing-safe comparison makes sure no
        // index or collation quirk ever lets a different hash through.
        let found = found.filter(|(row, _)| bool::from(row.key_hash.as_bytes().ct_eq(hash.as_bytes())));
        let unchanged = self.generation.load(Ordering::Acquire) == generation;
        match found {
            Some((row, plan)) => {
                let identity = Arc::new(KeyIdentity::from_row(row, &plan));
                if unchanged {
                    self.positive.insert(hash, identity.clone());
                }
                self.record_use(&identity.key_id);
                Ok(Some(identity))
            }
            None => {
                if unchanged {
                    self.negative.insert(hash, ());
                }
                Ok(None)
            }
        }
    }

    /// Forgets whatever is cached for one key hash (after an update or revocation).
    pub fn invalidate(&self, key_hash: &str) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.positive.invalidate(key_hash);
        self.negative.invalidate(key_hash);
    }

    /// Forgets everything cached (after changes that touch many keys, such as a
    /// plan change).
    pub fn invalidate_all(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.positive.invalidate_all();
        self.negative.invalidate_all();
    }

    /// Writes `last_used_at` at most once a minute per key, in the background: the
    /// request neither waits for it nor fails with it.
    fn record_use(&self, key_id: &str) {
        if self.touched.contains_key(key_id) {
            return;
        }
        let entry = self.touched.entry(key_id.to_owned()).or_insert(());
        if !entry.is_fresh() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let pool = self.pool.clone();
        let key_id = key_id.to_owned();
        runtime.spawn(async move {
            if let Err(err) = db::keys::touch_last_used(&pool, &key_id, time::now_ms()).await {
                tracing::warn!(error = %err, key_id = %key_id, "could not record API key use");
            }
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::auth::identity::tests::{identity, identity_row};
    use crate::auth::identity::{generate_raw_key, key_prefix};
    use crate::db::models::ApiKey;
    use crate::plans::Plan;

    #[test]
    fn jitter_stays_within_ten_seconds() {
        assert_eq!(jittered(POSITIVE_TTL, -10_000), Duration::from_secs(110));
        assert_eq!(jittered(POSITIVE_TTL, 10_000), Duration::from_secs(130));
        for _ in 0..100 {
            let ttl = JitteredTtl.expire_after_create(&String::new(), &Arc::new(identity()), Instant::now());
            let ttl = ttl.unwrap();
            assert!(ttl >= Duration::from_secs(110) && ttl <= Duration::from_secs(130), "{ttl:?}");
        }
    }

    async fn sqlite_pool(dir: &tempfile::TempDir) -> Pool {
        let url = format!("sqlite://{}", dir.path().join("keys.db").display());
        crate::db::migrate(&url).await.unwrap();
        Pool::connect(&url, 2).unwrap()
    }

    /// An organization with one key; returns the raw key and the key's row.
    async fn seed(pool: &Pool) -> (String, ApiKey) {
        let now = time::now_ms();
        let user_id = crate::util::ids::new_id();
        let user = crate::db::models::User {
            email: format!("{user_id}@example.com"),
            id: user_id,
            name: None,
            password_hash: "x".into(),
            created_at: now,
        };
        let org = crate::db::orgs::new_org(crate::util::ids::new_id(), "o".into(), "pro", now);
        crate::db::orgs::create_user_with_org(pool, user.clone(), org.clone(), false).await.unwrap();
        let raw = generate_raw_key();
        let row = ApiKey {
            id: crate::util::ids::new_id(),
            org_id: org.id,
            user_id: user.id,
            key_prefix: key_prefix(&raw),
            key_hash: crate::auth::sha256_hex(&raw),
            created_at: now,
            ..identity_row()
        };
        db::keys::insert(pool, row.clone(), None).await.unwrap();
        (raw, row)
    }

    // Multi-threaded: SQLite queries of diesel-async may not be dropped mid-flight
    // on a current-thread runtime, and background touches may still be running.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn caches_answer_until_invalidated() {
        let dir = tempfile::tempdir().unwrap();
        let pool = sqlite_pool(&dir).await;
        let validator = KeyValidator::new(pool.clone());
        let (raw, row) = seed(&pool).await;

        let identity = validator.validate(&raw).await.unwrap().unwrap();
        assert_eq!(identity.key_id, row.id);
        assert_eq!(identity.plan, Plan::Pro);
        // Revoked behind the validator's back: the cached identity still answers.
        db::keys::revoke(&pool, &row.org_id, &row.id, time::now_ms()).await.unwrap().unwrap();
        assert!(validator.validate(&raw).await.unwrap().is_some());
        validator.invalidate(&row.key_hash);
        assert!(validator.validate(&raw).await.unwrap().is_none());

        // An unknown key is remembered as unknown, even once it exists.
        let (raw2, row2) = seed(&pool).await;
        let unknown = generate_raw_key();
        assert!(validator.validate(&unknown).await.unwrap().is_none());
        assert!(validator.negative.contains_key(&crate::auth::sha256_hex(&unknown)));
        assert!(validator.validate(&raw2).await.unwrap().is_some());
        validator.invalidate_all();
        assert!(validator.positive.get(&row2.key_hash).is_none());
    }

    // Multi-threaded: SQLite queries of diesel-async may not be dropped mid-flight
    // on a current-thread runtime, and background touches may still be running.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn use_is_recorded_in_the_background() {
        let dir = tempfile::tempdir().unwrap();
        let pool = sqlite_pool(&dir).await;
        let validator = KeyValidator::new(pool.clone());
        let (raw, row) = seed(&pool).await;
        assert!(validator.validate(&raw).await.unwrap().is_some());
        let mut last_used = None;
        for _ in 0..50 {
            last_used =
                db::keys::find_active(&pool, &row.org_id, &row.id).await.unwrap().unwrap().last_used_at;
            if last_used.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(last_used.is_some());
    }

    #[tokio::test]
    async fn database_errors_are_returned_and_not_cached() {
        // Nothing listens on port 1: every connection attempt fails at once.
        let pool = Pool::connect("postgres://nobody@127.0.0.1:1/none", 1).unwrap();
        let validator = KeyValidator::new(pool);
        let raw = generate_raw_key();
        assert!(matches!(validator.validate(&raw).await, Err(DbError::Unavailable(_))));
        assert!(!validator.negative.contains_key(&crate::auth::sha256_hex(&raw)));
        // Malformed keys never reach the database.
        assert!(validator.validate("svc_live_sk_nope").await.unwrap().is_none());
    }
}
