//! `tools/call` through the gateway, in this order: the key and its rate limits (already
//! checked by the gateway); the tool allowed by the key's `allowedTools` (otherwise a
//! JSON-RPC error naming the tool, nothing forwarded); the tool's cost from tool costs (a tool the organization has
//! not priced: 0, tagged `_svc_unpriced_tool`); a reservation of that cost on every
//! budget the call counts against (key, user, tags, customer, session: the provider
//! routes' `X-Service-*` headers), all or nothing, exactly as `/v1/mcp/events`; the
//! call forwarded; its tool event recorded through the durable writer and the
//! reservation settled.
//!
//! A call counts as made when the server answered it (HTTP 2xx, even a result with
//! `isError`); without an answer the reservation is released and nothing is charged.
//! A refused call is answered with a tool *result* `isError: true` naming the budget,
//! its spend and its limit, with `_meta["spendgate/denial"]`; it leaves a denial
//! record and nothing is forwarded.

use std::sync::Arc;
use std::time::Instant;

use actix_web::{HttpRequest, HttpResponse};
use actors::budget::Reserve;
use bytes::Bytes;
use serde_json::{json, Value};

use super::{forward, Opened};
use crate::admitted::call_of;
use crate::denial::{dollars, Refused};
use crate::mcp::{context, UNPRICED_TOOL_TAG};
use crate::reservation::{Ask, Reservation};
use spendgate_engine::accounting::event::{self, Dedup, EventSpec};
use spendgate_engine::accounting::targets::entity_keys;
use spendgate_engine::db::cost_events::Outcome;
use spendgate_engine::error::ApiError;
use spendgate_engine::mcp_servers::tool_allowed;
use spendgate_engine::state::AppState;
use spendgate_engine::util::time;

const PROVIDER: &str = "mcp";
/// Largest answer of a governed call read back: 16 MiB.
const MAX_ANSWER_BYTES: usize = 16 * 1024 * 1024;

/// A `tools/call` request (a notification is not a call).
pub struct ToolCall {
    pub id: Value,
    pub name: String,
}

impl ToolCall {
    pub fn of(message: &Value) -> Option<ToolCall> {
        if message.get("method")?.as_str()? != "tools/call" {
            return None;
        }
        let id = message.get("id").filter(|id| !id.is_null())?.clone();
        let name = message.get("params")?.get("name")?.as_str()?.to_owned();
        Some(ToolCall { id, name })
    }
}

/// What the call is charged and where.
struct Charge {
    cost: i64,
    tags: std::collections::BTreeMap<String, String>,
    customer: Option<String>,
    session: Option<String>,
    trace_id: String,
    request_id: String,
}

/// `None` when the tool has no cost and the organization's `unpricedTools` is `block`.
async fn charge_of(
    req: &HttpRequest,
    state: &AppState,
    opened: &Opened,
    tool: &str,
) -> Result<Option<Charge>, ApiError> {
    let headers = crate::headers::parse(req.headers())?;
    let (mut tags, customer) = context(&opened.key, Some(headers.tags), headers.customer);
    let priced = state.tool_costs.cost_of(&state.pool, &opened.key.org_id, &opened.server.name, tool).await?;
    if priced.is_none() {
        let org = state.model_prices.of(&state.pool, &state.config, &opened.key.org_id).await?;
        if org.block_unpriced_tools {
            return Ok(None);
        }
    }
    let cost = priced.unwrap_or_else(|| {
        tags.insert(UNPRICED_TOOL_TAG.to_owned(), "true".to_owned());
        0
    });
    Ok(Some(Charge {
        cost,
        tags,
        customer,
        session: headers.session,
        trace_id: crate::trace::trace_of(req).trace_id,
        request_id: headers.request_id,
    }))
}

/// Governs and forwards one `tools/call`.
pub async fn handle(
    req: &HttpRequest,
    state: &AppState,
    opened: &Opened,
    call: ToolCall,
    body: Bytes,
) -> Result<HttpResponse, ApiError> {
    let key = &opened.key;
    if !tool_allowed(key.allowed_tools.as_deref(), &opened.server.name, &call.name) {
        return Ok(not_allowed(&call, &opened.server.name));
    }
    let Some(charge) = charge_of(req, state, opened, &call.name).await? else {
        let message = format!(
            "spendgate refused the call of tool {}: the organization has no cost for it and blocks unpriced tools (unpricedTools: block). Ask an administrator to price it.",
            call.name
        );
        return Ok(tool_error(&call, message, json!({ "code": "tool_not_priced", "tool": call.name })));
    };
    let now = time::now_ms();
    let keys = entity_keys(key, &charge.tags, charge.customer.as_deref());
    let reserve = Reserve {
        reservation_id: state.budgets.registry().next_reservation_id(),
        estimate: charge.cost,
        session_id: charge.session.as_deref().map(Arc::from),
        finalize: false,
        fingerprint: None,
        now_ms: now,
        floor: None,
    };
    let refused = Refused {
        key,
        provider: PROVIDER,
        model: &call.name,
        request_id: &charge.request_id,
        tags: &charge.tags,
        customer: charge.customer.as_deref(),
        session: charge.session.as_deref(),
        trace_id: Some(&charge.trace_id),
        source: "mcp",
        event_type: "tool",
        defer: None,
    };
    let ask = Ask {
        keys: &keys,
        reserve: &reserve,
        call: call_of(key, PROVIDER, &call.name, now),
        refused,
        bound: None,
    };
    let reservation = match Reservation::acquire(state, ask).await {
        Ok(reservation) => reservation,
        Err(e) if is_denial(&e) => return Ok(refusal(&call, &e)),
        Err(e) => return Err(e),
    };
    let started = Instant::now();
    // Without an answer the reservation drops here, releasing every hold.
    let mut response = forward::send(req, state, opened, Some(body)).await?;
    let answer = response.body().limit(MAX_ANSWER_BYTES).await.map_err(|e| {
        ApiError::new(
            spendgate_engine::error::ErrorCode::UpstreamError,
            format!("MCP server answer unreadable: {e}"),
        )
    })?;
    let head = forward::head(&response, opened);
    if response.status().is_success() {
        let duration = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        record(state, opened, &call, charge, reservation, now, duration).await?;
    }
    let mut head = head;
    Ok(head.body(answer))
}

