//! Table-driven checks of the shipped prices, one case list per model family: plain
//! calls, cache reads, cache writes (5 minutes and 1 hour), reasoning, and prompts just
//! at and just above the long-context threshold. Every expected figure is worked out by
//! hand from the provider's price page (see docs/pricing.md), not from the table.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::table::tests::builtin;
use super::{cost, Usage};

/// One call: input (all prompt tokens), cache reads, 5m writes, 1h writes, output,
/// reasoning.
type Tokens = (u64, u64, u64, u64, u64, u64);

fn usage((input, cached, w5, w1, output, reasoning): Tokens) -> Usage {
    Usage {
        input_tokens: input,
        cached_input_tokens: cached,
        cache_write_5m_tokens: w5,
        cache_write_1h_tokens: w1,
        output_tokens: output,
        reasoning_tokens: reasoning,
    }
}

/// Checks `(provider, model, tokens, expected µ$)` cases against the builtin table.
fn check(cases: &[(&str, &str, Tokens, i64)]) {
    let table = builtin();
    for &(provider, model, tokens, expected) in cases {
        let (_, price) =
            table.lookup(provider, model).unwrap_or_else(|| panic!("{provider}/{model} unpriced"));
        assert_eq!(cost(price, &usage(tokens)).total, expected, "{provider}/{model} {tokens:?}");
    }
}

/// 100,000 prompt and 100,000 output tokens, nothing cached.
const PLAIN: Tokens = (100_000, 0, 0, 0, 100_000, 0);

#[test]
fn claude_opus_4_and_4_1() {
    for model in ["claude-opus-4-1", "claude-opus-4-1-20250805", "claude-opus-4-0", "claude-opus-4-20250514"]
    {
        check(&[
            ("anthropic", model, PLAIN, 1_500_000 + 7_500_000),
            // 1,000 uncached × $15 + 10,000 reads × $1.50 + 2,000 × $18.75 + 3,000 × $30.
            ("anthropic", model, (16_000, 10_000, 2_000, 3_000, 0, 0), 15_000 + 15_000 + 37_500 + 90_000),
            // Thinking is billed as output.
            ("anthropic", model, (0, 0, 0, 0, 1_000, 1_000), 75_000),
            // No long-context tier.
            ("anthropic", model, (300_000, 0, 0, 0, 0, 0), 4_500_000),
        ]);
    }
}

#[test]
fn claude_sonnet_4_and_4_5_long_context() {
    for model in
        ["claude-sonnet-4-20250514", "claude-sonnet-4-0", "claude-sonnet-4-5", "claude-sonnet-4-5-20250929"]
    {
        check(&[
            ("anthropic", model, PLAIN, 300_000 + 1_500_000),
            ("anthropic", model, (16_000, 10_000, 2_000, 3_000, 0, 0), 3_000 + 3_000 + 7_500 + 18_000),
            // At the threshold: 200,000 prompt tokens, reads and writes included, flat rates.
            // 100,000 × $3 + 50,000 × $0.30 + 30,000 × $3.75 + 20,000 × $6 + 1,000 × $15.
            (
                "anthropic",
                model,
                (200_000, 50_000, 30_000, 20_000, 1_000, 0),
                300_000 + 15_000 + 112_500 + 120_000 + 15_000,
            ),
            // One more uncached token: every token at $6 / $0.60 / $7.50 / $12 / $22.50.
            (
                "anthropic",
                model,
                (200_001, 50_000, 30_000, 20_000, 1_000, 0),
                600_006 + 30_000 + 225_000 + 240_000 + 22_500,
            ),
            // The threshold counts cache reads: 150,001 reads push a 50,000 prompt over.
            ("anthropic", model, (200_001, 150_001, 0, 0, 0, 0), 300_000 + 90_001),
        ]);
    }
}

#[test]
fn claude_sonnet_3_7_and_haiku_3_5_and_3() {
    for model in ["claude-3-7-sonnet-20250219", "claude-3-7-sonnet-latest"] {
        check(&[
            ("anthropic", model, PLAIN, 1_800_000),
            ("anthropic", model, (16_000, 10_000, 2_000, 3_000, 0, 0), 3_000 + 3_000 + 7_500 + 18_000),
            ("anthropic", model, (300_000, 0, 0, 0, 0, 0), 900_000),
        ]);
    }
    for model in ["claude-3-5-haiku-20241022", "claude-3-5-haiku-latest"] {
        check(&[
            ("anthropic", model, PLAIN, 80_000 + 400_000),
            // 1,000 × $0.80 + 10,000 × $0.08 + 2,000 × $1 + 3,000 × $1.60.
            ("anthropic", model, (16_000, 10_000, 2_000, 3_000, 0, 0), 800 + 800 + 2_000 + 4_800),
        ]);
    }
    check(&[
        ("anthropic", "claude-3-haiku-20240307", PLAIN, 25_000 + 125_000),
        // Haiku 3's cache writes are $0.30 / $0.50, not 1.25× / 2× of $0.25.
        (
            "anthropic",
            "claude-3-haiku-20240307",
            (16_000, 10_000, 2_000, 3_000, 0, 0),
            250 + 300 + 600 + 1_500,
        ),
    ]);
}

