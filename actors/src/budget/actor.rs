//! The budget actor: owns the [`BudgetLedger`] of one budget entity, so its mailbox is the
//! one place where that entity's money is decided.
//!
//! The actor is thin on purpose. It loads its row once when it starts (its mailbox paused
//! meanwhile, so no request is decided on a half-loaded state), then answers every message
//! synchronously from memory: the ledger does the rules, the actor adds what a ledger
//! cannot know — which reservations are old enough to be abandoned, when the entity was
//! last used, and where the events of its own timers go.
//!
//! Housekeeping comes from a sweep of the actor's arbiter (see [`sweep_residents`]), not
//! from a timer per actor: a tokio timer costs about 160 bytes per actor and waking 100,000
//! actors every second costs an eighth of a core, while none of this work needs better
//! than seconds of precision. Each sweep:
//! * reaper: a reservation older than `reservation_max_age` belongs to a request that died
//!   without settling or releasing; it is released so budget cannot leak;
//! * ledger tick: an elapsed period rolls and a breaker whose cooldown is over closes, the
//!   events going to the [`EventSink`];
//! * passivation: idle for `idle_timeout` with nothing reserved, the actor deregisters and
//!   stops; the next request starts a fresh one that loads the row again.
//!
//! The one precise timer: while a velocity breaker is open, the actor wakes when its
//! cooldown ends to announce `velocity.recovered` on time.
//!
//! A panic inside a handler kills the actor without a restart (actix closes the mailbox);
//! the registry notices the closed mailbox and starts a new actor, which reloads from
//! storage. Reservations held by the dead actor are lost with it; their settles then
//! count as plain spend, which the ledger is built for.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use actix::fut::{self, ActorFutureExt};
use actix::{Actor, ActorContext, AsyncContext, AtomicResponse, Context, Handler, MessageResult};
use chrono::{DateTime, SecondsFormat};
use serde_json::json;
use tokio::time::MissedTickBehavior;

use super::ledger::{BudgetLedger, LedgerEvent, ReserveRequest};
use super::messages::{
    Admit, CallFingerprint, Expired, Housekeep, RecordSpend, Refresh, Release, Reload, Reserve, Settle,
    SettleBatch, Shrink, Snapshot, Tick, Timed, VelocityState,
};
use crate::registry::{ActorKey, Shared};
use crate::store::{EntityKey, SpendMark, StoreError, StoredBudget};

/// Longest wait between two attempts to re-read a row after a failed [`Refresh`].
const MAX_REFRESH_BACKOFF: Duration = Duration::from_secs(30);
/// Actors visited by a sweep before it yields to the arbiter's other work.
const SWEEP_BATCH: usize = 64;

/// Receives the events an actor produces on its own (a sweep rolled a period, a breaker
/// closed), to turn them into webhooks. Events caused by a message are returned to the
/// sender instead.
pub trait EventSink: Send + Sync + 'static {
    fn publish(&self, key: &EntityKey, budget_id: &str, events: Vec<LedgerEvent>);
}

thread_local! {
    /// The budget actors living on this arbiter thread, for its housekeeping sweep. Each
    /// arbiter thread belongs to one registry.
    static RESIDENTS: RefCell<Residents> = const { RefCell::new(Residents::new()) };
}

/// A slab of the keys of the actors on one arbiter thread: 8 bytes per actor.
struct Residents {
    keys: Vec<Option<ActorKey>>,
    free: Vec<usize>,
}

impl Residents {
    const fn new() -> Self {
        Self { keys: Vec::new(), free: Vec::new() }
    }

    fn insert(&mut self, key: ActorKey) -> usize {
        if let Some(index) = self.free.pop() {
            if let Some(entry) = self.keys.get_mut(index) {
                *entry = Some(key);
                return index;
            }
        }
        self.keys.push(Some(key));
        self.keys.len() - 1
    }

    fn remove(&mut self, index: usize) {
        if let Some(entry) = self.keys.get_mut(index) {
            if entry.take().is_some() {
                self.free.push(index);
            }
        }
    }

    /// Up to `count` keys from `from` on, and where the next batch starts (`None` at the
    /// end).
    fn batch(&self, from: usize, count: usize) -> (Vec<ActorKey>, Option<usize>) {
        let end = from.saturating_add(count).min(self.keys.len());
        let keys = self.keys.get(from..end).unwrap_or_default().iter().flatten().cloned().collect();
        (keys, (end < self.keys.len()).then_some(end))
    }
}

