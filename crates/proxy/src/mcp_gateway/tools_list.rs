//! `tools/list` through the gateway: the server's answer (JSON or SSE) is read and its
//! tools registered in tool costs as `POST /api/tool-costs/discover` registers them
//! (`serverName` = the server's name; description and annotations stored, `lastSeenAt`
//! updated), except that a tool's cost is never changed by being listed: a new tool
//! starts at 0 (`discovered`), a priced one keeps its price. The answer goes back as
//! the server sent it, less the tools outside the key's `allowedTools`.

use actix_web::{HttpRequest, HttpResponse};
use bytes::Bytes;
use serde_json::Value;

use super::{forward, Opened};
use spendgate_engine::db::models::ToolCost;
use spendgate_engine::db::{self};
use spendgate_engine::error::{ApiError, ErrorCode, Issues};
use spendgate_engine::mcp_servers::tool_allowed;
use spendgate_engine::state::AppState;
use spendgate_engine::tool_costs::check_tool_name;
use spendgate_engine::util::{ids, time};

/// Largest `tools/list` answer read: 16 MiB.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;
/// Longest description stored (as discovery's rule).
const MAX_DESCRIPTION_CHARS: usize = 2000;

/// Whether `message` is a `tools/list` request.
pub fn is_tools_list(message: &Value) -> bool {
    message.get("method").and_then(Value::as_str) == Some("tools/list")
        && message.get("id").is_some_and(|id| !id.is_null())
}

/// Forwards, registers what the answer lists, and answers as the server did.
pub async fn handle(
    req: &HttpRequest,
    state: &AppState,
    opened: &Opened,
    body: Bytes,
) -> Result<HttpResponse, ApiError> {
    let mut response = forward::send(req, state, opened, Some(body)).await?;
    let answer =
        response.body().limit(MAX_ANSWER_BYTES).await.map_err(|e| {
            ApiError::new(ErrorCode::UpstreamError, format!("MCP server answer unreadable: {e}"))
        })?;
    let mut head = forward::head(&response, opened);
    if !response.status().is_success() {
        return Ok(head.body(answer));
    }
    let tools = listed_tools(&answer);
    if !tools.is_empty() {
        register(state, opened, tools).await;
    }
    let Some(allowed) = opened.key.allowed_tools.as_deref() else {
        return Ok(head.body(answer));
    };
    let server = opened.server.name.as_str();
    let keep = |tool: &Value| {
        tool.get("name").and_then(Value::as_str).is_some_and(|t| tool_allowed(Some(allowed), server, t))
    };
    Ok(head.body(filtered(&answer, keep)))
}

/// The answer with only the tools `keep` keeps (a JSON answer, or the SSE event that
/// carries the result; other events unchanged).
pub fn filtered(answer: &[u8], keep: impl Fn(&Value) -> bool) -> Vec<u8> {
    let filter = |v: &mut Value| -> bool {
        match v.pointer_mut("/result/tools").and_then(Value::as_array_mut) {
            Some(tools) => {
                tools.retain(&keep);
                true
            }
            None => false,
        }
    };
    if let Ok(mut v) = serde_json::from_slice::<Value>(answer) {
        filter(&mut v);
        return v.to_string().into_bytes();
    }
    let text = String::from_utf8_lossy(answer).replace("\r\n", "\n");
    let events: Vec<String> = text
        .split("\n\n")
        .map(|event| {
            let data: Vec<&str> = event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(|d| d.strip_prefix(' ').unwrap_or(d))
                .collect();
            let Ok(mut v) = serde_json::from_str::<Value>(&data.join("\n")) else {
                return event.to_owned();
            };
            if !filter(&mut v) {
                return event.to_owned();
            }
            let mut kept: Vec<String> =
                event.lines().filter(|l| !l.starts_with("data:")).map(str::to_owned).collect();
            kept.push(format!("data: {v}"));
            kept.join("\n")
        })
        .collect();
    events.join("\n\n").into_bytes()
}

