//! Gemini generateContent: usage of a whole body, and of a stream as it passes.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::{remember, remember_reason, FinishReason, ProviderUsage, Text, ToolCall};
use crate::pricing::Usage;

// ---------------------------------------------------------------------------------------
// Gemini generateContent
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(rename_all = "camelCase")]
struct GeminiRawUsage {
    /// Includes cached content.
    prompt_token_count: Option<u64>,
    candidates_token_count: Option<u64>,
    cached_content_token_count: Option<u64>,
    thoughts_token_count: Option<u64>,
    tool_use_prompt_token_count: Option<u64>,
}

impl GeminiRawUsage {
    /// Tool-use prompt tokens are billed as input, thinking tokens as output (and reported
    /// as reasoning); `candidatesTokenCount` excludes thoughts, so they are added.
    fn normalise(self) -> Usage {
        let thoughts = self.thoughts_token_count.unwrap_or(0);
        Usage {
            input_tokens: self
                .prompt_token_count
                .unwrap_or(0)
                .saturating_add(self.tool_use_prompt_token_count.unwrap_or(0)),
            cached_input_tokens: self.cached_content_token_count.unwrap_or(0),
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: self.candidates_token_count.unwrap_or(0).saturating_add(thoughts),
            reasoning_tokens: thoughts,
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiUsageOnly {
    usage_metadata: Option<GeminiRawUsage>,
}

/// Usage of a non-streaming `generateContent` response (`usageMetadata`): input is
/// `promptTokenCount` (which includes `cachedContentTokenCount`) plus
/// `toolUsePromptTokenCount`; output is `candidatesTokenCount` plus `thoughtsTokenCount`,
/// the latter also reported as reasoning. Also accepts the JSON array that
/// `streamGenerateContent` returns without `alt=sse` (the last usage wins). `None` when
/// the body is not JSON or carries no usage.
pub fn gemini_usage(body: &[u8]) -> Option<Usage> {
    let first = body.iter().find(|b| !b.is_ascii_whitespace())?;
    let raw = if *first == b'[' {
        let chunks: Vec<GeminiUsageOnly> = serde_json::from_slice(body).ok()?;
        chunks.into_iter().filter_map(|c| c.usage_metadata).next_back()
    } else {
        serde_json::from_slice::<GeminiUsageOnly>(body).ok()?.usage_metadata
    };
    raw.map(GeminiRawUsage::normalise)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiResponse<'a> {
    usage_metadata: Option<GeminiRawUsage>,
    prompt_feedback: Option<GeminiPromptFeedback>,
    #[serde(borrow)]
    response_id: Option<Text<'a>>,
    #[serde(borrow)]
    model_version: Option<Text<'a>>,
    #[serde(borrow)]
    candidates: Option<Vec<GeminiCandidate<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiPromptFeedback {
    block_reason: Option<IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiCandidate<'a> {
    #[serde(borrow)]
    content: Option<GeminiContent<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct GeminiContent<'a> {
    #[serde(borrow)]
    parts: Option<Vec<GeminiPart<'a>>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct GeminiPart<'a> {
    #[serde(borrow)]
    function_call: Option<GeminiFunctionCall<'a>>,
}

#[derive(Deserialize)]
struct GeminiFunctionCall<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    name: Option<Text<'a>>,
}

/// Accumulates usage, response id and requested function calls over a Gemini
/// `streamGenerateContent?alt=sse` stream. Any chunk may carry `usageMetadata`; each is a
/// running total, so the last one wins. A whole non-streaming body may be fed as one event
/// too.
#[derive(Debug, Default)]
pub struct GeminiStreamUsage {
    response_id: Option<String>,
    model: Option<String>,
    finish_reason: Option<FinishReason>,
    usage: Option<GeminiRawUsage>,
    tool_calls: Vec<ToolCall>,
    /// A candidate carried a `finishReason`, or the prompt was blocked
    /// (`promptFeedback.blockReason`): the provider's last chunk.
    finished: bool,
}

impl GeminiStreamUsage {
    pub fn new() -> Self {
        Self::default()
    }

    /// The stream's usage; `None` when no chunk carried any.
    pub fn finish(self) -> Option<Usage> {
        self.usage()
    }
}

impl ProviderUsage for GeminiStreamUsage {
    /// Takes the `data` of one SSE event. Non-JSON data is ignored.
    fn on_event(&mut self, data: &[u8]) {
        let Ok(response) = serde_json::from_slice::<GeminiResponse<'_>>(data) else { return };
        remember(&mut self.response_id, response.response_id);
        remember(&mut self.model, response.model_version);
        if let Some(usage) = response.usage_metadata {
            self.usage = Some(usage);
        }
        self.finished |= response.prompt_feedback.is_some_and(|f| f.block_reason.is_some())
            || response.candidates.iter().flatten().any(|c| c.finish_reason.is_some());
        let parts = response
            .candidates
            .into_iter()
            .flatten()
            .filter_map(|c| {
                remember_reason(&mut self.finish_reason, c.finish_reason);
                c.content?.parts
            })
            .flatten();
        for call in parts.filter_map(|p| p.function_call) {
            let text = |t: Option<Text<'_>>| t.map(|t| t.0.into_owned()).unwrap_or_default();
            self.tool_calls.push(ToolCall { id: text(call.id), name: text(call.name) });
        }
    }

    /// The `responseId`, which the proxy stores as tag `_svc_google_response_id`.
    fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The `modelVersion` that answered.
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// `finishReason` (`STOP`, `MAX_TOKENS`, `SAFETY`, ...).
    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason.clone()
    }

    fn take_model(&mut self) -> Option<String> {
        self.model.take()
    }

    /// `functionCall` parts seen so far.
    fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// Usage seen so far (for a stream cut short).
    fn usage(&self) -> Option<Usage> {
        self.usage.map(GeminiRawUsage::normalise)
    }

    fn complete(&self) -> bool {
        self.finished
    }
}
