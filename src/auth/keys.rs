//! API-key authentication: the raw key format, the cached validator the proxy and
//! the control plane share, and the `KeyAuth` extractor of key-authenticated
//! control-plane endpoints.
//!
//! Validation follows the spec's order: format check (no database), SHA-256, the
//! positive cache, the negative cache, then the database. Only a definite "no such
//! key" is cached negatively; a database failure is returned to the caller (503)
//! and leaves no trace, so an outage cannot lock valid keys out after it ends.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix_web::dev::Payload;
use actix_web::http::header;
use actix_web::{web, FromRequest, HttpMessage, HttpRequest};
use moka::sync::Cache;
use moka::Expiry;
use subtle::ConstantTimeEq;

use crate::api::KeyApiVersion;
use crate::db::models::ApiKey;
use crate::db::{self, DbError, Pool};
use crate::error::{ApiError, ErrorCode};
use crate::plans::Plan;
use crate::ratelimit::RETRY_AFTER_SECS;
use crate::state::AppState;
use crate::util::time;

/// Every raw key starts with this.
pub const RAW_KEY_PREFIX: &str = "svc_live_sk_";
/// Hex characters after the prefix (16 random bytes).
const RAW_KEY_HEX_LEN: usize = 32;
/// `svc_live_sk_` + 32 hex = 44 characters. (The spec says 43: its total was
/// counted for the original product's shorter prefix; the prefix and the 32 hex
/// characters are what it specifies, so they win.)
pub const RAW_KEY_LEN: usize = RAW_KEY_PREFIX.len() + RAW_KEY_HEX_LEN;
/// How many leading characters of the raw key are kept, in clear, as `keyPrefix`.
pub const KEY_PREFIX_LEN: usize = 16;
/// The request header carrying the raw key.
pub const KEY_HEADER: &str = "x-service-key";

const POSITIVE_CAPACITY: u64 = 256;
const POSITIVE_TTL: Duration = Duration::from_secs(120);
/// Each positive entry lives `POSITIVE_TTL` ± up to this, so entries filled together
/// (after a restart) do not all expire, and hit the database, together.
const POSITIVE_JITTER_MS: i64 = 10_000;
const NEGATIVE_CAPACITY: u64 = 2_048;
const NEGATIVE_TTL: Duration = Duration::from_secs(30);
/// Keys whose `last_used_at` was written in the last minute; bounds the writes.
const TOUCHED_CAPACITY: u64 = 100_000;

/// A fresh raw key from the operating system's CSPRNG.
pub fn generate_raw_key() -> String {
    format!("{RAW_KEY_PREFIX}{}", crate::auth::random_hex(RAW_KEY_HEX_LEN / 2))
}

/// Whether `raw` has the raw key shape: the prefix and 32 lowercase hex characters.
pub fn is_raw_key(raw: &str) -> bool {
    raw.len() == RAW_KEY_LEN
        && raw
            .strip_prefix(RAW_KEY_PREFIX)
            .is_some_and(|hex| hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')))
}

/// The part of a raw key shown in lists (`keyPrefix`).
pub fn key_prefix(raw: &str) -> String {
    raw.chars().take(KEY_PREFIX_LEN).collect()
}

/// Who a valid key speaks for, with the settings enforcement needs. IDs are the bare
/// UUIDs the database stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyIdentity {
    pub key_id: String,
    pub org_id: String,
    pub user_id: String,
    pub name: String,
    pub key_hash: String,
    pub plan: Plan,
    pub default_tags: BTreeMap<String, String>,
    /// `None` = unrestricted; an empty list allows nothing.
    pub allowed_models: Option<Vec<String>>,
    pub allowed_providers: Option<Vec<String>>,
    pub allowed_customers: Option<Vec<String>>,
    pub require_customer_id: bool,
    /// A call must not bring its own provider credential.
    pub require_stored_credentials: bool,
    /// The key-level API version setting, if any.
    pub api_version: Option<String>,
}

impl KeyIdentity {
    /// Builds the identity from a key row and its organization's plan. Stored JSON
    /// that does not parse is treated as empty (tags) or as "allow nothing" (lists):
    /// a corrupt restriction must never widen into no restriction.
    pub fn from_row(row: ApiKey, plan: &str) -> Self {
        KeyIdentity {
            plan: plan.parse().unwrap_or(Plan::Free),
            default_tags: stored_tags(&row.default_tags),
            allowed_models: stored_list(row.allowed_models.as_deref()),
            allowed_providers: stored_list(row.allowed_providers.as_deref()),
            allowed_customers: stored_list(row.allowed_customers.as_deref()),
            require_customer_id: row.require_customer_id,
            require_stored_credentials: row.require_stored_credentials,
            api_version: row.api_version,
            key_id: row.id,
            org_id: row.org_id,
            user_id: row.user_id,
            name: row.name,
            key_hash: row.key_hash,
        }
    }
}

/// Decodes the stored `default_tags` JSON object; unreadable text reads as no tags.
pub fn stored_tags(json: &str) -> BTreeMap<String, String> {
    serde_json::from_str(json).unwrap_or_default()
}