/// Budget actors living on the calling thread.
#[cfg(test)]
pub(crate) fn residents_here() -> usize {
    RESIDENTS.with(|residents| residents.borrow().keys.iter().flatten().count())
}

/// Sends [`Housekeep`] to every budget actor of the current arbiter thread every
/// `interval`, in batches that yield between them, so a sweep never holds up message
/// handling for long. Runs until the registry is gone.
pub(crate) async fn sweep_residents(shared: Weak<Shared>, interval: Duration) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let mut next = Some(0);
        while let Some(from) = next {
            let (keys, following) = RESIDENTS.with(|residents| residents.borrow().batch(from, SWEEP_BATCH));
            next = following;
            let Some(shared) = shared.upgrade() else {
                return;
            };
            for key in &keys {
                if let Some(slot) = shared.actors.get(key) {
                    slot.addr.do_send(Housekeep);
                }
            }
            drop(shared);
            tokio::task::yield_now().await;
        }
    }
}

/// The actor of one budget entity. Started by the [registry](crate::registry::BudgetRegistry).
pub struct BudgetActor {
    /// Shared with the registry's map and the arbiter's residents.
    key: ActorKey,
    /// Tells this actor apart from earlier and later actors of the same key in the registry.
    generation: u64,
    /// Index of the arbiter this actor runs on, for its mailbox statistics.
    arbiter: u32,
    shared: Arc<Shared>,
    /// Load version of the state in force: taken before that state was read.
    version: u64,
    /// `None`: the entity has no budget, everything is admitted. Boxed: an actor without
    /// a budget (most tags, keys and customers) then weighs 500 bytes less.
    budget: Option<Box<LiveBudget>>,
    /// The sweep count at which each open reservation was taken, for the reaper; mirrors
    /// the ledger's open reservations. Allocated at the first reservation: 8 bytes
    /// instead of 48 for the many actors that never reserve.
    #[expect(clippy::box_collection, reason = "most actors never reserve; see above")]
    reserved_at: Option<Box<HashMap<u64, u32>>>,
    /// Housekeeping sweeps seen: the actor's coarse clock, which is all the reaper and
    /// passivation need (a clock read per message would cost more).
    sweeps: u32,
    last_active_sweep: u32,
    /// A message that counts as use arrived since the last sweep.
    active: bool,
    /// Index in the arbiter's residents.
    resident: Option<u32>,
    /// A timer waits for the open breaker's cooldown to end.
    watching_breaker: bool,
    /// A failed [`Refresh`] is being retried.
    retrying_refresh: bool,
}

struct LiveBudget {
    budget_id: Box<str>,
    /// The row's `spend_seq` when it was read: the commits the ledger's spend counts
    /// through storage (later ones are counted by their settles; see [`SpendMark`]).
    spend_seq: i64,
    ledger: BudgetLedger,
}

impl BudgetActor {
    pub(crate) fn new(
        key: ActorKey,
        generation: u64,
        arbiter: u32,
        version: u64,
        shared: Arc<Shared>,
    ) -> Self {
        shared.counters.live.fetch_add(1, Ordering::Relaxed);
        Self {
            key,
            generation,
            arbiter,
            shared,
            version,
            budget: None,
            reserved_at: None,
            sweeps: 0,
            last_active_sweep: 0,
            active: false,
            resident: None,
            watching_breaker: false,
            retrying_refresh: false,
        }
    }

    fn open_reservations(&self) -> usize {
        self.budget.as_ref().map_or(0, |budget| budget.ledger.open_reservations())
    }

    fn track_reservation(&mut self, reservation_id: u64) {
        let sweeps = self.sweeps;
        self.reserved_at.get_or_insert_with(Box::default).insert(reservation_id, sweeps);
    }

    fn untrack_reservation(&mut self, reservation_id: u64) {
        if let Some(reserved_at) = &mut self.reserved_at {
            reserved_at.remove(&reservation_id);
        }
    }

