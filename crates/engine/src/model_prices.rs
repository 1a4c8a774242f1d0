//! Prices set at run time, on the proxy's hot path: each organization's own prices
//! over the built-in table and the operator's pricing file, and its `unpricedModels`
//! setting (`estimate` or `block`), cached per organization so that a proxied call
//! reads no table.
//!
//! A runtime price is keyed by the cost event's provider (`openai`, `anthropic`,
//! `google`, or an operator-defined upstream's name) and the model name exactly as a
//! call sends it (no alias resolution: the name listed as unpriced is the name to
//! price). It replaces the table's whole entry for that name.
//!
//! A price change or a change of the setting drops the organization's entry at once
//! on the instance that made it, and on every other instance through the change feed
//! (`crate::changes`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moka::sync::Cache;

use crate::config::Config;
use crate::db::models::RuntimePrice;
use crate::db::{self, DbError, Pool};
use spendgate_llm::pricing::{ModelPrice, PricingTable, Provider};

const CACHE_CAPACITY: u64 = 10_000;
/// A safety net only: changes arrive through the feed within about a second.
const CACHE_TTL: Duration = Duration::from_secs(600);

/// What a proxied call to a model without a price does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UnpricedPolicy {
    /// Charged at the provider's conservative fallback price and tagged (the default).
    #[default]
    Estimate,
    /// Refused before anything is forwarded.
    Block,
}

impl UnpricedPolicy {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            db::model_prices::ESTIMATE => Some(Self::Estimate),
            db::model_prices::BLOCK => Some(Self::Block),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Estimate => db::model_prices::ESTIMATE,
            Self::Block => db::model_prices::BLOCK,
        }
    }
}

/// The canonical provider name a runtime price is stored under: `openai`,
/// `anthropic`, `google` (`gemini` is its alias) or an operator-defined upstream's
/// name; `None` for anything else.
pub fn canonical_provider(config: &Config, name: &str) -> Option<String> {
    if let Some(builtin) = Provider::from_name(name).filter(|_| name == name.to_ascii_lowercase()) {
        return Some(builtin.as_str().to_owned());
    }
    config.upstream(name).map(|u| u.name.clone())
}

/// The price a runtime row stands for, with the provider's defaults filled in (an
/// Anthropic-format model's cache writes at × 1.25 / × 2 of its input).
pub fn price_of(row: &RuntimePrice, format: Provider) -> ModelPrice {
    let mut price = ModelPrice::new(row.input, row.output);
    price.cached_input = row.cached_input;
    price.cache_write_5m = row.cache_write_5m;
    price.cache_write_1h = row.cache_write_1h;
    price.reasoning_output = row.reasoning_output;
    price.with_provider_defaults(format)
}

/// The wire format whose price defaults apply to a runtime price of `provider`.
pub fn format_of(config: &Config, provider: &str) -> Provider {
    Provider::from_name(provider)
        .or_else(|| config.upstream(provider).map(|u| u.format))
        .unwrap_or(Provider::OpenAi)
}

/// One organization's setting and runtime prices, by provider then model.
#[derive(Debug, Default)]
pub struct OrgPrices {
    pub policy: UnpricedPolicy,
    /// `unpricedTools` is `block`: a gateway call of a tool without a cost is refused.
    pub block_unpriced_tools: bool,
    prices: HashMap<String, HashMap<String, ModelPrice>>,
}

impl OrgPrices {
    fn from_rows(config: &Config, policy: &str, rows: &[RuntimePrice]) -> Self {
        let mut prices: HashMap<String, HashMap<String, ModelPrice>> = HashMap::new();
        for row in rows {
            let price = price_of(row, format_of(config, &row.provider));
            prices.entry(row.provider.clone()).or_default().insert(row.model.clone(), price);
        }
        // A stored value other than the two is read as the default.
        OrgPrices {
            policy: UnpricedPolicy::parse(policy).unwrap_or_default(),
            block_unpriced_tools: false,
            prices,
        }
    }

    /// The organization's runtime price of exactly `model` at `provider`.
    pub fn get(&self, provider: &str, model: &str) -> Option<&ModelPrice> {
        self.prices.get(provider)?.get(model)
    }

    /// The price a call is charged at, with the name the table knows the model by:
    /// the runtime price first, then the table (`named` for an operator-defined
    /// upstream, priced under its name).
    pub fn resolve(
        &self,
        table: &PricingTable,
        provider: &str,
        format: Provider,
        named: bool,
        model: &str,
    ) -> Option<(String, ModelPrice)> {
        if let Some(price) = self.get(provider, model) {
            return Some((model.to_owned(), *price));
        }
        let found = if named { table.lookup_named(provider, model) } else { table.lookup_in(format, model) };
        found.map(|(name, price)| (name.to_owned(), *price))
    }
}

