//! Periods: rolls, boundaries and manual resets.

use super::*;

// ----- periods -----

#[test]
fn a_budget_without_interval_has_no_period_and_never_rolls() {
    let mut ledger = BudgetLedger::new(config(1_000), 500, Some(T0), T0);
    assert_eq!(ledger.period_start(), None);
    assert_eq!(ledger.roll_period(T0 + 400 * DAY), None);
    assert!(ledger.tick(T0 + 400 * DAY).is_empty());
    assert_eq!(ledger.spend(), 500);
}

#[test]
fn a_budget_with_interval_but_no_period_start_starts_one_now() {
    let ledger = BudgetLedger::new(daily(1_000), 0, None, T0 + 5 * HOUR);
    assert_eq!(ledger.period_start(), Some(T0 + 5 * HOUR));
    assert_eq!(ledger.snapshot().period_start, Some(T0 + 5 * HOUR));
}

#[test]
fn roll_period_before_the_boundary_does_nothing() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(700, None, T0);
    assert_eq!(ledger.roll_period(T0 + DAY - 1), None);
    assert_eq!(ledger.spend(), 700);
}

#[test]
fn roll_period_at_the_boundary_emits_reset_and_zeroes_spend() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(700, None, T0);
    assert_eq!(
        ledger.roll_period(T0 + DAY),
        Some(LedgerEvent::Reset {
            previous_spend: 700,
            new_period_start: T0 + DAY,
            interval: ResetInterval::Daily
        })
    );
    assert_eq!((ledger.spend(), ledger.period_start()), (0, Some(T0 + DAY)));
    assert_eq!(ledger.roll_period(T0 + DAY), None);
}

#[test]
fn several_missed_periods_roll_once_to_the_current_aligned_period() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(300, None, T0);
    let event = ledger.roll_period(T0 + 3 * DAY + 5 * HOUR);
    assert_eq!(
        event,
        Some(LedgerEvent::Reset {
            previous_spend: 300,
            new_period_start: T0 + 3 * DAY,
            interval: ResetInterval::Daily
        })
    );
    assert_eq!(ledger.roll_period(T0 + 3 * DAY + 6 * HOUR), None);
}

#[test]
fn monthly_budget_rolls_on_the_first_of_the_next_month() {
    let config = BudgetConfig { reset_interval: Some(ResetInterval::Monthly), ..config(1_000) };
    let mut ledger = BudgetLedger::new(config, 10, None, T0 + 14 * DAY);
    assert_eq!(ledger.roll_period(FEB_1 - 1), None);
    assert_eq!(
        ledger.roll_period(FEB_1),
        Some(LedgerEvent::Reset {
            previous_spend: 10,
            new_period_start: FEB_1,
            interval: ResetInterval::Monthly
        })
    );
}

#[test]
fn weekly_budget_rolls_on_monday() {
    let config = BudgetConfig { reset_interval: Some(ResetInterval::Weekly), ..config(1_000) };
    let mut ledger = ledger(config); // T0 is a Thursday
    let monday = T0 + 4 * DAY;
    assert_eq!(ledger.roll_period(monday - 1), None);
    assert!(matches!(
        ledger.roll_period(monday + HOUR),
        Some(LedgerEvent::Reset { new_period_start, .. }) if new_period_start == monday
    ));
}

#[test]
fn reserve_rolls_the_period_before_checking_the_budget() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(1_000, None, T0);
    deny(&mut ledger, req(1, 500), T0 + DAY - 1);
    let admission = admit(&mut ledger, req(2, 500), T0 + DAY);
    assert_eq!(
        admission.events,
        vec![LedgerEvent::Reset {
            previous_spend: 1_000,
            new_period_start: T0 + DAY,
            interval: ResetInterval::Daily
        }]
    );
}

#[test]
fn reservations_in_flight_survive_a_roll_and_settle_into_the_new_period() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(500, None, T0);
    admit(&mut ledger, req(1, 400), T0 + DAY - 1);
    ledger.roll_period(T0 + DAY);
    assert_eq!((ledger.spend(), ledger.reserved()), (0, 400));
    ledger.settle(1, 350, T0 + DAY + 1);
    assert_eq!((ledger.spend(), ledger.reserved()), (350, 0));
}

#[test]
fn settle_rolls_the_period_first() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(800, None, T0);
    admit(&mut ledger, req(1, 100), T0);
    let events = ledger.settle(1, 100, T0 + DAY);
    assert!(matches!(events.as_slice(), [LedgerEvent::Reset { previous_spend: 800, .. }]));
    assert_eq!(ledger.spend(), 100);
}

#[test]
fn tick_rolls_the_period() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(800, None, T0);
    assert!(ledger.tick(T0 + DAY - 1).is_empty());
    assert!(matches!(ledger.tick(T0 + DAY).as_slice(), [LedgerEvent::Reset { previous_spend: 800, .. }]));
}

#[test]
fn manual_reset_zeroes_spend_and_starts_the_period_now_until_the_next_boundary() {
    let mut ledger = ledger(daily(1_000));
    ledger.record_spend(500, None, T0);
    ledger.reset(T0 + 15 * HOUR);
    assert_eq!((ledger.spend(), ledger.period_start()), (0, Some(T0 + 15 * HOUR)));
    assert_eq!(ledger.roll_period(T0 + DAY - 1), None);
    assert!(matches!(
        ledger.roll_period(T0 + DAY),
        Some(LedgerEvent::Reset { previous_spend: 0, new_period_start, .. }) if new_period_start == T0 + DAY
    ));
}

#[test]
fn manual_reset_without_interval_keeps_no_period_and_keeps_reservations() {
    let mut ledger = ledger(config(1_000));
    ledger.record_spend(500, None, T0);
    admit(&mut ledger, req(1, 300), T0);
    ledger.reset(T0 + HOUR);
    assert_eq!((ledger.spend(), ledger.reserved(), ledger.period_start()), (0, 300, None));
}
