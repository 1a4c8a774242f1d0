//! Webhook delivery: one [`actor::EndpointActor`] per enabled endpoint that this
//! instance holds the lease of.
//!
//! The supervisor here runs every third of the lease period: it takes or renews
//! the lease of every enabled endpoint (`webhook_leases`; when several instances
//! share a PostgreSQL database, exactly one holds each endpoint, and an instance
//! that dies loses its leases when they expire), starts the actors of the endpoints
//! it holds on the webhook arbiter, stops the others, refreshes the failing-endpoint
//! gauge, and prunes finished deliveries and their outbox rows past the retention
//! period.

pub mod actor;
pub mod deliver;
pub mod envelope;
pub mod schedule;
pub mod send;
pub mod sign;
pub mod target;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, Addr, ArbiterHandle};

use crate::util::time;
use actor::{EndpointActor, Stop};
pub use deliver::Deps;

/// How often finished deliveries are pruned.
const PRUNE_EVERY_MS: i64 = 60_000;

/// Starts the supervisor (and the webhook arbiter) for the endpoints whose lease
/// `instance_id` takes. Must run inside the actix system.
pub fn start(deps: Deps, instance_id: String) {
    let arbiter = actix::Arbiter::new();
    let handle = arbiter.handle();
    let deps = Arc::new(deps);
    tokio::spawn(async move {
        // The arbiter lives as long as the supervisor.
        let _arbiter = arbiter;
        supervise(&instance_id, handle, deps).await;
    });
}

async fn supervise(instance_id: &str, arbiter: ArbiterHandle, deps: Arc<Deps>) {
    let lease_ms = i64::try_from(deps.settings.lease.as_millis()).unwrap_or(i64::MAX);
    let mut tick = tokio::time::interval((deps.settings.lease / 3).max(Duration::from_millis(50)));
    let mut actors: HashMap<String, Addr<EndpointActor>> = HashMap::new();
    let mut last_prune = 0;
    loop {
        tick.tick().await;
        let now = time::now_ms();
        match crate::db::webhooks::enabled(&deps.pool).await {
            Ok(enabled) => {
                let failing = enabled.iter().filter(|(_, since)| since.is_some()).count();
                deps.metrics.webhook_endpoints_failing.set(i64::try_from(failing).unwrap_or(i64::MAX));
                let ids: HashSet<&String> = enabled.iter().map(|(id, _)| id).collect();
                actors.retain(|id, addr| {
                    let keep = ids.contains(id) && addr.connected();
                    if !keep {
                        addr.do_send(Stop);
                    }
                    keep
                });
                for (id, _) in &enabled {
                    match crate::db::webhooks::claim_lease(&deps.pool, id, instance_id, now, lease_ms).await {
                        Ok(true) => {
                            if !actors.contains_key(id) {
                                let (id2, deps2) = (id.clone(), deps.clone());
                                let addr = EndpointActor::start_in_arbiter(&arbiter, move |_| {
                                    EndpointActor::new(id2, deps2)
                                });
                                actors.insert(id.clone(), addr);
                            }
                        }
                        Ok(false) => {
                            if let Some(addr) = actors.remove(id) {
                                addr.do_send(Stop);
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, endpoint = %id, "webhook lease unavailable"),
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "webhook endpoints unavailable; retrying"),
        }
        if now - last_prune >= PRUNE_EVERY_MS {
            last_prune = now;
            let retention = i64::try_from(deps.settings.retention.as_millis()).unwrap_or(i64::MAX);
            match crate::db::webhooks::prune(&deps.pool, now.saturating_sub(retention)).await {
                Ok((0, 0)) => {}
                Ok((deliveries, rows)) => tracing::info!(deliveries, rows, "pruned delivered webhook events"),
                Err(e) => tracing::warn!(error = %e, "webhook pruning failed; retrying"),
            }
        }
    }
}
