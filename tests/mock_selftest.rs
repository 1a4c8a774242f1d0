//! Self-tests of the mock upstream (`support::mock`), talking to it directly.

use std::time::Duration;

use serde_json::{json, Value};

use crate::support::mock::MockUpstream;

async fn post(mock: &MockUpstream, path: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new().post(format!("{}{path}", mock.base)).json(&body).send().await.unwrap()
}

/// The `data:` payloads of an SSE body whose events end with `sep`.
fn sse_data(text: &str, sep: &str) -> Vec<String> {
    text.split(sep)
        .filter(|e| !e.trim().is_empty())
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn mock_openai_non_stream_reports_configured_usage() {
    let mock = MockUpstream::start();
    let usage = json!({ "input": 123, "output": 45, "cached": 7, "reasoning": 3 });
    let r =
        post(&mock, "/v1/chat/completions", json!({ "model": "gpt-4o", "mock": { "usage": usage } })).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["x-request-id"].to_str().unwrap().starts_with("req_"));
    assert_eq!(r.headers()["x-ratelimit-remaining-requests"], "9999");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-4o");
    assert_eq!(body["choices"][0]["message"]["content"], "Hello from mock");
    assert_eq!(body["usage"]["prompt_tokens"], 123);
    assert_eq!(body["usage"]["completion_tokens"], 45);
    assert_eq!(body["usage"]["total_tokens"], 168);
    assert_eq!(body["usage"]["prompt_tokens_details"]["cached_tokens"], 7);
    assert_eq!(body["usage"]["completion_tokens_details"]["reasoning_tokens"], 3);

    assert_eq!(mock.count(), 1);
    let rec = mock.last();
    assert_eq!((rec.method.as_str(), rec.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(rec.headers["content-type"], "application/json");
    assert_eq!(rec.json()["model"], "gpt-4o");
}

#[tokio::test]
async fn mock_openai_stream_usage_chunk_only_when_requested() {
    let mock = MockUpstream::start();
    let usage = json!({ "input": 11, "output": 22 });

    let r = post(
        &mock,
        "/v1/chat/completions",
        json!({ "model": "m", "stream": true, "mock": { "usage": usage } }),
    )
    .await;
    assert!(r.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let data = sse_data(&r.text().await.unwrap(), "\n\n");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks.len(), 5, "role, 3 content, finish: {chunks:?}");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert!(chunks.iter().all(|c| c.get("usage").is_none()), "{chunks:?}");

    let body = json!({
        "model": "m", "stream": true, "stream_options": { "include_usage": true }, "mock": { "usage": usage }
    });
    let data = sse_data(&post(&mock, "/v1/chat/completions", body).await.text().await.unwrap(), "\n\n");
    assert_eq!(data.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> =
        data[..data.len() - 1].iter().map(|d| serde_json::from_str(d).unwrap()).collect();
    assert_eq!(chunks.len(), 6);
    let usage_chunk = &chunks[5];
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["prompt_tokens"], 11);
    assert_eq!(usage_chunk["usage"]["completion_tokens"], 22);
    assert!(chunks[..5].iter().all(|c| c["usage"].is_null()));
    assert!(chunks.iter().all(|c| c["id"] == chunks[0]["id"]));
    assert_eq!(mock.completed_streams(), 2);
    assert_eq!(mock.cancelled_streams(), 0);
}

#[tokio::test]
async fn mock_anthropic_stream_event_order_and_cumulative_usage() {
    let mock = MockUpstream::start();
    let usage = json!({ "input": 100, "output": 50, "cached": 30, "cache_write_5m": 4, "cache_write_1h": 6 });
    let body = json!({ "model": "claude-x", "stream": true, "mock": { "usage": usage, "chunks": 2 } });
    let r = post(&mock, "/v1/messages", body).await;
    assert!(r.headers()["request-id"].to_str().unwrap().starts_with("req_"));
    let text = r.text().await.unwrap();
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let name = e.lines().find_map(|l| l.strip_prefix("event: ")).unwrap().to_owned();
            let data = e.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
            (name, serde_json::from_str(data).unwrap())
        })
        .collect();
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert!(events.iter().all(|(n, d)| d["type"] == n.as_str()));
    let start = &events[0].1["message"]["usage"];
    assert_eq!(start["input_tokens"], 100);
    assert_eq!(start["cache_read_input_tokens"], 30);
    assert_eq!(start["cache_creation_input_tokens"], 10);
    assert_eq!(start["cache_creation"]["ephemeral_1h_input_tokens"], 6);
    assert_eq!(start["output_tokens"], 1);
    let delta = &events[6].1;
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["usage"]["output_tokens"], 50);
}

