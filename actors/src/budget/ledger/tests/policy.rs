//! Policies (strict, soft, warn), reserve/settle/release, thresholds and the finalization reserve.

use super::*;

// ----- strict_block -----

#[test]
fn strict_admits_a_request_below_the_limit() {
    let mut ledger = ledger(config(1_000));
    let admission = admit(&mut ledger, req(1, 400), T0);
    assert_eq!(admission.snapshot.reserved, 400);
    assert_eq!(admission.snapshot.remaining, 600);
    assert!(admission.events.is_empty());
}

#[test]
fn strict_admits_a_request_landing_exactly_on_the_limit() {
    let mut ledger = ledger(config(1_000));
    ledger.record_spend(600, None, T0);
    let admission = admit(&mut ledger, req(1, 400), T0);
    assert_eq!(admission.snapshot.remaining, 0);
}

#[test]
fn strict_denies_one_microdollar_over_the_limit_with_an_exceeded_event() {
    let mut ledger = ledger(config(1_000));
    ledger.record_spend(600, None, T0);
    let denial = deny(&mut ledger, req(1, 401), T0);
    assert_eq!(denial.reason, DenialReason::BudgetExceeded);
    assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 600, estimate: 401 }]);
    assert_eq!(denial.snapshot.reserved, 0);
}

#[test]
fn strict_counts_reservations_in_flight_toward_the_limit() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 700), T0);
    let denial = deny(&mut ledger, req(2, 301), T0);
    assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 700, estimate: 301 }]);
    admit(&mut ledger, req(3, 300), T0);
    assert_eq!(ledger.reserved(), 1_000);
}

#[test]
fn strict_emits_an_exceeded_event_on_every_denial() {
    let mut ledger = ledger(config(1_000));
    ledger.record_spend(1_000, None, T0);
    assert_eq!(deny(&mut ledger, req(1, 1), T0).events.len(), 1);
    assert_eq!(deny(&mut ledger, req(2, 1), T0).events.len(), 1);
}

// ----- soft_block -----

#[test]
fn soft_block_admits_the_request_that_crosses_the_limit() {
    let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
    ledger.record_spend(900, None, T0);
    let admission = admit(&mut ledger, req(1, 500), T0);
    assert!(admission.events.is_empty());
    assert_eq!(admission.snapshot.remaining, -400);
}

#[test]
fn soft_block_denies_the_requests_after_the_crossing() {
    let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
    ledger.record_spend(900, None, T0);
    admit(&mut ledger, req(1, 500), T0);
    let denial = deny(&mut ledger, req(2, 1), T0);
    assert_eq!(denial.reason, DenialReason::BudgetExceeded);
    assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 1_400, estimate: 1 }]);
}

#[test]
fn soft_block_denies_when_committed_equals_the_limit() {
    let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
    ledger.record_spend(1_000, None, T0);
    deny(&mut ledger, req(1, 1), T0);
}

#[test]
fn soft_block_admits_any_estimate_one_microdollar_below_the_limit() {
    let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
    ledger.record_spend(999, None, T0);
    admit(&mut ledger, req(1, 1_000_000), T0);
}

// ----- warn -----

#[test]
fn warn_below_the_limit_emits_nothing() {
    let mut ledger = ledger(with_policy(1_000, Policy::Warn));
    let admission = admit(&mut ledger, req(1, 1_000), T0);
    assert!(admission.events.is_empty());
}

#[test]
fn warn_never_denies_and_alerts_once_per_period() {
    let mut ledger = ledger(with_policy(1_000, Policy::Warn));
    assert!(admit(&mut ledger, req(1, 900), T0).events.is_empty());
    let crossing = admit(&mut ledger, req(2, 200), T0);
    assert_eq!(crossing.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 900, estimate: 200 }]);
    assert!(admit(&mut ledger, req(3, 5_000), T0).events.is_empty());
    ledger.settle(1, 900, T0);
    ledger.settle(2, 200, T0);
    ledger.settle(3, 5_000, T0);
    assert!(admit(&mut ledger, req(4, 1), T0).events.is_empty());
    assert_eq!(ledger.spend(), 6_100);
}

