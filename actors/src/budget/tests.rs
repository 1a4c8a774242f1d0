//! Budget actors through their registry, with an in-memory store: admission, all-or-nothing
//! reservation, concurrency, passivation, supervision, the reservation guard, reloads and
//! the reaper.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use actix::MailboxError;
use futures_util::future::{join_all, BoxFuture};
use futures_util::FutureExt;

use super::messages::Panic;
use super::*;
use crate::registry::{
    system_now_ms, BudgetRegistry, EntitySettles, RegistryConfig, RegistryError, ReserveAllError,
    DEFAULT_RESERVATION_MAX_AGE,
};
use crate::store::{BudgetStore, EntityKey, MemoryStore, SpendMark, StoreError, StoredBudget};

pub(super) fn config() -> RegistryConfig {
    RegistryConfig {
        arbiters: 2,
        admission_deadline: crate::registry::DEFAULT_ADMISSION_DEADLINE,
        max_waiting_reservations: 10_000,
        idle_timeout: Duration::from_secs(60),
        restart_backoff: Duration::from_millis(50),
        reservation_max_age: DEFAULT_RESERVATION_MAX_AGE,
        housekeeping_interval: Duration::from_millis(20),
        clock: system_now_ms,
    }
}

pub(super) fn key(id: &str) -> EntityKey {
    EntityKey::new("org_1", EntityType::User, id)
}

pub(super) fn stored(id: &str, config: BudgetConfig) -> StoredBudget {
    StoredBudget { budget_id: format!("svc_bgt_{id}"), config, spend: 0, period_start: None, spend_seq: 0 }
}

pub(super) fn store_with(budgets: &[(&str, i64)]) -> MemoryStore {
    let store = MemoryStore::new();
    for &(id, limit) in budgets {
        store.put(key(id), stored(id, BudgetConfig::new(limit)));
    }
    store
}

pub(super) fn registry(store: &MemoryStore, config: RegistryConfig) -> BudgetRegistry {
    BudgetRegistry::new(config, Arc::new(store.clone()), None).unwrap()
}

pub(super) fn reserve(registry: &BudgetRegistry, estimate: i64) -> Reserve {
    Reserve {
        reservation_id: registry.next_reservation_id(),
        estimate,
        session_id: None,
        finalize: false,
        fingerprint: None,
        now_ms: system_now_ms(),
        floor: None,
    }
}

pub(super) async fn snapshot(registry: &BudgetRegistry, id: &str) -> BudgetSnapshot {
    registry.snapshot(&key(id)).await.unwrap().unwrap()
}

