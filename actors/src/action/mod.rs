//! Human-in-the-loop actions: the status machine as pure rules ([`decide`]), the actor
//! that owns one live action's status and expiry timer ([`actor`]), and the registry
//! that finds or starts it ([`registry`]).
//!
//! Transitions follow the spec's table exactly. `pending` → `approved` / `rejected` by a
//! person, → `expired` when its TTL elapses; `approved` → `executing` → `executed` or
//! `failed` by the agent's reports. Reporting `executed` or `failed` straight from
//! `approved` is refused (the table lists only the path through `executing`).

pub mod actor;
pub mod registry;

use std::fmt;
use std::str::FromStr;

use futures_util::future::BoxFuture;

/// Where an action is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActionStatus {
    Pending,
    Approved,
    Rejected,
    Expired,
    Executing,
    Executed,
    Failed,
}

impl ActionStatus {
    pub const ALL: [ActionStatus; 7] = [
        Self::Pending,
        Self::Approved,
        Self::Rejected,
        Self::Expired,
        Self::Executing,
        Self::Executed,
        Self::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Expired => "expired",
            Self::Executing => "executing",
            Self::Executed => "executed",
            Self::Failed => "failed",
        }
    }

    /// No transition leaves a terminal status.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Executed | Self::Failed | Self::Rejected | Self::Expired)
    }
}

impl fmt::Display for ActionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ActionStatus {
    type Err = ();

    fn from_str(s: &str) -> Result<Self, ()> {
        Self::ALL.into_iter().find(|v| v.as_str() == s).ok_or(())
    }
}

/// What an agent reports through `POST /api/actions/:id/result`.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// `Executing`, `Executed` or `Failed` (the body rules are checked at the edge).
    pub status: ActionStatus,
    pub result: Option<serde_json::Value>,
    pub error_message: Option<String>,
}

/// A request to move an action.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// A person approves; `by` is their user id.
    Approve {
        by: String,
    },
    /// A person rejects; `by` is their user id.
    Reject {
        by: String,
    },
    /// The expiry timer fired.
    Expire,
    Report(Report),
}

/// Why a command does not apply to the action's current status.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TransitionError {
    #[error("the action is not in the status this transition requires")]
    Invalid,
    #[error("the action has expired")]
    Expired,
}

/// Whether an action expiring at `expires_at` has expired at `now`.
pub fn is_due(expires_at: Option<i64>, now: i64) -> bool {
    expires_at.is_some_and(|t| now >= t)
}

/// The status `command` moves an action in `status` (expiring at `expires_at`) to at
/// `now`, or why it cannot. A pending action past its expiry can no longer be decided
/// (`Expired`), even if its timer has not fired yet.
pub fn decide(
    status: ActionStatus,
    expires_at: Option<i64>,
    command: &Command,
    now: i64,
) -> Result<ActionStatus, TransitionError> {
    use ActionStatus::*;
    match command {
        Command::Approve { .. } | Command::Reject { .. } => match status {
            Pending if is_due(expires_at, now) => Err(TransitionError::Expired),
            Pending if matches!(command, Command::Approve { .. }) => Ok(Approved),
            Pending => Ok(Rejected),
            Expired => Err(TransitionError::Expired),
            _ => Err(TransitionError::Invalid),
        },
        Command::Expire => match status {
            Pending if is_due(expires_at, now) => Ok(Expired),
            _ => Err(TransitionError::Invalid),
        },
        Command::Report(report) => match (status, report.status) {
            (Approved, Executing) => Ok(Executing),
            (Executing, Executed) => Ok(Executed),
            (Executing, Failed) => Ok(Failed),
            _ => Err(TransitionError::Invalid),
        },
    }
}

/// An action as storage holds it: what the actor needs to decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredAction {
    /// The bare id (storage form).
    pub id: String,
    pub org_id: String,
    pub status: ActionStatus,
    /// Bumped by every transition; a write is conditional on it.
    pub version: i64,
    pub expires_at: Option<i64>,
}

/// A transition to persist: `before` is the state it was decided on.
#[derive(Clone, Debug, PartialEq)]
pub struct Change {
    pub before: StoredAction,
    pub command: Command,
    pub to: ActionStatus,
    pub now: i64,
}

/// What storage made of a [`Change`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Applied {
    /// Written (with its events), and this is the new state.
    Done(StoredAction),
    /// Someone else (another instance) changed the action since it was read: nothing
    /// was written.
    Stale,
    /// The transition cannot be carried out (for example, the budget an approved
    /// increase would raise no longer exists): nothing was written.
    Refused(String),
}

/// Storage could not answer.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("action storage unavailable: {0}")]
pub struct ActionStoreError(pub String);

/// Where action actors read and write their action. Writes are conditional on
/// `before.version`, and write the transition's events in the same transaction.
pub trait ActionStore: Send + Sync + 'static {
    fn load(&self, id: &str) -> BoxFuture<'static, Result<Option<StoredAction>, ActionStoreError>>;
    fn apply(&self, change: Change) -> BoxFuture<'static, Result<Applied, ActionStoreError>>;
}

#[cfg(test)]
mod tests;
