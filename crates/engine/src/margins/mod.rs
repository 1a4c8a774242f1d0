//! Margin analytics: processor revenue per customer and month joined with the cost
//! events of the mapped customer tag. The pure rules (months, health tiers,
//! projection, revenue items, auto-matching) are plain functions; `sync` and
//! `scheduler` talk to the processor and storage.

pub mod health;
pub mod matching;
pub mod months;
pub mod report;
pub mod revenue;
pub mod scheduler;
pub mod sync;
