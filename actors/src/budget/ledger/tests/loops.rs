//! Loop detection.

use super::*;
use crate::budget::ledger::loops::{LOOP_EVICT_BATCH, MAX_LOOP_FINGERPRINTS};

// ----- loop detection -----

#[test]
fn exact_loop_is_blocked_once_a_fingerprint_reached_max_calls() {
    let mut ledger = ledger(loops(3, 0));
    for id in 0..3 {
        admit(&mut ledger, call(id, 42), T0 + id as i64);
    }
    let denial = deny(&mut ledger, call(3, 42), T0 + 3);
    let (detection_type, call_count, window_ms, max_calls) = (LoopDetectionType::Exact, 4, MINUTE, 3);
    assert_eq!(
        denial.reason,
        DenialReason::LoopDetected { detection_type, call_count, window_ms, max_calls }
    );
    assert_eq!(
        denial.events,
        vec![LedgerEvent::LoopDetected { detection_type, call_count, window_ms, max_calls }]
    );
}

#[test]
fn a_different_prompt_is_not_an_exact_loop() {
    let mut ledger = ledger(loops(3, 0));
    for id in 0..3 {
        admit(&mut ledger, call(id, 42), T0);
    }
    admit(&mut ledger, call(3, 43), T0);
}

#[test]
fn aggregate_rule_blocks_an_agent_alternating_between_a_few_prompts() {
    let mut ledger = ledger(loops(4, 2));
    for (id, hash) in [1, 2, 1, 2].into_iter().enumerate() {
        admit(&mut ledger, call(id as u64, hash), T0);
    }
    let denial = deny(&mut ledger, call(9, 1), T0);
    assert_eq!(
        denial.reason,
        DenialReason::LoopDetected {
            detection_type: LoopDetectionType::Semantic,
            call_count: 5,
            window_ms: MINUTE,
            max_calls: 4
        }
    );
}

#[test]
fn aggregate_rule_counts_the_new_fingerprint_as_one_of_the_keys() {
    let mut ledger = ledger(loops(4, 2));
    for (id, hash) in [1, 1, 2, 2].into_iter().enumerate() {
        admit(&mut ledger, call(id as u64, hash), T0);
    }
    // Two keys so far plus this third one: more than two, so not a loop.
    admit(&mut ledger, call(9, 3), T0);
}

#[test]
fn many_distinct_prompts_escape_the_aggregate_rule() {
    let mut ledger = ledger(loops(3, 2));
    for id in 0..20 {
        admit(&mut ledger, call(id, id), T0);
    }
}

#[test]
fn zero_max_calls_disables_loop_detection() {
    let mut ledger = ledger(loops(0, 5));
    for id in 0..200 {
        admit(&mut ledger, call(id, 42), T0);
    }
    assert_eq!(ledger.loops.fingerprints, 0);
}

#[test]
fn requests_without_a_fingerprint_skip_loop_detection() {
    let mut ledger = ledger(loops(1, 5));
    for id in 0..10 {
        admit(&mut ledger, req(id, 1), T0);
    }
    assert!(ledger.loops.providers.is_empty());
}

#[test]
fn loop_calls_leave_the_window() {
    let mut ledger = ledger(loops(2, 0));
    admit(&mut ledger, call(1, 42), T0);
    admit(&mut ledger, call(2, 42), T0 + 10 * SECOND);
    deny(&mut ledger, call(3, 42), T0 + 20 * SECOND);
    admit(&mut ledger, call(4, 42), T0 + MINUTE);
    deny(&mut ledger, call(5, 42), T0 + MINUTE);
}

#[test]
fn loops_are_counted_per_model() {
    let mut ledger = ledger(loops(2, 0));
    admit(&mut ledger, call_to(1, "gpt-4o", 42), T0);
    admit(&mut ledger, call_to(2, "gpt-4o", 42), T0);
    admit(&mut ledger, call_to(3, "gpt-4o-mini", 42), T0);
    deny(&mut ledger, call_to(4, "gpt-4o", 42), T0);
}

#[test]
fn only_admitted_calls_count_toward_a_loop() {
    let mut ledger = ledger(BudgetConfig { limit: 10, ..loops(2, 0) });
    let too_expensive = ReserveRequest { estimate: 100, ..call(1, 42) };
    assert_eq!(deny(&mut ledger, too_expensive, T0).reason, DenialReason::BudgetExceeded);
    admit(&mut ledger, call(2, 42), T0);
    admit(&mut ledger, call(3, 42), T0);
    let denial = deny(&mut ledger, call(4, 42), T0);
    assert!(matches!(denial.reason, DenialReason::LoopDetected { call_count: 3, .. }));
}

#[test]
fn loop_fingerprints_are_bounded_per_entity() {
    let mut ledger = ledger(loops(1_000_000, 0));
    for id in 0..(MAX_LOOP_FINGERPRINTS as u64 + 100) {
        admit(&mut ledger, call(id, id), T0 + id as i64);
    }
    let tracked = ledger.loops.fingerprints;
    assert!(
        (MAX_LOOP_FINGERPRINTS - LOOP_EVICT_BATCH..=MAX_LOOP_FINGERPRINTS).contains(&tracked),
        "{tracked}"
    );
    let counted: usize =
        ledger.loops.providers.values().flat_map(|models| models.values()).map(|c| c.by_hash.len()).sum();
    assert_eq!(counted, tracked);
    // The newest call is always kept; the stalest went first.
    let calls = &ledger.loops.providers["openai"];
    assert!(calls.values().any(|c| c.by_hash.contains_key(&(MAX_LOOP_FINGERPRINTS as u64 + 99))));
    assert!(calls.values().all(|c| !c.by_hash.contains_key(&0)));
}

#[test]
fn evicted_fingerprints_still_count_as_distinct_keys() {
    let mut ledger = ledger(loops(3, 2));
    for hash in 1..=3 {
        admit(&mut ledger, call_to(hash, "model-a", hash), T0);
    }
    // Fill the table from another model so model-a's fingerprints are evicted.
    for n in 0..MAX_LOOP_FINGERPRINTS as u64 {
        admit(&mut ledger, call_to(100 + n, "model-b", 100 + n), T0 + 1 + n as i64);
    }
    let model_a = &ledger.loops.providers["openai"]["model-a"];
    assert!(model_a.by_hash.is_empty());
    // Three calls from three keys are in the window: a fourth key is not a loop.
    admit(&mut ledger, call_to(9_999, "model-a", 4), T0 + 2_000);
}

#[test]
fn tick_forgets_expired_loop_fingerprints() {
    let mut ledger = ledger(loops(5, 5));
    admit(&mut ledger, call(1, 1), T0);
    admit(&mut ledger, call(2, 2), T0);
    ledger.tick(T0 + MINUTE);
    assert_eq!(ledger.loops.fingerprints, 0);
    assert!(ledger.loops.providers.is_empty());
}

#[test]
fn loop_detection_applies_even_under_the_warn_policy() {
    let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..loops(1, 0) });
    admit(&mut ledger, call(1, 42), T0);
    deny(&mut ledger, call(2, 42), T0);
}
