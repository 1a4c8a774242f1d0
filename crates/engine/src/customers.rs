//! Per-customer budgets: the request rules of bind and gate, and the binding's shape.
//!
//! A binding ties a customer id to a plan reference and a budget cap; the cap is the
//! customer's budget (`entity_type: customer`), enforced by the same budget actor the
//! proxy uses for `X-Service-Customer`. Bodies are read as JSON values and checked
//! field by field, because each field has its own error code in the spec.

use serde::Serialize;
use serde_json::{Map, Value};

use crate::auth::identity::KeyIdentity;
use crate::db::models::CustomerBinding;
use crate::error::{ApiError, ErrorCode};
use crate::util::validate::is_customer_id;

pub const MAX_PLAN_REF_CHARS: usize = 256;
pub const MAX_FEATURE_CHARS: usize = 256;
/// Largest cap: the budgets' own bound (10^15 µ$, one billion dollars).
pub const MAX_BUDGET_CAP: i64 = 1_000_000_000_000_000;
/// Largest gate estimate: one event's bound (10^12 µ$).
pub const MAX_ESTIMATE: i64 = 1_000_000_000_000;

/// A valid `POST /v1/bind` body.
#[derive(Debug)]
pub struct BindRequest {
    pub customer_id: String,
    pub plan_ref: String,
    pub budget_cap: i64,
    pub margin_target_percent: Option<i64>,
}

/// A valid `POST /v1/gate` body.
#[derive(Debug)]
pub struct GateRequest {
    pub customer_id: String,
    pub estimate: i64,
    pub feature: Option<String>,
    pub send_event: bool,
    pub with_preview: bool,
}

/// The binding as bind and unit economics show it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingView {
    pub binding_id: String,
    pub customer_id: String,
    pub plan_ref: String,
    pub budget_cap_microdollars: i64,
    pub margin_target_percent: Option<i64>,
    /// `active`, `suspended` or `archived`.
    pub status: String,
}

impl From<&CustomerBinding> for BindingView {
    fn from(b: &CustomerBinding) -> Self {
        BindingView {
            binding_id: b.id.clone(),
            customer_id: b.customer_id.clone(),
            plan_ref: b.plan_ref.clone(),
            budget_cap_microdollars: b.budget_cap_microdollars,
            margin_target_percent: b.margin_target_percent,
            status: b.status.clone(),
        }
    }
}

fn object(body: &Value) -> Result<&Map<String, Value>, ApiError> {
    body.as_object()
        .ok_or_else(|| ApiError::new(ErrorCode::ValidationError, "The body must be a JSON object"))
}

fn fail(code: ErrorCode, message: &str) -> ApiError {
    ApiError::new(code, message)
}

/// `customerId`: required, `[a-zA-Z0-9._:-]`, 1-256 characters.
pub fn customer_id(raw: Option<&str>) -> Result<String, ApiError> {
    match raw {
        Some(id) if is_customer_id(id) => Ok(id.to_owned()),
        _ => Err(fail(
            ErrorCode::InvalidCustomerId,
            "customerId must match [a-zA-Z0-9._:-]+, 1 to 256 characters",
        )),
    }
}

fn integer(raw: Option<&Value>) -> Option<i64> {
    raw.and_then(Value::as_i64)
}

fn flag(body: &Map<String, Value>, name: &str) -> Result<bool, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(ApiError::invalid_field(&[name], "must be a boolean")),
    }
}

pub fn parse_bind(body: &Value) -> Result<BindRequest, ApiError> {
    let body = object(body)?;
    if body.contains_key("customer_data") || body.contains_key("customerData") {
        return Err(fail(ErrorCode::CustomerDataUnsupported, "Customer data is not accepted on bind"));
    }
    let customer_id = customer_id(body.get("customerId").and_then(Value::as_str))?;
    let plan_ref = match body.get("planRef").and_then(Value::as_str) {
        Some(p) if !p.is_empty() && p.chars().count() <= MAX_PLAN_REF_CHARS => p.to_owned(),
        _ => return Err(fail(ErrorCode::InvalidPlanRef, "planRef is required, 1 to 256 characters")),
    };
    let budget_cap =
        integer(body.get("budgetCap")).filter(|c| (0..=MAX_BUDGET_CAP).contains(c)).ok_or_else(|| {
            fail(ErrorCode::InvalidBudgetCap, "budgetCap must be an integer from 0 to 10^15 microdollars")
        })?;
    let margin_target_percent = match body.get("marginTargetPercent") {
        None | Some(Value::Null) => None,
        Some(v) => Some(integer(Some(v)).filter(|p| (0..=100).contains(p)).ok_or_else(|| {
            fail(
                ErrorCode::InvalidMarginTarget,
                "marginTargetPercent must be an integer from 0 to 100, or null",
            )
        })?),
    };
    Ok(BindRequest { customer_id, plan_ref, budget_cap, margin_target_percent })
}

