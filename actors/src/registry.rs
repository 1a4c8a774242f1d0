//! The budget registry: finds or starts the actor of a budget entity, spreads actors over a
//! fixed set of arbiters, supervises them, and offers the multi-entity operations the HTTP
//! layer needs (all-or-nothing reservation, settle, release, committed spend).
//!
//! # One actor per key
//!
//! Actors are started *before* their state is loaded: starting one is synchronous and
//! cheap (a channel and a closure sent to an arbiter), so it happens inside the dashmap
//! entry of its key, and two concurrent first requests for a key can never start two
//! actors. The new actor loads its row in `started` with its mailbox paused, so the
//! requests queued meanwhile are decided on the loaded state. No async once-cell, no lock
//! held across an await.
//!
//! # Supervision
//!
//! A panic in a handler (or a failed load) stops an actor without deregistering it; only
//! passivation deregisters, and it does so before stopping. So a registered actor whose
//! mailbox is closed has failed: the registry counts a restart and starts a new actor,
//! which reloads its state. The first restart of a key is immediate; when the key keeps
//! failing (again within a minute) the next starts wait `restart_backoff`, doubling up to
//! 30 s, and requests meanwhile fail fast with [`RegistryError::Restarting`].
//!
//! # Which messages start an actor
//!
//! [`reserve_all`](BudgetRegistry::reserve_all) and [`snapshot`](BudgetRegistry::snapshot)
//! start actors and retry once on a fresh actor if theirs died. Settle, release and
//! committed spend go to *live* actors only and are never retried: an entity without a
//! live actor holds no reservation, and the spend they report is already in storage, which
//! a starting actor reads — sending it again would count it twice.
//!
//! # Admission
//!
//! Overload is judged by what a caller feels, not by how many messages wait: settles,
//! releases, committed spend and snapshots never count against a reservation (the
//! settles of one accounting commit arrive together, one [`SettleBatch`] per entity). A
//! reservation carries its admission deadline (`admission_deadline` from when it is
//! sent) and waits in line; it is refused only when
//! * it cannot be answered within the deadline ([`RegistryError::DeadlinePassed`]): the
//!   caller stops waiting then, and the actor, when it finally reaches a reservation whose
//!   deadline has passed, does not take the hold (a release is queued behind it too); or
//! * `max_waiting_reservations` reservations already wait for that one entity
//!   ([`RegistryError::Overloaded`]), counted from send until the actor takes each out
//!   of its mailbox.
//!
//! Refusals are counted by entity type and reason, and mailbox waits (send to handling)
//! go to a histogram per entity type (see [`RegistryStats`]).

use std::cell::Cell;
use std::collections::hash_map::DefaultHasher;
use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
mod stats;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::dev::channel;
use actix::{Addr, Arbiter, ArbiterHandle, Context, Handler, MailboxError, MessageResult};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use futures_util::future::join_all;

use crate::budget::actor::{backoff, sweep_residents, BudgetActor, EventSink};
use crate::budget::messages::{
    Admit, Expired, RecordSpend, Refresh, Release, Reserve, Routed, Settle, SettleBatch, Shrink, Snapshot,
    Timed, VelocityState,
};
use crate::budget::{Admission, BudgetSnapshot, Denial, LedgerEvent};
use crate::store::{BudgetStore, EntityKey, SpendMark, StoreError};
pub(crate) use stats::{Counters, MailboxStats};
pub use stats::{MailboxWait, RefusalReason, RegistryStats, WaitHistogram, ENTITY_TYPES, WAIT_BUCKETS};

/// Reads the service's clock: UTC epoch milliseconds.
pub type Clock = fn() -> i64;

/// Default [`RegistryConfig::reservation_max_age`]: the longest upstream call (600 s)
/// plus a margin.
pub const DEFAULT_RESERVATION_MAX_AGE: Duration = Duration::from_secs(600 + 60);
/// Default [`RegistryConfig::admission_deadline`]: far above any stall of a healthy
/// process (a commit holding the core, a busy neighbour: tens of milliseconds).
pub const DEFAULT_ADMISSION_DEADLINE: Duration = Duration::from_secs(5);
/// Default [`RegistryConfig::max_waiting_reservations`]: far above the concurrency of
/// one entity (a fleet sharing one key).
pub const DEFAULT_MAX_WAITING_RESERVATIONS: usize = 10_000;
/// A failure this long after the previous one of the same key starts the backoff over.
const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// Longest wait before restarting an actor that keeps failing.
const MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);
/// Attempts of a message that starts actors: the first, and one on a fresh actor.
const MAX_ATTEMPTS: u32 = 2;
/// Restart bookkeeping kept for at most this many keys; older entries are dropped first.
const MAX_RESTART_STATES: usize = 10_000;

/// Registry ids, for [`BudgetRegistry::adopt_current_arbiter`].
static REGISTRY_IDS: AtomicU64 = AtomicU64::new(1);

thread_local! {
    /// The registry whose new actors start on this thread's arbiter (0: none). Set by
    /// [`BudgetRegistry::adopt_current_arbiter`].
    static ADOPTED_BY: Cell<u64> = const { Cell::new(0) };
}

/// How the registry runs its actors. Operators tune these (see the design notes).
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Arbiter threads the actors are spread over (about one per core).
    pub arbiters: usize,
    /// How long a reservation may wait for its actors before it is refused
    /// ([`RegistryError::DeadlinePassed`]).
    pub admission_deadline: Duration,
    /// Reservations that may wait for one entity before new ones are refused
    /// ([`RegistryError::Overloaded`]).
    pub max_waiting_reservations: usize,
    /// An actor unused this long, with nothing reserved, stops (and reloads on next use).
    pub idle_timeout: Duration,
    /// First wait before restarting an actor that keeps failing; doubles per failure.
    pub restart_backoff: Duration,
    /// Reservations older than this are released by the reaper.
    pub reservation_max_age: Duration,
    /// How often each arbiter sweeps its actors: the reaper, the period roll of idle
    /// actors and passivation act within one interval of their time. (A breaker's
    /// recovery has its own precise timer.)
    pub housekeeping_interval: Duration,
    /// The service's clock, used for housekeeping and reloads (messages carry their own
    /// `now_ms`).
    pub clock: Clock,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            arbiters: std::thread::available_parallelism().map_or(1, usize::from),
            admission_deadline: DEFAULT_ADMISSION_DEADLINE,
            max_waiting_reservations: DEFAULT_MAX_WAITING_RESERVATIONS,
            idle_timeout: Duration::from_secs(300),
            restart_backoff: Duration::from_millis(100),
            reservation_max_age: DEFAULT_RESERVATION_MAX_AGE,
            housekeeping_interval: Duration::from_secs(5),
            clock: system_now_ms,
        }
    }
}

