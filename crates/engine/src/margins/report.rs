//! The margin of every mapped customer in a month: revenue from the processor's
//! items, cost from the events tagged with the mapped tag value.

use std::collections::{BTreeSet, HashMap};

use crate::db::margins::{self, CostCount, Mapping};
use crate::db::{processor, DbResult, Pool};

use super::health::{self, Tier};
use super::months::Month;

#[derive(Debug, Clone)]
pub struct CustomerMargin {
    pub mapping: Mapping,
    pub name: Option<String>,
    pub email: Option<String>,
    pub revenue: i64,
    pub cost: i64,
    pub requests: i64,
}

impl CustomerMargin {
    pub fn margin(&self) -> i64 {
        self.revenue.saturating_sub(self.cost)
    }

    pub fn tier(&self) -> Tier {
        health::tier(self.revenue, self.cost)
    }

    pub fn percent(&self) -> Option<f64> {
        health::margin_percent(self.revenue, self.cost)
    }
}

/// Names and emails of the organization's processor customers.
pub async fn customer_names(
    pool: &Pool,
    org_id: &str,
) -> DbResult<HashMap<String, (Option<String>, Option<String>)>> {
    Ok(processor::customers(pool, org_id)
        .await?
        .into_iter()
        .map(|c| (c.processor_customer_id, (c.name, c.email)))
        .collect())
}

/// Every mapping's revenue and cost in `month`, newest mapping first.
pub async fn month_margins(pool: &Pool, org_id: &str, month: Month) -> DbResult<Vec<CustomerMargin>> {
    let mappings = margins::mappings(pool, org_id).await?;
    let names = customer_names(pool, org_id).await?;
    let revenue = processor::revenue_by_customer(pool, org_id, Some(&month.label())).await?;
    let (from, to) = month.bounds_ms();
    let mut costs: HashMap<String, HashMap<String, CostCount>> = HashMap::new();
    for key in mappings.iter().map(|m| m.tag_key.clone()).collect::<BTreeSet<_>>() {
        let by_value = margins::cost_by_tag_value(pool, org_id, &key, from, to).await?;
        costs.insert(key, by_value);
    }
    Ok(mappings
        .into_iter()
        .map(|m| {
            let cost = costs.get(&m.tag_key).and_then(|c| c.get(&m.tag_value)).copied().unwrap_or_default();
            let (name, email) = names.get(&m.processor_customer_id).cloned().unwrap_or_default();
            CustomerMargin {
                revenue: revenue.get(&m.processor_customer_id).copied().unwrap_or(0),
                cost: cost.cost,
                requests: cost.requests,
                name,
                email,
                mapping: m,
            }
        })
        .collect())
}
