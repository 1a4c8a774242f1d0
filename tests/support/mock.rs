//! A mock upstream that speaks all three provider APIs on one port, for pointing the
//! proxy at in integration tests.
//!
//! [`MockUpstream::start`] binds `127.0.0.1:0` and serves, until dropped:
//!
//! - `POST /v1/chat/completions`: OpenAI chat completions (JSON or SSE with `"stream": true`);
//! - `POST /v1/messages`: Anthropic messages (JSON or SSE with `"stream": true`);
//! - `POST /v1beta/models/{model}:generateContent` and `:streamGenerateContent`: Gemini.
//!   The streaming method answers SSE (CRLF-separated events) only when the query has
//!   `alt=sse`; without it, it answers one JSON array of all chunks, as real Gemini does.
//!
//! - `POST /v1/responses`: the OpenAI Responses API (JSON, typed SSE events with
//!   `"stream": true`, a queued answer without usage with `"background": true`), and
//!   the bookkeeping endpoints under `/v1/responses/` (see [`responses`]);
//! - `POST /v1/embeddings`: OpenAI embeddings (usage `prompt_tokens` = `usage.input`).
//!
//! - Azure OpenAI: `/openai/deployments/{deployment}/...` and `/openai/v1/...` (see
//!   [`azure`]: `api-key` and `api-version` checked).
//! - Amazon Bedrock: `/model/{modelId}/converse` and `/invoke` (see [`bedrock`]: the
//!   SigV4 signature or the API key checked).
//!
//! One lower-case base-path segment before the version (`/or/v1/chat/completions`) is
//! ignored, for upstreams whose base URL has a path. Anything else is a JSON 404.
//! Every request (404s included) is recorded, in arrival order, once its head and body
//! have arrived: see [`MockUpstream::requests`].
//!
//! # Steering the mock
//!
//! The proxy forwards request bodies byte for byte, so a test steers the mock with an
//! optional top-level `"mock"` object in the request JSON (absent keys take defaults,
//! unknown keys are ignored):
//!
//! | key | default | effect |
//! |-----|---------|--------|
//! | `usage` | see below | token counts reported, exactly as given |
//! | `no_usage` | `false` | omit usage everywhere (OpenAI: no `usage` field and no usage chunk; Anthropic: no `usage` keys at all; Gemini: no `usageMetadata`) |
//! | `status` | none | answer with this (non-2xx) status and the provider's error body; 429 adds `retry-after: 7` and `x-ratelimit-remaining-requests: 0` |
//! | `delay_ms` | `0` | wait before sending the response head (errors included) |
//! | `chunks` | `3` | content chunks in a stream (OpenAI content deltas, Anthropic `text_delta`s, Gemini chunks) |
//! | `chunk_delay_ms` | `0` | delay before every stream event but the first |
//! | `stall_after` | none | after N stream events, send nothing more and hang until the client goes away |
//! | `disconnect_after` | none | after N stream events, fail the body so the connection is aborted (no terminating chunk) |
//! | `end_after` | none | after N stream events, end the body cleanly (the connection closes normally, but the provider's end marker never came) |
//! | `error_after` | none | Anthropic streams: after N events, send an `error` event (`overloaded_error`) and end |
//! | `tool_calls` | `false` | answer with a `get_weather` tool call |
//! | `answer_model` | the request's `model` | the model the answer names |
//! | `echo_headers` | `false` | non-streaming only: add a top-level `"received_headers"` object to the answer |
//! | `builtin_tools` | `[]` | Responses: built-in tool items (`"web_search_call"`, ...) before the answer |
//! | `builtin_tools_repeat` | `1` | Responses: the `builtin_tools` list this many times over (each item its own id) |
//! | `honour_bound` | `false` | report at most as many output tokens as the request's output bound |
//! | `input_from_bytes` | `false` | report the body's byte count as the prompt's tokens |
//! | `terminal` | `"completed"` | Responses streams: end with `response.completed`, `"incomplete"` or `"failed"` (usage included unless `no_usage`) |
//!
//! `usage` is `{"input": P, "output": C, "cached": K, "reasoning": R, "cache_write_5m": W5,
//! "cache_write_1h": W1}` with defaults 10, 20, 0, 0, 0, 0. They map to OpenAI
//! `prompt_tokens`/`completion_tokens`/`cached_tokens`/`reasoning_tokens` (total = P + C);
//! Anthropic `input_tokens`/`output_tokens`/`cache_read_input_tokens` and
//! `cache_creation_input_tokens` = W5 + W1 with the `cache_creation` split; Gemini
//! `promptTokenCount`/`candidatesTokenCount`/`cachedContentTokenCount`/`thoughtsTokenCount`
//! (the last two omitted when 0; total = P + C + R).
//!
//! # Stream events
//!
//! `stall_after` and `disconnect_after` count SSE events (each flushed as its own HTTP
//! chunk), in this order (N = `chunks`):
//!
//! - OpenAI: role chunk (`"delta":{"role":"assistant","content":""}`), N content chunks
//!   (`"tok"` each), with `tool_calls` two tool-call chunks (id/name, then arguments), the
//!   finish chunk (`"stop"` or `"tool_calls"`), the usage chunk (only when the request has
//!   `"stream_options":{"include_usage":true}`; then every other chunk carries
//!   `"usage":null`, as OpenAI does), and `data: [DONE]`.
//! - Anthropic: `message_start` (usage with `output_tokens: 1`), `content_block_start`,
//!   `ping`, N `content_block_delta`, `content_block_stop`, with `tool_calls` three more
//!   (`content_block_start` of the `tool_use` block, an `input_json_delta`,
//!   `content_block_stop`), `message_delta` (cumulative `output_tokens`: C), `message_stop`.
//! - Gemini: N chunks of `"tok"` sharing one `responseId`, each with `usageMetadata`
//!   (`candidatesTokenCount` growing to C); the last has `finishReason: "STOP"`, the full
//!   usage and, with `tool_calls`, a `functionCall` part instead of text.
//!
//! Streams are tracked: [`MockUpstream::completed_streams`] counts those sent to the end,
//! [`MockUpstream::cancelled_streams`] those the client abandoned first (the body stream
//! was dropped unfinished) and [`MockUpstream::aborted_streams`] those cut by
//! `disconnect_after`.

