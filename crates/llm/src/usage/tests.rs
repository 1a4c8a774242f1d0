//! Unit tests of the usage parsers, the request reader and the SSE framing, on
//! fixtures in the providers' documented shapes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;

// ---- fixtures, in the providers' documented shapes ----

const OPENAI_BODY: &str = r#"{
  "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
  "object": "chat.completion",
  "created": 1741570283,
  "model": "gpt-4o-2024-08-06",
  "choices": [
    {
      "index": 0,
      "message": {
        "role": "assistant",
        "content": null,
        "tool_calls": [
          {"id": "call_abc123", "type": "function",
           "function": {"name": "get_current_weather", "arguments": "{\n\"location\": \"Boston, MA\"\n}"}}
        ],
        "refusal": null,
        "annotations": []
      },
      "logprobs": null,
      "finish_reason": "tool_calls"
    }
  ],
  "usage": {
    "prompt_tokens": 1117,
    "completion_tokens": 46,
    "total_tokens": 1163,
    "prompt_tokens_details": {"cached_tokens": 1024, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 10, "audio_tokens": 0,
      "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
  },
  "service_tier": "default",
  "system_fingerprint": "fp_fc9f1d7035"
}"#;

const OPENAI_STREAM: &str = concat!(
    r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"role":"assistant","content":"","refusal":null},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"content":"Héllo wörld 🌍 — \"quoted\"\n"},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"location\":\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_2","type":"function","function":{"name":"get_time","arguments":"{}"}}]},"logprobs":null,"finish_reason":null}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"usage":null}"#,
    "\n\n",
    r#"data: {"id":"chatcmpl-123","object":"chat.completion.chunk","created":1694268190,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":"fp_44709d6fcb","choices":[],"usage":{"prompt_tokens":2048,"completion_tokens":120,"total_tokens":2168,"prompt_tokens_details":{"cached_tokens":1536,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":64,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}"#,
    "\n\n",
    "data: [DONE]\n\n",
);

const ANTHROPIC_BODY: &str = r#"{
  "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
  "type": "message",
  "role": "assistant",
  "model": "claude-sonnet-4-5-20250929",
  "content": [
    {"type": "thinking", "thinking": "Let me check…", "signature": "EqQBCgIYAhIM"},
    {"type": "text", "text": "I'll look up the weather."},
    {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
     "input": {"location": "San Francisco, CA"}}
  ],
  "stop_reason": "tool_use",
  "stop_sequence": null,
  "usage": {
    "input_tokens": 50,
    "cache_creation_input_tokens": 3000,
    "cache_read_input_tokens": 20000,
    "cache_creation": {"ephemeral_5m_input_tokens": 1000, "ephemeral_1h_input_tokens": 2000},
    "output_tokens": 503,
    "service_tier": "standard",
    "server_tool_use": {"web_search_requests": 0}
  }
}"#;

const ANTHROPIC_STREAM: &str = concat!(
    "event: message_start\n",
    r#"data: {"type":"message_start","message":{"id":"msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5-20250929","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":472,"cache_creation_input_tokens":2048,"cache_read_input_tokens":1800,"cache_creation":{"ephemeral_5m_input_tokens":2048,"ephemeral_1h_input_tokens":0},"output_tokens":2,"service_tier":"standard"}}}"#,
    "\n\n",
    "event: content_block_start\n",
    r#"data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
    "\n\n",
    "event: ping\n",
    r#"data: {"type": "ping"}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Okay, let’s check the weather — ☀️"}}"#,
    "\n\n",
    "event: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":0}"#,
    "\n\n",
    "event: content_block_start\n",
    r#"data: {"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_01T1x1fJ34qAmk2tNTrN7Up6","name":"get_weather","input":{}}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"location\": \"San Fra"}}"#,
    "\n\n",
    "event: content_block_delta\n",
    r#"data: {"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"ncisco, CA\"}"}}"#,
    "\n\n",
    "event: content_block_stop\n",
    r#"data: {"type":"content_block_stop","index":1}"#,
    "\n\n",
    "event: message_delta\n",
    r#"data: {"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#,
    "\n\n",
    "event: message_stop\n",
    r#"data: {"type":"message_stop"}"#,
    "\n\n",
);

