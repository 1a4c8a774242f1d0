//! Stateful core of spendgate: budget actors, their registry and the pure ledger rules.

pub mod budget;
pub mod registry;
pub mod store;
