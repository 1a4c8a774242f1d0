//! The webhook endpoint actor: owns one endpoint's delivery queue on this instance.
//!
//! It drains the endpoint's due deliveries (woken after every commit that queued
//! some, and every `webhook_poll_ms` for retries), a few calls at a time, one drain
//! at a time: its mailbox is the only place that endpoint's queue is worked on, so a
//! slow or dead endpoint only ever delays itself. Its state is the database rows, so
//! a restart (of the actor or the process) resumes where the last recorded attempt
//! left off; an attempt in flight at a crash is made again (a duplicate receivers
//! drop by event id).

use std::sync::Arc;

use actix::prelude::*;
use futures_util::StreamExt;

use crate::webhooks::deliver::{self, Deps};

/// Deliveries loaded per drain round.
const BATCH: i64 = 64;
/// Calls in flight per endpoint.
const PARALLEL: usize = 8;

pub struct EndpointActor {
    endpoint_id: String,
    deps: Arc<Deps>,
    client: Option<awc::Client>,
    busy: bool,
    /// A wake-up arrived during a drain: drain again after it.
    again: bool,
}

impl EndpointActor {
    pub fn new(endpoint_id: String, deps: Arc<Deps>) -> Self {
        EndpointActor { endpoint_id, deps, client: None, busy: false, again: false }
    }
}

impl Actor for EndpointActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.client = Some(crate::webhooks::send::client(self.deps.dev, self.deps.settings.timeout));
        ctx.run_interval(self.deps.settings.poll, |_, ctx| ctx.notify(Drain));
        let mut wake = self.deps.outbox.subscribe_wake();
        let addr = ctx.address();
        ctx.spawn(
            async move {
                while wake.changed().await.is_ok() {
                    if addr.try_send(Drain).is_err() && !addr.connected() {
                        break;
                    }
                }
            }
            .into_actor(self),
        );
        ctx.notify(Drain);
    }
}

/// Look for due deliveries and send them.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Drain;

/// The endpoint was deleted or disabled, or another instance delivers it now.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Stop;

impl Handler<Stop> for EndpointActor {
    type Result = ();

    fn handle(&mut self, _: Stop, ctx: &mut Context<Self>) {
        ctx.stop();
    }
}

impl Handler<Drain> for EndpointActor {
    type Result = ();

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) {
        if self.busy {
            self.again = true;
            return;
        }
        let Some(client) = self.client.clone() else { return };
        self.busy = true;
        let round = drain(self.deps.clone(), client, self.endpoint_id.clone());
        ctx.spawn(round.into_actor(self).map(|more, act, ctx| {
            act.busy = false;
            if more || std::mem::take(&mut act.again) {
                ctx.notify(Drain);
            }
        }));
    }
}

/// One round: up to [`BATCH`] due deliveries; true when there may be more.
async fn drain(deps: Arc<Deps>, client: awc::Client, endpoint_id: String) -> bool {
    let now = crate::util::time::now_ms();
    let endpoint = match crate::db::webhooks::by_id(&deps.pool, &endpoint_id).await {
        Ok(Some(e)) if e.enabled => e,
        Ok(_) => return false,
        Err(e) => {
            tracing::warn!(error = %e, endpoint = %endpoint_id, "webhook queue unavailable; retrying");
            return false;
        }
    };
    let due = match crate::db::webhooks::due(&deps.pool, &endpoint_id, now, BATCH).await {
        Ok(due) => due,
        Err(e) => {
            tracing::warn!(error = %e, endpoint = %endpoint_id, "webhook queue unavailable; retrying");
            return false;
        }
    };
    let full = i64::try_from(due.len()).unwrap_or(0) == BATCH;
    let (deps, client, endpoint) = (&deps, &client, &endpoint);
    futures_util::stream::iter(due)
        .for_each_concurrent(PARALLEL, |(delivery, row)| async move {
            if let Err(e) = deliver::attempt(deps, client, endpoint, delivery, row).await {
                tracing::warn!(error = %e, endpoint = %endpoint.id, "could not record a webhook attempt");
            }
        })
        .await;
    full
}
