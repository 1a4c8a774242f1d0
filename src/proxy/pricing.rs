//! Prices model calls for the proxy: the shipped per-model price table, model-name
//! resolution (dated aliases, `models/` prefixes) and the integer-microdollar cost of one
//! call, both the pre-call estimate and the settled actual.
//!
//! All prices are integer microdollars (µ$) per 1,000,000 tokens, so `1_000_000` means
//! $1 per million tokens and one token at that price costs exactly 1 µ$.
//!
//! # Rounding rule
//!
//! Every cost component (uncached input, cache reads, cache writes, plain output,
//! reasoning output) is computed exactly as `tokens × price` in `i128` and then rounded
//! **up** to a whole microdollar on its own; `total` is the sum of the rounded
//! components. So the components always add up to `total` exactly, the proxy never bills
//! less than the exact price, and it bills at most 1 µ$ more per non-zero component
//! (5 µ$ per call at worst).
//!
//! # Defaults for missing prices
//!
//! - `cached_input` (cache read) defaults to `input`: a model without a cache discount is
//!   billed at the full input price for tokens a provider reports as cached.
//! - `cache_write_5m` / `cache_write_1h` default to `input` × 1.25 / × 2 for Anthropic
//!   (its documented cache-write multipliers, filled in when a table is loaded) and to
//!   `input` for every other provider (which bill cache creation as plain input).
//! - `reasoning_output` defaults to `output`.
//! - Long-context tier: when a model has any `*_above_200k` price and the prompt of one
//!   call (all input tokens, cached and cache writes included) exceeds 200,000 tokens,
//!   every token of that call is billed at the higher tier, as Google and Anthropic bill.
//!   Tier prices missing from the entry are derived by scaling the normal-tier price by
//!   the same ratio as the input (cache read/writes) or output (reasoning) price, rounded
//!   up, because both providers scale those prices with the tier.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Prompt size above which a model's `*_above_200k` prices apply to the whole call.
pub const LONG_CONTEXT_THRESHOLD_TOKENS: u64 = 200_000;

/// Output tokens assumed by [`estimate`] when neither the request nor the table gives a
/// maximum.
pub const DEFAULT_ESTIMATE_OUTPUT_TOKENS: u32 = 4_096;

/// Bytes per token assumed by [`estimate`]: the usual rule of thumb for English text and
/// JSON with common tokenizers. The whole request body is counted, JSON syntax included,
/// which errs on the side of reserving too much.
pub const ESTIMATE_BYTES_PER_TOKEN: u64 = 4;

/// Prices are quoted per this many tokens.
const TOKENS_PER_PRICE_UNIT: i128 = 1_000_000;

/// The table shipped with the binary. `PricingTable::builtin` parses it; a unit test makes
/// sure it always does.
const BUILTIN_TABLE_JSON: &str = include_str!("pricing.json");

/// The model providers the proxy routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Chat completions (`/v1/chat/completions`).
    OpenAi,
    /// Messages (`/v1/messages`).
    Anthropic,
    /// Generative content (`/v1beta/models/{model}:generateContent`).
    Google,
}

impl Provider {
    /// Every provider, in table order.
    pub const ALL: [Provider; 3] = [Provider::OpenAi, Provider::Anthropic, Provider::Google];

    /// Parses a provider name: `openai`, `anthropic`, and `google` or its alias `gemini`,
    /// ignoring ASCII case. Never allocates.
    pub fn from_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("openai") {
            Some(Provider::OpenAi)
        } else if name.eq_ignore_ascii_case("anthropic") {
            Some(Provider::Anthropic)
        } else if name.eq_ignore_ascii_case("google") || name.eq_ignore_ascii_case("gemini") {
            Some(Provider::Google)
        } else {
            None
        }
    }

    /// The canonical name, as used in table keys and cost events.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Google => "google",
        }
    }

    fn index(self) -> usize {
        match self {
            Provider::OpenAi => 0,
            Provider::Anthropic => 1,
            Provider::Google => 2,
        }
    }
}