pub fn parse_gate(body: &Value) -> Result<GateRequest, ApiError> {
    let body = object(body)?;
    let customer_id = customer_id(body.get("customerId").and_then(Value::as_str))?;
    let estimate = integer(body.get("estimatedCostMicrodollars"))
        .filter(|e| (1..=MAX_ESTIMATE).contains(e))
        .ok_or_else(|| {
            fail(ErrorCode::InvalidEstimate, "estimatedCostMicrodollars must be an integer from 1 to 10^12")
        })?;
    let feature = match body.get("feature") {
        None | Some(Value::Null) => None,
        Some(v) => Some(
            v.as_str()
                .filter(|f| !f.is_empty() && f.chars().count() <= MAX_FEATURE_CHARS)
                .map(str::to_owned)
                .ok_or_else(|| {
                    fail(ErrorCode::InvalidFeature, "feature must be 1 to 256 characters, or null")
                })?,
        ),
    };
    let send_event = flag(body, "sendEvent")?;
    let with_preview = flag(body, "withPreview")?;
    Ok(GateRequest { customer_id, estimate, feature, send_event, with_preview })
}

/// The key's `allowedCustomers` admits `customer` (no list admits every customer).
pub fn allowed(key: &KeyIdentity, customer: &str) -> bool {
    key.allowed_customers.as_ref().is_none_or(|list| list.iter().any(|c| c == customer))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bind_code(body: Value) -> ErrorCode {
        parse_bind(&body).err().map(|e| e.code).unwrap_or(ErrorCode::InternalError)
    }

    fn gate_code(body: Value) -> ErrorCode {
        parse_gate(&body).err().map(|e| e.code).unwrap_or(ErrorCode::InternalError)
    }

    #[test]
    fn bind_rules_each_have_their_code() {
        let ok =
            json!({ "customerId": "acme", "planRef": "pro", "budgetCap": 0, "marginTargetPercent": 100 });
        let parsed = parse_bind(&ok).unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!((parsed.budget_cap, parsed.margin_target_percent), (0, Some(100)));
        assert_eq!(
            bind_code(json!({ "customerId": "a b", "planRef": "p", "budgetCap": 1 })),
            ErrorCode::InvalidCustomerId
        );
        assert_eq!(bind_code(json!({ "planRef": "p", "budgetCap": 1 })), ErrorCode::InvalidCustomerId);
        assert_eq!(bind_code(json!({ "customerId": "a", "budgetCap": 1 })), ErrorCode::InvalidPlanRef);
        let long = "p".repeat(257);
        assert_eq!(
            bind_code(json!({ "customerId": "a", "planRef": long, "budgetCap": 1 })),
            ErrorCode::InvalidPlanRef
        );
        for cap in [json!(-1), json!(1.5), json!("5"), json!(null)] {
            let body = json!({ "customerId": "a", "planRef": "p", "budgetCap": cap });
            assert_eq!(bind_code(body), ErrorCode::InvalidBudgetCap);
        }
        for target in [json!(101), json!(-1), json!(50.5)] {
            let body =
                json!({ "customerId": "a", "planRef": "p", "budgetCap": 1, "marginTargetPercent": target });
            assert_eq!(bind_code(body), ErrorCode::InvalidMarginTarget);
        }
        for field in ["customer_data", "customerData"] {
            let mut body = ok.clone();
            body[field] = json!({ "email": "x@y" });
            assert_eq!(bind_code(body), ErrorCode::CustomerDataUnsupported);
        }
    }

    #[test]
    fn gate_rules_each_have_their_code() {
        let ok = json!({ "customerId": "acme", "estimatedCostMicrodollars": 5, "feature": "chat", "sendEvent": true });
        let parsed = parse_gate(&ok).unwrap_or_else(|e| panic!("{e:?}"));
        assert!(parsed.send_event && !parsed.with_preview);
        for estimate in [json!(0), json!(-3), json!(2.5), json!("5"), json!(1_000_000_000_001_i64)] {
            let body = json!({ "customerId": "a", "estimatedCostMicrodollars": estimate });
            assert_eq!(gate_code(body), ErrorCode::InvalidEstimate);
        }
        for feature in [json!(""), json!("f".repeat(257)), json!(3)] {
            let body = json!({ "customerId": "a", "estimatedCostMicrodollars": 1, "feature": feature });
            assert_eq!(gate_code(body), ErrorCode::InvalidFeature);
        }
        let body = json!({ "customerId": "a", "estimatedCostMicrodollars": 1, "sendEvent": "yes" });
        assert_eq!(gate_code(body), ErrorCode::ValidationError);
        assert_eq!(gate_code(json!({ "estimatedCostMicrodollars": 1 })), ErrorCode::InvalidCustomerId);
    }
}
