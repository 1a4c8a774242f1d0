//! Budgets: the pure ledger rules of one budget entity, the calendar math of their
//! periods, and the actor that owns a ledger and answers for its entity.

pub mod actor;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod admission_tests;
pub mod ledger;
pub mod messages;
pub mod period;
#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
mod vocabulary;

pub use actor::{BudgetActor, EventSink};
pub use ledger::{
    Admission, BudgetConfig, BudgetLedger, BudgetSnapshot, Denial, DenialReason, EntityType, Fingerprint,
    LedgerEvent, LoopConfig, LoopDetectionType, Policy, ReserveRequest, ResetInterval, Severity,
    UnknownVariant, VelocityConfig, VelocityStatus,
};
pub use messages::{
    CallFingerprint, RecordSpend, Refresh, Release, Reload, Reserve, Settle, SettleBatch, Shrink, Snapshot,
    Tick, VelocityState,
};
pub use period::{next_period_start, period_start};