pub(super) async fn sleep(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

#[actix::test]
async fn reserve_then_settle_through_the_registry() {
    let store = MemoryStore::new();
    store.put(key("a"), stored("a", BudgetConfig { thresholds: vec![20, 80], ..BudgetConfig::new(1_000) }));
    let registry = registry(&store, config());
    let request = reserve(&registry, 300);

    let admitted = registry.reserve_all(&[key("a")], &request).await.unwrap();
    assert_eq!(admitted.len(), 1);
    assert_eq!(admitted[0].1.snapshot.reserved, 300);

    let events = registry.settle_all(&[key("a")], request.reservation_id, 250, system_now_ms()).await;
    assert!(
        matches!(events.as_slice(), [(k, events)] if *k == key("a") && matches!(events.as_slice(), [LedgerEvent::ThresholdCrossed { percent: 20, .. }])),
        "{events:?}"
    );
    let after = snapshot(&registry, "a").await;
    assert_eq!((after.spend, after.reserved, after.remaining), (250, 0, 750));
    assert_eq!(registry.live_actors(), 1);
    assert_eq!(store.loads(), 1, "one load for the entity's lifetime");
    for _ in 0..16 {
        snapshot(&registry, "a").await;
    }
    let wait = registry.mailbox_wait();
    assert!(wait.messages >= 2 && wait.max >= wait.mean(), "one message in eight is timed: {wait:?}");
}

#[actix::test]
async fn an_entity_without_budget_admits_everything() {
    let store = store_with(&[]);
    let registry = registry(&store, config());
    let admitted = registry.reserve_all(&[key("none")], &reserve(&registry, i64::MAX)).await.unwrap();
    assert!(admitted.is_empty());
    assert_eq!(registry.snapshot(&key("none")).await.unwrap(), None);
    assert!(registry.settle_all(&[key("none")], 1, 5, system_now_ms()).await.is_empty());
}

#[actix::test]
async fn a_denial_on_the_third_entity_releases_the_first_two() {
    let store = store_with(&[("a", 1_000), ("b", 1_000), ("c", 100)]);
    let registry = registry(&store, config());
    let keys = [key("a"), key("b"), key("c")];

    let error = registry.reserve_all(&keys, &reserve(&registry, 200)).await.unwrap_err();
    let ReserveAllError::Denied { key: denied, denial } = error else {
        panic!("expected a denial, got {error:?}");
    };
    assert_eq!(denied, key("c"));
    assert_eq!(denial.reason, DenialReason::BudgetExceeded);
    for id in ["a", "b", "c"] {
        assert_eq!(snapshot(&registry, id).await.reserved, 0, "{id} holds nothing");
    }

    // The same request fits once the third budget allows it.
    store.put(key("c"), stored("c", BudgetConfig::new(1_000)));
    assert!(registry.invalidate(&key("c")).await.unwrap());
    let admitted = registry.reserve_all(&keys, &reserve(&registry, 200)).await.unwrap();
    assert_eq!(admitted.len(), 3);
}

#[actix::test]
async fn concurrent_reserves_never_exceed_a_strict_limit() {
    const LIMIT: i64 = 10_000;
    const ESTIMATE: i64 = 100;
    let store = store_with(&[("hot", LIMIT)]);
    let registry = registry(&store, config());

    // Callers on four other threads, each with many requests in flight at once.
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let registry = registry.clone();
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
                runtime.block_on(async {
                    let attempts = (0..100).map(|_| {
                        let registry = registry.clone();
                        async move {
                            let request = reserve(&registry, ESTIMATE);
                            match registry.reserve_all(&[key("hot")], &request).await {
                                Ok(_) => Some(request.reservation_id),
                                Err(ReserveAllError::Denied { .. }) => None,
                                Err(error) => panic!("{error}"),
                            }
                        }
                    });
                    join_all(attempts).await.into_iter().flatten().collect::<Vec<u64>>()
                })
            })
        })
        .collect();
    let admitted: Vec<u64> = threads.into_iter().flat_map(|thread| thread.join().unwrap()).collect();

    assert_eq!(i64::try_from(admitted.len()).unwrap() * ESTIMATE, LIMIT, "exactly the limit is admitted");
    let held = snapshot(&registry, "hot").await;
    assert_eq!((held.reserved, held.remaining), (LIMIT, 0));
    for id in admitted {
        registry.settle_all(&[key("hot")], id, ESTIMATE, system_now_ms()).await;
    }
    let settled = snapshot(&registry, "hot").await;
    assert_eq!((settled.spend, settled.reserved), (LIMIT, 0));
}

#[actix::test]
async fn concurrent_first_requests_start_one_actor() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let registry = registry.clone();
            std::thread::spawn(move || registry.get_or_start(&key("a")).unwrap())
        })
        .collect();
    let addrs: Vec<_> = threads.into_iter().map(|thread| thread.join().unwrap()).collect();
    assert!(addrs.windows(2).all(|pair| pair[0] == pair[1]));
    snapshot(&registry, "a").await;
    assert_eq!((registry.live_actors(), store.loads()), (1, 1));
}

