//! Budget benchmarks, reported and not asserted:
//!
//! * `ledger`: the pure rules alone (criterion): one `reserve`, and `reserve` + `settle`.
//! * `latency`: reserve + settle through budget actors, percentiles from hdrhistogram —
//!   callers on another thread (a tokio current-thread runtime, as an actix-web worker
//!   is) and on the actor's own arbiter thread; one hot entity and 10,000 entities round
//!   robin; through the registry and through a bare `Addr`.
//! * `memory`: RSS of 100,000 live actors with budgets, in a child process so the figure
//!   is its own, plus the CPU their housekeeping timers cost while idle.
//!
//! `cargo bench -p spendgate-actors --bench budget` runs everything;
//! `BUDGET_BENCH=ledger|latency|memory` runs one part; `BUDGET_SCENARIO=<text>` keeps the
//! latency scenarios whose name contains the text.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "benchmark code")]

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Addr, System};
use actors::budget::{
    BudgetActor, BudgetConfig, BudgetLedger, EntityType, Fingerprint, LoopConfig, Reserve, ReserveRequest,
    Settle, VelocityConfig,
};
use actors::registry::{system_now_ms, BudgetRegistry, RegistryConfig};
use actors::store::{BudgetStore, EntityKey, MemoryStore, StoreError, StoredBudget};
use criterion::Criterion;
use futures_util::future::{join_all, BoxFuture};
use hdrhistogram::Histogram;

const PART: &str = "BUDGET_BENCH";
const MEMORY_CHILD: &str = "memory-child";
const T0: i64 = 1_767_225_600_000;
const BIG: i64 = i64::MAX / 4;

fn main() {
    let only = std::env::var(PART).ok();
    if only.as_deref() == Some(MEMORY_CHILD) {
        memory_child();
        return;
    }
    let run = |part: &str| only.as_deref().is_none_or(|only| only == part);
    if run("ledger") {
        let mut criterion = Criterion::default().configure_from_args();
        ledger(&mut criterion);
        criterion.final_summary();
    }
    if run("latency") {
        latency();
    }
    if run("memory") {
        memory();
    }
}

// ----- ledger -----

/// Thresholds, velocity, a session limit and loop detection all on, as a heavily
/// configured budget would be.
fn full_config() -> BudgetConfig {
    BudgetConfig {
        thresholds: vec![50, 80, 90],
        velocity: Some(VelocityConfig { limit: BIG, window_ms: 60_000, cooldown_ms: 30_000 }),
        session_limit: Some(BIG),
        loop_detection: LoopConfig { max_calls: 1_000_000, ..LoopConfig::default() },
        ..BudgetConfig::new(BIG)
    }
}

const SESSIONS: [&str; 4] = ["session-a", "session-b", "session-c", "session-d"];

fn request(id: u64, full: bool) -> ReserveRequest<'static> {
    let index = usize::try_from(id % 4).unwrap();
    ReserveRequest {
        reservation_id: id,
        estimate: 10,
        session_id: full.then_some(SESSIONS[index]),
        finalize: false,
        fingerprint: full.then_some(Fingerprint { provider: "openai", model: "gpt-4o", hash: id % 100 }),
        floor: None,
    }
}

/// Times `iters` reserves in chunks, releasing each chunk untimed so the ledger stays
/// small.
fn reserve_loop(iters: u64, config: &BudgetConfig, full: bool) -> Duration {
    let mut ledger = BudgetLedger::new(config.clone(), 0, None, T0);
    let (mut total, mut next_id, mut left) = (Duration::ZERO, 0u64, iters);
    while left > 0 {
        let chunk = left.min(1_000);
        let first = next_id + 1;
        let start = Instant::now();
        for _ in 0..chunk {
            next_id += 1;
            let now = T0 + i64::try_from(next_id).unwrap();
            black_box(ledger.reserve(&request(next_id, full), now).is_ok());
        }
        total += start.elapsed();
        for id in first..=next_id {
            ledger.release(id);
        }
        left -= chunk;
    }
    total
}

