//! The mock's Amazon Bedrock runtime face: `POST /model/{modelId}/converse` (the
//! Converse API's JSON) and `/invoke` (Anthropic's message for a Claude model, the
//! Converse-shaped answer of Amazon Nova), and their streams `/converse-stream` and
//! `/invoke-with-response-stream`: AWS event streams framed with
//! `aws-smithy-eventstream` (Converse's events ending with `metadata`; InvokeModel's
//! `chunk` events carrying the model's events in base64, the last one with
//! `amazon-bedrock-invocationMetrics`), one frame per event, cut by the usual
//! `disconnect_after` / `end_after` controls. Each request must be signed with SigV4 by
//! the credential set with `MockUpstream::expect_bedrock` (the signature recomputed
//! with the `aws-sigv4` crate over the method, URL, `content-type` and body as
//! received, at the request's `x-amz-date`), or carry its Bedrock API key as a bearer
//! token; otherwise Bedrock's own 403.

use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::Control;

/// How the mock's Bedrock expects to be called.
#[derive(Debug, Clone)]
pub enum Expect {
    SigV4 { access_key_id: String, secret_access_key: String, session_token: Option<String>, region: String },
    ApiKey(String),
}

/// The model id and operation of a Bedrock path (`None` for any other path).
pub(super) fn route(path: &str) -> Option<(String, &'static str)> {
    let rest = path.strip_prefix("/model/")?;
    let (model, op) = rest.rsplit_once('/')?;
    let op = match op {
        "converse" => "converse",
        "converse-stream" => "converse-stream",
        "invoke" => "invoke",
        "invoke-with-response-stream" => "invoke-with-response-stream",
        _ => return None,
    };
    Some((model.to_owned(), op))
}

/// Bedrock's refusal of a request not authenticated as `expect` requires.
pub(super) fn refusal(req: &HttpRequest, body: &Bytes, expect: Option<&Expect>) -> Option<HttpResponse> {
    let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
    match expect? {
        Expect::ApiKey(key) => (auth != format!("Bearer {key}")).then(|| {
            error("UnrecognizedClientException", "The security token included in the request is invalid.")
        }),
        Expect::SigV4 { access_key_id, secret_access_key, session_token, region } => {
            let token = req.headers().get("x-amz-security-token").and_then(|v| v.to_str().ok());
            let expected =
                expected_signature(req, body, access_key_id, secret_access_key, session_token, region);
            (token != session_token.as_deref() || expected.as_deref() != Some(auth)).then(|| {
                error(
                    "InvalidSignatureException",
                    "The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details.",
                )
            })
        }
    }
}

/// The `Authorization` value the credential gives this request, signed at its
/// `x-amz-date`.
fn expected_signature(
    req: &HttpRequest,
    body: &Bytes,
    access_key_id: &str,
    secret_access_key: &str,
    session_token: &Option<String>,
    region: &str,
) -> Option<String> {
    use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
    let date = req.headers().get("x-amz-date")?.to_str().ok()?;
    let time = chrono::NaiveDateTime::parse_from_str(date, "%Y%m%dT%H%M%SZ").ok()?.and_utc();
    let host = req.headers().get("host")?.to_str().ok()?;
    let url = format!("http://{host}{}", req.uri().path_and_query().map_or("/", |p| p.as_str()));
    let content_type = req.headers().get("content-type")?.to_str().ok()?;
    let identity = aws_credential_types::Credentials::new(
        access_key_id,
        secret_access_key,
        session_token.clone(),
        None,
        "mock",
    )
    .into();
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(region)
        .name("bedrock")
        .time(time.into())
        .settings(SigningSettings::default())
        .build()
        .ok()?
        .into();
    let headers = [("content-type", content_type)];
    let request = SignableRequest::new("POST", url, headers.into_iter(), SignableBody::Bytes(body)).ok()?;
    let (instructions, _) = sign(request, &params).ok()?.into_parts();
    let found = instructions
        .headers()
        .find(|(n, _)| n.eq_ignore_ascii_case("authorization"))
        .map(|(_, v)| v.to_owned());
    found
}

fn error(kind: &str, message: &str) -> HttpResponse {
    HttpResponse::build(StatusCode::FORBIDDEN)
        .insert_header((
            "x-amzn-errortype",
            format!("{kind}:http://internal.amazon.com/coral/com.amazon.coral.service/"),
        ))
        .insert_header(("x-amzn-requestid", "mock-bedrock-request-1"))
        .json(json!({ "message": message }))
}

