//! The mock's OpenAI Responses API and embeddings, in the shapes the real API answers
//! with (and the official SDKs parse): a `response` object, or its typed event stream
//! (`event: response.created` ... `response.completed`), with built-in tool items, a
//! truncated (`response.incomplete`) or failed (`response.failed`) end, and background
//! answers (`status: queued`, no usage). The bookkeeping endpoints
//! (`GET /v1/responses/{id}` and siblings) answer a small JSON naming what was asked.

use actix_web::http::StatusCode;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse};
use serde_json::{json, Value};

use super::{
    openai_error, openai_headers, sse_response, tracked_stream, unix_now, Control, Shared, Usage, TEXT,
};

/// The usage object of a Responses answer.
fn usage(u: &Usage) -> Value {
    json!({
        "input_tokens": u.input,
        "input_tokens_details": { "cached_tokens": u.cached },
        "output_tokens": u.output,
        "output_tokens_details": { "reasoning_tokens": u.reasoning },
        "total_tokens": u.input.saturating_add(u.output),
    })
}

/// One completed built-in tool item of type `kind`, numbered `n`.
fn builtin_item(kind: &str, n: usize) -> Value {
    let mut item = json!({ "type": kind, "id": format!("{}_{n}", &kind[..2]), "status": "completed" });
    match kind {
        "web_search_call" => item["action"] = json!({ "type": "search", "query": "weather" }),
        "file_search_call" => {
            item["queries"] = json!(["weather"]);
            item["results"] = Value::Null;
        }
        "code_interpreter_call" => {
            item["code"] = json!("print(1)");
            item["container_id"] = json!("cntr_1");
            item["outputs"] = Value::Null;
        }
        _ => {}
    }
    item
}

fn message_item(text: &str) -> Value {
    json!({
        "type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
        "content": [{ "type": "output_text", "text": text, "annotations": [] }],
    })
}

fn function_call_item() -> Value {
    json!({ "type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
            "arguments": "{}", "status": "completed" })
}

/// The output items of an answer, in order.
fn output(ctl: &Control, text: &str) -> Vec<Value> {
    let n = ctl.builtin_tools.len() * ctl.builtin_tools_repeat;
    let mut items: Vec<Value> =
        ctl.builtin_tools.iter().cycle().take(n).enumerate().map(|(n, k)| builtin_item(k, n)).collect();
    if ctl.tool_calls {
        items.push(function_call_item());
    } else {
        items.push(message_item(text));
    }
    items
}

/// A `response` object with `status`, `output` and (unless `no_usage`) usage.
fn response(
    id: &str,
    model: &str,
    request: &Value,
    status: &str,
    output: Vec<Value>,
    usage: Option<Value>,
) -> Value {
    json!({
        "id": id, "object": "response", "created_at": unix_now(), "status": status,
        "background": request["background"].as_bool().unwrap_or(false),
        "error": null, "incomplete_details": null, "instructions": null,
        "max_output_tokens": request["max_output_tokens"], "model": model, "output": output,
        "parallel_tool_calls": true, "previous_response_id": null,
        "reasoning": { "effort": null, "summary": null }, "store": true, "temperature": 1.0,
        "text": { "format": { "type": "text" } }, "tool_choice": "auto", "tools": [], "top_p": 1.0,
        "truncation": "disabled", "usage": usage, "user": null, "metadata": {},
    })
}

fn new_id() -> String {
    format!("resp_{}", uuid::Uuid::new_v4().simple())
}

/// `POST /v1/responses`.
pub(super) fn create(
    request: &Value,
    ctl: &Control,
    model: &str,
    shared: std::sync::Arc<Shared>,
) -> HttpResponse {
    if let Some(status) = ctl.status {
        return openai_error(status);
    }
    let id = new_id();
    if request["background"].as_bool().unwrap_or(false) {
        let mut resp = HttpResponse::Ok();
        openai_headers(&mut resp);
        return resp.json(response(&id, model, request, "queued", Vec::new(), None));
    }
    if request["stream"].as_bool().unwrap_or(false) {
        let mut resp = sse_response(StatusCode::OK);
        openai_headers(&mut resp);
        return resp.streaming(tracked_stream(events(request, ctl, model, &id), ctl, shared));
    }
    let u = (!ctl.no_usage).then(|| usage(&ctl.usage));
    let mut resp = HttpResponse::Ok();
    openai_headers(&mut resp);
    resp.json(response(&id, model, request, "completed", output(ctl, TEXT), u))
}