/// Milliseconds since the Unix epoch from the system clock: the default [`Clock`] for an
/// embedder that injects none.
#[expect(clippy::disallowed_methods, reason = "the default clock, used only when none is injected")]
pub fn system_now_ms() -> i64 {
    let elapsed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
}

/// Why the registry could not get an answer from an actor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryError {
    #[error("no actix system is running on this thread")]
    NoSystem,
    #[error("could not start an arbiter thread: {0}")]
    Arbiter(String),
    #[error("the budget actor keeps failing; retry in {} ms", retry_after.as_millis())]
    Restarting { retry_after: Duration },
    #[error("{waiting} reservations are already waiting for this budget")]
    Overloaded { waiting: usize },
    #[error("a reservation waited longer than {}", human(*deadline))]
    DeadlinePassed { deadline: Duration },
    #[error("the budget actor stopped before answering")]
    Stopped,
}

/// Why [`BudgetRegistry::reserve_all`] admitted nothing. Every reservation already taken
/// for the request has been released when this is returned.
#[derive(Debug, thiserror::Error)]
pub enum ReserveAllError {
    /// The entity's budget refused.
    #[error("{key}: {denial}")]
    Denied { key: EntityKey, denial: Box<Denial> },
    /// The entity's actor could not answer.
    #[error("{key}: {error}")]
    Unavailable { key: EntityKey, error: RegistryError },
}

/// State shared by the registry and its actors.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn BudgetStore>,
    pub(crate) sink: Option<Arc<dyn EventSink>>,
    pub(crate) clock: Clock,
    /// `idle_timeout` in housekeeping sweeps (rounded up, plus one: never early).
    pub(crate) idle_sweeps: u32,
    /// `reservation_max_age` in housekeeping sweeps (rounded up, plus one: never early).
    pub(crate) reservation_max_age_sweeps: u32,
    pub(crate) restart_backoff: Duration,
    /// The live actors. Keys are shared with the actors themselves.
    pub(crate) actors: DashMap<ActorKey, Slot>,
    pub(crate) counters: Counters,
    /// One per arbiter, indexed like the arbiters.
    pub(crate) mailbox: Box<[MailboxStats]>,
    load_versions: AtomicU64,
}

impl Shared {
    /// A new load version. `AcqRel` makes "taken after a commit" and "taken before a read"
    /// on two threads order the commit before the read whenever the versions are ordered.
    pub(crate) fn next_load_version(&self) -> u64 {
        self.load_versions.fetch_add(1, Ordering::AcqRel).saturating_add(1)
    }
}

/// The registry's entry for one key.
#[derive(Clone)]
pub(crate) struct Slot {
    pub(crate) addr: Addr<BudgetActor>,
    pub(crate) generation: u64,
}

/// The map key of a live actor: its entity key, shared with the actor and its arbiter's
/// sweep, together with the count of reservations waiting for it (sent, not yet taken
/// out of the mailbox) — one allocation for both.
#[derive(Clone)]
pub(crate) struct ActorKey(Arc<KeyCell>);

struct KeyCell {
    key: EntityKey,
    waiting: AtomicUsize,
}

impl ActorKey {
    fn new(key: EntityKey) -> Self {
        Self(Arc::new(KeyCell { key, waiting: AtomicUsize::new(0) }))
    }

    fn waiting(&self) -> &AtomicUsize {
        &self.0.waiting
    }
}

/// One reservation waiting for an actor: counted when sent, uncounted when dropped, which
/// the [`Admit`] it travels in is once its actor has handled it (or its mailbox is gone).
#[derive(Debug)]
pub(crate) struct Waiting(ActorKey);

impl Waiting {
    fn new(key: &ActorKey) -> Self {
        key.waiting().fetch_add(1, Ordering::Relaxed);
        Self(key.clone())
    }
}

#[cfg(test)]
impl Waiting {
    /// A waiting reservation of the live actor of `key`, for tests that send [`Admit`]
    /// by hand.
    pub(crate) fn for_test(registry: &BudgetRegistry, key: &EntityKey) -> Self {
        let actor_key = registry.inner.shared.actors.get(key).map(|entry| entry.key().clone());
        let actor_key = actor_key.unwrap_or_else(|| ActorKey::new(key.clone()));
        Self::new(&actor_key)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting().fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for ActorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0.key, f)
    }
}

impl std::ops::Deref for ActorKey {
    type Target = EntityKey;

    fn deref(&self) -> &EntityKey {
        &self.0.key
    }
}

// INVARIANT: `Hash` and `Eq` are those of the entity key, as `Borrow` requires, so the
// map can be searched with a plain `&EntityKey`.
impl std::borrow::Borrow<EntityKey> for ActorKey {
    fn borrow(&self) -> &EntityKey {
        &self.0.key
    }
}

impl PartialEq for ActorKey {
    fn eq(&self, other: &Self) -> bool {
        self.0.key == other.0.key
    }
}

impl Eq for ActorKey {}

impl Hash for ActorKey {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.key.hash(state);
    }
}

impl std::fmt::Display for ActorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.key.fmt(f)
    }
}

#[derive(Debug, Clone, Copy)]
struct RestartState {
    failures: u32,
    last_failure: Instant,
    retry_at: Instant,
}

/// The reservations one accounting commit settles on one entity, for
/// [`BudgetRegistry::settle_batch`].
#[derive(Debug, Clone)]
pub struct EntitySettles {
    pub key: EntityKey,
    /// The commit's spend on the entity's budget row; `None` when it updated none.
    pub mark: Option<SpendMark>,
    /// `(reservation_id, actual)` per call.
    pub settles: Vec<(u64, i64)>,
}

