//! Budgets shared by several instances on one PostgreSQL database: the database
//! arbitrates with atomic conditional updates of `budgets.reserved_microdollars`, and
//! `budget_reservations` records who holds what until when (the reaper frees the rows
//! of requests and instances that died).

/// One reservation held in the database on one budget row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedHold {
    /// `budget_reservations.id`.
    pub id: String,
    pub budget_id: String,
    pub amount: i64,
}
