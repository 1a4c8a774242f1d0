//! The bodies of the action endpoints, their validation (every rule of the spec's
//! Action resource and Limits), and the Action as the API shows it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{json, Value};

use spendgate_engine::actions::events::BUDGET_INCREASE;
use spendgate_engine::db::models::ActionRow;
use spendgate_engine::error::Issues;
use spendgate_engine::util::bounds::MAX_BUDGET_MICRODOLLARS;
use spendgate_engine::util::json::double_option;
use spendgate_engine::util::{ids, time};

pub const ACTION_TYPES: [&str; 8] = [
    "send_email",
    "http_post",
    "http_delete",
    "shell_command",
    "db_write",
    "file_write",
    "file_delete",
    BUDGET_INCREASE,
];
pub const MAX_PAYLOAD_BYTES: usize = 64 * 1024;
pub const MAX_METADATA_BYTES: usize = 16 * 1024;
pub const MAX_RESULT_BYTES: usize = 64 * 1024;
pub const MAX_DEPTH: usize = 20;
pub const MAX_ERROR_MESSAGE_CHARS: usize = 4_000;
pub const DEFAULT_EXPIRES_IN_SECONDS: i64 = 3_600;
/// `expiresInSeconds` accepted up to this ...
pub const MAX_EXPIRES_IN_SECONDS: i64 = 2_592_000;
/// ... and silently clamped to this.
pub const MAX_EFFECTIVE_EXPIRES_IN_SECONDS: i64 = 604_800;
const BUDGET_ENTITY_TYPES: [&str; 4] = ["user", "api_key", "tag", "customer"];

/// `POST /api/actions`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateActionBody {
    #[schema(min_length = 1, max_length = 255)]
    pub agent_id: String,
    #[schema(
        pattern = "^(send_email|http_post|http_delete|shell_command|db_write|file_write|file_delete|budget_increase)$"
    )]
    pub action_type: String,
    #[schema(value_type = Object)]
    pub payload: Value,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub metadata: Option<Value>,
    /// Absent: 3,600. `null`: no expiry. 0 to 2,592,000; above 604,800 clamped to it.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 2_592_000)]
    pub expires_in_seconds: Option<Option<i64>>,
    #[serde(default)]
    #[schema(min_length = 1, max_length = 100)]
    pub environment: Option<String>,
    #[serde(default)]
    #[schema(min_length = 1, max_length = 100)]
    pub source_framework: Option<String>,
}

/// `POST /api/actions/:id/result`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResultBody {
    /// `executing`, `executed` or `failed`.
    #[schema(pattern = "^(executing|executed|failed)$")]
    pub status: String,
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
    /// Required when `failed`; not allowed otherwise.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 4_000)]
    pub error_message: Option<String>,
}

