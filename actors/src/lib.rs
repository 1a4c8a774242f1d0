//! Stateful core of spendgate: budget and action actors, their registries and the pure rules.

pub mod action;
pub mod budget;
pub mod registry;
pub mod store;