fn ledger(criterion: &mut Criterion) {
    let plain = BudgetConfig::new(BIG);
    let full = full_config();
    let mut group = criterion.benchmark_group("ledger");
    group.bench_function("reserve/plain", |b| b.iter_custom(|iters| reserve_loop(iters, &plain, false)));
    group.bench_function("reserve/full", |b| b.iter_custom(|iters| reserve_loop(iters, &full, true)));
    for (name, config, with_all) in
        [("reserve+settle/plain", &plain, false), ("reserve+settle/full", &full, true)]
    {
        group.bench_function(name, |b| {
            let mut ledger = BudgetLedger::new(config.clone(), 0, None, T0);
            let mut id = 0u64;
            b.iter(|| {
                id += 1;
                let now = T0 + i64::try_from(id).unwrap();
                black_box(ledger.reserve(&request(id, with_all), now).is_ok());
                black_box(ledger.settle(id, 7, now));
            });
        });
    }
    group.finish();
}

// ----- latency through actors -----

/// Scenarios run interleaved, in this many passes, so a change in the machine's state
/// (a noisy neighbour, the host's idle policy) weighs on all of them alike.
const PASSES: u64 = 5;
const WARMUP: u64 = 4_000;
/// Measured rounds per pass.
const ROUNDS: u64 = 40_000;
const ENTITIES: usize = 10_000;

fn entity(i: usize) -> EntityKey {
    EntityKey::new("svc_org_0123456789abcdef0123456789abcdef", EntityType::User, format!("svc_usr_{i:032x}"))
}

fn budget(i: usize) -> StoredBudget {
    StoredBudget {
        budget_id: format!("svc_bgt_{i:032x}"),
        config: BudgetConfig::new(BIG),
        spend: 0,
        period_start: None,
        spend_seq: 0,
    }
}

fn reserve_message(reservation_id: u64) -> Reserve {
    Reserve {
        reservation_id,
        estimate: 10,
        session_id: None,
        finalize: false,
        fingerprint: None,
        now_ms: system_now_ms(),
        floor: None,
    }
}

/// One reserve + settle per round; returns the histogram of round times in nanoseconds.
#[derive(Clone)]
enum Path {
    /// `reserve_all` + `settle_all`, the way the HTTP layer calls.
    Registry(BudgetRegistry, Arc<Vec<EntityKey>>),
    /// `Addr::send` of `Reserve` then `Settle`, nothing else.
    Addr(Vec<Addr<BudgetActor>>),
}

async fn rounds(path: Path, warmup: u64, rounds: u64, first_id: u64) -> Histogram<u64> {
    let mut histogram = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).unwrap();
    let mut id = first_id;
    for round in 0..warmup + rounds {
        id += 1;
        let start = Instant::now();
        match &path {
            Path::Registry(registry, keys) => {
                let key = std::slice::from_ref(&keys[usize::try_from(round).unwrap() % keys.len()]);
                registry.reserve_all(key, &reserve_message(id)).await.unwrap();
                registry.settle_all(key, id, 7, system_now_ms()).await;
            }
            Path::Addr(addrs) => {
                let addr = &addrs[usize::try_from(round).unwrap() % addrs.len()];
                addr.send(reserve_message(id)).await.unwrap().unwrap();
                let settle = Settle {
                    reservation_id: id,
                    actual: 7,
                    now_ms: system_now_ms(),
                    committed_version: None,
                };
                black_box(addr.send(settle).await.unwrap());
            }
        }
        if round >= warmup {
            histogram.record(u64::try_from(start.elapsed().as_nanos()).unwrap()).unwrap();
        }
    }
    histogram
}

/// Runs `path` from a new thread with its own tokio current-thread runtime.
fn from_other_thread(path: Path, first_id: u64) -> Histogram<u64> {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(rounds(path, WARMUP, ROUNDS, first_id))
    })
    .join()
    .unwrap()
}

/// Runs `path` as a task on the arbiter thread of `key`.
fn from_arbiter_of(registry: &BudgetRegistry, key: &EntityKey, path: Path, first_id: u64) -> Histogram<u64> {
    let (tx, rx) = std::sync::mpsc::channel();
    registry.arbiter_for(key).spawn_fn(move || {
        actix::spawn(async move {
            tx.send(rounds(path, WARMUP, ROUNDS, first_id).await).unwrap();
        });
    });
    rx.recv().unwrap()
}