/// Finds, starts, supervises and passivates budget actors. Cheap to clone; the arbiters
/// stop when the last clone is dropped.
#[derive(Clone)]
pub struct BudgetRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    /// Identifies this registry to the threads that adopted it.
    id: u64,
    shared: Arc<Shared>,
    config: RegistryConfig,
    /// Owned so they stop with the registry.
    arbiters: Vec<Arbiter>,
    handles: Vec<ArbiterHandle>,
    restart_state: DashMap<EntityKey, RestartState>,
    generations: AtomicU64,
    reservation_ids: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for arbiter in &self.arbiters {
            arbiter.stop();
        }
    }
}

impl BudgetRegistry {
    /// Starts `config.arbiters` arbiter threads. Must run inside an actix `System` (the
    /// arbiters register with it).
    pub fn new(
        config: RegistryConfig,
        store: Arc<dyn BudgetStore>,
        sink: Option<Arc<dyn EventSink>>,
    ) -> Result<Self, RegistryError> {
        if actix::System::try_current().is_none() {
            return Err(RegistryError::NoSystem);
        }
        let count = config.arbiters.max(1);
        let mut arbiters = Vec::with_capacity(count);
        for _ in 0..count {
            let arbiter = Arbiter::try_new().map_err(|error| RegistryError::Arbiter(error.to_string()))?;
            arbiters.push(arbiter);
        }
        let handles: Vec<ArbiterHandle> = arbiters.iter().map(Arbiter::handle).collect();
        let interval = config.housekeeping_interval.max(Duration::from_millis(1));
        let shared = Arc::new(Shared {
            store,
            sink,
            clock: config.clock,
            idle_sweeps: sweeps_for(config.idle_timeout, interval),
            reservation_max_age_sweeps: sweeps_for(config.reservation_max_age, interval),
            restart_backoff: config.restart_backoff,
            actors: DashMap::new(),
            counters: Counters::default(),
            mailbox: (0..count).map(|_| MailboxStats::default()).collect(),
            load_versions: AtomicU64::new(0),
        });
        for handle in &handles {
            let shared = Arc::downgrade(&shared);
            handle.spawn_fn(move || {
                actix::spawn(sweep_residents(shared, interval));
            });
        }
        let inner = Inner {
            id: REGISTRY_IDS.fetch_add(1, Ordering::Relaxed),
            shared,
            config,
            arbiters,
            handles,
            restart_state: DashMap::new(),
            generations: AtomicU64::new(0),
            reservation_ids: AtomicU64::new(0),
        };
        Ok(Self { inner: Arc::new(inner) })
    }

    pub fn config(&self) -> &RegistryConfig {
        &self.inner.config
    }

    /// A reservation id unique within this process, used on every entity of one request.
    pub fn next_reservation_id(&self) -> u64 {
        self.inner.reservation_ids.fetch_add(1, Ordering::Relaxed).wrapping_add(1)
    }

    /// A load version, for [`Reload`](crate::budget::Reload) and the `committed_version`
    /// of [`Settle`] and [`RecordSpend`]: take it before reading a row, or after
    /// committing spend.
    pub fn load_version(&self) -> u64 {
        self.inner.shared.next_load_version()
    }

    /// The address of the actor of `key`, starting it (it then loads its row) when none
    /// is running.
    pub fn get_or_start(&self, key: &EntityKey) -> Result<Addr<BudgetActor>, RegistryError> {
        self.with_slot(key, |_, slot| slot.addr.clone())
    }

    /// Makes the calling thread's arbiter a home for new actors: an actor first needed
    /// by a caller on this thread starts here (not on one of the registry's own
    /// arbiters), so that this thread's later messages to it are same-thread calls with
    /// no wake-up of another thread: about 2 µs for a reserve + settle instead of
    /// 10-60 µs on a busy 2-core machine. Call it once from each HTTP worker that
    /// reserves (its app factory runs on the worker's arbiter). It also starts that
    /// arbiter's housekeeping sweep. Callers on other threads are unaffected; an actor
    /// needed first by one of them starts on the registry's arbiter for its key, as
    /// before. Returns false (and does nothing) outside an arbiter.
    pub fn adopt_current_arbiter(&self) -> bool {
        if Arbiter::try_current().is_none() {
            return false;
        }
        let id = self.inner.id;
        if ADOPTED_BY.with(|adopted| adopted.replace(id)) != id {
            let interval = self.inner.config.housekeeping_interval.max(Duration::from_millis(1));
            actix::spawn(sweep_residents(Arc::downgrade(&self.inner.shared), interval));
        }
        true
    }

    /// The arbiter that runs (or will run) the actor of `key`. A caller running there
    /// reaches the actor without a thread hop: a reserve + settle then takes about 2 µs
    /// instead of 10-40 µs (see the `budget` benchmark).
    pub fn arbiter_for(&self, key: &EntityKey) -> ArbiterHandle {
        let handles = &self.inner.handles;
        // INVARIANT: `arbiter_index` is below `handles.len()`, which is at least 1.
        handles[arbiter_index(key, handles.len())].clone()
    }