/// The tools of a `tools/list` result, from a JSON answer or the SSE events of one.
pub fn listed_tools(answer: &[u8]) -> Vec<Value> {
    let of = |v: &Value| v.pointer("/result/tools").and_then(Value::as_array).cloned();
    if let Ok(v) = serde_json::from_slice::<Value>(answer) {
        return of(&v).unwrap_or_default();
    }
    let text = String::from_utf8_lossy(answer).replace("\r\n", "\n");
    for event in text.split("\n\n") {
        let data: Vec<&str> = event
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| d.strip_prefix(' ').unwrap_or(d))
            .collect();
        if let Some(tools) = serde_json::from_str::<Value>(&data.join("\n")).ok().as_ref().and_then(of) {
            return tools;
        }
    }
    Vec::new()
}

/// Registers the tools; a failure is logged, never the agent's problem.
async fn register(state: &AppState, opened: &Opened, tools: Vec<Value>) {
    let now = time::now_ms();
    let rows: Vec<ToolCost> = tools.iter().filter_map(|t| row_of(opened, t, now)).collect();
    let names: Vec<String> = rows.iter().map(|r| r.tool_name.clone()).collect();
    match db::tool_costs::register_seen(&state.pool, rows, state.config.max_tool_costs).await {
        Ok(Some(_)) => {}
        Ok(None) => {
            tracing::warn!(server = %opened.server.name, "tools not registered: the organization's tool limit")
        }
        Err(e) => tracing::warn!(error = %e, server = %opened.server.name, "tools not registered"),
    }
    for tool in &names {
        state.tool_costs.invalidate(&opened.key.org_id, &opened.server.name, tool);
    }
}

fn row_of(opened: &Opened, tool: &Value, now: i64) -> Option<ToolCost> {
    let name = tool.get("name")?.as_str()?;
    let mut issues = Issues::new();
    check_tool_name(name, &["name"], &mut issues);
    if !issues.is_empty() {
        return None;
    }
    let description = tool
        .get("description")
        .and_then(Value::as_str)
        .map(|d| d.chars().take(MAX_DESCRIPTION_CHARS).collect::<String>());
    let annotations = tool.get("annotations").filter(|a| a.is_object()).map(Value::to_string);
    Some(ToolCost {
        id: ids::new_id(),
        org_id: opened.key.org_id.clone(),
        user_id: opened.key.user_id.clone(),
        server_name: opened.server.name.clone(),
        tool_name: name.to_owned(),
        cost_microdollars: 0,
        suggested_cost: None,
        source: db::tool_costs::DISCOVERED.to_owned(),
        description,
        annotations: annotations.filter(|a| a.len() <= 16 * 1024),
        last_seen_at: Some(now),
        created_at: now,
        updated_at: now,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tools_are_read_from_json_and_sse_answers() {
        let result = json!({ "jsonrpc": "2.0", "id": 2, "result": { "tools": [{ "name": "search" }] } });
        assert_eq!(listed_tools(result.to_string().as_bytes()), vec![json!({ "name": "search" })]);
        let sse = format!("event: message\r\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/x\"}}\r\n\r\nevent: message\r\ndata: {result}\r\n\r\n");
        assert_eq!(listed_tools(sse.as_bytes()), vec![json!({ "name": "search" })]);
        assert!(listed_tools(b"not json").is_empty());
    }

    #[test]
    fn answers_keep_only_the_kept_tools() {
        let result =
            json!({ "jsonrpc": "2.0", "id": 2, "result": { "tools": [{ "name": "a" }, { "name": "b" }] } });
        let keep = |t: &Value| t["name"] == "b";
        let json_answer: Value =
            serde_json::from_slice(&filtered(result.to_string().as_bytes(), keep)).unwrap();
        assert_eq!(json_answer["result"]["tools"], json!([{ "name": "b" }]));
        let sse = format!("event: message\r\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"n\"}}\r\n\r\nevent: message\r\nid: 7\r\ndata: {result}\r\n\r\n");
        let out = String::from_utf8(filtered(sse.as_bytes(), keep)).unwrap();
        assert!(out.starts_with("event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"n\"}\n\nevent: message\nid: 7\ndata: "), "{out}");
        assert_eq!(listed_tools(out.as_bytes()), vec![json!({ "name": "b" })]);
    }
}