fn micros(nanos: u64) -> f64 {
    // Display only.
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let value = nanos as f64 / 1_000.0;
    value
}

fn print_row(name: &str, histogram: &Histogram<u64>) {
    println!(
        "{name:<58} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>8.2}",
        micros(histogram.value_at_quantile(0.50)),
        micros(histogram.value_at_quantile(0.90)),
        micros(histogram.value_at_quantile(0.99)),
        micros(histogram.value_at_quantile(0.999)),
        micros(histogram.max()),
        histogram.mean() / 1_000.0,
    );
}

/// Runs one scenario from a first reservation id.
type Scenario<'a> = Box<dyn Fn(u64) -> Histogram<u64> + 'a>;

fn latency() {
    let _system = System::new();
    let store = MemoryStore::new();
    for i in 0..=ENTITIES {
        store.put(entity(i), budget(i));
    }
    let config = RegistryConfig::default();
    let arbiters = config.arbiters;
    let registry = BudgetRegistry::new(config, Arc::new(store), None).unwrap();
    let hot = entity(ENTITIES);
    let spread: Arc<Vec<EntityKey>> = Arc::new((0..ENTITIES).map(entity).collect());

    // Start and load every actor first: first-use loads are not what is measured.
    std::thread::spawn({
        let (registry, spread, hot) = (registry.clone(), Arc::clone(&spread), hot.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                registry.snapshot(&hot).await.unwrap();
                for chunk in spread.chunks(1_000) {
                    join_all(chunk.iter().map(|key| registry.snapshot(key))).await;
                }
            });
        }
    })
    .join()
    .unwrap();
    let hot_addr = vec![registry.get_or_start(&hot).unwrap()];
    let spread_addrs: Vec<_> = spread.iter().map(|key| registry.get_or_start(key).unwrap()).collect();

    println!();
    println!(
        "reserve + settle round trip, µs ({PASSES} interleaved passes of {ROUNDS} rounds after {WARMUP} warm-up; \
         {arbiters} arbiters, {} cores)",
        std::thread::available_parallelism().map_or(1, usize::from)
    );
    println!(
        "{:<58} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "scenario", "p50", "p90", "p99", "p99.9", "max", "mean"
    );
    let hot_keys = Arc::new(vec![hot.clone()]);
    let scenarios: Vec<(&str, Scenario<'_>)> = vec![
        (
            "other thread, registry, 1 hot entity",
            Box::new(|id| from_other_thread(Path::Registry(registry.clone(), Arc::clone(&hot_keys)), id)),
        ),
        (
            "other thread, registry, 10k entities round robin",
            Box::new(|id| from_other_thread(Path::Registry(registry.clone(), Arc::clone(&spread)), id)),
        ),
        (
            "other thread, bare Addr, 1 hot entity",
            Box::new(|id| from_other_thread(Path::Addr(hot_addr.clone()), id)),
        ),
        (
            "other thread, bare Addr, 10k entities round robin",
            Box::new(|id| from_other_thread(Path::Addr(spread_addrs.clone()), id)),
        ),
        (
            "same thread (actor's arbiter), registry, 1 hot entity",
            Box::new(|id| {
                from_arbiter_of(&registry, &hot, Path::Registry(registry.clone(), Arc::clone(&hot_keys)), id)
            }),
        ),
        (
            "same thread (actor's arbiter), bare Addr, 1 hot entity",
            Box::new(|id| from_arbiter_of(&registry, &hot, Path::Addr(hot_addr.clone()), id)),
        ),
    ];
    let filter = std::env::var("BUDGET_SCENARIO").unwrap_or_default();
    let chosen: Vec<_> = scenarios.iter().filter(|(name, _)| name.contains(&filter)).collect();
    let mut histograms: Vec<Histogram<u64>> =
        chosen.iter().map(|_| Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap()).collect();
    let mut first_id = 0u64;
    for _ in 0..PASSES {
        for ((_, run), histogram) in chosen.iter().zip(&mut histograms) {
            first_id += 1 << 32;
            histogram.add(run(first_id)).unwrap();
        }
    }
    for ((name, _), histogram) in chosen.iter().zip(&histograms) {
        print_row(name, histogram);
    }
    let wait = registry.mailbox_wait();
    println!(
        "mailbox wait over the registry scenarios: {} messages, mean {:.2} µs, max {:.2} µs",
        wait.messages,
        micros(u64::try_from(wait.mean().as_nanos()).unwrap()),
        micros(u64::try_from(wait.max.as_nanos()).unwrap()),
    );
}

