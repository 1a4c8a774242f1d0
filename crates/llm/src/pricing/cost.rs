//! The integer-microdollar cost of one call: the settled actual ([`cost`]) and the
//! pre-call estimate ([`estimate`]). See the parent module for the rounding rule.

use serde::{Deserialize, Serialize};

use super::{ModelPrice, TOKENS_PER_PRICE_UNIT};

/// Output tokens assumed by [`estimate`] when neither the request nor the table gives a
/// maximum.
pub const DEFAULT_ESTIMATE_OUTPUT_TOKENS: u32 = 4_096;

/// Bytes per token assumed by [`estimate`]: one, a safe upper bound (no tokenizer makes
/// more tokens of a text than it has bytes), so that a densely tokenizing prompt (CJK
/// text, code) can never settle above its reservation. The whole request body is
/// counted, JSON syntax included, which errs on the side of reserving too much.
pub const ESTIMATE_BYTES_PER_TOKEN: u64 = 1;

/// Microdollars added to every estimate: a settled cost rounds each of its parts up
/// (uncached, cached, both cache writes, output, reasoning), so it can exceed the
/// rounded-up bound of its tokens by up to this much.
pub const ROUNDING_SLACK: i64 = 5;

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
    let long_context = price.is_long_context(usage.input_tokens);
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
/// - Input tokens: one per prompt byte ([`ESTIMATE_BYTES_PER_TOKEN`]), billed at the
///   highest price a prompt token of that size can be charged, a cache write included
///   (see [`Bound`]; the proxy knows from the body whether one can happen).
/// - Output tokens: the request's maximum (`max_output_tokens`), capped at the model's
///   `max_output_tokens` when the table knows it (a larger request would be refused by the
///   provider); without a request maximum the model's `max_output_tokens`; without either
///   [`DEFAULT_ESTIMATE_OUTPUT_TOKENS`]. Billed at the highest output price (reasoning
///   and the long-context tier included), since any of them may apply.
/// - Rounded up once, plus [`ROUNDING_SLACK`]: never below what [`cost`] can charge for
///   those tokens.
pub fn estimate(price: &ModelPrice, prompt_bytes: usize, max_output_tokens: Option<u32>) -> i64 {
    let bound = Bound::of(price, prompt_bytes, true);
    bound.cost(bound.output_tokens(price, max_output_tokens)).max(1)
}

/// The safe upper bound of a call's cost before it is made: no more prompt tokens than
/// the prompt has bytes, each at the highest price such a prompt can be charged, and
/// every output token at the highest output price it can be charged (reasoning
/// included). Only prices the call can reach count: the long-context tier when the
/// bound's token count is above the tier's threshold (a 200-byte prompt never reaches a
/// tier that starts at 200,000 tokens, and then neither does its output), a cache
/// write's price only when the request can cause one. A cached read's discount is never
/// assumed. What an output bound of `n` tokens can cost
/// at most is [`Bound::cost`]; the largest bound a sum pays for is [`Bound::tokens_for`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    /// `prompt tokens × input price`, in µ$ × 1,000,000 (exact).
    input_exact: i128,
    /// µ$ per million output tokens.
    pub output_price: i64,
}

impl Bound {
    /// `cache_writes`: the request can cause a cache write (Anthropic's `cache_control`,
    /// Bedrock's `cachePoint`, Gemini's `cachedContent`; see
    /// `usage::may_write_cache`).
    pub fn of(price: &ModelPrice, prompt_bytes: usize, cache_writes: bool) -> Self {
        let prompt_bytes = u64::try_from(prompt_bytes).unwrap_or(u64::MAX);
        let input_tokens = prompt_bytes.div_ceil(ESTIMATE_BYTES_PER_TOKEN);
        // The prompt's tokens are at most the bound's, so a tier above it is out of reach.
        let rates = price.rates(price.is_long_context(input_tokens));
        let writes = if cache_writes { [rates.cache_write_5m, rates.cache_write_1h] } else { [0, 0] };
        let input_price = [rates.input].into_iter().chain(writes).fold(0, i64::max);
        let output_price = rates.output.max(rates.reasoning);
        // u64::MAX × i64::MAX still fits in i128.
        Bound { input_exact: i128::from(input_tokens) * i128::from(input_price), output_price }
    }

    /// The output tokens an estimate counts: the request's maximum capped at the model's,
    /// else the model's, else [`DEFAULT_ESTIMATE_OUTPUT_TOKENS`].
    pub fn output_tokens(&self, price: &ModelPrice, requested: Option<u32>) -> u32 {
        match (requested, price.max_output_tokens) {
            (Some(requested), Some(model_max)) => requested.min(model_max),
            (Some(requested), None) => requested,
            (None, Some(model_max)) => model_max,
            (None, None) => DEFAULT_ESTIMATE_OUTPUT_TOKENS,
        }
    }

    /// The most a call with this prompt and an output bound of `output_tokens` can settle
    /// at, in µ$.
    pub fn cost(&self, output_tokens: u32) -> i64 {
        let output = i128::from(output_tokens) * i128::from(self.output_price.max(0));
        let exact = self.input_exact.saturating_add(output);
        clamp_to_i64(ceil_div(exact, TOKENS_PER_PRICE_UNIT)).saturating_add(ROUNDING_SLACK)
    }

