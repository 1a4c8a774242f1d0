//! The price table: loading and merging, model-name resolution (dated aliases,
//! `models/` prefixes) and the conservative price of an unknown model.

use std::collections::HashMap;

use serde::Deserialize;

#[cfg(test)]
use super::DEFAULT_LONG_CONTEXT_THRESHOLD;
use super::{ModelPrice, Provider, PROVIDERS};

/// The table shipped with the binary. `PricingTable::builtin` parses it; a unit test makes
/// sure it always does.
const BUILTIN_TABLE_JSON: &str = include_str!("pricing.json");

/// Why a pricing table could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    /// The document is not JSON of the expected shape (including unknown price fields,
    /// which are refused so that a typo in an operator's file is not silently ignored).
    #[error("pricing table is not valid: {0}")]
    Json(#[from] serde_json::Error),
    /// A key is not `provider/model` with a known provider and a non-empty model.
    #[error("pricing key {0:?} is not \"provider/model\" with provider openai, anthropic, google, bedrock, vertex, azure or a configured upstream's name")]
    BadKey(String),
    /// Two keys name the same model once normalised (`gemini/x` and `google/x`).
    #[error("pricing key {0:?} names a model that is already in the table")]
    DuplicateKey(String),
    /// A price is below zero.
    #[error("pricing entry {key:?} has a negative {field} price")]
    NegativePrice { key: String, field: &'static str },
}

/// The document a pricing table is read from: `{"models": {"provider/model": {...}}}`.
/// Other top-level keys (such as `_about`) are ignored.
#[derive(Deserialize)]
struct PricingDocument {
    /// The day the prices were last checked against the providers' pages (`YYYY-MM-DD`).
    #[serde(default)]
    checked_at: Option<String>,
    models: HashMap<String, ModelPrice>,
    /// Per-call prices of tools the provider runs itself: `provider/item_type` (the
    /// Responses API's output item type, such as `openai/web_search_call`) to µ$.
    #[serde(default)]
    builtin_tools: HashMap<String, i64>,
}

/// Per-model prices of every provider, with name resolution.
#[derive(Debug, Clone)]
pub struct PricingTable {
    /// One map per provider (indexed by `Provider::index`), so that a lookup needs no
    /// `provider/model` key to be built.
    models: [HashMap<Box<str>, ModelPrice>; PROVIDERS],
    /// The operator-defined upstreams' models, by upstream name (from the operator's
    /// pricing file only: the shipped table prices none of them).
    named: HashMap<Box<str>, HashMap<Box<str>, ModelPrice>>,
    /// Conservative prices for unknown models, per provider, recomputed on every change.
    fallback: [ModelPrice; PROVIDERS],
    /// Fallback for an unknown provider: the maximum over all providers.
    fallback_any: ModelPrice,
    /// When the built-in prices were last checked (`YYYY-MM-DD`), from the document.
    checked_at: Option<String>,
    /// µ$ per call of a provider-run tool, per provider, by output item type.
    builtin_tools: [HashMap<Box<str>, i64>; PROVIDERS],
}

impl PricingTable {
    /// The table shipped with the binary (`pricing.json` beside this file).
    ///
    /// # Errors
    ///
    /// Only if the shipped file is broken, which a unit test rules out.
    pub fn builtin() -> Result<Self, PricingError> {
        Self::from_json_str(BUILTIN_TABLE_JSON)
    }

    /// Parses a table in the shipped format. Keys are `provider/model`; the provider may be
    /// `gemini` for `google`, and a Gemini-style `models/` prefix of the model is dropped.
    /// Anthropic entries get their cache-write defaults here.
    ///
    /// # Errors
    ///
    /// See [`PricingError`]: malformed JSON, unknown fields, bad or duplicate keys,
    /// negative prices.
    pub fn from_json_str(json: &str) -> Result<Self, PricingError> {
        Self::from_json_with(json, &[])
    }

    /// [`PricingTable::from_json_str`], where keys may also name the operator-defined
    /// upstreams in `named` (name and wire format, which decides the price defaults).
    ///
    /// # Errors
    ///
    /// As [`PricingTable::from_json_str`].
    pub fn from_json_with(json: &str, named: &[(&str, Provider)]) -> Result<Self, PricingError> {
        let document: PricingDocument = serde_json::from_str(json)?;
        let mut table = PricingTable {
            models: std::array::from_fn(|_| HashMap::new()),
            named: HashMap::new(),
            fallback: [ModelPrice::new(0, 0); PROVIDERS],
            fallback_any: ModelPrice::new(0, 0),
            checked_at: document.checked_at,
            builtin_tools: std::array::from_fn(|_| HashMap::new()),
        };
        for (key, price) in document.builtin_tools {
            // Built-in tools are the built-in providers' own: no upstream names here.
            let Some((Owner::Builtin(provider), tool)) = parse_key(&key, &[]) else {
                return Err(PricingError::BadKey(key));
            };
            if price < 0 {
                return Err(PricingError::NegativePrice { key, field: "per-call" });
            }
            table.builtin_tools[provider.index()].insert(tool.into(), price);
        }
        for (key, price) in document.models {
            let (owner, model) = parse_key(&key, named).ok_or_else(|| PricingError::BadKey(key.clone()))?;
            if let Some((field, _)) = price.named_prices().into_iter().find(|(_, p)| p.is_some_and(|p| p < 0))
            {
                return Err(PricingError::NegativePrice { key, field });
            }
            let (map, provider) = match owner {
                Owner::Builtin(provider) => (&mut table.models[provider.index()], provider),
                Owner::Named(name, format) => (table.named.entry(name.into()).or_default(), format),
            };
            if map.contains_key(model) {
                return Err(PricingError::DuplicateKey(key));
            }
            map.insert(model.into(), price.with_provider_defaults(provider));
        }
        table.recompute_fallbacks();
        Ok(table)
    }

    /// The built-in table with the operator's pricing file (if any) merged over it.
    ///
    /// # Errors
    ///
    /// The file cannot be read or is not a valid table; the message names the file.
    pub fn load(pricing_file: Option<&std::path::Path>, named: &[(&str, Provider)]) -> Result<Self, String> {
        let mut table = Self::builtin().map_err(|e| e.to_string())?;
        if let Some(path) = pricing_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read pricing_file {}: {e}", path.display()))?;
            let overrides = Self::from_json_with(&text, named)
                .map_err(|e| format!("pricing_file {}: {e}", path.display()))?;
            table.merge(overrides);
        }
        Ok(table)
    }

    /// The day the built-in prices were last checked against the providers' price pages
    /// (`YYYY-MM-DD`); an operator's file does not change it.
    pub fn checked_at(&self) -> Option<&str> {
        self.checked_at.as_deref()
    }

    /// Adds or replaces entries from `other` (typically an operator's config file over the
    /// builtin table). An entry replaces the whole entry of the same model; it is not
    /// merged field by field, so an override never inherits a stale price.
    pub fn merge(&mut self, other: PricingTable) {
        for (mine, theirs) in self.models.iter_mut().zip(other.models) {
            mine.extend(theirs);
        }
        for (mine, theirs) in self.builtin_tools.iter_mut().zip(other.builtin_tools) {
            mine.extend(theirs);
        }
        for (name, theirs) in other.named {
            self.named.entry(name).or_default().extend(theirs);
        }
        self.recompute_fallbacks();
    }

    /// Number of models across all providers.
    pub fn len(&self) -> usize {
        self.models.iter().chain(self.named.values()).map(HashMap::len).sum()
    }

    /// Whether the table has no model at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every entry, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (Provider, &str, &ModelPrice)> {
        Provider::ALL
            .into_iter()
            .flat_map(move |p| self.models[p.index()].iter().map(move |(model, price)| (p, &**model, price)))
    }

    /// Every entry of the operator-defined upstreams, by upstream name, in no
    /// particular order.
    pub fn iter_named(&self) -> impl Iterator<Item = (&str, &str, &ModelPrice)> {
        self.named.iter().flat_map(|(name, models)| models.iter().map(move |(m, p)| (&**name, &**m, p)))
    }

    /// Whether the table holds exactly this entry under `provider`'s own name (not an
    /// alias): tells a built-in entry from one an operator's file replaced or added.
    pub fn has_exact(&self, provider: Provider, model: &str, price: &ModelPrice) -> bool {
        self.models[provider.index()].get(model) == Some(price)
    }

    /// Finds the price of `model` at `provider` (`openai`, `anthropic`, `google`/`gemini`),
    /// returning the table's own model name with it. See [`PricingTable::lookup_in`].
    pub fn lookup(&self, provider: &str, model: &str) -> Option<(&str, &ModelPrice)> {
        self.lookup_in(Provider::from_name(provider)?, model)
    }

    /// Finds the price of `model`, trying in order and stopping at the first entry found:
    ///
    /// 1. the name itself, after dropping a leading `models/` (Gemini resource names);
    /// 2. the name without one trailing date: `-YYYY-MM-DD`, `-YYYYMMDD`, `-MM-YYYY`,
    ///    `-MM-DD` or `-MMDD` (years 20xx, months 01–12, days 01–31; longest form first),
    ///    e.g. `claude-haiku-4-5-20251001` → `claude-haiku-4-5`;
    /// 3. as a last resort, that name without a trailing `-latest` or `-preview`, e.g.
    ///    `gemini-2.5-flash-preview-05-20` → `gemini-2.5-flash-preview` →
    ///    `gemini-2.5-flash`. A preview may have been priced differently from the released
    ///    model; the released model's price is the best we know.
    ///
    /// An exact entry always wins, so a dated snapshot priced apart from its base model
    /// (e.g. `gpt-4o-2024-05-13`) keeps its own price. Every candidate is a prefix of the
    /// given name, so a lookup never allocates.
    pub fn lookup_in(&self, provider: Provider, model: &str) -> Option<(&str, &ModelPrice)> {
        resolve(&self.models[provider.index()], model)
    }

    /// The price of `model` at the operator-defined upstream `name`, resolved like
    /// [`PricingTable::lookup_in`]; only the operator's pricing file prices these.
    pub fn lookup_named(&self, name: &str, model: &str) -> Option<(&str, &ModelPrice)> {
        resolve(self.named.get(name)?, model)
    }

    /// The per-call price (µ$) of a tool the provider runs itself, by the Responses
    /// output item type (`web_search_call`); `None` when the table has none, which the
    /// proxy tags as unpriced rather than treating as free.
    pub fn builtin_tool_price(&self, provider: Provider, tool: &str) -> Option<i64> {
        self.builtin_tools[provider.index()].get(tool).copied()
    }

    /// Conservative prices for a model the table does not know, so that an unknown model
    /// is never billed below any known model of its provider: input is the highest input
    /// price of the provider (long-context tiers included), output the highest output or
    /// reasoning price, cache writes the highest cache-write prices; cache reads are billed
    /// as input (no discount assumed) and there is no long-context tier and no
    /// `max_output_tokens` (so [`estimate`] uses the request's maximum or 4,096).
    ///
    /// An unknown provider name gets the maximum over all providers, and a provider with no
    /// entries likewise. A table with no entries at all has a zero fallback; the proxy
    /// always starts from [`PricingTable::builtin`].
    pub fn fallback_price(&self, provider: &str) -> ModelPrice {
        match Provider::from_name(provider) {
            Some(provider) => self.fallback[provider.index()],
            None => self.fallback_any,
        }
    }

    fn recompute_fallbacks(&mut self) {
        self.fallback_any =
            max_price(self.models.iter().chain(self.named.values()).flat_map(HashMap::values));
        for provider in Provider::ALL {
            let map = &self.models[provider.index()];
            self.fallback[provider.index()] =
                if map.is_empty() { self.fallback_any } else { max_price(map.values()) };
        }
    }
}

