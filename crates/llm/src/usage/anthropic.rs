//! Anthropic messages: usage of a whole body, and of a stream as it passes.

use serde::Deserialize;

use super::{remember, remember_reason, FinishReason, ProviderUsage, Text, ToolCall};
use crate::pricing::Usage;

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
    /// `message_delta` (its `stop_reason`).
    #[serde(borrow)]
    delta: Option<AnthropicDelta<'a>>,
    /// A whole message's.
    #[serde(borrow)]
    stop_reason: Option<Text<'a>>,
    /// The fields of a whole message.
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    #[serde(borrow)]
    content: Option<Vec<AnthropicBlock<'a>>>,
}

#[derive(Deserialize)]
struct AnthropicDelta<'a> {
    #[serde(borrow)]
    stop_reason: Option<Text<'a>>,
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
    finish_reason: Option<FinishReason>,
    usage: Option<AnthropicRawUsage>,
    tool_calls: Vec<ToolCall>,
    /// `message_stop` arrived (or a whole message was fed).
    stopped: bool,
    /// An `error` event arrived: whatever follows, the call did not complete normally.
    errored: bool,
}

impl AnthropicStreamUsage {
    pub fn new() -> Self {
        Self::default()
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

    /// The stream's usage; `None` when no event carried any.
    pub fn finish(self) -> Option<Usage> {
        self.usage()
    }
}

impl ProviderUsage for AnthropicStreamUsage {
    /// Takes the `data` of one SSE event (the JSON carries its own `type`, so the `event:`
    /// field is not needed). Non-JSON data and unknown events are ignored.
    fn on_event(&mut self, data: &[u8]) {
        let Ok(event) = serde_json::from_slice::<AnthropicEvent<'_>>(data) else { return };
        match event.kind.as_ref().map(Text::as_str) {
            Some("message_start") => {
                if let Some(message) = event.message {
                    self.on_message(message.id, message.model, message.usage, message.content);
                }
            }
            Some("message_delta") => {
                remember_reason(&mut self.finish_reason, event.delta.and_then(|d| d.stop_reason));
                if let Some(newer) = event.usage {
                    self.usage.get_or_insert_with(AnthropicRawUsage::default).overlay(newer);
                }
            }
            Some("content_block_start") => {
                if let Some(block) = event.content_block {
                    self.on_block(block);
                }
            }
            Some("message") => {
                self.stopped = true;
                remember_reason(&mut self.finish_reason, event.stop_reason);
                self.on_message(event.id, event.model, event.usage, event.content);
            }
            Some("message_stop") => self.stopped = true,
            Some("error") => self.errored = true,
            _ => {}
        }
    }

    /// The message id (`msg_…`).
    fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The model that answered.
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// `stop_reason` (`end_turn`, `max_tokens`, `tool_use`, ...).
    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason.clone()
    }

    fn take_model(&mut self) -> Option<String> {
        self.model.take()
    }

    /// `tool_use` blocks started so far.
    fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// Usage seen so far (for a stream cut short).
    fn usage(&self) -> Option<Usage> {
        self.usage.map(AnthropicRawUsage::normalise)
    }

    fn complete(&self) -> bool {
        self.stopped && !self.errored
    }
}
