//! The integration suite: one binary, one module per area. Every test starts a real
//! server process on ephemeral ports against its own fresh database.

#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly by design")]

mod support;

mod auth;
mod health;
mod keys;
mod orgs;
mod budgets;
mod cost_events;
mod ingest;
