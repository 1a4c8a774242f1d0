//! The response body on its way from the provider to the client: passed through chunk
//! by chunk (never buffered whole) while usage is read on the fly, with an idle timeout
//! between chunks. When the body ends — completed, failed upstream, timed out, or
//! dropped because the client went away — the [`Finish`] callback gets what was seen,
//! exactly once.
//!
//! One rewrite happens: when the proxy added `stream_options.include_usage` to an
//! OpenAI stream the client did not ask usage for, the usage-only chunk that the
//! provider then sends is dropped, so the client receives exactly the stream it asked
//! for. Only in that mode are chunks re-framed at event boundaries.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;

use spendgate_llm::pricing::Usage;
use spendgate_llm::usage::{self, BuiltinCall, StreamUsage, ToolCall, WireFormat};

/// Bytes of a non-streaming body kept for reading usage (larger bodies are passed
/// through and charged the estimate).
const MAX_JSON_BODY: usize = 16 * 1024 * 1024;
/// Response bytes kept for body records (Pro and above).
pub const MAX_BODY_RECORD: usize = 1_048_576;
/// An event stream silent this long gets an SSE comment line (ignored by every SSE
/// client) at an event boundary. actix notices a client that went away only when a
/// write fails; without this, a stalled upstream would keep a cancelled request (and
/// its reservation) alive until the idle timeout.
pub const HEARTBEAT: Duration = Duration::from_secs(1);
const HEARTBEAT_LINE: &[u8] = b": keep-alive\n\n";

/// How the body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Completed,
    /// The provider's connection failed mid-body.
    UpstreamFailed,
    /// No chunk arrived within the idle timeout.
    TimedOut,
    /// The client went away first (the upstream request is dropped, i.e. aborted).
    Cancelled,
    /// An event stream ended without the provider's end marker, or after an error
    /// event: not a completed call, whatever usage it reported.
    Incomplete,
}

/// What the body told us.
#[derive(Debug, Clone)]
pub struct Seen {
    pub end: End,
    pub usage: Option<Usage>,
    pub response_id: Option<String>,
    /// The model that answered, as the provider names it.
    pub model: Option<String>,
    /// Why the generation stopped, as the provider says it.
    pub finish_reason: Option<usage::FinishReason>,
    pub tool_calls: Vec<ToolCall>,
    /// Tools the provider ran itself (Responses built-in tools).
    pub builtin_calls: Vec<BuiltinCall>,
    /// Kept response bytes and whether more were sent (body records).
    pub body: Option<(Vec<u8>, bool)>,
    /// A JSON answer not read yet: the body's end hands it over as it is, so that
    /// parsing it is not on the way of the answer's last bytes (see [`Seen::read`]).
    json: Option<(WireFormat, Vec<u8>)>,
}

impl Seen {
    /// A call whose client went away before any of the answer arrived.
    pub fn cancelled() -> Seen {
        Seen {
            end: End::Cancelled,
            usage: None,
            response_id: None,
            model: None,
            finish_reason: None,
            tool_calls: Vec::new(),
            builtin_calls: Vec::new(),
            body: None,
            json: None,
        }
    }

    /// Reads a JSON answer's usage, response id and tool calls; an event stream's were
    /// read as it passed. Call once before looking at those fields.
    #[must_use]
    pub fn read(mut self) -> Seen {
        if let Some((format, body)) = self.json.take() {
            let details = json_details(format, &body);
            (self.usage, self.response_id, self.tool_calls) = (details.usage, details.id, details.tool_calls);
            self.model = details.model;
            self.finish_reason = details.finish_reason;
            self.builtin_calls = details.builtin_calls;
        }
        self
    }
}

pub type Finish = Box<dyn FnOnce(Seen) + 'static>;

enum Mode {
    /// A JSON body, kept (up to a cap) for usage at the end.
    Json { format: WireFormat, buf: Vec<u8>, overflow: bool },
    /// An event stream, parsed as it passes.
    Sse { parser: usage::SseParser, usage: StreamUsage },
    /// An event stream whose usage-only chunk is dropped (see the module docs).
    SseStripUsage { parser: usage::SseParser, usage: StreamUsage, frame: BytesMut },
    /// An AWS event stream (Bedrock), its frames decoded as they pass.
    AwsEvents { usage: usage::AwsEventUsage },
}