// ----- memory -----

const ACTORS: usize = 100_000;

fn memory() {
    let exe = std::env::current_exe().unwrap();
    for budgets in ["with", "without"] {
        let status = std::process::Command::new(&exe)
            .env(PART, MEMORY_CHILD)
            .env("BUDGET_BENCH_BUDGETS", budgets)
            .status();
        assert!(status.unwrap().success(), "memory child failed");
    }
}

/// Answers every load with a budget made up from the key, so the store itself holds no
/// memory and the RSS measured is the service's own.
struct SyntheticStore {
    budgets: bool,
}

impl BudgetStore for SyntheticStore {
    fn load(&self, key: &EntityKey) -> BoxFuture<'static, Result<Option<StoredBudget>, StoreError>> {
        let budget = self.budgets.then(|| StoredBudget {
            budget_id: format!("svc_bgt_{}", &key.entity_id[8..]),
            config: BudgetConfig { thresholds: vec![50, 80, 90], ..BudgetConfig::new(BIG) },
            spend: 0,
            period_start: None,
            spend_seq: 0,
        });
        Box::pin(std::future::ready(Ok(budget)))
    }
}

/// `VmRSS` of this process in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// User + system CPU time of this process, in clock ticks.
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after_name = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn memory_child() {
    let budgets = std::env::var("BUDGET_BENCH_BUDGETS").is_ok_and(|value| value == "with");
    let system = System::new();
    let config = RegistryConfig::default();
    let housekeeping = config.housekeeping_interval;
    let registry = BudgetRegistry::new(config, Arc::new(SyntheticStore { budgets }), None).unwrap();
    let before = rss_kib();

    let started = Instant::now();
    system.block_on(async {
        for chunk in 0..ACTORS / 1_000 {
            let keys: Vec<EntityKey> = (chunk * 1_000..(chunk + 1) * 1_000).map(entity).collect();
            for snapshot in join_all(keys.iter().map(|key| registry.snapshot(key))).await {
                assert_eq!(snapshot.unwrap().is_some(), budgets);
            }
        }
    });
    let start_time = started.elapsed();
    assert_eq!(registry.live_actors(), ACTORS);
    std::thread::sleep(Duration::from_secs(2));
    let after = rss_kib();

    let ticks_before = cpu_ticks();
    let idle = Duration::from_secs(10);
    std::thread::sleep(idle);
    let ticks = cpu_ticks() - ticks_before;
    // Clock ticks are 1/100 s on Linux.
    #[expect(clippy::cast_precision_loss, reason = "display")]
    let idle_cpu = ticks as f64 / 100.0 / idle.as_secs_f64() * 100.0;

    #[expect(clippy::cast_precision_loss, reason = "display")]
    let (after_mib, before_mib, per_actor) =
        (after as f64 / 1024.0, before as f64 / 1024.0, (after - before) as f64 * 1024.0 / ACTORS as f64);
    println!();
    println!(
        "{ACTORS} live actors {} budgets (started and loaded in {:.2} s):",
        if budgets { "with" } else { "without" },
        start_time.as_secs_f64()
    );
    println!(
        "  RSS {after_mib:.1} MiB ({:.1} MB); {before_mib:.1} MiB before the actors",
        after_mib * 1.048_576
    );
    println!(
        "  {:.1} MiB for the actors and registry: {per_actor:.0} bytes per actor",
        after_mib - before_mib
    );
    println!("  idle CPU with housekeeping every {housekeeping:?}: {idle_cpu:.1}% of one core");
}
