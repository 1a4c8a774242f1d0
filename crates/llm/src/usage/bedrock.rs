//! Amazon Bedrock's own formats: the Converse API (and Amazon Nova's InvokeModel body,
//! which has the same shape), and Bedrock's model ids.
//!
//! A Converse answer reports `usage: { inputTokens, outputTokens, cacheReadInputTokens,
//! cacheWriteInputTokens }`, `inputTokens` without the cached ones (as Anthropic's
//! `input_tokens`); a cache write is billed at the 5-minute price, the only one Bedrock
//! reports.

use serde::Deserialize;

use crate::pricing::Usage;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ConverseUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_write_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WithUsage {
    usage: Option<ConverseUsage>,
}

/// The usage of a whole Converse (or Nova InvokeModel) answer.
pub fn converse_usage(body: &[u8]) -> Option<Usage> {
    let u = serde_json::from_slice::<WithUsage>(body).ok()?.usage?;
    let cached = u.cache_read_input_tokens.unwrap_or(0);
    let written = u.cache_write_input_tokens.unwrap_or(0);
    Some(Usage {
        input_tokens: u.input_tokens.unwrap_or(0).saturating_add(cached).saturating_add(written),
        cached_input_tokens: cached,
        cache_write_5m_tokens: written,
        cache_write_1h_tokens: 0,
        output_tokens: u.output_tokens.unwrap_or(0),
        reasoning_tokens: 0,
    })
}

/// The model a Bedrock path's `modelId` names, as priced: percent-decoded, and an ARN
/// (`arn:aws:bedrock:{region}:{account}:inference-profile/us.anthropic.…` or
/// `…::foundation-model/anthropic.…`) reduced to the id after its last `/`. Base ids,
/// versioned ids (`…-v1:0`) and cross-region profiles (`us.`, `eu.`, `apac.`,
/// `global.`) are priced as they are; the table lists the profiles it prices apart.
pub fn bedrock_model(path_id: &str) -> String {
    let decoded = percent_encoding::percent_decode_str(path_id).decode_utf8_lossy();
    match decoded.strip_prefix("arn:") {
        Some(arn) => arn.rsplit('/').next().unwrap_or(arn).to_owned(),
        None => decoded.into_owned(),
    }
}

/// Whether an InvokeModel body for `model` is in Anthropic's messages format (Claude
/// on Bedrock), rather than Converse's shape (Amazon Nova).
pub fn invokes_anthropic(model: &str) -> bool {
    model.split('.').any(|part| part == "anthropic")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converse_usage_counts_cache_reads_and_writes_in_the_prompt() {
        let body = br#"{"output":{},"usage":{"inputTokens":100,"outputTokens":20,"totalTokens":420,
            "cacheReadInputTokens":200,"cacheWriteInputTokens":100}}"#;
        let u = converse_usage(body).unwrap();
        assert_eq!((u.input_tokens, u.cached_input_tokens, u.cache_write_5m_tokens), (400, 200, 100));
        assert_eq!(u.output_tokens, 20);
        assert_eq!(converse_usage(br#"{"output":{}}"#), None);
    }

    #[test]
    fn model_ids_as_bedrock_takes_them() {
        let id = "anthropic.claude-sonnet-4-5-20250929-v1:0";
        assert_eq!(bedrock_model(id), id);
        assert_eq!(bedrock_model("us.anthropic.claude-sonnet-4-5-20250929-v1%3A0"), format!("us.{id}"));
        let arn = "arn%3Aaws%3Abedrock%3Aus-east-1%3A123456789012%3Ainference-profile%2Fglobal.anthropic.claude-sonnet-4-5-20250929-v1%3A0";
        assert_eq!(bedrock_model(arn), format!("global.{id}"));
        assert_eq!(
            bedrock_model("arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-pro-v1:0"),
            "amazon.nova-pro-v1:0"
        );
        assert!(invokes_anthropic("eu.anthropic.claude-haiku-4-5-20251001-v1:0"));
        assert!(!invokes_anthropic("us.amazon.nova-lite-v1:0"));
    }
}
