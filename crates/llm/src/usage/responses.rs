//! OpenAI Responses API (`/v1/responses`): usage, response id, the calls the model
//! asked the client to make, and the built-in tools the provider ran, from a whole
//! `response` object or from its typed event stream as it passes.
//!
//! A stream is complete only on a terminal event that settles the answer:
//! `response.completed`, `response.incomplete` (a truncated answer is billed for what
//! it used) and `response.failed` when it carries usage. Its usage is the terminal
//! event's `response.usage`.

use std::collections::HashSet;

use serde::Deserialize;

use super::{remember, remember_reason, FinishReason, ProviderUsage, Text, ToolCall};
use crate::pricing::Usage;

/// A tool the provider ran itself (web search, file search, code interpreter, ...),
/// charged per call where the provider publishes a price.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuiltinCall {
    /// The output item's type, such as `web_search_call`.
    pub kind: String,
    /// The output item's id (`ws_…`); empty when it had none.
    pub id: String,
    /// The code interpreter's container, which is what OpenAI charges for.
    pub container: Option<String>,
}

/// Item ids remembered to count each item once. An upstream can stream items without
/// end, so the set is bounded: past this many, an item whose id is not remembered counts
/// at every sighting (an item both streamed and repeated in the terminal event then
/// counts twice), which can only charge more, never less.
const MAX_REMEMBERED_ITEMS: usize = 200_000;

/// Output item types the model emits for the client to execute: requested calls, not
/// tools the provider ran.
const CLIENT_CALLS: [&str; 6] = [
    "function_call",
    "custom_tool_call",
    "computer_call",
    "local_shell_call",
    "shell_call",
    "apply_patch_call",
];

#[derive(Deserialize, Clone, Copy)]
struct RawUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    input_tokens_details: Option<InputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize, Clone, Copy)]
struct InputDetails {
    cached_tokens: Option<u64>,
}

#[derive(Deserialize, Clone, Copy)]
struct OutputDetails {
    reasoning_tokens: Option<u64>,
}

impl RawUsage {
    /// `input_tokens` includes the cached ones and `output_tokens` the reasoning ones,
    /// which is the `Usage` definition.
    fn normalise(self) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(0),
            cached_input_tokens: self.input_tokens_details.and_then(|d| d.cached_tokens).unwrap_or(0),
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: self.output_tokens.unwrap_or(0),
            reasoning_tokens: self.output_tokens_details.and_then(|d| d.reasoning_tokens).unwrap_or(0),
        }
    }
}

/// An output item: only what tells a tool call apart.
#[derive(Deserialize)]
struct Item<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    call_id: Option<Text<'a>>,
    #[serde(borrow)]
    name: Option<Text<'a>>,
    #[serde(borrow)]
    container_id: Option<Text<'a>>,
}

/// A `response` object, whole or inside an event.
#[derive(Deserialize)]
struct ResponseObject<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    object: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    /// `completed`, `incomplete`, `failed`, ... (a terminal response's is its finish
    /// reason).
    #[serde(borrow)]
    status: Option<Text<'a>>,
    usage: Option<RawUsage>,
    #[serde(borrow)]
    output: Option<Vec<Item<'a>>>,
}

/// One streamed event (`{"type": "response.…", ...}`); a whole response body has no
/// `type` and is read as a [`ResponseObject`].
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow, rename = "type")]
    kind: Option<Text<'a>>,
    #[serde(borrow)]
    response: Option<ResponseObject<'a>>,
    #[serde(borrow)]
    item: Option<Item<'a>>,
}

/// Accumulates what a Responses stream (or a whole body fed as one event) reported.
#[derive(Debug, Default)]
pub struct ResponsesUsage {
    response_id: Option<String>,
    model: Option<String>,
    finish_reason: Option<FinishReason>,
    usage: Option<Usage>,
    tool_calls: Vec<ToolCall>,
    builtin: Vec<BuiltinCall>,
    /// Ids of the items counted so far: an item is reported more than once in a stream
    /// (`response.output_item.done`, then again in the final `output`).
    seen: HashSet<String>,
    done: bool,
}