    /// Puts a row read from storage in force (see [`Reload`]).
    fn apply(&mut self, stored: Option<StoredBudget>, version: Option<u64>) {
        if let Some(version) = version {
            if version < self.version {
                tracing::debug!(entity = %self.key, version, applied = self.version, "stale budget reload ignored");
                return;
            }
            self.version = version;
        }
        let now_ms = (self.shared.clock)();
        let Some(stored) = stored else {
            // Deleted: enforcement stops. Reservations in flight are forgotten with the
            // ledger; their settles find no budget and do nothing.
            self.budget = None;
            self.reserved_at = None;
            return;
        };
        match &mut self.budget {
            Some(live) if *live.budget_id == *stored.budget_id => {
                live.spend_seq = stored.spend_seq;
                live.ledger.reconfigure(stored.config, now_ms);
                live.ledger.restore_spend(stored.spend, stored.period_start, now_ms);
            }
            _ => {
                // A new budget (or the entity's budget was deleted and created again): the
                // reservations of another budget do not carry over.
                self.reserved_at = None;
                let ledger = BudgetLedger::new(stored.config, stored.spend, stored.period_start, now_ms);
                self.budget = Some(Box::new(LiveBudget {
                    budget_id: stored.budget_id.into_boxed_str(),
                    spend_seq: stored.spend_seq,
                    ledger,
                }));
            }
        }
    }

    fn housekeep(&mut self, ctx: &mut Context<Self>) {
        self.sweeps = self.sweeps.wrapping_add(1);
        if std::mem::take(&mut self.active) {
            self.last_active_sweep = self.sweeps;
        }
        self.reap_expired();
        self.tick_ledger();
        let idle = self.sweeps.wrapping_sub(self.last_active_sweep);
        if self.open_reservations() == 0 && idle >= self.shared.idle_sweeps {
            self.passivate(ctx);
        }
    }

    /// Rolls an elapsed period and closes a breaker whose cooldown is over, announcing
    /// it through the sink.
    fn tick_ledger(&mut self) {
        if let Some(budget) = &mut self.budget {
            let events = budget.ledger.tick((self.shared.clock)());
            publish(&self.shared, &self.key, &budget.budget_id, events);
        }
    }

    /// Wakes the actor when an open breaker's cooldown ends, so `velocity.recovered` goes
    /// out on time rather than at the next sweep.
    fn watch_breaker(&mut self, open_until: i64, ctx: &mut Context<Self>) {
        if self.watching_breaker {
            return;
        }
        self.watching_breaker = true;
        let remaining_ms = open_until.saturating_sub((self.shared.clock)()).max(0);
        let wait = Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0));
        ctx.run_later(wait, |actor, ctx| {
            actor.watching_breaker = false;
            actor.tick_ledger();
            // Still open (the wall clock lags the timer, or it tripped again): wait more.
            let open_until =
                actor.budget.as_ref().and_then(|budget| budget.ledger.snapshot().breaker_open_until);
            if let Some(open_until) = open_until {
                actor.watch_breaker(open_until, ctx);
            }
        });
    }

    /// Releases reservations whose request must have died: no upstream call outlives
    /// `reservation_max_age`.
    fn reap_expired(&mut self) {
        let Some(reserved_at) = &mut self.reserved_at else {
            return;
        };
        let (sweeps, max_age) = (self.sweeps, self.shared.reservation_max_age_sweeps);
        let expired: Vec<u64> = reserved_at
            .iter()
            .filter(|&(_, &at)| sweeps.wrapping_sub(at) >= max_age)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            reserved_at.remove(&id);
            if let Some(budget) = &mut self.budget {
                budget.ledger.release(id);
            }
            self.shared.counters.reaped.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(entity = %self.key, reservation_id = id, "abandoned reservation released by the reaper");
        }
    }

    fn passivate(&mut self, ctx: &mut Context<Self>) {
        // INVARIANT: deregister *before* stopping. A stopping actor no longer reads its
        // mailbox, so a sender that still holds this address gets `Closed`; the registry
        // then finds another generation (or none) under the key, starts a fresh actor and
        // does not count a failure. Nothing is lost: passivation requires no open
        // reservation, and spend lives in storage.
        let generation = self.generation;
        self.shared.actors.remove_if(&self.key, |_, slot| slot.generation == generation);
        self.shared.counters.passivations.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(entity = %self.key, "idle budget actor passivated");
        ctx.stop();
    }

    /// Applies a row read for a [`Refresh`] (attempt 0) or one of its retries. On a
    /// storage error the state in force stays, and one chain of retries (with backoff)
    /// keeps reading until storage answers.
    fn finish_refresh(
        &mut self,
        result: Result<Option<StoredBudget>, StoreError>,
        version: u64,
        attempt: u32,
        ctx: &mut Context<Self>,
    ) -> Result<(), StoreError> {
        match result {
            Ok(stored) => {
                if attempt > 0 {
                    self.retrying_refresh = false;
                }
                self.apply(stored, Some(version));
                Ok(())
            }
            Err(error) => {
                if attempt > 0 || !self.retrying_refresh {
                    self.retrying_refresh = true;
                    let delay = backoff(self.shared.restart_backoff, attempt, MAX_REFRESH_BACKOFF);
                    tracing::warn!(entity = %self.key, %error, retry_in = ?delay, "budget refresh failed; the previous state stays in force");
                    ctx.run_later(delay, move |actor, ctx| {
                        actor.retry_refresh(attempt.saturating_add(1), ctx)
                    });
                }
                Err(error)
            }
        }
    }

    fn retry_refresh(&mut self, attempt: u32, ctx: &mut Context<Self>) {
        // The retry reads later, so it takes its own (newer) version.
        let version = self.shared.next_load_version();
        let load = self.shared.store.load(&self.key);
        // `wait`, not `spawn`: the mailbox pauses during the read (see `Refresh`).
        ctx.wait(fut::wrap_future::<_, Self>(load).map(move |result, actor, ctx| {
            // Nobody waits for a retry's answer; a failure schedules the next one.
            let _ = actor.finish_refresh(result, version, attempt, ctx);
        }));
    }

    fn note_mailbox_wait(&self, sent_at: Option<Instant>) {
        let Some(sent_at) = sent_at else {
            return;
        };
        if let Some(stats) =
            usize::try_from(self.arbiter).ok().and_then(|arbiter| self.shared.mailbox.get(arbiter))
        {
            stats.record(self.key.entity_type, sent_at.elapsed());
        }
    }

    /// Whether the state in force already counts the spend of a commit: exactly, by the
    /// commit's `mark` on the budget row; without one (the entity had no budget row when
    /// the commit ran, or a caller outside the accounting writer), by the load version.
    fn already_counted(&self, mark: Option<&SpendMark>, committed_version: Option<u64>) -> bool {
        if let (Some(mark), Some(live)) = (mark, &self.budget) {
            return mark.nothing_to_add(&live.budget_id, live.spend_seq);
        }
        // INVARIANT: `self.version` was taken before the state in force was read, and a
        // `committed_version` after the spend was committed; so `committed < version`
        // means the read came after the commit. The converse does not hold (a read that
        // began before the commit may still see it), so this errs towards counting twice.
        committed_version.is_some_and(|committed| committed < self.version)
    }
}

