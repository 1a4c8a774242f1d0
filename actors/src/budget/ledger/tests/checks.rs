//! The order of checks, denial side effects and reconfiguration.

use super::*;

// ----- order of checks and denial side effects -----

/// Everything configured tightly, so one request can violate several checks.
fn everything() -> BudgetConfig {
    BudgetConfig {
        limit: 1_000,
        velocity: Some(VelocityConfig { limit: 500, window_ms: MINUTE, cooldown_ms: 30 * SECOND }),
        session_limit: Some(300),
        loop_detection: LoopConfig { max_calls: 1, window_ms: MINUTE, aggregate_max_keys: 0 },
        ..config(1_000)
    }
}

fn everything_request(reservation_id: u64, estimate: i64) -> ReserveRequest<'static> {
    ReserveRequest { session_id: Some("s1"), estimate, ..call(reservation_id, 42) }
}

#[test]
fn an_open_breaker_is_checked_before_loops_sessions_and_budget() {
    let mut ledger = ledger(everything());
    admit(&mut ledger, everything_request(1, 300), T0);
    ledger.settle(1, 300, T0);
    ledger.record_spend(700, None, T0);
    let trip = deny(&mut ledger, req(2, 1), T0);
    assert!(matches!(trip.reason, DenialReason::VelocityExceeded { .. }));
    let denial = deny(&mut ledger, everything_request(3, 5_000), T0 + SECOND);
    assert_eq!(denial.reason, DenialReason::VelocityExceeded { retry_after_ms: 29 * SECOND });
}

#[test]
fn loop_detection_is_checked_before_the_session_limit() {
    let mut ledger = ledger(everything());
    admit(&mut ledger, everything_request(1, 300), T0);
    let denial = deny(&mut ledger, everything_request(2, 300), T0);
    assert!(matches!(denial.reason, DenialReason::LoopDetected { .. }));
}

#[test]
fn the_session_limit_is_checked_before_velocity_and_does_not_trip_the_breaker() {
    let mut ledger = ledger(everything());
    let denial = deny(&mut ledger, ReserveRequest { fingerprint: None, ..everything_request(1, 600) }, T0);
    assert!(matches!(denial.reason, DenialReason::SessionLimitExceeded { .. }));
    assert_eq!(denial.snapshot.breaker_open_until, None);
}

#[test]
fn velocity_is_checked_before_the_budget() {
    let mut ledger = ledger(everything());
    let denial = deny(&mut ledger, req(1, 2_000), T0);
    assert!(matches!(denial.reason, DenialReason::VelocityExceeded { .. }));
}

#[test]
fn denials_leave_spend_reservations_sessions_and_loop_counts_unchanged() {
    let mut ledger = ledger(BudgetConfig { velocity: None, ..everything() });
    admit(&mut ledger, everything_request(1, 200), T0);
    let before = ledger.snapshot();
    let denials = [
        deny(&mut ledger, everything_request(2, 1), T0),
        deny(&mut ledger, ReserveRequest { fingerprint: None, ..everything_request(3, 101) }, T0),
        deny(&mut ledger, req(4, 801), T0),
    ];
    for denial in &denials {
        assert_eq!(denial.snapshot, before);
    }
    assert_eq!(ledger.snapshot(), before);
    assert_eq!(ledger.open_reservations(), 1);
    assert_eq!(ledger.sessions.committed("s1"), 200);
    let fingerprint_calls = ledger.loops.providers["openai"]["gpt-4o"].all.total;
    assert_eq!(fingerprint_calls, 1);
}

// ----- reconfiguration -----

#[test]
fn reconfigure_keeps_spend_reservations_and_the_period() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(300, None, T0);
    admit(&mut ledger, req(1, 200), T0);
    ledger.reconfigure(BudgetConfig { policy: Policy::SoftBlock, ..daily(5_000) }, T0 + HOUR);
    let snapshot = ledger.snapshot();
    assert_eq!((snapshot.spend, snapshot.reserved, snapshot.limit), (300, 200, 5_000));
    assert_eq!((snapshot.policy, snapshot.period_start), (Policy::SoftBlock, Some(T0)));
}

#[test]
fn a_lower_limit_applies_at_once() {
    let mut ledger = ledger(config(1_000));
    ledger.record_spend(300, None, T0);
    ledger.reconfigure(config(400), T0);
    deny(&mut ledger, req(1, 101), T0);
    admit(&mut ledger, req(2, 100), T0);
}