/// A Converse answer (Amazon Nova's InvokeModel answer has the same shape).
pub(super) fn converse(ctl: &Control) -> HttpResponse {
    let u = &ctl.usage;
    // As Anthropic's: `inputTokens` leaves the cache reads and writes out.
    let total = u.input + u.cached + u.cache_write_5m + u.output;
    let mut usage = json!({ "inputTokens": u.input, "outputTokens": u.output, "totalTokens": total });
    if u.cached > 0 {
        usage["cacheReadInputTokens"] = json!(u.cached);
    }
    if u.cache_write_5m > 0 {
        usage["cacheWriteInputTokens"] = json!(u.cache_write_5m);
    }
    let answer: Value = json!({
        "output": { "message": { "role": "assistant", "content": [{ "text": "Hello from mock" }] } },
        "stopReason": "end_turn",
        "usage": usage,
        "metrics": { "latencyMs": 12 },
    });
    HttpResponse::Ok().insert_header(("x-amzn-requestid", "mock-bedrock-request-1")).json(answer)
}

/// One event-stream frame.
fn frame(event: &str, payload: &Value) -> Bytes {
    use aws_smithy_types::event_stream::{Header, HeaderValue, Message};
    let message = Message::new(payload.to_string().into_bytes())
        .add_header(Header::new(":message-type", HeaderValue::String("event".into())))
        .add_header(Header::new(":event-type", HeaderValue::String(event.to_owned().into())))
        .add_header(Header::new(":content-type", HeaderValue::String("application/json".into())));
    let mut out = Vec::new();
    aws_smithy_eventstream::frame::write_message_to(&message, &mut out).expect("encode a frame");
    Bytes::from(out)
}

/// ConverseStream's events: messageStart, the deltas, contentBlockStop, messageStop,
/// metadata (the usage).
pub(super) fn converse_events(ctl: &Control) -> Vec<Bytes> {
    let u = &ctl.usage;
    let mut events = vec![frame("messageStart", &json!({ "role": "assistant" }))];
    for _ in 0..ctl.chunks {
        events
            .push(frame("contentBlockDelta", &json!({ "contentBlockIndex": 0, "delta": { "text": "tok" } })));
    }
    events.push(frame("contentBlockStop", &json!({ "contentBlockIndex": 0 })));
    events.push(frame("messageStop", &json!({ "stopReason": "end_turn" })));
    let usage = json!({ "inputTokens": u.input, "outputTokens": u.output, "totalTokens": u.input + u.output,
        "cacheReadInputTokens": u.cached, "cacheWriteInputTokens": u.cache_write_5m });
    events.push(frame("metadata", &json!({ "usage": usage, "metrics": { "latencyMs": 12 } })));
    events
}

/// InvokeModelWithResponseStream's events for a Claude model: Anthropic's events, each
/// in a `chunk`, the last with the invocation metrics.
pub(super) fn invoke_events(ctl: &Control, model: &str) -> Vec<Bytes> {
    use base64::Engine as _;
    let u = &ctl.usage;
    let mut inner = vec![json!({ "type": "message_start", "message": { "id": "msg_mock", "type": "message",
        "role": "assistant", "model": model, "content": [], "usage": { "input_tokens": u.input, "output_tokens": 1 } } })];
    for _ in 0..ctl.chunks {
        inner.push(json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": "tok" } }));
    }
    inner.push(json!({ "type": "message_delta", "delta": { "stop_reason": "end_turn" }, "usage": { "output_tokens": u.output } }));
    inner.push(json!({ "type": "message_stop", "amazon-bedrock-invocationMetrics": {
        "inputTokenCount": u.input, "outputTokenCount": u.output, "invocationLatency": 20, "firstByteLatency": 5 } }));
    inner
        .iter()
        .map(|e| {
            let bytes = base64::engine::general_purpose::STANDARD.encode(e.to_string());
            frame("chunk", &json!({ "bytes": bytes }))
        })
        .collect()
}

/// The head of a streamed answer.
pub(super) fn stream_head() -> actix_web::HttpResponseBuilder {
    let mut resp = HttpResponse::Ok();
    resp.insert_header(("content-type", "application/vnd.amazon.eventstream"))
        .insert_header(("x-amzn-requestid", "mock-bedrock-request-1"));
    resp
}