pub struct Metered<S> {
    upstream: Pin<Box<S>>,
    mode: Mode,
    idle_timeout: Duration,
    idle: Pin<Box<tokio::time::Sleep>>,
    /// Event streams only.
    heartbeat: Option<Pin<Box<tokio::time::Sleep>>>,
    /// The bytes sent so far end at an event boundary (a heartbeat may go in).
    at_boundary: bool,
    record: Option<(Vec<u8>, bool)>,
    finish: Option<Finish>,
    done: bool,
    /// Set once an event stream's end marker has passed (see [`Metered::signal_end_marker`]).
    end_marker: Option<Arc<AtomicBool>>,
}

impl<S> Metered<S> {
    /// `sse`: the upstream answered with an event stream. `strip_usage`: drop the
    /// usage-only chunk the proxy asked for. `record`: keep up to 1 MB for body records.
    pub fn new(
        upstream: S,
        format: WireFormat,
        sse: bool,
        strip_usage: bool,
        record: bool,
        idle_timeout: Duration,
        finish: Finish,
    ) -> Self {
        let mode = match (sse, strip_usage) {
            (false, _) => Mode::Json { format, buf: Vec::new(), overflow: false },
            (true, false) => {
                Mode::Sse { parser: usage::SseParser::new(), usage: StreamUsage::of_format(format) }
            }
            (true, true) => Mode::SseStripUsage {
                parser: usage::SseParser::new(),
                usage: StreamUsage::of_format(format),
                frame: BytesMut::new(),
            },
        };
        Metered {
            upstream: Box::pin(upstream),
            mode,
            idle_timeout,
            idle: Box::pin(tokio::time::sleep(idle_timeout)),
            heartbeat: sse.then(|| Box::pin(tokio::time::sleep(HEARTBEAT))),
            at_boundary: true,
            record: record.then(|| (Vec::new(), false)),
            finish: Some(finish),
            done: false,
            end_marker: None,
        }
    }

    /// `flag` is set as the chunk holding the stream's end marker (`data: [DONE]`,
    /// `message_stop`, `response.completed`, Gemini's last chunk) comes out, before it
    /// is passed on: the durable end holds that chunk back until the call is recorded.
    pub fn signal_end_marker(mut self, flag: Arc<AtomicBool>) -> Self {
        self.end_marker = Some(flag);
        self
    }

    /// The answer is an AWS event stream (`application/vnd.amazon.eventstream`): its
    /// usage is read from the decoded frames, and no heartbeat goes in.
    pub fn aws_event_stream(mut self) -> Self {
        self.mode = Mode::AwsEvents { usage: usage::AwsEventUsage::new() };
        self.heartbeat = None;
        self
    }

    fn keep_for_record(&mut self, chunk: &[u8]) {
        if let Some((buf, truncated)) = &mut self.record {
            let room = MAX_BODY_RECORD.saturating_sub(buf.len());
            if chunk.len() > room {
                *truncated = true;
            }
            buf.extend_from_slice(&chunk[..chunk.len().min(room)]);
        }
    }

    /// Handles one upstream chunk; returns the bytes for the client (possibly none).
    fn on_chunk(&mut self, chunk: Bytes) -> Option<Bytes> {
        let out = match &mut self.mode {
            Mode::Json { buf, overflow, .. } => {
                if !*overflow {
                    if buf.len() + chunk.len() > MAX_JSON_BODY {
                        *overflow = true;
                        buf.clear();
                    } else {
                        buf.extend_from_slice(&chunk);
                    }
                }
                Some(chunk)
            }
            Mode::Sse { parser, usage } => {
                parser.feed(&chunk, |e| usage.on_event(e.data));
                if usage.complete() {
                    self.end_marker.as_ref().inspect(|f| f.store(true, Ordering::Release));
                }
                Some(chunk)
            }
            Mode::AwsEvents { usage } => {
                usage.feed(&chunk);
                Some(chunk)
            }
            Mode::SseStripUsage { parser, usage, frame } => {
                frame.extend_from_slice(&chunk);
                let mut out = BytesMut::new();
                while let Some(end) = event_end(frame) {
                    let event = frame.split_to(end).freeze();
                    let mut usage_only = false;
                    parser.feed(&event, |e| {
                        usage.on_event(e.data);
                        usage_only |= usage::is_openai_usage_only_chunk(e.data);
                    });
                    if !usage_only {
                        out.extend_from_slice(&event);
                    }
                }
                if usage.complete() {
                    self.end_marker.as_ref().inspect(|f| f.store(true, Ordering::Release));
                }
                (!out.is_empty()).then(|| out.freeze())
            }
        };
        if let Some(bytes) = &out {
            let bytes = bytes.clone();
            self.at_boundary =
                bytes.ends_with(b"\n\n") || bytes.ends_with(b"\r\n\r\n") || bytes.ends_with(b"\r\r");
            self.keep_for_record(&bytes);
        }
        out
    }