/// Nesting depth: a scalar is 0, an object or array one more than its deepest member.
pub fn depth(value: &Value) -> usize {
    match value {
        Value::Object(m) => 1 + m.values().map(depth).max().unwrap_or(0),
        Value::Array(a) => 1 + a.iter().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// An object of at most `max_bytes` serialized and [`MAX_DEPTH`] levels.
pub fn check_object(value: &Value, max_bytes: usize, path: &str, issues: &mut Issues) {
    if !value.is_object() {
        issues.push(&[path], "must be an object");
    } else if value.to_string().len() > max_bytes {
        issues.push(&[path], format!("must be at most {max_bytes} bytes serialized"));
    } else if depth(value) > MAX_DEPTH {
        issues.push(&[path], format!("must be nested at most {MAX_DEPTH} levels"));
    }
}

fn chars_between(s: &str, min: usize, max: usize) -> bool {
    (min..=max).contains(&s.chars().count())
}

/// Checks a create body; returns the effective expiry in seconds (`None`: never).
pub fn validate_create(body: &CreateActionBody, issues: &mut Issues) -> Option<i64> {
    issues.check(chars_between(&body.agent_id, 1, 255), &["agentId"], "must be 1 to 255 characters");
    issues.check(
        ACTION_TYPES.contains(&body.action_type.as_str()),
        &["actionType"],
        "must be one of send_email, http_post, http_delete, shell_command, db_write, file_write, file_delete, budget_increase",
    );
    check_object(&body.payload, MAX_PAYLOAD_BYTES, "payload", issues);
    if let Some(metadata) = &body.metadata {
        check_object(metadata, MAX_METADATA_BYTES, "metadata", issues);
    }
    for (field, value) in [("environment", &body.environment), ("sourceFramework", &body.source_framework)] {
        if value.as_deref().is_some_and(|v| !chars_between(v, 1, 100)) {
            issues.push(&[field], "must be 1 to 100 characters");
        }
    }
    let expires = match body.expires_in_seconds {
        None => Some(DEFAULT_EXPIRES_IN_SECONDS),
        Some(None) => None,
        Some(Some(s)) => {
            if !(0..=MAX_EXPIRES_IN_SECONDS).contains(&s) {
                issues.push(
                    &["expiresInSeconds"],
                    format!("must be an integer from 0 to {MAX_EXPIRES_IN_SECONDS}"),
                );
            }
            Some(s.clamp(0, MAX_EFFECTIVE_EXPIRES_IN_SECONDS))
        }
    };
    if body.action_type == BUDGET_INCREASE && body.payload.is_object() {
        check_budget_increase(&body.payload, issues);
    }
    expires
}

/// The budget-increase payload: `entityType`, `entityId`, `requestedAmountMicrodollars`
/// required; `currentLimitMicrodollars`, `currentSpendMicrodollars` (what the agent saw)
/// and `reason` optional.
fn check_budget_increase(payload: &Value, issues: &mut Issues) {
    let field = |name: &str| payload.get(name).filter(|v| !v.is_null());
    let entity_type = field("entityType").and_then(Value::as_str);
    issues.check(
        entity_type.is_some_and(|t| BUDGET_ENTITY_TYPES.contains(&t)),
        &["payload", "entityType"],
        "must be one of user, api_key, tag, customer",
    );
    issues.check(
        field("entityId").and_then(Value::as_str).is_some_and(|id| chars_between(id, 1, 321)),
        &["payload", "entityId"],
        "must be a string of 1 to 321 characters",
    );
    issues.check(
        field("requestedAmountMicrodollars")
            .and_then(Value::as_i64)
            .is_some_and(|n| (1..=MAX_BUDGET_MICRODOLLARS).contains(&n)),
        &["payload", "requestedAmountMicrodollars"],
        "must be an integer from 1 to 1000000000000000",
    );
    for name in ["currentLimitMicrodollars", "currentSpendMicrodollars"] {
        if field(name).is_some_and(|v| v.as_i64().is_none_or(|n| n < 0)) {
            issues.push(&["payload", name], "must be a non-negative integer");
        }
    }
    if field("reason").is_some_and(|v| v.as_str().is_none_or(|r| !chars_between(r, 0, 1_000))) {
        issues.push(&["payload", "reason"], "must be a string of at most 1000 characters");
    }
}

/// Checks a result report against the spec's body rules.
pub fn validate_result(body: &ResultBody, issues: &mut Issues) {
    let status = body.status.as_str();
    issues.check(
        matches!(status, "executing" | "executed" | "failed"),
        &["status"],
        "must be one of executing, executed, failed",
    );
    if let Some(result) = &body.result {
        if status == "executing" {
            issues.push(&["result"], "is not allowed when status is executing");
        } else {
            check_object(result, MAX_RESULT_BYTES, "result", issues);
        }
    }
    match (&body.error_message, status) {
        (Some(_), "executing" | "executed") => {
            issues.push(&["errorMessage"], "is only allowed when status is failed");
        }
        (Some(m), _) if !chars_between(m, 1, MAX_ERROR_MESSAGE_CHARS) => {
            issues.push(&["errorMessage"], "must be 1 to 4000 characters");
        }
        (None, "failed") => issues.push(&["errorMessage"], "is required when status is failed"),
        _ => {}
    }
}

fn object(text: Option<&str>) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(Value::Null)
}

fn iso(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |t| Value::String(time::iso(t)))
}

fn user(id: Option<&str>) -> Value {
    id.map_or(Value::Null, |u| Value::String(ids::prefixed(ids::USER, u)))
}

