//! Admission under load: a stalled actor queues reservations instead of refusing them,
//! a reservation past its deadline takes no hold, the waiting bound, settlement batches,
//! and period boundaries in the actor's memory.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use futures_util::future::{join_all, BoxFuture};

use super::messages::{Admit, Expired, Timed};
use super::tests::{config, key, registry, reserve, snapshot, store_with, stored, GatedStore, PollOnce};
use super::*;
use crate::registry::{
    system_now_ms, BudgetRegistry, EntitySettles, RefusalReason, RegistryConfig, RegistryError,
    ReserveAllError, Waiting,
};
use crate::store::{BudgetStore, EntityKey, MemoryStore, StoreError, StoredBudget};

/// A store whose loads block the calling thread (the actor's arbiter) while it is
/// closed: a stall of the actor's thread, as a commit holding the core would cause.
#[derive(Clone)]
struct BlockingStore {
    inner: MemoryStore,
    state: Arc<(Mutex<Stall>, Condvar)>,
}

#[derive(Default)]
struct Stall {
    closed: bool,
    /// Loads currently blocked.
    blocked: usize,
}

impl BlockingStore {
    fn new(inner: MemoryStore) -> Self {
        Self { inner, state: Arc::default() }
    }

    fn close(&self) {
        self.state.0.lock().unwrap().closed = true;
    }

    fn open(&self) {
        self.state.0.lock().unwrap().closed = false;
        self.state.1.notify_all();
    }

