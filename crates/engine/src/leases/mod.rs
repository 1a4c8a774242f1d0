//! Budget leases: with shared budgets (several instances on one PostgreSQL), each
//! instance holds a slice of a budget's room (`db::budget_leases`) and admits calls
//! against it in memory, so a call pays no database round trip to reserve; it asks for
//! more only when the slice runs short.
//!
//! Per budget entity a [`Lease`] counts what its row holds (`total`) and what the calls
//! in flight hold of it (`in_flight`); the rest is free. A call takes its hold from the
//! free room of every budget it counts against, all or nothing; when one is short, the
//! lease grows by one conditional UPDATE sized by the recent consumption
//! ([`Lease::target`]) and the room left (`db::budget_leases::slice`): a quarter of the
//! room at most, so near the limit the slices shrink to the call itself. A lease that
//! the room limited is *tight*: it keeps no free room (a call's unused hold goes back to
//! the budget with its commit, a released one at once), exactly as per-call arbitration.
//!
//! Unused room comes back: when a lease has been idle for `idle` (see [`LeaseBook`]'s
//! maintenance), when its budget changes (through the change feed, on every instance),
//! when another instance is refused while this one holds room (it asks everyone back
//! through the change feed, waits a moment and tries once more), at shutdown, and for a
//! process that died, when its heartbeat lapses (`db::budget_leases::reap_gone`). This
//! process stops admitting against its leases once its own heartbeat is older than half
//! that lapse, so a cut-off process never spends room that was reaped.

mod book;
mod holds;
mod lease;

pub use book::{LeaseBook, LeaseRequest};
pub use holds::LeaseHolds;
