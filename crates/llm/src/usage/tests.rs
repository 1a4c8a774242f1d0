//! Unit tests of the usage parsers, the request reader and the SSE framing, on
//! fixtures in the providers' documented shapes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

// ---- recorded answers (see `golden`, which reads every one of them) ----

const OPENAI_BODY: &str = include_str!("../../fixtures/answers/openai-chat/tool-calls-cached-reasoning.json");
const OPENAI_STREAM: &str =
    include_str!("../../fixtures/answers/openai-chat/stream-tool-calls-usage-chunk.sse");
const ANTHROPIC_BODY: &str =
    include_str!("../../fixtures/answers/anthropic/thinking-tool-use-cache-split.json");
const ANTHROPIC_STREAM: &str =
    include_str!("../../fixtures/answers/anthropic/stream-tool-use-cache-write.sse");
const GEMINI_BODY: &str = include_str!("../../fixtures/answers/gemini/thoughts-function-call-cached.json");
const GEMINI_STREAM: &str = include_str!("../../fixtures/answers/gemini/stream-crlf-function-call.sse");

// ---- helpers ----

pub(super) type Events = Vec<(String, Vec<u8>)>;

fn feed_pieces<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> (Events, SseParser) {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for piece in pieces {
        parser.feed(piece, |e| events.push((e.event.to_owned(), e.data.to_vec())));
    }
    parser.finish(|e| events.push((e.event.to_owned(), e.data.to_vec())));
    (events, parser)
}

