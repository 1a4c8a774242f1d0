//! The one splice an `exactCeiling` clamp makes to a request body: its output bound set
//! to `n` tokens, every other byte kept as it was (like `openai_add_include_usage`), and
//! what in a request its size does not bound (non-text parts, provider-run tools).

use serde::Deserialize;
use serde_json::Value;

use super::request::json_scan::{scan_object, skip_whitespace};
use super::WireFormat;

/// Why a call cannot be clamped, or `Ok` with the body whose output bound is `n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clamp {
    Body(Vec<u8>),
    /// Anthropic extended thinking whose budget is not below the clamped bound.
    ThinkingTooLarge {
        budget_tokens: u64,
    },
    /// The body could not be spliced (not an object, escaped or duplicate keys).
    Unspliceable,
}

/// Whether a chat model takes `max_completion_tokens` (OpenAI's reasoning models
/// refuse `max_tokens`).
fn reasoning_model(model: &str) -> bool {
    let model = model.rsplit('/').next().unwrap_or(model);
    ["o1", "o3", "o4", "gpt-5"].iter().any(|p| model.starts_with(p))
}

/// The body with its output bound set to `n`: chat completions' `max_completion_tokens`
/// or `max_tokens` (whichever the request has, both when it has both, else the one the
/// model takes), Responses `max_output_tokens`, Messages `max_tokens` (a thinking budget
/// must stay below it), generateContent `generationConfig.maxOutputTokens`.
pub fn set_output_bound(format: WireFormat, body: &[u8], model: &str, n: u32) -> Clamp {
    let value = n.to_string();
    let spliced = match format {
        WireFormat::OpenAiChat => chat(body, model, &value),
        WireFormat::OpenAiResponses => set_member(body, b"max_output_tokens", &value),
        WireFormat::Anthropic => {
            if let Some(budget_tokens) = thinking_budget(body).filter(|b| *b >= u64::from(n)) {
                return Clamp::ThinkingTooLarge { budget_tokens };
            }
            set_member(body, b"max_tokens", &value)
        }
        WireFormat::Gemini => gemini(body, &value),
        // Not spliced (yet): an exact ceiling cannot clamp a Converse call.
        WireFormat::OpenAiEmbeddings | WireFormat::BedrockConverse => None,
    };
    match spliced.filter(|out| bound_of(format, out) == Some(u64::from(n))) {
        Some(out) => Clamp::Body(out),
        None => Clamp::Unspliceable,
    }
}

fn chat(body: &[u8], model: &str, value: &str) -> Option<Vec<u8>> {
    let open = skip_whitespace(body, 0);
    let has = |key: &[u8]| Some(scan_object(body, open, key)?.found.is_some());
    match (has(b"max_completion_tokens")?, has(b"max_tokens")?) {
        (true, true) => {
            let once = replace_member(body, b"max_completion_tokens", value)?;
            replace_member(&once, b"max_tokens", value)
        }
        (true, false) => replace_member(body, b"max_completion_tokens", value),
        (false, true) => replace_member(body, b"max_tokens", value),
        (false, false) if reasoning_model(model) => set_member(body, b"max_completion_tokens", value),
        (false, false) => set_member(body, b"max_tokens", value),
    }
}

fn gemini(body: &[u8], value: &str) -> Option<Vec<u8>> {
    let open = skip_whitespace(body, 0);
    let top = object_scan(body, open, b"generationConfig")?;
    let config = match top {
        Some(span) => Some(span),
        None => object_scan(body, open, b"generation_config")?,
    };
    match config {
        Some((start, end)) if body.get(start) == Some(&b'{') => {
            let inner = &body[start..end];
            let key: &[u8] = if object_scan(inner, 0, b"max_output_tokens")?.is_some() {
                b"max_output_tokens"
            } else {
                b"maxOutputTokens"
            };
            let spliced = set_member(inner, key, value)?;
            Some([&body[..start], &spliced[..], &body[end..]].concat())
        }
        Some(_) => None,
        None => {
            let member = format!("{{\"maxOutputTokens\":{value}}}");
            insert_member(body, open, b"generationConfig", &member)
        }
    }
}

fn object_scan(body: &[u8], open: usize, key: &[u8]) -> Option<Option<(usize, usize)>> {
    if body.get(open) != Some(&b'{') {
        return None;
    }
    Some(scan_object(body, open, key)?.found)
}

/// The top-level object's member `key` set to `value`: replaced, else inserted first.
fn set_member(body: &[u8], key: &[u8], value: &str) -> Option<Vec<u8>> {
    let open = skip_whitespace(body, 0);
    match object_scan(body, open, key)? {
        Some((start, end)) => Some([&body[..start], value.as_bytes(), &body[end..]].concat()),
        None => insert_member(body, open, key, value),
    }
}

