//! What a caller sends to `POST /api/cost-events` (and `/batch`): the input's shape,
//! its validation against the spec's bounds, and the cost event it becomes. Shared by
//! ingest and by the refund of gate charges.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::json;

use spendgate_engine::accounting::event::{self, Dedup, EventSpec};
use spendgate_engine::auth::identity::KeyIdentity;
use spendgate_engine::db::bindings::GATE_PROVIDER;
use spendgate_engine::db::cost_events::NewCostEvent;
use spendgate_engine::db::models::CostEvent;
use spendgate_engine::error::Issues;
use spendgate_engine::util::bounds::{MAX_EVENT_COST_MICRODOLLARS, MAX_EVENT_DURATION_MS, MAX_EVENT_TOKENS};
use spendgate_engine::util::validate::is_trace_id;
use spendgate_engine::util::validate::{check_tags, is_customer_id};

pub const MAX_BATCH: usize = 100;

#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostBreakdownInput {
    pub input: i64,
    pub output: i64,
    pub cached: i64,
    pub reasoning: Option<i64>,
}

/// One event as an SDK or integration reports it.
#[derive(Debug, Clone, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CostEventInput {
    pub provider: String,
    pub model: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cost_microdollars: i64,
    #[serde(default)]
    pub cached_input_tokens: Option<i64>,
    #[serde(default)]
    pub reasoning_tokens: Option<i64>,
    #[serde(default)]
    pub duration_ms: Option<i64>,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub trace_id: Option<String>,
    #[serde(default)]
    pub event_type: Option<String>,
    #[serde(default)]
    pub tool_name: Option<String>,
    #[serde(default)]
    pub tool_server: Option<String>,
    #[serde(default)]
    pub tags: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub customer: Option<String>,
    #[serde(default)]
    pub cost_breakdown: Option<CostBreakdownInput>,
    #[serde(default)]
    pub source: Option<String>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

#[derive(Debug, Deserialize, utoipa::ToSchema)]
pub struct BatchInput {
    pub events: Vec<CostEventInput>,
}

const EVENT_TYPES: [&str; 3] = ["llm", "tool", "custom"];
const SOURCES: [&str; 4] = ["sdk", "api", "proxy", "mcp"];

fn len_between(s: &str, min: usize, max: usize) -> bool {
    let n = s.chars().count();
    n >= min && n <= max
}

/// Whether a negative `costMicrodollars` may pass validation (the refund of a gate
/// charge, checked against the charge afterwards; single events only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refunds {
    Allowed,
    Refused,
}

/// Checks one event; issue paths start with `prefix` (empty for a single event).
pub fn validate(e: &CostEventInput, prefix: &[&str], refunds: Refunds, issues: &mut Issues) {
    let path = |field: &str| -> Vec<String> {
        prefix.iter().map(|p| (*p).to_owned()).chain(std::iter::once(field.to_owned())).collect()
    };
    let mut check = |ok: bool, field: &str, message: &str| {
        if !ok {
            let p = path(field);
            let refs: Vec<&str> = p.iter().map(String::as_str).collect();
            issues.push(&refs, message);
        }
    };
    check(len_between(&e.provider, 1, 100), "provider", "must be 1 to 100 characters");
    check(len_between(&e.model, 1, 200), "model", "must be 1 to 200 characters");
    const TOKENS: &str = "must be an integer from 0 to 1000000000";
    let tokens = |n: i64| (0..=MAX_EVENT_TOKENS).contains(&n);
    check(tokens(e.input_tokens), "inputTokens", TOKENS);
    check(tokens(e.output_tokens), "outputTokens", TOKENS);
    check(tokens(e.cached_input_tokens.unwrap_or(0)), "cachedInputTokens", TOKENS);
    check(tokens(e.reasoning_tokens.unwrap_or(0)), "reasoningTokens", TOKENS);
    // A negative cost is the refund of a gate charge (the spec's refund path): only a
    // single `gate` event may carry one, and the handler then checks it against the
    // charge it names (see `refund`).
    let refund = refunds == Refunds::Allowed && e.provider == GATE_PROVIDER && e.cost_microdollars < 0;
    check(
        refund || (0..=MAX_EVENT_COST_MICRODOLLARS).contains(&e.cost_microdollars),
        "costMicrodollars",
        match refunds {
            Refunds::Allowed => "must be an integer from 0 to 1000000000000 (one million dollars); a negative cost is accepted only as the refund of a gate charge (provider gate)",
            Refunds::Refused => "must be an integer from 0 to 1000000000000 (one million dollars); refunds are recorded one at a time through POST /api/cost-events",
        },
    );
    check(
        !refund || e.cost_microdollars >= -MAX_EVENT_COST_MICRODOLLARS,
        "costMicrodollars",
        "a refund is at most 1000000000000 (one million dollars)",
    );
    check(
        (0..=MAX_EVENT_DURATION_MS).contains(&e.duration_ms.unwrap_or(0)),
        "durationMs",
        "must be an integer from 0 to 86400000 (24 hours)",
    );
    check(
        e.session_id.as_deref().is_none_or(|s| len_between(s, 1, 200)),
        "sessionId",
        "must be 1 to 200 characters",
    );
    check(e.trace_id.as_deref().is_none_or(is_trace_id), "traceId", "must be 32 lowercase hex characters");
    check(
        e.event_type.as_deref().is_none_or(|t| EVENT_TYPES.contains(&t)),
        "eventType",
        "must be one of llm, tool, custom",
    );
    check(
        e.tool_name.as_deref().is_none_or(|s| len_between(s, 0, 200)),
        "toolName",
        "must be at most 200 characters",
    );
    check(
        e.tool_server.as_deref().is_none_or(|s| len_between(s, 0, 200)),
        "toolServer",
        "must be at most 200 characters",
    );
    check(
        e.customer.as_deref().is_none_or(is_customer_id),
        "customer",
        "must be 1 to 256 characters of [a-zA-Z0-9._:-]",
    );
    check(
        e.source.as_deref().is_none_or(|s| SOURCES.contains(&s)),
        "source",
        "must be one of sdk, api, proxy, mcp",
    );
    check(
        e.idempotency_key.as_deref().is_none_or(|s| len_between(s, 1, 200)),
        "idempotencyKey",
        "must be 1 to 200 characters",
    );
    if let Some(b) = &e.cost_breakdown {
        let part = |n: i64| (0..=MAX_EVENT_COST_MICRODOLLARS).contains(&n);
        for (name, value) in [
            ("input", b.input),
            ("output", b.output),
            ("cached", b.cached),
            ("reasoning", b.reasoning.unwrap_or(0)),
        ] {
            let p = path("costBreakdown");
            let mut refs: Vec<&str> = p.iter().map(String::as_str).collect();
            refs.push(name);
            if !part(value) {
                issues.push(&refs, "must be an integer from 0 to 1000000000000");
            }
        }
    }
    if let Some(tags) = &e.tags {
        let p = path("tags");
        let mut tag_issues = Issues::new();
        check_tags(tags, "tags", &mut tag_issues);
        if !tag_issues.is_empty() {
            let refs: Vec<&str> = p.iter().map(String::as_str).collect();
            issues.push(&refs, "tags must have at most 10 keys matching [a-zA-Z0-9_-]{1,64}, values up to 256 characters, and no _svc_ keys");
        }
    }
}

