//! The one builder of a cost event row. Ingest, proxied calls, MCP tool events and
//! denial records all start here, so identity, tags, budget targets and the dedup rule
//! are decided in one place; each caller then fills in what it measured (tokens, cost,
//! durations, breakdown).

use std::collections::BTreeMap;

use crate::auth::identity::KeyIdentity;
use crate::db::cost_events::NewCostEvent;
use crate::db::models::CostEvent;
use crate::util::ids;

/// Whether an event deduplicates on its request id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dedup {
    /// Ingested (SDK, API) events: the same (provider, requestId) is recorded once.
    ByRequestId,
    /// Proxied calls, tool events and denial records: every one is its own event (a
    /// client's request id correlates; it never lets a call go uncharged).
    Never,
    /// The refund of the gate charges with this request id: recorded once per request.
    Refund,
}

/// Dedup keys of refunds start with this; nothing else does (see [`is_refund`]).
const REFUND_PREFIX: &str = "refund:";

/// Whether `row` is a refund, the one kind of event whose cost may be negative.
pub fn is_refund(row: &CostEvent) -> bool {
    row.dedup_key.starts_with(REFUND_PREFIX)
}

/// Who and what an event is about; the measured figures are set on the row afterwards.
pub struct EventSpec<'a> {
    pub key: &'a KeyIdentity,
    pub request_id: String,
    pub provider: String,
    pub model: String,
    /// `sdk`, `api`, `proxy` or `mcp`.
    pub source: &'a str,
    /// `llm`, `tool` or `custom`.
    pub event_type: &'a str,
    /// Every tag of the event, internal `_svc_` ones included.
    pub tags: BTreeMap<String, String>,
    pub customer: Option<String>,
    /// `skipped`, `approved` or `denied`.
    pub budget_status: &'a str,
    pub dedup: Dedup,
    pub now: i64,
}

/// A new event with zero usage and cost, counting against the key, its user, its
/// tags and its customer. `reserved`: the caller holds a reservation on those budgets
/// and settles it itself after the commit.
pub fn build(spec: EventSpec<'_>, reserved: bool) -> NewCostEvent {
    let id = ids::new_id();
    let dedup_key = match spec.dedup {
        Dedup::ByRequestId => spec.request_id.clone(),
        Dedup::Never => format!("call:{id}"),
        Dedup::Refund => format!("{REFUND_PREFIX}{}", spec.request_id),
    };
    let targets = super::targets::budget_targets(spec.key, &spec.tags, spec.customer.as_deref());
    let row = CostEvent {
        id,
        org_id: spec.key.org_id.clone(),
        request_id: spec.request_id,
        api_key_id: Some(spec.key.key_id.clone()),
        user_id: Some(spec.key.user_id.clone()),
        provider: spec.provider,
        model: spec.model,
        input_tokens: 0,
        output_tokens: 0,
        cached_input_tokens: 0,
        reasoning_tokens: 0,
        cost_microdollars: 0,
        duration_ms: None,
        upstream_duration_ms: None,
        session_id: None,
        trace_id: None,
        event_type: spec.event_type.to_owned(),
        tool_name: None,
        tool_server: None,
        tags: serde_json::to_string(&spec.tags).unwrap_or_else(|_| "{}".to_owned()),
        customer_id: spec.customer,
        cost_breakdown: None,
        source: spec.source.to_owned(),
        budget_status: spec.budget_status.to_owned(),
        action_id: None,
        estimated: spec.tags.contains_key("_svc_estimated"),
        created_at: spec.now,
        tool_calls_requested: None,
        tool_definition_tokens: 0,
        dedup_key,
    };
    NewCostEvent {
        row,
        tags: spec.tags,
        targets,
        outbox: Vec::new(),
        holds: Vec::new(),
        leased: Vec::new(),
        reserved,
        ticket: None,
        body: None,
    }
}