    /// The largest output bound whose [`cost`](Self::cost) is at most `amount` µ$;
    /// `None` when not even the prompt fits. A free output pays for `u32::MAX` tokens.
    pub fn tokens_for(&self, amount: i64) -> Option<u32> {
        let room = (i128::from(amount) - i128::from(ROUNDING_SLACK)) * TOKENS_PER_PRICE_UNIT;
        let room = room.saturating_sub(self.input_exact);
        if room < 0 {
            return None;
        }
        if self.output_price <= 0 {
            return Some(u32::MAX);
        }
        Some(u32::try_from(room / i128::from(self.output_price)).unwrap_or(u32::MAX))
    }
}

/// `ceil(Σ tokens × price / 1,000,000)`, exact in `i128`, negative prices counted as zero,
/// saturating at `i64::MAX`.
pub(super) fn micros(parts: &[(u64, i64)]) -> i64 {
    let mut exact: i128 = 0;
    for &(tokens, price) in parts {
        // u64::MAX × i64::MAX still fits in i128; only the sum can overflow.
        let product = i128::from(tokens) * i128::from(price.max(0));
        exact = exact.saturating_add(product);
    }
    clamp_to_i64(ceil_div(exact, TOKENS_PER_PRICE_UNIT))
}

/// Ceiling division for a non-negative numerator and a positive denominator.
pub(super) fn ceil_div(numerator: i128, denominator: i128) -> i128 {
    numerator / denominator + i128::from(numerator % denominator != 0)
}

pub(super) fn clamp_to_i64(value: i128) -> i64 {
    i64::try_from(value).unwrap_or(if value < 0 { i64::MIN } else { i64::MAX })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::pricing::table::tests::{builtin, price};
    use crate::pricing::Provider;

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
        price.input_long_context = Some(6_000_000);
        price.output_long_context = Some(22_500_000);
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
                let long = price.is_long_context(usage.input_tokens);
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

    /// A long-context tier applies only to a prompt bound above its threshold: just
    /// below it, the prompt and the output are priced in the normal tier; just above,
    /// both in the long one. (Claude Sonnet 4.5: $3 / $15, above 200,000 prompt tokens
    /// $6 / $22.50; a 1-hour cache write at 2× input.)
    #[test]
    fn a_bound_is_priced_at_the_tier_its_size_can_reach() {
        let sonnet = price(&builtin(), "anthropic", "claude-sonnet-4-5");
        let below = Bound::of(&sonnet, 200_000, false);
        assert_eq!(below.cost(0), 600_000 + ROUNDING_SLACK, "200,000 tokens at $3");
        assert_eq!(below.output_price, 15_000_000);
        let above = Bound::of(&sonnet, 200_001, false);
        assert_eq!(above.cost(0), 1_200_006 + ROUNDING_SLACK, "200,001 tokens at $6");
        assert_eq!(above.output_price, 22_500_000);
        // A request that can write the cache: the 1-hour write price of the tier reached.
        assert_eq!(Bound::of(&sonnet, 200_000, true).cost(0), 1_200_000 + ROUNDING_SLACK);
        assert_eq!(Bound::of(&sonnet, 200_001, true).cost(0), 2_400_012 + ROUNDING_SLACK);
        // The call: a 200-byte prompt and 17 output tokens, about $0.0009, not
        // $0.003 at the long tier's and the cache write's prices.
        assert_eq!(Bound::of(&sonnet, 200, false).cost(17), 600 + 255 + ROUNDING_SLACK);
        // Gemini 2.5 Pro ($1.25 / $10; $2.50 / $15 above 200,000): the same edge.
        let gemini = price(&builtin(), "google", "gemini-2.5-pro");
        assert_eq!(Bound::of(&gemini, 200_000, false).output_price, 10_000_000);
        assert_eq!(Bound::of(&gemini, 200_001, false).output_price, 15_000_000);
    }

    #[test]
    fn estimate_uses_a_token_per_byte_and_the_output_maximum() {
        let price = price(&builtin(), "openai", "gpt-4o"); // 2.50 / 10, max output 16,384
        let slack = ROUNDING_SLACK;
        // 4,001 bytes → 4,001 tokens → 10,002.5 µ$; 1,000 output tokens → 10,000; rounded up once.
        assert_eq!(estimate(&price, 4_001, Some(1_000)), 20_003 + slack);
        // No request maximum: the model's.
        assert_eq!(estimate(&price, 0, None), 163_840 + slack);
        // A request maximum above the model's is capped.
        assert_eq!(estimate(&price, 0, Some(1_000_000)), 163_840 + slack);
        // Neither: 4,096 tokens.
        assert_eq!(estimate(&ModelPrice::new(0, 1_000_000), 0, None), 4_096 + slack);
        // Free: only the rounding slack.
        assert_eq!(estimate(&ModelPrice::new(0, 0), 1_000, None), slack);
        assert_eq!(estimate(&price, 0, Some(0)), slack);
        // Priced at the higher of output and reasoning.
        let mut reasoning = ModelPrice::new(0, 1_000_000);
        reasoning.reasoning_output = Some(3_000_000);
        assert_eq!(estimate(&reasoning, 0, Some(10)), 30 + slack);
        // The prompt at its highest price: a cache write above the plain input.
        let mut cache = ModelPrice::new(1_000_000, 0);
        cache.cache_write_1h = Some(2_000_000);
        assert_eq!(estimate(&cache, 10, Some(0)), 20 + slack);
        assert_eq!(Bound::of(&cache, 10, false).cost(0), 10 + slack, "no cache write, no write price");
        assert_eq!(estimate(&ModelPrice::new(i64::MAX, i64::MAX), usize::MAX, Some(u32::MAX)), i64::MAX);
    }
}