#[test]
fn claude_4_5_and_later_keep_their_prices() {
    check(&[
        ("anthropic", "claude-opus-4-5-20251101", PLAIN, 3_000_000),
        (
            "anthropic",
            "claude-haiku-4-5-20251001",
            (16_000, 10_000, 2_000, 3_000, 0, 0),
            1_000 + 1_000 + 2_500 + 6_000,
        ),
        ("anthropic", "claude-sonnet-4-6", (300_000, 0, 0, 0, 0, 0), 900_000),
        // Haiku 5.5 bills prompts over 100,000 tokens at 5×.
        ("anthropic", "claude-haiku-5-5", (100_000, 0, 0, 0, 1_000, 0), 10_000 + 500),
        ("anthropic", "claude-haiku-5-5", (100_001, 0, 0, 0, 1_000, 0), 50_001 + 2_500),
    ]);
}

#[test]
fn openai_gpt_4o_and_4_1() {
    // 10,000 prompt tokens of which 4,000 cached, 1,000 output.
    let cached = (10_000, 4_000, 0, 0, 1_000, 0);
    check(&[
        ("openai", "gpt-4o", cached, 15_000 + 5_000 + 10_000),
        ("openai", "gpt-4o-2024-11-20", cached, 15_000 + 5_000 + 10_000),
        ("openai", "gpt-4o-2024-05-13", cached, 50_000 + 15_000),
        ("openai", "gpt-4o-mini", cached, 900 + 300 + 600),
        ("openai", "gpt-4o-mini-2024-07-18", cached, 900 + 300 + 600),
        ("openai", "gpt-4.1", cached, 12_000 + 2_000 + 8_000),
        ("openai", "gpt-4.1-mini", cached, 2_400 + 400 + 1_600),
        ("openai", "gpt-4.1-mini-2025-04-14", cached, 2_400 + 400 + 1_600),
        ("openai", "gpt-4.1-nano", cached, 600 + 100 + 400),
        // No long-context tier.
        ("openai", "gpt-4.1", (500_000, 0, 0, 0, 0, 0), 1_000_000),
    ]);
}

#[test]
fn openai_reasoning_models() {
    // 10,000 prompt (4,000 cached), 3,000 output of which 2,000 reasoning.
    let call = (10_000, 4_000, 0, 0, 3_000, 2_000);
    check(&[
        ("openai", "o1", call, 90_000 + 30_000 + 180_000),
        ("openai", "o1-2024-12-17", call, 90_000 + 30_000 + 180_000),
        ("openai", "o3", call, 12_000 + 2_000 + 24_000),
        ("openai", "o3-mini", call, 6_600 + 2_200 + 13_200),
        ("openai", "o3-mini-2025-01-31", call, 6_600 + 2_200 + 13_200),
        ("openai", "o4-mini", call, 6_600 + 1_100 + 13_200),
        ("openai", "o4-mini-2025-04-16", call, 6_600 + 1_100 + 13_200),
    ]);
}

