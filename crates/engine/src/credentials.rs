//! Provider credentials held by the gateway, on the proxy's hot path: which upstream
//! names may hold one, and an in-memory cache of each organization's decrypted
//! secrets per upstream, so a proxied call decrypts nothing and reads no table.
//!
//! A create, rotation or delete drops its entry at once on the instance that made it,
//! and on every other instance through the change feed (`crate::changes`). A call in
//! flight holds its own `Arc` of the old secret, so it finishes with it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::config::Config;
use crate::db::{self, DbError, Pool};

/// Characters of a secret kept in clear as `secretPrefix` (never more than a
/// quarter of the secret).
const PREFIX_CHARS: usize = 8;

const CACHE_CAPACITY: u64 = 10_000;
/// A safety net only: changes arrive through the feed within about a second.
const CACHE_TTL: Duration = Duration::from_secs(600);

/// Whether an organization may store a credential under `name`: a built-in upstream
/// or an operator-defined one.
pub fn is_credential_upstream(config: &Config, name: &str) -> bool {
    config.configured_upstream_names().contains(&name)
}

/// Whether `name`'s credential is a cloud's JSON shape: a cloud's name that no
/// operator-defined upstream took.
pub fn is_cloud_upstream(config: &Config, name: &str) -> bool {
    crate::cloud_credentials::is_cloud(name) && config.upstream(name).is_none()
}

/// The part of a secret shown in lists.
pub fn secret_prefix(secret: &str) -> String {
    let keep = PREFIX_CHARS.min(secret.chars().count() / 4);
    secret.chars().take(keep).collect()
}

/// Why a stored credential could not be had.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error(
        "provider credentials need the secret_key setting: set SPENDGATE_SECRET_KEY (the same value on every instance)"
    )]
    NoSecretKey,
    #[error("the stored {0} credential does not decrypt with this secret_key; store it again")]
    Undecryptable(String),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// Decrypted secrets per (organization, upstream); `None` caches "holds none".
pub struct CredentialCache {
    entries: Cache<(String, String), Option<Arc<str>>>,
    /// Bumped by every invalidation: a lookup that read the table before a change
    /// committed must not cache what it read after the change dropped the entry.
    epoch: AtomicU64,
}

impl Default for CredentialCache {
    fn default() -> Self {
        Self {
            entries: Cache::builder().max_capacity(CACHE_CAPACITY).time_to_live(CACHE_TTL).build(),
            epoch: AtomicU64::new(0),
        }
    }
}

impl CredentialCache {
    /// The organization's decrypted secret for `upstream`, if it stores one.
    pub async fn secret(
        &self,
        pool: &Pool,
        secret_key: Option<&str>,
        org_id: &str,
        upstream: &str,
    ) -> Result<Option<Arc<str>>, CredentialError> {
        let key = (org_id.to_owned(), upstream.to_owned());
        if let Some(hit) = self.entries.get(&key) {
            return Ok(hit);
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let Some(row) = db::provider_credentials::find(pool, org_id, upstream).await? else {
            self.keep(epoch, key, None);
            return Ok(None);
        };
        let secret_key = secret_key.ok_or(CredentialError::NoSecretKey)?;
        let plain = crate::crypto::decrypt(secret_key, org_id, &row.encrypted_secret)
            .map_err(|_| CredentialError::Undecryptable(upstream.to_owned()))?;
        let secret: Arc<str> = Arc::from(plain);
        self.keep(epoch, key, Some(Arc::clone(&secret)));
        Ok(Some(secret))
    }

    /// Caches what a lookup read, and drops it again when an invalidation came since
    /// the lookup started (checked after the insert: an invalidation either bumped
    /// the epoch before this check or removes the entry after the insert).
    fn keep(&self, epoch: u64, key: (String, String), value: Option<Arc<str>>) {
        self.entries.insert(key.clone(), value);
        if self.epoch.load(Ordering::Acquire) != epoch {
            self.entries.invalidate(&key);
        }
    }

    /// Drops the cached entry of `(org_id, upstream)`.
    pub fn invalidate(&self, org_id: &str, upstream: &str) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.entries.invalidate(&(org_id.to_owned(), upstream.to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_shows_at_most_a_quarter() {
        assert_eq!(secret_prefix("sk-proj-abcdefghijklmnopqrstuvwxyz"), "sk-proj-");
        assert_eq!(secret_prefix("short"), "s");
        assert_eq!(secret_prefix("abc"), "");
    }
}