#[test]
fn lowering_the_limit_does_not_refire_thresholds_already_passed() {
    let mut ledger = ledger(with_thresholds(1_000, &[50, 80]));
    ledger.record_spend(400, None, T0);
    ledger.reconfigure(with_thresholds(500, &[50, 80]), T0);
    assert!(ledger.record_spend(10, None, T0).is_empty());
}

#[test]
fn raising_the_limit_rearms_thresholds_above_spend() {
    let mut ledger = ledger(with_thresholds(1_000, &[50]));
    assert_eq!(ledger.record_spend(600, None, T0).len(), 1);
    ledger.reconfigure(with_thresholds(2_000, &[50]), T0);
    assert!(ledger.record_spend(300, None, T0).is_empty());
    assert_eq!(ledger.record_spend(100, None, T0), vec![crossed(50, 1_000, 2_000)]);
}

#[test]
fn adding_a_threshold_below_spend_does_not_fire_it() {
    let mut ledger = ledger(config(1_000));
    ledger.record_spend(600, None, T0);
    ledger.reconfigure(with_thresholds(1_000, &[50, 80]), T0);
    assert_eq!(ledger.record_spend(200, None, T0), vec![crossed(80, 800, 1_000)]);
}

#[test]
fn adding_a_reset_interval_starts_a_period_now() {
    let mut ledger = ledger(config(1_000));
    ledger.record_spend(300, None, T0);
    ledger.reconfigure(daily(1_000), T0 + 5 * HOUR);
    assert_eq!((ledger.period_start(), ledger.spend()), (Some(T0 + 5 * HOUR), 300));
    assert!(matches!(ledger.roll_period(T0 + DAY), Some(LedgerEvent::Reset { previous_spend: 300, .. })));
}

#[test]
fn removing_the_reset_interval_clears_the_period() {
    let mut ledger = ledger(daily(1_000));
    ledger.reconfigure(config(1_000), T0 + HOUR);
    assert_eq!(ledger.period_start(), None);
    assert_eq!(ledger.roll_period(T0 + 10 * DAY), None);
}

#[test]
fn changing_the_interval_keeps_the_period_start_and_moves_the_next_roll() {
    let mut ledger = ledger(daily(1_000));
    let monthly = BudgetConfig { reset_interval: Some(ResetInterval::Monthly), ..config(1_000) };
    ledger.reconfigure(monthly, T0 + HOUR);
    assert_eq!(ledger.period_start(), Some(T0));
    assert_eq!(ledger.roll_period(T0 + DAY), None);
    assert!(ledger.roll_period(FEB_1).is_some());
}

#[test]
fn raising_a_warn_limit_above_committed_rearms_the_alert() {
    let mut ledger = ledger(with_policy(1_000, Policy::Warn));
    ledger.record_spend(1_500, None, T0);
    assert_eq!(admit(&mut ledger, req(1, 1), T0).events.len(), 1);
    ledger.release(1);
    ledger.reconfigure(with_policy(2_000, Policy::Warn), T0);
    assert!(admit(&mut ledger, req(2, 500), T0).events.is_empty());
    assert_eq!(admit(&mut ledger, req(3, 1), T0).events.len(), 1);
}

#[test]
fn disabling_loop_detection_and_session_limits_forgets_their_state() {
    let mut ledger = ledger(BudgetConfig { velocity: None, ..everything() });
    admit(&mut ledger, everything_request(1, 100), T0);
    let no_loops = LoopConfig { max_calls: 0, ..LoopConfig::default() };
    ledger.reconfigure(BudgetConfig { loop_detection: no_loops, ..config(1_000) }, T0);
    assert!(ledger.sessions.by_id.is_empty());
    assert!(ledger.loops.providers.is_empty());
    admit(&mut ledger, everything_request(2, 500), T0);
    ledger.settle(1, 100, T0);
    assert_eq!((ledger.spend(), ledger.reserved()), (100, 500));
}

#[test]
fn a_ledger_can_move_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<BudgetLedger>();
}

#[test]
fn a_refund_lowers_spend_and_never_below_zero() {
    let mut ledger = ledger(with_thresholds(1_000, &[50]));
    assert_eq!(ledger.record_spend(600, None, T0).len(), 1);
    assert!(ledger.record_spend(-200, None, T0).is_empty());
    assert_eq!(ledger.snapshot().spend, 400);
    // Thresholds already fired stay fired: climbing back over 50% says nothing again.
    assert!(ledger.record_spend(200, None, T0).is_empty());
    assert!(ledger.record_spend(-5_000, None, T0).is_empty());
    assert_eq!(ledger.snapshot().spend, 0);
    assert!(ledger.record_spend(i64::MIN, None, T0).is_empty());
    assert_eq!(ledger.snapshot().spend, 0);
}
