//! One organization's revenue sync: fetch customers, paid invoices, credit notes and
//! refunds of the last twelve months from the processor, rewrite the revenue items,
//! auto-match new customers, then announce worsened health tiers of this month.

use crate::outbox::Outbox;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use serde_json::json;

use crate::config::Config;
use crate::crypto;
use crate::db::margins::{self, Mapping, TierKey};
use crate::db::{processor as store, DbError, Pool};
use crate::processor::{ProcessorClient, ProcessorError};
use crate::util::{ids, time};

use super::health::Tier;
use super::months::Month;
use super::report::{self, CustomerMargin};
use super::{matching, revenue};

/// Months of history each sync reads (this one included).
pub const SYNC_MONTHS: usize = 12;
/// The tag whose values auto-matching looks at.
pub const CUSTOMER_TAG: &str = "customer";
pub const THRESHOLD_EVENT: &str = "margin.threshold_crossed";

/// The manual response of `GET /api/payprocessor/revenue-sync`.
#[derive(Debug, Default, Clone, serde::Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncReport {
    pub org_id: String,
    pub customers_processed: i64,
    pub periods_updated: i64,
    pub auto_matches_created: i64,
    pub invoices_fetched: i64,
    pub invoices_skipped: i64,
    pub skipped_currencies: BTreeMap<String, i64>,
    pub duration_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    #[error("no processor connection")]
    NotConnected,
    #[error("secret_key is not configured or does not decrypt the stored processor key")]
    Secret,
    #[error(transparent)]
    Processor(#[from] ProcessorError),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// Syncs one organization and records the outcome on its connection.
pub async fn sync_org(
    pool: &Pool,
    outbox: &Outbox,
    config: &Config,
    org_id: &str,
) -> Result<SyncReport, SyncError> {
    let started = Instant::now();
    let result = run(pool, outbox, config, org_id).await;
    let now = time::now_ms();
    match &result {
        Ok(r) => store::record_sync(pool, org_id, now, None, &r.skipped_currencies).await?,
        Err(SyncError::NotConnected) => {}
        Err(e) => store::record_sync(pool, org_id, now, Some(&e.to_string()), &BTreeMap::new()).await?,
    }
    result.map(|mut r| {
        r.duration_ms = i64::try_from(started.elapsed().as_millis()).unwrap_or(i64::MAX);
        r
    })
}

async fn run(pool: &Pool, outbox: &Outbox, config: &Config, org_id: &str) -> Result<SyncReport, SyncError> {
    let conn = store::connection(pool, org_id).await?.ok_or(SyncError::NotConnected)?;
    let secret = config.secret_key.as_deref().ok_or(SyncError::Secret)?;
    let key = crypto::decrypt(secret, org_id, &conn.key_ciphertext).map_err(|_| SyncError::Secret)?;
    let client = ProcessorClient::new(&config.processor_url, &key);
    let now = time::now_ms();
    let from = Month::of_ms(now).trailing(SYNC_MONTHS)[0].start_ms() / 1000;
    let to = now / 1000 + 1;

    let customers = client.customers().await?;
    let invoices = client.paid_invoices(from, to).await?;
    let credit_notes = client.credit_notes(from, to).await?;
    let refunds = client.refunds(from, to).await?;

    // Each write checks the connection is still the one this sync read: after a
    // disconnect (or a reconnect) the sync stops and leaves nothing behind.
    if !store::upsert_customers(pool, org_id, &conn.id, &customers, now).await? {
        return Err(SyncError::NotConnected);
    }
    let known = store::known_invoices(pool, org_id).await?;
    let converted = revenue::convert(&invoices, &credit_notes, &refunds, &known);
    let periods = store::upsert_items(pool, org_id, &conn.id, &converted.items)
        .await?
        .ok_or(SyncError::NotConnected)?;
    let auto = auto_match(pool, org_id, &conn.id, &customers, now).await?;
    announce_worsened(pool, outbox, org_id, &conn.id, Month::of_ms(now), now).await?;
    Ok(SyncReport {
        org_id: ids::prefixed(ids::ORG, org_id),
        customers_processed: i64::try_from(customers.len()).unwrap_or(i64::MAX),
        periods_updated: i64::try_from(periods).unwrap_or(i64::MAX),
        auto_matches_created: auto,
        invoices_fetched: i64::try_from(invoices.len()).unwrap_or(i64::MAX),
        invoices_skipped: converted.invoices_skipped,
        skipped_currencies: converted.skipped_currencies,
        duration_ms: 0,
    })
}

/// Creates auto mappings for unmapped customers whose identity matches an unmapped
/// `customer` tag value seen in cost events (rule: `matching`).
async fn auto_match(
    pool: &Pool,
    org_id: &str,
    connection_id: &str,
    customers: &[crate::processor::types::Customer],
    now: i64,
) -> Result<i64, SyncError> {
    let existing = margins::mappings(pool, org_id).await?;
    let mapped = existing.iter().filter(|m| m.tag_key == CUSTOMER_TAG);
    let mapped_customers: BTreeSet<&str> = mapped.clone().map(|m| m.processor_customer_id.as_str()).collect();
    let mapped_values: BTreeSet<&str> = mapped.map(|m| m.tag_value.as_str()).collect();
    let seen = margins::cost_by_tag_value(pool, org_id, CUSTOMER_TAG, i64::MIN, i64::MAX).await?;
    let values: BTreeSet<String> = seen.into_keys().filter(|v| !mapped_values.contains(v.as_str())).collect();
    let candidates: Vec<_> =
        customers.iter().filter(|c| !mapped_customers.contains(c.id.as_str())).cloned().collect();
    let mut created = 0;
    for m in matching::auto_matches(&candidates, &values) {
        let row = Mapping {
            id: ids::new_id(),
            org_id: org_id.to_owned(),
            processor_customer_id: m.processor_customer_id,
            tag_key: CUSTOMER_TAG.to_owned(),
            tag_value: m.tag_value,
            match_type: "auto".to_owned(),
            confidence: Some(m.confidence),
            created_at: now,
        };
        if margins::insert_auto(pool, connection_id, &row).await? {
            created += 1;
        }
    }
    Ok(created)
}

/// Records this month's tier of every mapped customer; a worsening writes
/// `margin.threshold_crossed` once (see `db::margins::record_tier`).
async fn announce_worsened(
    pool: &Pool,
    outbox: &Outbox,
    org_id: &str,
    connection_id: &str,
    month: Month,
    now: i64,
) -> Result<(), SyncError> {
    let period = month.label();
    for cm in report::month_margins(pool, org_id, month).await? {
        let tier = cm.tier();
        let current = cm.percent().map(|p| p / 100.0);
        let key = TierKey {
            org_id,
            connection_id,
            processor_customer_id: &cm.mapping.processor_customer_id,
            tag_key: &cm.mapping.tag_key,
            period: &period,
        };
        let event = |previous: &str, previous_margin: Option<f64>| {
            let previous = Tier::parse(previous)?;
            previous
                .worsens_to(tier)
                .then(|| enqueue_threshold_crossed(org_id, &cm, previous, previous_margin, &period, now))
        };
        margins::record_tier(pool, outbox, &key, (tier.as_str(), current), now, event).await?;
    }
    Ok(())
}

/// The outbox row of `margin.threshold_crossed` (written by `outbox::enqueue!`, so
/// only when an endpoint subscribes).
fn enqueue_threshold_crossed(
    org_id: &str,
    cm: &CustomerMargin,
    previous: Tier,
    previous_margin: Option<f64>,
    period: &str,
    now: i64,
) -> crate::db::models::OutboxEvent {
    let object = json!({
        "customer": { "processorId": cm.mapping.processor_customer_id, "name": cm.name, "tagValue": cm.mapping.tag_value },
        "margin": {
            "previous": previous_margin,
            "current": cm.percent().map(|p| p / 100.0),
            "previousTier": previous.as_str(),
            "currentTier": cm.tier().as_str(),
        },
        "revenue_microdollars": cm.revenue,
        "cost_microdollars": cm.cost,
        "period": period,
    });
    crate::db::cost_events::outbox_event(org_id, THRESHOLD_EVENT, object, now)
}