/// Decodes a stored allow-list: NULL is "unrestricted", unreadable text is "allow
/// nothing".
pub fn stored_list(json: Option<&str>) -> Option<Vec<String>> {
    json.map(|s| serde_json::from_str(s).unwrap_or_default())
}

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

/// A request authenticated by `X-Service-Key` on the control plane. The extractor
/// also applies the per-key rate limit and records what the response middleware
/// reports (`X-RateLimit-*`, the key's API version).
#[derive(Debug, Clone)]
pub struct KeyAuth(pub Arc<KeyIdentity>);

impl std::ops::Deref for KeyAuth {
    type Target = KeyIdentity;

    fn deref(&self) -> &KeyIdentity {
        &self.0
    }
}

async fn authenticate(req: HttpRequest, state: AppState, raw: Option<String>) -> Result<KeyAuth, ApiError> {
    let raw = raw.ok_or_else(ApiError::authentication_required)?;
    let identity = state.keys.validate(&raw).await?.ok_or_else(ApiError::authentication_required)?;
    let decision = state.rate_limits.check_key(&identity.key_id);
    let snapshot = decision.snapshot();
    if let Some(s) = snapshot {
        req.extensions_mut().insert(s);
    }
    if let Some(v) = &identity.api_version {
        req.extensions_mut().insert(KeyApiVersion(v.clone()));
    }
    if !decision.allowed {
        let mut err = ApiError::new(ErrorCode::RateLimitExceeded, "Rate limit exceeded for this API key")
            .with_header(header::RETRY_AFTER, RETRY_AFTER_SECS.to_string());
        for (name, value) in snapshot.iter().flat_map(|s| s.headers()) {
            err = err.with_header(name, value.to_str().unwrap_or_default());
        }
        return Err(err);
    }
    Ok(KeyAuth(identity))
}

impl FromRequest for KeyAuth {
    type Error = ApiError;
    type Future = Pin<Box<dyn Future<Output = Result<Self, ApiError>>>>;

    fn from_request(req: &HttpRequest, _: &mut Payload) -> Self::Future {
        let raw = req.headers().get(KEY_HEADER).and_then(|v| v.to_str().ok()).map(|v| v.trim().to_owned());
        let state = req
            .app_data::<web::Data<AppState>>()
            .map(|d| d.get_ref().clone())
            .ok_or_else(|| ApiError::internal("application state missing"));
        let req = req.clone();
        Box::pin(async move { authenticate(req, state?, raw).await })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_have_the_spec_format() {
        let a = generate_raw_key();
        let b = generate_raw_key();
        assert_eq!(a.len(), 44);
        assert!(a.starts_with("svc_live_sk_"));
        assert!(is_raw_key(&a), "{a}");
        assert_ne!(a, b);
        assert_eq!(key_prefix(&a).len(), 16);
        assert!(a.starts_with(&key_prefix(&a)));
    }

    #[test]
    fn malformed_keys_are_refused() {
        let good = format!("svc_live_sk_{}", "0123456789abcdef".repeat(2));
        assert!(is_raw_key(&good));
        assert!(!is_raw_key(""));
        assert!(!is_raw_key(&good.to_uppercase()));
        assert!(!is_raw_key(&good.replace("svc_live_sk_", "svc_test_sk_")));
        assert!(!is_raw_key(&format!("{good}0")));
        assert!(!is_raw_key(&good[..43]));
        assert!(!is_raw_key(&good.replace('a', "A")));
        assert!(!is_raw_key(&good.replace('f', "g")));
        // Multi-byte characters of the right byte length do not slip through.
        assert!(!is_raw_key(&format!("svc_live_sk_{}é", "a".repeat(30))));
    }

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

    fn identity_row() -> ApiKey {
        ApiKey {
            id: "k".into(),
            org_id: "o".into(),
            user_id: "u".into(),
            name: "n".into(),
            key_prefix: "svc_live_sk_abcd".into(),
            key_hash: "h".into(),
            default_tags: r#"{"team":"core"}"#.into(),
            allowed_models: Some(r#"["gpt-4o"]"#.into()),
            allowed_providers: None,
            allowed_customers: Some("not json".into()),
            require_customer_id: true,
            api_version: None,
            last_used_at: None,
            created_at: 0,
            revoked_at: None,
            require_stored_credentials: false,
        }
    }

    fn identity() -> KeyIdentity {
        KeyIdentity::from_row(identity_row(), "pro")
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

    #[test]
    fn identity_decodes_stored_settings() {
        let id = identity();
        assert_eq!(id.plan, Plan::Pro);
        assert_eq!(id.default_tags.get("team").map(String::as_str), Some("core"));
        assert_eq!(id.allowed_models, Some(vec!["gpt-4o".to_owned()]));
        assert_eq!(id.allowed_providers, None);
        // Corrupt restrictions fail closed.
        assert_eq!(id.allowed_customers, Some(vec![]));
    }
}
