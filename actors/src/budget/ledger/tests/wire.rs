//! Wire names, a property-style run and restoring spend from storage.

use super::*;

// ----- wire names -----

#[test]
fn enums_parse_and_print_their_wire_names() {
    for policy in [Policy::StrictBlock, Policy::SoftBlock, Policy::Warn] {
        assert_eq!(policy.as_str().parse::<Policy>(), Ok(policy));
    }
    assert_eq!(Policy::SoftBlock.to_string(), "soft_block");
    assert_eq!("weekly".parse::<ResetInterval>(), Ok(ResetInterval::Weekly));
    assert_eq!("api_key".parse::<EntityType>(), Ok(EntityType::ApiKey));
    assert_eq!(EntityType::Customer.as_str(), "customer");
    assert_eq!(LoopDetectionType::Semantic.as_str(), "semantic");
}

#[test]
fn unknown_wire_names_are_rejected_with_what_was_parsed() {
    let error = "Strict_Block".parse::<Policy>().unwrap_err();
    assert_eq!(error.to_string(), r#"unknown budget policy "Strict_Block""#);
    assert!("yearly".parse::<ResetInterval>().is_err());
}

#[test]
fn serde_uses_the_wire_names() {
    assert_eq!(serde_json::to_string(&Policy::StrictBlock).unwrap(), r#""strict_block""#);
    assert_eq!(serde_json::from_str::<EntityType>(r#""tag""#).unwrap(), EntityType::Tag);
    assert_eq!(serde_json::to_string(&ResetInterval::Monthly).unwrap(), r#""monthly""#);
    let event = LedgerEvent::LoopDetected {
        detection_type: LoopDetectionType::Exact,
        call_count: 51,
        window_ms: MINUTE,
        max_calls: 50,
    };
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["kind"], "loop_detected");
    assert_eq!(json["detection_type"], "exact");
}

#[test]
fn defaults_match_the_spec() {
    assert_eq!(Policy::default(), Policy::StrictBlock);
    let defaults = LoopConfig::default();
    assert_eq!((defaults.max_calls, defaults.window_ms, defaults.aggregate_max_keys), (50, 60_000, 5));
    let config = BudgetConfig::new(1);
    assert_eq!((config.finalization_reserve, config.reset_interval, config.velocity), (0, None, None));
}

#[test]
fn events_name_their_webhook_types() {
    let cases = [
        (crossed(50, 500, 1_000), "budget.threshold.warning"),
        (crossed(90, 900, 1_000), "budget.threshold.critical"),
        (LedgerEvent::Exceeded { limit: 1, spend: 1, estimate: 1 }, "budget.exceeded"),
        (
            LedgerEvent::VelocityExceeded { limit: 1, window_ms: 1, current: 1, cooldown_ms: 1 },
            "velocity.exceeded",
        ),
        (LedgerEvent::VelocityRecovered { limit: 1, window_ms: 1, cooldown_ms: 1 }, "velocity.recovered"),
        (
            LedgerEvent::SessionLimitExceeded { session_id: "s".into(), session_spend: 1, session_limit: 1 },
            "session.limit_exceeded",
        ),
        (
            LedgerEvent::LoopDetected {
                detection_type: LoopDetectionType::Exact,
                call_count: 1,
                window_ms: 1,
                max_calls: 1,
            },
            "loop.detected",
        ),
        (
            LedgerEvent::Reset { previous_spend: 1, new_period_start: 1, interval: ResetInterval::Daily },
            "budget.reset",
        ),
    ];
    for (event, webhook_type) in cases {
        assert_eq!(event.webhook_type(), webhook_type);
    }
}

#[test]
fn denial_reasons_have_codes_and_messages() {
    assert_eq!(DenialReason::BudgetExceeded.code(), "budget_exceeded");
    let velocity = DenialReason::VelocityExceeded { retry_after_ms: 1_500 };
    assert_eq!(velocity.code(), "velocity_exceeded");
    assert_eq!(velocity.to_string(), "velocity limit exceeded; retry after 1500 ms");
    let denial = Denial { reason: velocity, snapshot: ledger(config(1)).snapshot(), events: Vec::new() };
    assert_eq!(denial.to_string(), "velocity limit exceeded; retry after 1500 ms");
}

// ----- property-style -----

/// A 64-bit linear congruential generator (Knuth's MMIX constants): deterministic
/// randomness without the rand crate.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    fn index(&mut self, len: usize) -> usize {
        usize::try_from(self.below(len as u64)).unwrap()
    }

    fn amount(&mut self, range: std::ops::RangeInclusive<i64>) -> i64 {
        let span = u64::try_from(range.end() - range.start()).unwrap() + 1;
        range.start() + i64::try_from(self.below(span)).unwrap()
    }
}

#[test]
fn random_operations_never_overcommit_a_strict_budget_and_drain_to_zero() {
    const LIMIT: i64 = 10_000;
    let (mut admitted, mut denied) = (0, 0);
    for seed in 0..32 {
        let mut rng = Lcg(seed);
        let mut ledger = ledger(BudgetConfig {
            thresholds: vec![25, 50, 90, 100],
            finalization_reserve: if seed % 2 == 0 { 0 } else { 500 },
            ..config(LIMIT)
        });
        let mut open: Vec<(u64, i64)> = Vec::new();
        let mut fired = Vec::new();
        let mut now = T0;
        for id in 0..2_000u64 {
            now += rng.amount(0..=999);
            match rng.below(4) {
                0 | 1 => {
                    let estimate = rng.amount(0..=2_999);
                    let request = ReserveRequest { finalize: rng.below(4) == 0, ..req(id, estimate) };
                    if ledger.reserve(&request, now).is_ok() {
                        open.push((id, estimate));
                        admitted += 1;
                    } else {
                        denied += 1;
                    }
                }
                2 if !open.is_empty() => {
                    let (open_id, estimate) = open.swap_remove(rng.index(open.len()));
                    let actual = rng.amount(0..=estimate);
                    fired.extend(ledger.settle(open_id, actual, now));
                }
                3 if !open.is_empty() => {
                    let (open_id, _) = open.swap_remove(rng.index(open.len()));
                    assert!(ledger.release(open_id));
                }
                _ => {}
            }
            assert!(ledger.spend() + ledger.reserved() <= LIMIT, "seed {seed}: overcommitted");
            assert_eq!(ledger.reserved(), open.iter().map(|&(_, estimate)| estimate).sum::<i64>());
        }
        for (open_id, estimate) in open.drain(..) {
            if open_id % 2 == 0 {
                fired.extend(ledger.settle(open_id, estimate, now));
            } else {
                ledger.release(open_id);
            }
        }
        assert_eq!((ledger.reserved(), ledger.open_reservations()), (0, 0), "seed {seed}");
        assert!(ledger.spend() <= LIMIT);
        let mut percents: Vec<u8> = fired
            .iter()
            .filter_map(|event| match event {
                LedgerEvent::ThresholdCrossed { percent, .. } => Some(*percent),
                _ => None,
            })
            .collect();
        let count = percents.len();
        percents.dedup();
        assert_eq!(percents.len(), count, "seed {seed}: a threshold fired twice");
    }
    assert!(
        admitted > 1_000 && denied > 1_000,
        "both outcomes exercised: {admitted} admitted, {denied} denied"
    );
}

#[test]
fn restore_spend_adopts_storage_and_rearms_after_a_reset() {
    let mut ledger = ledger(with_thresholds(1_000, &[50]));
    ledger.reserve(&req(1, 100), T0).unwrap();
    // Other writers raised spend: adopted, and the thresholds it passed count as fired.
    ledger.restore_spend(600, None, T0);
    assert_eq!((ledger.spend(), ledger.reserved()), (600, 100));
    assert!(ledger.settle(1, 10, T0).is_empty(), "50% was passed by the stored spend");
    // Lower spend in storage is a reset made elsewhere: thresholds re-arm.
    ledger.restore_spend(0, None, T0);
    assert_eq!(ledger.spend(), 0);
    assert_eq!(ledger.record_spend(500, None, T0).len(), 1);
}

#[test]
fn restore_spend_ignores_a_row_a_period_behind_and_takes_a_manual_reset() {
    let mut ledger = BudgetLedger::new(daily(1_000), 300, Some(T0), T0);
    ledger.record_spend(50, None, T0 + DAY + HOUR);
    assert_eq!(ledger.period_start(), Some(T0 + DAY), "rolled into the next day");
    // Storage has not recorded the roll yet.
    ledger.restore_spend(300, Some(T0), T0 + DAY + HOUR);
    assert_eq!((ledger.spend(), ledger.period_start()), (50, Some(T0 + DAY)));
    // A manual reset at 15:00 stored spend 0 and a period starting then.
    ledger.restore_spend(0, Some(T0 + DAY + 15 * HOUR), T0 + DAY + 15 * HOUR);
    assert_eq!((ledger.spend(), ledger.period_start()), (0, Some(T0 + DAY + 15 * HOUR)));
}