use std::collections::{BTreeMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use actix_web::dev::ServerHandle;
use actix_web::http::StatusCode;
use actix_web::web::{self, Bytes};
use actix_web::{App, HttpRequest, HttpResponse, HttpResponseBuilder, HttpServer};
use futures_util::stream::{LocalBoxStream, Stream, StreamExt};
use serde_json::{json, Map, Value};

mod azure;
pub mod bedrock;
mod responses;

/// Request bodies up to this size are accepted (the proxy's own caps are under test).
const BODY_LIMIT: usize = 64 * 1024 * 1024;

/// The text of a non-streaming answer.
const TEXT: &str = "Hello from mock";

/// The text of each streamed content chunk.
const CHUNK_TEXT: &str = "tok";

/// One request as the mock received it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    /// The raw query string, without `?` (empty when none).
    pub query: String,
    /// Lowercased names; repeated headers joined with `", "`.
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// The body parsed as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(&name.to_ascii_lowercase()).map(String::as_str)
    }
}

/// State shared by the server's workers and the test.
#[derive(Default)]
struct Shared {
    requests: Mutex<Vec<Recorded>>,
    /// The only `api-key` the Azure paths accept, when set.
    azure_key: Mutex<Option<String>>,
    /// How the Bedrock paths must be authenticated, when set.
    bedrock: Mutex<Option<bedrock::Expect>>,
    completed: AtomicUsize,
    cancelled: AtomicUsize,
    aborted: AtomicUsize,
}

/// A running mock upstream; stops (without waiting) when dropped.
pub struct MockUpstream {
    /// `http://127.0.0.1:PORT`, no trailing slash.
    pub base: String,
    shared: Arc<Shared>,
    handle: ServerHandle,
}

impl MockUpstream {
    /// Starts the server on its own thread and actix `System`; it accepts connections
    /// as soon as this returns.
    pub fn start() -> MockUpstream {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind mock upstream");
        let port = listener.local_addr().expect("mock upstream address").port();
        let shared = Arc::new(Shared::default());
        let (tx, rx) = std::sync::mpsc::channel();
        let data = web::Data::from(Arc::clone(&shared));
        std::thread::Builder::new()
            .name(format!("mock-upstream-{port}"))
            .spawn(move || {
                actix_web::rt::System::new().block_on(async move {
                    let server = HttpServer::new(move || {
                        App::new()
                            .app_data(data.clone())
                            .app_data(web::PayloadConfig::new(BODY_LIMIT))
                            .default_service(web::to(handle))
                    })
                    .workers(2)
                    .disable_signals()
                    .shutdown_timeout(0)
                    // A client that goes away must end a stalled stream, not leave it half open.
                    .h1_allow_half_closed(false)
                    .listen(listener)
                    .expect("mock upstream listen")
                    .run();
                    let _ = tx.send(server.handle());
                    let _ = server.await;
                });
            })
            .expect("spawn mock upstream thread");
        let handle = rx.recv().expect("mock upstream started");
        MockUpstream { base: format!("http://127.0.0.1:{port}"), shared, handle }
    }