/// Model-name resolution in one provider's map; see [`PricingTable::lookup_in`].
fn resolve<'a>(map: &'a HashMap<Box<str>, ModelPrice>, model: &str) -> Option<(&'a str, &'a ModelPrice)> {
    let get = |name: &str| map.get_key_value(name).map(|(canonical, price)| (&**canonical, price));
    let model = model.strip_prefix("models/").unwrap_or(model);
    if let Some(hit) = get(model) {
        return Some(hit);
    }
    let undated = strip_date_suffix(model);
    if let Some(hit) = undated.and_then(get) {
        return Some(hit);
    }
    let base = undated.unwrap_or(model);
    ["-latest", "-preview"]
        .into_iter()
        .filter_map(|suffix| base.strip_suffix(suffix).filter(|rest| !rest.is_empty()))
        .find_map(get)
}

/// The most expensive price of each kind over `prices`; see `fallback_price`.
fn max_price<'a>(prices: impl Iterator<Item = &'a ModelPrice>) -> ModelPrice {
    let mut max = ModelPrice::new(0, 0);
    let (mut write_5m, mut write_1h) = (0, 0);
    for price in prices {
        let long = price.rates(true);
        max.input = max.input.max(price.input).max(long.input);
        max.output = max
            .output
            .max(price.output)
            .max(price.reasoning_output_price())
            .max(long.output)
            .max(long.reasoning);
        write_5m =
            [write_5m, price.cache_write_5m_price(), long.cache_write_5m].into_iter().fold(0, i64::max);
        write_1h =
            [write_1h, price.cache_write_1h_price(), long.cache_write_1h].into_iter().fold(0, i64::max);
    }
    max.cache_write_5m = Some(write_5m);
    max.cache_write_1h = Some(write_1h);
    max
}

