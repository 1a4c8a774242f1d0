//! Whether a customer's binding is active, as `POST /v1/gate` asks on every call.
//!
//! A binding, once it exists, changes only by a status transition (suspend, archive,
//! reactivate) or with its organization's deletion, so the gate reads it from a small
//! cache instead of the database. This process's own writes (bind, status changes)
//! invalidate their entry at once; another instance's take effect within
//! [`CACHE_TTL`]. "No binding" is never cached: a customer bound on any instance is
//! gated on every instance as soon as bind returns.

use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::db::{bindings, DbResult, Pool};

pub const CACHE_TTL: Duration = Duration::from_secs(1);
const CACHE_ENTRIES: u64 = 100_000;

/// `(organization, customer)`.
type BindingKey = (Arc<str>, Arc<str>);

/// Bindings' status by customer: `true` when active.
#[derive(Clone)]
pub struct BindingCache(Cache<BindingKey, bool>);

impl Default for BindingCache {
    fn default() -> Self {
        Self(Cache::builder().max_capacity(CACHE_ENTRIES).time_to_live(CACHE_TTL).build())
    }
}

impl BindingCache {
    /// Whether the customer has a binding and it is active.
    pub async fn is_active(&self, pool: &Pool, org_id: &str, customer_id: &str) -> DbResult<bool> {
        let key: BindingKey = (org_id.into(), customer_id.into());
        if let Some(active) = self.0.get(&key) {
            return Ok(active);
        }
        let Some(binding) = bindings::find(pool, org_id, customer_id).await? else {
            return Ok(false);
        };
        let active = binding.status == bindings::ACTIVE;
        self.0.insert(key, active);
        Ok(active)
    }

    /// This process changed the binding: the next gate reads it again.
    pub fn invalidate(&self, org_id: &str, customer_id: &str) {
        self.0.invalidate(&(org_id.into(), customer_id.into()));
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_per_organization_and_customer() {
        let cache = BindingCache::default();
        cache.0.insert(("org".into(), "acme".into()), true);
        assert_eq!(cache.0.get(&("org".into(), "acme".into())), Some(true));
        assert_eq!(cache.0.get(&("other".into(), "acme".into())), None);
        cache.invalidate("org", "acme");
        assert_eq!(cache.0.get(&("org".into(), "acme".into())), None);
    }
}