    /// The Azure paths accept this `api-key` only (any non-empty one until set).
    pub fn expect_azure_key(&self, key: &str) {
        *self.shared.azure_key.lock().unwrap_or_else(PoisonError::into_inner) = Some(key.to_owned());
    }

    /// The Bedrock paths accept only requests authenticated as `expect` says.
    pub fn expect_bedrock(&self, expect: bedrock::Expect) {
        *self.shared.bedrock.lock().unwrap_or_else(PoisonError::into_inner) = Some(expect);
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The most recent request; panics when there is none.
    pub fn last(&self) -> Recorded {
        self.requests().pop().expect("the mock upstream received no request")
    }

    /// How many requests were received.
    pub fn count(&self) -> usize {
        self.shared.requests.lock().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Streams whose client went away before the mock finished sending.
    pub fn cancelled_streams(&self) -> usize {
        self.shared.cancelled.load(Ordering::SeqCst)
    }

    /// Streams sent to the end.
    pub fn completed_streams(&self) -> usize {
        self.shared.completed.load(Ordering::SeqCst)
    }

    /// Streams the mock cut short on purpose (`disconnect_after`).
    pub fn aborted_streams(&self) -> usize {
        self.shared.aborted.load(Ordering::SeqCst)
    }
}

impl Drop for MockUpstream {
    fn drop(&mut self) {
        // `stop` sends the command eagerly; its future only waits for completion.
        drop(self.handle.stop(false));
    }
}

/// Token counts to report.
#[derive(Debug, Clone, Copy)]
struct Usage {
    input: u64,
    output: u64,
    cached: u64,
    reasoning: u64,
    cache_write_5m: u64,
    cache_write_1h: u64,
}

/// The parsed `"mock"` control object.
#[derive(Debug, Clone)]
struct Control {
    usage: Usage,
    no_usage: bool,
    status: Option<StatusCode>,
    delay_ms: u64,
    chunks: usize,
    chunk_delay_ms: u64,
    stall_after: Option<usize>,
    disconnect_after: Option<usize>,
    end_after: Option<usize>,
    error_after: Option<usize>,
    tool_calls: bool,
    echo_headers: bool,
    builtin_tools: Vec<String>,
    builtin_tools_repeat: usize,
    terminal: Option<String>,
}

impl Control {
    fn from_body(body: &Value) -> Control {
        let m = &body["mock"];
        let u = &m["usage"];
        let num = |v: &Value, default: u64| v.as_u64().unwrap_or(default);
        let count = |v: &Value| v.as_u64().and_then(|n| usize::try_from(n).ok());
        Control {
            usage: Usage {
                input: num(&u["input"], 10),
                output: num(&u["output"], 20),
                cached: num(&u["cached"], 0),
                reasoning: num(&u["reasoning"], 0),
                cache_write_5m: num(&u["cache_write_5m"], 0),
                cache_write_1h: num(&u["cache_write_1h"], 0),
            },
            no_usage: m["no_usage"].as_bool().unwrap_or(false),
            status: m["status"]
                .as_u64()
                .and_then(|s| u16::try_from(s).ok())
                .and_then(|s| StatusCode::from_u16(s).ok())
                .filter(|s| !s.is_success()),
            delay_ms: num(&m["delay_ms"], 0),
            chunks: count(&m["chunks"]).unwrap_or(3),
            chunk_delay_ms: num(&m["chunk_delay_ms"], 0),
            stall_after: count(&m["stall_after"]),
            disconnect_after: count(&m["disconnect_after"]),
            end_after: count(&m["end_after"]),
            error_after: count(&m["error_after"]),
            tool_calls: m["tool_calls"].as_bool().unwrap_or(false),
            echo_headers: m["echo_headers"].as_bool().unwrap_or(false),
            builtin_tools: m["builtin_tools"]
                .as_array()
                .map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_owned)).collect())
                .unwrap_or_default(),
            builtin_tools_repeat: count(&m["builtin_tools_repeat"]).unwrap_or(1),
            terminal: m["terminal"].as_str().map(str::to_owned),
        }
    }
}

