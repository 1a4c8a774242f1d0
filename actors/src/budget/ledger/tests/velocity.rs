//! The velocity window and its breaker.

use super::*;
use crate::budget::ledger::window::WINDOW_BUCKETS;

// ----- velocity -----

#[test]
fn velocity_admits_up_to_the_limit_inclusive() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(600, None, T0);
    admit(&mut ledger, req(1, 400), T0);
}

#[test]
fn velocity_breach_trips_the_breaker_and_denies_with_the_full_cooldown() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(600, None, T0);
    let denial = deny(&mut ledger, req(1, 401), T0);
    assert_eq!(denial.reason, DenialReason::VelocityExceeded { retry_after_ms: 30 * SECOND });
    assert_eq!(
        denial.events,
        vec![LedgerEvent::VelocityExceeded {
            limit: 1_000,
            window_ms: MINUTE,
            current: 600,
            cooldown_ms: 30 * SECOND
        }]
    );
    assert_eq!(denial.snapshot.breaker_open_until, Some(T0 + 30 * SECOND));
    assert_eq!(denial.snapshot.reserved, 0);
}

#[test]
fn velocity_counts_reservations_in_flight() {
    let mut ledger = ledger(velocity(1_000));
    admit(&mut ledger, req(1, 700), T0);
    let denial = deny(&mut ledger, req(2, 301), T0);
    assert!(matches!(denial.events.as_slice(), [LedgerEvent::VelocityExceeded { current: 700, .. }]));
}

#[test]
fn an_open_breaker_denies_with_the_remaining_cooldown_and_no_new_event() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(1_000, None, T0);
    deny(&mut ledger, req(1, 1), T0);
    let denial = deny(&mut ledger, req(2, 1), T0 + 10 * SECOND);
    assert_eq!(denial.reason, DenialReason::VelocityExceeded { retry_after_ms: 20 * SECOND });
    assert!(denial.events.is_empty());
}

#[test]
fn the_breaker_recovers_exactly_once_on_tick_after_the_cooldown() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(1_000, None, T0);
    deny(&mut ledger, req(1, 1), T0);
    assert!(ledger.tick(T0 + 30 * SECOND - 1).is_empty());
    assert_eq!(
        ledger.tick(T0 + 30 * SECOND),
        vec![LedgerEvent::VelocityRecovered { limit: 1_000, window_ms: MINUTE, cooldown_ms: 30 * SECOND }]
    );
    assert!(ledger.tick(T0 + 31 * SECOND).is_empty());
    assert_eq!(ledger.snapshot().breaker_open_until, None);
}

#[test]
fn the_first_reserve_after_the_cooldown_recovers_the_breaker_and_admits() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(1_000, None, T0);
    deny(&mut ledger, req(1, 1), T0);
    let admission = admit(&mut ledger, req(2, 1), T0 + MINUTE);
    assert_eq!(
        admission.events,
        vec![LedgerEvent::VelocityRecovered { limit: 1_000, window_ms: MINUTE, cooldown_ms: 30 * SECOND }]
    );
    assert!(admit(&mut ledger, req(3, 1), T0 + MINUTE).events.is_empty());
}

#[test]
fn a_breaker_closing_while_still_over_the_limit_trips_again() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(1_000, None, T0);
    deny(&mut ledger, req(1, 1), T0);
    let denial = deny(&mut ledger, req(2, 1), T0 + 30 * SECOND);
    assert!(matches!(
        denial.events.as_slice(),
        [LedgerEvent::VelocityRecovered { .. }, LedgerEvent::VelocityExceeded { .. }]
    ));
    assert_eq!(denial.snapshot.breaker_open_until, Some(T0 + 60 * SECOND));
}

#[test]
fn velocity_window_expiry_frees_capacity() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(1_000, None, T0);
    let mut probe = ledger.clone();
    deny(&mut probe, req(1, 1), T0 + MINUTE - 1);
    admit(&mut ledger, req(1, 1_000), T0 + MINUTE);
}

#[test]
fn settled_spend_enters_the_velocity_window() {
    let mut ledger = ledger(velocity(1_000));
    admit(&mut ledger, req(1, 100), T0);
    ledger.settle(1, 900, T0 + SECOND);
    let denial = deny(&mut ledger, req(2, 101), T0 + 2 * SECOND);
    assert!(matches!(denial.events.as_slice(), [LedgerEvent::VelocityExceeded { current: 900, .. }]));
}