impl Actor for BudgetActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        let key = self.key.clone();
        let index = RESIDENTS.try_with(|residents| residents.borrow_mut().insert(key)).ok();
        self.resident = index.and_then(|index| u32::try_from(index).ok());
        let load = self.shared.store.load(&self.key);
        let version = self.version;
        // `wait` pauses the mailbox until the row is in: messages queue instead of being
        // decided against an empty ledger.
        ctx.wait(fut::wrap_future::<_, Self>(load).map(move |result, actor, ctx| match result {
            Ok(stored) => actor.apply(stored, Some(version)),
            Err(error) => {
                // Stopping without deregistering marks this generation as failed: the
                // registry restarts it on the next request, with backoff if it keeps failing.
                actor.shared.counters.load_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(entity = %actor.key, %error, "budget actor could not load its budget");
                ctx.stop();
            }
        }));
    }
}

impl Drop for BudgetActor {
    fn drop(&mut self) {
        // Runs on a clean stop and when a panic unwinds the actor alike, on its arbiter
        // thread.
        self.shared.counters.live.fetch_sub(1, Ordering::Relaxed);
        if let Some(index) = self.resident.and_then(|index| usize::try_from(index).ok()) {
            let _ = RESIDENTS.try_with(|residents| {
                if let Ok(mut residents) = residents.try_borrow_mut() {
                    residents.remove(index);
                }
            });
        }
    }
}

fn publish(shared: &Shared, key: &EntityKey, budget_id: &str, events: Vec<LedgerEvent>) {
    if events.is_empty() {
        return;
    }
    match &shared.sink {
        Some(sink) => sink.publish(key, budget_id, events),
        None => tracing::debug!(entity = %key, count = events.len(), "budget events dropped: no event sink"),
    }
}

/// `base * 2^attempt`, at most `max` (and at least 10 ms, so a zero base cannot spin).
pub(crate) fn backoff(base: Duration, attempt: u32, max: Duration) -> Duration {
    let factor = 1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX);
    base.saturating_mul(factor).clamp(Duration::from_millis(10), max.max(Duration::from_millis(10)))
}

