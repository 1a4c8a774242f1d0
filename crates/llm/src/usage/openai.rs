//! OpenAI chat completions: usage of a whole body, and of a stream as it passes.

use serde::de::IgnoredAny;
use serde::Deserialize;

use super::{remember, remember_reason, FinishReason, ProviderUsage, Text, ToolCall};
use crate::pricing::Usage;

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
    #[serde(borrow)]
    finish_reason: Option<Text<'a>>,
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
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
    tool_calls: Vec<ToolCall>,
    /// `(choice index, tool-call index)` of each entry of `tool_calls`: a streamed call is
    /// spread over many deltas that share its index.
    tool_call_keys: Vec<(usize, usize)>,
    last_event_usage_only: bool,
    /// `[DONE]` arrived (or a whole body was fed).
    done: bool,
}

impl OpenAiStreamUsage {
    pub fn new() -> Self {
        Self::default()
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

    /// The stream's usage; `None` when no chunk carried any.
    pub fn finish(self) -> Option<Usage> {
        self.usage
    }
}

impl ProviderUsage for OpenAiStreamUsage {
    /// Takes the `data` of one SSE event. Non-JSON data (`[DONE]`, errors) is ignored.
    fn on_event(&mut self, data: &[u8]) {
        self.last_event_usage_only = false;
        if data == b"[DONE]" {
            self.done = true;
            return;
        }
        let Ok(chunk) = serde_json::from_slice::<OpenAiChunk<'_>>(data) else { return };
        // A whole `chat.completion` body fed as one event is complete in itself.
        self.done |= chunk.object.as_ref().is_some_and(|o| o.as_str() == "chat.completion");
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
            remember_reason(&mut self.finish_reason, choice.finish_reason);
            for calls in [choice.delta, choice.message].into_iter().flatten() {
                for (position, call) in calls.tool_calls.into_iter().flatten().enumerate() {
                    let key = (choice_index, call.index.unwrap_or(position));
                    self.record_tool_call(key, call.id, call.function.and_then(|f| f.name));
                }
            }
        }
    }

    /// The completion id (`chatcmpl-…`).
    fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    /// The model that answered, as the provider names it (often a dated snapshot).
    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    /// `finish_reason` of the first choice that gave one.
    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason.clone()
    }

    fn take_model(&mut self) -> Option<String> {
        self.model.take()
    }

    /// Tool calls requested so far, in order of first appearance.
    fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    /// Usage seen so far (for a stream cut short).
    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn complete(&self) -> bool {
        self.done
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
