//! Reads token usage out of provider traffic for the proxy: whole JSON response bodies,
//! and server-sent-event streams parsed incrementally while they pass through to the
//! client. Pure functions over bytes, no I/O.
//!
//! Every parser normalises to [`Usage`] as defined in `proxy::pricing` (input includes
//! cache reads and writes, output includes reasoning), so that one cost formula serves all
//! providers. Parsing is on the hot path: the structs below name only the fields we need,
//! and strings are borrowed from the input unless they contain escapes.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, IgnoredAny, Visitor};
use serde::Deserialize;

use super::pricing::{Provider, Usage};

// ---------------------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------------------

/// A JSON string, borrowed from the input when it has no escapes and owned otherwise.
/// (`Option<Cow<str>>` with serde's derive always copies.)
struct Text<'a>(Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_owned())))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

impl Text<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }
}

/// Keeps the first non-empty value seen (response ids and models repeat on every chunk).
fn remember(slot: &mut Option<String>, value: Option<Text<'_>>) {
    if slot.is_none() {
        if let Some(value) = value.filter(|v| !v.0.is_empty()) {
            *slot = Some(value.0.into_owned());
        }
    }
}

/// A tool (function) call the model asked the client to make.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolCall {
    /// The provider's call id (`call_…`, `toolu_…`); empty when the provider gave none
    /// (Gemini usually does not).
    pub id: String,
    /// The function name.
    pub name: String,
}

// ---------------------------------------------------------------------------------------
// OpenAI chat completions
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, Clone, Copy)]
struct OpenAiRawUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    prompt_tokens_details: Option<OpenAiPromptDetails>,
    completion_tokens_details: Option<OpenAiCompletionDetails>,
}

#[derive(Deserialize, Clone, Copy)]
struct OpenAiPromptDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Clone, Copy)]
struct OpenAiCompletionDetails {
    reasoning_tokens: Option<u64>,
}

impl OpenAiRawUsage {
    /// `prompt_tokens` already includes cached tokens and `completion_tokens` reasoning
    /// tokens, which is exactly the `Usage` definition.
    fn normalise(self) -> Usage {
        Usage {
            input_tokens: self.prompt_tokens.unwrap_or(0),
            cached_input_tokens: self.prompt_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0),
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: self.completion_tokens.unwrap_or(0),
            reasoning_tokens: self.completion_tokens_details.and_then(|d| d.reasoning_tokens).unwrap_or(0),
        }
    }
}

#[derive(Deserialize)]
struct OpenAiUsageOnly {
    usage: Option<OpenAiRawUsage>,
}

/// Usage of a non-streaming chat completion (`usage.prompt_tokens`, `completion_tokens`,
/// `prompt_tokens_details.cached_tokens`, `completion_tokens_details.reasoning_tokens`).
/// `None` when the body is not JSON or carries no usage.
pub fn openai_usage(body: &[u8]) -> Option<Usage> {
    serde_json::from_slice::<OpenAiUsageOnly>(body).ok()?.usage.map(OpenAiRawUsage::normalise)
}

/// One streamed `chat.completion.chunk`, or a whole `chat.completion`.
#[derive(Deserialize)]
struct OpenAiChunk<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    object: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    usage: Option<OpenAiRawUsage>,
    #[serde(borrow)]
    choices: Option<Vec<OpenAiChoice<'a>>>,
}

#[derive(Deserialize)]
struct OpenAiChoice<'a> {
    index: Option<usize>,
    /// Streaming.
    #[serde(borrow)]
    delta: Option<OpenAiToolCalls<'a>>,
    /// Non-streaming.
    #[serde(borrow)]
    message: Option<OpenAiToolCalls<'a>>,
}

#[derive(Deserialize)]
struct OpenAiToolCalls<'a> {
    #[serde(borrow)]
    tool_calls: Option<Vec<OpenAiToolCall<'a>>>,
}

#[derive(Deserialize)]
struct OpenAiToolCall<'a> {
    index: Option<usize>,
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    function: Option<OpenAiFunction<'a>>,
}

#[derive(Deserialize)]
struct OpenAiFunction<'a> {
    #[serde(borrow)]
    name: Option<Text<'a>>,
}

/// Accumulates usage, response id and requested tool calls over an OpenAI chat-completion
/// stream. Usage arrives only in the final chunk (empty `choices`) when the request set
/// `stream_options.include_usage`; the last usage seen wins. A whole non-streaming body
/// may be fed as one event too.
#[derive(Debug, Default)]
pub struct OpenAiStreamUsage {
    response_id: Option<String>,
    model: Option<String>,
    usage: Option<Usage>,
    tool_calls: Vec<ToolCall>,
    /// `(choice index, tool-call index)` of each entry of `tool_calls`: a streamed call is
    /// spread over many deltas that share its index.
    tool_call_keys: Vec<(usize, usize)>,
    last_event_usage_only: bool,
}

impl OpenAiStreamUsage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the `data` of one SSE event. Non-JSON data (`[DONE]`, errors) is ignored.
    pub fn on_event(&mut self, data: &[u8]) {
        self.last_event_usage_only = false;
        if data == b"[DONE]" {
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<OpenAiChunk<'_>>(data) else { return };
        self.last_event_usage_only = chunk.usage.is_some()
            && chunk.choices.as_ref().is_some_and(Vec::is_empty)
            && chunk.object.as_ref().is_none_or(|o| o.as_str() == "chat.completion.chunk");
        remember(&mut self.response_id, chunk.id);
        remember(&mut self.model, chunk.model);
        if let Some(usage) = chunk.usage {
            self.usage = Some(usage.normalise());
        }
        for (position, choice) in chunk.choices.into_iter().flatten().enumerate() {
            let choice_index = choice.index.unwrap_or(position);
            for calls in [choice.delta, choice.message].into_iter().flatten() {
                for (position, call) in calls.tool_calls.into_iter().flatten().enumerate() {
                    let key = (choice_index, call.index.unwrap_or(position));
                    self.record_tool_call(key, call.id, call.function.and_then(|f| f.name));
                }
            }
        }
    }

    fn record_tool_call(&mut self, key: (usize, usize), id: Option<Text<'_>>, name: Option<Text<'_>>) {
        let slot = match self.tool_call_keys.iter().position(|k| *k == key) {
            Some(i) => &mut self.tool_calls[i],
            // Later deltas of a call carry only argument fragments; an entry starts with
            // the delta that names it.
            None if id.is_some() || name.is_some() => {
                self.tool_call_keys.push(key);
                self.tool_calls.push(ToolCall::default());
                let last = self.tool_calls.len() - 1;
                &mut self.tool_calls[last]
            }
            None => return,
        };
        for (field, value) in [(&mut slot.id, id), (&mut slot.name, name)] {
            if let Some(value) = value.filter(|_| field.is_empty()) {
                field.push_str(value.as_str());
            }
        }
    }

    /// Whether the event just fed was the usage-only chunk, as
    /// [`is_openai_usage_only_chunk`] would say, without parsing it a second time.
    pub fn last_event_was_usage_only(&self) -> bool {
        self.last_event_usage_only
    }

    /// The completion id (`chatcmpl-…`).
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The model that answered, as the provider names it (often a dated snapshot).
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// Tool calls requested so far, in order of first appearance.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// Usage seen so far (for a stream cut short).
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// The stream's usage; `None` when no chunk carried any.
    pub fn finish(self) -> Option<Usage> {
        self.usage
    }
}

#[derive(Deserialize)]
struct OpenAiUsageOnlyProbe<'a> {
    #[serde(borrow)]
    object: Option<Text<'a>>,
    /// `IgnoredAny` is zero-sized, so this never allocates.
    choices: Option<Vec<IgnoredAny>>,
    usage: Option<IgnoredAny>,
}

/// Whether `data` is the usage-only `chat.completion.chunk` (empty `choices`, non-null
/// `usage`) that OpenAI appends when `stream_options.include_usage` is set: the chunk the
/// proxy drops when it was the proxy, not the client, that asked for usage.
pub fn is_openai_usage_only_chunk(data: &[u8]) -> bool {
    let Ok(probe) = serde_json::from_slice::<OpenAiUsageOnlyProbe<'_>>(data) else { return false };
    let is_chunk = probe.object.is_none_or(|o| o.as_str() == "chat.completion.chunk");
    is_chunk && probe.choices.is_some_and(|c| c.is_empty()) && probe.usage.is_some()
}