impl Control {
    /// `"mock": {"honour_bound": true}`: output (and reasoning) tokens at most the
    /// output bound the request states (`max_completion_tokens`, `max_tokens`,
    /// `max_output_tokens`, `generationConfig.maxOutputTokens`), as a provider does.
    /// `"input_from_bytes": true`: the prompt's tokens are the body's byte count, the
    /// densest tokenization there can be.
    fn honour(&mut self, request: &Value, body_len: usize) {
        let m = &request["mock"];
        if m["honour_bound"].as_bool() == Some(true) {
            let bound = [
                &request["max_completion_tokens"],
                &request["max_tokens"],
                &request["max_output_tokens"],
                &request["generationConfig"]["maxOutputTokens"],
            ]
            .into_iter()
            .filter_map(Value::as_u64)
            .min();
            if let Some(bound) = bound {
                self.usage.output = self.usage.output.min(bound);
                self.usage.reasoning = self.usage.reasoning.min(self.usage.output);
            }
        }
        if m["input_from_bytes"].as_bool() == Some(true) {
            self.usage.input = u64::try_from(body_len).unwrap_or(u64::MAX);
        }
    }
}

/// What a request asked for, per route.
enum Route {
    OpenAi,
    Responses,
    Embeddings,
    Anthropic,
    /// Gemini: the model from the path, and whether the method streams.
    Gemini {
        model: String,
        stream: bool,
    },
}

fn route(req: &HttpRequest) -> Option<Route> {
    if req.method() != actix_web::http::Method::POST {
        return None;
    }
    // One base-path segment before the version (`/or/v1/...`) is ignored, for an
    // upstream configured with a base URL that has a path.
    let azure = azure::openai_path(req.path());
    let path = azure.as_deref().unwrap_or(req.path());
    let path = match path.get(1..).and_then(|p| p.split_once('/')) {
        Some((segment, rest))
            if segment.bytes().all(|b| b.is_ascii_lowercase()) && rest.starts_with("v1") =>
        {
            &path[segment.len() + 1..]
        }
        _ => path,
    };
    match path {
        "/v1/chat/completions" => Some(Route::OpenAi),
        "/v1/responses" => Some(Route::Responses),
        "/v1/embeddings" => Some(Route::Embeddings),
        "/v1/messages" => Some(Route::Anthropic),
        path => {
            // A client may percent-encode the method separator.
            let tail = path.strip_prefix("/v1beta/models/")?.replace("%3A", ":").replace("%3a", ":");
            let (model, method) = tail.rsplit_once(':')?;
            let stream = match method {
                "generateContent" => false,
                "streamGenerateContent" => true,
                _ => return None,
            };
            Some(Route::Gemini { model: model.to_owned(), stream })
        }
    }
}

