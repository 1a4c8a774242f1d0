//! The messages a [`BudgetActor`](super::BudgetActor) answers. Every handler is synchronous:
//! it decides in memory and returns, so no other message can interleave with a decision
//! (see the "Actor pitfall" in the design notes). Storage is read only when the actor
//! starts and on [`Refresh`], and applying what was read is itself one synchronous step.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Instant;

use actix::Message;

use super::ledger::{Admission, BudgetSnapshot, Denial, Fingerprint, LedgerEvent};
use crate::store::{SpendMark, StoredBudget};

/// What identifies "the same call" for loop detection, owned so it can cross threads.
/// The strings are shared, so sending one reservation to several entities copies nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallFingerprint {
    pub provider: Arc<str>,
    pub model: Arc<str>,
    /// Content hash computed by the proxy; it never leaves the ledger.
    pub hash: u64,
}

impl CallFingerprint {
    pub(crate) fn borrowed(&self) -> Fingerprint<'_> {
        Fingerprint { provider: &self.provider, model: &self.model, hash: self.hash }
    }
}

/// Holds an estimate before an upstream call. `Ok(None)`: the entity has no budget and
/// admits everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserve {
    /// From [`BudgetRegistry::next_reservation_id`](crate::registry::BudgetRegistry::next_reservation_id);
    /// the same id is used on every entity of one request.
    pub reservation_id: u64,
    /// Estimated cost in microdollars.
    pub estimate: i64,
    pub session_id: Option<Arc<str>>,
    /// `X-Service-Finalize: 1`.
    pub finalize: bool,
    pub fingerprint: Option<CallFingerprint>,
    pub now_ms: i64,
    /// See [`ReserveRequest::floor`](super::ReserveRequest::floor).
    pub floor: Option<i64>,
}

impl Message for Reserve {
    type Result = Result<Option<Admission>, Denial>;
}

/// Settles a reservation to its actual cost, which the caller has already committed to
/// storage. Returns the events to announce (thresholds crossed, a period roll).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settle {
    pub reservation_id: u64,
    pub actual: i64,
    pub now_ms: i64,
    /// A [load version](crate::registry::BudgetRegistry::load_version) taken after the
    /// cost was committed. An actor whose state was loaded from storage after that already
    /// counts the cost, so it only drops the reservation. `None` always counts it.
    pub committed_version: Option<u64>,
}

impl Message for Settle {
    type Result = Vec<LedgerEvent>;
}

/// Settles many reservations at once: the calls of one accounting commit, whose costs
/// are already in storage. One message per entity per commit, however many calls it
/// held. Returns the events to announce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SettleBatch {
    /// `(reservation_id, actual)` per call.
    pub settles: Vec<(u64, i64)>,
    /// When the commit happened: the settles count in the period storage counted them in.
    pub now_ms: i64,
    /// As in [`Settle::committed_version`]; only used without a `mark`.
    pub committed_version: Option<u64>,
    /// The commit's spend on this entity's budget row, when it had one: decides exactly
    /// whether the state in force already counts it (see [`SpendMark`]).
    pub mark: Option<SpendMark>,
}

impl Message for SettleBatch {
    type Result = Vec<LedgerEvent>;
}

/// Drops a reservation without spend (the call never happened or its request died).
/// Returns whether the reservation was open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Release {
    pub reservation_id: u64,
}

impl Message for Release {
    type Result = bool;
}

/// Lowers an open reservation to `amount` (never raises it): the call was clamped to
/// what the tightest of its budgets granted. Returns whether the reservation was open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shrink {
    pub reservation_id: u64,
    pub amount: i64,
}

impl Message for Shrink {
    type Result = bool;
}

/// Counts committed spend that had no reservation (SDK and API cost events).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordSpend {
    pub amount: i64,
    pub session_id: Option<Arc<str>>,
    pub now_ms: i64,
    /// As in [`Settle::committed_version`]; only used without a `mark`.
    pub committed_version: Option<u64>,
    /// As in [`SettleBatch::mark`].
    pub mark: Option<SpendMark>,
}

impl Message for RecordSpend {
    type Result = Vec<LedgerEvent>;
}