const GEMINI_BODY: &str = r#"{
  "candidates": [
    {
      "content": {
        "parts": [
          {"text": "**Weighing options**", "thought": true},
          {"functionCall": {"name": "schedule_meeting", "args": {"attendees": ["Bob"], "time": "10:00"}},
           "thoughtSignature": "CiwBVKhc7n"}
        ],
        "role": "model"
      },
      "finishReason": "STOP",
      "index": 0
    }
  ],
  "usageMetadata": {
    "promptTokenCount": 12000,
    "candidatesTokenCount": 250,
    "totalTokenCount": 13250,
    "cachedContentTokenCount": 8000,
    "thoughtsTokenCount": 900,
    "toolUsePromptTokenCount": 100,
    "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 12000}],
    "cacheTokensDetails": [{"modality": "TEXT", "tokenCount": 8000}]
  },
  "modelVersion": "gemini-2.5-pro",
  "responseId": "mTvYaO-rBaCgz7IPq7bGoAM"
}"#;

// alt=sse streams use CRLF line endings.
const GEMINI_STREAM: &str = concat!(
    r#"data: {"candidates": [{"content": {"parts": [{"text": "The"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"totalTokenCount": 8,"promptTokensDetails": [{"modality": "TEXT","tokenCount": 8}]},"modelVersion": "gemini-2.5-flash","responseId": "Ae0kaLqjDpKcz7IPmMLG0AQ"}"#,
    "\r\n\r\n",
    r#"data: {"candidates": [{"content": {"parts": [{"text": " quick brown 🦊 — façade"}],"role": "model"},"index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 9,"totalTokenCount": 612,"thoughtsTokenCount": 595},"modelVersion": "gemini-2.5-flash","responseId": "Ae0kaLqjDpKcz7IPmMLG0AQ"}"#,
    "\r\n\r\n",
    r#"data: {"candidates": [{"content": {"parts": [{"functionCall": {"name": "get_weather","args": {"city": "Paris"}},"thoughtSignature": "CiQB0e2Kb"}],"role": "model"},"finishReason": "STOP","index": 0}],"usageMetadata": {"promptTokenCount": 8,"candidatesTokenCount": 31,"totalTokenCount": 634,"thoughtsTokenCount": 595,"cachedContentTokenCount": 0},"modelVersion": "gemini-2.5-flash","responseId": "Ae0kaLqjDpKcz7IPmMLG0AQ"}"#,
    "\r\n\r\n",
);

// ---- helpers ----

type Events = Vec<(String, Vec<u8>)>;

fn feed_pieces<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> (Events, SseParser) {
    let mut parser = SseParser::new();
    let mut events = Vec::new();
    for piece in pieces {
        parser.feed(piece, |e| events.push((e.event.to_owned(), e.data.to_vec())));
    }
    parser.finish(|e| events.push((e.event.to_owned(), e.data.to_vec())));
    (events, parser)
}