/// Records the tool event through the durable writer and settles the reservation.
async fn record(
    state: &AppState,
    opened: &Opened,
    call: &ToolCall,
    charge: Charge,
    mut reservation: Reservation,
    now: i64,
    duration_ms: i64,
) -> Result<(), ApiError> {
    let spec = EventSpec {
        key: &opened.key,
        request_id: charge.request_id,
        provider: PROVIDER.to_owned(),
        model: call.name.clone(),
        source: "mcp",
        event_type: "tool",
        tags: charge.tags,
        customer: charge.customer,
        budget_status: reservation.budget_status(),
        dedup: Dedup::Never,
        now,
    };
    let mut event = event::build(spec, true);
    let row = &mut event.row;
    row.cost_microdollars = charge.cost;
    row.duration_ms = Some(duration_ms);
    row.session_id = charge.session;
    row.trace_id = Some(charge.trace_id);
    row.tool_name = Some(call.name.clone());
    row.tool_server = Some(opened.server.name.clone());
    reservation.attach(&mut event);
    let outcomes = state.writer.commit(vec![event]).await?;
    if !matches!(outcomes.first(), Some(Outcome::Inserted { .. } | Outcome::Duplicate { .. })) {
        return Err(ApiError::internal("writer returned no outcome"));
    }
    reservation.committed();
    Ok(())
}

/// The JSON-RPC error of a tool outside the key's `allowedTools`.
fn not_allowed(call: &ToolCall, server: &str) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "jsonrpc": "2.0",
        "id": call.id,
        "error": {
            "code": -32602,
            "message": format!("Tool {server}/{} is not allowed for this key (allowedTools)", call.name),
            "data": { "tool": call.name, "server": server },
        },
    }))
}

/// A budget refusal (not a failure to reach the budgets).
fn is_denial(e: &ApiError) -> bool {
    e.details.as_ref().is_some_and(|d| d.get("budget_entity_type").is_some())
}

/// The JSON-RPC result of a refused call: a tool result the model reads.
fn refusal(call: &ToolCall, e: &ApiError) -> HttpResponse {
    let details = e.details.clone().unwrap_or_else(|| json!({}));
    let figure = |name: &str| details.get(name).and_then(Value::as_i64);
    let mut text = format!("spendgate refused the call of tool {}: {}.", call.name, e.message);
    if let (Some(t), Some(id), Some(spend), Some(limit)) = (
        details.get("budget_entity_type").and_then(Value::as_str),
        details.get("budget_entity_id").and_then(Value::as_str),
        figure("budget_spend_microdollars"),
        figure("budget_limit_microdollars"),
    ) {
        text.push_str(&format!(
            " Budget {t}:{id} has spent {} of its {} limit. Do not call this tool again until the budget is raised or reset.",
            dollars(spend),
            dollars(limit)
        ));
    }
    let mut denial = json!({ "code": e.code, "message": e.message });
    if let (Some(denial), Some(details)) = (denial.as_object_mut(), details.as_object()) {
        denial.extend(details.clone());
    }
    tool_error(call, text, denial)
}

/// A tool result with `isError: true` the model reads, and `_meta["spendgate/denial"]`.
fn tool_error(call: &ToolCall, text: String, denial: Value) -> HttpResponse {
    HttpResponse::Ok().json(json!({
        "jsonrpc": "2.0",
        "id": call.id,
        "result": {
            "content": [{ "type": "text", "text": text }],
            "isError": true,
            "_meta": { "spendgate/denial": denial },
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_requests_of_tools_call_are_governed() {
        let call =
            json!({ "jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": { "name": "search" } });
        let c = ToolCall::of(&call).expect("a call");
        assert_eq!((c.id, c.name.as_str()), (json!(3), "search"));
        assert!(ToolCall::of(
            &json!({ "jsonrpc": "2.0", "method": "tools/call", "params": { "name": "x" } })
        )
        .is_none());
        assert!(ToolCall::of(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/list" })).is_none());
        assert!(ToolCall::of(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {} }))
            .is_none());
    }
}