/// The typed event stream of one answer; `ctl.terminal` picks its last event.
fn events(request: &Value, ctl: &Control, model: &str, id: &str) -> Vec<Bytes> {
    let mut out: Vec<(String, Value)> = Vec::new();
    let start = response(id, model, request, "in_progress", Vec::new(), None);
    out.push(("response.created".into(), json!({ "response": start.clone() })));
    out.push(("response.in_progress".into(), json!({ "response": start })));
    let items = output(ctl, &super::CHUNK_TEXT.repeat(ctl.chunks));
    for (index, item) in items.iter().enumerate() {
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        if item["type"] == "message" {
            added["content"] = json!([]);
        }
        out.push(("response.output_item.added".into(), json!({ "output_index": index, "item": added })));
        if item["type"] == "message" {
            let part = json!({ "type": "output_text", "text": "", "annotations": [] });
            out.push((
                "response.content_part.added".into(),
                json!({ "item_id": "msg_1", "output_index": index, "content_index": 0, "part": part }),
            ));
            for _ in 0..ctl.chunks {
                out.push((
                    "response.output_text.delta".into(),
                    json!({ "item_id": "msg_1", "output_index": index,
                    "content_index": 0, "delta": super::CHUNK_TEXT, "logprobs": [] }),
                ));
            }
            let text = item["content"][0]["text"].clone();
            out.push((
                "response.output_text.done".into(),
                json!({ "item_id": "msg_1", "output_index": index,
                "content_index": 0, "text": text, "logprobs": [] }),
            ));
            out.push((
                "response.content_part.done".into(),
                json!({ "item_id": "msg_1", "output_index": index,
                "content_index": 0, "part": item["content"][0] }),
            ));
        }
        out.push(("response.output_item.done".into(), json!({ "output_index": index, "item": item })));
    }
    let u = (!ctl.no_usage).then(|| usage(&ctl.usage));
    let terminal = ctl.terminal.as_deref().unwrap_or("completed");
    let (kind, status) = match terminal {
        "incomplete" => ("response.incomplete", "incomplete"),
        "failed" => ("response.failed", "failed"),
        _ => ("response.completed", "completed"),
    };
    let mut last = response(id, model, request, status, items, u);
    if terminal == "incomplete" {
        last["incomplete_details"] = json!({ "reason": "max_output_tokens" });
    }
    if terminal == "failed" {
        last["error"] = json!({ "code": "server_error", "message": "mock upstream: failed" });
    }
    out.push((kind.into(), json!({ "response": last })));
    out.into_iter()
        .enumerate()
        .map(|(n, (kind, mut data))| {
            data["type"] = json!(kind);
            data["sequence_number"] = json!(n);
            Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
        })
        .collect()
}

/// `POST /v1/embeddings`: one three-float vector per input.
pub(super) fn embeddings(request: &Value, ctl: &Control, model: &str) -> HttpResponse {
    if let Some(status) = ctl.status {
        return openai_error(status);
    }
    let inputs = request["input"].as_array().map_or(1, Vec::len);
    let data: Vec<Value> = (0..inputs)
        .map(|i| json!({ "object": "embedding", "index": i, "embedding": [0.1, 0.2, 0.3] }))
        .collect();
    let mut body = json!({ "object": "list", "data": data, "model": model });
    if !ctl.no_usage {
        body["usage"] = json!({ "prompt_tokens": ctl.usage.input, "total_tokens": ctl.usage.input });
    }
    let mut resp = HttpResponse::Ok();
    openai_headers(&mut resp);
    resp.json(body)
}

/// Whether `req` is one of the Responses bookkeeping endpoints.
pub(super) fn is_bookkeeping(req: &HttpRequest) -> bool {
    use actix_web::http::Method;
    let Some(rest) = req.path().strip_prefix("/v1/responses/") else { return false };
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(
        (req.method().clone(), parts.as_slice()),
        (Method::POST, ["input_tokens"] | [_, "cancel"])
            | (Method::GET | Method::DELETE, [_])
            | (Method::GET, [_, "input_items"])
    )
}

/// A bookkeeping endpoint's answer: what was asked, so a test can check it.
pub(super) fn bookkeeping(req: &HttpRequest) -> HttpResponse {
    let mut resp = HttpResponse::Ok();
    openai_headers(&mut resp);
    resp.json(json!({
        "object": "mock.bookkeeping", "method": req.method().as_str(), "path": req.path(),
        "query": req.query_string(),
    }))
}