pub(super) fn parse_all(stream: &[u8]) -> Events {
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
pub(super) fn assert_split_invariant(stream: &[u8]) -> Events {
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
    // Every truncation of every fixture, read as any format: no panic, and no usage
    // from a cut body (`golden` checks each body's own format the same way).
    for fixture in [OPENAI_BODY, ANTHROPIC_BODY, GEMINI_BODY] {
        let bytes = fixture.trim_end().as_bytes();
        for cut in 0..bytes.len() {
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
fn openai_usage_only_chunks_are_recognized() {
    // Usage, id and tool calls of this stream: see its golden snapshot.
    let events = parse_all(OPENAI_STREAM.as_bytes());
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
            ..RequestSummary::default()
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

// ---- end markers ----

/// Whether a stream's events, all of them or all but the last `cut`, are complete.
fn complete_after(provider: Provider, stream: &str, cut: usize) -> bool {
    let events = parse_all(stream.as_bytes());
    let mut acc = StreamUsage::new(provider);
    for (_, data) in &events[..events.len() - cut] {
        acc.on_event(data);
    }
    acc.complete()
}

#[test]
fn a_stream_is_complete_only_on_its_end_marker() {
    for (provider, stream) in [
        (Provider::OpenAi, OPENAI_STREAM),
        (Provider::Anthropic, ANTHROPIC_STREAM),
        (Provider::Google, GEMINI_STREAM),
    ] {
        assert!(complete_after(provider, stream, 0), "{provider:?} whole");
        assert!(!complete_after(provider, stream, 1), "{provider:?} without its last event");
    }
}

#[test]
fn an_anthropic_error_event_spoils_the_stream() {
    let error = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}\n\n";
    let stream = format!("{ANTHROPIC_STREAM}{error}");
    assert!(!complete_after(Provider::Anthropic, &stream, 0));
    let early = ANTHROPIC_STREAM.replacen("event: message_start", &format!("{error}event: message_start"), 1);
    assert!(!complete_after(Provider::Anthropic, &early, 0), "an error before message_stop");
}

#[test]
fn responses_and_embeddings_request_summaries() {
    let responses =
        br#"{"model":"gpt-4.1","input":"hi","stream":true,"background":true,"max_output_tokens":300}"#;
    assert_eq!(
        request_summary_in(WireFormat::OpenAiResponses, responses),
        Some(RequestSummary {
            model: Some("gpt-4.1".into()),
            max_output_tokens: Some(300),
            stream: true,
            background: true,
            ..RequestSummary::default()
        })
    );
    // `max_tokens` is a chat field: the Responses route leaves the maximum to the model.
    let plain = request_summary_in(WireFormat::OpenAiResponses, br#"{"model":"m","max_tokens":5}"#).unwrap();
    assert_eq!((plain.max_output_tokens, plain.stream, plain.background), (None, false, false));
    let embeddings = br#"{"model":"text-embedding-3-small","input":["abcd","efgh"]}"#;
    let summary = request_summary_in(WireFormat::OpenAiEmbeddings, embeddings).unwrap();
    assert_eq!(summary.model.as_deref(), Some("text-embedding-3-small"));
    assert_eq!(summary.max_output_tokens, Some(0), "embeddings produce no output tokens");
    assert_eq!(summary.input_bytes, Some(br#"["abcd","efgh"]"#.len()));
    assert_eq!(request_summary_in(WireFormat::OpenAiResponses, br#"{"stream":"yes"}"#), None);
    assert_eq!(request_summary_in(WireFormat::OpenAiEmbeddings, b"[]"), None);
}

#[test]
fn finish_reasons_of_every_format() {
    let reason_of = |provider: Provider, events: &Events| {
        let mut acc = StreamUsage::new(provider);
        for (_, data) in events {
            acc.on_event(data);
        }
        acc.finish_reason()
    };
    let whole = |body: &str| vec![(String::new(), body.as_bytes().to_vec())];
    assert_eq!(reason_of(Provider::OpenAi, &whole(OPENAI_BODY)).as_deref(), Some("tool_calls"));
    let stream = reason_of(Provider::OpenAi, &parse_all(OPENAI_STREAM.as_bytes()));
    assert!(stream.is_some(), "a stream's finish chunk names its reason");
    for (provider, body, stream) in [
        (Provider::Anthropic, ANTHROPIC_BODY, ANTHROPIC_STREAM),
        (Provider::Google, GEMINI_BODY, GEMINI_STREAM),
    ] {
        assert!(reason_of(provider, &whole(body)).is_some(), "{provider:?} body");
        assert!(reason_of(provider, &parse_all(stream.as_bytes())).is_some(), "{provider:?} stream");
    }
    // Common reasons are not allocated; others are kept as they are.
    assert!(matches!(finish_reason("end_turn"), std::borrow::Cow::Borrowed("end_turn")));
    assert_eq!(finish_reason("new_reason"), "new_reason");
    let mut responses = StreamUsage::of_format(WireFormat::OpenAiResponses);
    responses.on_event(br#"{"type":"response.completed","response":{"id":"resp_1","status":"completed","usage":{"input_tokens":1,"output_tokens":1}}}"#);
    assert_eq!(responses.finish_reason().as_deref(), Some("completed"));
}

#[test]
fn a_cache_write_is_possible_only_where_the_body_asks_for_one() {
    let plain = br#"{"model":"claude-sonnet-4-5","messages":[{"role":"user","content":"hi"}]}"#;
    let marked =
        br#"{"model":"m","system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}]}"#;
    assert!(!may_write_cache(WireFormat::Anthropic, plain));
    assert!(may_write_cache(WireFormat::Anthropic, marked));
    assert!(!may_write_cache(WireFormat::OpenAiChat, marked), "OpenAI writes its cache at no extra price");
    assert!(may_write_cache(WireFormat::Gemini, br#"{"cachedContent":"cachedContents/x","contents":[]}"#));
    assert!(!may_write_cache(WireFormat::Gemini, br#"{"contents":[]}"#));
    assert!(may_write_cache(
        WireFormat::BedrockConverse,
        br#"{"system":[{"cachePoint":{"type":"default"}}]}"#
    ));
    // What the raw text cannot settle errs high: an escaped key, a body not UTF-8.
    assert!(may_write_cache(WireFormat::Anthropic, br#"{"system":[{"cache\u005fcontrol":{}}]}"#));
    assert!(may_write_cache(WireFormat::Anthropic, b"\xff"));
}
