//! What an operator needs to know about the price table: its size, when its prices were
//! last checked, and the models recently charged at the unknown-model price that it still
//! does not know. Shared by `spendgate pricing check` and `GET /v1/policy`.

use serde::Serialize;

use crate::db::models::RuntimePrice;
use crate::db::unpriced::{self, UnpricedModel};
use crate::db::{DbResult, Pool};
use crate::util::{ids, time};
use spendgate_llm::pricing::{PricingTable, Provider};

/// How far back "recently seen" looks.
pub const RECENT_DAYS: i64 = 7;

const DAY_MS: i64 = 86_400_000;

/// The report; serialised as the `pricing` object of the policy document.
#[derive(Debug, Clone, Serialize)]
pub struct PricingReport {
    /// Models in the table (built in and the operator's file).
    pub models: usize,
    /// The day the built-in prices were last checked (`YYYY-MM-DD`).
    pub checked_at: Option<String>,
    /// Whole days since then.
    pub age_days: Option<i64>,
    /// The window of `unpriced_models`, in days.
    pub window_days: i64,
    /// Models charged at the unknown-model price in the window that the table still
    /// does not know, most recently seen first. For one organization, the models its
    /// runtime prices cover are left out too.
    pub unpriced_models: Vec<UnpricedEntry>,
    /// Prices set at run time (`PUT /api/model-prices/...`): the organization's own,
    /// or every organization's; absent when there are none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub runtime_prices: Vec<RuntimeEntry>,
}

/// One price set at run time, in µ$ per million tokens.
#[derive(Debug, Clone, Serialize)]
pub struct RuntimeEntry {
    pub org_id: String,
    pub provider: String,
    pub model: String,
    pub input: i64,
    pub output: i64,
    pub updated_at: String,
}

impl From<RuntimePrice> for RuntimeEntry {
    fn from(r: RuntimePrice) -> Self {
        RuntimeEntry {
            org_id: ids::prefixed(ids::ORG, &r.org_id),
            provider: r.provider,
            model: r.model,
            input: r.input,
            output: r.output,
            updated_at: time::iso(r.updated_at),
        }
    }
}

/// One unknown model.
#[derive(Debug, Clone, Serialize)]
pub struct UnpricedEntry {
    pub provider: String,
    pub model: String,
    pub calls: i64,
    pub last_seen: Option<String>,
}

/// Builds the report for one organization, or for all of them (`org_id: None`).
///
/// # Errors
///
/// The database could not be read.
pub async fn report(
    pool: &Pool,
    table: &PricingTable,
    org_id: Option<&str>,
    now_ms: i64,
) -> DbResult<PricingReport> {
    let since = now_ms.saturating_sub(RECENT_DAYS.saturating_mul(DAY_MS));
    let seen = unpriced::recent(pool, org_id, since).await?;
    let runtime = match org_id {
        Some(org) => crate::db::model_prices::list(pool, org).await?,
        None => crate::db::model_prices::list_all(pool).await?,
    };
    let mut unpriced_models = still_unpriced(table, seen);
    if org_id.is_some() {
        unpriced_models.retain(|m| !runtime.iter().any(|r| r.provider == m.provider && r.model == m.model));
    }
    Ok(PricingReport {
        models: table.len(),
        checked_at: table.checked_at().map(str::to_owned),
        age_days: table.checked_at().and_then(|d| age_days(d, now_ms)),
        window_days: RECENT_DAYS,
        unpriced_models,
        runtime_prices: runtime.into_iter().map(RuntimeEntry::from).collect(),
    })
}

/// The entries the table still cannot price (an operator's file may have added some).
fn still_unpriced(table: &PricingTable, seen: Vec<UnpricedModel>) -> Vec<UnpricedEntry> {
    seen.into_iter()
        .filter(|m| Provider::from_name(&m.provider).is_none_or(|p| table.lookup_in(p, &m.model).is_none()))
        .map(|m| UnpricedEntry {
            provider: m.provider,
            model: m.model,
            calls: m.calls,
            last_seen: time::iso_opt(m.last_seen_ms),
        })
        .collect()
}

/// Whole days from `date` (`YYYY-MM-DD`) to `now_ms`; `None` for a malformed date.
fn age_days(date: &str, now_ms: i64) -> Option<i64> {
    let day = chrono::NaiveDate::parse_from_str(date, "%Y-%m-%d").ok()?;
    let start = day.and_hms_opt(0, 0, 0)?.and_utc().timestamp_millis();
    Some(now_ms.saturating_sub(start).div_euclid(DAY_MS))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn age_is_in_whole_days() {
        let start = time::parse_iso("2026-11-20T00:00:00Z").unwrap();
        assert_eq!(age_days("2026-11-20", start), Some(0));
        assert_eq!(age_days("2026-11-20", start + DAY_MS - 1), Some(0));
        assert_eq!(age_days("2026-11-20", start + 3 * DAY_MS), Some(3));
        assert_eq!(age_days("20-11-2026", start), None);
    }

    #[test]
    fn models_the_table_now_prices_are_dropped() {
        let table = PricingTable::builtin().unwrap();
        let row = |provider: &str, model: &str| UnpricedModel {
            provider: provider.into(),
            model: model.into(),
            calls: 1,
            last_seen_ms: Some(0),
        };
        let left = still_unpriced(
            &table,
            vec![row("openai", "gpt-99"), row("openai", "gpt-4o"), row("mistral", "x")],
        );
        let names: Vec<&str> = left.iter().map(|e| e.model.as_str()).collect();
        assert_eq!(names, ["gpt-99", "x"]);
        assert_eq!(left[0].last_seen.as_deref(), Some("1970-01-01T00:00:00.000Z"));
    }
}