    /// Bytes still held at the end of the body (an unterminated last event).
    fn flush(&mut self) -> Option<Bytes> {
        if let Mode::SseStripUsage { parser, usage, frame } = &mut self.mode {
            if !frame.is_empty() {
                let rest = frame.split().freeze();
                parser.feed(&rest, |e| usage.on_event(e.data));
                return Some(rest);
            }
        }
        None
    }

    fn finish(&mut self, mut end: End) {
        let Some(finish) = self.finish.take() else { return };
        self.done = true;
        let mode = std::mem::replace(
            &mut self.mode,
            Mode::Json { format: WireFormat::OpenAiChat, buf: Vec::new(), overflow: true },
        );
        let (usage, response_id, model, finish_reason, tool_calls, builtin_calls, json) = match mode {
            // Read later, by `Seen::read`, off the response path.
            Mode::Json { format, buf, overflow } => {
                let json = (!overflow && !buf.is_empty()).then_some((format, buf));
                (None, None, None, None, Vec::new(), Vec::new(), json)
            }
            Mode::Sse { mut usage, .. } | Mode::SseStripUsage { mut usage, .. } => {
                if end == End::Completed && !usage.complete() {
                    end = End::Incomplete;
                }
                let id = usage.response_id().map(str::to_owned);
                let model = usage.take_model();
                let reason = usage.finish_reason();
                let calls = usage.tool_calls().to_vec();
                let builtin = usage.builtin_calls().to_vec();
                (usage.finish(), id, model, reason, calls, builtin, None)
            }
            Mode::AwsEvents { usage } => {
                if end == End::Completed && !usage.complete() {
                    end = End::Incomplete;
                }
                (usage.usage(), None, None, None, Vec::new(), Vec::new(), None)
            }
        };
        let body = self.record.take();
        finish(Seen { end, usage, response_id, model, finish_reason, tool_calls, builtin_calls, body, json });
    }
}

