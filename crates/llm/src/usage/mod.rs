//! Reads token usage out of provider traffic for the proxy: whole JSON response bodies,
//! and server-sent-event streams parsed incrementally while they pass through to the
//! client. Pure functions over bytes, no I/O.
//!
//! Every parser normalises to [`Usage`] as defined in `crate::pricing` (input includes
//! cache reads and writes, output includes reasoning), so that one cost formula serves all
//! providers. Parsing is on the hot path: the structs below name only the fields we need,
//! and strings are borrowed from the input unless they contain escapes.

mod anthropic;
mod aws_events;
mod bedrock;
mod bound;
mod gemini;
#[cfg(test)]
mod golden;
mod openai;
mod request;
mod responses;
mod sse;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

pub use anthropic::{anthropic_usage, AnthropicStreamUsage};
pub use aws_events::AwsEventUsage;
pub use bedrock::{bedrock_model, converse_usage, invokes_anthropic};
pub use bound::{set_output_bound, unbounded_part, Clamp};
pub use gemini::{gemini_usage, GeminiStreamUsage};
pub use openai::{is_openai_usage_only_chunk, openai_usage, OpenAiStreamUsage};
pub use request::{
    may_write_cache, openai_add_include_usage, openai_stream_needs_usage, request_max_tokens, request_model,
    request_summary, request_summary_in, RequestSummary,
};
pub use responses::{embeddings_usage, BuiltinCall, ResponsesUsage};
pub use sse::{SseEvent, SseParser, MAX_SSE_EVENT_BYTES};

use crate::pricing::{Provider, Usage};

/// The shape of a route's requests and answers, which decides how they are read: one
/// provider may speak several (OpenAI's chat completions, Responses and embeddings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireFormat {
    /// OpenAI chat completions, which every OpenAI-compatible provider speaks.
    OpenAiChat,
    /// The OpenAI Responses API.
    OpenAiResponses,
    /// OpenAI embeddings (never streamed).
    OpenAiEmbeddings,
    Anthropic,
    Gemini,
    /// Amazon Bedrock's Converse API, and Amazon Nova's InvokeModel body of the same
    /// shape (`inferenceConfig.maxTokens`; usage `inputTokens`, `outputTokens`, ...).
    BedrockConverse,
}

impl WireFormat {
    /// The main format of a provider.
    pub const fn of(provider: Provider) -> Self {
        match provider {
            Provider::OpenAi | Provider::Azure => WireFormat::OpenAiChat,
            // Bedrock's InvokeModel and Vertex's rawPredict carry Anthropic's messages.
            Provider::Anthropic | Provider::Bedrock => WireFormat::Anthropic,
            Provider::Google | Provider::Vertex => WireFormat::Gemini,
        }
    }
}

// ---------------------------------------------------------------------------------------
// Shared pieces
// ---------------------------------------------------------------------------------------

/// A JSON string, borrowed from the input when it has no escapes and owned otherwise.
/// (`Option<Cow<str>>` with serde's derive always copies.)
pub(super) struct Text<'a>(pub(super) Cow<'a, str>);

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
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

/// Keeps the first non-empty value seen (response ids and models repeat on every chunk).
/// Why a generation stopped, as the provider says it (`stop`, `length`, `end_turn`,
/// `MAX_TOKENS`, ...). The common reasons are kept without allocating.
pub type FinishReason = Cow<'static, str>;

/// The reasons providers commonly give, kept as static strings.
const KNOWN_FINISH_REASONS: [&str; 24] = [
    "stop",
    "length",
    "tool_calls",
    "content_filter",
    "function_call",
    "end_turn",
    "max_tokens",
    "stop_sequence",
    "tool_use",
    "pause_turn",
    "refusal",
    "STOP",
    "MAX_TOKENS",
    "SAFETY",
    "RECITATION",
    "OTHER",
    "BLOCKLIST",
    "PROHIBITED_CONTENT",
    "SPII",
    "MALFORMED_FUNCTION_CALL",
    "completed",
    "incomplete",
    "failed",
    "cancelled",
];

/// A finish reason from the provider's text.
pub fn finish_reason(value: &str) -> FinishReason {
    match KNOWN_FINISH_REASONS.iter().find(|known| **known == value) {
        Some(known) => Cow::Borrowed(known),
        None => Cow::Owned(value.to_owned()),
    }
}