fn iso_ms(ms: i64) -> Option<String> {
    DateTime::from_timestamp_millis(ms).map(|at| at.to_rfc3339_opts(SecondsFormat::Millis, true))
}

/// The registry's stamped messages: note the mailbox wait, then handle the message itself.
/// One impl per message, not a generic one, so trait resolution stays finite.
macro_rules! timed_handlers {
    ($($message:ty),* $(,)?) => {$(
        impl Handler<Timed<$message>> for BudgetActor {
            type Result = MessageResult<Timed<$message>>;

            fn handle(&mut self, timed: Timed<$message>, ctx: &mut Context<Self>) -> Self::Result {
                self.note_mailbox_wait(timed.sent_at);
                MessageResult(<Self as Handler<$message>>::handle(self, timed.message, ctx).0)
            }
        }
    )*};
}

timed_handlers!(Reserve, Admit, Settle, SettleBatch, Release, Shrink, RecordSpend, Snapshot);

impl Handler<Admit> for BudgetActor {
    type Result = MessageResult<Admit>;

    fn handle(&mut self, admit: Admit, ctx: &mut Context<Self>) -> Self::Result {
        // The caller has given up (or is about to) and answered 503: taking the hold now
        // would keep budget nobody settles until the reaper runs.
        if Instant::now() >= admit.deadline {
            return MessageResult(Err(Expired));
        }
        let MessageResult(result) = <Self as Handler<Reserve>>::handle(self, admit.reserve, ctx);
        MessageResult(Ok(result))
    }
}

impl Handler<SettleBatch> for BudgetActor {
    type Result = MessageResult<SettleBatch>;

    fn handle(&mut self, batch: SettleBatch, _ctx: &mut Context<Self>) -> Self::Result {
        self.active = true;
        let counted = self.already_counted(batch.mark.as_ref(), batch.committed_version);
        let mut events = Vec::new();
        for &(reservation_id, actual) in &batch.settles {
            self.untrack_reservation(reservation_id);
            let Some(budget) = &mut self.budget else {
                continue;
            };
            if counted {
                budget.ledger.release(reservation_id);
            } else {
                events.extend(budget.ledger.settle(reservation_id, actual, batch.now_ms));
            }
        }
        MessageResult(events)
    }
}

impl Handler<Reserve> for BudgetActor {
    type Result = MessageResult<Reserve>;

    fn handle(&mut self, reserve: Reserve, ctx: &mut Context<Self>) -> Self::Result {
        self.active = true;
        let Some(budget) = &mut self.budget else {
            return MessageResult(Ok(None));
        };
        let request = ReserveRequest {
            reservation_id: reserve.reservation_id,
            estimate: reserve.estimate,
            session_id: reserve.session_id.as_deref(),
            finalize: reserve.finalize,
            fingerprint: reserve.fingerprint.as_ref().map(CallFingerprint::borrowed),
            floor: reserve.floor,
        };
        let result = budget.ledger.reserve(&request, reserve.now_ms);
        match &result {
            Ok(_) => self.track_reservation(reserve.reservation_id),
            Err(denial) => {
                if let Some(open_until) = denial.snapshot.breaker_open_until {
                    self.watch_breaker(open_until, ctx);
                }
            }
        }
        MessageResult(result.map(Some))
    }
}

impl Handler<Settle> for BudgetActor {
    type Result = MessageResult<Settle>;

    fn handle(&mut self, settle: Settle, _ctx: &mut Context<Self>) -> Self::Result {
        self.active = true;
        self.untrack_reservation(settle.reservation_id);
        let counted = self.already_counted(None, settle.committed_version);
        let Some(budget) = &mut self.budget else {
            return MessageResult(Vec::new());
        };
        if counted {
            budget.ledger.release(settle.reservation_id);
            return MessageResult(Vec::new());
        }
        MessageResult(budget.ledger.settle(settle.reservation_id, settle.actual, settle.now_ms))
    }
}

impl Handler<Release> for BudgetActor {
    type Result = MessageResult<Release>;

    fn handle(&mut self, release: Release, _ctx: &mut Context<Self>) -> Self::Result {
        self.active = true;
        self.untrack_reservation(release.reservation_id);
        let released =
            self.budget.as_mut().is_some_and(|budget| budget.ledger.release(release.reservation_id));
        MessageResult(released)
    }
}