// ---------------------------------------------------------------------------------------
// Anthropic messages
// ---------------------------------------------------------------------------------------

#[derive(Deserialize, Clone, Copy, Default, Debug)]
struct AnthropicRawUsage {
    /// Excludes cache reads and writes.
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation: Option<AnthropicCacheCreation>,
}

#[derive(Deserialize, Clone, Copy, Default, Debug)]
struct AnthropicCacheCreation {
    ephemeral_5m_input_tokens: Option<u64>,
    ephemeral_1h_input_tokens: Option<u64>,
}

impl AnthropicRawUsage {
    /// Applies a later (cumulative) report: every field it carries replaces ours.
    fn overlay(&mut self, newer: AnthropicRawUsage) {
        self.input_tokens = newer.input_tokens.or(self.input_tokens);
        self.output_tokens = newer.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens =
            newer.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = newer.cache_read_input_tokens.or(self.cache_read_input_tokens);
        self.cache_creation = newer.cache_creation.or(self.cache_creation);
    }

    /// Anthropic's `input_tokens` excludes cache traffic, so cache reads and writes are
    /// added back to reach the `Usage` definition. Cache writes are split by lifetime when
    /// `cache_creation` says so; otherwise they are all 5-minute writes (the default TTL).
    fn normalise(self) -> Usage {
        let created = self.cache_creation_input_tokens.unwrap_or(0);
        let (write_5m, write_1h) = match self.cache_creation {
            Some(split) => {
                let write_1h = split.ephemeral_1h_input_tokens.unwrap_or(0);
                let listed = split.ephemeral_5m_input_tokens.unwrap_or(0).saturating_add(write_1h);
                // Should the total disagree with its split, bill the larger; the rest is 5m.
                (created.max(listed) - write_1h, write_1h)
            }
            None => (created, 0),
        };
        let cached = self.cache_read_input_tokens.unwrap_or(0);
        Usage {
            input_tokens: self
                .input_tokens
                .unwrap_or(0)
                .saturating_add(cached)
                .saturating_add(write_5m)
                .saturating_add(write_1h),
            cached_input_tokens: cached,
            cache_write_5m_tokens: write_5m,
            cache_write_1h_tokens: write_1h,
            output_tokens: self.output_tokens.unwrap_or(0),
            // Anthropic bills thinking as output and does not count it apart.
            reasoning_tokens: 0,
        }
    }
}

#[derive(Deserialize)]
struct AnthropicUsageOnly {
    usage: Option<AnthropicRawUsage>,
}

/// Usage of a non-streaming message (`usage.input_tokens`, `cache_read_input_tokens`,
/// `cache_creation_input_tokens` with its `cache_creation` split, `output_tokens`),
/// normalised so that `input_tokens` includes cache reads and writes. `None` when the
/// body is not JSON or carries no usage.
pub fn anthropic_usage(body: &[u8]) -> Option<Usage> {
    serde_json::from_slice::<AnthropicUsageOnly>(body).ok()?.usage.map(AnthropicRawUsage::normalise)
}

/// One streamed event, or a whole non-streaming message (`"type": "message"`).
#[derive(Deserialize)]
struct AnthropicEvent<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Text<'a>>,
    /// `message_start`.
    #[serde(borrow)]
    message: Option<AnthropicMessage<'a>>,
    /// `content_block_start`.
    #[serde(borrow)]
    content_block: Option<AnthropicBlock<'a>>,
    /// `message_delta`, or a whole message.
    usage: Option<AnthropicRawUsage>,
    /// The fields of a whole message.
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    #[serde(borrow)]
    content: Option<Vec<AnthropicBlock<'a>>>,
}

#[derive(Deserialize)]
struct AnthropicMessage<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    usage: Option<AnthropicRawUsage>,
    #[serde(borrow)]
    content: Option<Vec<AnthropicBlock<'a>>>,
}

#[derive(Deserialize)]
struct AnthropicBlock<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    name: Option<Text<'a>>,
}

/// Accumulates usage, message id and requested tool calls over an Anthropic messages
/// stream. `message_start.message.usage` gives the input and cache counts and an initial
/// output count; each `message_delta.usage` is cumulative, so its `output_tokens` (and any
/// input or cache field it carries) replaces what was seen before. A whole non-streaming
/// body may be fed as one event too.
#[derive(Debug, Default)]
pub struct AnthropicStreamUsage {
    response_id: Option<String>,
    model: Option<String>,
    usage: Option<AnthropicRawUsage>,
    tool_calls: Vec<ToolCall>,
}

impl AnthropicStreamUsage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the `data` of one SSE event (the JSON carries its own `type`, so the `event:`
    /// field is not needed). Non-JSON data and unknown events are ignored.
    pub fn on_event(&mut self, data: &[u8]) {
        let Ok(event) = serde_json::from_slice::<AnthropicEvent<'_>>(data) else { return };
        match event.kind.as_ref().map(Text::as_str) {
            Some("message_start") => {
                if let Some(message) = event.message {
                    self.on_message(message.id, message.model, message.usage, message.content);
                }
            }
            Some("message_delta") => {
                if let Some(newer) = event.usage {
                    self.usage.get_or_insert_with(AnthropicRawUsage::default).overlay(newer);
                }
            }
            Some("content_block_start") => {
                if let Some(block) = event.content_block {
                    self.on_block(block);
                }
            }
            Some("message") => self.on_message(event.id, event.model, event.usage, event.content),
            _ => {}
        }
    }

    fn on_message(
        &mut self,
        id: Option<Text<'_>>,
        model: Option<Text<'_>>,
        usage: Option<AnthropicRawUsage>,
        content: Option<Vec<AnthropicBlock<'_>>>,
    ) {
        remember(&mut self.response_id, id);
        remember(&mut self.model, model);
        if let Some(usage) = usage {
            self.usage = Some(usage);
        }
        for block in content.into_iter().flatten() {
            self.on_block(block);
        }
    }

    fn on_block(&mut self, block: AnthropicBlock<'_>) {
        if block.kind.as_ref().is_some_and(|k| k.as_str() == "tool_use") {
            let text = |t: Option<Text<'_>>| t.map(|t| t.0.into_owned()).unwrap_or_default();
            self.tool_calls.push(ToolCall { id: text(block.id), name: text(block.name) });
        }
    }

    /// The message id (`msg_…`).
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The model that answered.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// `tool_use` blocks started so far.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// Usage seen so far (for a stream cut short).
    pub fn usage(&self) -> Option<Usage> {
        self.usage.map(AnthropicRawUsage::normalise)
    }

    /// The stream's usage; `None` when no event carried any.
    pub fn finish(self) -> Option<Usage> {
        self.usage()
    }
}

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
    #[serde(borrow)]
    response_id: Option<Text<'a>>,
    #[serde(borrow)]
    model_version: Option<Text<'a>>,
    #[serde(borrow)]
    candidates: Option<Vec<GeminiCandidate<'a>>>,
}

#[derive(Deserialize)]
struct GeminiCandidate<'a> {
    #[serde(borrow)]
    content: Option<GeminiContent<'a>>,
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
    usage: Option<GeminiRawUsage>,
    tool_calls: Vec<ToolCall>,
}

impl GeminiStreamUsage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the `data` of one SSE event. Non-JSON data is ignored.
    pub fn on_event(&mut self, data: &[u8]) {
        let Ok(response) = serde_json::from_slice::<GeminiResponse<'_>>(data) else { return };
        remember(&mut self.response_id, response.response_id);
        remember(&mut self.model, response.model_version);
        if let Some(usage) = response.usage_metadata {
            self.usage = Some(usage);
        }
        let parts = response.candidates.into_iter().flatten().filter_map(|c| c.content?.parts).flatten();
        for call in parts.filter_map(|p| p.function_call) {
            let text = |t: Option<Text<'_>>| t.map(|t| t.0.into_owned()).unwrap_or_default();
            self.tool_calls.push(ToolCall { id: text(call.id), name: text(call.name) });
        }
    }

    /// The `responseId`, which the proxy stores as tag `_svc_google_response_id`.
    pub fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The `modelVersion` that answered.
    pub fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// `functionCall` parts seen so far.
    pub fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// Usage seen so far (for a stream cut short).
    pub fn usage(&self) -> Option<Usage> {
        self.usage.map(GeminiRawUsage::normalise)
    }

    /// The stream's usage; `None` when no chunk carried any.
    pub fn finish(self) -> Option<Usage> {
        self.usage()
    }
}