#[actix::test]
async fn an_idle_actor_passivates_and_the_next_request_reloads_it() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, RegistryConfig { idle_timeout: Duration::from_millis(100), ..config() });

    // Not while a reservation is open.
    let request = reserve(&registry, 100);
    registry.reserve_all(&[key("a")], &request).await.unwrap();
    sleep(300).await;
    assert_eq!(registry.live_actors(), 1, "an actor with a reservation in flight stays");
    registry.release_all(&[key("a")], request.reservation_id).await;

    sleep(300).await;
    assert_eq!(registry.live_actors(), 0);
    assert_eq!(registry.stats().passivations, 1);
    assert_eq!(registry.restarts(), 0, "passivation is not a failure");

    store.put(key("a"), StoredBudget { spend: 40, ..stored("a", BudgetConfig::new(2_000)) });
    let reloaded = snapshot(&registry, "a").await;
    assert_eq!((reloaded.limit, reloaded.spend), (2_000, 40));
    assert_eq!(store.loads(), 2);
}

#[actix::test]
async fn a_panicking_handler_gets_its_actor_restarted_with_backoff() {
    let store = store_with(&[("a", 1_000)]);
    store.put(key("a"), StoredBudget { spend: 70, ..stored("a", BudgetConfig::new(1_000)) });
    let registry = registry(&store, config());
    registry.reserve_all(&[key("a")], &reserve(&registry, 500)).await.unwrap();

    let addr = registry.get_or_start(&key("a")).unwrap();
    assert_eq!(addr.send(Panic).await, Err(MailboxError::Closed));
    let restarted = snapshot(&registry, "a").await;
    assert_eq!((restarted.spend, restarted.reserved), (70, 0), "state reloaded from storage");
    assert_eq!(registry.restarts(), 1);
    assert_eq!(registry.live_actors(), 1);

    // Failing again at once: the next start waits `restart_backoff`.
    let addr = registry.get_or_start(&key("a")).unwrap();
    assert_eq!(addr.send(Panic).await, Err(MailboxError::Closed));
    let error = registry.snapshot(&key("a")).await.unwrap_err();
    assert!(matches!(error, RegistryError::Restarting { .. }), "{error:?}");
    assert_eq!(registry.restarts(), 2);
    sleep(80).await;
    assert_eq!(snapshot(&registry, "a").await.spend, 70);
}

#[actix::test]
async fn a_failed_load_is_restarted_once_storage_answers() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    store.set_failing(true);
    let error = registry.snapshot(&key("a")).await.unwrap_err();
    assert!(matches!(error, RegistryError::Restarting { .. } | RegistryError::Stopped), "{error:?}");
    assert!(registry.stats().load_failures >= 1);

    store.set_failing(false);
    sleep(150).await;
    assert_eq!(snapshot(&registry, "a").await.limit, 1_000);
}

#[actix::test]
async fn dropping_a_guard_releases_everywhere() {
    let store = store_with(&[("a", 1_000), ("b", 1_000)]);
    let registry = registry(&store, config());
    let keys = [key("a"), key("b"), key("no_budget")];

    let guard = registry.reserve_guarded(&keys, &reserve(&registry, 400)).await.unwrap();
    assert_eq!(guard.admissions().len(), 2);
    assert_eq!(snapshot(&registry, "a").await.reserved, 400);
    drop(guard);
    assert_eq!(snapshot(&registry, "a").await.reserved, 0);
    assert_eq!(snapshot(&registry, "b").await.reserved, 0);

    // A settled guard releases nothing.
    let guard = registry.reserve_guarded(&keys, &reserve(&registry, 400)).await.unwrap();
    guard.settle(300, system_now_ms()).await;
    let a = snapshot(&registry, "a").await;
    assert_eq!((a.spend, a.reserved), (300, 0));
}