impl ResponsesUsage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Built-in tool calls the provider ran, each once, in order of appearance.
    pub fn builtin_calls(&self) -> &[BuiltinCall] {
        &self.builtin
    }

    fn take_response(&mut self, response: ResponseObject<'_>, terminal: bool) {
        remember(&mut self.response_id, response.id);
        remember(&mut self.model, response.model);
        if terminal {
            remember_reason(&mut self.finish_reason, response.status);
            if let Some(usage) = response.usage {
                self.usage = Some(usage.normalise());
            }
            for item in response.output.into_iter().flatten() {
                self.record_item(item);
            }
        }
    }

    /// Notes one output item; an item seen before (same id) is not counted twice.
    fn record_item(&mut self, item: Item<'_>) {
        let Some(kind) = item.kind.as_ref().map(Text::as_str) else { return };
        let id = item.id.as_ref().map_or("", Text::as_str);
        if CLIENT_CALLS.contains(&kind) {
            let call_id = item.call_id.as_ref().map_or(id, Text::as_str);
            if self.first_sighting(call_id) {
                let name = item.name.as_ref().map_or(kind, Text::as_str);
                self.tool_calls.push(ToolCall { id: call_id.to_owned(), name: name.to_owned() });
            }
        } else if kind.ends_with("_call") && self.first_sighting(id) {
            self.builtin.push(BuiltinCall {
                kind: kind.to_owned(),
                id: id.to_owned(),
                container: item.container_id.map(|c| c.0.into_owned()),
            });
        }
    }
}

impl ResponsesUsage {
    /// True the first time `id` is seen; an item without an id always counts, and so
    /// does one not remembered once [`MAX_REMEMBERED_ITEMS`] are.
    fn first_sighting(&mut self, id: &str) -> bool {
        if id.is_empty() {
            return true;
        }
        if self.seen.len() >= MAX_REMEMBERED_ITEMS {
            return !self.seen.contains(id);
        }
        self.seen.insert(id.to_owned())
    }
}

impl ProviderUsage for ResponsesUsage {
    fn on_event(&mut self, data: &[u8]) {
        let Ok(event) = serde_json::from_slice::<Event<'_>>(data) else { return };
        let kind = event.kind.as_ref().map(Text::as_str);
        match kind {
            Some("response.completed" | "response.incomplete") => {
                if let Some(response) = event.response {
                    self.take_response(response, true);
                    self.done = true;
                }
            }
            Some("response.failed") => {
                if let Some(response) = event.response {
                    let carries_usage = response.usage.is_some();
                    self.take_response(response, carries_usage);
                    self.done = carries_usage;
                }
            }
            Some("response.output_item.done") => {
                if let Some(item) = event.item {
                    self.record_item(item);
                }
            }
            Some(_) => {
                if let Some(response) = event.response {
                    self.take_response(response, false);
                }
            }
            // A whole `response` object is complete in itself (a background answer
            // too, whose missing usage the settlement deals with).
            None => {
                let Ok(body) = serde_json::from_slice::<ResponseObject<'_>>(data) else { return };
                if body.object.as_ref().is_some_and(|o| o.as_str() == "response") {
                    self.take_response(body, true);
                    self.done = true;
                }
            }
        }
    }

    /// The terminal response's `status`.
    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason.clone()
    }

    fn take_model(&mut self) -> Option<String> {
        self.model.take()
    }

    /// The response id (`resp_…`).
    fn response_id(&self) -> Option<&str> {
        self.response_id.as_deref()
    }

    fn model(&self) -> Option<&str> {
        self.model.as_deref()
    }

    fn tool_calls(&self) -> &[ToolCall] {
        &self.tool_calls
    }

    fn usage(&self) -> Option<Usage> {
        self.usage
    }

    fn complete(&self) -> bool {
        self.done
    }
}

// ---------------------------------------------------------------------------------------
// Embeddings
// ---------------------------------------------------------------------------------------

#[derive(Deserialize)]
struct EmbeddingsBody {
    usage: Option<EmbeddingsRawUsage>,
}

#[derive(Deserialize)]
struct EmbeddingsRawUsage {
    prompt_tokens: Option<u64>,
}