impl Handler<Shrink> for BudgetActor {
    type Result = MessageResult<Shrink>;

    fn handle(&mut self, shrink: Shrink, _ctx: &mut Context<Self>) -> Self::Result {
        self.active = true;
        let shrunk = self
            .budget
            .as_mut()
            .is_some_and(|budget| budget.ledger.shrink(shrink.reservation_id, shrink.amount));
        MessageResult(shrunk)
    }
}

impl Handler<RecordSpend> for BudgetActor {
    type Result = MessageResult<RecordSpend>;

    fn handle(&mut self, spend: RecordSpend, _ctx: &mut Context<Self>) -> Self::Result {
        self.active = true;
        if self.already_counted(spend.mark.as_ref(), spend.committed_version) {
            return MessageResult(Vec::new());
        }
        let Some(budget) = &mut self.budget else {
            return MessageResult(Vec::new());
        };
        MessageResult(budget.ledger.record_spend(spend.amount, spend.session_id.as_deref(), spend.now_ms))
    }
}

impl Handler<Snapshot> for BudgetActor {
    type Result = MessageResult<Snapshot>;

    fn handle(&mut self, _: Snapshot, _ctx: &mut Context<Self>) -> Self::Result {
        self.active = true;
        MessageResult(self.budget.as_ref().map(|budget| budget.ledger.snapshot()))
    }
}

impl Handler<Reload> for BudgetActor {
    type Result = MessageResult<Reload>;

    fn handle(&mut self, reload: Reload, _ctx: &mut Context<Self>) -> Self::Result {
        self.apply(reload.budget, reload.version);
        MessageResult(())
    }
}

impl Handler<Refresh> for BudgetActor {
    type Result = AtomicResponse<Self, Result<(), StoreError>>;

    fn handle(&mut self, refresh: Refresh, _ctx: &mut Context<Self>) -> Self::Result {
        // INVARIANT: no other message is handled while the row is read (`AtomicResponse`
        // pauses the mailbox, like the first load). A settle handled during the read
        // would raise spend by a commit the read may not see, and applying the row
        // afterwards would put the lower stored spend back: that spend would be lost
        // and the budget over-admitted. Settles queued behind the read are applied after
        // it, each counted once by its commit's mark on the row (see `already_counted`).
        let load = self.shared.store.load(&self.key);
        AtomicResponse::new(Box::pin(
            fut::wrap_future::<_, Self>(load)
                .map(move |result, actor, ctx| actor.finish_refresh(result, refresh.version, 0, ctx)),
        ))
    }
}

impl Handler<Housekeep> for BudgetActor {
    type Result = ();

    fn handle(&mut self, _: Housekeep, ctx: &mut Context<Self>) {
        self.housekeep(ctx);
    }
}

impl Handler<Tick> for BudgetActor {
    type Result = MessageResult<Tick>;

    fn handle(&mut self, tick: Tick, _ctx: &mut Context<Self>) -> Self::Result {
        let events = self.budget.as_mut().map(|budget| budget.ledger.tick(tick.now_ms)).unwrap_or_default();
        MessageResult(events)
    }
}

impl Handler<VelocityState> for BudgetActor {
    type Result = MessageResult<VelocityState>;

    fn handle(&mut self, _: VelocityState, _ctx: &mut Context<Self>) -> Self::Result {
        let now_ms = (self.shared.clock)();
        let state = self.budget.as_ref().and_then(|budget| {
            let status = budget.ledger.velocity_status(now_ms)?;
            Some(json!({
                "entityType": self.key.entity_type,
                "entityId": self.key.entity_id,
                "budgetId": budget.budget_id,
                "velocityLimitMicrodollars": status.limit,
                "velocityWindowSeconds": status.window_ms / 1_000,
                "velocityCooldownSeconds": status.cooldown_ms / 1_000,
                "windowSpendMicrodollars": status.window_spend,
                "currentMicrodollars": status.current,
                "breakerOpen": status.breaker_open_until.is_some(),
                "breakerOpenUntil": status.breaker_open_until.and_then(iso_ms),
            }))
        });
        MessageResult(state)
    }
}

#[cfg(test)]
impl Handler<super::messages::Panic> for BudgetActor {
    type Result = MessageResult<super::messages::Panic>;

    fn handle(&mut self, _: super::messages::Panic, _ctx: &mut Context<Self>) -> Self::Result {
        panic!("test-only panic inside a budget actor handler");
    }
}