/// The single service: records, then dispatches on the route.
async fn handle(req: HttpRequest, body: Bytes, shared: web::Data<Shared>) -> HttpResponse {
    let recorded = record(&req, &body);
    let headers = recorded.headers.clone();
    shared.requests.lock().unwrap_or_else(PoisonError::into_inner).push(recorded);

    if responses::is_bookkeeping(&req) {
        return responses::bookkeeping(&req);
    }
    if let Some((model, op)) = bedrock::route(req.path()) {
        let expect = shared.bedrock.lock().unwrap_or_else(PoisonError::into_inner).clone();
        if let Some(refused) = bedrock::refusal(&req, &body, expect.as_ref()) {
            return refused;
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let ctl = Control::from_body(&request);
        let model = model.replace("%3A", ":");
        let shared = shared.into_inner();
        return match op {
            "converse-stream" => {
                bedrock::stream_head().streaming(tracked_stream(bedrock::converse_events(&ctl), &ctl, shared))
            }
            "invoke-with-response-stream" => bedrock::stream_head().streaming(tracked_stream(
                bedrock::invoke_events(&ctl, &model),
                &ctl,
                shared,
            )),
            "invoke" if model.contains("anthropic.") => {
                HttpResponse::Ok().json(anthropic_message(&ctl, &model))
            }
            _ => bedrock::converse(&ctl),
        };
    }
    let azure_key = shared.azure_key.lock().unwrap_or_else(PoisonError::into_inner).clone();
    if let Some(refused) = azure::refusal(&req, azure_key.as_deref()) {
        return refused;
    }
    let Some(route) = route(&req) else {
        let message = format!("mock upstream: no route for {} {}", req.method(), req.path());
        return HttpResponse::NotFound()
            .json(json!({ "error": { "message": message, "type": "not_found" } }));
    };
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let mut ctl = Control::from_body(&request);
    ctl.honour(&request, body.len());
    if ctl.delay_ms > 0 {
        actix_web::rt::time::sleep(Duration::from_millis(ctl.delay_ms)).await;
    }
    let shared = shared.into_inner();
    // `answer_model`: the model the answer names (Azure names the deployment's model).
    let model = request["mock"]["answer_model"]
        .as_str()
        .or(request["model"].as_str())
        .unwrap_or("unknown-model")
        .to_owned();
    let streaming = request["stream"].as_bool().unwrap_or(false);
    match route {
        Route::OpenAi => match ctl.status {
            Some(status) => openai_error(status),
            None if streaming => {
                let include_usage = request["stream_options"]["include_usage"].as_bool().unwrap_or(false);
                let events = openai_events(&ctl, &model, include_usage);
                let mut resp = sse_response(StatusCode::OK);
                openai_headers(&mut resp);
                resp.streaming(tracked_stream(events, &ctl, shared))
            }
            None => {
                let mut resp = HttpResponse::Ok();
                openai_headers(&mut resp);
                resp.json(with_echo(openai_message(&ctl, &model), &ctl, &headers))
            }
        },
        Route::Responses => responses::create(&request, &ctl, &model, shared),
        Route::Embeddings => responses::embeddings(&request, &ctl, &model),
        Route::Anthropic => match ctl.status {
            Some(status) => anthropic_error(status),
            None if streaming => {
                let events = anthropic_events(&ctl, &model);
                let mut resp = sse_response(StatusCode::OK);
                anthropic_headers(&mut resp);
                resp.streaming(tracked_stream(events, &ctl, shared))
            }
            None => {
                let mut resp = HttpResponse::Ok();
                anthropic_headers(&mut resp);
                resp.json(with_echo(anthropic_message(&ctl, &model), &ctl, &headers))
            }
        },
        Route::Gemini { model, stream } => {
            let sse = req.query_string().split('&').any(|p| p == "alt=sse");
            match ctl.status {
                Some(status) => gemini_error(status),
                None if stream && sse => {
                    let events = gemini_chunks(&ctl, &model)
                        .iter()
                        .map(|c| Bytes::from(format!("data: {c}\r\n\r\n")))
                        .collect();
                    sse_response(StatusCode::OK).streaming(tracked_stream(events, &ctl, shared))
                }
                None if stream => HttpResponse::Ok().json(Value::Array(gemini_chunks(&ctl, &model))),
                None => HttpResponse::Ok().json(with_echo(gemini_message(&ctl, &model), &ctl, &headers)),
            }
        }
    }
}

fn record(req: &HttpRequest, body: &Bytes) -> Recorded {
    let mut headers: BTreeMap<String, String> = BTreeMap::new();
    for (name, value) in req.headers() {
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        headers
            .entry(name.as_str().to_ascii_lowercase())
            .and_modify(|v| {
                v.push_str(", ");
                v.push_str(&value);
            })
            .or_insert(value);
    }
    Recorded {
        method: req.method().to_string(),
        path: req.path().to_owned(),
        query: req.query_string().to_owned(),
        headers,
        body: body.to_vec(),
    }
}

/// Adds `"received_headers"` to a non-streaming answer when asked.
fn with_echo(mut body: Value, ctl: &Control, headers: &BTreeMap<String, String>) -> Value {
    if ctl.echo_headers {
        if let Value::Object(map) = &mut body {
            let echoed: Map<String, Value> =
                headers.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
            map.insert("received_headers".to_owned(), Value::Object(echoed));
        }
    }
    body
}

fn sse_response(status: StatusCode) -> HttpResponseBuilder {
    let mut resp = HttpResponse::build(status);
    resp.insert_header(("content-type", "text/event-stream")).insert_header(("cache-control", "no-cache"));
    resp
}

fn request_id() -> String {
    format!("req_{}", uuid::Uuid::new_v4().simple())
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Adds the 429 headers every provider sends.
fn rate_limit_headers(resp: &mut HttpResponseBuilder, status: StatusCode) {
    if status == StatusCode::TOO_MANY_REQUESTS {
        resp.insert_header(("retry-after", "7")).insert_header(("x-ratelimit-remaining-requests", "0"));
    }
}

fn error_message(status: StatusCode) -> String {
    format!("mock upstream: simulated {status}")
}

// ---------------------------------------------------------------------------------------
// OpenAI
// ---------------------------------------------------------------------------------------

fn openai_headers(resp: &mut HttpResponseBuilder) {
    resp.insert_header(("x-request-id", request_id()))
        .insert_header(("x-ratelimit-limit-requests", "10000"))
        .insert_header(("x-ratelimit-remaining-requests", "9999"));
}

fn openai_usage(u: &Usage) -> Value {
    json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input.saturating_add(u.output),
        "prompt_tokens_details": { "cached_tokens": u.cached },
        "completion_tokens_details": { "reasoning_tokens": u.reasoning },
    })
}