/// A reservation sent by the registry with its admission deadline. The actor handles
/// it only if the deadline has not passed: a reservation nobody can be answered for
/// in time never takes a hold. It counts toward the entity's waiting reservations
/// until the actor takes it out of the mailbox (the counter goes with the message).
#[derive(Debug)]
pub(crate) struct Admit {
    pub(crate) reserve: Reserve,
    pub(crate) deadline: Instant,
    pub(crate) _waiting: crate::registry::Waiting,
}

/// [`Admit`] reached its actor after its deadline: nothing was reserved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expired;

impl Message for Admit {
    type Result = Result<Result<Option<Admission>, Denial>, Expired>;
}

/// The budget's figures now; `None` when the entity has no budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot;

impl Message for Snapshot {
    type Result = Option<BudgetSnapshot>;
}

/// Applies a budget row as storage holds it: `Some` reconfigures (keeping reservations in
/// flight) or creates the ledger, `None` means the budget was deleted. A `version` older
/// than the state already applied is ignored, so two reloads racing each other cannot
/// leave the older one in force.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reload {
    pub budget: Option<StoredBudget>,
    /// From [`BudgetRegistry::load_version`](crate::registry::BudgetRegistry::load_version),
    /// taken *before* the row was read; `None` applies unconditionally.
    pub version: Option<u64>,
}

impl Message for Reload {
    type Result = ();
}

/// Reads the budget row from storage again and applies it as [`Reload`] does. Replies
/// once applied; on a storage error it replies with the error and keeps retrying in the
/// background (with backoff) while the old state stays in force.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refresh {
    pub version: u64,
}

impl Message for Refresh {
    type Result = Result<(), crate::store::StoreError>;
}

/// Housekeeping at `now_ms`: rolls an elapsed period and closes a breaker whose cooldown
/// is over. The housekeeping sweep does the same and hands the events to the event sink;
/// this message returns them instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tick {
    pub now_ms: i64,
}

impl Message for Tick {
    type Result = Vec<LedgerEvent>;
}

/// The velocity window and breaker as JSON for the operator endpoint; `None` when the
/// entity has no budget or its budget has no velocity limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VelocityState;

impl Message for VelocityState {
    type Result = Option<serde_json::Value>;
}

/// The arbiter's housekeeping sweep visiting the actor (see
/// [`sweep_residents`](super::actor::sweep_residents)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Housekeep;

impl Message for Housekeep {
    type Result = ();
}

/// Test only: panics inside the handler, closing the mailbox as a real bug would.
#[cfg(test)]
#[derive(Debug, Clone, Copy)]
pub struct Panic;

#[cfg(test)]
impl Message for Panic {
    type Result = ();
}

/// Registry messages stamped with their send time, one in this many: a clock read costs
/// about 45 ns here, and two per message would be a noticeable share of a same-thread hop.
const MAILBOX_WAIT_SAMPLING: u32 = 8;

thread_local! {
    static SENT: Cell<u32> = const { Cell::new(0) };
}

/// A message sent by the registry, some of them stamped with their send time so the
/// actor can measure how long they waited in the mailbox.
#[derive(Debug)]
pub(crate) struct Timed<M> {
    pub(crate) message: M,
    pub(crate) sent_at: Option<Instant>,
}

impl<M> Timed<M> {
    pub(crate) fn now(message: M) -> Self {
        let sampled = SENT.with(|sent| {
            let count = sent.get().wrapping_add(1);
            sent.set(count);
            count % MAILBOX_WAIT_SAMPLING == 0
        });
        Self { message, sent_at: sampled.then(Instant::now) }
    }

    /// Stamped with `sent_at` whatever the sampling: reservations, the messages whose
    /// wait a caller feels, are all timed (their sender reads the clock anyway, for the
    /// deadline). A fixed sampling stride would also miss whole entities when a request
    /// always sends to the same entities in the same order.
    pub(crate) fn stamped(message: M, sent_at: Instant) -> Self {
        Self { message, sent_at: Some(sent_at) }
    }
}

impl<M: Message> Message for Timed<M> {
    type Result = M::Result;
}

/// The messages the registry sends stamped ([`Timed`]).
pub(crate) trait Routed: Message<Result: Send> + Send + 'static {}

impl Routed for Reserve {}
impl Routed for Settle {}
impl Routed for SettleBatch {}
impl Routed for Admit {}
impl Routed for Release {}
impl Routed for Shrink {}
impl Routed for RecordSpend {}
impl Routed for Snapshot {}