/// Whose price a table key is.
enum Owner<'a> {
    Builtin(Provider),
    /// An operator-defined upstream: its name and wire format.
    Named(&'a str, Provider),
}

/// Splits a table key into its owner and model; `None` when malformed or when the
/// provider is neither built in nor in `named`.
fn parse_key<'a>(key: &'a str, named: &[(&'a str, Provider)]) -> Option<(Owner<'a>, &'a str)> {
    let (provider, model) = key.split_once('/')?;
    let owner = match Provider::from_name(provider) {
        Some(p) => Owner::Builtin(p),
        None => named.iter().find(|(n, _)| *n == provider).map(|(n, f)| Owner::Named(n, *f))?,
    };
    let model = model.strip_prefix("models/").unwrap_or(model);
    let well_formed = !model.is_empty() && !model.chars().any(char::is_whitespace);
    well_formed.then_some((owner, model))
}

/// Date suffix shapes, longest first so that `-2024-08-06` is not read as `-08-06`.
/// `Y`, `M` and `D` stand for digits of the year, month and day.
const DATE_SUFFIXES: [&[u8]; 5] = [b"-YYYY-MM-DD", b"-YYYYMMDD", b"-MM-YYYY", b"-MM-DD", b"-MMDD"];

/// The model name without one trailing date suffix, if it has one.
fn strip_date_suffix(model: &str) -> Option<&str> {
    let bytes = model.as_bytes();
    DATE_SUFFIXES.iter().find_map(|shape| {
        let cut = bytes.len().checked_sub(shape.len()).filter(|&cut| cut > 0)?;
        // The suffix is ASCII, so `cut` is a char boundary whenever it matches.
        is_date(&bytes[cut..], shape).then(|| &model[..cut])
    })
}

/// Whether `suffix` has the given shape and a plausible date (year 20xx, month 01–12,
/// day 01–31), so that version numbers such as `-0125` only count when they read as a date.
fn is_date(suffix: &[u8], shape: &[u8]) -> bool {
    let (mut year, mut month, mut day) = (0u32, 0u32, 0u32);
    for (&byte, &kind) in suffix.iter().zip(shape) {
        let slot = match kind {
            b'Y' => &mut year,
            b'M' => &mut month,
            b'D' => &mut day,
            _ => {
                if byte != kind {
                    return false;
                }
                continue;
            }
        };
        if !byte.is_ascii_digit() {
            return false;
        }
        *slot = *slot * 10 + u32::from(byte - b'0');
    }
    let has_year = shape.contains(&b'Y');
    let has_day = shape.contains(&b'D');
    (1..=12).contains(&month)
        && (!has_day || (1..=31).contains(&day))
        && (!has_year || (2000..=2099).contains(&year))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
pub(super) mod tests {
    use super::*;
    use crate::pricing::{cost, Usage};

    pub(crate) fn builtin() -> PricingTable {
        PricingTable::builtin().expect("builtin table parses")
    }

    pub(crate) fn price(table: &PricingTable, provider: &str, model: &str) -> ModelPrice {
        *table.lookup(provider, model).expect("model is priced").1
    }

    // ---- the shipped table ----

    #[test]
    fn builtin_table_parses_and_is_large() {
        let table = builtin();
        assert!(table.len() > 100, "only {} models", table.len());
        for provider in Provider::ALL {
            assert!(table.iter().filter(|(p, _, _)| *p == provider).count() >= 10, "{provider:?}");
        }
    }

    #[test]
    fn every_builtin_entry_is_sane() {
        let table = builtin();
        for (provider, model, price) in table.iter() {
            let name = format!("{}/{model}", provider.as_str());
            for (field, value) in price.named_prices() {
                assert!(value.unwrap_or(0) >= 0, "{name}: negative {field}");
            }
            assert!(price.cached_input_price() <= price.input, "{name}: cache read above input");
            assert!(price.cache_write_5m_price() >= price.input, "{name}: cache write below input");
            if provider == Provider::Anthropic {
                // Only Anthropic reports cache writes by lifetime; OpenAI entries listing a
                // 5m write price never see cache-write tokens.
                assert!(price.cache_write_1h_price() >= price.cache_write_5m_price(), "{name}: 1h below 5m");
            }
            if let Some(above) = price.input_long_context {
                assert!(above >= price.input, "{name}: long-context input below normal");
            }
            if let Some(above) = price.output_long_context {
                assert!(above >= price.output, "{name}: long-context output below normal");
            }
            if let Some(above) = price.cached_input_long_context {
                assert!(above >= price.cached_input_price(), "{name}: long-context cache read below normal");
                assert!(
                    above <= price.input_long_context.unwrap_or(i64::MAX),
                    "{name}: long cache read above input"
                );
            }
            assert!(price.max_output_tokens.is_none_or(|m| m > 0), "{name}: zero max_output_tokens");
            if let Some(threshold) = price.long_context_threshold {
                assert!(price.has_long_context_tier(), "{name}: a threshold without a tier");
                assert_ne!(threshold, DEFAULT_LONG_CONTEXT_THRESHOLD, "{name}: the default spelled out");
            }
            assert_eq!(model, model.trim(), "{name}");
            assert!(!model.starts_with("models/"), "{name}");
            // The proxy resolves the entry to itself, not to some other alias.
            let (canonical, found) = table.lookup(provider.as_str(), model).unwrap();
            assert_eq!((canonical, found), (model, price));
        }
    }

    #[test]
    fn builtin_anthropic_cache_writes_follow_multipliers() {
        // Claude Haiku 3's page lists $0.30 / $0.50 for a $0.25 input, not × 1.25 / × 2.
        let priced_apart = ["claude-3-haiku-20240307"];
        for (provider, model, price) in builtin().iter() {
            if provider == Provider::Anthropic && !priced_apart.contains(&model) {
                assert_eq!(price.cache_write_5m, Some(price.input * 5 / 4), "{model}");
                assert_eq!(price.cache_write_1h, Some(price.input * 2), "{model}");
            }
        }
    }

    /// A dated snapshot listed next to its base model should cost the same, unless it is a
    /// snapshot known to be priced apart; this catches a copy error in either entry.
    #[test]
    fn dated_builtin_entries_match_their_base_model() {
        let priced_apart = ["openai/gpt-4o-2024-05-13", "openai/gpt-3.5-turbo-1106"];
        let table = builtin();
        for (provider, model, price) in table.iter() {
            let Some(base) = strip_date_suffix(model) else { continue };
            let Some((_, base_price)) = table.lookup_in(provider, base).filter(|(name, _)| *name == base)
            else {
                continue;
            };
            let name = format!("{}/{model}", provider.as_str());
            if priced_apart.contains(&name.as_str()) {
                assert_ne!(price, base_price, "{name} no longer differs: drop it from the list");
            } else {
                assert_eq!(price, base_price, "{name} differs from {base}");
            }
        }
    }

    // ---- lookup ----

    #[test]
    fn lookup_exact_returns_the_table_name() {
        let table = builtin();
        let (name, price) = table.lookup("openai", "gpt-4o").unwrap();
        assert_eq!(name, "gpt-4o");
        assert_eq!((price.input, price.output), (2_500_000, 10_000_000));
        // An exact dated entry wins over its base model's price.
        let (name, price) = table.lookup("openai", "gpt-4o-2024-05-13").unwrap();
        assert_eq!(name, "gpt-4o-2024-05-13");
        assert_eq!((price.input, price.output), (5_000_000, 15_000_000));
    }

    #[test]
    fn lookup_resolves_dated_aliases() {
        let table = builtin();
        let cases = [
            ("openai", "gpt-4.1-mini-2026-01-31", "gpt-4.1-mini"),
            ("openai", "gpt-4-0314", "gpt-4"),
            ("anthropic", "claude-sonnet-4-6-20260101", "claude-sonnet-4-6"),
            ("anthropic", "claude-haiku-4-5-20251001", "claude-haiku-4-5-20251001"),
            ("google", "gemini-3.1-pro-preview-03-2026", "gemini-3.1-pro-preview"),
            ("google", "gemini-2.5-flash-preview-05-20", "gemini-2.5-flash"),
            ("google", "gemini-2.5-flash-lite-preview-06-17", "gemini-2.5-flash-lite"),
            ("anthropic", "claude-opus-4-8-latest", "claude-opus-4-8"),
        ];
        for (provider, model, expected) in cases {
            let (name, _) = table.lookup(provider, model).unwrap_or_else(|| panic!("{model} not found"));
            assert_eq!(name, expected, "{model}");
        }
    }

    #[test]
    fn lookup_strips_models_prefix_and_accepts_gemini_provider() {
        let table = builtin();
        assert_eq!(table.lookup("google", "models/gemini-2.5-pro").unwrap().0, "gemini-2.5-pro");
        assert_eq!(table.lookup("gemini", "gemini-2.5-pro").unwrap().0, "gemini-2.5-pro");
        assert_eq!(
            table.lookup("Gemini", "models/gemini-2.5-flash-preview-09-2025").unwrap().0,
            "gemini-2.5-flash"
        );
    }

    #[test]
    fn lookup_unknown_is_none() {
        let table = builtin();
        assert!(table.lookup("openai", "gpt-99").is_none());
        assert!(table.lookup("mistral", "gpt-4o").is_none());
        assert!(table.lookup("anthropic", "gpt-4o").is_none(), "models are per provider");
        assert!(table.lookup("openai", "").is_none());
        assert!(table.lookup("openai", "-preview").is_none());
        // Not dates: month 13, year 1999, three digits.
        assert!(table.lookup("openai", "gpt-4o-2024-13-01").is_none());
        assert!(table.lookup("openai", "gpt-4o-19990101").is_none());
        assert!(table.lookup("openai", "gpt-4o-001").is_none());
        // Only one date is stripped, and the date must be the whole suffix.
        assert!(table.lookup("openai", "gpt-4.1-mini-2024-08-06-2024-08-06").is_none());
        assert!(table.lookup("openai", "gpt-4o-2024-08-06x").is_none());
    }

    #[test]
    fn date_suffixes_are_recognised() {
        assert_eq!(strip_date_suffix("gpt-4o-2024-08-06"), Some("gpt-4o"));
        assert_eq!(strip_date_suffix("claude-haiku-4-5-20251001"), Some("claude-haiku-4-5"));
        assert_eq!(strip_date_suffix("deep-research-pro-preview-12-2025"), Some("deep-research-pro-preview"));
        assert_eq!(strip_date_suffix("gemini-2.5-flash-preview-05-20"), Some("gemini-2.5-flash-preview"));
        assert_eq!(strip_date_suffix("gpt-3.5-turbo-0125"), Some("gpt-3.5-turbo"));
        assert_eq!(strip_date_suffix("gpt-4-1106-preview"), None);
        assert_eq!(strip_date_suffix("gemini-1.5-pro-002"), None);
        assert_eq!(strip_date_suffix("gpt-4o-2025"), None);
        assert_eq!(strip_date_suffix("-0613"), None, "nothing left");
        assert_eq!(strip_date_suffix("modèle-0613"), Some("modèle"));
    }

    // ---- fallback ----

    #[test]
    fn fallback_is_the_most_expensive_price_of_the_provider() {
        let table = builtin();
        for provider in Provider::ALL {
            let fallback = table.fallback_price(provider.as_str());
            for (p, model, price) in table.iter().filter(|(p, _, _)| *p == provider) {
                let usage = Usage {
                    input_tokens: 300_000,
                    cached_input_tokens: 10_000,
                    cache_write_5m_tokens: 10_000,
                    cache_write_1h_tokens: 10_000,
                    output_tokens: 10_000,
                    reasoning_tokens: 5_000,
                };
                let small = Usage { input_tokens: 50_000, ..usage };
                for usage in [usage, small] {
                    assert!(cost(&fallback, &usage).total >= cost(price, &usage).total, "{p:?}/{model}");
                }
            }
        }
        let openai = table.fallback_price("openai");
        // o1-pro's, a model served only by the Responses API: no unknown model is charged
        // less than it.
        assert_eq!((openai.input, openai.output), (150_000_000, 600_000_000));
        let anthropic = table.fallback_price("anthropic");
        // Claude Opus 4 / 4.1.
        assert_eq!((anthropic.input, anthropic.output), (15_000_000, 75_000_000));
        assert_eq!(anthropic.cache_write_1h_price(), 30_000_000);
        let google = table.fallback_price("gemini");
        assert_eq!((google.input, google.output), (4_000_000, 20_000_000));
        assert_eq!(google.max_output_tokens, None);
        let any = table.fallback_price("someone-else");
        assert_eq!((any.input, any.output), (150_000_000, 600_000_000));
    }

    // ---- loading and merging ----

    #[test]
    fn from_json_str_applies_defaults_and_normalises_keys() {
        let table = PricingTable::from_json_str(
            r#"{"_about": "x", "models": {
                "anthropic/claude-x": {"input": 1000001, "output": 5},
                "gemini/models/gemini-x": {"input": 7, "output": 8, "max_output_tokens": 9}
            }}"#,
        )
        .unwrap();
        let claude = price(&table, "anthropic", "claude-x");
        assert_eq!(claude.cache_write_5m, Some(1_250_002), "×1.25 rounded up");
        assert_eq!(claude.cache_write_1h, Some(2_000_002));
        assert_eq!(claude.cached_input_price(), 1_000_001);
        let gemini = price(&table, "google", "gemini-x");
        assert_eq!(gemini.cache_write_5m_price(), 7, "non-Anthropic cache writes default to input");
        assert_eq!(gemini.max_output_tokens, Some(9));
        // Partial tables still have a fallback: the global maximum.
        assert_eq!(table.fallback_price("openai").input, 1_000_001);
    }

    #[test]
    fn from_json_str_reads_tiers_under_both_names() {
        let table = PricingTable::from_json_str(
            r#"{"checked_at": "2026-01-02", "models": {
                "openai/old": {"input": 1, "output": 2, "input_above_200k": 3, "cached_input_above_200k": 1, "output_above_200k": 4},
                "openai/new": {"input": 1, "output": 2, "long_context_threshold": 1000, "input_long_context": 3, "output_long_context": 4}
            }}"#,
        )
        .unwrap();
        let old = price(&table, "openai", "old");
        assert_eq!(
            (old.input_long_context, old.cached_input_long_context, old.output_long_context),
            (Some(3), Some(1), Some(4))
        );
        assert!(!old.is_long_context(200_000) && old.is_long_context(200_001));
        let new = price(&table, "openai", "new");
        assert!(!new.is_long_context(1_000) && new.is_long_context(1_001));
        assert_eq!(table.checked_at(), Some("2026-01-02"));
        assert!(builtin().checked_at().is_some_and(|d| d.len() == 10));
    }

    #[test]
    fn from_json_str_rejects_bad_tables() {
        let bad = [
            r#"{"models": {"mistral/large": {"input": 1, "output": 1}}}"#,
            r#"{"models": {"gpt-4o": {"input": 1, "output": 1}}}"#,
            r#"{"models": {"openai/": {"input": 1, "output": 1}}}"#,
            r#"{"models": {"openai/gpt 4": {"input": 1, "output": 1}}}"#,
            r#"{"models": {"openai/x": {"input": 1, "output": -1}}}"#,
            r#"{"models": {"openai/x": {"input": 1, "ouput": 1}}}"#,
            r#"{"models": {"openai/x": {"input": 1}}}"#,
            r#"{"models": {"openai/x": {"input": 1.5, "output": 1}}}"#,
            r#"{"models": {"google/x": {"input": 1, "output": 1}, "gemini/x": {"input": 2, "output": 2}}}"#,
            r#"{"prices": {}}"#,
            "not json",
        ];
        for json in bad {
            assert!(PricingTable::from_json_str(json).is_err(), "{json}");
        }
        let negative = PricingTable::from_json_str(
            r#"{"models": {"openai/x": {"input": 1, "output": 1, "cached_input": -2}}}"#,
        );
        assert!(matches!(negative, Err(PricingError::NegativePrice { field: "cached_input", .. })));
        assert!(PricingTable::from_json_str(r#"{"models": {}}"#).unwrap().is_empty());
    }

    #[test]
    fn merge_overrides_and_adds_entries() {
        let mut table = builtin();
        let before = table.len();
        let overrides = PricingTable::from_json_str(
            r#"{"models": {
                "openai/gpt-4o": {"input": 1, "output": 2},
                "openai/my-finetune": {"input": 199000000, "output": 100}
            }}"#,
        )
        .unwrap();
        table.merge(overrides);
        assert_eq!(table.len(), before + 1);
        let gpt4o = price(&table, "openai", "gpt-4o");
        assert_eq!(gpt4o, ModelPrice::new(1, 2), "whole entry replaced, no stale cached price");
        // The dated alias without an entry follows the override; the one with an entry doesn't.
        assert_eq!(table.lookup("openai", "gpt-4o-2099-01-01").unwrap().1.input, 1);
        assert_eq!(table.lookup("openai", "gpt-4o-2024-08-06").unwrap().1.input, 2_500_000);
        assert_eq!(table.fallback_price("openai").input, 199_000_000, "fallback recomputed");
    }

    #[test]
    fn builtin_tool_prices_merge_and_are_checked() {
        let mut table = builtin();
        let overrides = PricingTable::from_json_str(
            r#"{"models": {}, "builtin_tools": {"openai/image_generation_call": 40000, "openai/web_search_call": 25000}}"#,
        )
        .unwrap();
        table.merge(overrides);
        assert_eq!(table.builtin_tool_price(Provider::OpenAi, "image_generation_call"), Some(40_000));
        assert_eq!(table.builtin_tool_price(Provider::OpenAi, "web_search_call"), Some(25_000));
        assert_eq!(table.builtin_tool_price(Provider::OpenAi, "file_search_call"), Some(2_500), "kept");
        let negative =
            PricingTable::from_json_str(r#"{"models": {}, "builtin_tools": {"openai/x_call": -1}}"#);
        assert!(matches!(negative, Err(PricingError::NegativePrice { .. })));
        let bad = PricingTable::from_json_str(r#"{"models": {}, "builtin_tools": {"nobody/x_call": 1}}"#);
        assert!(matches!(bad, Err(PricingError::BadKey(_))));
    }

    #[test]
    fn named_upstreams_are_priced_only_under_their_name() {
        let json = r#"{"models": {"openrouter/acme-1": {"input": 2000000, "output": 8000000},
                                  "openai/acme-1": {"input": 1, "output": 1}}}"#;
        assert!(matches!(PricingTable::from_json_str(json), Err(PricingError::BadKey(_))));
        let table = PricingTable::from_json_with(json, &[("openrouter", Provider::OpenAi)]).unwrap();
        let (name, price) = table.lookup_named("openrouter", "acme-1-2025-01-01").unwrap();
        assert_eq!((name, price.input, price.output), ("acme-1", 2_000_000, 8_000_000));
        assert_eq!(table.lookup_in(Provider::OpenAi, "acme-1").unwrap().1.input, 1);
        assert!(table.lookup_named("openrouter", "other").is_none());
        assert!(table.lookup_named("vllm", "acme-1").is_none());
        // The fallback of an upstream's unknown model is the highest of all.
        assert_eq!(table.fallback_price("openrouter").input, 2_000_000);
    }
}
