//! A bound customer's unit economics: the binding, its budget (stored spend less what
//! this instance holds in flight), lifetime cost by the customer id stored on each
//! event, and the latest gate decision. Served to API keys by the proxy
//! (`GET /v1/customers/{customerId}/unit-economics`) and to dashboard sessions by the
//! control plane (`GET /api/customer-bindings/{customerId}`), in one shape.

use actors::budget::{BudgetSnapshot, EntityType};
use actors::store::EntityKey;
use serde_json::{json, Value};

use crate::customers::BindingView;
use crate::db::bindings;
use crate::db::models::{Budget, CustomerBinding};
use crate::db::DbResult;
use crate::state::AppState;
use crate::util::time;

/// The unit economics of `binding` (a binding of `org_id`).
pub async fn of(state: &AppState, org_id: &str, binding: &CustomerBinding) -> DbResult<Value> {
    let customer_id = &binding.customer_id;
    let entity = EntityKey::new(org_id.to_owned(), EntityType::Customer, customer_id.clone());
    let live = state.budgets.registry().snapshot(&entity).await.ok().flatten();
    let stored = crate::db::budgets::find_by_entity(&state.pool, org_id, "customer", customer_id).await?;
    let (lifetime, count) = bindings::lifetime_cost(&state.pool, org_id, customer_id).await?;
    let latest = bindings::latest_gate_decision(&state.pool, org_id, customer_id).await?;
    let view = BindingView::from(binding);
    Ok(json!({
        "customerId": customer_id,
        "binding": {
            "bindingId": view.binding_id,
            "planRef": view.plan_ref,
            "budgetCapMicrodollars": view.budget_cap_microdollars,
            "marginTargetPercent": view.margin_target_percent,
            "status": view.status,
        },
        "budget": budget_figures(binding, stored.as_ref(), live.as_ref()),
        "cost": { "lifetimeCostMicrodollars": lifetime, "eventCount": count },
        "latestBudgetCheck": {
            "decision": latest.as_ref().map(|(d, _)| d.clone()),
            "at": latest.map(|(_, at)| time::iso(at)),
        },
    }))
}

/// The customer's budget as stored (committed spend, every instance's), less what this
/// instance holds in flight; `propagated` once the enforcer has loaded the cap.
fn budget_figures(
    binding: &CustomerBinding,
    stored: Option<&Budget>,
    live: Option<&BudgetSnapshot>,
) -> Value {
    let max = stored.map_or(binding.budget_cap_microdollars, |b| b.max_budget_microdollars);
    let spend = stored.map_or(0, |b| b.spend_microdollars);
    let in_flight = live.map_or(0, |s| s.reserved);
    json!({
        "maxMicrodollars": max,
        "spendMicrodollars": spend,
        "remainingMicrodollars": max.saturating_sub(spend).saturating_sub(in_flight).max(0),
        "propagated": live.is_some_and(|s| s.limit == binding.budget_cap_microdollars),
    })
}