    /// Reserves `request` on every entity, all or nothing. The reservation is queued on
    /// every entity at once, so the entities (often on different arbiters) decide in
    /// parallel and the caller waits about one message round trip, not one per entity.
    /// It waits at most `admission_deadline` (see the module documentation). On the first
    /// denial (or an actor that cannot answer) the reservation is released on every
    /// entity (each release queues behind that entity's reserve) before the error is
    /// returned; when the deadline passed, the releases are queued and not awaited (they
    /// wait behind the same busy mailbox). Entities without a budget admit and are left
    /// out of the result. The caller must settle or release the same keys afterwards;
    /// prefer [`reserve_guarded`](Self::reserve_guarded), whose guard cannot forget.
    /// Dropping this future before it finishes releases what it reserved.
    pub async fn reserve_all(
        &self,
        keys: &[EntityKey],
        request: &Reserve,
    ) -> Result<Vec<(EntityKey, Admission)>, ReserveAllError> {
        let sent_at = Instant::now();
        let deadline = sent_at + self.inner.config.admission_deadline;
        let reservation_id = request.reservation_id;
        let mut taken = Taken { registry: self, keys, count: 0, reservation_id };
        let mut pending = Vec::with_capacity(keys.len());
        for key in keys {
            pending.push(self.enqueue_admit(key, request.clone(), sent_at, deadline));
            // Counted as soon as queued: if this future is dropped while the actors
            // decide, the release queues behind the reserve.
            taken.count += 1;
        }
        let mut admissions = Vec::new();
        let mut failure = None;
        // Entities that hold (or may still take) the reservation if this fails.
        let mut queued_on: Vec<EntityKey> = Vec::new();
        for (key, queued) in keys.iter().zip(pending) {
            if failure.is_some() {
                // Already failed: only note which later entities got the reserve.
                if queued.is_ok() {
                    queued_on.push(key.clone());
                }
                continue;
            }
            if queued.is_ok() {
                // Queued: it may take the hold even if its answer comes too late.
                queued_on.push(key.clone());
            }
            match self.admit_answer(key, request, deadline, queued).await {
                Ok(Some(admission)) => admissions.push((key.clone(), admission)),
                Ok(None) => {}
                Err(error) => failure = Some(error),
            }
        }
        if let Some(error) = failure {
            if let ReserveAllError::Unavailable { key, error: refusal } = &error {
                if let Some(reason) = refusal.refusal_reason() {
                    self.inner.shared.counters.refuse(key.entity_type, reason);
                }
            }
            taken.count = 0;
            if matches!(
                &error,
                ReserveAllError::Unavailable { error: RegistryError::DeadlinePassed { .. }, .. }
            ) {
                self.release_detached(&queued_on, reservation_id);
                return Err(error);
            }
            // Released on every entity that took or may take it (each release queues
            // behind that entity's reserve), queued at once so `taken` can stand down,
            // and awaited before answering.
            let releases = self.enqueue_all(&queued_on, &Release { reservation_id });
            self.answers(&queued_on, releases, |_| false).await;
            return Err(error);
        }
        taken.count = 0;
        Ok(admissions)
    }

    /// The answer of one entity to a reservation queued by
    /// [`reserve_all`](Self::reserve_all), waiting until `deadline` at most; a fresh actor
    /// is asked once more if this one stopped before answering.
    async fn admit_answer<F>(
        &self,
        key: &EntityKey,
        request: &Reserve,
        deadline: Instant,
        queued: Result<(F, u64), RegistryError>,
    ) -> Result<Option<Admission>, ReserveAllError>
    where
        F: Future<Output = Result<Result<Result<Option<Admission>, Denial>, Expired>, MailboxError>>,
    {
        let unavailable = |error| ReserveAllError::Unavailable { key: key.clone(), error };
        let passed = RegistryError::DeadlinePassed { deadline: self.inner.config.admission_deadline };
        let (reply, generation) = queued.map_err(unavailable)?;
        let answer = match tokio::time::timeout_at(deadline.into(), reply).await {
            Err(_) => return Err(unavailable(passed)),
            Ok(Err(MailboxError::Closed)) => {
                // The actor stopped before answering: ask again (a new one starts).
                self.bury(key, generation);
                let (reply, _) = self
                    .enqueue_admit(key, request.clone(), Instant::now(), deadline)
                    .map_err(unavailable)?;
                match tokio::time::timeout_at(deadline.into(), reply).await {
                    Err(_) => return Err(unavailable(passed)),
                    Ok(Err(_)) => return Err(unavailable(RegistryError::Stopped)),
                    Ok(Ok(answer)) => answer,
                }
            }
            Ok(Err(MailboxError::Timeout)) => return Err(unavailable(RegistryError::Stopped)),
            Ok(Ok(answer)) => answer,
        };
        match answer {
            Err(Expired) => Err(unavailable(passed)),
            Ok(Err(denial)) => Err(ReserveAllError::Denied { key: key.clone(), denial: Box::new(denial) }),
            Ok(Ok(admission)) => Ok(admission),
        }
    }

    /// [`reserve_all`](Self::reserve_all), returning a guard that releases the
    /// reservation on every entity when dropped unless it was settled or released.
    pub async fn reserve_guarded(
        &self,
        keys: &[EntityKey],
        request: &Reserve,
    ) -> Result<ReservationGuard, ReserveAllError> {
        let admissions = self.reserve_all(keys, request).await?;
        let mut guard = ReservationGuard {
            registry: self.clone(),
            reservation_id: request.reservation_id,
            keys: keys.to_vec(),
            admissions,
            armed: true,
        };
        // The tightest budget decides: every hold comes down to the smallest grant.
        let smallest = guard.granted(request.estimate);
        if smallest < request.estimate {
            guard.shrink(smallest).await;
        }
        Ok(guard)
    }

    /// Settles `reservation_id` to `actual` on every live entity. Call it right after the
    /// cost is committed to storage: an actor whose state was read from storage after
    /// that point already counts the cost and only drops the reservation. Returns the
    /// events to announce, per entity that has any.
    pub async fn settle_all(
        &self,
        keys: &[EntityKey],
        reservation_id: u64,
        actual: i64,
        now_ms: i64,
    ) -> Vec<(EntityKey, Vec<LedgerEvent>)> {
        let settles = self.enqueue_settles(keys, reservation_id, actual, now_ms);
        self.answers(keys, settles, has_events).await
    }

    /// Releases `reservation_id` on every live entity, once they have all handled it.
    pub async fn release_all(&self, keys: &[EntityKey], reservation_id: u64) {
        let releases = self.enqueue_all(keys, &Release { reservation_id });
        self.answers(keys, releases, |_| false).await;
    }

