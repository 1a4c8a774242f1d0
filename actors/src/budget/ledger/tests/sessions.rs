//! Session limits.

use super::*;
use crate::budget::ledger::sessions::MAX_TRACKED_SESSIONS;

// ----- session limit -----

#[test]
fn session_limit_denies_a_session_going_over_with_an_event() {
    let mut ledger = ledger(sessions(500));
    admit(&mut ledger, in_session(1, 300, "s1"), T0);
    ledger.settle(1, 300, T0);
    let denial = deny(&mut ledger, in_session(2, 201, "s1"), T0);
    let details = ("s1".to_owned(), 300, 500);
    assert_eq!(
        denial.reason,
        DenialReason::SessionLimitExceeded {
            session_id: details.0.clone(),
            session_spend: details.1,
            session_limit: details.2
        }
    );
    assert_eq!(
        denial.events,
        vec![LedgerEvent::SessionLimitExceeded {
            session_id: details.0,
            session_spend: details.1,
            session_limit: details.2
        }]
    );
}

#[test]
fn session_limit_admits_a_request_landing_exactly_on_it() {
    let mut ledger = ledger(sessions(500));
    ledger.record_spend(300, Some("s1"), T0);
    admit(&mut ledger, in_session(1, 200, "s1"), T0);
}

#[test]
fn session_limit_counts_the_sessions_reservations() {
    let mut ledger = ledger(sessions(500));
    admit(&mut ledger, in_session(1, 300, "s1"), T0);
    deny(&mut ledger, in_session(2, 201, "s1"), T0);
}

#[test]
fn other_sessions_are_unaffected_by_one_sessions_spend() {
    let mut ledger = ledger(sessions(500));
    ledger.record_spend(500, Some("s1"), T0);
    deny(&mut ledger, in_session(1, 1, "s1"), T0);
    admit(&mut ledger, in_session(2, 500, "s2"), T0);
}

#[test]
fn requests_without_a_session_skip_the_session_limit() {
    let mut ledger = ledger(sessions(500));
    admit(&mut ledger, req(1, 10_000), T0);
}

#[test]
fn session_limit_is_strict_even_under_the_warn_policy() {
    let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..sessions(500) });
    ledger.record_spend(400, Some("s1"), T0);
    let denial = deny(&mut ledger, in_session(1, 101, "s1"), T0);
    assert!(matches!(denial.reason, DenialReason::SessionLimitExceeded { .. }));
}

#[test]
fn releasing_a_sessions_reservation_frees_its_room() {
    let mut ledger = ledger(sessions(500));
    admit(&mut ledger, in_session(1, 400, "s1"), T0);
    ledger.release(1);
    admit(&mut ledger, in_session(2, 500, "s1"), T0);
}

#[test]
fn settling_moves_a_sessions_reservation_to_its_actual_spend() {
    let mut ledger = ledger(sessions(500));
    admit(&mut ledger, in_session(1, 400, "s1"), T0);
    ledger.settle(1, 100, T0);
    assert_eq!(ledger.sessions.committed("s1"), 100);
    admit(&mut ledger, in_session(2, 400, "s1"), T0);
}

#[test]
fn session_spend_resets_with_the_period_but_reservations_stay() {
    let mut ledger = ledger(BudgetConfig { reset_interval: Some(ResetInterval::Daily), ..sessions(500) });
    ledger.record_spend(500, Some("s1"), T0);
    admit(&mut ledger, in_session(1, 200, "s2"), T0);
    admit(&mut ledger, in_session(2, 500, "s1"), T0 + DAY);
    assert_eq!(ledger.sessions.committed("s2"), 200);
    ledger.settle(1, 150, T0 + DAY);
    assert_eq!(ledger.sessions.committed("s2"), 150);
}

#[test]
fn session_spend_resets_with_a_manual_reset() {
    let mut ledger = ledger(sessions(500));
    ledger.record_spend(500, Some("s1"), T0);
    ledger.reset(T0 + HOUR);
    admit(&mut ledger, in_session(1, 500, "s1"), T0 + HOUR);
}

#[test]
fn tracked_sessions_are_bounded_and_the_recent_ones_kept() {
    let mut ledger = ledger(sessions(500));
    for n in 0..=MAX_TRACKED_SESSIONS {
        ledger.record_spend(1, Some(&format!("session-{n}")), T0);
    }
    assert!(ledger.sessions.by_id.len() <= MAX_TRACKED_SESSIONS);
    let newest = format!("session-{MAX_TRACKED_SESSIONS}");
    assert_eq!(ledger.sessions.committed(&newest), 1);
    assert_eq!(ledger.sessions.committed("session-0"), 0);
}

#[test]
fn sessions_are_not_tracked_without_a_session_limit() {
    let mut ledger = ledger(config(1_000));
    admit(&mut ledger, in_session(1, 100, "s1"), T0);
    ledger.record_spend(100, Some("s1"), T0);
    assert!(ledger.sessions.by_id.is_empty());
}