/// End (exclusive) of the first complete event in `buf`: after a blank line.
fn event_end(buf: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i < buf.len() {
        match buf[i] {
            b'\n' if buf.get(i + 1) == Some(&b'\n') => return Some(i + 2),
            b'\r'
                if buf.get(i + 1) == Some(&b'\n')
                    && buf.get(i + 2) == Some(&b'\r')
                    && buf.get(i + 3) == Some(&b'\n') =>
            {
                return Some(i + 4)
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// What a complete JSON response reported.
#[derive(Debug, Default)]
struct Details {
    usage: Option<Usage>,
    id: Option<String>,
    model: Option<String>,
    finish_reason: Option<usage::FinishReason>,
    tool_calls: Vec<ToolCall>,
    builtin_calls: Vec<BuiltinCall>,
}

/// Usage, response id, requested tool calls and built-in tool calls of a complete JSON
/// response, read as its route's wire format.
fn json_details(format: WireFormat, body: &[u8]) -> Details {
    match format {
        WireFormat::OpenAiEmbeddings => {
            // The answer names its model as a request does: a top-level `model`.
            Details {
                usage: usage::embeddings_usage(body),
                model: usage::request_model(body),
                ..Details::default()
            }
        }
        // One typed parse for usage, id and tool calls: a whole body reads as one event.
        WireFormat::OpenAiChat | WireFormat::OpenAiResponses => {
            let mut reader = StreamUsage::of_format(format);
            reader.on_event(body);
            Details {
                usage: reader.usage(),
                id: reader.response_id().map(str::to_owned),
                model: reader.take_model(),
                finish_reason: reader.finish_reason(),
                tool_calls: reader.tool_calls().to_vec(),
                builtin_calls: reader.builtin_calls().to_vec(),
            }
        }
        WireFormat::BedrockConverse => Details { usage: usage::converse_usage(body), ..Details::default() },
        WireFormat::Anthropic | WireFormat::Gemini => {
            let ChatDetails { usage, id, model, finish_reason, tool_calls } = chat_details(format, body);
            Details { usage, id, model, finish_reason, tool_calls, builtin_calls: Vec::new() }
        }
    }
}

/// [`json_details`] of the Anthropic and Gemini formats.
fn chat_details(format: WireFormat, body: &[u8]) -> ChatDetails {
    let gemini = format == WireFormat::Gemini;
    let usage = if gemini { usage::gemini_usage(body) } else { usage::anthropic_usage(body) };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(body) else {
        return ChatDetails { usage, id: None, model: None, finish_reason: None, tool_calls: Vec::new() };
    };
    // Moved out of the parsed body, not copied.
    let model = match value[if gemini { "modelVersion" } else { "model" }].take() {
        serde_json::Value::String(model) => Some(model),
        _ => None,
    };
    let reason = if gemini { &value["candidates"][0]["finishReason"] } else { &value["stop_reason"] };
    let finish_reason = reason.as_str().filter(|r| !r.is_empty()).map(usage::finish_reason);
    let text = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
    let mut calls = Vec::new();
    if gemini {
        for candidate in value["candidates"].as_array().into_iter().flatten() {
            for part in candidate["content"]["parts"].as_array().into_iter().flatten() {
                if let Some(name) = part["functionCall"]["name"].as_str() {
                    calls.push(ToolCall { id: text(&part["functionCall"]["id"]), name: name.to_owned() });
                }
            }
        }
        let id = value["responseId"].as_str().map(str::to_owned);
        return ChatDetails { usage, id, model, finish_reason, tool_calls: calls };
    }
    for block in value["content"].as_array().into_iter().flatten() {
        if block["type"] == "tool_use" {
            calls.push(ToolCall { id: text(&block["id"]), name: text(&block["name"]) });
        }
    }
    let id = value["id"].as_str().map(str::to_owned);
    ChatDetails { usage, id, model, finish_reason, tool_calls: calls }
}

/// What [`chat_details`] read.
struct ChatDetails {
    usage: Option<Usage>,
    id: Option<String>,
    model: Option<String>,
    finish_reason: Option<usage::FinishReason>,
    tool_calls: Vec<ToolCall>,
}

impl<S, E> Stream for Metered<S>
where
    S: Stream<Item = Result<Bytes, E>>,
    E: std::fmt::Display,
{
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        loop {
            if self.done {
                return Poll::Ready(None);
            }
            match self.upstream.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    let now = tokio::time::Instant::now();
                    let deadline = now + self.idle_timeout;
                    self.idle.as_mut().reset(deadline);
                    if let Some(h) = self.heartbeat.as_mut() {
                        h.as_mut().reset(now + HEARTBEAT);
                    }
                    if let Some(out) = self.on_chunk(chunk) {
                        return Poll::Ready(Some(Ok(out)));
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::warn!(error = %e, "upstream body failed");
                    self.finish(End::UpstreamFailed);
                    return Poll::Ready(Some(Err(std::io::Error::other("upstream body failed"))));
                }
                Poll::Ready(None) => {
                    let rest = self.flush();
                    if let Some(rest) = &rest {
                        self.keep_for_record(&rest.clone());
                    }
                    self.finish(End::Completed);
                    return Poll::Ready(rest.map(Ok));
                }
                Poll::Pending => {
                    if self.idle.as_mut().poll(cx).is_ready() {
                        self.finish(End::TimedOut);
                        return Poll::Ready(Some(Err(std::io::Error::other("upstream idle timeout"))));
                    }
                    let at_boundary = self.at_boundary;
                    if let Some(h) = self.heartbeat.as_mut() {
                        if h.as_mut().poll(cx).is_ready() {
                            h.as_mut().reset(tokio::time::Instant::now() + HEARTBEAT);
                            if at_boundary {
                                return Poll::Ready(Some(Ok(Bytes::from_static(HEARTBEAT_LINE))));
                            }
                            // Re-register the timer's waker.
                            let _ = h.as_mut().poll(cx);
                        }
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl<S> Drop for Metered<S> {
    fn drop(&mut self) {
        if self.finish.is_some() {
            self.finish(End::Cancelled);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::{Arc, Mutex};

    fn collect(chunks: Vec<&'static str>, strip: bool) -> (String, Seen) {
        collect_as(chunks, true, strip)
    }

    fn collect_as(chunks: Vec<&'static str>, sse: bool, strip: bool) -> (String, Seen) {
        let seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        let upstream = futures_util::stream::iter(
            chunks.into_iter().map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes()))),
        );
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let out: Vec<Bytes> = rt.block_on(async move {
            let metered = Metered::new(
                upstream,
                WireFormat::OpenAiChat,
                sse,
                strip,
                true,
                Duration::from_secs(5),
                Box::new(move |s| *sink.lock().unwrap() = Some(s)),
            );
            metered.map(|r| r.unwrap()).collect().await
        });
        let text = String::from_utf8(out.concat()).unwrap();
        let seen = seen.lock().unwrap().take().unwrap();
        (text, seen)
    }

    const CHUNK: &str =
        "data: {\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"}}]}\n\n";
    const USAGE: &str =
        "data: {\"id\":\"c1\",\"choices\":[],\"usage\":{\"prompt_tokens\":7,\"completion_tokens\":3}}\n\n";
    const DONE: &str = "data: [DONE]\n\n";

    /// A JSON answer passes unread; its usage, id and tool calls come with `read`.
    #[test]
    fn json_answer_is_read_after_the_body() {
        let body = r#"{"id":"c9","choices":[{"message":{"tool_calls":[{"id":"t1","function":{"name":"f"}}]}}],"usage":{"prompt_tokens":4,"completion_tokens":2}}"#;
        let (text, seen) = collect_as(vec![&body[..20], &body[20..]], false, false);
        assert_eq!(text, body);
        assert_eq!(seen.end, End::Completed);
        assert!(seen.usage.is_none() && seen.response_id.is_none());
        let seen = seen.read();
        let usage = seen.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (4, 2));
        assert_eq!(seen.response_id.as_deref(), Some("c9"));
        assert_eq!(seen.tool_calls.len(), 1);
    }

    #[test]
    fn stripped_usage_chunk_is_metered_but_not_sent() {
        // Events split across chunks at awkward places.
        let all = format!("{CHUNK}{USAGE}{DONE}");
        let leaked: &'static str = Box::leak(all.into_boxed_str());
        let (a, b) = leaked.split_at(10);
        let (b, c) = b.split_at(CHUNK.len() + 5);
        let (text, seen) = collect(vec![a, b, c], true);
        assert_eq!(text, format!("{CHUNK}{DONE}"));
        let usage = seen.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (7, 3));
        assert_eq!(seen.end, End::Completed);
        assert_eq!(seen.body.unwrap().0, text.as_bytes());
    }

    #[test]
    fn unstripped_stream_passes_byte_for_byte() {
        let (text, seen) = collect(vec![CHUNK, USAGE, DONE], false);
        assert_eq!(text, format!("{CHUNK}{USAGE}{DONE}"));
        assert_eq!(seen.usage.unwrap().output_tokens, 3);
        assert_eq!(seen.response_id.as_deref(), Some("c1"));
    }

    #[test]
    fn json_tool_calls_and_ids() {
        let body = br#"{"id":"msg_1","model":"claude-sonnet-4-5-20250929","content":[{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}],"usage":{"input_tokens":5,"output_tokens":2}}"#;
        let ChatDetails { usage, id, model, tool_calls: calls, .. } =
            chat_details(WireFormat::Anthropic, body);
        assert_eq!(usage.unwrap().output_tokens, 2);
        assert_eq!(id.as_deref(), Some("msg_1"));
        assert_eq!(model.as_deref(), Some("claude-sonnet-4-5-20250929"));
        assert_eq!(calls, vec![ToolCall { id: "toolu_1".into(), name: "get_weather".into() }]);
    }

    #[test]
    fn dropped_before_the_end_reports_cancelled() {
        let seen = Arc::new(Mutex::new(None));
        let sink = seen.clone();
        let upstream = futures_util::stream::pending::<Result<Bytes, std::io::Error>>();
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        rt.block_on(async {
            let metered = Metered::new(
                upstream,
                WireFormat::Anthropic,
                true,
                false,
                false,
                Duration::from_secs(5),
                Box::new(move |s| *sink.lock().unwrap() = Some(s)),
            );
            drop(metered);
        });
        assert_eq!(seen.lock().unwrap().as_ref().unwrap().end, End::Cancelled);
    }
}