    /// Settles the reservations of one accounting commit: per entity, one message with
    /// every `(reservation_id, actual)` of the commit that counts against it. Call it
    /// right after the commit, with its time (see [`settle_all`](Self::settle_all)).
    /// Entities without a live actor are skipped (they read the spend from storage).
    /// Returns the events to announce, per entity that has any.
    pub async fn settle_batch(
        &self,
        batches: Vec<EntitySettles>,
        now_ms: i64,
    ) -> Vec<(EntityKey, Vec<LedgerEvent>)> {
        let committed_version = Some(self.load_version());
        let mut keys = Vec::with_capacity(batches.len());
        let mut queued = Vec::with_capacity(batches.len());
        for EntitySettles { key, mark, settles } in batches {
            if let Some((reply, generation)) =
                self.enqueue_live(&key, SettleBatch { settles, now_ms, committed_version, mark })
            {
                queued.push(Queued { index: keys.len(), generation, reply });
                keys.push(key);
            }
        }
        self.answers(&keys, queued, has_events).await
    }

    /// Counts committed spend without a reservation (a cost event) on every live entity;
    /// entities without a live actor read it from storage when they start. Call it right
    /// after the spend is committed (see [`settle_all`](Self::settle_all)). Returns the
    /// events to announce, per entity that has any.
    pub async fn record_spend(
        &self,
        keys: &[EntityKey],
        amount: i64,
        session_id: Option<Arc<str>>,
        now_ms: i64,
    ) -> Vec<(EntityKey, Vec<LedgerEvent>)> {
        let committed_version = Some(self.load_version());
        let spend = RecordSpend { amount, session_id, now_ms, committed_version, mark: None };
        let spends = self.enqueue_all(keys, &spend);
        self.answers(keys, spends, has_events).await
    }

    /// [`record_spend`](Self::record_spend) on one entity, with the commit's `mark` on
    /// its budget row (see [`SpendMark`]).
    pub async fn record_committed_spend(
        &self,
        key: &EntityKey,
        amount: i64,
        mark: Option<SpendMark>,
        now_ms: i64,
    ) -> Vec<(EntityKey, Vec<LedgerEvent>)> {
        let committed_version = Some(self.load_version());
        let spend = RecordSpend { amount, session_id: None, now_ms, committed_version, mark };
        let keys = std::slice::from_ref(key);
        let spends = self.enqueue_all(keys, &spend);
        self.answers(keys, spends, has_events).await
    }

    /// The budget's figures, starting its actor when none is running; `None` when the
    /// entity has no budget.
    pub async fn snapshot(&self, key: &EntityKey) -> Result<Option<BudgetSnapshot>, RegistryError> {
        self.ask(key, &Snapshot).await
    }

    /// The budget's figures if its actor is running (and has loaded), without starting one.
    pub async fn snapshot_if_live(&self, key: &EntityKey) -> Option<BudgetSnapshot> {
        let (reply, _) = self.enqueue_live(key, Snapshot)?;
        reply.await.ok().flatten()
    }

    /// The row of `key` changed in storage (upsert, reset, delete): a live actor reads it
    /// again and applies it, keeping its reservations in flight — stopping the actor
    /// instead would forget them, and the budget would be under-counted until they
    /// settle. Returns `Ok(false)` when no actor is live (the next one loads the new row).
    /// On a storage error the actor keeps its state and retries in the background.
    pub async fn invalidate(&self, key: &EntityKey) -> Result<bool, StoreError> {
        let Some(addr) = self.live_addr(key) else {
            return Ok(false);
        };
        let version = self.load_version();
        match addr.send(Refresh { version }).await {
            Ok(Ok(())) => Ok(true),
            Ok(Err(error)) => Err(error),
            // Stopped meanwhile: its successor loads the new row.
            Err(_) => Ok(false),
        }
    }

    /// Velocity windows and breakers of the live actors of an organization.
    pub async fn velocity_state(&self, org_id: &str) -> Vec<serde_json::Value> {
        let addrs: Vec<Addr<BudgetActor>> = self
            .inner
            .shared
            .actors
            .iter()
            .filter(|entry| entry.key().org_id == org_id && entry.value().addr.connected())
            .map(|entry| entry.value().addr.clone())
            .collect();
        let replies = join_all(addrs.iter().map(|addr| addr.send(VelocityState))).await;
        replies.into_iter().filter_map(|reply| reply.ok().flatten()).collect()
    }

    /// Actors alive now, loading ones included.
    pub fn live_actors(&self) -> usize {
        self.inner.shared.counters.live.load(Ordering::Relaxed)
    }

    /// Actors found dead (a panic or a failed load) since the registry started.
    pub fn restarts(&self) -> u64 {
        self.inner.shared.counters.restarts.load(Ordering::Relaxed)
    }

    /// Time registry messages spent in actor mailboxes, all entity types together.
    pub fn mailbox_wait(&self) -> MailboxWait {
        stats::overall(&self.waits())
    }

    /// Time registry messages spent in actor mailboxes, per entity type (as in
    /// [`ENTITY_TYPES`]).
    pub fn waits(&self) -> [WaitHistogram; 4] {
        let mut waits = [WaitHistogram::default(); 4];
        for stats in self.inner.shared.mailbox.iter() {
            stats.add_to(&mut waits);
        }
        waits
    }

    /// The `n` entities with the most reservations waiting, at least `min_waiting` each,
    /// most first: where an operator looks before anything is refused.
    pub fn busiest(&self, min_waiting: usize, n: usize) -> Vec<(EntityKey, usize)> {
        let mut busiest: Vec<(EntityKey, usize)> = self
            .inner
            .shared
            .actors
            .iter()
            .filter_map(|entry| {
                let waiting = entry.key().waiting().load(Ordering::Relaxed);
                (waiting >= min_waiting.max(1)).then(|| ((**entry.key()).clone(), waiting))
            })
            .collect();
        busiest.sort_by_key(|entry| std::cmp::Reverse(entry.1));
        busiest.truncate(n);
        busiest
    }

    /// Reservations waiting for the actor of `key` now (0 when none is live).
    pub fn waiting_reservations(&self, key: &EntityKey) -> usize {
        self.inner.shared.actors.get(key).map_or(0, |entry| entry.key().waiting().load(Ordering::Relaxed))
    }

