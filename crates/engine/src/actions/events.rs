//! The webhook objects of action events (`action.created`, `.approved`, `.rejected`,
//! `.expired`) and of `budget.increased`, with the spec's `data.object` fields, and the
//! budget-increase payload they read.

use serde_json::{json, Value};

use crate::db::models::ActionRow;
use crate::util::{ids, time};

pub const BUDGET_INCREASE: &str = "budget_increase";

/// What an approved `budget_increase` action raises.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetIncrease {
    pub entity_type: String,
    pub entity_id: String,
    pub amount: i64,
}

impl BudgetIncrease {
    /// The increase a `budget_increase` action asks for (its payload was validated at
    /// creation); `None` for other action types.
    pub fn of(row: &ActionRow) -> Option<Self> {
        if row.action_type != BUDGET_INCREASE {
            return None;
        }
        let payload: Value = serde_json::from_str(&row.payload).ok()?;
        Some(Self {
            entity_type: payload.get("entityType")?.as_str()?.to_owned(),
            entity_id: payload.get("entityId")?.as_str()?.to_owned(),
            amount: payload.get("requestedAmountMicrodollars")?.as_i64()?,
        })
    }
}

fn iso(ms: Option<i64>) -> Value {
    ms.map_or(Value::Null, |t| Value::String(time::iso(t)))
}

fn user(id: Option<&str>) -> Value {
    id.map_or(Value::Null, |u| Value::String(ids::prefixed(ids::USER, u)))
}

fn base(row: &ActionRow) -> serde_json::Map<String, Value> {
    let mut object = serde_json::Map::new();
    object.insert("action_id".into(), ids::prefixed(ids::ACTION, &row.id).into());
    object.insert("action_type".into(), row.action_type.clone().into());
    object.insert("agent_id".into(), row.agent_id.clone().into());
    object.insert("status".into(), row.status.clone().into());
    object
}

/// `action.created`.
pub fn created(row: &ActionRow) -> Value {
    let mut object = base(row);
    object.insert("payload".into(), serde_json::from_str(&row.payload).unwrap_or(Value::Null));
    object.insert("created_at".into(), time::iso(row.created_at).into());
    object.insert("expires_at".into(), iso(row.expires_at));
    Value::Object(object)
}

/// The event a transition into `row.status` emits, if any (the spec lists none for
/// the agent's reports).
pub fn of_transition(row: &ActionRow) -> Option<(&'static str, Value)> {
    let mut object = base(row);
    let kind = match row.status.as_str() {
        "approved" => {
            object.insert("approved_by".into(), user(row.approved_by.as_deref()));
            object.insert("approved_at".into(), iso(row.approved_at));
            "action.approved"
        }
        "rejected" => {
            object.insert("rejected_by".into(), user(row.rejected_by.as_deref()));
            object.insert("rejected_at".into(), iso(row.rejected_at));
            object.insert("reason".into(), Value::Null);
            "action.rejected"
        }
        "expired" => {
            object.insert("expired_at".into(), iso(row.expired_at));
            "action.expired"
        }
        _ => return None,
    };
    Some((kind, Value::Object(object)))
}

/// `budget.increased`.
pub fn budget_increased(row: &ActionRow, increase: &BudgetIncrease, previous: i64, new_limit: i64) -> Value {
    json!({
        "budget_entity_type": increase.entity_type,
        "budget_entity_id": increase.entity_id,
        "previous_limit_microdollars": previous,
        "new_limit_microdollars": new_limit,
        "increased_by_microdollars": new_limit - previous,
        "approved_by": user(row.approved_by.as_deref()),
        "action_id": ids::prefixed(ids::ACTION, &row.id),
    })
}