/// Usage of an embeddings answer: `usage.prompt_tokens`, all input. `None` when the
/// body is not JSON or carries no usage.
pub fn embeddings_usage(body: &[u8]) -> Option<Usage> {
    let usage = serde_json::from_slice::<EmbeddingsBody>(body).ok()?.usage?;
    Some(Usage { input_tokens: usage.prompt_tokens?, ..Usage::default() })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// A whole answer as the API documents it: a web search, a function call, text.
    const BODY: &str = r#"{
      "id": "resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b",
      "object": "response", "created_at": 1741476542, "status": "completed",
      "model": "gpt-4.1-2025-04-14",
      "output": [
        {"type": "web_search_call", "id": "ws_1", "status": "completed"},
        {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "get_weather", "arguments": "{}"},
        {"type": "message", "id": "msg_1", "role": "assistant",
         "content": [{"type": "output_text", "text": "In \"Paris\": sun", "annotations": []}]}
      ],
      "usage": {"input_tokens": 328, "input_tokens_details": {"cached_tokens": 128},
                "output_tokens": 52, "output_tokens_details": {"reasoning_tokens": 12}, "total_tokens": 380}
    }"#;

    fn fed(events: &[&str]) -> ResponsesUsage {
        let mut r = ResponsesUsage::new();
        for e in events {
            r.on_event(e.as_bytes());
        }
        r
    }

    fn expected() -> Usage {
        Usage {
            input_tokens: 328,
            cached_input_tokens: 128,
            output_tokens: 52,
            reasoning_tokens: 12,
            ..Usage::default()
        }
    }

    #[test]
    fn a_whole_body_is_complete_with_its_usage_and_calls() {
        let r = fed(&[BODY]);
        assert!(r.complete());
        assert_eq!(r.usage(), Some(expected()));
        assert_eq!(r.response_id(), Some("resp_67ccd2bed1ec8190b14f964abc0542670bb6a6b452d3795b"));
        assert_eq!(r.model(), Some("gpt-4.1-2025-04-14"));
        assert_eq!(r.tool_calls(), &[ToolCall { id: "call_9".into(), name: "get_weather".into() }]);
        assert_eq!(r.builtin_calls().len(), 1);
        assert_eq!(r.builtin_calls()[0].kind, "web_search_call");
    }

    #[test]
    fn a_background_body_is_complete_without_usage() {
        let r = fed(&[r#"{"id":"resp_1","object":"response","status":"queued","output":[],"usage":null}"#]);
        assert!(r.complete());
        assert_eq!(r.usage(), None);
    }

    fn event(kind: &str, response: &str) -> String {
        format!(r#"{{"type":"{kind}","sequence_number":1,"response":{response}}}"#)
    }

    fn stream_until(terminal: Option<String>) -> ResponsesUsage {
        let created = event(
            "response.created",
            r#"{"id":"resp_1","object":"response","model":"gpt-4o","status":"in_progress","output":[],"usage":null}"#,
        );
        let added = r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"web_search_call","id":"ws_1","status":"in_progress"}}"#;
        let done = r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"web_search_call","id":"ws_1","status":"completed"}}"#;
        let delta = r#"{"type":"response.output_text.delta","item_id":"msg_1","output_index":1,"content_index":0,"delta":"hi \"there\""}"#;
        let mut events = vec![created, added.to_owned(), done.to_owned(), delta.to_owned()];
        events.extend(terminal);
        let refs: Vec<&str> = events.iter().map(String::as_str).collect();
        fed(&refs)
    }

    #[test]
    fn a_stream_completes_on_response_completed() {
        let r = stream_until(Some(event("response.completed", BODY)));
        assert!(r.complete());
        assert_eq!(r.usage(), Some(expected()));
        assert_eq!(r.response_id(), Some("resp_1"), "the first id seen is kept");
        // ws_1 seen in output_item.done and again in the final output: counted once.
        assert_eq!(r.builtin_calls().len(), 1);
        assert_eq!(r.tool_calls().len(), 1);
    }

    fn tool_items(range: std::ops::Range<usize>) -> String {
        let items: Vec<String> = range
            .map(|n| format!(r#"{{"type":"web_search_call","id":"ws_{n}","status":"completed"}}"#))
            .collect();
        items.join(",")
    }

    #[test]
    fn a_stream_of_100_000_tool_items_counts_each_once() {
        let mut r = ResponsesUsage::new();
        for n in 0..100_000 {
            let done = format!(
                r#"{{"type":"response.output_item.done","item":{{"type":"web_search_call","id":"ws_{n}"}}}}"#
            );
            r.on_event(done.as_bytes());
        }
        let body =
            format!(r#"{{"object":"response","status":"completed","output":[{}]}}"#, tool_items(0..100_000));
        r.on_event(event("response.completed", &body).as_bytes());
        assert!(r.complete());
        assert_eq!(r.builtin_calls().len(), 100_000, "each item once, streamed and repeated");
    }

    #[test]
    fn past_the_remembered_items_an_item_counts_at_every_sighting() {
        let mut r = ResponsesUsage::new();
        let n = MAX_REMEMBERED_ITEMS + 10;
        let body = format!(r#"{{"object":"response","status":"completed","output":[{}]}}"#, tool_items(0..n));
        r.on_event(event("response.completed", &body).as_bytes());
        r.on_event(event("response.completed", &body).as_bytes());
        assert_eq!(r.seen.len(), MAX_REMEMBERED_ITEMS, "the set stops growing");
        // The remembered ones once; the ten past the bound at both sightings: more, never less.
        assert_eq!(r.builtin_calls().len(), n + 10);
    }

    #[test]
    fn a_truncated_answer_is_complete_and_billed_for_what_it_used() {
        let incomplete = BODY.replace(r#""status": "completed""#, r#""status": "incomplete""#);
        let r = stream_until(Some(event("response.incomplete", &incomplete)));
        assert!(r.complete());
        assert_eq!(r.usage(), Some(expected()));
    }

    #[test]
    fn a_failed_answer_is_complete_only_with_usage() {
        let with_usage = stream_until(Some(event("response.failed", BODY)));
        assert!(with_usage.complete());
        assert_eq!(with_usage.usage(), Some(expected()));
        let without = stream_until(Some(event(
            "response.failed",
            r#"{"id":"resp_1","object":"response","status":"failed","error":{"code":"server_error"},"usage":null}"#,
        )));
        assert!(!without.complete());
        assert_eq!(without.usage(), None);
    }

    #[test]
    fn a_stream_cut_before_its_terminal_event_is_incomplete() {
        let r = stream_until(None);
        assert!(!r.complete());
        assert_eq!(r.usage(), None);
        assert_eq!(r.builtin_calls().len(), 1, "the tool that ran is still counted");
        let errored =
            stream_until(Some(r#"{"type":"error","code":"server_error","message":"x"}"#.to_owned()));
        assert!(!errored.complete());
    }

    #[test]
    fn usage_without_details_counts_plain_tokens() {
        let r = fed(&[r#"{"object":"response","usage":{"input_tokens":5,"output_tokens":7}}"#]);
        assert_eq!(r.usage(), Some(Usage { input_tokens: 5, output_tokens: 7, ..Usage::default() }));
    }

    #[test]
    fn code_interpreter_items_keep_their_container() {
        let r = fed(&[
            r#"{"type":"response.output_item.done","item":{"type":"code_interpreter_call","id":"ci_1","container_id":"cntr_9"}}"#,
            r#"{"type":"response.output_item.done","item":{"type":"image_generation_call","id":"ig_1"}}"#,
            r#"{"type":"response.output_item.done","item":{"type":"computer_call","id":"cu_1","call_id":"call_c"}}"#,
        ]);
        let kinds: Vec<_> =
            r.builtin_calls().iter().map(|c| (c.kind.as_str(), c.container.as_deref())).collect();
        assert_eq!(kinds, vec![("code_interpreter_call", Some("cntr_9")), ("image_generation_call", None)]);
        assert_eq!(r.tool_calls(), &[ToolCall { id: "call_c".into(), name: "computer_call".into() }]);
    }

    #[test]
    fn garbage_and_other_shapes_are_ignored() {
        let r = fed(&["not json", "[1,2]", r#"{"object":"chat.completion","usage":{"input_tokens":1}}"#, ""]);
        assert!(!r.complete());
        assert_eq!(r.usage(), None);
    }

    #[test]
    fn embeddings_usage_is_all_input() {
        let body = br#"{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.1]}],"model":"text-embedding-3-small","usage":{"prompt_tokens":8,"total_tokens":8}}"#;
        assert_eq!(embeddings_usage(body), Some(Usage { input_tokens: 8, ..Usage::default() }));
        assert_eq!(embeddings_usage(br#"{"object":"list","data":[]}"#), None);
        assert_eq!(embeddings_usage(b"nope"), None);
    }
}