/// Prices of one model, in µ$ per 1,000,000 tokens. See the module docs for the defaults
/// of the optional prices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelPrice {
    /// Uncached prompt tokens.
    pub input: i64,
    /// Prompt tokens read from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input: Option<i64>,
    /// Prompt tokens written to a cache that lives 5 minutes (Anthropic's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_5m: Option<i64>,
    /// Prompt tokens written to a cache that lives 1 hour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_1h: Option<i64>,
    /// Output tokens.
    pub output: i64,
    /// Reasoning (thinking) output tokens, when priced apart from `output`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_output: Option<i64>,
    /// Uncached input in the long-context tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_above_200k: Option<i64>,
    /// Cache reads in the long-context tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_input_above_200k: Option<i64>,
    /// Output in the long-context tier.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_above_200k: Option<i64>,
    /// The most output tokens one call can produce, used by [`estimate`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
}

impl ModelPrice {
    /// A price with only input and output set; every other price takes its default.
    pub fn new(input: i64, output: i64) -> Self {
        ModelPrice {
            input,
            cached_input: None,
            cache_write_5m: None,
            cache_write_1h: None,
            output,
            reasoning_output: None,
            input_above_200k: None,
            cached_input_above_200k: None,
            output_above_200k: None,
            max_output_tokens: None,
        }
    }

    /// Cache-read price: `cached_input`, else `input`.
    pub fn cached_input_price(&self) -> i64 {
        self.cached_input.unwrap_or(self.input)
    }

    /// 5-minute cache-write price: `cache_write_5m`, else `input`. (Anthropic entries get
    /// their × 1.25 default when the table is loaded.)
    pub fn cache_write_5m_price(&self) -> i64 {
        self.cache_write_5m.unwrap_or(self.input)
    }

    /// 1-hour cache-write price: `cache_write_1h`, else `input`. (Anthropic entries get
    /// their × 2 default when the table is loaded.)
    pub fn cache_write_1h_price(&self) -> i64 {
        self.cache_write_1h.unwrap_or(self.input)
    }

    /// Reasoning-output price: `reasoning_output`, else `output`.
    pub fn reasoning_output_price(&self) -> i64 {
        self.reasoning_output.unwrap_or(self.output)
    }

    /// Whether the model bills long prompts at a higher tier.
    pub fn has_long_context_tier(&self) -> bool {
        self.input_above_200k.is_some()
            || self.cached_input_above_200k.is_some()
            || self.output_above_200k.is_some()
    }

    /// Fills the provider-specific defaults that `ModelPrice`'s own accessors cannot know.
    fn with_provider_defaults(mut self, provider: Provider) -> Self {
        if provider == Provider::Anthropic {
            // Anthropic bills a 5-minute cache write at 1.25× and a 1-hour one at 2× input.
            let input = i128::from(self.input);
            self.cache_write_5m.get_or_insert_with(|| clamp_to_i64(ceil_div(input * 5, 4)));
            self.cache_write_1h.get_or_insert_with(|| clamp_to_i64(input * 2));
        }
        self
    }

