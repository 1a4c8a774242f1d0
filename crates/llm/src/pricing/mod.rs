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
//! - Long-context tier: when a model has any `*_long_context` price and the prompt of
//!   one call (all input tokens, cache reads and cache writes included, which is how
//!   Anthropic, Google and OpenAI size a prompt for their tiers) exceeds the entry's
//!   `long_context_threshold` (default 200,000 tokens), every token of that call is billed
//!   at the higher tier, as the providers bill. Tier prices missing from the entry are
//!   derived by scaling the normal-tier price by the same ratio as the input (cache
//!   read/writes) or output (reasoning) price, rounded up, because the providers scale
//!   those prices with the tier.
//!
//! # Unknown models
//!
//! A model missing from the table is charged at [`PricingTable::fallback_price`], the
//! highest price of each kind among the provider's known models, both for the
//! reservation estimate and for the usage the provider reports; `unpriced` notes each
//! such model once per process. docs/pricing.md is the operator's guide.

mod cost;
#[cfg(test)]
mod families;
mod price;
mod table;
pub mod unpriced;

pub use cost::{
    cost, estimate, Bound, CostBreakdown, Usage, DEFAULT_ESTIMATE_OUTPUT_TOKENS, ESTIMATE_BYTES_PER_TOKEN,
    ROUNDING_SLACK,
};
pub use price::{ModelPrice, DEFAULT_LONG_CONTEXT_THRESHOLD};
pub use table::{PricingError, PricingTable};

/// Prices are quoted per this many tokens.
pub(crate) const TOKENS_PER_PRICE_UNIT: i128 = 1_000_000;

/// How many providers there are (the length of [`Provider::ALL`]).
pub const PROVIDERS: usize = 6;

/// The model providers the proxy routes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Chat completions (`/v1/chat/completions`).
    OpenAi,
    /// Messages (`/v1/messages`).
    Anthropic,
    /// Generative content (`/v1beta/models/{model}:generateContent`).
    Google,
    /// Amazon Bedrock's runtime API (Converse, and InvokeModel in the model's format).
    Bedrock,
    /// Google Vertex AI (Gemini and Anthropic models under `publishers/`).
    Vertex,
    /// Azure OpenAI (deployment and v1 paths, the OpenAI formats).
    Azure,
}

impl Provider {
    /// Every provider, in table order.
    pub const ALL: [Provider; PROVIDERS] = [
        Provider::OpenAi,
        Provider::Anthropic,
        Provider::Google,
        Provider::Bedrock,
        Provider::Vertex,
        Provider::Azure,
    ];

    /// Parses a provider name: `openai`, `anthropic`, `google` or its alias `gemini`,
    /// `bedrock`, `vertex`, `azure`, ignoring ASCII case. Never allocates.
    pub fn from_name(name: &str) -> Option<Self> {
        if name.eq_ignore_ascii_case("gemini") {
            return Some(Provider::Google);
        }
        Provider::ALL.into_iter().find(|p| name.eq_ignore_ascii_case(p.as_str()))
    }

    /// The canonical name, as used in table keys and cost events.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
            Provider::Google => "google",
            Provider::Bedrock => "bedrock",
            Provider::Vertex => "vertex",
            Provider::Azure => "azure",
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Provider::OpenAi => 0,
            Provider::Anthropic => 1,
            Provider::Google => 2,
            Provider::Bedrock => 3,
            Provider::Vertex => 4,
            Provider::Azure => 5,
        }
    }
}