#[test]
fn warn_alert_is_rearmed_by_a_period_roll() {
    let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..daily(1_000) });
    assert_eq!(admit(&mut ledger, req(1, 2_000), T0).events.len(), 1);
    let next_day = admit(&mut ledger, req(2, 2_000), T0 + DAY);
    assert_eq!(
        next_day.events,
        vec![
            LedgerEvent::Reset {
                previous_spend: 0,
                new_period_start: T0 + DAY,
                interval: ResetInterval::Daily
            },
            LedgerEvent::Exceeded { limit: 1_000, spend: 2_000, estimate: 2_000 },
        ]
    );
}

#[test]
fn warn_alert_is_rearmed_by_a_manual_reset() {
    let mut ledger = ledger(with_policy(1_000, Policy::Warn));
    ledger.record_spend(1_000, None, T0);
    assert_eq!(admit(&mut ledger, req(1, 1), T0).events.len(), 1);
    ledger.release(1);
    ledger.reset(T0);
    assert!(admit(&mut ledger, req(2, 1_000), T0).events.is_empty());
    assert_eq!(admit(&mut ledger, req(3, 1), T0).events.len(), 1);
}

#[test]
fn a_loaded_warn_budget_already_over_its_limit_does_not_alert_again() {
    let mut ledger = BudgetLedger::new(with_policy(1_000, Policy::Warn), 1_500, None, T0);
    assert!(admit(&mut ledger, req(1, 1), T0).events.is_empty());
}

// ----- reserve, settle, release -----

#[test]
fn reserve_holds_the_estimate_under_its_id() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(7, 300), T0);
    assert_eq!(ledger.reserved(), 300);
    assert_eq!(ledger.spend(), 0);
    assert_eq!(ledger.open_reservations(), 1);
}

#[test]
fn settle_lower_than_the_estimate_frees_the_difference() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 500), T0);
    assert!(ledger.settle(1, 200, T0).is_empty());
    assert_eq!((ledger.spend(), ledger.reserved()), (200, 0));
    assert_eq!(ledger.snapshot().remaining, 800);
}

#[test]
fn settle_higher_than_the_estimate_charges_the_actual_cost() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 100), T0);
    ledger.settle(1, 300, T0);
    assert_eq!((ledger.spend(), ledger.reserved()), (300, 0));
}

#[test]
fn settle_may_take_spend_past_a_strict_limit() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 1_000), T0);
    ledger.settle(1, 1_200, T0);
    assert_eq!(ledger.snapshot().remaining, -200);
    deny(&mut ledger, req(2, 0), T0);
}

#[test]
fn settle_of_an_unknown_id_counts_as_spend() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 100), T0);
    ledger.settle(42, 250, T0);
    assert_eq!((ledger.spend(), ledger.reserved()), (250, 100));
}

#[test]
fn settling_the_same_id_twice_is_a_no_op() {
    let mut ledger = ledger(with_thresholds(1_000, &[10]));
    admit(&mut ledger, req(1, 500), T0);
    assert_eq!(ledger.settle(1, 200, T0).len(), 1);
    assert!(ledger.settle(1, 200, T0).is_empty());
    assert_eq!((ledger.spend(), ledger.reserved()), (200, 0));
}

#[test]
fn settled_ids_are_forgotten_after_enough_newer_settlements() {
    let mut ledger = ledger(with_policy(1_000_000, Policy::Warn));
    admit(&mut ledger, req(0, 1), T0);
    ledger.settle(0, 1, T0);
    for id in 1..=RECENTLY_SETTLED_IDS as u64 {
        admit(&mut ledger, req(id, 1), T0);
        ledger.settle(id, 1, T0);
    }
    let spend = ledger.spend();
    ledger.settle(0, 1, T0);
    assert_eq!(ledger.spend(), spend + 1);
}

#[test]
fn a_reused_reservation_id_settles_normally() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 100), T0);
    ledger.settle(1, 100, T0);
    admit(&mut ledger, req(1, 100), T0);
    ledger.settle(1, 50, T0);
    assert_eq!((ledger.spend(), ledger.reserved()), (150, 0));
}

#[test]
fn settle_after_release_still_counts_the_cost() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 100), T0);
    assert!(ledger.release(1));
    ledger.settle(1, 80, T0);
    assert_eq!((ledger.spend(), ledger.reserved()), (80, 0));
}

#[test]
fn release_returns_the_estimate_without_spend() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 400), T0);
    assert!(ledger.release(1));
    assert_eq!((ledger.spend(), ledger.reserved(), ledger.open_reservations()), (0, 0, 0));
}