    /// Waits until a load is blocked, i.e. the actor's thread is stalled.
    async fn stalled(&self) {
        while self.state.0.lock().unwrap().blocked == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

impl BudgetStore for BlockingStore {
    fn load(&self, key: &EntityKey) -> BoxFuture<'static, Result<Option<StoredBudget>, StoreError>> {
        let (lock, open) = &*self.state;
        let mut stall = lock.lock().unwrap();
        stall.blocked += 1;
        while stall.closed {
            stall = open.wait(stall).unwrap();
        }
        stall.blocked -= 1;
        drop(stall);
        self.inner.load(key)
    }
}

fn blocking_registry(store: &BlockingStore, config: RegistryConfig) -> BudgetRegistry {
    BudgetRegistry::new(config, Arc::new(store.clone()), None).unwrap()
}

/// Stalls the thread of the actor of `key` (and of every actor on its arbiter): a
/// refresh that blocks in its load.
async fn stall(registry: &BudgetRegistry, store: &BlockingStore, key: &EntityKey) {
    let addr = registry.get_or_start(key).unwrap();
    snapshot_of(registry, key).await;
    store.close();
    addr.do_send(Refresh { version: registry.load_version() });
    store.stalled().await;
}

async fn snapshot_of(registry: &BudgetRegistry, key: &EntityKey) -> BudgetSnapshot {
    registry.snapshot(key).await.unwrap().unwrap()
}

#[actix::test]
async fn settles_and_spend_queued_behind_a_stall_never_refuse_a_reservation() {
    const CALLS: usize = 2_000;
    const RESERVATIONS: usize = 200;
    let store = BlockingStore::new(store_with(&[("hot", 1_000_000_000), ("blocker", 1)]));
    // One arbiter: the blocked refresh of another entity stalls the hot entity's thread.
    let registry = blocking_registry(&store, RegistryConfig { arbiters: 1, ..config() });
    let keys = [key("hot")];
    let mut taken = Vec::new();
    for _ in 0..CALLS {
        let request = reserve(&registry, 10);
        registry.reserve_all(&keys, &request).await.unwrap();
        taken.push(request.reservation_id);
    }

    stall(&registry, &store, &key("blocker")).await;
    // Thousands of messages queued behind the stall: every call's settle, and as much
    // committed SDK spend.
    let mut queued = Vec::new();
    for &id in &taken {
        queued.push(PollOnce(Some(Box::pin(registry.settle_all(&keys, id, 7, system_now_ms())))).await);
    }
    let mut spends = Vec::new();
    for _ in 0..CALLS {
        spends.push(PollOnce(Some(Box::pin(registry.record_spend(&keys, 1, None, system_now_ms())))).await);
    }
    let requests: Vec<Reserve> = (0..RESERVATIONS).map(|_| reserve(&registry, 10)).collect();
    let mut reservations = Vec::new();
    for request in &requests {
        reservations.push(PollOnce(Some(Box::pin(registry.reserve_all(&keys, request)))).await);
    }
    assert_eq!(registry.waiting_reservations(&keys[0]), RESERVATIONS, "settles and spend are not counted");
    assert_eq!(registry.busiest(1, 5), vec![(keys[0].clone(), RESERVATIONS)]);

    store.open();
    join_all(queued).await;
    join_all(spends).await;
    for answer in join_all(reservations).await {
        answer.unwrap();
    }
    let stats = registry.stats();
    assert_eq!(stats.refused, [[0; 2]; 4], "nothing refused");
    let s = snapshot_of(&registry, &keys[0]).await;
    let calls = i64::try_from(CALLS).unwrap();
    assert_eq!((s.spend, s.reserved), (calls * 7 + calls, 10 * i64::try_from(RESERVATIONS).unwrap()));
    assert_eq!(registry.waiting_reservations(&keys[0]), 0);
    let user =
        stats.waits[crate::registry::ENTITY_TYPES.iter().position(|t| *t == EntityType::User).unwrap()];
    assert!(user.count > 0, "mailbox waits are recorded per entity type");
}

#[actix::test]
async fn a_reservation_past_its_deadline_is_refused_and_takes_no_hold() {
    let store = BlockingStore::new(store_with(&[("slow", 1_000)]));
    let deadline = Duration::from_millis(50);
    let registry = blocking_registry(&store, RegistryConfig { admission_deadline: deadline, ..config() });
    let keys = [key("slow")];
    stall(&registry, &store, &keys[0]).await;

    let error = registry.reserve_all(&keys, &reserve(&registry, 100)).await.unwrap_err();
    let ReserveAllError::Unavailable { key: refused, error } = error else { panic!("{error:?}") };
    assert_eq!(refused, keys[0]);
    assert_eq!(error, RegistryError::DeadlinePassed { deadline });
    assert_eq!(error.to_string(), "a reservation waited longer than 50 ms");
    assert_eq!(registry.stats().refused_for(RefusalReason::DeadlinePassed), 1);

    store.open();
    let s = snapshot_of(&registry, &keys[0]).await;
    assert_eq!((s.reserved, s.spend), (0, 0), "the late reservation holds nothing");
    registry.reserve_all(&keys, &reserve(&registry, 100)).await.unwrap();
}

/// The actor itself refuses a reservation whose deadline passed while it waited, even
/// with no release behind it (a caller that timed out must never leave a hold).
#[actix::test]
async fn the_actor_refuses_a_reservation_whose_deadline_passed() {
    let store = store_with(&[("a", 1_000)]);
    let registry = registry(&store, config());
    let addr = registry.get_or_start(&key("a")).unwrap();
    let request = reserve(&registry, 100);
    let waiting = Waiting::for_test(&registry, &key("a"));
    let past = Instant::now().checked_sub(Duration::from_millis(1)).unwrap();
    let answer = addr.send(Timed::now(Admit { reserve: request, deadline: past, _waiting: waiting })).await;
    assert_eq!(answer.unwrap(), Err(Expired));
    assert_eq!(snapshot(&registry, "a").await.reserved, 0);
    assert_eq!(registry.waiting_reservations(&key("a")), 0, "handled, no longer waiting");
}

#[actix::test]
async fn reservations_waiting_for_one_entity_are_bounded() {
    let store = GatedStore::closed(store_with(&[("a", 1_000)]));
    let registry = BudgetRegistry::new(
        RegistryConfig { max_waiting_reservations: 2, ..config() },
        Arc::new(store.clone()),
        None,
    )
    .unwrap();
    let keys = [key("a")];
    let (one, two) = (reserve(&registry, 100), reserve(&registry, 100));
    let first = PollOnce(Some(Box::pin(registry.reserve_all(&keys, &one)))).await;
    let second = PollOnce(Some(Box::pin(registry.reserve_all(&keys, &two)))).await;
    let error = registry.reserve_all(&keys, &reserve(&registry, 100)).await.unwrap_err();
    assert!(
        matches!(error, ReserveAllError::Unavailable { error: RegistryError::Overloaded { waiting: 2 }, .. }),
        "{error:?}"
    );
    assert_eq!(registry.stats().refused_for(RefusalReason::Overloaded), 1);
    assert_eq!(registry.stats().refused[1], [0, 0], "counted for its own entity type (user) only");

    store.gate.add_permits(1);
    assert_eq!(first.await.unwrap()[0].1.snapshot.reserved, 100);
    assert_eq!(second.await.unwrap()[0].1.snapshot.reserved, 200);
}

#[actix::test]
async fn one_message_settles_a_whole_commit() {
    let store = store_with(&[("a", 1_000), ("b", 1_000)]);
    let registry = registry(&store, config());
    let keys = [key("a"), key("b")];
    let (one, two) = (reserve(&registry, 100), reserve(&registry, 200));
    registry.reserve_all(&keys, &one).await.unwrap();
    registry.reserve_all(&keys[..1], &two).await.unwrap();

    let batch = |id: &str, settles| EntitySettles { key: key(id), mark: None, settles };
    let batches = vec![
        batch("a", vec![(one.reservation_id, 50), (two.reservation_id, 150)]),
        batch("b", vec![(one.reservation_id, 50)]),
        batch("nobody", vec![(one.reservation_id, 50)]),
    ];
    registry.settle_batch(batches, system_now_ms()).await;
    let (a, b) = (snapshot(&registry, "a").await, snapshot(&registry, "b").await);
    assert_eq!((a.spend, a.reserved, b.spend, b.reserved), (200, 0, 50, 0));
    assert!(registry.snapshot_if_live(&key("nobody")).await.is_none(), "no actor is started");
}

/// A reservation or settle that arrives after the period boundary counts in the new
/// period, before any sweep has rolled it.
#[actix::test]
async fn the_period_boundary_is_exact_in_memory() {
    let now = system_now_ms();
    let start = period_start(ResetInterval::Daily, now);
    let next = next_period_start(ResetInterval::Daily, start);
    let store = MemoryStore::new();
    let config_daily =
        BudgetConfig { reset_interval: Some(ResetInterval::Daily), ..BudgetConfig::new(1_000) };
    store.put(key("p"), StoredBudget { spend: 900, period_start: Some(start), ..stored("p", config_daily) });
    // Sweeps far apart: only messages can roll the period here.
    let registry =
        registry(&store, RegistryConfig { housekeeping_interval: Duration::from_secs(3_600), ..config() });

    let before = Reserve { now_ms: now, ..reserve(&registry, 100) };
    registry.reserve_all(&[key("p")], &before).await.unwrap();
    let after = Reserve { now_ms: next, ..reserve(&registry, 500) };
    let admitted = registry.reserve_all(&[key("p")], &after).await.unwrap();
    assert!(
        admitted[0].1.events.iter().any(|e| matches!(e, LedgerEvent::Reset { previous_spend: 900, .. })),
        "the reservation after the boundary rolled the period: {:?}",
        admitted[0].1.events
    );
    let s = snapshot(&registry, "p").await;
    assert_eq!((s.spend, s.period_start), (0, Some(next)));

    let batch = EntitySettles { key: key("p"), mark: None, settles: vec![(before.reservation_id, 80)] };
    registry.settle_batch(vec![batch], next + 1).await;
    let s = snapshot(&registry, "p").await;
    assert_eq!((s.spend, s.reserved), (80, 500), "the settle after the boundary counts in the new period");
}
