//! The scheduled revenue sync inside the service, so a self-hosted install needs no
//! external cron. Every `revenue_sync_interval` one process syncs every connected
//! organization on a paid tier. Processes sharing a database take turns through a
//! lease row (`sync_leases`) that expires: whoever holds the unexpired lease syncs,
//! the others skip that round.

use crate::outbox::Outbox;
use std::time::Duration;

use crate::config::Config;
use crate::db::{orgs, processor as store, Pool};
use crate::plans::Plan;
use crate::util::time;

const LEASE: &str = "revenue-sync";

/// How one round over every connected organization went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Round {
    pub synced: i64,
    pub errors: i64,
}

/// Syncs every connected organization on a paid tier, one after the other.
pub async fn sync_all(pool: &Pool, outbox: &Outbox, config: &Config) -> Round {
    let mut round = Round::default();
    let orgs = match store::connected_orgs(pool).await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error = %e, "revenue sync: cannot list connections");
            round.errors += 1;
            return round;
        }
    };
    for org_id in orgs {
        let paid =
            matches!(orgs::find(pool, &org_id).await, Ok(Some(o)) if o.plan.parse().is_ok_and(Plan::is_paid));
        if !paid {
            continue;
        }
        match super::sync::sync_org(pool, outbox, config, &org_id).await {
            Ok(_) => round.synced += 1,
            Err(e) => {
                tracing::warn!(org_id, error = %e, "revenue sync failed");
                round.errors += 1;
            }
        }
    }
    round
}

/// Starts the periodic sync on the current actix arbiter (the processor client is
/// not `Send`). Does nothing when the interval is off.
pub fn start(pool: Pool, outbox: Outbox, config: Config, instance_id: String) {
    let Some(every) = config.revenue_sync_interval else { return };
    actix_web::rt::spawn(async move {
        let mut tick = actix_web::rt::time::interval_at(actix_web::rt::time::Instant::now() + every, every);
        // The lease outlives a round a little so a slow round is not joined by another instance.
        let ttl_ms = i64::try_from((every + Duration::from_secs(60)).as_millis()).unwrap_or(i64::MAX);
        loop {
            tick.tick().await;
            match store::try_lease(&pool, LEASE, &instance_id, time::now_ms(), ttl_ms).await {
                Ok(true) => {
                    let round = sync_all(&pool, &outbox, &config).await;
                    tracing::info!(synced = round.synced, errors = round.errors, "scheduled revenue sync");
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "revenue sync lease unavailable"),
            }
        }
    });
}
