//! Tests of the ledger, one module per idea, with their shared helpers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

pub(super) use super::*;

mod checks;
mod exact_ceiling;
mod loops;
mod periods;
mod policy;
mod sessions;
mod velocity;
mod wire;

/// 2026-01-01T00:00:00Z, a Thursday.
pub(super) const T0: i64 = 1_767_225_600_000;
/// 2026-02-01T00:00:00Z.
pub(super) const FEB_1: i64 = 1_769_904_000_000;
pub(super) const SECOND: i64 = 1_000;
pub(super) const MINUTE: i64 = 60 * SECOND;
pub(super) const HOUR: i64 = 60 * MINUTE;
pub(super) const DAY: i64 = 24 * HOUR;

pub(super) fn config(limit: i64) -> BudgetConfig {
    BudgetConfig::new(limit)
}

pub(super) fn with_policy(limit: i64, policy: Policy) -> BudgetConfig {
    BudgetConfig { policy, ..config(limit) }
}

pub(super) fn with_thresholds(limit: i64, thresholds: &[u8]) -> BudgetConfig {
    BudgetConfig { thresholds: thresholds.to_vec(), ..config(limit) }
}

pub(super) fn daily(limit: i64) -> BudgetConfig {
    BudgetConfig { reset_interval: Some(ResetInterval::Daily), ..config(limit) }
}

/// A large budget whose velocity is limited to `limit` per minute, cooldown 30 s.
pub(super) fn velocity(limit: i64) -> BudgetConfig {
    BudgetConfig {
        velocity: Some(VelocityConfig { limit, window_ms: MINUTE, cooldown_ms: 30 * SECOND }),
        ..config(1_000_000)
    }
}

/// A large budget with a per-session limit.
pub(super) fn sessions(session_limit: i64) -> BudgetConfig {
    BudgetConfig { session_limit: Some(session_limit), ..config(1_000_000) }
}

/// A budget of 1,000 holding back 100 for finalization.
pub(super) fn reserve_zone(policy: Policy) -> BudgetConfig {
    BudgetConfig { finalization_reserve: 100, ..with_policy(1_000, policy) }
}

/// A large budget with loop detection over a one-minute window.
pub(super) fn loops(max_calls: u32, aggregate_max_keys: u32) -> BudgetConfig {
    BudgetConfig {
        loop_detection: LoopConfig { max_calls, window_ms: MINUTE, aggregate_max_keys },
        ..config(1_000_000_000)
    }
}

pub(super) fn ledger(config: BudgetConfig) -> BudgetLedger {
    BudgetLedger::new(config, 0, Some(T0), T0)
}

pub(super) fn req(reservation_id: u64, estimate: i64) -> ReserveRequest<'static> {
    ReserveRequest {
        reservation_id,
        estimate,
        session_id: None,
        finalize: false,
        fingerprint: None,
        floor: None,
    }
}

pub(super) fn in_session(reservation_id: u64, estimate: i64, session: &str) -> ReserveRequest<'_> {
    ReserveRequest { session_id: Some(session), ..req(reservation_id, estimate) }
}

pub(super) fn finalizing(reservation_id: u64, estimate: i64) -> ReserveRequest<'static> {
    ReserveRequest { finalize: true, ..req(reservation_id, estimate) }
}

pub(super) fn call_to(reservation_id: u64, model: &str, hash: u64) -> ReserveRequest<'_> {
    let fingerprint = Fingerprint { provider: "openai", model, hash };
    ReserveRequest { fingerprint: Some(fingerprint), ..req(reservation_id, 1) }
}

pub(super) fn call(reservation_id: u64, hash: u64) -> ReserveRequest<'static> {
    call_to(reservation_id, "gpt-4o", hash)
}

pub(super) fn admit(ledger: &mut BudgetLedger, request: ReserveRequest<'_>, now_ms: i64) -> Admission {
    ledger.reserve(&request, now_ms).expect("request should be admitted")
}

pub(super) fn deny(ledger: &mut BudgetLedger, request: ReserveRequest<'_>, now_ms: i64) -> Denial {
    ledger.reserve(&request, now_ms).expect_err("request should be denied")
}

pub(super) fn crossed(percent: u8, spend: i64, limit: i64) -> LedgerEvent {
    LedgerEvent::ThresholdCrossed {
        percent,
        severity: Severity::of(percent),
        spend,
        limit,
        remaining: (limit - spend).max(0),
    }
}
