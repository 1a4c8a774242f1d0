//! Golden answers: every provider answer recorded under `fixtures/answers/<format>/`
//! (`*.json` a whole body, `*.sse` a stream) is read as the proxy reads it, and what
//! was read (usage, id, model, finish reason, tool calls, completeness) is compared
//! with its snapshot in `snapshots/`. A new format or case is a new file, not new
//! test code: run `INSTA_UPDATE=always cargo test -p spendgate-llm golden`, check the
//! new snapshot by eye, and commit both.
//!
//! Every fixture also passes the properties that hold for any answer: a stream reads
//! the same whatever its line endings and however its bytes are split, and a body cut
//! anywhere before its end yields no usage (a cut answer is never taken as a whole
//! one).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};

use super::tests::{assert_split_invariant, parse_all};
use super::*;

/// The wire format a fixture folder holds.
fn format_of(folder: &str) -> WireFormat {
    match folder {
        "openai-chat" => WireFormat::OpenAiChat,
        "openai-responses" => WireFormat::OpenAiResponses,
        "openai-embeddings" => WireFormat::OpenAiEmbeddings,
        "anthropic" => WireFormat::Anthropic,
        "gemini" => WireFormat::Gemini,
        "bedrock-converse" => WireFormat::BedrockConverse,
        other => panic!("fixtures/answers/{other}: no wire format of that name"),
    }
}

/// A whole body's usage as the proxy reads a JSON answer of `format`.
fn body_usage(format: WireFormat, body: &[u8]) -> Option<Usage> {
    match format {
        WireFormat::OpenAiChat => openai_usage(body),
        WireFormat::OpenAiEmbeddings => embeddings_usage(body),
        WireFormat::Anthropic => anthropic_usage(body),
        WireFormat::Gemini => gemini_usage(body),
        WireFormat::BedrockConverse => converse_usage(body),
        WireFormat::OpenAiResponses => {
            let mut reader = StreamUsage::of_format(format);
            reader.on_event(body);
            reader.usage()
        }
    }
}

/// What the stream reader of `format` makes of `events`.
fn reading(format: WireFormat, events: &[&[u8]]) -> Value {
    let mut reader = StreamUsage::of_format(format);
    for data in events {
        reader.on_event(data);
    }
    let calls: Vec<Value> =
        reader.tool_calls().iter().map(|c| json!({ "id": c.id, "name": c.name })).collect();
    let builtin: Vec<&str> = reader.builtin_calls().iter().map(|c| c.kind.as_str()).collect();
    json!({
        "usage": reader.usage(),
        "responseId": reader.response_id(),
        "model": reader.model(),
        "finishReason": reader.finish_reason(),
        "toolCalls": calls,
        "builtinCalls": builtin,
        "complete": reader.complete(),
    })
}

fn read_stream(format: WireFormat, text: &[u8]) -> Value {
    let events = assert_split_invariant(text);
    let as_text = String::from_utf8(text.to_vec()).unwrap().replace("\r\n", "\n");
    for ending in ["\n", "\r\n", "\r"] {
        assert_eq!(parse_all(as_text.replace('\n', ending).as_bytes()), events, "line ending {ending:?}");
    }
    let data: Vec<&[u8]> = events.iter().map(|(_, d)| d.as_slice()).collect();
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    let mut read = reading(format, &data);
    read["events"] = json!(names);
    read
}

fn read_body(format: WireFormat, body: &[u8]) -> Value {
    let end = body.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
    for cut in 0..end {
        let prefix = &body[..cut];
        assert_eq!(body_usage(format, prefix), None, "usage from a body cut at {cut}");
        if format != WireFormat::BedrockConverse {
            assert_eq!(reading(format, &[prefix])["usage"], Value::Null, "stream reader, cut at {cut}");
        }
    }
    if format == WireFormat::BedrockConverse {
        // Read whole only: its streams are AWS event streams, not SSE (see `aws_events`).
        return json!({ "bodyUsage": body_usage(format, body) });
    }
    let mut read = reading(format, &[body]);
    read["bodyUsage"] = json!(body_usage(format, body));
    read
}

#[test]
fn golden_answers() {
    insta::glob!("../../fixtures/answers", "*/*.*", |path| {
        let folder = path.parent().and_then(std::path::Path::file_name).and_then(|f| f.to_str()).unwrap();
        let format = format_of(folder);
        let bytes = std::fs::read(path).unwrap();
        let read = match path.extension().and_then(|e| e.to_str()) {
            Some("sse") => read_stream(format, &bytes),
            Some("json") => read_body(format, &bytes),
            other => panic!("{}: a fixture is *.json or *.sse, not {other:?}", path.display()),
        };
        insta::assert_json_snapshot!(read);
    });
}