// ---------------------------------------------------------------------------------------
// Any provider
// ---------------------------------------------------------------------------------------

/// The stream accumulator of one provider, so that the proxy's streaming path can be
/// written once.
#[derive(Debug)]
pub enum StreamUsage {
    OpenAi(OpenAiStreamUsage),
    Anthropic(AnthropicStreamUsage),
    Google(GeminiStreamUsage),
}

impl StreamUsage {
    pub fn new(provider: Provider) -> Self {
        match provider {
            Provider::OpenAi => StreamUsage::OpenAi(OpenAiStreamUsage::new()),
            Provider::Anthropic => StreamUsage::Anthropic(AnthropicStreamUsage::new()),
            Provider::Google => StreamUsage::Google(GeminiStreamUsage::new()),
        }
    }

    pub fn on_event(&mut self, data: &[u8]) {
        match self {
            StreamUsage::OpenAi(s) => s.on_event(data),
            StreamUsage::Anthropic(s) => s.on_event(data),
            StreamUsage::Google(s) => s.on_event(data),
        }
    }

    pub fn response_id(&self) -> Option<&str> {
        match self {
            StreamUsage::OpenAi(s) => s.response_id(),
            StreamUsage::Anthropic(s) => s.response_id(),
            StreamUsage::Google(s) => s.response_id(),
        }
    }

    pub fn model(&self) -> Option<&str> {
        match self {
            StreamUsage::OpenAi(s) => s.model(),
            StreamUsage::Anthropic(s) => s.model(),
            StreamUsage::Google(s) => s.model(),
        }
    }

    pub fn tool_calls(&self) -> &[ToolCall] {
        match self {
            StreamUsage::OpenAi(s) => s.tool_calls(),
            StreamUsage::Anthropic(s) => s.tool_calls(),
            StreamUsage::Google(s) => s.tool_calls(),
        }
    }

    pub fn usage(&self) -> Option<Usage> {
        match self {
            StreamUsage::OpenAi(s) => s.usage(),
            StreamUsage::Anthropic(s) => s.usage(),
            StreamUsage::Google(s) => s.usage(),
        }
    }

    pub fn finish(self) -> Option<Usage> {
        self.usage()
    }
}

// ---------------------------------------------------------------------------------------
// Requests
// ---------------------------------------------------------------------------------------

/// What the proxy needs from a request body before the upstream call, read in one parse.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestSummary {
    /// `model` (OpenAI, Anthropic; Gemini names the model in the URL).
    pub model: Option<String>,
    /// OpenAI `max_completion_tokens`, else its deprecated `max_tokens`; Anthropic
    /// `max_tokens`; Gemini `generationConfig.maxOutputTokens`. Saturates at `u32::MAX`.
    pub max_output_tokens: Option<u32>,
    /// `"stream": true` (OpenAI, Anthropic; Gemini streams by route).
    pub stream: bool,
    /// OpenAI `stream_options.include_usage: true`.
    pub include_usage: bool,
}

#[derive(Deserialize)]
struct OpenAiRequest<'a> {
    #[serde(borrow)]
    model: Option<Text<'a>>,
    stream: Option<bool>,
    stream_options: Option<OpenAiStreamOptions>,
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OpenAiStreamOptions {
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct AnthropicRequest<'a> {
    #[serde(borrow)]
    model: Option<Text<'a>>,
    stream: Option<bool>,
    max_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct GeminiRequest {
    // The REST API accepts the proto field names as well as the JSON ones.
    #[serde(rename = "generationConfig", alias = "generation_config")]
    generation_config: Option<GeminiGenerationConfig>,
}

#[derive(Deserialize)]
struct GeminiGenerationConfig {
    #[serde(rename = "maxOutputTokens", alias = "max_output_tokens")]
    max_output_tokens: Option<u64>,
}

fn saturate_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Reads model, output maximum and streaming flags from a request body in one parse.
/// `None` when the body is not a JSON object whose known fields have the provider's types.
pub fn request_summary(provider: Provider, body: &[u8]) -> Option<RequestSummary> {
    let text = |t: Option<Text<'_>>| t.map(|t| t.0.into_owned());
    Some(match provider {
        Provider::OpenAi => {
            let request: OpenAiRequest<'_> = serde_json::from_slice(body).ok()?;
            RequestSummary {
                model: text(request.model),
                max_output_tokens: request.max_completion_tokens.or(request.max_tokens).map(saturate_u32),
                stream: request.stream == Some(true),
                include_usage: request.stream_options.and_then(|o| o.include_usage) == Some(true),
            }
        }
        Provider::Anthropic => {
            let request: AnthropicRequest<'_> = serde_json::from_slice(body).ok()?;
            RequestSummary {
                model: text(request.model),
                max_output_tokens: request.max_tokens.map(saturate_u32),
                stream: request.stream == Some(true),
                include_usage: false,
            }
        }
        Provider::Google => {
            let request: GeminiRequest = serde_json::from_slice(body).ok()?;
            RequestSummary {
                max_output_tokens: request
                    .generation_config
                    .and_then(|c| c.max_output_tokens)
                    .map(saturate_u32),
                ..RequestSummary::default()
            }
        }
    })
}

/// The output-token maximum the request asks for; see [`RequestSummary::max_output_tokens`].
pub fn request_max_tokens(provider: Provider, body: &[u8]) -> Option<u32> {
    request_summary(provider, body)?.max_output_tokens
}

/// The `model` of an OpenAI or Anthropic request body.
pub fn request_model(body: &[u8]) -> Option<String> {
    // Both providers put the model in a top-level string `model`.
    #[derive(Deserialize)]
    struct ModelOnly<'a> {
        #[serde(borrow)]
        model: Option<Text<'a>>,
    }
    let request: ModelOnly<'_> = serde_json::from_slice(body).ok()?;
    request.model.map(|m| m.0.into_owned())
}

/// Whether an OpenAI request streams without asking for usage, so that the proxy must add
/// `stream_options.include_usage` to learn the cost.
pub fn openai_stream_needs_usage(body: &[u8]) -> bool {
    request_summary(Provider::OpenAi, body).is_some_and(|r| r.stream && !r.include_usage)
}

