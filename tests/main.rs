//! The integration suite: one binary, one module per area. Every test starts a real
//! server process on ephemeral ports against its own fresh database.

mod support;

mod auth;
mod health;
mod keys;
mod orgs;