    /// Every price of the entry with its field name, for validation.
    fn named_prices(&self) -> [(&'static str, Option<i64>); 9] {
        [
            ("input", Some(self.input)),
            ("cached_input", self.cached_input),
            ("cache_write_5m", self.cache_write_5m),
            ("cache_write_1h", self.cache_write_1h),
            ("output", Some(self.output)),
            ("reasoning_output", self.reasoning_output),
            ("input_above_200k", self.input_above_200k),
            ("cached_input_above_200k", self.cached_input_above_200k),
            ("output_above_200k", self.output_above_200k),
        ]
    }

    /// The prices that apply to one call, in the normal or the long-context tier.
    fn rates(&self, long_context: bool) -> Rates {
        let normal = Rates {
            input: self.input,
            cached: self.cached_input_price(),
            cache_write_5m: self.cache_write_5m_price(),
            cache_write_1h: self.cache_write_1h_price(),
            output: self.output,
            reasoning: self.reasoning_output_price(),
        };
        if !long_context {
            return normal;
        }
        let input = self.input_above_200k.unwrap_or(self.input);
        let output = self.output_above_200k.unwrap_or(self.output);
        Rates {
            input,
            cached: self
                .cached_input_above_200k
                .unwrap_or_else(|| scale_price(normal.cached, input, self.input)),
            cache_write_5m: scale_price(normal.cache_write_5m, input, self.input),
            cache_write_1h: scale_price(normal.cache_write_1h, input, self.input),
            output,
            reasoning: scale_price(normal.reasoning, output, self.output),
        }
    }
}

/// Resolved per-token-kind prices of one call.
#[derive(Debug, Clone, Copy)]
struct Rates {
    input: i64,
    cached: i64,
    cache_write_5m: i64,
    cache_write_1h: i64,
    output: i64,
    reasoning: i64,
}

/// Scales `price` by `to / from`, rounding up; used to derive long-context prices that an
/// entry does not list. A free (`from <= 0`) base cannot give a ratio, so the tier price
/// itself is used.
fn scale_price(price: i64, to: i64, from: i64) -> i64 {
    if from <= 0 {
        return price.max(to);
    }
    clamp_to_i64(ceil_div(i128::from(price) * i128::from(to), i128::from(from)))
}

/// Token counts of one call, normalised across providers so that [`cost`] has one
/// formula. The usage parsers in `proxy::usage` produce it.
///
/// - `input_tokens`: every prompt token, **including** cache reads, cache writes and
///   (Gemini) tool-use prompt tokens. OpenAI's `prompt_tokens` and Gemini's
///   `promptTokenCount` already include cache reads; Anthropic's `input_tokens` excludes
///   them, so its parser adds cache reads and writes back in.
/// - `cached_input_tokens`, `cache_write_5m_tokens`, `cache_write_1h_tokens`: the parts of
///   `input_tokens` read from or written to a cache.
/// - `output_tokens`: every billed output token, **including** reasoning (OpenAI's
///   `completion_tokens` includes it; Gemini's thinking tokens are added to its
///   candidate tokens).
/// - `reasoning_tokens`: the part of `output_tokens` spent on reasoning or thinking.
///
/// Uncached input is `input - cached - cache writes` and plain output is
/// `output - reasoning`, both saturating at zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_5m_tokens: u64,
    pub cache_write_1h_tokens: u64,
    pub output_tokens: u64,
    pub reasoning_tokens: u64,
}

impl Usage {
    /// Cache-write tokens of both lifetimes.
    pub fn cache_write_tokens(&self) -> u64 {
        self.cache_write_5m_tokens.saturating_add(self.cache_write_1h_tokens)
    }

    /// Prompt tokens billed at the plain input price.
    pub fn uncached_input_tokens(&self) -> u64 {
        self.input_tokens.saturating_sub(self.cached_input_tokens).saturating_sub(self.cache_write_tokens())
    }
}

/// The cost of one call in integer microdollars, split by token kind. `total` is always
/// exactly the sum of the other fields (see the module's rounding rule).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostBreakdown {
    /// Uncached prompt tokens.
    pub input: i64,
    /// Output tokens that are not reasoning.
    pub output: i64,
    /// Cache reads.
    pub cached: i64,
    /// Reasoning output tokens.
    pub reasoning: i64,
    /// Cache writes (5-minute and 1-hour together).
    pub cache_write: i64,
    /// Sum of the components.
    pub total: i64,
}

/// The cost of a finished call. See the module docs for the rounding rule, the
/// long-context tier and the defaults of missing prices. Negative prices (which a loaded
/// table rejects) count as zero, so no component is ever negative.
pub fn cost(price: &ModelPrice, usage: &Usage) -> CostBreakdown {
    let long_context = price.has_long_context_tier() && usage.input_tokens > LONG_CONTEXT_THRESHOLD_TOKENS;
    let rates = price.rates(long_context);
    // Reasoning tokens are a subset of output tokens; a provider reporting more reasoning
    // than output would otherwise make us bill tokens that were never produced.
    let reasoning_tokens = usage.reasoning_tokens.min(usage.output_tokens);
    let plain_output_tokens = usage.output_tokens - reasoning_tokens;

    let input = micros(&[(usage.uncached_input_tokens(), rates.input)]);
    let cached = micros(&[(usage.cached_input_tokens, rates.cached)]);
    let cache_write = micros(&[
        (usage.cache_write_5m_tokens, rates.cache_write_5m),
        (usage.cache_write_1h_tokens, rates.cache_write_1h),
    ]);
    let output = micros(&[(plain_output_tokens, rates.output)]);
    let reasoning = micros(&[(reasoning_tokens, rates.reasoning)]);
    let total = [input, cached, cache_write, output, reasoning].into_iter().fold(0i64, i64::saturating_add);
    CostBreakdown { input, output, cached, reasoning, cache_write, total }
}