/// Each organization's [`OrgPrices`], loaded on first use.
pub struct PriceCache {
    entries: Cache<String, Arc<OrgPrices>>,
    /// Bumped by every invalidation: a load that read the tables before a change
    /// committed must not cache what it read after the change dropped the entry.
    epoch: AtomicU64,
}

impl Default for PriceCache {
    fn default() -> Self {
        Self {
            entries: Cache::builder().max_capacity(CACHE_CAPACITY).time_to_live(CACHE_TTL).build(),
            epoch: AtomicU64::new(0),
        }
    }
}

impl PriceCache {
    /// The organization's setting and runtime prices (defaults for an organization
    /// that does not exist).
    pub async fn of(&self, pool: &Pool, config: &Config, org_id: &str) -> Result<Arc<OrgPrices>, DbError> {
        if let Some(hit) = self.entries.get(org_id) {
            return Ok(hit);
        }
        let epoch = self.epoch.load(Ordering::Acquire);
        let loaded = match db::model_prices::org_prices(pool, org_id).await? {
            Some(((policy, tools), rows)) => OrgPrices {
                block_unpriced_tools: tools == crate::db::orgs::UNPRICED_TOOLS_BLOCK,
                ..OrgPrices::from_rows(config, &policy, &rows)
            },
            None => OrgPrices::default(),
        };
        let loaded = Arc::new(loaded);
        self.entries.insert(org_id.to_owned(), Arc::clone(&loaded));
        if self.epoch.load(Ordering::Acquire) != epoch {
            self.entries.invalidate(org_id);
        }
        Ok(loaded)
    }

    /// Drops the cached entry of `org_id`.
    pub fn invalidate(&self, org_id: &str) {
        self.epoch.fetch_add(1, Ordering::AcqRel);
        self.entries.invalidate(org_id);
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn config() -> Config {
        Config::load_from(&crate::config::Overrides::default(), &std::collections::BTreeMap::new()).unwrap()
    }

    fn row(provider: &str, model: &str, input: i64) -> RuntimePrice {
        RuntimePrice {
            id: "x".into(),
            org_id: "o".into(),
            provider: provider.into(),
            model: model.into(),
            input,
            output: 2 * input,
            cached_input: None,
            cache_write_5m: None,
            cache_write_1h: None,
            reasoning_output: None,
            created_at: 0,
            updated_at: 0,
        }
    }

    #[test]
    fn runtime_prices_win_over_the_table_by_exact_name() {
        let config = config();
        let table = PricingTable::builtin().unwrap();
        let org =
            OrgPrices::from_rows(&config, "block", &[row("openai", "gpt-4o", 7), row("google", "g-x", 3)]);
        assert_eq!(org.policy, UnpricedPolicy::Block);
        let (name, price) = org.resolve(&table, "openai", Provider::OpenAi, false, "gpt-4o").unwrap();
        assert_eq!((name.as_str(), price.input, price.output), ("gpt-4o", 7, 14));
        // A dated alias is not the priced name: the table prices it.
        let (name, price) =
            org.resolve(&table, "openai", Provider::OpenAi, false, "gpt-4o-2099-01-01").unwrap();
        assert_eq!((name.as_str(), price.input), ("gpt-4o", 2_500_000));
        assert!(org.resolve(&table, "openai", Provider::OpenAi, false, "g-x").is_none());
        assert_eq!(org.resolve(&table, "google", Provider::Google, false, "g-x").unwrap().1.input, 3);
    }

    #[test]
    fn anthropic_runtime_prices_get_cache_write_defaults() {
        let price = price_of(&row("anthropic", "c", 4), Provider::Anthropic);
        assert_eq!((price.cache_write_5m, price.cache_write_1h), (Some(5), Some(8)));
        assert_eq!(OrgPrices::from_rows(&config(), "junk", &[]).policy, UnpricedPolicy::Estimate);
    }

    #[test]
    fn provider_names_are_canonical() {
        let config = config();
        assert_eq!(canonical_provider(&config, "gemini").as_deref(), Some("google"));
        assert_eq!(canonical_provider(&config, "openai").as_deref(), Some("openai"));
        assert_eq!(canonical_provider(&config, "OpenAI"), None);
        assert_eq!(canonical_provider(&config, "mistral"), None);
    }
}