fn openai_tool_call() -> Value {
    json!({ "id": "call_1", "type": "function", "function": { "name": "get_weather", "arguments": "{}" } })
}

fn openai_message(ctl: &Control, model: &str) -> Value {
    let message = if ctl.tool_calls {
        json!({ "role": "assistant", "content": null, "tool_calls": [openai_tool_call()] })
    } else {
        json!({ "role": "assistant", "content": TEXT })
    };
    let finish = if ctl.tool_calls { "tool_calls" } else { "stop" };
    let mut body = json!({
        "id": format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()),
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "choices": [{ "index": 0, "message": message, "finish_reason": finish }],
    });
    if !ctl.no_usage {
        body["usage"] = openai_usage(&ctl.usage);
    }
    body
}

fn openai_events(ctl: &Control, model: &str, include_usage: bool) -> Vec<Bytes> {
    let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
    let created = unix_now();
    let usage_chunk = include_usage && !ctl.no_usage;
    let chunk = |choices: Value| {
        let mut c = json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": choices,
        });
        if usage_chunk {
            c["usage"] = Value::Null;
        }
        c
    };
    let delta =
        |delta: Value, finish: Value| chunk(json!([{ "index": 0, "delta": delta, "finish_reason": finish }]));

    let mut chunks = vec![delta(json!({ "role": "assistant", "content": "" }), Value::Null)];
    for _ in 0..ctl.chunks {
        chunks.push(delta(json!({ "content": CHUNK_TEXT }), Value::Null));
    }
    if ctl.tool_calls {
        chunks.push(delta(
            json!({ "tool_calls": [{ "index": 0, "id": "call_1", "type": "function",
                                     "function": { "name": "get_weather", "arguments": "" } }] }),
            Value::Null,
        ));
        chunks.push(delta(
            json!({ "tool_calls": [{ "index": 0, "function": { "arguments": "{}" } }] }),
            Value::Null,
        ));
    }
    let finish = if ctl.tool_calls { "tool_calls" } else { "stop" };
    chunks.push(delta(json!({}), json!(finish)));
    if usage_chunk {
        let mut c = chunk(json!([]));
        c["usage"] = openai_usage(&ctl.usage);
        chunks.push(c);
    }
    let mut events: Vec<Bytes> = chunks.iter().map(|c| Bytes::from(format!("data: {c}\n\n"))).collect();
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

fn openai_error(status: StatusCode) -> HttpResponse {
    let (kind, code) = match status.as_u16() {
        429 => ("rate_limit_error", json!("rate_limit_exceeded")),
        500.. => ("server_error", Value::Null),
        _ => ("invalid_request_error", Value::Null),
    };
    let mut resp = HttpResponse::build(status);
    resp.insert_header(("x-request-id", request_id()));
    rate_limit_headers(&mut resp, status);
    resp.json(json!({
        "error": { "message": error_message(status), "type": kind, "param": null, "code": code }
    }))
}

// ---------------------------------------------------------------------------------------
// Anthropic
// ---------------------------------------------------------------------------------------

fn anthropic_headers(resp: &mut HttpResponseBuilder) {
    resp.insert_header(("request-id", request_id()))
        .insert_header(("anthropic-ratelimit-requests-remaining", "999"));
}