/// The pre-call estimate that is reserved on budgets before the upstream call, in µ$;
/// always at least 1 so that every call reserves something.
///
/// - Input tokens: `ceil(prompt_bytes / 4)` ([`ESTIMATE_BYTES_PER_TOKEN`]), billed at
///   the plain input price (no cache discount is assumed).
/// - Output tokens: the request's maximum (`max_output_tokens`), capped at the model's
///   `max_output_tokens` when the table knows it (a larger request would be refused by the
///   provider); without a request maximum the model's `max_output_tokens`; without either
///   [`DEFAULT_ESTIMATE_OUTPUT_TOKENS`]. Billed at the higher of the output and reasoning
///   prices, since any of them may be reasoning.
/// - Always the normal tier: the estimate is settled to the actual cost afterwards.
/// - Rounded up like [`cost`].
pub fn estimate(price: &ModelPrice, prompt_bytes: usize, max_output_tokens: Option<u32>) -> i64 {
    let prompt_bytes = u64::try_from(prompt_bytes).unwrap_or(u64::MAX);
    let input_tokens = prompt_bytes.div_ceil(ESTIMATE_BYTES_PER_TOKEN);
    let output_tokens = match (max_output_tokens, price.max_output_tokens) {
        (Some(requested), Some(model_max)) => requested.min(model_max),
        (Some(requested), None) => requested,
        (None, Some(model_max)) => model_max,
        (None, None) => DEFAULT_ESTIMATE_OUTPUT_TOKENS,
    };
    let output_price = price.output.max(price.reasoning_output_price());
    let total = micros(&[(input_tokens, price.input)])
        .saturating_add(micros(&[(u64::from(output_tokens), output_price)]));
    total.max(1)
}

/// `ceil(Σ tokens × price / 1,000,000)`, exact in `i128`, negative prices counted as zero,
/// saturating at `i64::MAX`.
fn micros(parts: &[(u64, i64)]) -> i64 {
    let mut exact: i128 = 0;
    for &(tokens, price) in parts {
        // u64::MAX × i64::MAX still fits in i128; only the sum can overflow.
        let product = i128::from(tokens) * i128::from(price.max(0));
        exact = exact.saturating_add(product);
    }
    clamp_to_i64(ceil_div(exact, TOKENS_PER_PRICE_UNIT))
}

/// Ceiling division for a non-negative numerator and a positive denominator.
fn ceil_div(numerator: i128, denominator: i128) -> i128 {
    numerator / denominator + i128::from(numerator % denominator != 0)
}