#[test]
fn recording_spend_never_trips_the_breaker_by_itself() {
    let mut ledger = ledger(velocity(1_000));
    assert!(ledger.record_spend(5_000, None, T0).is_empty());
    assert_eq!(ledger.snapshot().breaker_open_until, None);
    deny(&mut ledger, req(1, 1), T0);
}

#[test]
fn velocity_applies_even_under_the_warn_policy() {
    let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..velocity(1_000) });
    ledger.record_spend(1_000, None, T0);
    let denial = deny(&mut ledger, req(1, 1), T0);
    assert!(matches!(denial.reason, DenialReason::VelocityExceeded { .. }));
}

#[test]
fn the_velocity_window_survives_a_period_roll() {
    let mut ledger = ledger(BudgetConfig { reset_interval: Some(ResetInterval::Daily), ..velocity(1_000) });
    ledger.record_spend(900, None, T0 + DAY - SECOND);
    let denial = deny(&mut ledger, req(1, 200), T0 + DAY);
    assert!(matches!(
        denial.events.as_slice(),
        [LedgerEvent::Reset { previous_spend: 900, .. }, LedgerEvent::VelocityExceeded { current: 900, .. }]
    ));
}

#[test]
fn removing_velocity_closes_an_open_breaker() {
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(1_000, None, T0);
    deny(&mut ledger, req(1, 1), T0);
    ledger.reconfigure(config(1_000_000), T0 + SECOND);
    assert_eq!(ledger.snapshot().breaker_open_until, None);
    assert!(admit(&mut ledger, req(2, 1), T0 + SECOND).events.is_empty());
}

#[test]
fn sliding_window_never_expires_an_amount_early() {
    let mut window = SlidingWindow::default();
    // Width of a bucket: 60_000 / 64 = 937 ms; both land in the same bucket.
    let start = 937 * 1_000;
    window.add(start, 5, MINUTE);
    window.add(start + 900, 7, MINUTE);
    window.prune(start + MINUTE, MINUTE);
    assert_eq!(window.total, 12, "the earlier amount may outlive its window, never the reverse");
    window.prune(start + 900 + MINUTE, MINUTE);
    assert_eq!(window.total, 0);
}

#[test]
fn sliding_window_memory_is_bounded_under_constant_traffic() {
    let mut window = SlidingWindow::default();
    let mut exact = VecDeque::new();
    for step in 0..200_000 {
        let now = T0 + step * 3;
        window.add(now, 1, MINUTE);
        exact.push_back(now);
        while exact.front().is_some_and(|&at| at <= now - MINUTE) {
            exact.pop_front();
        }
        assert!(window.total >= exact.len() as i64);
    }
    assert!(
        window.entries.len() <= usize::try_from(WINDOW_BUCKETS).unwrap() + 1,
        "{} entries",
        window.entries.len()
    );
}

#[test]
fn sliding_window_folds_amounts_from_a_clock_that_stepped_back() {
    let mut window = SlidingWindow::default();
    window.add(T0, 5, MINUTE);
    window.add(T0 - 10 * SECOND, 7, MINUTE);
    assert_eq!((window.entries.len(), window.total), (1, 12));
    window.prune(T0 + MINUTE, MINUTE);
    assert_eq!(window.total, 0);
}

#[test]
fn velocity_status_reports_window_reservations_and_breaker() {
    assert_eq!(ledger(config(1_000)).velocity_status(T0), None);
    let mut ledger = ledger(velocity(1_000));
    ledger.record_spend(300, None, T0);
    ledger.reserve(&req(1, 200), T0).unwrap();
    let status = ledger.velocity_status(T0 + SECOND).unwrap();
    assert_eq!((status.window_spend, status.current, status.breaker_open_until), (300, 500, None));
    assert!(ledger.reserve(&req(2, 600), T0 + SECOND).is_err());
    assert_eq!(ledger.velocity_status(T0 + SECOND).unwrap().breaker_open_until, Some(T0 + 31 * SECOND));
    let later = ledger.velocity_status(T0 + 2 * MINUTE).unwrap();
    assert_eq!((later.window_spend, later.current, later.breaker_open_until), (0, 200, None));
}