    /// All registry figures at once.
    pub fn stats(&self) -> RegistryStats {
        let counters = &self.inner.shared.counters;
        let waits = self.waits();
        RegistryStats {
            live_actors: self.live_actors(),
            restarts: self.restarts(),
            passivations: counters.passivations.load(Ordering::Relaxed),
            reaped: counters.reaped.load(Ordering::Relaxed),
            refused: counters.refused(),
            load_failures: counters.load_failures.load(Ordering::Relaxed),
            waits,
            mailbox: stats::overall(&waits),
        }
    }

    /// Sends `message` to the actor of `key`, starting it if needed, and retries once on
    /// a fresh actor when the actor died before answering.
    async fn ask<M>(&self, key: &EntityKey, message: &M) -> Result<M::Result, RegistryError>
    where
        M: Routed + Clone,
        BudgetActor: Handler<Timed<M>, Result = MessageResult<Timed<M>>>,
    {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (reply, generation) = self.enqueue(key, message.clone())?;
            match reply.await {
                Ok(result) => return Ok(result),
                Err(MailboxError::Closed) => {
                    self.bury(key, generation);
                    if attempt >= MAX_ATTEMPTS {
                        return Err(RegistryError::Stopped);
                    }
                }
                Err(MailboxError::Timeout) => return Err(RegistryError::Stopped),
            }
        }
    }

    /// Queues `message` for the actor of `key` (started if needed) and returns the reply
    /// with the actor's generation. The message is in the mailbox when this returns.
    fn enqueue<M>(
        &self,
        key: &EntityKey,
        message: M,
    ) -> Result<(impl Future<Output = Result<M::Result, MailboxError>> + use<M>, u64), RegistryError>
    where
        M: Routed,
        BudgetActor: Handler<Timed<M>, Result = MessageResult<Timed<M>>>,
    {
        self.with_slot(key, |_, slot| send(slot, message))
    }

    /// Queues a reservation for the actor of `key` (started if needed) unless
    /// `max_waiting_reservations` already wait for it.
    #[expect(clippy::type_complexity, reason = "the reply of an `Admit`, spelled out once")]
    fn enqueue_admit(
        &self,
        key: &EntityKey,
        reserve: Reserve,
        sent_at: Instant,
        deadline: Instant,
    ) -> Result<
        (
            impl Future<Output = Result<Result<Result<Option<Admission>, Denial>, Expired>, MailboxError>> + use<>,
            u64,
        ),
        RegistryError,
    > {
        let max = self.inner.config.max_waiting_reservations;
        self.with_slot(key, |actor_key, slot| {
            let waiting = actor_key.waiting().load(Ordering::Relaxed);
            if waiting >= max {
                return Err(RegistryError::Overloaded { waiting });
            }
            let admit = Admit { reserve, deadline, _waiting: Waiting::new(actor_key) };
            Ok((slot.addr.send(Timed::stamped(admit, sent_at)), slot.generation))
        })?
    }

    /// Queues `message` for the actor of `key` if one is live; never starts one.
    fn enqueue_live<M>(
        &self,
        key: &EntityKey,
        message: M,
    ) -> Option<(impl Future<Output = Result<M::Result, MailboxError>> + use<M>, u64)>
    where
        M: Routed,
        BudgetActor: Handler<Timed<M>, Result = MessageResult<Timed<M>>>,
    {
        let slot = self.inner.shared.actors.get(key)?;
        slot.addr.connected().then(|| send(slot.value(), message))
    }

    /// Queues `message` for every live entity of `keys`; every message is in its mailbox
    /// when this returns. [`answers`](Self::answers) collects the replies.
    fn enqueue_all<M>(
        &self,
        keys: &[EntityKey],
        message: &M,
    ) -> Vec<Queued<impl Future<Output = Result<M::Result, MailboxError>> + use<M>>>
    where
        M: Routed + Clone,
        BudgetActor: Handler<Timed<M>, Result = MessageResult<Timed<M>>>,
    {
        let mut queued = Vec::with_capacity(keys.len());
        for (index, key) in keys.iter().enumerate() {
            if let Some((reply, generation)) = self.enqueue_live(key, message.clone()) {
                queued.push(Queued { index, generation, reply });
            }
        }
        queued
    }

    /// The replies to [`enqueue_all`](Self::enqueue_all), keeping those `keep` wants.
    async fn answers<T, F>(
        &self,
        keys: &[EntityKey],
        queued: Vec<Queued<F>>,
        keep: impl Fn(&T) -> bool,
    ) -> Vec<(EntityKey, T)>
    where
        F: Future<Output = Result<T, MailboxError>>,
    {
        let mut answers = Vec::new();
        // Everything is queued already, so awaiting one reply after the other takes as
        // long as the slowest, without a join's allocations.
        for Queued { index, generation, reply } in queued {
            let Some(key) = keys.get(index) else {
                continue;
            };
            match reply.await {
                Ok(answer) if keep(&answer) => answers.push((key.clone(), answer)),
                Ok(_) => {}
                Err(_) => self.bury(key, generation),
            }
        }
        answers
    }

    fn enqueue_settles(
        &self,
        keys: &[EntityKey],
        reservation_id: u64,
        actual: i64,
        now_ms: i64,
    ) -> Vec<Queued<impl Future<Output = Result<Vec<LedgerEvent>, MailboxError>> + use<>>> {
        let committed_version = Some(self.load_version());
        self.enqueue_all(keys, &Settle { reservation_id, actual, now_ms, committed_version })
    }

    /// Queues a release on every live entity without waiting: for drop paths.
    fn release_detached(&self, keys: &[EntityKey], reservation_id: u64) {
        for key in keys {
            if let Some(slot) = self.inner.shared.actors.get(key) {
                slot.addr.do_send(Timed::now(Release { reservation_id }));
            }
        }
    }

    fn live_addr(&self, key: &EntityKey) -> Option<Addr<BudgetActor>> {
        let slot = self.inner.shared.actors.get(key)?;
        slot.addr.connected().then(|| slot.addr.clone())
    }

    /// Runs `f` on the live slot of `key`, starting an actor when there is none.
    fn with_slot<T>(
        &self,
        key: &EntityKey,
        f: impl FnOnce(&ActorKey, &Slot) -> T,
    ) -> Result<T, RegistryError> {
        if let Some(entry) = self.inner.shared.actors.get(key) {
            if entry.addr.connected() {
                return Ok(f(entry.key(), entry.value()));
            }
        }
        let (actor_key, slot) = self.start(key)?;
        Ok(f(&actor_key, &slot))
    }

    /// Starts the actor of `key` unless a live one is registered. Runs inside the key's
    /// dashmap entry, so concurrent callers end up with one actor.
    fn start(&self, key: &EntityKey) -> Result<(ActorKey, Slot), RegistryError> {
        match self.inner.shared.actors.entry(ActorKey::new(key.clone())) {
            Entry::Occupied(mut occupied) => {
                if occupied.get().addr.connected() {
                    return Ok((occupied.key().clone(), occupied.get().clone()));
                }
                // INVARIANT: only passivation deregisters, and before stopping; a
                // registered actor with a closed mailbox therefore panicked or failed to
                // load.
                self.note_failure(key);
                if let Some(retry_after) = self.restart_delay(key) {
                    occupied.remove();
                    return Err(RegistryError::Restarting { retry_after });
                }
                let actor_key = occupied.key().clone();
                let slot = self.spawn(actor_key.clone());
                occupied.insert(slot.clone());
                Ok((actor_key, slot))
            }
            Entry::Vacant(vacant) => {
                if let Some(retry_after) = self.restart_delay(key) {
                    return Err(RegistryError::Restarting { retry_after });
                }
                let actor_key = vacant.key().clone();
                let slot = self.spawn(actor_key.clone());
                vacant.insert(slot.clone());
                Ok((actor_key, slot))
            }
        }
    }

    /// The actor of `generation` closed its mailbox before answering. If it is still
    /// registered it failed (see [`start`](Self::start)): forget it and count the failure.
    fn bury(&self, key: &EntityKey, generation: u64) {
        if self.inner.shared.actors.remove_if(key, |_, slot| slot.generation == generation).is_some() {
            self.note_failure(key);
        }
    }

    fn note_failure(&self, key: &EntityKey) {
        self.inner.shared.counters.restarts.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        if self.inner.restart_state.len() >= MAX_RESTART_STATES {
            self.inner
                .restart_state
                .retain(|_, state| now.saturating_duration_since(state.last_failure) < RESTART_WINDOW);
        }
        let mut state = self.inner.restart_state.entry(key.clone()).or_insert(RestartState {
            failures: 0,
            last_failure: now,
            retry_at: now,
        });
        if now.saturating_duration_since(state.last_failure) >= RESTART_WINDOW {
            state.failures = 0;
        }
        state.failures = state.failures.saturating_add(1);
        state.last_failure = now;
        // The first failure restarts at once; a key that keeps failing waits longer each time.
        state.retry_at = match state.failures.checked_sub(2) {
            None => now,
            Some(doublings) => {
                now + backoff(self.inner.config.restart_backoff, doublings, MAX_RESTART_BACKOFF)
            }
        };
        tracing::warn!(entity = %key, failures = state.failures, "budget actor died; restarting it");
    }

    /// How long `key` must still wait before its actor may start again.
    fn restart_delay(&self, key: &EntityKey) -> Option<Duration> {
        let now = Instant::now();
        let (retry_at, stale) = {
            let state = self.inner.restart_state.get(key)?;
            (state.retry_at, now.saturating_duration_since(state.last_failure) >= RESTART_WINDOW)
        };
        if stale {
            self.inner.restart_state.remove(key);
        }
        (retry_at > now).then(|| retry_at - now)
    }

    /// Starts a new actor for `key` on its arbiter. Synchronous: the actor loads its row
    /// once it runs.
    fn spawn(&self, key: ActorKey) -> Slot {
        let inner = &self.inner;
        let generation = inner.generations.fetch_add(1, Ordering::Relaxed);
        let arbiter = arbiter_index(&key, inner.handles.len());
        let version = inner.shared.next_load_version();
        // Capacity 0 (unbounded): actix would otherwise defer a send past a full mailbox to
        // the reply's first poll, and drop paths need their release queued at once. The
        // registry bounds reservations itself (see the module documentation).
        let (tx, rx) = channel::channel(0);
        let actor = {
            let shared = Arc::clone(&inner.shared);
            let arbiter = u32::try_from(arbiter).unwrap_or(u32::MAX);
            move || BudgetActor::new(key, generation, arbiter, version, shared)
        };
        if ADOPTED_BY.with(Cell::get) == inner.id {
            // Here, on the caller's own arbiter (see `adopt_current_arbiter`); the index
            // above only picks the mailbox statistics bucket. Spawned, not run: this
            // holds the key's map entry.
            let context = Context::with_receiver(rx);
            actix::spawn(context.into_future(actor()));
        } else {
            // INVARIANT: `arbiter_index` is below `handles.len()`, which is at least 1.
            inner.handles[arbiter].spawn_fn(move || {
                let context = Context::with_receiver(rx);
                actix::spawn(context.into_future(actor()));
            });
        }
        Slot { addr: Addr::new(tx), generation }
    }
}