#[test]
fn release_of_an_unknown_or_already_released_id_returns_false() {
    let mut ledger = ledger(config(1_000));
    assert!(!ledger.release(1));
    admit(&mut ledger, req(1, 400), T0);
    assert!(ledger.release(1));
    assert!(!ledger.release(1));
    assert_eq!(ledger.reserved(), 0);
}

#[test]
fn reusing_an_open_reservation_id_replaces_the_earlier_reservation() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, 300), T0);
    admit(&mut ledger, req(1, 200), T0);
    assert_eq!((ledger.reserved(), ledger.open_reservations()), (200, 1));
}

#[test]
fn negative_amounts_count_as_zero() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, req(1, -500), T0);
    assert_eq!(ledger.reserved(), 0);
    ledger.settle(1, -100, T0);
    ledger.record_spend(-7, None, T0);
    assert_eq!((ledger.spend(), ledger.reserved()), (0, 0));
}

#[test]
fn amounts_saturate_instead_of_overflowing() {
    let mut ledger =
        ledger(BudgetConfig { thresholds: vec![50, 100], ..with_policy(i64::MAX, Policy::Warn) });
    let events = ledger.record_spend(i64::MAX, None, T0);
    assert_eq!(events.len(), 2);
    ledger.record_spend(1, None, T0);
    admit(&mut ledger, req(1, i64::MAX), T0);
    let snapshot = ledger.snapshot();
    assert_eq!((snapshot.spend, snapshot.reserved, snapshot.committed()), (i64::MAX, i64::MAX, i64::MAX));
    assert_eq!(snapshot.remaining, i64::MIN + 1);
}

// ----- thresholds -----

#[test]
fn threshold_fires_when_spend_reaches_it_exactly() {
    let mut ledger = ledger(with_thresholds(1_000, &[50]));
    assert!(ledger.record_spend(499, None, T0).is_empty());
    assert_eq!(ledger.record_spend(1, None, T0), vec![crossed(50, 500, 1_000)]);
}

#[test]
fn threshold_fires_once_per_period() {
    let mut ledger = ledger(with_thresholds(1_000, &[50]));
    assert_eq!(ledger.record_spend(600, None, T0).len(), 1);
    assert!(ledger.record_spend(100, None, T0).is_empty());
    assert!(ledger.record_spend(1_000, None, T0).is_empty());
}

#[test]
fn one_settlement_crossing_several_thresholds_emits_each_in_ascending_order() {
    let mut ledger = ledger(with_thresholds(1_000, &[90, 50, 75]));
    admit(&mut ledger, req(1, 950), T0);
    assert_eq!(
        ledger.settle(1, 950, T0),
        vec![crossed(50, 950, 1_000), crossed(75, 950, 1_000), crossed(90, 950, 1_000)]
    );
}

#[test]
fn thresholds_below_90_are_warnings_and_from_90_critical() {
    let mut ledger = ledger(with_thresholds(100, &[89, 90]));
    let events = ledger.record_spend(90, None, T0);
    let severities: Vec<_> = events
        .iter()
        .map(|event| match event {
            LedgerEvent::ThresholdCrossed { severity, .. } => *severity,
            other => panic!("unexpected event {other:?}"),
        })
        .collect();
    assert_eq!(severities, vec![Severity::Warning, Severity::Critical]);
    assert_eq!(Severity::of(1), Severity::Warning);
    assert_eq!(Severity::of(100), Severity::Critical);
}

#[test]
fn thresholds_count_settled_spend_not_reservations() {
    let mut ledger = ledger(with_thresholds(1_000, &[50]));
    assert!(admit(&mut ledger, req(1, 900), T0).events.is_empty());
    assert!(ledger.settle(1, 400, T0).is_empty());
    assert_eq!(ledger.record_spend(100, None, T0), vec![crossed(50, 500, 1_000)]);
}

#[test]
fn threshold_math_is_exact_on_limits_not_divisible_by_100() {
    let mut ledger = ledger(with_thresholds(3, &[50]));
    assert!(ledger.record_spend(1, None, T0).is_empty()); // 33%
    assert_eq!(ledger.record_spend(1, None, T0).len(), 1); // 66%
}

#[test]
fn the_100_percent_threshold_reports_zero_remaining_when_overspent() {
    let mut ledger = ledger(BudgetConfig { thresholds: vec![100], ..with_policy(1_000, Policy::Warn) });
    assert_eq!(ledger.record_spend(1_500, None, T0), vec![crossed(100, 1_500, 1_000)]);
}