fn clamp_to_i64(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

/// Why a pricing table could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum PricingError {
    /// The document is not JSON of the expected shape (including unknown price fields,
    /// which are refused so that a typo in an operator's file is not silently ignored).
    #[error("pricing table is not valid: {0}")]
    Json(#[from] serde_json::Error),
    /// A key is not `provider/model` with a known provider and a non-empty model.
    #[error("pricing key {0:?} is not \"provider/model\" with provider openai, anthropic or google")]
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
    models: HashMap<String, ModelPrice>,
}

/// Per-model prices of every provider, with name resolution.
#[derive(Debug, Clone)]
pub struct PricingTable {
    /// One map per provider (indexed by `Provider::index`), so that a lookup needs no
    /// `provider/model` key to be built.
    models: [HashMap<Box<str>, ModelPrice>; 3],
    /// Conservative prices for unknown models, per provider, recomputed on every change.
    fallback: [ModelPrice; 3],
    /// Fallback for an unknown provider: the maximum over all providers.
    fallback_any: ModelPrice,
}

impl PricingTable {
    /// The table shipped with the binary (`src/proxy/pricing.json`).
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
        let document: PricingDocument = serde_json::from_str(json)?;
        let mut table = PricingTable {
            models: [HashMap::new(), HashMap::new(), HashMap::new()],
            fallback: [ModelPrice::new(0, 0); 3],
            fallback_any: ModelPrice::new(0, 0),
        };
        for (key, price) in document.models {
            let (provider, model) = parse_key(&key).ok_or_else(|| PricingError::BadKey(key.clone()))?;
            if let Some((field, _)) = price.named_prices().into_iter().find(|(_, p)| p.is_some_and(|p| p < 0))
            {
                return Err(PricingError::NegativePrice { key, field });
            }
            let map = &mut table.models[provider.index()];
            if map.contains_key(model) {
                return Err(PricingError::DuplicateKey(key));
            }
            map.insert(model.into(), price.with_provider_defaults(provider));
        }
        table.recompute_fallbacks();
        Ok(table)
    }

    /// Adds or replaces entries from `other` (typically an operator's config file over the
    /// builtin table). An entry replaces the whole entry of the same model; it is not
    /// merged field by field, so an override never inherits a stale price.
    pub fn merge(&mut self, other: PricingTable) {
        for (mine, theirs) in self.models.iter_mut().zip(other.models) {
            mine.extend(theirs);
        }
        self.recompute_fallbacks();
    }

    /// Number of models across all providers.
    pub fn len(&self) -> usize {
        self.models.iter().map(HashMap::len).sum()
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
        let map = &self.models[provider.index()];
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
        self.fallback_any = max_price(self.models.iter().flat_map(HashMap::values));
        for provider in Provider::ALL {
            let map = &self.models[provider.index()];
            self.fallback[provider.index()] =
                if map.is_empty() { self.fallback_any } else { max_price(map.values()) };
        }
    }
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

/// Splits a table key into its provider and model; `None` when malformed.
fn parse_key(key: &str) -> Option<(Provider, &str)> {
    let (provider, model) = key.split_once('/')?;
    let provider = Provider::from_name(provider)?;
    let model = model.strip_prefix("models/").unwrap_or(model);
    let well_formed = !model.is_empty() && !model.chars().any(char::is_whitespace);
    well_formed.then_some((provider, model))
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
mod tests {
    use super::*;

    fn builtin() -> PricingTable {
        PricingTable::builtin().expect("builtin table parses")
    }

    fn price(table: &PricingTable, provider: &str, model: &str) -> ModelPrice {
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
            if let Some(above) = price.input_above_200k {
                assert!(above >= price.input, "{name}: long-context input below normal");
            }
            if let Some(above) = price.output_above_200k {
                assert!(above >= price.output, "{name}: long-context output below normal");
            }
            if let Some(above) = price.cached_input_above_200k {
                assert!(above >= price.cached_input_price(), "{name}: long-context cache read below normal");
                assert!(
                    above <= price.input_above_200k.unwrap_or(i64::MAX),
                    "{name}: long cache read above input"
                );
            }
            assert!(price.max_output_tokens.is_none_or(|m| m > 0), "{name}: zero max_output_tokens");
            assert_eq!(model, model.trim(), "{name}");
            assert!(!model.starts_with("models/"), "{name}");
            // The proxy resolves the entry to itself, not to some other alias.
            let (canonical, found) = table.lookup(provider.as_str(), model).unwrap();
            assert_eq!((canonical, found), (model, price));
        }
    }

    #[test]
    fn builtin_anthropic_cache_writes_follow_multipliers() {
        for (provider, model, price) in builtin().iter() {
            if provider == Provider::Anthropic {
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

    // ---- cost ----

    #[test]
    fn cost_openai_shape_with_cache_reads_and_reasoning() {
        let price = price(&builtin(), "openai", "o4-mini"); // 1.10 / 0.275 cached / 4.40
        let usage = Usage {
            input_tokens: 10_000,
            cached_input_tokens: 4_000,
            output_tokens: 3_000,
            reasoning_tokens: 2_000,
            ..Usage::default()
        };
        let cost = cost(&price, &usage);
        assert_eq!(
            cost,
            CostBreakdown {
                input: 6_600,  // 6,000 × 1.10
                cached: 1_100, // 4,000 × 0.275
                cache_write: 0,
                output: 4_400,    // 1,000 × 4.40
                reasoning: 8_800, // 2,000 × 4.40
                total: 20_900,
            }
        );
    }

    #[test]
    fn cost_anthropic_shape_with_cache_reads_and_both_cache_writes() {
        let price = price(&builtin(), "anthropic", "claude-sonnet-4-5"); // 3 / 0.30 / 3.75 / 6 / 15
        let usage = Usage {
            input_tokens: 1_000 + 20_000 + 3_000 + 2_000,
            cached_input_tokens: 20_000,
            cache_write_5m_tokens: 3_000,
            cache_write_1h_tokens: 2_000,
            output_tokens: 500,
            reasoning_tokens: 0,
        };
        let cost = cost(&price, &usage);
        assert_eq!(cost.input, 3_000);
        assert_eq!(cost.cached, 6_000);
        assert_eq!(cost.cache_write, 11_250 + 12_000);
        assert_eq!(cost.output, 7_500);
        assert_eq!(cost.reasoning, 0);
        assert_eq!(cost.total, 3_000 + 6_000 + 23_250 + 7_500);
    }

    #[test]
    fn cost_gemini_long_context_tier_applies_to_the_whole_call() {
        let price = price(&builtin(), "google", "gemini-2.5-pro");
        let at_threshold = Usage {
            input_tokens: 200_000,
            cached_input_tokens: 100_000,
            output_tokens: 1_000,
            reasoning_tokens: 400,
            ..Usage::default()
        };
        let normal = cost(&price, &at_threshold);
        assert_eq!(normal.input, 125_000); // 100,000 × 1.25
        assert_eq!(normal.cached, 12_500); // 100,000 × 0.125
        assert_eq!(normal.output, 6_000); // 600 × 10
        assert_eq!(normal.reasoning, 4_000); // 400 × 10

        let above = Usage { input_tokens: 200_001, ..at_threshold };
        let long = cost(&price, &above);
        assert_eq!(long.input, 250_003); // 100,001 × 2.50, rounded up
        assert_eq!(long.cached, 25_000); // 100,000 × 0.25
        assert_eq!(long.output, 9_000); // 600 × 15
        assert_eq!(long.reasoning, 6_000); // reasoning follows output's tier
        assert_eq!(long.total, 250_003 + 25_000 + 9_000 + 6_000);
    }

    #[test]
    fn long_context_prices_missing_from_an_entry_scale_with_input() {
        let mut price = ModelPrice::new(3_000_000, 15_000_000);
        price.cached_input = Some(300_000);
        price.input_above_200k = Some(6_000_000);
        price.output_above_200k = Some(22_500_000);
        let price = price.with_provider_defaults(Provider::Anthropic);
        let rates = price.rates(true);
        assert_eq!(rates.cached, 600_000);
        assert_eq!(rates.cache_write_5m, 7_500_000);
        assert_eq!(rates.cache_write_1h, 12_000_000);
        assert_eq!(rates.reasoning, 22_500_000);
        // Models without a tier never switch.
        let flat = ModelPrice::new(1_000_000, 2_000_000);
        let usage = Usage { input_tokens: 1_000_000, ..Usage::default() };
        assert_eq!(cost(&flat, &usage).input, 1_000_000);
    }

    #[test]
    fn cost_defaults_for_missing_prices() {
        let plain = ModelPrice::new(1_000_000, 2_000_000);
        let usage = Usage {
            input_tokens: 10,
            cached_input_tokens: 4,
            cache_write_5m_tokens: 3,
            cache_write_1h_tokens: 2,
            output_tokens: 5,
            reasoning_tokens: 5,
        };
        // Cache reads and writes at input, reasoning at output.
        let cost = cost(&plain, &usage);
        assert_eq!(
            (cost.input, cost.cached, cost.cache_write, cost.output, cost.reasoning),
            (1, 4, 5, 0, 10)
        );
    }

    #[test]
    fn cost_tolerates_inconsistent_counts() {
        let price = ModelPrice::new(1_000_000, 1_000_000);
        // More cached than input, more reasoning than output: nothing goes negative and no
        // reasoning token that was not produced is billed.
        let usage = Usage {
            input_tokens: 5,
            cached_input_tokens: 9,
            output_tokens: 3,
            reasoning_tokens: 7,
            ..Usage::default()
        };
        let cost = cost(&price, &usage);
        assert_eq!((cost.input, cost.cached, cost.output, cost.reasoning, cost.total), (0, 9, 0, 3, 12));
        // Huge counts saturate instead of overflowing.
        let huge = Usage { input_tokens: u64::MAX, output_tokens: u64::MAX, ..Usage::default() };
        assert_eq!(super::cost(&ModelPrice::new(i64::MAX, i64::MAX), &huge).total, i64::MAX);
        // Negative prices (only possible by hand) count as zero.
        assert_eq!(super::cost(&ModelPrice::new(-5, -5), &huge).total, 0);
    }

    #[test]
    fn rounding_rounds_each_component_up_and_components_sum_to_total() {
        let price = price(&builtin(), "openai", "gpt-5-nano"); // 0.05 / 0.005 / 0.40
        let one_token = Usage { input_tokens: 1, output_tokens: 1, ..Usage::default() };
        let cost = cost(&price, &one_token);
        assert_eq!((cost.input, cost.output, cost.total), (1, 1, 2));
        assert_eq!(super::cost(&price, &Usage::default()), CostBreakdown::default());

        // Pseudo-random usages over every table entry (a fixed LCG keeps it reproducible).
        let mut seed: u64 = 0x5eed;
        let mut next = |bound: u64| {
            seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            (seed >> 33) % bound
        };
        for (_, _, price) in builtin().iter() {
            for _ in 0..50 {
                let usage = Usage {
                    input_tokens: next(400_000),
                    cached_input_tokens: next(100_000),
                    cache_write_5m_tokens: next(50_000),
                    cache_write_1h_tokens: next(50_000),
                    output_tokens: next(70_000),
                    reasoning_tokens: next(70_000),
                };
                let cost = super::cost(price, &usage);
                let parts = [cost.input, cost.cached, cost.cache_write, cost.output, cost.reasoning];
                assert_eq!(parts.iter().sum::<i64>(), cost.total);
                assert!(parts.iter().all(|&p| p >= 0));
                // Never below the exact cost, and at most 1 µ$ above it per component.
                let long =
                    price.has_long_context_tier() && usage.input_tokens > LONG_CONTEXT_THRESHOLD_TOKENS;
                let r = price.rates(long);
                let reasoning = usage.reasoning_tokens.min(usage.output_tokens);
                let exact: i128 = [
                    (usage.uncached_input_tokens(), r.input),
                    (usage.cached_input_tokens, r.cached),
                    (usage.cache_write_5m_tokens, r.cache_write_5m),
                    (usage.cache_write_1h_tokens, r.cache_write_1h),
                    (usage.output_tokens - reasoning, r.output),
                    (reasoning, r.reasoning),
                ]
                .iter()
                .map(|&(t, p)| i128::from(t) * i128::from(p))
                .sum();
                let billed = i128::from(cost.total) * TOKENS_PER_PRICE_UNIT;
                assert!(billed >= exact && billed < exact + 5 * TOKENS_PER_PRICE_UNIT, "{usage:?}");
            }
        }
    }

    // ---- estimate ----

    #[test]
    fn estimate_uses_bytes_over_four_and_the_output_maximum() {
        let price = price(&builtin(), "openai", "gpt-4o"); // 2.50 / 10, max output 16,384
                                                           // 4,001 bytes → 1,001 tokens → 2,502.5 µ$ → 2,503; 1,000 output tokens → 10,000.
        assert_eq!(estimate(&price, 4_001, Some(1_000)), 2_503 + 10_000);
        // No request maximum: the model's.
        assert_eq!(estimate(&price, 0, None), 163_840);
        // A request maximum above the model's is capped.
        assert_eq!(estimate(&price, 0, Some(1_000_000)), 163_840);
        // Neither: 4,096 tokens.
        assert_eq!(estimate(&ModelPrice::new(0, 1_000_000), 0, None), 4_096);
        // Always at least 1 µ$.
        assert_eq!(estimate(&ModelPrice::new(0, 0), 1_000, None), 1);
        assert_eq!(estimate(&price, 0, Some(0)), 1);
        // Priced at the higher of output and reasoning.
        let mut reasoning = ModelPrice::new(0, 1_000_000);
        reasoning.reasoning_output = Some(3_000_000);
        assert_eq!(estimate(&reasoning, 0, Some(10)), 30);
        assert_eq!(estimate(&ModelPrice::new(i64::MAX, i64::MAX), usize::MAX, Some(u32::MAX)), i64::MAX);
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
        assert_eq!((openai.input, openai.output), (30_000_000, 75_000_000));
        let anthropic = table.fallback_price("anthropic");
        assert_eq!((anthropic.input, anthropic.output), (10_000_000, 50_000_000));
        assert_eq!(anthropic.cache_write_1h_price(), 20_000_000);
        let google = table.fallback_price("gemini");
        assert_eq!((google.input, google.output), (4_000_000, 20_000_000));
        assert_eq!(google.max_output_tokens, None);
        let any = table.fallback_price("someone-else");
        assert_eq!((any.input, any.output), (30_000_000, 75_000_000));
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
                "openai/my-finetune": {"input": 99000000, "output": 100}
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
        assert_eq!(table.fallback_price("openai").input, 99_000_000, "fallback recomputed");
    }
}