/// Queues a registry message on `slot`'s actor, stamped for the mailbox wait figures.
fn send<M>(slot: &Slot, message: M) -> (impl Future<Output = Result<M::Result, MailboxError>> + use<M>, u64)
where
    M: Routed,
    BudgetActor: Handler<Timed<M>, Result = MessageResult<Timed<M>>>,
{
    (slot.addr.send(Timed::now(message)), slot.generation)
}

/// One message of [`BudgetRegistry::enqueue_all`]: the index of its key and its reply.
struct Queued<F> {
    index: usize,
    generation: u64,
    reply: F,
}

#[expect(clippy::ptr_arg, reason = "a filter over replies of type `Vec<LedgerEvent>`")]
fn has_events(events: &Vec<LedgerEvent>) -> bool {
    !events.is_empty()
}

/// The reservations a running [`BudgetRegistry::reserve_all`] holds: dropped with its
/// future, it releases them.
struct Taken<'a> {
    registry: &'a BudgetRegistry,
    keys: &'a [EntityKey],
    /// How many of `keys` (from the first) may hold the reservation.
    count: usize,
    reservation_id: u64,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(taken) = self.keys.get(..self.count).filter(|taken| !taken.is_empty()) {
            self.registry.release_detached(taken, self.reservation_id);
        }
    }
}