#[actix::test]
async fn a_reservation_dropped_midway_releases_what_it_took() {
    let store = GatedStore::closed(store_with(&[("a", 1_000), ("b", 1_000)]));
    let registry = BudgetRegistry::new(config(), Arc::new(store.clone()), None).unwrap();
    store.gate.add_permits(1);
    snapshot(&registry, "a").await;

    // "b" is still loading, so the request waits there after reserving on "a".
    let keys = [key("a"), key("b")];
    let request = reserve(&registry, 100);
    let mut pending = Box::pin(registry.reserve_guarded(&keys, &request));
    for _ in 0..100 {
        assert!(pending.as_mut().now_or_never().is_none());
        if snapshot_now(&registry, "a").await == 100 {
            break;
        }
        sleep(1).await;
    }
    assert_eq!(snapshot_now(&registry, "a").await, 100, "reserved on the first entity");
    drop(pending);
    assert_eq!(snapshot_now(&registry, "a").await, 0);

    store.gate.add_permits(1);
    assert_eq!(snapshot(&registry, "b").await.reserved, 0, "the queued reserve was released too");
}

/// What `id` has reserved, from its live actor.
async fn snapshot_now(registry: &BudgetRegistry, id: &str) -> i64 {
    registry.snapshot_if_live(&key(id)).await.map_or(-1, |snapshot| snapshot.reserved)
}

#[actix::test]
async fn invalidate_applies_a_new_row_and_keeps_reservations_in_flight() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    let in_flight = reserve(&registry, 600);
    registry.reserve_all(&[key("a")], &in_flight).await.unwrap();

    store.put(key("a"), stored("a", BudgetConfig::new(2_000)));
    assert!(registry.invalidate(&key("a")).await.unwrap());
    let raised = snapshot(&registry, "a").await;
    assert_eq!((raised.limit, raised.reserved), (2_000, 600));
    assert!(registry.reserve_all(&[key("a")], &reserve(&registry, 1_500)).await.is_err());
    assert!(registry.reserve_all(&[key("a")], &reserve(&registry, 1_400)).await.is_ok());

    // The in-flight reservation still settles against the new row.
    registry.settle_all(&[key("a")], in_flight.reservation_id, 500, system_now_ms()).await;
    assert_eq!(snapshot(&registry, "a").await.spend, 500);

    // A manual reset in storage (spend back to 0) applies too.
    store.put(key("a"), stored("a", BudgetConfig::new(2_000)));
    registry.invalidate(&key("a")).await.unwrap();
    let reset = snapshot(&registry, "a").await;
    assert_eq!((reset.spend, reset.reserved), (0, 1_400));

    // Deleted: enforcement stops.
    store.remove(&key("a"));
    registry.invalidate(&key("a")).await.unwrap();
    assert_eq!(registry.snapshot(&key("a")).await.unwrap(), None);
    assert!(registry.reserve_all(&[key("a")], &reserve(&registry, i64::MAX)).await.unwrap().is_empty());

    // Without a live actor there is nothing to tell.
    assert!(!registry.invalidate(&key("cold")).await.unwrap());
}

#[actix::test]
async fn spend_committed_before_a_reload_is_not_counted_twice() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    let request = reserve(&registry, 100);
    registry.reserve_all(&[key("a")], &request).await.unwrap();

    // The accounting writer commits the cost, then the row is reloaded before the settle.
    store.put(key("a"), StoredBudget { spend: 90, ..stored("a", BudgetConfig::new(1_000)) });
    let committed_version = Some(registry.load_version());
    registry.invalidate(&key("a")).await.unwrap();
    let settle = Settle {
        reservation_id: request.reservation_id,
        actual: 90,
        now_ms: system_now_ms(),
        committed_version,
    };
    registry.get_or_start(&key("a")).unwrap().send(settle).await.unwrap();
    let after = snapshot(&registry, "a").await;
    assert_eq!((after.spend, after.reserved), (90, 0));

    // Committed spend reaches live actors only: a starting actor reads it from storage.
    let events = registry.record_spend(&[key("a"), key("cold")], 10, None, system_now_ms()).await;
    assert!(events.is_empty(), "no threshold configured: {events:?}");
    assert_eq!(snapshot(&registry, "a").await.spend, 100);
    assert_eq!(registry.live_actors(), 1);
}