#[test]
fn manual_reset_rearms_thresholds() {
    let mut ledger = ledger(with_thresholds(1_000, &[50]));
    ledger.record_spend(600, None, T0);
    ledger.reset(T0 + HOUR);
    assert_eq!(ledger.spend(), 0);
    assert_eq!(ledger.record_spend(500, None, T0 + HOUR), vec![crossed(50, 500, 1_000)]);
}

#[test]
fn period_roll_rearms_thresholds() {
    let mut ledger = ledger(BudgetConfig { thresholds: vec![50], ..daily(1_000) });
    assert_eq!(ledger.record_spend(600, None, T0).len(), 1);
    let events = ledger.record_spend(600, None, T0 + DAY);
    assert_eq!(
        events,
        vec![
            LedgerEvent::Reset {
                previous_spend: 600,
                new_period_start: T0 + DAY,
                interval: ResetInterval::Daily
            },
            crossed(50, 600, 1_000),
        ]
    );
}

#[test]
fn loading_a_ledger_does_not_refire_thresholds_its_spend_already_passed() {
    let mut ledger = BudgetLedger::new(with_thresholds(1_000, &[50, 80]), 600, None, T0);
    assert!(ledger.record_spend(100, None, T0).is_empty());
    assert_eq!(ledger.record_spend(100, None, T0), vec![crossed(80, 800, 1_000)]);
}

#[test]
fn thresholds_are_sorted_deduplicated_and_bounded_to_1_through_100() {
    let ledger = ledger(with_thresholds(1_000, &[0, 80, 50, 50, 101, 200]));
    assert_eq!(ledger.config().thresholds, vec![50, 80]);
}

// ----- finalization reserve -----

#[test]
fn the_finalization_reserve_is_held_back_from_ordinary_requests() {
    let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
    ledger.record_spend(850, None, T0);
    let denial = deny(&mut ledger, req(1, 51), T0);
    assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 850, estimate: 51 }]);
    admit(&mut ledger, req(2, 50), T0);
}

#[test]
fn finalize_is_honoured_in_the_reserve_zone() {
    let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
    ledger.record_spend(900, None, T0);
    deny(&mut ledger, req(1, 1), T0);
    let admission = admit(&mut ledger, finalizing(2, 100), T0);
    assert_eq!(admission.snapshot.remaining, 0);
}

#[test]
fn finalize_is_ignored_outside_the_reserve_zone() {
    let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
    ledger.record_spend(850, None, T0);
    deny(&mut ledger, finalizing(1, 100), T0);
    admit(&mut ledger, finalizing(2, 50), T0);
}

#[test]
fn finalize_in_the_zone_is_still_capped_by_the_full_limit() {
    let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
    ledger.record_spend(950, None, T0);
    deny(&mut ledger, finalizing(1, 51), T0);
    admit(&mut ledger, finalizing(2, 50), T0);
}

#[test]
fn reservations_count_toward_entering_the_reserve_zone() {
    let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
    admit(&mut ledger, req(1, 900), T0);
    admit(&mut ledger, finalizing(2, 100), T0);
}

#[test]
fn soft_block_with_a_reserve_lets_finalize_requests_use_it() {
    let mut ledger = ledger(reserve_zone(Policy::SoftBlock));
    ledger.record_spend(900, None, T0);
    deny(&mut ledger, req(1, 1), T0);
    admit(&mut ledger, finalizing(2, 150), T0);
    deny(&mut ledger, finalizing(3, 1), T0);
}

#[test]
fn snapshot_reports_the_reserve_and_the_effective_remaining() {
    let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
    ledger.record_spend(300, None, T0);
    let snapshot = ledger.snapshot();
    assert_eq!((snapshot.remaining, snapshot.finalization_reserve), (700, 100));
    assert_eq!(snapshot.effective_remaining(), 600);
    assert!(!snapshot.in_reserve_zone());
    ledger.record_spend(600, None, T0);
    assert!(ledger.snapshot().in_reserve_zone());
}

#[test]
fn snapshot_clamps_remaining_for_status_display() {
    let mut ledger = ledger(with_policy(1_000, Policy::Warn));
    ledger.record_spend(1_500, None, T0);
    let snapshot = ledger.snapshot();
    assert_eq!((snapshot.remaining, snapshot.remaining_clamped()), (-500, 0));
}
