//! Usage read from an AWS event stream (`application/vnd.amazon.eventstream`), as
//! Bedrock streams its answers, while the bytes pass through unchanged: the frames are
//! decoded with `aws-smithy-eventstream` as they complete.
//!
//! - ConverseStream: the `metadata` event carries `usage` (Converse's own fields).
//! - InvokeModelWithResponseStream: each `chunk` event carries the model's own event,
//!   base64 in `bytes`; the last one adds `amazon-bedrock-invocationMetrics`
//!   (`inputTokenCount`, `outputTokenCount`, `cacheReadInputTokenCount`,
//!   `cacheWriteInputTokenCount`).
//!
//! Either ends the stream complete; a stream cut before it is not, and is charged as
//! the other routes charge a cut stream.

use aws_smithy_types::event_stream::Message;
use base64::Engine as _;
use serde::Deserialize;

use super::bedrock::converse_usage;
use crate::pricing::Usage;

/// A frame longer than this is taken as a broken stream (Bedrock's are far smaller).
const MAX_FRAME: usize = 16 * 1024 * 1024;

/// Reads usage from a Bedrock event stream fed chunk by chunk.
#[derive(Debug, Default)]
pub struct AwsEventUsage {
    buf: Vec<u8>,
    usage: Option<Usage>,
    complete: bool,
    broken: bool,
}

#[derive(Deserialize)]
struct Chunk {
    bytes: Option<String>,
}

#[derive(Deserialize)]
struct WithMetrics {
    #[serde(rename = "amazon-bedrock-invocationMetrics")]
    metrics: Option<InvocationMetrics>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InvocationMetrics {
    input_token_count: Option<u64>,
    output_token_count: Option<u64>,
    cache_read_input_token_count: Option<u64>,
    cache_write_input_token_count: Option<u64>,
}

impl AwsEventUsage {
    pub fn new() -> Self {
        Self::default()
    }

    /// Takes the next bytes of the stream.
    pub fn feed(&mut self, chunk: &[u8]) {
        if self.broken {
            return;
        }
        self.buf.extend_from_slice(chunk);
        while let Some(len) = self.frame_len() {
            if !(16..=MAX_FRAME).contains(&len) {
                self.broken = true;
                self.buf.clear();
                return;
            }
            if self.buf.len() < len {
                return;
            }
            let frame: Vec<u8> = self.buf.drain(..len).collect();
            match aws_smithy_eventstream::frame::read_message_from(&frame[..]) {
                Ok(message) => self.on_message(&message),
                Err(_) => {
                    self.broken = true;
                    self.buf.clear();
                    return;
                }
            }
        }
    }

    /// The total length of the frame at the front, once its prelude has arrived.
    fn frame_len(&self) -> Option<usize> {
        let prefix: [u8; 4] = self.buf.get(..4)?.try_into().ok()?;
        usize::try_from(u32::from_be_bytes(prefix)).ok()
    }

    fn on_message(&mut self, message: &Message) {
        let header = |name: &str| {
            message
                .headers()
                .iter()
                .find(|h| h.name().as_str() == name)
                .and_then(|h| h.value().as_string().ok())
                .map(|s| s.as_str().to_owned())
        };
        if header(":message-type").as_deref() != Some("event") {
            return;
        }
        match header(":event-type").as_deref() {
            Some("metadata") => {
                if let Some(usage) = converse_usage(message.payload()) {
                    self.usage = Some(usage);
                    self.complete = true;
                }
            }
            Some("chunk") => {
                let inner = serde_json::from_slice::<Chunk>(message.payload())
                    .ok()
                    .and_then(|c| c.bytes)
                    .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok());
                if let Some(m) = inner.and_then(|b| serde_json::from_slice::<WithMetrics>(&b).ok()?.metrics) {
                    self.usage = Some(m.usage());
                    self.complete = true;
                }
            }
            _ => {}
        }
    }

    /// The usage reported so far.
    pub fn usage(&self) -> Option<Usage> {
        self.usage
    }

    /// Whether the stream's final usage arrived.
    pub fn complete(&self) -> bool {
        self.complete && !self.broken
    }
}

impl InvocationMetrics {
    fn usage(&self) -> Usage {
        let cached = self.cache_read_input_token_count.unwrap_or(0);
        let written = self.cache_write_input_token_count.unwrap_or(0);
        Usage {
            input_tokens: self.input_token_count.unwrap_or(0).saturating_add(cached).saturating_add(written),
            cached_input_tokens: cached,
            cache_write_5m_tokens: written,
            cache_write_1h_tokens: 0,
            output_tokens: self.output_token_count.unwrap_or(0),
            reasoning_tokens: 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};

    use super::*;

    fn frame(event: &str, payload: &str) -> Vec<u8> {
        let message = Message::new(payload.as_bytes().to_vec())
            .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
            .add_header(Header::new(":event-type", HeaderValue::String(event.to_owned().into())))
            .add_header(Header::new(":content-type", HeaderValue::String("application/json".into())));
        let mut out = Vec::new();
        aws_smithy_eventstream::frame::write_message_to(&message, &mut out).unwrap();
        out
    }

    #[test]
    fn converse_stream_usage_from_the_metadata_event_across_chunk_boundaries() {
        let mut bytes = frame("messageStart", r#"{"role":"assistant"}"#);
        bytes.extend(frame("contentBlockDelta", r#"{"contentBlockIndex":0,"delta":{"text":"hi"}}"#));
        bytes.extend(frame("messageStop", r#"{"stopReason":"end_turn"}"#));
        let before_metadata = bytes.len();
        bytes.extend(frame(
            "metadata",
            r#"{"usage":{"inputTokens":10,"outputTokens":5,"totalTokens":15},"metrics":{"latencyMs":1}}"#,
        ));
        let mut reader = AwsEventUsage::new();
        for piece in bytes[..before_metadata].chunks(7) {
            reader.feed(piece);
        }
        assert!(!reader.complete(), "cut before the metadata event");
        for piece in bytes[before_metadata..].chunks(3) {
            reader.feed(piece);
        }
        assert!(reader.complete());
        let u = reader.usage().unwrap();
        assert_eq!((u.input_tokens, u.output_tokens), (10, 5));
    }

    #[test]
    fn invoke_stream_usage_from_the_invocation_metrics() {
        let inner = r#"{"type":"message_stop","amazon-bedrock-invocationMetrics":{"inputTokenCount":100,"outputTokenCount":20,"cacheReadInputTokenCount":50,"invocationLatency":9,"firstByteLatency":3}}"#;
        let encoded = base64::engine::general_purpose::STANDARD.encode(inner);
        let mut reader = AwsEventUsage::new();
        reader.feed(&frame("chunk", &format!(r#"{{"bytes":"{encoded}"}}"#)));
        assert!(reader.complete());
        let u = reader.usage().unwrap();
        assert_eq!((u.input_tokens, u.cached_input_tokens, u.output_tokens), (150, 50, 20));
        let mut broken = AwsEventUsage::new();
        broken.feed(&[0, 0, 0, 20, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert!(!broken.complete());
    }
}