/// The request body with `stream_options.include_usage` set to `true`, every other byte
/// kept as it was (key order, spacing, number formatting), because provider bodies pass
/// through unmodified otherwise. `None` when the body is not a JSON object, its
/// `stream_options` is neither an object nor `null`, or the result would not be a valid
/// request with `include_usage: true` (checked by parsing it, which also catches
/// duplicate or escaped keys the splice cannot see).
pub fn openai_add_include_usage(body: &[u8]) -> Option<Vec<u8>> {
    let open = json_scan::skip_whitespace(body, 0);
    if body.get(open) != Some(&b'{') {
        return None;
    }
    let top = json_scan::scan_object(body, open, b"stream_options")?;
    let mut out = Vec::with_capacity(body.len() + 40);
    match top.found {
        None => {
            out.extend_from_slice(&body[..=open]);
            out.extend_from_slice(br#""stream_options":{"include_usage":true}"#);
            if !top.empty {
                out.push(b',');
            }
            out.extend_from_slice(&body[open + 1..]);
        }
        Some((start, end)) => match body.get(start) {
            Some(b'{') => {
                let options = json_scan::scan_object(body, start, b"include_usage")?;
                match options.found {
                    Some((value_start, value_end)) => {
                        out.extend_from_slice(&body[..value_start]);
                        out.extend_from_slice(b"true");
                        out.extend_from_slice(&body[value_end..]);
                    }
                    None => {
                        out.extend_from_slice(&body[..=start]);
                        out.extend_from_slice(br#""include_usage":true"#);
                        if !options.empty {
                            out.push(b',');
                        }
                        out.extend_from_slice(&body[start + 1..]);
                    }
                }
            }
            Some(b'n') if &body[start..end] == b"null" => {
                out.extend_from_slice(&body[..start]);
                out.extend_from_slice(br#"{"include_usage":true}"#);
                out.extend_from_slice(&body[end..]);
            }
            _ => return None,
        },
    }
    let check: IncludeUsageCheck = serde_json::from_slice(&out).ok()?;
    (check.stream_options.include_usage == Some(true)).then_some(out)
}

/// Parses a spliced request back; serde's derive refuses duplicate keys, which is what
/// catches a `stream_options` the splice could not see.
#[derive(Deserialize)]
struct IncludeUsageCheck {
    stream_options: OpenAiStreamOptions,
}

/// Just enough of a JSON scanner to find the byte span of a member's value in an object,
/// for splicing without re-serialising. It trusts its input to be JSON and returns `None`
/// on anything unexpected; callers validate the spliced result with a real parser.
mod json_scan {
    /// Index of the first non-whitespace byte at or after `at`.
    pub(super) fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
        while bytes.get(at).is_some_and(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r')) {
            at += 1;
        }
        at
    }

    /// `bytes[at]` opens a string; the index just past its closing quote.
    fn skip_string(bytes: &[u8], at: usize) -> Option<usize> {
        let mut i = at + 1;
        loop {
            match bytes.get(i)? {
                b'"' => return Some(i + 1),
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
    }

    /// `bytes[at]` starts a value; the index just past it.
    fn skip_value(bytes: &[u8], at: usize) -> Option<usize> {
        match bytes.get(at)? {
            b'"' => skip_string(bytes, at),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut i = at;
                loop {
                    match bytes.get(i)? {
                        b'"' => {
                            i = skip_string(bytes, i)?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some(i + 1);
                            }
                        }
                        _ => {}
                    }
                    i += 1;
                }
            }
            _ => {
                // Number or literal: runs to the next delimiter.
                let len = bytes[at..]
                    .iter()
                    .position(|b| matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'))
                    .unwrap_or(bytes.len() - at);
                (len > 0).then_some(at + len)
            }
        }
    }

    pub(super) struct ObjectScan {
        /// The object has no members.
        pub empty: bool,
        /// Value span of the member with the wanted key (written without escapes).
        pub found: Option<(usize, usize)>,
    }

    /// Scans the object opened at `bytes[open]` for the member `key`.
    pub(super) fn scan_object(bytes: &[u8], open: usize, key: &[u8]) -> Option<ObjectScan> {
        let mut i = skip_whitespace(bytes, open + 1);
        if bytes.get(i)? == &b'}' {
            return Some(ObjectScan { empty: true, found: None });
        }
        let mut found = None;
        loop {
            if bytes.get(i)? != &b'"' {
                return None;
            }
            let key_end = skip_string(bytes, i)?;
            let is_key = bytes.get(i + 1..key_end - 1)? == key;
            i = skip_whitespace(bytes, key_end);
            if bytes.get(i)? != &b':' {
                return None;
            }
            let value_start = skip_whitespace(bytes, i + 1);
            let value_end = skip_value(bytes, value_start)?;
            if is_key {
                found = Some((value_start, value_end));
            }
            i = skip_whitespace(bytes, value_end);
            match bytes.get(i)? {
                b',' => i = skip_whitespace(bytes, i + 1),
                b'}' => return Some(ObjectScan { empty: false, found }),
                _ => return None,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------
// Server-sent events
// ---------------------------------------------------------------------------------------

/// Largest event the parser keeps: an event whose data, or whose data plus the line still
/// being assembled, grows past this many bytes is dropped whole, so a misbehaving upstream
/// cannot make the proxy buffer without bound.
pub const MAX_SSE_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// Capacity the data buffer shrinks back to after an unusually large event, so that one
/// big event does not pin memory for the rest of a long stream.
const RETAINED_BUFFER_BYTES: usize = 64 * 1024;

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// One dispatched server-sent event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SseEvent<'a> {
    /// The `event:` field; empty when the event had none (SSE's default type `message`)
    /// or it was not UTF-8.
    pub event: &'a str,
    /// The `data:` lines, joined with `\n`.
    pub data: &'a [u8],
}

impl SseEvent<'_> {
    /// Whether this is OpenAI's end-of-stream marker `data: [DONE]`.
    pub fn is_done(&self) -> bool {
        self.data == b"[DONE]"
    }
}

/// An incremental server-sent-events parser (WHATWG HTML, "event stream
/// interpretation") over bytes as they arrive: chunks may split anything, including a
/// UTF-8 character or a `\r\n` pair. Lines end with `\n`, `\r\n` or `\r`; `data:` lines
/// are joined with `\n`; comments (`:`), `id:`, `retry:` and unknown fields are ignored
/// (the proxy never reconnects); one leading space of a value is dropped; a leading BOM is
/// skipped. An event is dispatched at the blank line that ends it, only if it had data.
///
/// When an event lies within one chunk and has a single `data:` line, it is handed out as
/// a slice of the chunk; otherwise it is copied into a buffer that is reused, so the
/// parser does not allocate per event once warm.
#[derive(Debug)]
pub struct SseParser {
    /// A line whose end is not in the chunks seen so far.
    partial_line: Vec<u8>,
    /// Data of the current event, when it is not just a slice of the current chunk.
    data: Vec<u8>,
    event: String,
    has_data: bool,
    /// The previous chunk ended with `\r`: a `\n` starting the next one ends no line.
    after_cr: bool,
    /// Dropping the rest of an oversized line.
    skipping_line: bool,
    /// Dropping the current event, which grew past the limit.
    discarding_event: bool,
    at_stream_start: bool,
    dropped_events: u64,
    max_event_bytes: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

/// Byte range of the current event's data inside the chunk being parsed.
type ChunkSpan = Option<(usize, usize)>;

impl SseParser {
    /// A parser that drops events over [`MAX_SSE_EVENT_BYTES`].
    pub fn new() -> Self {
        Self::with_max_event_bytes(MAX_SSE_EVENT_BYTES)
    }

    /// A parser with another event-size limit.
    pub fn with_max_event_bytes(max_event_bytes: usize) -> Self {
        SseParser {
            partial_line: Vec::new(),
            data: Vec::new(),
            event: String::new(),
            has_data: false,
            after_cr: false,
            skipping_line: false,
            discarding_event: false,
            at_stream_start: true,
            dropped_events: 0,
            max_event_bytes,
        }
    }

    /// Events dropped so far for exceeding the size limit.
    pub fn dropped_events(&self) -> u64 {
        self.dropped_events
    }

    /// Parses the next chunk of the stream, calling `on_event` for every event it
    /// completes.
    pub fn feed(&mut self, chunk: &[u8], mut on_event: impl FnMut(SseEvent<'_>)) {
        let mut pos = 0;
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                pos = 1;
            }
        }
        let mut span: ChunkSpan = None;
        let mut unterminated = None;
        while pos < chunk.len() {
            let Some(len) = chunk[pos..].iter().position(|&b| b == b'\n' || b == b'\r') else {
                unterminated = Some(pos);
                break;
            };
            let end = pos + len;
            if self.skipping_line {
                self.skipping_line = false;
            } else if self.partial_line.is_empty() {
                self.process_line(&chunk[pos..end], Some(pos), chunk, &mut span, &mut on_event);
            } else if self.partial_line.len() + len + self.pending_len(span) > self.max_event_bytes {
                self.partial_line.clear();
                self.discard_event(&mut span);
            } else {
                self.partial_line.extend_from_slice(&chunk[pos..end]);
                let line = std::mem::take(&mut self.partial_line);
                self.process_line(&line, None, chunk, &mut span, &mut on_event);
                self.partial_line = line;
                self.partial_line.clear();
            }
            pos = end + 1;
            if chunk[end] == b'\r' {
                match chunk.get(pos) {
                    Some(b'\n') => pos += 1,
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        // The chunk is about to go away: keep what the unfinished event still needs.
        if let Some((start, end)) = span {
            self.data.extend_from_slice(&chunk[start..end]);
        }
        if let Some(start) = unterminated {
            self.keep_partial_line(&chunk[start..]);
        }
    }

    /// Ends the stream: an event still open (its last line ended but no blank line
    /// followed, or even its last line unterminated) is dispatched, unlike the SSE
    /// specification, which discards it, because it may be the one carrying usage. A
    /// truncated JSON payload then simply fails to parse. The parser is ready for a new
    /// stream afterwards.
    pub fn finish(&mut self, mut on_event: impl FnMut(SseEvent<'_>)) {
        let mut span: ChunkSpan = None;
        if !self.skipping_line && !self.partial_line.is_empty() {
            let line = std::mem::take(&mut self.partial_line);
            self.process_line(&line, None, &[], &mut span, &mut on_event);
            self.partial_line = line;
        }
        self.dispatch(&[], &mut span, &mut on_event);
        self.partial_line.clear();
        self.after_cr = false;
        self.skipping_line = false;
        self.at_stream_start = true;
    }

    /// Bytes the current event holds so far.
    fn pending_len(&self, span: ChunkSpan) -> usize {
        self.data.len() + span.map_or(0, |(start, end)| end - start)
    }

    fn keep_partial_line(&mut self, rest: &[u8]) {
        if self.skipping_line {
            return;
        }
        if self.partial_line.len() + rest.len() + self.data.len() > self.max_event_bytes {
            self.partial_line.clear();
            self.skipping_line = true;
            self.discard_event(&mut None);
            return;
        }
        self.partial_line.extend_from_slice(rest);
    }

    /// Processes one complete line. `line_start` is its offset in `chunk` when the line
    /// lies in the chunk, so that its data can be handed out without a copy.
    fn process_line(
        &mut self,
        line: &[u8],
        line_start: Option<usize>,
        chunk: &[u8],
        span: &mut ChunkSpan,
        on_event: &mut impl FnMut(SseEvent<'_>),
    ) {
        let (mut line, mut line_start) = (line, line_start);
        if self.at_stream_start {
            self.at_stream_start = false;
            if let Some(rest) = line.strip_prefix(UTF8_BOM) {
                line = rest;
                line_start = line_start.map(|start| start + UTF8_BOM.len());
            }
        }
        let Some(&first) = line.first() else {
            self.dispatch(chunk, span, on_event);
            return;
        };
        if self.discarding_event || first == b':' {
            return;
        }
        let (field, value_offset) = match line.iter().position(|&b| b == b':') {
            Some(colon) => (&line[..colon], colon + 1 + usize::from(line.get(colon + 1) == Some(&b' '))),
            None => (line, line.len()),
        };
        let value = &line[value_offset..];
        match field {
            b"data" => {
                let value_span = line_start.map(|start| (start + value_offset, start + line.len()));
                self.push_data(value, value_span, chunk, span);
            }
            b"event" => {
                self.event.clear();
                if let Ok(name) = std::str::from_utf8(value) {
                    self.event.push_str(name);
                }
            }
            _ => {}
        }
    }

    fn push_data(&mut self, value: &[u8], value_span: ChunkSpan, chunk: &[u8], span: &mut ChunkSpan) {
        if self.pending_len(*span) + 1 + value.len() > self.max_event_bytes {
            self.discard_event(span);
            return;
        }
        if !self.has_data {
            self.has_data = true;
            match value_span {
                Some(value_span) => *span = Some(value_span),
                None => self.data.extend_from_slice(value),
            }
            return;
        }
        // A second data line: the event can no longer be a single slice of the chunk.
        if let Some((start, end)) = span.take() {
            self.data.extend_from_slice(&chunk[start..end]);
        }
        self.data.push(b'\n');
        self.data.extend_from_slice(value);
    }

    fn dispatch(&mut self, chunk: &[u8], span: &mut ChunkSpan, on_event: &mut impl FnMut(SseEvent<'_>)) {
        if self.discarding_event {
            self.dropped_events += 1;
        } else if self.has_data {
            let data = match *span {
                Some((start, end)) => &chunk[start..end],
                None => &self.data[..],
            };
            on_event(SseEvent { event: &self.event, data });
        }
        *span = None;
        self.data.clear();
        if self.data.capacity() > RETAINED_BUFFER_BYTES * 16 {
            self.data.shrink_to(RETAINED_BUFFER_BYTES);
        }
        self.event.clear();
        self.has_data = false;
        self.discarding_event = false;
    }

    fn discard_event(&mut self, span: &mut ChunkSpan) {
        self.discarding_event = true;
        self.has_data = false;
        self.data.clear();
        *span = None;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    // ---- fixtures, in the providers' documented shapes ----

    const OPENAI_BODY: &str = r#"{
      "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
      "object": "chat.completion",
      "created": 1741570283,
      "model": "gpt-4o-2024-08-06",
      "choices": [
        {
          "index": 0,
          "message": {
            "role": "assistant",
            "content": null,
            "tool_calls": [
              {"id": "call_abc123", "type": "function",
               "function": {"name": "get_current_weather", "arguments": "{\n\"location\": \"Boston, MA\"\n}"}}
            ],
            "refusal": null,
            "annotations": []
          },
          "logprobs": null,
          "finish_reason": "tool_calls"
        }
      ],
      "usage": {
        "prompt_tokens": 1117,
        "completion_tokens": 46,
        "total_tokens": 1163,
        "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 10, "audio_tokens": 0,
          "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
      },
      "service_tier": "default",
      "system_fingerprint": "fp_fc9f1d7035"
    }"#;

    const OPENAI_STREAM: &str = concat!(
        r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Héllo wörld 🌍 — \"quoted\"\n"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}"#,
        "\n\n",
        r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":2048,"completion_tokens":120,"total_tokens":2168,"prompt_tokens_details":{"cached_tokens":1536,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":64,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#,
        "\n\n",
        "data: [DONE]\n\n",
    );

    const ANTHROPIC_BODY: &str = r#"{
      "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
      "type": "message",
      "role": "assistant",
      "model": "claude-sonnet-4-5-20250929",
      "content": [
        {"type": "thinking", "thinking": "Let me check…", "signature": "EqQBCgIYAhIM"},
        {"type": "text", "text": "I'll look up the weather."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
         "input": {"location": "San Francisco, CA"}}
      ],
      "stop_reason": "tool_use",
      "stop_sequence": null,
      "usage": {
        "input_tokens": 50,
        "cache_creation_input_tokens": 3000,
        "cache_read_input_tokens": 20000,
        "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
        "output_tokens": 503,
        "service_tier": "standard",
        "server_tool_use": {"web_search_requests": 0}
      }
    }"#;

    const ANTHROPIC_STREAM: &str = concat!(
        "event: message_start\n",
        r#"data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":2048,"cache_read_input_tokens":1800,"cache_creation":{"ephemeral_5m_input_tokens":2048,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}}}"#,
        "\n\n",
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        "\n\n",
        "event: ping\n",
        r#"data: {"type": "ping"}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let’s check the weather — ☀️"}}"#,
        "\n\n",
        "event: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":0}"#,
        "\n\n",
        "event: content_block_start\n",
        r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}"#,
        "\n\n",
        "event: content_block_delta\n",
        r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\"}"}}"#,
        "\n\n",
        "event: content_block_stop\n",
        r#"data: {"type":"content_block_stop","index":1}"#,
        "\n\n",
        "event: message_delta\n",
        r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#,
        "\n\n",
        "event: message_stop\n",
        r#"data: {"type":"message_stop"}"#,
        "\n\n",
    );

    const GEMINI_BODY: &str = r#"{
      "candidates": [
        {
          "content": {
            "parts": [
              {"text": "**Weighing options**", "thought": true},
              {"functionCall": {"name": "schedule_meeting", "args": {"attendees": ["Bob"], "time": "10:00"}},
               "thoughtSignature": "CiwBVKhc7n"}
            ],
            "role": "model"
          },
          "finishReason": "STOP",
          "index": 0
        }
      ],
      "usageMetadata": {
        "promptTokenCount": 12000,
        "candidatesTokenCount": 250,
        "totalTokenCount": 13250,
        "cachedContentTokenCount": 8000,
        "thoughtsTokenCount": 900,
        "toolUsePromptTokenCount": 100,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12000}],
        "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 8000}]
      },
      "modelVersion": "gemini-2.5-pro",
      "responseId": "mTvYaO-rBaCgz7IPq7bGoAM"
    }"#;

    // alt=sse streams use CRLF line endings.
    const GEMINI_STREAM: &str = concat!(
        r#"data: {"candidates": [{"content": {"parts": [{"text": "The"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"totalTokenCount": 8,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 8}]},"modelVersion": "gemini-2.5-flash","responseId": "Ae0kaLqjDpKcz7IPmMLG0AQ"}"#,
        "\r\n\r\n",
        r#"data: {"candidates": [{"content": {"parts": [{"text": " quick brown 🦊 — façade"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 9,"totalTokenCount": 612,"thoughtsTokenCount": 595},"modelVersion": "gemini-2.5-flash","responseId": "Ae0kaLqjDpKcz7IPmMLG0AQ"}"#,
        "\r\n\r\n",
        r#"data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather","args": {"city": "Paris"}},"thoughtSignature": "CiQB0e2Kb"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 31,"totalTokenCount": 634,"thoughtsTokenCount": 595,"cachedContentTokenCount": 0},"modelVersion": "gemini-2.5-flash","responseId": "Ae0kaLqjDpKcz7IPmMLG0AQ"}"#,
        "\r\n\r\n",
    );

    // ---- helpers ----

    type Events = Vec<(String, Vec<u8>)>;

    fn feed_pieces<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> (Events, SseParser) {
        let mut parser = SseParser::new();
        let mut events = Vec::new();
        for piece in pieces {
            parser.feed(piece, |e| events.push((e.event.to_owned(), e.data.to_vec())));
        }
        parser.finish(|e| events.push((e.event.to_owned(), e.data.to_vec())));
        (events, parser)
    }

    fn parse_all(stream: &[u8]) -> Events {
        feed_pieces([stream]).0
    }

    fn usage_of(provider: Provider, events: &Events) -> (Option<Usage>, Option<String>, Vec<ToolCall>) {
        let mut acc = StreamUsage::new(provider);
        for (_, data) in events {
            acc.on_event(data);
        }
        let id = acc.response_id().map(str::to_owned);
        let calls = acc.tool_calls().to_vec();
        (acc.finish(), id, calls)
    }

    /// A small deterministic generator, so that "random" splits reproduce.
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, bound: usize) -> usize {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            usize::try_from(self.0 >> 33).unwrap() % bound
        }
    }

    /// Feeds `stream` whole, split in two at every offset, byte by byte and in random
    /// pieces, and checks every way yields the same events.
    fn assert_split_invariant(stream: &[u8]) -> Events {
        let whole = parse_all(stream);
        for cut in 0..=stream.len() {
            let (events, _) = feed_pieces([&stream[..cut], &stream[cut..]]);
            assert_eq!(events, whole, "split at {cut}");
        }
        let (events, _) = feed_pieces(stream.chunks(1));
        assert_eq!(events, whole, "byte by byte");
        let mut rng = Lcg(42);
        for _ in 0..200 {
            let mut pieces = Vec::new();
            let mut rest = stream;
            while !rest.is_empty() {
                let take = 1 + rng.below(rest.len().min(64));
                pieces.push(&rest[..take]);
                rest = &rest[take..];
            }
            assert_eq!(feed_pieces(pieces).0, whole, "random pieces");
        }
        whole
    }

    fn with_line_endings(stream: &str, ending: &str) -> String {
        stream.replace("\r\n", "\n").replace('\n', ending)
    }

    // ---- non-streaming bodies ----

    #[test]
    fn openai_body_usage() {
        let usage = openai_usage(OPENAI_BODY.as_bytes()).unwrap();
        assert_eq!(
            usage,
            Usage {
                input_tokens: 1117,
                cached_input_tokens: 1024,
                cache_write_5m_tokens: 0,
                cache_write_1h_tokens: 0,
                output_tokens: 46,
                reasoning_tokens: 10,
            }
        );
        // The accumulator reads a whole body too, tool calls included.
        let mut acc = OpenAiStreamUsage::new();
        acc.on_event(OPENAI_BODY.as_bytes());
        assert_eq!(acc.response_id(), Some("chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"));
        assert_eq!(acc.model(), Some("gpt-4o-2024-08-06"));
        assert_eq!(
            acc.tool_calls(),
            [ToolCall { id: "call_abc123".into(), name: "get_current_weather".into() }]
        );
        assert_eq!(acc.finish(), Some(usage));
    }

    #[test]
    fn openai_body_minimal_and_missing_details() {
        let usage =
            openai_usage(br#"{"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}"#);
        assert_eq!(usage, Some(Usage { input_tokens: 9, output_tokens: 12, ..Usage::default() }));
        let nulls = br#"{"usage":{"prompt_tokens":9,"completion_tokens":null,"prompt_tokens_details":null}}"#;
        assert_eq!(openai_usage(nulls), Some(Usage { input_tokens: 9, ..Usage::default() }));
    }

    #[test]
    fn anthropic_body_usage_adds_cache_traffic_to_input() {
        let usage = anthropic_usage(ANTHROPIC_BODY.as_bytes()).unwrap();
        assert_eq!(
            usage,
            Usage {
                input_tokens: 50 + 20_000 + 3_000,
                cached_input_tokens: 20_000,
                cache_write_5m_tokens: 1_000,
                cache_write_1h_tokens: 2_000,
                output_tokens: 503,
                reasoning_tokens: 0,
            }
        );
        let mut acc = AnthropicStreamUsage::new();
        acc.on_event(ANTHROPIC_BODY.as_bytes());
        assert_eq!(acc.response_id(), Some("msg_013Zva2CMHLNnXjNJJKqJ2EF"));
        assert_eq!(
            acc.tool_calls(),
            [ToolCall { id: "toolu_01A09q90qw90lq917835lq9".into(), name: "get_weather".into() }]
        );
        assert_eq!(acc.finish(), Some(usage));
    }

    #[test]
    fn anthropic_cache_creation_without_split_is_five_minutes() {
        let body = br#"{"usage":{"input_tokens":10,"cache_creation_input_tokens":300,"cache_read_input_tokens":0,"output_tokens":5}}"#;
        let usage = anthropic_usage(body).unwrap();
        assert_eq!(
            (usage.input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens),
            (310, 300, 0)
        );
        // A split that disagrees with the total: the larger is billed, the rest as 5m.
        let body = br#"{"usage":{"input_tokens":0,"cache_creation_input_tokens":100,"cache_creation":{"ephemeral_1h_input_tokens":30},"output_tokens":0}}"#;
        let usage = anthropic_usage(body).unwrap();
        assert_eq!(
            (usage.input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens),
            (100, 70, 30)
        );
        let body = br#"{"usage":{"input_tokens":0,"cache_creation_input_tokens":10,"cache_creation":{"ephemeral_5m_input_tokens":20,"ephemeral_1h_input_tokens":30}}}"#;
        let usage = anthropic_usage(body).unwrap();
        assert_eq!(
            (usage.input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens),
            (50, 20, 30)
        );
    }

    #[test]
    fn gemini_body_usage() {
        let usage = gemini_usage(GEMINI_BODY.as_bytes()).unwrap();
        assert_eq!(
            usage,
            Usage {
                input_tokens: 12_100,
                cached_input_tokens: 8_000,
                cache_write_5m_tokens: 0,
                cache_write_1h_tokens: 0,
                output_tokens: 1_150,
                reasoning_tokens: 900,
            }
        );
        let mut acc = GeminiStreamUsage::new();
        acc.on_event(GEMINI_BODY.as_bytes());
        assert_eq!(acc.response_id(), Some("mTvYaO-rBaCgz7IPq7bGoAM"));
        assert_eq!(acc.model(), Some("gemini-2.5-pro"));
        assert_eq!(acc.tool_calls(), [ToolCall { id: String::new(), name: "schedule_meeting".into() }]);
        assert_eq!(acc.finish(), Some(usage));
        // The JSON-array form of streamGenerateContent: the last usage wins.
        let array = br#" [{"usageMetadata":{"promptTokenCount":5}},{"candidates":[]},{"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":7}}]"#;
        assert_eq!(
            gemini_usage(array),
            Some(Usage { input_tokens: 5, output_tokens: 7, ..Usage::default() })
        );
    }

    #[test]
    fn usage_less_bodies_are_none() {
        for body in [&br#"{"id":"x","choices":[]}"#[..], br#"{"usage":null}"#, b"{}"] {
            assert_eq!(openai_usage(body), None);
            assert_eq!(anthropic_usage(body), None);
        }
        assert_eq!(gemini_usage(br#"{"candidates":[]}"#), None);
        assert_eq!(gemini_usage(br#"[{"candidates":[]}]"#), None);
        assert_eq!(gemini_usage(b"[]"), None);
        assert_eq!(gemini_usage(b""), None);
        let error = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(anthropic_usage(error), None);
    }

    #[test]
    fn malformed_input_is_none_without_panicking() {
        let garbage: [&[u8]; 7] = [b"", b"null", b"[", b"{\"usage\":", b"\xff\xfe", b"42", b"\"s\""];
        for body in garbage {
            assert_eq!(openai_usage(body), None);
            assert_eq!(anthropic_usage(body), None);
            assert_eq!(gemini_usage(body), None);
            assert!(!is_openai_usage_only_chunk(body));
            assert_eq!(openai_add_include_usage(body), None);
        }
        assert_eq!(openai_usage(br#"{"usage":{"prompt_tokens":-1}}"#), None);
        assert_eq!(anthropic_usage(br#"{"usage":{"input_tokens":"12"}}"#), None);
        assert_eq!(gemini_usage(br#"{"usageMetadata":{"promptTokenCount":1.5}}"#), None);
        // Every truncation of every fixture: no panic, and no usage from a cut body.
        for fixture in [OPENAI_BODY, ANTHROPIC_BODY, GEMINI_BODY] {
            let bytes = fixture.as_bytes();
            for cut in 0..bytes.len() - 1 {
                let prefix = &bytes[..cut];
                assert_eq!(openai_usage(prefix), None);
                assert_eq!(anthropic_usage(prefix), None);
                assert_eq!(gemini_usage(prefix), None);
                for provider in Provider::ALL {
                    let mut acc = StreamUsage::new(provider);
                    acc.on_event(prefix);
                    assert_eq!(acc.finish(), None);
                    let _ = request_summary(provider, prefix);
                }
                let _ = openai_add_include_usage(prefix);
            }
        }
    }

    // ---- streams ----

    #[test]
    fn openai_stream_usage_id_and_tool_calls() {
        let events = assert_split_invariant(OPENAI_STREAM.as_bytes());
        assert_eq!(events.len(), 8);
        assert!(events.iter().all(|(event, _)| event.is_empty()));
        let (usage, id, calls) = usage_of(Provider::OpenAi, &events);
        assert_eq!(
            usage,
            Some(Usage {
                input_tokens: 2048,
                cached_input_tokens: 1536,
                output_tokens: 120,
                reasoning_tokens: 64,
                ..Usage::default()
            })
        );
        assert_eq!(id.as_deref(), Some("chatcmpl-123"));
        assert_eq!(
            calls,
            [
                ToolCall { id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(), name: "get_weather".into() },
                ToolCall { id: "call_2".into(), name: "get_time".into() },
            ]
        );
        let usage_only: Vec<bool> = events.iter().map(|(_, data)| is_openai_usage_only_chunk(data)).collect();
        assert_eq!(usage_only, [false, false, false, false, false, false, true, false]);
        let mut acc = OpenAiStreamUsage::new();
        let seen: Vec<bool> = events
            .iter()
            .map(|(_, data)| {
                acc.on_event(data);
                acc.last_event_was_usage_only()
            })
            .collect();
        assert_eq!(seen, usage_only);
        // Azure's first chunk has empty choices but no usage.
        assert!(!is_openai_usage_only_chunk(br#"{"choices":[],"prompt_filter_results":[]}"#));
        assert!(!is_openai_usage_only_chunk(br#"{"object":"chat.completion","choices":[],"usage":{}}"#));
    }

    #[test]
    fn openai_stream_without_usage_is_none() {
        let stream = OPENAI_STREAM.replace(r#""usage":{"prompt_tokens""#, r#""other":{"prompt_tokens""#);
        let (usage, id, _) = usage_of(Provider::OpenAi, &parse_all(stream.as_bytes()));
        assert_eq!(usage, None);
        assert_eq!(id.as_deref(), Some("chatcmpl-123"));
    }

    #[test]
    fn anthropic_stream_usage_id_and_tool_calls() {
        let events = assert_split_invariant(ANTHROPIC_STREAM.as_bytes());
        assert_eq!(events.len(), 11);
        assert_eq!(events[0].0, "message_start");
        let (usage, id, calls) = usage_of(Provider::Anthropic, &events);
        assert_eq!(
            usage,
            Some(Usage {
                input_tokens: 472 + 2048 + 1800,
                cached_input_tokens: 1800,
                cache_write_5m_tokens: 2048,
                cache_write_1h_tokens: 0,
                output_tokens: 89,
                reasoning_tokens: 0,
            })
        );
        assert_eq!(id.as_deref(), Some("msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY"));
        assert_eq!(
            calls,
            [ToolCall { id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(), name: "get_weather".into() }]
        );
    }

    #[test]
    fn anthropic_message_delta_is_cumulative_and_overrides_input_fields() {
        let mut acc = AnthropicStreamUsage::new();
        acc.on_event(
            br#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":100,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
        );
        assert_eq!(acc.usage().map(|u| (u.input_tokens, u.output_tokens)), Some((100, 1)));
        acc.on_event(
            br#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":40}}"#,
        );
        acc.on_event(
            br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":120,"cache_creation_input_tokens":null,"cache_read_input_tokens":50,"output_tokens":75}}"#,
        );
        assert_eq!(
            acc.finish(),
            Some(Usage { input_tokens: 170, cached_input_tokens: 50, output_tokens: 75, ..Usage::default() })
        );
        // A stream that died before any usage.
        let mut acc = AnthropicStreamUsage::new();
        acc.on_event(br#"{"type":"ping"}"#);
        acc.on_event(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        assert_eq!(acc.finish(), None);
    }

    #[test]
    fn gemini_stream_usage_last_wins() {
        let events = assert_split_invariant(GEMINI_STREAM.as_bytes());
        assert_eq!(events.len(), 3);
        let (usage, id, calls) = usage_of(Provider::Google, &events);
        assert_eq!(
            usage,
            Some(Usage {
                input_tokens: 8,
                output_tokens: 31 + 595,
                reasoning_tokens: 595,
                ..Usage::default()
            })
        );
        assert_eq!(id.as_deref(), Some("Ae0kaLqjDpKcz7IPmMLG0AQ"));
        assert_eq!(calls, [ToolCall { id: String::new(), name: "get_weather".into() }]);
        let mut acc = GeminiStreamUsage::new();
        acc.on_event(br#"{"candidates":[{"content":{"parts":[{"text":"hi"}]}}]}"#);
        assert_eq!(acc.finish(), None);
    }

    #[test]
    fn every_line_ending_gives_the_same_events() {
        for stream in [OPENAI_STREAM, ANTHROPIC_STREAM, GEMINI_STREAM] {
            let lf = parse_all(with_line_endings(stream, "\n").as_bytes());
            for ending in ["\r\n", "\r"] {
                let other = with_line_endings(stream, ending);
                assert_eq!(assert_split_invariant(other.as_bytes()), lf, "{ending:?}");
            }
        }
    }

    // ---- the SSE parser itself ----

    #[test]
    fn sse_fields_comments_and_multiline_data() {
        let stream = b": keep-alive comment\n\
            event: update\n\
            id: 7\n\
            retry: 1000\n\
            data:first\n\
            data:  second keeps one space\n\
            data\n\
            unknown: field\n\
            \n\
            data: next\n\n\
            \n\n\
            event: empty-event-has-no-data\n\n\
            data: [DONE]\n\n";
        let events = assert_split_invariant(stream);
        assert_eq!(
            events,
            vec![
                ("update".to_owned(), b"first\n second keeps one space\n".to_vec()),
                (String::new(), b"next".to_vec()),
                (String::new(), b"[DONE]".to_vec()),
            ]
        );
        assert!(SseEvent { event: "", data: b"[DONE]" }.is_done());
        assert!(!SseEvent { event: "", data: b"[DONE] " }.is_done());
    }

    #[test]
    fn sse_cr_then_lf_across_chunks_is_one_line_end() {
        let (events, _) = feed_pieces([&b"data: a\r"[..], b"\ndata: b\r", b"\n\r", b"\n"]);
        assert_eq!(events, vec![(String::new(), b"a\nb".to_vec())]);
        // A lone CR followed by another CR is a blank line.
        let (events, _) = feed_pieces([&b"data: a\r"[..], b"\rdata: b\r\r"]);
        assert_eq!(events, vec![(String::new(), b"a".to_vec()), (String::new(), b"b".to_vec())]);
    }

    #[test]
    fn sse_skips_a_leading_bom_only() {
        let stream = "\u{feff}data: x\n\n\u{feff}data: y\n\n".as_bytes();
        let events = assert_split_invariant(stream);
        assert_eq!(events.len(), 1, "a BOM later on makes an unknown field");
        assert_eq!(events[0].1, b"x");
    }

    #[test]
    fn sse_finish_flushes_an_unterminated_event() {
        let (events, _) = feed_pieces([&b"data: {\"a\":1}\n\ndata: {\"usage\":2}\n"[..]]);
        assert_eq!(events.len(), 2);
        let (events, _) = feed_pieces([&b"data: {\"usage\":2}"[..]]);
        assert_eq!(events, vec![(String::new(), b"{\"usage\":2}".to_vec())]);
        // The parser is reusable after finish.
        let mut parser = SseParser::new();
        let mut count = 0;
        parser.feed(b"data: x\r", |_| count += 1);
        parser.finish(|_| count += 1);
        parser.feed(b"\ndata: y\n\n", |_| count += 1);
        assert_eq!(count, 2);
    }

    #[test]
    fn sse_drops_oversized_events_and_recovers() {
        let mut parser = SseParser::with_max_event_bytes(16);
        let mut events = Vec::new();
        let stream: &[u8] =
            b"data: 0123456789\ndata: 0123456789\n\ndata: ok\n\ndata: 0123456789abcdefghij\n\ndata: ok2\n\n";
        for piece in stream.chunks(3) {
            parser.feed(piece, |e| events.push(e.data.to_vec()));
        }
        assert_eq!(events, vec![b"ok".to_vec(), b"ok2".to_vec()]);
        assert_eq!(parser.dropped_events(), 2);

        // An oversized line split over chunks is never kept whole.
        let mut parser = SseParser::with_max_event_bytes(1024);
        let mut events = Vec::new();
        parser.feed(b"data: ", |e| events.push(e.data.to_vec()));
        for _ in 0..100 {
            parser.feed(&[b'x'; 100], |e| events.push(e.data.to_vec()));
            assert!(parser.partial_line.len() <= 1024);
        }
        parser.feed(b"\ndata: more\n\ndata: fine\n\n", |e| events.push(e.data.to_vec()));
        assert_eq!(events, vec![b"fine".to_vec()]);
        assert_eq!(parser.dropped_events(), 1);
    }

    #[test]
    fn sse_default_limit_is_four_mebibytes() {
        let big = vec![b'a'; MAX_SSE_EVENT_BYTES];
        let mut stream = b"data: ".to_vec();
        stream.extend_from_slice(&big);
        stream.extend_from_slice(b"\n\ndata: after\n\n");
        let mut sizes = Vec::new();
        let mut parser = SseParser::new();
        for piece in stream.chunks(64 * 1024) {
            parser.feed(piece, |e| sizes.push(e.data.len()));
        }
        assert_eq!(sizes, vec![5]);
        let mut fits = b"data: ".to_vec();
        // The limit counts the line being assembled, `data: ` included.
        fits.extend_from_slice(&big[..MAX_SSE_EVENT_BYTES - 6]);
        fits.extend_from_slice(b"\n\n");
        let mut sizes = Vec::new();
        for piece in fits.chunks(64 * 1024) {
            parser.feed(piece, |e| sizes.push(e.data.len()));
        }
        assert_eq!(sizes, vec![MAX_SSE_EVENT_BYTES - 6]);
    }

    #[test]
    fn sse_hands_out_single_line_events_without_copying() {
        let chunk = b"data: {\"a\":1}\n\nevent: x\ndata: {\"b\":2}\n\n";
        let mut parser = SseParser::new();
        parser.feed(chunk, |e| {
            assert!(chunk.as_ptr_range().contains(&e.data.as_ptr()), "borrowed from the chunk");
        });
        assert_eq!(parser.data.capacity(), 0, "nothing was buffered");
    }

    // ---- requests ----

    #[test]
    fn request_summaries() {
        let openai = br#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi \"max_tokens\""}],"max_tokens":100,"max_completion_tokens":300,"stream":true}"#;
        assert_eq!(
            request_summary(Provider::OpenAi, openai),
            Some(RequestSummary {
                model: Some("gpt-4o".into()),
                max_output_tokens: Some(300),
                stream: true,
                include_usage: false
            })
        );
        assert_eq!(request_max_tokens(Provider::OpenAi, br#"{"max_tokens":100}"#), Some(100));
        assert_eq!(request_max_tokens(Provider::OpenAi, br#"{"max_tokens":99999999999}"#), Some(u32::MAX));
        assert_eq!(request_max_tokens(Provider::OpenAi, br#"{"model":"gpt-4o"}"#), None);
        let anthropic = br#"{"model":"claude-opus-4-8","max_tokens":1024,"messages":[],"stream":false}"#;
        assert_eq!(request_max_tokens(Provider::Anthropic, anthropic), Some(1024));
        assert_eq!(request_model(anthropic).as_deref(), Some("claude-opus-4-8"));
        assert_eq!(request_model(br#"{"model":"gpt\u002d4o"}"#).as_deref(), Some("gpt-4o"));
        assert_eq!(request_model(b"{}"), None);
        let gemini = br#"{"contents":[{"parts":[{"text":"hi"}]}],"generationConfig":{"maxOutputTokens":2048,"temperature":0.2}}"#;
        assert_eq!(request_max_tokens(Provider::Google, gemini), Some(2048));
        let snake = br#"{"generation_config":{"max_output_tokens":64}}"#;
        assert_eq!(request_max_tokens(Provider::Google, snake), Some(64));
        assert_eq!(request_max_tokens(Provider::Google, b"not json"), None);
    }

    #[test]
    fn openai_stream_needs_usage_cases() {
        assert!(openai_stream_needs_usage(br#"{"model":"m","stream":true}"#));
        assert!(openai_stream_needs_usage(br#"{"stream":true,"stream_options":{"include_usage":false}}"#));
        assert!(openai_stream_needs_usage(br#"{"stream":true,"stream_options":null}"#));
        assert!(!openai_stream_needs_usage(br#"{"stream":true,"stream_options":{"include_usage":true}}"#));
        assert!(!openai_stream_needs_usage(br#"{"stream":false}"#));
        assert!(!openai_stream_needs_usage(br#"{"model":"m"}"#));
        assert!(!openai_stream_needs_usage(b"[1]"));
    }

    #[test]
    fn openai_add_include_usage_splices_without_reformatting() {
        let cases: [(&str, &str); 7] = [
            (
                r#"{"model":"gpt-4o","stream":true}"#,
                r#"{"stream_options":{"include_usage":true},"model":"gpt-4o","stream":true}"#,
            ),
            ("{}", r#"{"stream_options":{"include_usage":true}}"#),
            (
                r#"{"stream":true,"stream_options":{"include_usage":false}}"#,
                r#"{"stream":true,"stream_options":{"include_usage":true}}"#,
            ),
            (
                r#"{"stream":true,"stream_options":{ }}"#,
                r#"{"stream":true,"stream_options":{"include_usage":true }}"#,
            ),
            (
                r#"{"stream_options":{"continuous_usage_stats":false}}"#,
                r#"{"stream_options":{"include_usage":true,"continuous_usage_stats":false}}"#,
            ),
            (r#"{"stream_options" : null , "n":1}"#, r#"{"stream_options" : {"include_usage":true} , "n":1}"#),
            (
                " {\n  \"messages\": [{\"content\": \"say \\\"stream_options\\\": {} }\"}],\n  \"temperature\": 1.0e0\n}\n",
                " {\"stream_options\":{\"include_usage\":true},\n  \"messages\": [{\"content\": \"say \\\"stream_options\\\": {} }\"}],\n  \"temperature\": 1.0e0\n}\n",
            ),
        ];
        for (before, after) in cases {
            let spliced = openai_add_include_usage(before.as_bytes()).unwrap_or_else(|| panic!("{before}"));
            assert_eq!(String::from_utf8(spliced).unwrap(), after);
            let summary = request_summary(Provider::OpenAi, after.as_bytes()).unwrap();
            assert!(summary.include_usage);
        }
        let include_true = br#"{"stream_options":{"include_usage":true}}"#;
        assert_eq!(openai_add_include_usage(include_true).as_deref(), Some(&include_true[..]));
    }

    #[test]
    fn openai_add_include_usage_refuses_what_it_cannot_splice_safely() {
        let refused: [&[u8]; 8] = [
            br#"{"stream_options":"yes"}"#,
            br#"{"stream_options":[]}"#,
            br#"{"stream_options":nul}"#,
            br#"{"stream_options":{},"stream_options":{}}"#,
            br#"{"stream\u005foptions":{}}"#,
            br#"["stream_options"]"#,
            br#"{"a":1} trailing"#,
            br#"{"a":[1,2}"#,
        ];
        for body in refused {
            assert_eq!(openai_add_include_usage(body), None, "{}", String::from_utf8_lossy(body));
        }
    }
}