fn parse_all(stream: &[u8]) -> Events {
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
fn assert_split_invariant(stream: &[u8]) -> Events {
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

fn with_line_endings(stream: &str, ending: &str) -> String {
    stream.replace("\r\n", "\n").replace('\n', ending)
}

// ---- non-streaming bodies ----

#[test]
fn openai_body_usage() {
    let usage = openai_usage(OPENAI_BODY.as_bytes()).unwrap();
    assert_eq!(
        usage,
        Usage {
            input_tokens: 1117,
            cached_input_tokens: 1024,
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: 46,
            reasoning_tokens: 10,
        }
    );
    // The accumulator reads a whole body too, tool calls included.
    let mut acc = OpenAiStreamUsage::new();
    acc.on_event(OPENAI_BODY.as_bytes());
    assert_eq!(acc.response_id(), Some("chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG"));
    assert_eq!(acc.model(), Some("gpt-4o-2024-08-06"));
    assert_eq!(acc.tool_calls(), [ToolCall { id: "call_abc123".into(), name: "get_current_weather".into() }]);
    assert_eq!(acc.finish(), Some(usage));
}

#[test]
fn openai_body_minimal_and_missing_details() {
    let usage = openai_usage(br#"{"usage":{"prompt_tokens":9,"completion_tokens":12,"total_tokens":21}}"#);
    assert_eq!(usage, Some(Usage { input_tokens: 9, output_tokens: 12, ..Usage::default() }));
    let nulls = br#"{"usage":{"prompt_tokens":9,"completion_tokens":null,"prompt_tokens_details":null}}"#;
    assert_eq!(openai_usage(nulls), Some(Usage { input_tokens: 9, ..Usage::default() }));
}

#[test]
fn anthropic_body_usage_adds_cache_traffic_to_input() {
    let usage = anthropic_usage(ANTHROPIC_BODY.as_bytes()).unwrap();
    assert_eq!(
        usage,
        Usage {
            input_tokens: 50 + 20_000 + 3_000,
            cached_input_tokens: 20_000,
            cache_write_5m_tokens: 1_000,
            cache_write_1h_tokens: 2_000,
            output_tokens: 503,
            reasoning_tokens: 0,
        }
    );
    let mut acc = AnthropicStreamUsage::new();
    acc.on_event(ANTHROPIC_BODY.as_bytes());
    assert_eq!(acc.response_id(), Some("msg_013Zva2CMHLNnXjNJJKqJ2EF"));
    assert_eq!(
        acc.tool_calls(),
        [ToolCall { id: "toolu_01A09q90qw90lq917835lq9".into(), name: "get_weather".into() }]
    );
    assert_eq!(acc.finish(), Some(usage));
}

#[test]
fn anthropic_cache_creation_without_split_is_five_minutes() {
    let body = br#"{"usage":{"input_tokens":10,"cache_creation_input_tokens":300,"cache_read_input_tokens":0,"output_tokens":5}}"#;
    let usage = anthropic_usage(body).unwrap();
    assert_eq!((usage.input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens), (310, 300, 0));
    // A split that disagrees with the total: the larger is billed, the rest as 5m.
    let body = br#"{"usage":{"input_tokens":0,"cache_creation_input_tokens":100,"cache_creation":{"ephemeral_1h_input_tokens":30},"output_tokens":0}}"#;
    let usage = anthropic_usage(body).unwrap();
    assert_eq!((usage.input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens), (100, 70, 30));
    let body = br#"{"usage":{"input_tokens":0,"cache_creation_input_tokens":10,"cache_creation":{"ephemeral_5m_input_tokens":20,"ephemeral_1h_input_tokens":30}}}"#;
    let usage = anthropic_usage(body).unwrap();
    assert_eq!((usage.input_tokens, usage.cache_write_5m_tokens, usage.cache_write_1h_tokens), (50, 20, 30));
}

#[test]
fn gemini_body_usage() {
    let usage = gemini_usage(GEMINI_BODY.as_bytes()).unwrap();
    assert_eq!(
        usage,
        Usage {
            input_tokens: 12_100,
            cached_input_tokens: 8_000,
            cache_write_5m_tokens: 0,
            cache_write_1h_tokens: 0,
            output_tokens: 1_150,
            reasoning_tokens: 900,
        }
    );
    let mut acc = GeminiStreamUsage::new();
    acc.on_event(GEMINI_BODY.as_bytes());
    assert_eq!(acc.response_id(), Some("mTvYaO-rBaCgz7IPq7bGoAM"));
    assert_eq!(acc.model(), Some("gemini-2.5-pro"));
    assert_eq!(acc.tool_calls(), [ToolCall { id: String::new(), name: "schedule_meeting".into() }]);
    assert_eq!(acc.finish(), Some(usage));
    // The JSON-array form of streamGenerateContent: the last usage wins.
    let array = br#" [{"usageMetadata":{"promptTokenCount":5}},{"candidates":[]},{"usageMetadata":{"promptTokenCount":5,"candidatesTokenCount":7}}]"#;
    assert_eq!(gemini_usage(array), Some(Usage { input_tokens: 5, output_tokens: 7, ..Usage::default() }));
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
    // Every truncation of every fixture: no panic, and no usage from a cut body.
    for fixture in [OPENAI_BODY, ANTHROPIC_BODY, GEMINI_BODY] {
        let bytes = fixture.as_bytes();
        for cut in 0..bytes.len() - 1 {
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
fn openai_stream_usage_id_and_tool_calls() {
    let events = assert_split_invariant(OPENAI_STREAM.as_bytes());
    assert_eq!(events.len(), 8);
    assert!(events.iter().all(|(event, _)| event.is_empty()));
    let (usage, id, calls) = usage_of(Provider::OpenAi, &events);
    assert_eq!(
        usage,
        Some(Usage {
            input_tokens: 2048,
            cached_input_tokens: 1536,
            output_tokens: 120,
            reasoning_tokens: 64,
            ..Usage::default()
        })
    );
    assert_eq!(id.as_deref(), Some("chatcmpl-123"));
    assert_eq!(
        calls,
        [
            ToolCall { id: "call_DdmO9pD3xa9XTPNJ32zg2hcA".into(), name: "get_weather".into() },
            ToolCall { id: "call_2".into(), name: "get_time".into() },
        ]
    );
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
fn anthropic_stream_usage_id_and_tool_calls() {
    let events = assert_split_invariant(ANTHROPIC_STREAM.as_bytes());
    assert_eq!(events.len(), 11);
    assert_eq!(events[0].0, "message_start");
    let (usage, id, calls) = usage_of(Provider::Anthropic, &events);
    assert_eq!(
        usage,
        Some(Usage {
            input_tokens: 472 + 2048 + 1800,
            cached_input_tokens: 1800,
            cache_write_5m_tokens: 2048,
            cache_write_1h_tokens: 0,
            output_tokens: 89,
            reasoning_tokens: 0,
        })
    );
    assert_eq!(id.as_deref(), Some("msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY"));
    assert_eq!(calls, [ToolCall { id: "toolu_01T1x1fJ34qAmk2tNTrN7Up6".into(), name: "get_weather".into() }]);
}

#[test]
fn anthropic_message_delta_is_cumulative_and_overrides_input_fields() {
    let mut acc = AnthropicStreamUsage::new();
    acc.on_event(
        br#"{"type":"message_start","message":{"id":"msg_1","usage":{"input_tokens":100,"cache_read_input_tokens":0,"output_tokens":1}}}"#,
    );
    assert_eq!(acc.usage().map(|u| (u.input_tokens, u.output_tokens)), Some((100, 1)));
    acc.on_event(br#"{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":40}}"#);
    acc.on_event(
        br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"input_tokens":120,"cache_creation_input_tokens":null,"cache_read_input_tokens":50,"output_tokens":75}}"#,
    );
    assert_eq!(
        acc.finish(),
        Some(Usage { input_tokens: 170, cached_input_tokens: 50, output_tokens: 75, ..Usage::default() })
    );
    // A stream that died before any usage.
    let mut acc = AnthropicStreamUsage::new();
    acc.on_event(br#"{"type":"ping"}"#);
    acc.on_event(br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
    assert_eq!(acc.finish(), None);
}

#[test]
fn gemini_stream_usage_last_wins() {
    let events = assert_split_invariant(GEMINI_STREAM.as_bytes());
    assert_eq!(events.len(), 3);
    let (usage, id, calls) = usage_of(Provider::Google, &events);
    assert_eq!(
        usage,
        Some(Usage { input_tokens: 8, output_tokens: 31 + 595, reasoning_tokens: 595, ..Usage::default() })
    );
    assert_eq!(id.as_deref(), Some("Ae0kaLqjDpKcz7IPmMLG0AQ"));
    assert_eq!(calls, [ToolCall { id: String::new(), name: "get_weather".into() }]);
    let mut acc = GeminiStreamUsage::new();
    acc.on_event(br#"{"candidates":[{"content":{"parts":[{"text":"hi"}]}}]}"#);
    assert_eq!(acc.finish(), None);
}

#[test]
fn every_line_ending_gives_the_same_events() {
    for stream in [OPENAI_STREAM, ANTHROPIC_STREAM, GEMINI_STREAM] {
        let lf = parse_all(with_line_endings(stream, "\n").as_bytes());
        for ending in ["\r\n", "\r"] {
            let other = with_line_endings(stream, ending);
            assert_eq!(assert_split_invariant(other.as_bytes()), lf, "{ending:?}");
        }
    }
}

// ---- the SSE parser itself ----

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
fn a_blocked_gemini_prompt_is_a_complete_answer() {
    let blocked = "data: {\"promptFeedback\":{\"blockReason\":\"SAFETY\"},\"usageMetadata\":{\"promptTokenCount\":8}}\r\n\r\n";
    assert!(complete_after(Provider::Google, blocked, 0));
}

#[test]
fn whole_bodies_fed_as_one_event_are_complete() {
    let mut openai = StreamUsage::new(Provider::OpenAi);
    openai.on_event(OPENAI_BODY.as_bytes());
    assert!(openai.complete());
    let mut anthropic = StreamUsage::new(Provider::Anthropic);
    anthropic.on_event(ANTHROPIC_BODY.as_bytes());
    assert!(anthropic.complete());
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