/// The Action resource.
pub fn view(a: &ActionRow) -> Value {
    json!({
        "id": ids::prefixed(ids::ACTION, &a.id),
        "agentId": a.agent_id,
        "actionType": a.action_type,
        "status": a.status,
        "payload": object(Some(&a.payload)),
        "metadata": object(a.metadata.as_deref()),
        "createdAt": time::iso(a.created_at),
        "approvedAt": iso(a.approved_at),
        "rejectedAt": iso(a.rejected_at),
        "executedAt": iso(a.executed_at),
        "expiresAt": iso(a.expires_at),
        "expiredAt": iso(a.expired_at),
        "approvedBy": user(a.approved_by.as_deref()),
        "rejectedBy": user(a.rejected_by.as_deref()),
        "result": object(a.result.as_deref()),
        "errorMessage": a.error_message,
        "environment": a.environment,
        "sourceFramework": a.source_framework,
    })
}

/// One cost event of `GET /api/actions/:id/costs` (internal `_svc_` tags hidden).
pub fn cost_view(e: &spendgate_engine::db::models::CostEvent) -> Value {
    let tags: BTreeMap<String, String> = serde_json::from_str(&e.tags).unwrap_or_default();
    let tags: BTreeMap<_, _> = tags.into_iter().filter(|(k, _)| !k.starts_with("_svc_")).collect();
    json!({
        "id": ids::prefixed(ids::COST_EVENT, &e.id),
        "provider": e.provider,
        "model": e.model,
        "inputTokens": e.input_tokens,
        "outputTokens": e.output_tokens,
        "cachedInputTokens": e.cached_input_tokens,
        "reasoningTokens": e.reasoning_tokens,
        "costMicrodollars": e.cost_microdollars,
        "tags": tags,
        "createdAt": time::iso(e.created_at),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |inner, _| json!({ "a": inner }))
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({})), 1);
        assert_eq!(depth(&json!({ "a": [1, { "b": [] }] })), 4);
        assert_eq!(depth(&nested(20)), 20);
        let mut issues = Issues::new();
        check_object(&nested(20), MAX_PAYLOAD_BYTES, "payload", &mut issues);
        assert!(issues.is_empty());
        check_object(&nested(21), MAX_PAYLOAD_BYTES, "payload", &mut issues);
        assert!(!issues.is_empty());
    }

    #[test]
    fn expiry_defaults_and_clamps() {
        let body = |e: Value| -> CreateActionBody {
            let mut v = json!({ "agentId": "a", "actionType": "send_email", "payload": {} });
            v["expiresInSeconds"] = e;
            serde_json::from_value(v).unwrap()
        };
        let plain: CreateActionBody =
            serde_json::from_value(json!({ "agentId": "a", "actionType": "send_email", "payload": {} }))
                .unwrap();
        let mut issues = Issues::new();
        assert_eq!(validate_create(&plain, &mut issues), Some(3_600));
        assert_eq!(validate_create(&body(json!(null)), &mut issues), None);
        assert_eq!(validate_create(&body(json!(0)), &mut issues), Some(0));
        assert_eq!(validate_create(&body(json!(2_592_000)), &mut issues), Some(604_800));
        assert!(issues.is_empty());
        validate_create(&body(json!(2_592_001)), &mut issues);
        assert!(!issues.is_empty());
    }

    #[test]
    fn result_body_rules() {
        let check = |v: Value| {
            let body: ResultBody = serde_json::from_value(v).unwrap();
            let mut issues = Issues::new();
            validate_result(&body, &mut issues);
            issues.is_empty()
        };
        assert!(check(json!({ "status": "executing" })));
        assert!(!check(json!({ "status": "executing", "result": {} })));
        assert!(!check(json!({ "status": "executing", "errorMessage": "x" })));
        assert!(check(json!({ "status": "executed", "result": { "ok": true } })));
        assert!(!check(json!({ "status": "executed", "errorMessage": "x" })));
        assert!(!check(json!({ "status": "failed" })));
        assert!(check(json!({ "status": "failed", "errorMessage": "boom", "result": {} })));
        assert!(!check(json!({ "status": "failed", "errorMessage": "x".repeat(4_001) })));
        assert!(!check(json!({ "status": "done" })));
    }
}
