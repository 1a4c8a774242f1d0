//! The event outbox: the one way an event is queued for webhook delivery.
//!
//! [`enqueue!`] writes, in the caller's transaction, each outbox row that some
//! enabled endpoint of its organization subscribes to, together with one pending
//! delivery per such endpoint; a row nobody subscribes to is not written at all.
//! Endpoint actors (`crate::webhooks`) drain their deliveries; delivered rows are
//! pruned after the retention period.
//!
//! Who subscribes to what is cached per organization ([`Outbox`]): webhook changes
//! on this instance invalidate the entry at once; other instances see a change
//! within [`SUBSCRIPTION_TTL`].

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use crate::db::models::{OutboxEvent, WebhookDelivery};

/// How long another instance's webhook change may go unseen by this one.
pub const SUBSCRIPTION_TTL: Duration = Duration::from_secs(2);

/// One enabled endpoint and the kinds it wants (`None` = every kind).
#[derive(Debug, Clone)]
pub struct Subscriber {
    pub endpoint_id: String,
    pub event_types: Option<HashSet<String>>,
}

impl Subscriber {
    /// From the stored row: `event_types` is a JSON array, `[]` meaning every kind.
    pub fn from_row(endpoint_id: String, event_types: &str) -> Self {
        let kinds: Vec<String> = serde_json::from_str(event_types).unwrap_or_default();
        let event_types = (!kinds.is_empty()).then(|| kinds.into_iter().collect());
        Subscriber { endpoint_id, event_types }
    }

    pub fn wants(&self, event_type: &str) -> bool {
        self.event_types.as_ref().is_none_or(|k| k.contains(event_type))
    }
}

/// The subscription cache and the wake-up signal of the endpoint actors.
#[derive(Clone)]
pub struct Outbox {
    cache: moka::sync::Cache<String, Arc<Vec<Subscriber>>>,
    wake: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for Outbox {
    fn default() -> Self {
        Self::new()
    }
}

impl Outbox {
    pub fn new() -> Self {
        let cache = moka::sync::Cache::builder().max_capacity(100_000).time_to_live(SUBSCRIPTION_TTL).build();
        Outbox { cache, wake: Arc::new(tokio::sync::watch::channel(0).0) }
    }

    /// The cached subscribers of an organization, if known.
    pub fn cached(&self, org_id: &str) -> Option<Arc<Vec<Subscriber>>> {
        self.cache.get(org_id)
    }

    /// Whether an organization may have a subscriber for `event_type`: `false` only
    /// when its cached subscribers are known and none wants it (an outbox row of that
    /// kind would queue nothing). Not cached: `true`, and the enqueue reads them.
    pub fn may_want(&self, org_id: &str, event_type: &str) -> bool {
        self.cached(org_id).is_none_or(|subs| subs.iter().any(|s| s.wants(event_type)))
    }

    /// Caches an organization's subscribers as read from storage (endpoint id,
    /// stored `event_types`).
    pub fn fill(&self, org_id: &str, rows: Vec<(String, String)>) -> Arc<Vec<Subscriber>> {
        let subs: Arc<Vec<Subscriber>> =
            Arc::new(rows.into_iter().map(|(id, kinds)| Subscriber::from_row(id, &kinds)).collect());
        self.cache.insert(org_id.to_owned(), subs.clone());
        subs
    }

    /// Forgets an organization's subscribers (an endpoint was created, changed or
    /// deleted).
    pub fn invalidate(&self, org_id: &str) {
        self.cache.invalidate(org_id);
    }