/// Every model OpenAI's Responses API serves (the OpenAI pricing page's text models,
/// checked 2026-12-07), dated snapshots included. Each has its own price in the table:
/// none is charged the fallback.
const RESPONSES_MODELS: &[&str] = &[
    "chat-latest",
    "computer-use-preview",
    "computer-use-preview-2025-03-11",
    "daybreak-blue-latest",
    "daybreak-red-latest",
    "gpt-daybreak-blue-latest",
    "gpt-daybreak-red-latest",
    "gpt-4o",
    "gpt-4o-2024-05-13",
    "gpt-4o-2024-08-06",
    "gpt-4o-2024-11-20",
    "gpt-4o-mini",
    "gpt-4o-mini-2024-07-18",
    "gpt-4.1",
    "gpt-4.1-2025-04-14",
    "gpt-4.1-mini",
    "gpt-4.1-mini-2025-04-14",
    "gpt-4.1-nano",
    "gpt-4.1-nano-2025-04-14",
    "gpt-5",
    "gpt-5-2025-08-07",
    "gpt-5-chat",
    "gpt-5-chat-latest",
    "gpt-5-mini",
    "gpt-5-mini-2025-08-07",
    "gpt-5-nano",
    "gpt-5-nano-2025-08-07",
    "gpt-5-pro",
    "gpt-5-pro-2025-10-06",
    "gpt-5-codex",
    "gpt-5.1",
    "gpt-5.1-2025-11-13",
    "gpt-5.1-chat-latest",
    "gpt-5.1-codex",
    "gpt-5.1-codex-max",
    "gpt-5.1-codex-mini",
    "gpt-5.2",
    "gpt-5.2-2025-12-11",
    "gpt-5.2-chat-latest",
    "gpt-5.2-codex",
    "gpt-5.2-pro",
    "gpt-5.2-pro-2025-12-11",
    "gpt-5.3-chat-latest",
    "gpt-5.3-codex",
    "gpt-5.4",
    "gpt-5.4-2026-03-05",
    "gpt-5.4-mini",
    "gpt-5.4-mini-2026-03-17",
    "gpt-5.4-nano",
    "gpt-5.4-nano-2026-03-17",
    "gpt-5.4-pro",
    "gpt-5.4-pro-2026-03-05",
    "gpt-5.5",
    "gpt-5.5-2026-04-23",
    "gpt-5.5-pro",
    "gpt-5.5-pro-2026-04-23",
    "gpt-5.6",
    "gpt-5.6-cyber",
    "gpt-5.6-luna",
    "gpt-5.6-sol",
    "gpt-5.6-terra",
    "gpt-6-astra",
    "gpt-6-astra-law",
    "gpt-6-cyber",
    "gpt-6-luna",
    "gpt-6-sol",
    "gpt-6.1-sol",
    "gpt-6.1-terra",
    "o1",
    "o1-2024-12-17",
    "o1-pro",
    "o1-pro-2025-03-19",
    "o3",
    "o3-2025-04-16",
    "o3-mini",
    "o3-mini-2025-01-31",
    "o3-pro",
    "o3-pro-2025-06-10",
    "o3-deep-research",
    "o3-deep-research-2025-06-26",
    "o4-mini",
    "o4-mini-2025-04-16",
    "o4-mini-deep-research",
    "o4-mini-deep-research-2025-06-26",
    "codex-mini-latest",
];

/// Responses models the table leaves unpriced on purpose (audio tokens cost more than the
/// text rates the table can say), with their highest published price per million tokens
/// (input, output): the fallback must charge at least that.
const RESPONSES_UNPRICED: &[(&str, i64, i64)] = &[
    ("gpt-audio", 32_000_000, 64_000_000),
    ("gpt-audio-2025-08-28", 32_000_000, 64_000_000),
    ("gpt-audio-mini", 10_000_000, 20_000_000),
    ("gpt-audio-mini-2025-10-06", 10_000_000, 20_000_000),
    ("gpt-audio-mini-2025-12-15", 10_000_000, 20_000_000),
];

#[test]
fn every_model_of_the_responses_api_is_priced_and_no_unknown_one_below_its_price() {
    let table = builtin();
    let unpriced: Vec<&str> =
        RESPONSES_MODELS.iter().copied().filter(|m| table.lookup("openai", m).is_none()).collect();
    assert!(unpriced.is_empty(), "charged the fallback: {unpriced:?}");
    let fallback = table.fallback_price("openai");
    for &(model, input, output) in RESPONSES_UNPRICED {
        assert!(table.lookup("openai", model).is_none(), "{model} is priced now: move it");
        assert!(fallback.input >= input && fallback.output >= output, "{model}");
    }
    // The fallback is no lower than any model the Responses API serves.
    for model in RESPONSES_MODELS {
        let (_, price) = table.lookup("openai", model).unwrap();
        let call = usage((10_000, 0, 0, 0, 2_000, 0));
        assert!(cost(&fallback, &call).total >= cost(price, &call).total, "{model}");
    }
}

#[test]
fn openai_responses_only_models() {
    // 10,000 prompt tokens (4,000 cached where the model has a cache price), 2,000 output.
    let call = (10_000, 4_000, 0, 0, 2_000, 1_000);
    check(&[
        // $150 / $600, no cache discount: the example, 2,700,000 µ$ uncached.
        ("openai", "o1-pro", (10_000, 0, 0, 0, 2_000, 0), 1_500_000 + 1_200_000),
        ("openai", "o1-pro-2025-03-19", call, 1_500_000 + 1_200_000),
        ("openai", "o3-pro", call, 200_000 + 160_000),
        ("openai", "gpt-5-pro", call, 150_000 + 240_000),
        ("openai", "gpt-5.2-pro", call, 210_000 + 336_000),
        ("openai", "gpt-5.4-pro", call, 300_000 + 360_000),
        // Above 272,000 prompt tokens: $60 / $270 for the whole call.
        ("openai", "gpt-5.5-pro", (272_001, 0, 0, 0, 1_000, 0), 16_320_060 + 270_000),
        // $10 / $2.50 cached / $40.
        ("openai", "o3-deep-research", call, 60_000 + 10_000 + 80_000),
        ("openai", "o4-mini-deep-research", call, 12_000 + 2_000 + 16_000),
        // $1.25 / $0.125 / $10; mini $0.25 / $0.025 / $2; 5.2 and 5.3 $1.75 / $0.175 / $14.
        ("openai", "gpt-5-codex", call, 7_500 + 500 + 20_000),
        ("openai", "gpt-5.1-codex-mini", call, 1_500 + 100 + 4_000),
        ("openai", "gpt-5.3-codex", call, 10_500 + 700 + 28_000),
        // $1.50 / $0.375 / $6.
        ("openai", "codex-mini-latest", call, 9_000 + 1_500 + 12_000),
    ]);
}