/// `duration` for a message: whole seconds as `5 s`, anything else in milliseconds.
fn human(duration: Duration) -> String {
    if duration.subsec_nanos() == 0 && duration.as_secs() > 0 {
        format!("{} s", duration.as_secs())
    } else {
        format!("{} ms", duration.as_millis())
    }
}

impl RegistryError {
    /// Why a reservation was refused, for the figures; `None` for errors that are not a
    /// refusal of admission (a failing actor, no system).
    pub fn refusal_reason(&self) -> Option<RefusalReason> {
        match self {
            RegistryError::DeadlinePassed { .. } => Some(RefusalReason::DeadlinePassed),
            RegistryError::Overloaded { .. } => Some(RefusalReason::Overloaded),
            _ => None,
        }
    }
}

/// `duration` in sweeps of `interval`, rounded up, plus one: a sweep count measures an age
/// to within one interval, and these ages must never be reached early.
fn sweeps_for(duration: Duration, interval: Duration) -> u32 {
    let sweeps = duration.as_nanos().div_ceil(interval.as_nanos().max(1)).saturating_add(1);
    u32::try_from(sweeps).unwrap_or(u32::MAX)
}

/// The arbiter of `key`: a fixed hash (SipHash with zero keys), so a key always lands on
/// the same arbiter of a registry.
fn arbiter_index(key: &EntityKey, arbiters: usize) -> usize {
    let mut hasher = DefaultHasher::new();
    key.hash(&mut hasher);
    let arbiters_u64 = u64::try_from(arbiters.max(1)).unwrap_or(u64::MAX);
    usize::try_from(hasher.finish() % arbiters_u64).unwrap_or(0)
}

/// A reservation the budget actors hold for a call whose cost event is being committed:
/// settled on them once the commit is in, together with the other reservations of the
/// same commit (see [`BudgetRegistry::settle_batch`]).
#[derive(Debug, Clone)]
pub struct ReservationTicket {
    pub reservation_id: u64,
    /// Every entity the reservation was sent to.
    pub keys: Vec<EntityKey>,
}

/// A reservation held on a set of entities. Dropping it unsettled releases the
/// reservation everywhere, so a request that dies (its future dropped, an early return, a
/// panic) cannot leak budget; the actors' reaper is the second line of defence.
#[must_use = "dropping the guard releases the reservation"]
pub struct ReservationGuard {
    registry: BudgetRegistry,
    reservation_id: u64,
    /// Every entity the reservation was sent to, with or without a budget: a budget
    /// created meanwhile still gets the settle.
    keys: Vec<EntityKey>,
    admissions: Vec<(EntityKey, Admission)>,
    armed: bool,
}

impl ReservationGuard {
    pub fn reservation_id(&self) -> u64 {
        self.reservation_id
    }

    pub fn keys(&self) -> &[EntityKey] {
        &self.keys
    }

    /// What the commit of the call's cost settles (see [`ReservationTicket`]).
    pub fn ticket(&self) -> ReservationTicket {
        ReservationTicket { reservation_id: self.reservation_id, keys: self.keys.clone() }
    }

    /// What each entity with a budget admitted (snapshots for response headers, events).
    pub fn admissions(&self) -> &[(EntityKey, Admission)] {
        &self.admissions
    }

    /// What every budget holds: the smallest grant among the admissions, `estimate`
    /// when none granted less.
    pub fn granted(&self, estimate: i64) -> i64 {
        self.admissions.iter().map(|(_, a)| a.granted).fold(estimate, i64::min)
    }

    /// Lowers the reservation to `amount` on every entity that holds more (the call is
    /// clamped to it), waiting until they have; the admissions' figures follow.
    pub async fn shrink(&mut self, amount: i64) {
        let holding: Vec<EntityKey> =
            self.admissions.iter().filter(|(_, a)| a.granted > amount).map(|(k, _)| k.clone()).collect();
        let shrink = Shrink { reservation_id: self.reservation_id, amount };
        let queued = self.registry.enqueue_all(&holding, &shrink);
        self.registry.answers(&holding, queued, |_| false).await;
        for (_, admission) in &mut self.admissions {
            let surplus = admission.granted.saturating_sub(amount).max(0);
            admission.granted -= surplus;
            admission.snapshot.reserved = admission.snapshot.reserved.saturating_sub(surplus);
            admission.snapshot.remaining = admission.snapshot.remaining.saturating_add(surplus);
        }
    }

    /// Settles the reservation to `actual` (already committed to storage) everywhere and
    /// returns the events to announce, per entity that has any.
    pub async fn settle(mut self, actual: i64, now_ms: i64) -> Vec<(EntityKey, Vec<LedgerEvent>)> {
        let settles = self.registry.enqueue_settles(&self.keys, self.reservation_id, actual, now_ms);
        // The settles are queued: from here on, dropping this future loses nothing.
        self.armed = false;
        self.registry.answers(&self.keys, settles, has_events).await
    }

    /// Releases the reservation everywhere and waits until every actor has done it.
    pub async fn release(mut self) {
        let releases =
            self.registry.enqueue_all(&self.keys, &Release { reservation_id: self.reservation_id });
        self.armed = false;
        self.registry.answers(&self.keys, releases, |_| false).await;
    }

    /// Gives up the guard: the caller settles or releases by hand.
    pub fn into_admissions(mut self) -> Vec<(EntityKey, Admission)> {
        self.armed = false;
        std::mem::take(&mut self.admissions)
    }
}

impl Drop for ReservationGuard {
    fn drop(&mut self) {
        if self.armed {
            self.registry.release_detached(&self.keys, self.reservation_id);
        }
    }
}

impl std::fmt::Debug for ReservationGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReservationGuard")
            .field("reservation_id", &self.reservation_id)
            .field("keys", &self.keys)
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for BudgetRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BudgetRegistry")
            .field("config", &self.inner.config)
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