/// A mark of a commit on the row of budget `id` at `seq`.
fn mark(id: &str, seq: i64) -> Option<SpendMark> {
    Some(SpendMark { budget_id: format!("svc_bgt_{id}").into(), seq })
}

#[actix::test]
async fn a_refresh_that_saw_a_commit_it_began_before_does_not_count_it_twice() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    let request = reserve(&registry, 600);
    registry.reserve_all(&[key("a")], &request).await.unwrap();

    // A budget change elsewhere: a refresh takes its version and begins its read; the
    // call's cost (600) is committed meanwhile, and the read sees it.
    let version = registry.load_version();
    let row = StoredBudget { spend: 600, spend_seq: 1, ..stored("a", BudgetConfig::new(1_000)) };
    let addr = registry.get_or_start(&key("a")).unwrap();
    addr.send(Reload { budget: Some(row), version: Some(version) }).await.unwrap();

    // The settle comes after the read, with a version later than the refresh's: only the
    // commit's mark on the row tells that the read counts it.
    let batch =
        EntitySettles { key: key("a"), mark: mark("a", 1), settles: vec![(request.reservation_id, 600)] };
    registry.settle_batch(vec![batch], system_now_ms()).await;
    let after = snapshot(&registry, "a").await;
    assert_eq!((after.spend, after.reserved), (600, 0));
    registry.reserve_all(&[key("a")], &reserve(&registry, 400)).await.expect("400 still fits");

    // A later commit (seq 2) counts; spend without a reservation likewise.
    let next = reserve(&registry, 0);
    let batch = EntitySettles { key: key("a"), mark: mark("a", 2), settles: vec![(next.reservation_id, 10)] };
    registry.settle_batch(vec![batch], system_now_ms()).await;
    registry.record_committed_spend(&key("a"), 5, mark("a", 3), system_now_ms()).await;
    assert_eq!(snapshot(&registry, "a").await.spend, 615);

    // The budget was deleted and created again (a new row): spend committed to the old
    // row is not the new budget's.
    let renewed =
        StoredBudget { budget_id: "svc_bgt_renewed".to_owned(), ..stored("a", BudgetConfig::new(1_000)) };
    addr.send(Reload { budget: Some(renewed), version: Some(registry.load_version()) }).await.unwrap();
    registry.record_committed_spend(&key("a"), 70, mark("a", 4), system_now_ms()).await;
    assert_eq!(snapshot(&registry, "a").await.spend, 0);
}

#[actix::test]
async fn the_reaper_releases_reservations_whose_request_died() {
    let store = store_with(&[("a", 1_000)]);
    let registry =
        registry(&store, RegistryConfig { reservation_max_age: Duration::from_millis(100), ..config() });
    let request = reserve(&registry, 700);
    let admitted = registry.reserve_all(&[key("a")], &request).await.unwrap();
    assert_eq!(admitted[0].1.snapshot.reserved, 700);

    sleep(300).await;
    assert_eq!(snapshot(&registry, "a").await.reserved, 0);
    assert_eq!(registry.stats().reaped, 1);
    // A late settle of the reaped reservation still counts its cost.
    registry.settle_all(&[key("a")], request.reservation_id, 650, system_now_ms()).await;
    assert_eq!(snapshot(&registry, "a").await.spend, 650);
}

#[derive(Default)]
struct RecordingSink {
    events: Mutex<Vec<(EntityKey, String, LedgerEvent)>>,
}

impl EventSink for RecordingSink {
    fn publish(&self, key: &EntityKey, budget_id: &str, events: Vec<LedgerEvent>) {
        let mut recorded = self.events.lock().unwrap();
        recorded.extend(events.into_iter().map(|event| (key.clone(), budget_id.to_owned(), event)));
    }
}

