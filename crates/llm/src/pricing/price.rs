//! The prices of one model and the rates that apply to one call.

use serde::{Deserialize, Serialize};

use super::cost::{ceil_div, clamp_to_i64};
use super::Provider;

/// Prompt size above which a model's long-context prices apply, when its entry names
/// no `long_context_threshold`: Anthropic's and Google's 200,000 tokens.
pub const DEFAULT_LONG_CONTEXT_THRESHOLD: u64 = 200_000;

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
    /// Prompt size (tokens) above which the long-context prices apply to the whole call;
    /// [`DEFAULT_LONG_CONTEXT_THRESHOLD`] when the entry has a tier but no threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub long_context_threshold: Option<u64>,
    /// Uncached input in the long-context tier. (`input_above_200k` is accepted as an
    /// older name.)
    #[serde(default, alias = "input_above_200k", skip_serializing_if = "Option::is_none")]
    pub input_long_context: Option<i64>,
    /// Cache reads in the long-context tier.
    #[serde(default, alias = "cached_input_above_200k", skip_serializing_if = "Option::is_none")]
    pub cached_input_long_context: Option<i64>,
    /// Output in the long-context tier.
    #[serde(default, alias = "output_above_200k", skip_serializing_if = "Option::is_none")]
    pub output_long_context: Option<i64>,
    /// The most output tokens one call can produce, used by [`super::estimate`].
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
            long_context_threshold: None,
            input_long_context: None,
            cached_input_long_context: None,
            output_long_context: None,
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
        self.input_long_context.is_some()
            || self.cached_input_long_context.is_some()
            || self.output_long_context.is_some()
    }

    /// Whether a call whose prompt has `prompt_tokens` tokens is billed in the
    /// long-context tier: the model has one and the prompt is above its threshold.
    /// `prompt_tokens` is the prompt as the providers define it for their tiers: every
    /// input token, cache reads and cache writes included (`Usage::input_tokens`).
    pub fn is_long_context(&self, prompt_tokens: u64) -> bool {
        self.has_long_context_tier()
            && prompt_tokens > self.long_context_threshold.unwrap_or(DEFAULT_LONG_CONTEXT_THRESHOLD)
    }

    /// Fills the provider-specific defaults that `ModelPrice`'s own accessors cannot know.
    pub fn with_provider_defaults(mut self, provider: Provider) -> Self {
        if provider == Provider::Anthropic {
            // Anthropic bills a 5-minute cache write at 1.25× and a 1-hour one at 2× input.
            let input = i128::from(self.input);
            self.cache_write_5m.get_or_insert_with(|| clamp_to_i64(ceil_div(input * 5, 4)));
            self.cache_write_1h.get_or_insert_with(|| clamp_to_i64(input * 2));
        }
        self
    }

    /// Every price of the entry with its field name, for validation.
    pub(super) fn named_prices(&self) -> [(&'static str, Option<i64>); 9] {
        [
            ("input", Some(self.input)),
            ("cached_input", self.cached_input),
            ("cache_write_5m", self.cache_write_5m),
            ("cache_write_1h", self.cache_write_1h),
            ("output", Some(self.output)),
            ("reasoning_output", self.reasoning_output),
            ("input_long_context", self.input_long_context),
            ("cached_input_long_context", self.cached_input_long_context),
            ("output_long_context", self.output_long_context),
        ]
    }

    /// The prices that apply to one call, in the normal or the long-context tier.
    pub(super) fn rates(&self, long_context: bool) -> Rates {
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
        let input = self.input_long_context.unwrap_or(self.input);
        let output = self.output_long_context.unwrap_or(self.output);
        Rates {
            input,
            cached: self
                .cached_input_long_context
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
pub(super) struct Rates {
    pub(super) input: i64,
    pub(super) cached: i64,
    pub(super) cache_write_5m: i64,
    pub(super) cache_write_1h: i64,
    pub(super) output: i64,
    pub(super) reasoning: i64,
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
