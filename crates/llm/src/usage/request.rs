//! What the proxy reads from a request body before the upstream call, and the one
//! splice it may make (`stream_options.include_usage`).

use serde::Deserialize;

use super::{Text, WireFormat};
use crate::pricing::Provider;

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
    /// Responses `"background": true`: the answer comes before the work, without usage.
    pub background: bool,
    /// Bytes of the part of the request that is billed as input, when it is not the
    /// whole body (embeddings: the `input` value).
    pub input_bytes: Option<usize>,
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
struct ResponsesRequest<'a> {
    #[serde(borrow)]
    model: Option<Text<'a>>,
    stream: Option<bool>,
    background: Option<bool>,
    max_output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct EmbeddingsRequest<'a> {
    #[serde(borrow)]
    model: Option<Text<'a>>,
    #[serde(borrow)]
    input: Option<&'a serde_json::value::RawValue>,
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

/// A Converse (or Nova InvokeModel) request: its output bound.
#[derive(Deserialize)]
struct ConverseRequest {
    #[serde(rename = "inferenceConfig")]
    inference_config: Option<ConverseInference>,
}

#[derive(Deserialize)]
struct ConverseInference {
    #[serde(rename = "maxTokens")]
    max_tokens: Option<u64>,
}

fn saturate_u32(value: u64) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

/// Reads model, output maximum and streaming flags from a request body in one parse.
/// `None` when the body is not a JSON object whose known fields have the provider's types.
pub fn request_summary(provider: Provider, body: &[u8]) -> Option<RequestSummary> {
    request_summary_in(WireFormat::of(provider), body)
}

/// [`request_summary`] for a route's wire format. Embeddings produce no output: their
/// output maximum is 0 and their input is the `input` value.
pub fn request_summary_in(format: WireFormat, body: &[u8]) -> Option<RequestSummary> {
    let text = |t: Option<Text<'_>>| t.map(|t| t.0.into_owned());
    Some(match format {
        WireFormat::OpenAiResponses => {
            let request: ResponsesRequest<'_> = serde_json::from_slice(body).ok()?;
            RequestSummary {
                model: text(request.model),
                max_output_tokens: request.max_output_tokens.map(saturate_u32),
                stream: request.stream == Some(true),
                background: request.background == Some(true),
                ..RequestSummary::default()
            }
        }
        WireFormat::OpenAiEmbeddings => {
            let request: EmbeddingsRequest<'_> = serde_json::from_slice(body).ok()?;
            RequestSummary {
                model: text(request.model),
                max_output_tokens: Some(0),
                input_bytes: Some(request.input.map_or(0, |i| i.get().len())),
                ..RequestSummary::default()
            }
        }
        WireFormat::OpenAiChat => {
            let request: OpenAiRequest<'_> = serde_json::from_slice(body).ok()?;
            RequestSummary {
                model: text(request.model),
                max_output_tokens: request.max_completion_tokens.or(request.max_tokens).map(saturate_u32),
                stream: request.stream == Some(true),
                include_usage: request.stream_options.and_then(|o| o.include_usage) == Some(true),
                ..RequestSummary::default()
            }
        }
        WireFormat::Anthropic => {
            let request: AnthropicRequest<'_> = serde_json::from_slice(body).ok()?;
            RequestSummary {
                model: text(request.model),
                max_output_tokens: request.max_tokens.map(saturate_u32),
                stream: request.stream == Some(true),
                ..RequestSummary::default()
            }
        }
        WireFormat::BedrockConverse => {
            let request: ConverseRequest = serde_json::from_slice(body).ok()?;
            RequestSummary {
                max_output_tokens: request.inference_config.and_then(|c| c.max_tokens).map(saturate_u32),
                ..RequestSummary::default()
            }
        }
        WireFormat::Gemini => {
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
pub(super) mod json_scan {
    /// Index of the first non-whitespace byte at or after `at`.
    pub(in crate::usage) fn skip_whitespace(bytes: &[u8], mut at: usize) -> usize {
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

    pub(in crate::usage) struct ObjectScan {
        /// The object has no members.
        pub(in crate::usage) empty: bool,
        /// Value span of the member with the wanted key (written without escapes).
        pub(in crate::usage) found: Option<(usize, usize)>,
    }

    /// Scans the object opened at `bytes[open]` for the member `key`.
    pub(in crate::usage) fn scan_object(bytes: &[u8], open: usize, key: &[u8]) -> Option<ObjectScan> {
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

/// Whether a request can cause a cache write, which is billed above the plain input
/// price: Anthropic's `cache_control` (Messages, and Claude on Bedrock and Vertex),
/// Bedrock Converse's `cachePoint`, Gemini's `cachedContent`. OpenAI's formats write
/// their cache at no extra price. Read on the raw text, so a key spelt with a `\u`
/// escape, or a body that is not UTF-8, counts as able to: the answer errs high.
pub fn may_write_cache(format: WireFormat, body: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(body) else { return true };
    let markers: &[&str] = match format {
        WireFormat::OpenAiChat | WireFormat::OpenAiResponses | WireFormat::OpenAiEmbeddings => return false,
        WireFormat::Anthropic => &["\"cache_control\""],
        WireFormat::Gemini => &["\"cachedContent\""],
        WireFormat::BedrockConverse => &["\"cachePoint\"", "\"cache_control\""],
    };
    text.contains("\\u") || markers.iter().any(|m| text.contains(m))
}
