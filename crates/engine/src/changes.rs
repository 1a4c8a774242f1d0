//! The change feeds: budget, API key and provider credential changes made through any
//! process reach every process sharing the database.
//!
//! A budget upsert, reset or delete writes a `budget_changes` row, and a key update or
//! revocation (or a membership or organization going, for all of its keys) a
//! `key_changes` row, and a provider credential's create, rotation or delete a
//! `provider_credential_changes` row, and a runtime model price's change or an
//! organization's `unpricedModels` change a `model_price_changes` row, and an MCP
//! server's create or delete a `mcp_server_changes` row, in the
//! transaction of the change. Each process
//! polls the feeds every [`POLL_EVERY`]: it refreshes its live budget actor of each
//! changed budget, drops each changed key from its key cache and each changed
//! credential from its credential cache, each changed MCP server from its server
//! cache and each changed organization from its price cache. The process that made a change applies it to
//! itself at once (and its watcher skips that budget change, see
//! `db::budgets::take_own_change`); the others within about a second. Polls read [`OVERLAP_MS`] back (a
//! transaction that took its timestamp earlier may commit after a later one, and
//! instance clocks may differ by up to that much); each change is applied once. Rows
//! older than [`KEPT_MS`] are pruned.

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use actors::budget::EntityType;
use actors::store::EntityKey;

use crate::db::{self, DbResult};
use crate::state::AppState;
use crate::util::time;

/// How often each process reads the feeds.
pub const POLL_EVERY: Duration = Duration::from_millis(500);
/// How far back each poll reads again.
pub const OVERLAP_MS: i64 = 5_000;
/// Change rows are kept this long.
pub const KEPT_MS: i64 = 3_600_000;
const PRUNE_EVERY_MS: i64 = 60_000;
/// Changes read per query; a poll reads page after page (keyset on `(changed_at, id)`)
/// until a page is short, so a burst of changes inside the overlap is never re-read
/// in a loop.
const PAGE: usize = 1_000;

/// Starts the watcher on the current runtime.
pub fn start(state: AppState) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(POLL_EVERY);
        let mut feeds = Feeds {
            budgets: Cursor::new(),
            keys: Cursor::new(),
            credentials: Cursor::new(),
            mcp_servers: Cursor::new(),
            prices: Cursor::new(),
        };
        let mut last_prune = 0i64;
        loop {
            tick.tick().await;
            feeds.poll(&state).await;
            let now = time::now_ms();
            if now - last_prune >= PRUNE_EVERY_MS {
                last_prune = now;
                prune(&state, now - KEPT_MS).await;
            }
        }
    });
}

/// Drops every feed's change rows older than `before`.
async fn prune(state: &AppState, before: i64) {
    let pool = &state.pool;
    let pruned = [
        ("budget_changes", db::budgets::prune_changes(pool, before).await),
        ("key_changes", db::keys::prune_changes(pool, before).await),
        ("provider_credential_changes", db::provider_credentials::prune_changes(pool, before).await),
        ("model_price_changes", db::model_prices::prune_changes(pool, before).await),
        ("mcp_server_changes", db::mcp_servers::prune_changes(pool, before).await),
    ];
    for (feed, result) in pruned {
        if let Err(e) = result {
            tracing::warn!(error = %e, feed, "could not prune changes");
        }
    }
}

/// Where one feed was read up to, and the changes already applied in the overlap.
struct Cursor {
    at: i64,
    applied: HashMap<String, i64>,
}

impl Cursor {
    fn new() -> Self {
        Self { at: time::now_ms(), applied: HashMap::new() }
    }

    /// Reads the feed from [`OVERLAP_MS`] before the cursor, page after page, and
    /// returns the changes not applied yet (noting them as applied). `fetch(since,
    /// after)` reads one page; `id_at` gives a row's change id and time.
    async fn fresh<T, F, Fut>(&mut self, feed: &str, fetch: F, id_at: fn(&T) -> (&str, i64)) -> Vec<T>
    where
        F: Fn(i64, Option<(i64, String)>) -> Fut,
        Fut: Future<Output = DbResult<Vec<T>>>,
    {
        let since = self.at - OVERLAP_MS;
        let mut after = None;
        let mut fresh = Vec::new();
        loop {
            let page = match fetch(since, after.take()).await {
                Ok(page) => page,
                Err(e) => {
                    tracing::warn!(error = %e, feed, "could not read changes; retrying");
                    break;
                }
            };
            let full = page.len() == PAGE;
            for row in page {
                let (id, at) = id_at(&row);
                after = Some((at, id.to_owned()));
                self.at = self.at.max(at);
                if self.applied.insert(id.to_owned(), at).is_none() {
                    fresh.push(row);
                }
            }
            if !full {
                break;
            }
        }
        let keep_from = self.at - OVERLAP_MS;
        self.applied.retain(|_, at| *at >= keep_from);
        fresh
    }
}

struct Feeds {
    budgets: Cursor,
    keys: Cursor,
    credentials: Cursor,
    mcp_servers: Cursor,
    prices: Cursor,
}

impl Feeds {
    async fn poll(&mut self, state: &AppState) {
        let pool = &state.pool;
        let budgets = self
            .budgets
            .fresh(
                "budget_changes",
                |since, after| db::budgets::changes_since(pool, since, after, PAGE),
                |c| (c.0.as_str(), c.4),
            )
            .await;
        let prune_before = time::now_ms() - KEPT_MS;
        for (id, org_id, entity_type, entity_id, _) in budgets {
            if db::budgets::take_own_change(&id, prune_before) {
                // Applied in place by the request that made it.
                continue;
            }
            let Ok(entity_type) = entity_type.parse::<EntityType>() else { continue };
            let key = EntityKey::new(org_id, entity_type, entity_id);
            state.budgets.changed(&key).await;
        }
        let keys = self
            .keys
            .fresh(
                "key_changes",
                |since, after| db::keys::changes_since(pool, since, after, PAGE),
                |c| (c.0.as_str(), c.2),
            )
            .await;
        for (_, key_hash, _) in keys {
            match key_hash {
                Some(hash) => state.keys.invalidate(&hash),
                None => state.keys.invalidate_all(),
            }
        }
        let credentials = self
            .credentials
            .fresh(
                "provider_credential_changes",
                |since, after| db::provider_credentials::changes_since(pool, since, after, PAGE),
                |c| (c.0.as_str(), c.3),
            )
            .await;
        for (_, org_id, upstream, _) in credentials {
            state.credentials.invalidate(&org_id, &upstream);
        }
        let servers = self
            .mcp_servers
            .fresh(
                "mcp_server_changes",
                |since, after| db::mcp_servers::changes_since(pool, since, after, PAGE),
                |c| (c.0.as_str(), c.3),
            )
            .await;
        for (_, org_id, name, _) in servers {
            state.mcp_servers.invalidate(&org_id, &name);
        }
        let prices = self
            .prices
            .fresh(
                "model_price_changes",
                |since, after| db::model_prices::changes_since(pool, since, after, PAGE),
                |c| (c.0.as_str(), c.2),
            )
            .await;
        for (_, org_id, _) in prices {
            state.model_prices.invalidate(&org_id);
        }
    }
}