fn replace_member(body: &[u8], key: &[u8], value: &str) -> Option<Vec<u8>> {
    let open = skip_whitespace(body, 0);
    let (start, end) = object_scan(body, open, key)??;
    Some([&body[..start], value.as_bytes(), &body[end..]].concat())
}

fn insert_member(body: &[u8], open: usize, key: &[u8], value: &str) -> Option<Vec<u8>> {
    let empty = scan_object(body, open, key)?.empty;
    let mut out = Vec::with_capacity(body.len() + key.len() + value.len() + 4);
    out.extend_from_slice(&body[..=open]);
    out.push(b'"');
    out.extend_from_slice(key);
    out.extend_from_slice(b"\":");
    out.extend_from_slice(value.as_bytes());
    if !empty {
        out.push(b',');
    }
    out.extend_from_slice(&body[open + 1..]);
    Some(out)
}

#[derive(Deserialize)]
struct ChatBound {
    max_tokens: Option<u64>,
    max_completion_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct ResponsesBound {
    max_output_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct MessagesBound {
    max_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct GeminiBound {
    #[serde(rename = "generationConfig", alias = "generation_config")]
    generation_config: Option<GeminiConfig>,
}

#[derive(Deserialize)]
struct GeminiConfig {
    #[serde(rename = "maxOutputTokens", alias = "max_output_tokens")]
    max_output_tokens: Option<u64>,
}

/// The output bound a spliced body states, read back with a real parser (which also
/// refuses the duplicate keys a splice cannot see); `None` when it states two.
fn bound_of(format: WireFormat, body: &[u8]) -> Option<u64> {
    match format {
        WireFormat::OpenAiChat => {
            let b: ChatBound = serde_json::from_slice(body).ok()?;
            match (b.max_completion_tokens, b.max_tokens) {
                (Some(x), Some(y)) if x != y => None,
                (x, y) => x.or(y),
            }
        }
        WireFormat::OpenAiResponses => serde_json::from_slice::<ResponsesBound>(body).ok()?.max_output_tokens,
        WireFormat::Anthropic => serde_json::from_slice::<MessagesBound>(body).ok()?.max_tokens,
        WireFormat::Gemini => {
            serde_json::from_slice::<GeminiBound>(body).ok()?.generation_config?.max_output_tokens
        }
        WireFormat::OpenAiEmbeddings | WireFormat::BedrockConverse => None,
    }
}

/// Anthropic `thinking.budget_tokens` when thinking is enabled.
fn thinking_budget(body: &[u8]) -> Option<u64> {
    #[derive(Deserialize)]
    struct Thinking {
        thinking: Option<Value>,
    }
    let t: Thinking = serde_json::from_slice(body).ok()?;
    let thinking = t.thinking?;
    (thinking.get("type")?.as_str()? == "enabled").then(|| thinking.get("budget_tokens")?.as_u64())?
}

/// Content-part types whose tokens the prompt's bytes do not bound (an image URL costs
/// hundreds of tokens in a few bytes).
const NON_TEXT_TYPES: &[&str] = &[
    "image_url",
    "input_image",
    "input_file",
    "input_audio",
    "image",
    "document",
    "file",
    "audio",
    "container_upload",
];
/// Keys that carry non-text parts (Gemini) or an image by reference.
const NON_TEXT_KEYS: &[&str] =
    &["inlineData", "inline_data", "fileData", "file_data", "image_url", "input_audio"];

/// What in a request its size does not bound, named for the refusal: a non-text part,
/// or a tool the provider runs and bills per call. `None`: text only, client tools only.
pub fn unbounded_part(format: WireFormat, body: &[u8]) -> Option<String> {
    let value: Value = serde_json::from_slice(body).ok()?;
    if let Some(part) = non_text(&value) {
        return Some(format!("a non-text part ({part})"));
    }
    let tools = value.get("tools").and_then(Value::as_array);
    let provider_run = |t: &Value| match format {
        WireFormat::OpenAiResponses | WireFormat::Anthropic => t
            .get("type")
            .and_then(Value::as_str)
            .filter(|k| !matches!(*k, "function" | "custom"))
            .map(str::to_owned),
        WireFormat::Gemini => t
            .as_object()
            .and_then(|o| {
                o.keys().find(|k| !matches!(k.as_str(), "functionDeclarations" | "function_declarations"))
            })
            .cloned(),
        WireFormat::OpenAiChat | WireFormat::OpenAiEmbeddings | WireFormat::BedrockConverse => None,
    };
    if let Some(tool) = tools.into_iter().flatten().find_map(provider_run) {
        return Some(format!("a provider-run tool ({tool})"));
    }
    for key in ["web_search_options", "mcp_servers"] {
        if value.get(key).is_some_and(|v| !v.is_null()) {
            return Some(format!("a provider-run tool ({key})"));
        }
    }
    None
}

fn non_text(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => {
            if let Some(kind) = map.get("type").and_then(Value::as_str).filter(|k| NON_TEXT_TYPES.contains(k))
            {
                return Some(kind.to_owned());
            }
            if let Some(key) = map.keys().find(|k| NON_TEXT_KEYS.contains(&k.as_str())) {
                return Some(key.clone());
            }
            map.values().find_map(non_text)
        }
        Value::Array(items) => items.iter().find_map(non_text),
        _ => None,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn body(c: Clamp) -> String {
        match c {
            Clamp::Body(b) => String::from_utf8(b).unwrap(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn chat_replaces_the_field_the_request_uses_and_keeps_every_other_byte() {
        let b = br#"{ "model": "gpt-4o",  "max_tokens" : 9000, "messages": [] }"#;
        assert_eq!(
            body(set_output_bound(WireFormat::OpenAiChat, b, "gpt-4o", 77)),
            r#"{ "model": "gpt-4o",  "max_tokens" : 77, "messages": [] }"#
        );
        let b = br#"{"model":"gpt-4o","max_completion_tokens":9000,"max_tokens":9000}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::OpenAiChat, b, "gpt-4o", 5)),
            r#"{"model":"gpt-4o","max_completion_tokens":5,"max_tokens":5}"#
        );
    }

    #[test]
    fn chat_inserts_the_field_the_model_takes() {
        let b = br#"{"model":"gpt-5","messages":[]}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::OpenAiChat, b, "gpt-5", 64)),
            r#"{"max_completion_tokens":64,"model":"gpt-5","messages":[]}"#
        );
        let b = br#"{"model":"gpt-4o"}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::OpenAiChat, b, "gpt-4o", 64)),
            r#"{"max_tokens":64,"model":"gpt-4o"}"#
        );
    }

    #[test]
    fn responses_messages_and_gemini() {
        let b = br#"{"model":"gpt-5","input":"hi"}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::OpenAiResponses, b, "gpt-5", 20)),
            r#"{"max_output_tokens":20,"model":"gpt-5","input":"hi"}"#
        );
        let b = br#"{"model":"claude","max_tokens":32000,"messages":[]}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::Anthropic, b, "claude", 300)),
            r#"{"model":"claude","max_tokens":300,"messages":[]}"#
        );
        let b = br#"{"contents":[],"generationConfig":{"temperature":1,"maxOutputTokens":8192}}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::Gemini, b, "g", 40)),
            r#"{"contents":[],"generationConfig":{"temperature":1,"maxOutputTokens":40}}"#
        );
        let b = br#"{"contents":[],"generationConfig":{}}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::Gemini, b, "g", 40)),
            r#"{"contents":[],"generationConfig":{"maxOutputTokens":40}}"#
        );
        let b = br#"{"contents":[]}"#;
        assert_eq!(
            body(set_output_bound(WireFormat::Gemini, b, "g", 40)),
            r#"{"generationConfig":{"maxOutputTokens":40},"contents":[]}"#
        );
    }

    #[test]
    fn a_thinking_budget_must_stay_below_the_bound() {
        let b = br#"{"model":"c","max_tokens":32000,"thinking":{"type":"enabled","budget_tokens":2048}}"#;
        assert_eq!(
            set_output_bound(WireFormat::Anthropic, b, "c", 2048),
            Clamp::ThinkingTooLarge { budget_tokens: 2048 }
        );
        assert!(matches!(set_output_bound(WireFormat::Anthropic, b, "c", 2049), Clamp::Body(_)));
    }

    #[test]
    fn escaped_or_duplicate_keys_are_not_spliced() {
        let b = br#"{"model":"gpt-4o","max\u005ftokens":9000}"#;
        assert_eq!(set_output_bound(WireFormat::OpenAiChat, b, "gpt-4o", 5), Clamp::Unspliceable);
        assert_eq!(set_output_bound(WireFormat::OpenAiChat, b"[1]", "gpt-4o", 5), Clamp::Unspliceable);
    }

    #[test]
    fn unbounded_parts_are_named() {
        let image = br#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://x"}}]}]}"#;
        assert!(unbounded_part(WireFormat::OpenAiChat, image).unwrap().contains("image_url"));
        let search = br#"{"input":"hi","tools":[{"type":"function","name":"f"},{"type":"web_search"}]}"#;
        assert!(unbounded_part(WireFormat::OpenAiResponses, search).unwrap().contains("web_search"));
        let gemini = br#"{"contents":[{"parts":[{"text":"hi"}]}],"tools":[{"googleSearch":{}}]}"#;
        assert!(unbounded_part(WireFormat::Gemini, gemini).unwrap().contains("googleSearch"));
        let text = br#"{"messages":[{"role":"user","content":"an image_url in words"}],"tools":[{"type":"function"}]}"#;
        assert_eq!(unbounded_part(WireFormat::OpenAiChat, text), None);
    }
}