    /// Tells the endpoint actors that new deliveries were committed.
    pub fn wake(&self) {
        self.wake.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn subscribe_wake(&self) -> tokio::sync::watch::Receiver<u64> {
        self.wake.subscribe()
    }
}

/// The pending deliveries of `row`, one per subscriber that wants its kind.
pub fn deliveries_for(row: &OutboxEvent, subscribers: &[Subscriber]) -> Vec<WebhookDelivery> {
    subscribers
        .iter()
        .filter(|s| s.wants(&row.event_type))
        .map(|s| WebhookDelivery {
            id: crate::util::ids::new_id(),
            endpoint_id: s.endpoint_id.clone(),
            outbox_id: row.id.clone(),
            event_type: row.event_type.clone(),
            status: "pending".to_owned(),
            attempts: 0,
            next_attempt_at: row.created_at,
            last_attempt_at: None,
            response_status: None,
            last_error: None,
            created_at: row.created_at,
        })
        .collect()
}

/// Queues outbox rows (`Vec<OutboxEvent>`) in the caller's transaction:
/// `enqueue!(conn, outbox, rows)` on an async connection (`diesel_async::RunQueryDsl`
/// in scope), `enqueue!(conn, outbox, rows, sync)` on a synchronous one
/// (`diesel::RunQueryDsl` in scope). Writes each row some enabled endpoint of its
/// organization subscribes to, and its deliveries; evaluates to the number of
/// deliveries written. Build a row with `db::cost_events::outbox_event(org id, event
/// type, data.object JSON, now)`.
#[macro_export]
macro_rules! enqueue {
    ($conn:expr, $outbox:expr, $rows:expr) => {
        $crate::enqueue!(@run $conn, $outbox, $rows, .await)
    };
    ($conn:expr, $outbox:expr, $rows:expr, sync) => {
        $crate::enqueue!(@run $conn, $outbox, $rows,)
    };
    (@run $conn:expr, $outbox:expr, $rows:expr, $($aw:tt)*) => {{
        use diesel::{ExpressionMethods as _, QueryDsl as _};
        use $crate::db::schema::{event_outbox, webhook_deliveries, webhook_endpoints};
        let outbox: &$crate::outbox::Outbox = $outbox;
        let rows: Vec<$crate::db::models::OutboxEvent> = $rows;
        let mut written = 0usize;
        for row in &rows {
            let subscribers = match outbox.cached(&row.org_id) {
                Some(s) => s,
                None => {
                    let found: Vec<(String, String)> = webhook_endpoints::table
                        .filter(webhook_endpoints::org_id.eq(&row.org_id))
                        .filter(webhook_endpoints::enabled.eq(true))
                        .select((webhook_endpoints::id, webhook_endpoints::event_types))
                        .load($conn) $($aw)* ?;
                    outbox.fill(&row.org_id, found)
                }
            };
            let deliveries = $crate::outbox::deliveries_for(row, &subscribers);
            if deliveries.is_empty() {
                continue;
            }
            diesel::insert_into(event_outbox::table).values(row).execute($conn) $($aw)* ?;
            for d in &deliveries {
                diesel::insert_into(webhook_deliveries::table).values(d).execute($conn) $($aw)* ?;
            }
            written += deliveries.len();
        }
        written
    }};
}
pub use enqueue;

/// Queues rows in a transaction of their own (events not tied to another write),
/// then wakes the endpoint actors.
pub async fn enqueue_now(
    pool: &crate::db::Pool,
    outbox: &Outbox,
    rows: Vec<OutboxEvent>,
) -> crate::db::DbResult<()> {
    let written = crate::with_tx!(pool, |conn| {
        use diesel_async::RunQueryDsl;
        Ok(enqueue!(conn, outbox, rows))
    })?;
    if written > 0 {
        outbox.wake();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(kind: &str) -> OutboxEvent {
        crate::db::cost_events::outbox_event("org", kind, serde_json::json!({}), 5)
    }

    #[test]
    fn only_subscribers_of_the_kind_get_a_delivery() {
        let subs = vec![
            Subscriber::from_row("all".into(), "[]"),
            Subscriber::from_row("budget".into(), r#"["budget.exceeded"]"#),
        ];
        let d = deliveries_for(&row("budget.exceeded"), &subs);
        assert_eq!(d.iter().map(|d| d.endpoint_id.as_str()).collect::<Vec<_>>(), ["all", "budget"]);
        let d = deliveries_for(&row("cost_event.created"), &subs);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].status, "pending");
        assert_eq!(d[0].next_attempt_at, 5);
        assert!(deliveries_for(&row("cost_event.created"), &subs[1..]).is_empty());
        assert!(deliveries_for(&row("x"), &[]).is_empty());
    }
}
