//! Budgets: the pure ledger rules of one budget entity and the calendar math of their
//! periods. The budget actor (owning a ledger, persisting it, emitting its events) builds
//! on these.

pub mod ledger;
pub mod period;

pub use ledger::{
    Admission, BudgetConfig, BudgetLedger, BudgetSnapshot, Denial, DenialReason, EntityType, Fingerprint,
    LedgerEvent, LoopConfig, LoopDetectionType, Policy, ReserveRequest, ResetInterval, Severity,
    UnknownVariant, VelocityConfig,
};
pub use period::{next_period_start, period_start};
