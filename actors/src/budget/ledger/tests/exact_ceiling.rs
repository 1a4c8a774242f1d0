//! `exact_ceiling`: a request with a floor is granted the room left, down to the floor.

use super::*;

fn exact(limit: i64) -> BudgetConfig {
    BudgetConfig { exact_ceiling: true, ..config(limit) }
}

fn flexible(reservation_id: u64, estimate: i64, floor: i64) -> ReserveRequest<'static> {
    ReserveRequest { floor: Some(floor), ..req(reservation_id, estimate) }
}

#[test]
fn the_whole_estimate_when_it_fits() {
    let mut ledger = ledger(exact(1_000));
    let admission = ledger.reserve(&flexible(1, 400, 10), T0).unwrap();
    assert_eq!((admission.granted, admission.snapshot.reserved), (400, 400));
}

#[test]
fn the_room_left_when_only_part_fits_and_then_a_denial_below_the_floor() {
    let mut ledger = ledger(exact(1_000));
    ledger.reserve(&req(1, 700), T0).unwrap();
    let admission = ledger.reserve(&flexible(2, 5_000, 100), T0).unwrap();
    assert_eq!(
        (admission.granted, admission.snapshot.reserved, admission.snapshot.remaining),
        (300, 1_000, 0)
    );
    ledger.settle(1, 650, T0);
    // 50 left: below the floor of 100.
    let denial = ledger.reserve(&flexible(3, 5_000, 100), T0).unwrap_err();
    assert_eq!(denial.reason, DenialReason::BudgetExceeded);
    // 50 left pays for a floor of 50.
    assert_eq!(ledger.reserve(&flexible(4, 5_000, 50), T0).unwrap().granted, 50);
}

#[test]
fn without_the_setting_or_without_a_floor_the_whole_estimate_is_needed() {
    let mut plain = ledger(config(1_000));
    assert!(plain.reserve(&flexible(1, 5_000, 10), T0).is_err());
    let mut exact = ledger(exact(1_000));
    assert!(exact.reserve(&req(1, 5_000), T0).is_err());
    let mut soft = ledger(BudgetConfig { policy: Policy::SoftBlock, ..exact_config_soft() });
    assert_eq!(soft.reserve(&flexible(1, 5_000, 10), T0).unwrap().granted, 5_000);
}

fn exact_config_soft() -> BudgetConfig {
    BudgetConfig { exact_ceiling: true, ..with_policy(1_000, Policy::SoftBlock) }
}

#[test]
fn the_finalization_reserve_stays_free() {
    let mut ledger = ledger(BudgetConfig { finalization_reserve: 200, ..exact(1_000) });
    assert_eq!(ledger.reserve(&flexible(1, 5_000, 10), T0).unwrap().granted, 800);
}

#[test]
fn shrink_lowers_a_hold_and_never_raises_it() {
    let mut ledger = ledger(exact(1_000));
    ledger.reserve(&req(1, 600), T0).unwrap();
    assert!(ledger.shrink(1, 250));
    assert_eq!(ledger.snapshot().reserved, 250);
    assert!(ledger.shrink(1, 900));
    assert_eq!(ledger.snapshot().reserved, 250);
    assert!(!ledger.shrink(2, 10));
    ledger.settle(1, 250, T0);
    assert_eq!((ledger.snapshot().spend, ledger.snapshot().reserved), (250, 0));
}

#[test]
fn grant_rules() {
    assert_eq!(grant(100, 10, 100), Some(100));
    assert_eq!(grant(100, 10, 99), Some(99));
    assert_eq!(grant(100, 10, 10), Some(10));
    assert_eq!(grant(100, 10, 9), None);
    assert_eq!(grant(100, 0, 0), None);
    assert_eq!(grant(100, 10, -5), None);
}

#[test]
fn a_session_limit_clamps_like_the_budget_down_to_the_floor() {
    let mut plain = ledger(sessions(1_000));
    let mut ledger = ledger(BudgetConfig { exact_ceiling: true, ..sessions(1_000) });
    ledger.reserve(&in_session(1, 700, "s1"), T0).unwrap();
    let clamped =
        ledger.reserve(&ReserveRequest { floor: Some(100), ..in_session(2, 5_000, "s1") }, T0).unwrap();
    assert_eq!(clamped.granted, 300, "the session's room, not the budget's");
    ledger.settle(1, 650, T0);
    ledger.settle(2, 300, T0);
    // 50 left in the session: below the floor.
    let denial = ledger.reserve(&ReserveRequest { floor: Some(100), ..in_session(3, 5_000, "s1") }, T0);
    assert!(matches!(denial.unwrap_err().reason, DenialReason::SessionLimitExceeded { .. }));
    // Another session has its own room.
    let other =
        ledger.reserve(&ReserveRequest { floor: Some(100), ..in_session(4, 5_000, "s2") }, T0).unwrap();
    assert_eq!(other.granted, 1_000);
    // Without the setting the session needs the whole estimate.
    assert!(plain.reserve(&ReserveRequest { floor: Some(100), ..in_session(1, 5_000, "s1") }, T0).is_err());
}