#[actix::test]
async fn a_breaker_recovers_on_the_timer_and_velocity_state_shows_it() {
    let velocity = VelocityConfig { limit: 500, window_ms: 60_000, cooldown_ms: 150 };
    let store = MemoryStore::new();
    store.put(key("v"), stored("v", BudgetConfig { velocity: Some(velocity), ..BudgetConfig::new(10_000) }));
    store.put(key("plain"), stored("plain", BudgetConfig::new(10_000)));
    let sink = Arc::new(RecordingSink::default());
    let registry = BudgetRegistry::new(config(), Arc::new(store.clone()), Some(sink.clone())).unwrap();

    registry.reserve_all(&[key("plain")], &reserve(&registry, 1)).await.unwrap();
    let error = registry.reserve_all(&[key("v")], &reserve(&registry, 600)).await.unwrap_err();
    let ReserveAllError::Denied { denial, .. } = error else { panic!("{error:?}") };
    assert!(matches!(denial.reason, DenialReason::VelocityExceeded { .. }));

    let state = registry.velocity_state("org_1").await;
    assert_eq!(state.len(), 1, "only the velocity budget: {state:?}");
    assert_eq!(state[0]["entityId"], "v");
    assert_eq!(state[0]["breakerOpen"], true);
    assert!(registry.velocity_state("org_2").await.is_empty());

    sleep(400).await;
    let recorded = sink.events.lock().unwrap().clone();
    assert!(
        matches!(recorded.as_slice(), [(k, id, LedgerEvent::VelocityRecovered { limit: 500, .. })] if *k == key("v") && id == "svc_bgt_v"),
        "{recorded:?}"
    );
    assert_eq!(registry.velocity_state("org_1").await[0]["breakerOpen"], false);
}

/// A store whose loads wait until released, to hold actors in their loading state.
#[derive(Clone)]
pub(super) struct GatedStore {
    inner: MemoryStore,
    pub(super) gate: Arc<tokio::sync::Semaphore>,
}

impl GatedStore {
    pub(super) fn closed(inner: MemoryStore) -> Self {
        Self { inner, gate: Arc::new(tokio::sync::Semaphore::new(0)) }
    }
}

impl BudgetStore for GatedStore {
    fn load(&self, key: &EntityKey) -> BoxFuture<'static, Result<Option<StoredBudget>, StoreError>> {
        let (gate, load) = (Arc::clone(&self.gate), self.inner.load(key));
        Box::pin(async move {
            // Each load takes a permit for good: one `add_permits(1)` lets one load through.
            gate.acquire().await.map_err(|error| StoreError::Unavailable(error.to_string()))?.forget();
            load.await
        })
    }
}

/// Polls a future once, keeping it.
pub(super) struct PollOnce<F>(pub(super) Option<Pin<Box<F>>>);

impl<F: Future> Future for PollOnce<F> {
    type Output = Pin<Box<F>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut future = self.0.take().unwrap();
        assert!(future.as_mut().poll(cx).is_pending());
        Poll::Ready(future)
    }
}

#[actix::test]
async fn a_failed_refresh_keeps_the_row_in_force_and_retries() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    snapshot(&registry, "a").await;

    store.put(key("a"), stored("a", BudgetConfig::new(2_000)));
    store.set_failing(true);
    assert!(registry.invalidate(&key("a")).await.is_err());
    assert_eq!(snapshot(&registry, "a").await.limit, 1_000, "the previous row stays in force");

    store.set_failing(false);
    sleep(300).await;
    assert_eq!(snapshot(&registry, "a").await.limit, 2_000, "a background retry applied the new row");
    assert_eq!(registry.restarts(), 0, "a failed refresh does not kill the actor");
}

/// The HTTP layer may spawn these futures on a multi-threaded runtime.
#[actix::test]
async fn registry_futures_and_the_guard_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    let (keys, request) = (vec![key("a")], reserve(&registry, 1));
    assert_send(&registry.reserve_all(&keys, &request));
    assert_send(&registry.settle_all(&keys, 1, 1, 0));
    assert_send(&registry.release_all(&keys, 1));
    assert_send(&registry.record_spend(&keys, 1, None, 0));
    assert_send(&registry.snapshot(&keys[0]));
    assert_send(&registry.invalidate(&keys[0]));
    assert_send(&registry.velocity_state("org_1"));
    let guard = registry.reserve_guarded(&keys, &request).await.unwrap();
    assert_send(&guard);
    assert_send(&guard.settle(1, 0));
}