/// Turns a validated input into the row and its budget targets.
pub(crate) fn to_new_event(
    key: &KeyIdentity,
    e: CostEventInput,
    request_id: String,
    now: i64,
) -> NewCostEvent {
    let mut tags = key.default_tags.clone();
    tags.extend(e.tags.clone().unwrap_or_default());
    let customer = e.customer.clone().or_else(|| tags.get("customer").filter(|c| is_customer_id(c)).cloned());
    let mut event = event::build(
        EventSpec {
            key,
            request_id,
            provider: e.provider.clone(),
            model: e.model.clone(),
            source: e.source.as_deref().unwrap_or("sdk"),
            event_type: e.event_type.as_deref().unwrap_or("custom"),
            tags,
            customer,
            budget_status: "skipped",
            dedup: Dedup::ByRequestId,
            now,
        },
        false,
    );
    set_measured(&mut event.row, e);
    event
}

/// What the caller measured: tokens, cost, durations, session, trace, tool and the
/// cost breakdown.
pub(crate) fn set_measured(row: &mut CostEvent, e: CostEventInput) {
    row.input_tokens = e.input_tokens;
    row.output_tokens = e.output_tokens;
    row.cached_input_tokens = e.cached_input_tokens.unwrap_or(0);
    row.reasoning_tokens = e.reasoning_tokens.unwrap_or(0);
    row.cost_microdollars = e.cost_microdollars;
    row.duration_ms = e.duration_ms;
    row.session_id = e.session_id;
    row.trace_id = e.trace_id;
    row.tool_name = e.tool_name;
    row.tool_server = e.tool_server;
    row.cost_breakdown = e.cost_breakdown.map(|b| {
        let mut v = json!({ "input": b.input, "output": b.output, "cached": b.cached });
        if let Some(r) = b.reasoning {
            v["reasoning"] = json!(r);
        }
        v.to_string()
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn input() -> CostEventInput {
        serde_json::from_value(json!({
            "provider": "openai", "model": "gpt-4o", "inputTokens": 10, "outputTokens": 5, "costMicrodollars": 42
        }))
        .unwrap()
    }

    #[test]
    fn minimal_event_is_valid() {
        let mut issues = Issues::new();
        validate(&input(), &[], Refunds::Allowed, &mut issues);
        assert!(issues.is_empty());
    }

    #[test]
    fn every_rule_reports_its_path() {
        let mut e = input();
        e.provider = String::new();
        e.cost_microdollars = -1;
        e.trace_id = Some("ABC".into());
        e.event_type = Some("other".into());
        e.session_id = Some("x".repeat(201));
        let mut issues = Issues::new();
        validate(&e, &["events", "3"], Refunds::Refused, &mut issues);
        let err = issues.finish().unwrap_err();
        let details = err.details.unwrap();
        let list = details["issues"].as_array().unwrap();
        assert_eq!(list.len(), 5, "{list:?}");
        assert_eq!(list[0]["path"], json!(["events", "3", "provider"]));
    }

    fn valid(provider: &str, cost: i64, refunds: Refunds) -> bool {
        let mut e = input();
        e.provider = provider.into();
        e.cost_microdollars = cost;
        let mut issues = Issues::new();
        validate(&e, &[], refunds, &mut issues);
        issues.is_empty()
    }

    #[test]
    fn only_a_single_gate_event_may_carry_a_negative_cost() {
        assert!(valid("gate", -500, Refunds::Allowed));
        assert!(valid("gate", -MAX_EVENT_COST_MICRODOLLARS, Refunds::Allowed));
        assert!(!valid("gate", -MAX_EVENT_COST_MICRODOLLARS - 1, Refunds::Allowed));
        assert!(!valid("gate", i64::MIN, Refunds::Allowed));
        assert!(!valid("gate", -500, Refunds::Refused));
        assert!(!valid("openai", -500, Refunds::Allowed));
        assert!(!valid("openai", -1, Refunds::Refused));
        assert!(valid("openai", 0, Refunds::Refused));
    }
}