#[test]
fn openai_gpt_5_4_and_5_5_long_context_above_272k() {
    check(&[
        // 272,000 prompt tokens (72,000 cached): flat $2.50 / $0.25 / $15.
        ("openai", "gpt-5.4", (272_000, 72_000, 0, 0, 1_000, 500), 500_000 + 18_000 + 15_000),
        // Above: $5 / $0.50 / $22.50 for the whole call, reasoning included.
        ("openai", "gpt-5.4-2026-03-05", (272_001, 72_000, 0, 0, 1_000, 500), 1_000_005 + 36_000 + 22_500),
        ("openai", "gpt-5.5", (272_000, 0, 0, 0, 1_000, 0), 1_360_000 + 30_000),
        ("openai", "gpt-5.5", (272_001, 0, 0, 0, 1_000, 0), 2_720_010 + 45_000),
        // gpt-5 has no tier.
        ("openai", "gpt-5", (400_000, 0, 0, 0, 0, 0), 500_000),
    ]);
}

#[test]
fn gemini_2_0_and_2_5() {
    // 10,000 prompt (4,000 cached), 3,000 output of which 2,000 thinking.
    let call = (10_000, 4_000, 0, 0, 3_000, 2_000);
    check(&[
        ("google", "gemini-2.0-flash", call, 600 + 100 + 1_200),
        ("google", "gemini-2.0-flash-001", call, 600 + 100 + 1_200),
        // Flash-Lite 2.0 has no cache discount.
        ("google", "gemini-2.0-flash-lite", call, 750 + 900),
        ("google", "gemini-2.0-flash-lite-001", call, 750 + 900),
        ("google", "gemini-2.5-flash", call, 1_800 + 120 + 7_500),
        ("google", "models/gemini-2.5-flash-preview-09-2025", call, 1_800 + 120 + 7_500),
        ("google", "gemini-2.5-flash-lite", call, 600 + 40 + 1_200),
        ("google", "gemini-2.5-pro", call, 7_500 + 500 + 30_000),
        // Pro's tier: prompt (cached included) above 200,000.
        ("google", "gemini-2.5-pro", (200_000, 100_000, 0, 0, 1_000, 400), 125_000 + 12_500 + 10_000),
        ("google", "gemini-2.5-pro", (200_001, 100_000, 0, 0, 1_000, 400), 250_003 + 25_000 + 15_000),
        // Flash has none.
        ("google", "gemini-2.5-flash", (300_000, 0, 0, 0, 0, 0), 90_000),
    ]);
}

#[test]
fn openai_embedding_models() {
    // 1,000,000 input tokens: the per-million price itself; 1,234 tokens rounded up.
    check(&[
        ("openai", "text-embedding-3-small", (1_000_000, 0, 0, 0, 0, 0), 20_000),
        ("openai", "text-embedding-3-large", (1_000_000, 0, 0, 0, 0, 0), 130_000),
        ("openai", "text-embedding-ada-002", (1_000_000, 0, 0, 0, 0, 0), 100_000),
        ("openai", "text-embedding-3-small", (1_234, 0, 0, 0, 0, 0), 25),
    ]);
}

#[test]
fn openai_builtin_tools_per_call() {
    use super::Provider;
    let table = builtin();
    let price = |tool| table.builtin_tool_price(Provider::OpenAi, tool);
    // $10 per 1,000 web searches, $2.50 per 1,000 file searches, $0.03 per container.
    assert_eq!(price("web_search_call"), Some(10_000));
    assert_eq!(price("file_search_call"), Some(2_500));
    assert_eq!(price("code_interpreter_call"), Some(30_000));
    assert_eq!(price("mcp_call"), Some(0), "remote MCP: tokens only, priced at 0 on purpose");
    assert_eq!(price("image_generation_call"), None, "no per-call price: the proxy tags it unpriced");
    assert_eq!(table.builtin_tool_price(Provider::Anthropic, "web_search_call"), None);
}