#[actix::test]
async fn an_adopting_thread_hosts_the_actors_it_needs_first() {
    let store = store_with(&[("here", 1_000), ("there", 1_000)]);
    let elsewhere = registry(&store, config());
    // Not adopted: the actor starts on one of the registry's own arbiters.
    let request = reserve(&elsewhere, 10);
    elsewhere.reserve_all(&[key("there")], &request).await.unwrap();
    assert_eq!(super::actor::residents_here(), 0);
    elsewhere.release_all(&[key("there")], request.reservation_id).await;

    let local = registry(&store, config());
    assert!(local.adopt_current_arbiter());
    assert!(local.adopt_current_arbiter(), "adopting twice is harmless");
    let request = reserve(&local, 10);
    local.reserve_all(&[key("here")], &request).await.unwrap();
    assert_eq!(super::actor::residents_here(), 1, "the actor lives on the caller's thread");
    local.settle_all(&[key("here")], request.reservation_id, 7, system_now_ms()).await;
    let s = snapshot(&local, "here").await;
    assert_eq!((s.spend, s.reserved), (7, 0));
    // Off an arbiter there is nothing to adopt.
    assert!(!std::thread::spawn(move || local.adopt_current_arbiter()).join().unwrap());
}

/// A [`GatedStore`] that counts the loads begun.
#[derive(Clone)]
struct CountedStore {
    gated: GatedStore,
    loads: Arc<std::sync::atomic::AtomicUsize>,
}

impl BudgetStore for CountedStore {
    fn load(&self, key: &EntityKey) -> BoxFuture<'static, Result<Option<StoredBudget>, StoreError>> {
        self.loads.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        self.gated.load(key)
    }
}

#[actix::test]
async fn spend_settled_while_a_refresh_reads_its_row_is_not_lost() {
    let inner = store_with(&[("a", 1_000)]);
    let store = CountedStore { gated: GatedStore::closed(inner.clone()), loads: Arc::default() };
    let registry = BudgetRegistry::new(config(), Arc::new(store.clone()), None).unwrap();
    store.gated.gate.add_permits(1);
    snapshot(&registry, "a").await;
    let request = reserve(&registry, 600);
    registry.reserve_all(&[key("a")], &request).await.unwrap();

    // A budget change elsewhere: the refresh reads the row (spend 0) and the read is slow.
    let addr = registry.get_or_start(&key("a")).unwrap();
    let refresh = PollOnce(Some(Box::pin(addr.send(Refresh { version: registry.load_version() })))).await;
    while store.loads.load(std::sync::atomic::Ordering::SeqCst) < 2 {
        sleep(1).await;
    }
    // Meanwhile the call's cost is committed and its settle reaches the actor.
    inner.put(key("a"), StoredBudget { spend: 600, ..stored("a", BudgetConfig::new(1_000)) });
    let committed_version = Some(registry.load_version());
    let settle = Settle {
        reservation_id: request.reservation_id,
        actual: 600,
        now_ms: system_now_ms(),
        committed_version,
    };
    let settled = PollOnce(Some(Box::pin(addr.send(settle)))).await;
    sleep(20).await;
    store.gated.gate.add_permits(1);
    refresh.await.unwrap().unwrap();
    settled.await.unwrap();

    // The read (spend 0) came before the commit: the settle's 600 still counts, so only
    // 400 fits.
    let after = snapshot(&registry, "a").await;
    assert_eq!((after.spend, after.reserved), (600, 0));
    assert!(registry.reserve_all(&[key("a")], &reserve(&registry, 401)).await.is_err());
}