/// The usage object; `output_tokens` is passed separately (it is 1 in `message_start`).
fn anthropic_usage(u: &Usage, output_tokens: u64) -> Value {
    json!({
        "input_tokens": u.input,
        "cache_creation_input_tokens": u.cache_write_5m.saturating_add(u.cache_write_1h),
        "cache_read_input_tokens": u.cached,
        "cache_creation": {
            "ephemeral_5m_input_tokens": u.cache_write_5m,
            "ephemeral_1h_input_tokens": u.cache_write_1h,
        },
        "output_tokens": output_tokens,
    })
}

fn anthropic_tool_use() -> Value {
    json!({ "type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {} })
}

fn anthropic_message(ctl: &Control, model: &str) -> Value {
    let mut content = vec![json!({ "type": "text", "text": TEXT })];
    if ctl.tool_calls {
        content.push(anthropic_tool_use());
    }
    let mut body = json!({
        "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": if ctl.tool_calls { "tool_use" } else { "end_turn" },
        "stop_sequence": null,
    });
    if !ctl.no_usage {
        body["usage"] = anthropic_usage(&ctl.usage, ctl.usage.output);
    }
    body
}

fn anthropic_events(ctl: &Control, model: &str) -> Vec<Bytes> {
    let mut message = json!({
        "id": format!("msg_{}", uuid::Uuid::new_v4().simple()),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
    });
    if !ctl.no_usage {
        message["usage"] = anthropic_usage(&ctl.usage, 1);
    }
    let mut events = vec![
        json!({ "type": "message_start", "message": message }),
        json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
        json!({ "type": "ping" }),
    ];
    for _ in 0..ctl.chunks {
        events.push(json!({
            "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": CHUNK_TEXT }
        }));
    }
    events.push(json!({ "type": "content_block_stop", "index": 0 }));
    if ctl.tool_calls {
        events.push(
            json!({ "type": "content_block_start", "index": 1, "content_block": anthropic_tool_use() }),
        );
        events.push(json!({
            "type": "content_block_delta",
            "index": 1,
            "delta": { "type": "input_json_delta", "partial_json": "{}" },
        }));
        events.push(json!({ "type": "content_block_stop", "index": 1 }));
    }
    let stop_reason = if ctl.tool_calls { "tool_use" } else { "end_turn" };
    let mut message_delta = json!({
        "type": "message_delta",
        "delta": { "stop_reason": stop_reason, "stop_sequence": null },
    });
    if !ctl.no_usage {
        message_delta["usage"] = json!({ "output_tokens": ctl.usage.output });
    }
    events.push(message_delta);
    events.push(json!({ "type": "message_stop" }));
    events
        .iter()
        .map(|e| {
            let name = e["type"].as_str().unwrap_or_default();
            Bytes::from(format!("event: {name}\ndata: {e}\n\n"))
        })
        .collect()
}

fn anthropic_error(status: StatusCode) -> HttpResponse {
    let kind = match status.as_u16() {
        429 => "rate_limit_error",
        500.. => "api_error",
        _ => "invalid_request_error",
    };
    let mut resp = HttpResponse::build(status);
    resp.insert_header(("request-id", request_id()));
    rate_limit_headers(&mut resp, status);
    resp.json(json!({ "type": "error", "error": { "type": kind, "message": error_message(status) } }))
}

// ---------------------------------------------------------------------------------------
// Gemini
// ---------------------------------------------------------------------------------------

/// `usageMetadata` with `candidates` output tokens so far; `last` adds the thoughts.
fn gemini_usage(u: &Usage, candidates: u64, last: bool) -> Value {
    let thoughts = if last { u.reasoning } else { 0 };
    let mut usage = json!({
        "promptTokenCount": u.input,
        "candidatesTokenCount": candidates,
        "totalTokenCount": u.input.saturating_add(candidates).saturating_add(thoughts),
    });
    if u.cached > 0 {
        usage["cachedContentTokenCount"] = json!(u.cached);
    }
    if thoughts > 0 {
        usage["thoughtsTokenCount"] = json!(thoughts);
    }
    usage
}

fn gemini_function_call() -> Value {
    json!({ "functionCall": { "name": "get_weather", "args": {} } })
}

fn gemini_message(ctl: &Control, model: &str) -> Value {
    let part = if ctl.tool_calls { gemini_function_call() } else { json!({ "text": TEXT }) };
    let mut body = json!({
        "candidates": [{
            "content": { "parts": [part], "role": "model" },
            "finishReason": "STOP",
            "index": 0,
        }],
        "modelVersion": model,
        "responseId": uuid::Uuid::new_v4().simple().to_string(),
    });
    if !ctl.no_usage {
        body["usageMetadata"] = gemini_usage(&ctl.usage, ctl.usage.output, true);
    }
    body
}

/// The `GenerateContentResponse` chunks of a streamed answer (at least one).
fn gemini_chunks(ctl: &Control, model: &str) -> Vec<Value> {
    let response_id = uuid::Uuid::new_v4().simple().to_string();
    let n = ctl.chunks.max(1);
    let total = u64::try_from(n).unwrap_or(u64::MAX);
    (1..=total)
        .map(|i| {
            let last = i == total;
            let part =
                if last && ctl.tool_calls { gemini_function_call() } else { json!({ "text": CHUNK_TEXT }) };
            let mut candidate = json!({ "content": { "parts": [part], "role": "model" }, "index": 0 });
            if last {
                candidate["finishReason"] = json!("STOP");
            }
            let mut chunk =
                json!({ "candidates": [candidate], "modelVersion": model, "responseId": response_id });
            if !ctl.no_usage {
                // Grows with each chunk and is exactly `output` on the last one.
                let so_far = if last { ctl.usage.output } else { ctl.usage.output.saturating_mul(i) / total };
                chunk["usageMetadata"] = gemini_usage(&ctl.usage, so_far, last);
            }
            chunk
        })
        .collect()
}

fn gemini_error(status: StatusCode) -> HttpResponse {
    let kind = match status.as_u16() {
        429 => "RESOURCE_EXHAUSTED",
        500.. => "INTERNAL",
        _ => "INVALID_ARGUMENT",
    };
    let mut resp = HttpResponse::build(status);
    rate_limit_headers(&mut resp, status);
    resp.json(json!({
        "error": { "code": status.as_u16(), "message": error_message(status), "status": kind }
    }))
}

// ---------------------------------------------------------------------------------------
// Streams
// ---------------------------------------------------------------------------------------

/// A body stream of `events` paced and cut as `ctl` says, counted in `shared`.
fn tracked_stream(mut events: Vec<Bytes>, ctl: &Control, shared: Arc<Shared>) -> Tracked {
    if let Some(n) = ctl.end_after {
        events.truncate(n);
    }
    if let Some(n) = ctl.error_after {
        events.truncate(n);
        events.push(Bytes::from_static(
            b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
        ));
    }
    struct Plan {
        events: VecDeque<Bytes>,
        sent: usize,
        delay: Duration,
        stall_after: Option<usize>,
        disconnect_after: Option<usize>,
    }
    let plan = Plan {
        events: events.into(),
        sent: 0,
        delay: Duration::from_millis(ctl.chunk_delay_ms),
        stall_after: ctl.stall_after,
        disconnect_after: ctl.disconnect_after,
    };
    let inner = futures_util::stream::unfold(plan, |mut plan| async move {
        if plan.stall_after == Some(plan.sent) {
            std::future::pending::<()>().await;
        }
        if plan.disconnect_after == Some(plan.sent) {
            // Pending once makes actix flush what it has (head and events so far) to the
            // socket; failing straight away would drop them with the connection.
            actix_web::rt::task::yield_now().await;
            plan.disconnect_after = None;
            plan.events.clear();
            return Some((Err(std::io::Error::other("mock upstream: disconnect_after")), plan));
        }
        let event = plan.events.pop_front()?;
        if plan.sent > 0 && !plan.delay.is_zero() {
            actix_web::rt::time::sleep(plan.delay).await;
        }
        plan.sent += 1;
        Some((Ok(event), plan))
    });
    Tracked { inner: inner.boxed_local(), done: false, shared }
}

/// Counts how a body stream ended: to the end, cut by the mock, or dropped unfinished
/// (the client went away).
struct Tracked {
    inner: LocalBoxStream<'static, Result<Bytes, std::io::Error>>,
    done: bool,
    shared: Arc<Shared>,
}

impl Stream for Tracked {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let item = self.inner.poll_next_unpin(cx);
        if !self.done {
            match &item {
                Poll::Ready(None) => {
                    self.done = true;
                    self.shared.completed.fetch_add(1, Ordering::SeqCst);
                }
                Poll::Ready(Some(Err(_))) => {
                    self.done = true;
                    self.shared.aborted.fetch_add(1, Ordering::SeqCst);
                }
                _ => {}
            }
        }
        item
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        if !self.done {
            self.shared.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}
