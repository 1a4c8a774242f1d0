//! Process-wide shared state handed to every handler.

use std::sync::Arc;

use crate::auth::keys::KeyValidator;
use crate::config::Config;
use crate::db::Pool;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiters;

/// Shared, cheaply cloneable application state.
#[derive(Clone)]
pub struct AppState(Arc<Inner>);

pub struct Inner {
    pub config: Config,
    pub pool: Pool,
    pub keys: KeyValidator,
    pub rate_limits: RateLimiters,
    pub metrics: Metrics,
    pub started_at_ms: i64,
}

impl AppState {
    pub fn new(config: Config, pool: Pool) -> Self {
        let metrics = Metrics::new();
        let keys = KeyValidator::new(pool.clone());
        let rate_limits =
            RateLimiters::new(config.rate_limit_ip_per_minute, config.rate_limit_key_per_minute);
        AppState(Arc::new(Inner {
            config,
            pool,
            keys,
            rate_limits,
            metrics,
            started_at_ms: crate::util::time::now_ms(),
        }))
    }
}

impl std::ops::Deref for AppState {
    type Target = Inner;

    fn deref(&self) -> &Inner {
        &self.0
    }
}