/// Keeps the first finish reason seen.
pub(super) fn remember_reason(slot: &mut Option<FinishReason>, value: Option<Text<'_>>) {
    if slot.is_none() {
        if let Some(value) = value.filter(|v| !v.0.is_empty()) {
            *slot = Some(finish_reason(value.as_str()));
        }
    }
}

pub(super) fn remember(slot: &mut Option<String>, value: Option<Text<'_>>) {
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

/// What every provider's usage reader does: take a stream's events (or a whole body
/// as one event) and say what they reported.
pub trait ProviderUsage {
    /// Takes the `data` of one event. Data the reader does not understand is ignored.
    fn on_event(&mut self, data: &[u8]);
    /// The provider's response id.
    fn response_id(&self) -> Option<&str>;
    /// The model that answered, as the provider names it.
    fn model(&self) -> Option<&str>;
    /// Why the generation stopped (the first choice's or candidate's reason).
    fn finish_reason(&self) -> Option<FinishReason>;
    /// Moves the answering model's name out (no copy), once the stream has ended.
    fn take_model(&mut self) -> Option<String>;
    /// Tool calls requested so far, in order of first appearance.
    fn tool_calls(&self) -> &[ToolCall];
    /// Usage seen so far (the whole usage once complete).
    fn usage(&self) -> Option<Usage>;
    /// The provider's own end marker arrived, and no error event before it: only then is
    /// a stream a completed call (OpenAI `[DONE]`, Anthropic `message_stop`, Gemini's
    /// chunk with a `finishReason`).
    fn complete(&self) -> bool;
}

/// The stream reader of one provider, so that the proxy's streaming path is written once.
#[derive(Debug)]
pub enum StreamUsage {
    OpenAi(OpenAiStreamUsage),
    Responses(ResponsesUsage),
    Anthropic(AnthropicStreamUsage),
    Google(GeminiStreamUsage),
}

impl StreamUsage {
    pub fn new(provider: Provider) -> Self {
        Self::of_format(WireFormat::of(provider))
    }

    /// The reader of one wire format (embeddings, never streamed, read as chat).
    pub fn of_format(format: WireFormat) -> Self {
        match format {
            WireFormat::OpenAiChat | WireFormat::OpenAiEmbeddings => {
                StreamUsage::OpenAi(OpenAiStreamUsage::new())
            }
            WireFormat::OpenAiResponses => StreamUsage::Responses(ResponsesUsage::new()),
            WireFormat::Anthropic => StreamUsage::Anthropic(AnthropicStreamUsage::new()),
            WireFormat::Gemini => StreamUsage::Google(GeminiStreamUsage::new()),
            // Converse streams are AWS event streams, never server-sent events: this
            // reader is never fed, and a Converse answer is read whole
            // (`converse_usage`).
            WireFormat::BedrockConverse => StreamUsage::OpenAi(OpenAiStreamUsage::new()),
        }
    }

    /// Built-in tools the provider ran (Responses only).
    pub fn builtin_calls(&self) -> &[BuiltinCall] {
        match self {
            StreamUsage::Responses(r) => r.builtin_calls(),
            _ => &[],
        }
    }

    fn reader(&self) -> &dyn ProviderUsage {
        match self {
            StreamUsage::OpenAi(s) => s,
            StreamUsage::Responses(s) => s,
            StreamUsage::Anthropic(s) => s,
            StreamUsage::Google(s) => s,
        }
    }

    fn reader_mut(&mut self) -> &mut dyn ProviderUsage {
        match self {
            StreamUsage::OpenAi(s) => s,
            StreamUsage::Responses(s) => s,
            StreamUsage::Anthropic(s) => s,
            StreamUsage::Google(s) => s,
        }
    }

    pub fn on_event(&mut self, data: &[u8]) {
        self.reader_mut().on_event(data);
    }

    pub fn response_id(&self) -> Option<&str> {
        self.reader().response_id()
    }

    pub fn model(&self) -> Option<&str> {
        self.reader().model()
    }

    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.reader().finish_reason()
    }

    pub fn take_model(&mut self) -> Option<String> {
        self.reader_mut().take_model()
    }

    pub fn tool_calls(&self) -> &[ToolCall] {
        self.reader().tool_calls()
    }

    pub fn usage(&self) -> Option<Usage> {
        self.reader().usage()
    }

    pub fn complete(&self) -> bool {
        self.reader().complete()
    }

    pub fn finish(self) -> Option<Usage> {
        self.usage()
    }
}