#[tokio::test]
async fn mock_gemini_sse_chunks_share_a_response_id() {
    let mock = MockUpstream::start();
    let body = json!({ "contents": [], "mock": { "usage": { "input": 8, "output": 9, "reasoning": 2 } } });
    let url = format!("{}/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", mock.base);
    let r = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
    assert!(r.headers().get("x-request-id").is_none());
    let text = r.text().await.unwrap();
    assert!(text.ends_with("\r\n\r\n"), "{text:?}");
    let chunks: Vec<Value> =
        sse_data(&text, "\r\n\r\n").iter().map(|d| serde_json::from_str(d.trim_end()).unwrap()).collect();
    assert_eq!(chunks.len(), 3);
    assert!(chunks.iter().all(|c| c["responseId"] == chunks[0]["responseId"] && c["responseId"].is_string()));
    assert!(chunks.iter().all(|c| c["usageMetadata"]["promptTokenCount"] == 8));
    let last = &chunks[2];
    assert_eq!(last["candidates"][0]["finishReason"], "STOP");
    assert_eq!(last["usageMetadata"]["candidatesTokenCount"], 9);
    assert_eq!(last["usageMetadata"]["thoughtsTokenCount"], 2);
    assert_eq!(last["usageMetadata"]["totalTokenCount"], 19);
    assert!(last["usageMetadata"].get("cachedContentTokenCount").is_none());
    assert_eq!(mock.last().query, "alt=sse");
    assert_eq!(mock.last().path, "/v1beta/models/gemini-2.5-flash:streamGenerateContent");

    // Without alt=sse the streaming method answers one JSON array.
    let url = format!("{}/v1beta/models/gemini-2.5-flash:streamGenerateContent", mock.base);
    let r = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
    let array: Value = r.json().await.unwrap();
    assert_eq!(array.as_array().map(Vec::len), Some(3));
}

#[tokio::test]
async fn mock_status_429_has_retry_after_and_provider_error_shapes() {
    let mock = MockUpstream::start();
    let body = json!({ "model": "m", "stream": true, "mock": { "status": 429 } });
    let cases = [
        ("/v1/chat/completions", "/error/type", "rate_limit_error"),
        ("/v1/messages", "/error/type", "rate_limit_error"),
        ("/v1beta/models/g:generateContent", "/error/status", "RESOURCE_EXHAUSTED"),
    ];
    for (path, pointer, expected) in cases {
        let r = post(&mock, path, body.clone()).await;
        assert_eq!(r.status(), 429, "{path}");
        assert_eq!(r.headers()["retry-after"], "7", "{path}");
        assert_eq!(r.headers()["x-ratelimit-remaining-requests"], "0", "{path}");
        let err: Value = r.json().await.unwrap();
        assert_eq!(err.pointer(pointer), Some(&json!(expected)), "{path}: {err}");
    }
    let r = post(&mock, "/v1/chat/completions", json!({ "mock": { "status": 503 } })).await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.json::<Value>().await.unwrap()["error"]["type"], "server_error");
    assert_eq!(mock.completed_streams(), 0);

    let r = reqwest::Client::new().get(format!("{}/v1/models", mock.base)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(mock.count(), 5);
}

#[tokio::test]
async fn mock_stalled_stream_dropped_by_client_counts_as_cancelled() {
    let mock = MockUpstream::start();
    let body = json!({ "model": "m", "stream": true, "mock": { "stall_after": 2 } });
    let mut r = post(&mock, "/v1/chat/completions", body).await;
    let first = r.chunk().await.unwrap().expect("a first chunk");
    assert!(first.starts_with(b"data: "));
    assert_eq!(mock.cancelled_streams(), 0);
    drop(r);
    let mut waited = 0;
    while mock.cancelled_streams() == 0 && waited < 2000 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        waited += 20;
    }
    assert_eq!(mock.cancelled_streams(), 1);
    assert_eq!(mock.completed_streams(), 0);
}

#[tokio::test]
async fn mock_disconnect_after_truncates_the_body() {
    let mock = MockUpstream::start();
    let body = json!({ "model": "m", "stream": true, "mock": { "disconnect_after": 2 } });
    let mut r = post(&mock, "/v1/messages", body).await;
    assert_eq!(r.status(), 200);
    let mut received = Vec::new();
    let failed = loop {
        match r.chunk().await {
            Ok(Some(bytes)) => received.extend_from_slice(&bytes),
            Ok(None) => break false,
            Err(_) => break true,
        }
    };
    assert!(failed, "the body must fail, not end cleanly");
    let received = String::from_utf8(received).unwrap();
    assert!(received.starts_with("event: message_start\n"), "{received:?}");
    assert!(received.contains("event: content_block_start\n"), "{received:?}");
    assert!(!received.contains("event: ping"), "only 2 events before the cut: {received:?}");
    assert_eq!(mock.aborted_streams(), 1);
    assert_eq!(mock.completed_streams(), 0);
}
