//! The ledger's vocabulary: wire enums, configurations, requests, snapshots, events and
//! denials — what crosses the ledger's boundary.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A string that names no variant of a wire enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownVariant {
    /// What was being parsed, e.g. `budget policy`.
    pub kind: &'static str,
    /// The rejected input.
    pub value: String,
}

/// Declares a fieldless enum with its wire spelling used by serde, `as_str`, `FromStr`
/// and `Display` alike, so the four can never disagree.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident as $kind:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant ),+
        }

        impl $name {
            /// The wire spelling, as stored and as shown in the API.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( Self::$variant => $wire ),+
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownVariant;

            fn from_str(value: &str) -> Result<Self, UnknownVariant> {
                match value {
                    $( $wire => Ok(Self::$variant), )+
                    _ => Err(UnknownVariant { kind: $kind, value: value.to_owned() }),
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

wire_enum! {
    /// What happens when a request would take the entity over its limit.
    #[derive(Default)]
    pub enum Policy as "budget policy" {
        /// Deny any request whose estimate does not fit (the default).
        #[default]
        StrictBlock = "strict_block",
        /// Let the request that crosses the limit through; deny the ones after it.
        SoftBlock = "soft_block",
        /// Never deny; alert once per period instead.
        Warn = "warn",
    }
}

wire_enum! {
    /// How often a budget's spend resets on its own.
    pub enum ResetInterval as "reset interval" {
        Daily = "daily",
        Weekly = "weekly",
        Monthly = "monthly",
    }
}

wire_enum! {
    /// The kind of thing a budget caps.
    pub enum EntityType as "budget entity type" {
        User = "user",
        ApiKey = "api_key",
        /// A tag `key=value` pair.
        Tag = "tag",
        Customer = "customer",
    }
}

wire_enum! {
    /// Which loop-detection rule blocked a call.
    pub enum LoopDetectionType as "loop detection type" {
        /// The same fingerprint repeated `max_calls` times.
        Exact = "exact",
        /// A few fingerprints of one model alternated `max_calls` times.
        Semantic = "semantic",
    }
}

wire_enum! {
    /// How urgent a threshold crossing is: `budget.threshold.warning` or `.critical`.
    pub enum Severity as "threshold severity" {
        /// Below 90%.
        Warning = "warning",
        /// 90% and above.
        Critical = "critical",
    }
}

impl Severity {
    /// The severity of a crossing of `percent`.
    pub const fn of(percent: u8) -> Self {
        if percent >= 90 {
            Self::Critical
        } else {
            Self::Warning
        }
    }
}

/// Maximum spend over a sliding window, and how long requests are blocked after a breach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VelocityConfig {
    /// Microdollars allowed per window, reservations included.
    pub limit: i64,
    pub window_ms: i64,
    pub cooldown_ms: i64,
}

/// Loop detection settings of a budget (spec fields `loop*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopConfig {
    /// Calls allowed per window before a repeat is blocked; 0 disables loop detection.
    pub max_calls: u32,
    pub window_ms: i64,
    /// The aggregate rule fires only when the calls come from at most this many
    /// distinct fingerprints.
    pub aggregate_max_keys: u32,
}

impl LoopConfig {
    /// System default for `loopMaxCalls` (spec).
    pub const DEFAULT_MAX_CALLS: u32 = 50;
    /// System default for `loopWindowSeconds`. The spec leaves it open; one minute sits
    /// inside the allowed 10-3600 s and matches how fast a runaway agent repeats itself.
    pub const DEFAULT_WINDOW_MS: i64 = 60_000;
    /// System default for `loopAggregateMaxKeys` (spec).
    pub const DEFAULT_AGGREGATE_MAX_KEYS: u32 = 5;

    /// Whether loop detection runs at all.
    pub const fn is_enabled(&self) -> bool {
        self.max_calls > 0
    }
}

impl Default for LoopConfig {
    fn default() -> Self {
        Self {
            max_calls: Self::DEFAULT_MAX_CALLS,
            window_ms: Self::DEFAULT_WINDOW_MS,
            aggregate_max_keys: Self::DEFAULT_AGGREGATE_MAX_KEYS,
        }
    }
}

/// The enforcement settings of one budget row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BudgetConfig {
    /// `maxBudgetMicrodollars`.
    pub limit: i64,
    pub policy: Policy,
    pub reset_interval: Option<ResetInterval>,
    /// Alert thresholds in percent of the limit.
    pub thresholds: Vec<u8>,
    pub velocity: Option<VelocityConfig>,
    /// Per-session spend limit, always enforced strictly.
    pub session_limit: Option<i64>,
    /// Microdollars held back for `X-Service-Finalize` requests; 0 means none.
    pub finalization_reserve: i64,
    pub loop_detection: LoopConfig,
    /// `exactCeiling` (strict budgets only): a request with a
    /// [`floor`](ReserveRequest::floor) whose estimate does not fit is granted the room
    /// left instead of denied, as long as that room is at least the floor.
    pub exact_ceiling: bool,
}

impl BudgetConfig {
    /// A `strict_block` budget of `limit` with no reset, thresholds, velocity, session
    /// limit or reserve, and loop detection at the system defaults.
    pub fn new(limit: i64) -> Self {
        Self {
            limit,
            policy: Policy::StrictBlock,
            reset_interval: None,
            thresholds: Vec::new(),
            velocity: None,
            session_limit: None,
            finalization_reserve: 0,
            exact_ceiling: false,
            loop_detection: LoopConfig::default(),
        }
    }

    /// Sorts and deduplicates thresholds and drops values outside 1..=100, so the rules
    /// can walk them in ascending order.
    pub(super) fn normalized(mut self) -> Self {
        self.thresholds.retain(|p| (1..=100).contains(p));
        self.thresholds.sort_unstable();
        self.thresholds.dedup();
        self
    }
}

/// What identifies "the same call" for loop detection. The content hash comes from the
/// proxy and never leaves the ledger (the spec omits it from events on purpose).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fingerprint<'a> {
    pub provider: &'a str,
    pub model: &'a str,
    pub hash: u64,
}

/// One request to hold budget for an upstream call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReserveRequest<'a> {
    /// Chosen by the caller, unique among its open reservations on this entity.
    pub reservation_id: u64,
    /// Estimated cost in microdollars.
    pub estimate: i64,
    pub session_id: Option<&'a str>,
    /// `X-Service-Finalize: 1`.
    pub finalize: bool,
    pub fingerprint: Option<Fingerprint<'a>>,
    /// The least the caller can make do with (it can clamp the call to any amount from
    /// here up to `estimate`); `None` when the call needs the whole estimate.
    pub floor: Option<i64>,
}

/// The figures of a budget at one instant, for response headers and status endpoints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct BudgetSnapshot {
    pub limit: i64,
    /// Settled spend of the current period.
    pub spend: i64,
    /// Estimates of reservations still in flight.
    pub reserved: i64,
    /// `limit - spend - reserved`; negative once over the limit.
    pub remaining: i64,
    pub finalization_reserve: i64,
    pub policy: Policy,
    pub reset_interval: Option<ResetInterval>,
    pub period_start: Option<i64>,
    /// End of the velocity cooldown while the breaker is open. It may lie in the past
    /// until the next `reserve` or `tick` closes the breaker.
    pub breaker_open_until: Option<i64>,
    /// The budget clamps calls to its room instead of refusing them.
    pub exact_ceiling: bool,
}

impl BudgetSnapshot {
    /// Spend plus reservations (`X-Service-Budget-Spent`).
    pub const fn committed(&self) -> i64 {
        self.spend.saturating_add(self.reserved)
    }

    /// Remaining minus the finalization reserve (`X-Service-Budget-Effective-Remaining`).
    pub const fn effective_remaining(&self) -> i64 {
        self.remaining.saturating_sub(self.finalization_reserve)
    }

    /// Remaining clamped at zero, as `GET /api/budgets/status` shows it.
    pub const fn remaining_clamped(&self) -> i64 {
        if self.remaining > 0 {
            self.remaining
        } else {
            0
        }
    }

    /// Whether `X-Service-Finalize` would be honoured now.
    pub const fn in_reserve_zone(&self) -> bool {
        self.committed() >= self.limit.saturating_sub(self.finalization_reserve)
    }
}

/// The velocity window and breaker of a budget at one instant (an operator view).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct VelocityStatus {
    pub limit: i64,
    pub window_ms: i64,
    pub cooldown_ms: i64,
    /// Settled spend inside the window.
    pub window_spend: i64,
    /// `window_spend` plus everything reserved: what the next request is checked against.
    pub current: i64,
    /// End of the cooldown while the breaker is open.
    pub breaker_open_until: Option<i64>,
}

/// Something the actor should announce (a webhook), in the order it happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum LedgerEvent {
    /// Settled spend reached `percent` of the limit for the first time this period.
    ThresholdCrossed {
        percent: u8,
        severity: Severity,
        spend: i64,
        limit: i64,
        /// `limit - spend`, clamped at zero.
        remaining: i64,
    },
    /// A request was blocked at the ceiling, or (warn policy) the first request of the
    /// period went over it. `spend` is the committed amount (spend plus reservations).
    Exceeded { limit: i64, spend: i64, estimate: i64 },
    /// The velocity breaker tripped. `current` is settled spend in the window plus
    /// reservations, before the blocked estimate.
    VelocityExceeded { limit: i64, window_ms: i64, current: i64, cooldown_ms: i64 },
    /// The breaker closed after its cooldown (figures of the configuration that tripped it).
    VelocityRecovered { limit: i64, window_ms: i64, cooldown_ms: i64 },
    /// A session would have gone over its limit. `session_spend` is the session's
    /// committed amount, before the blocked estimate.
    SessionLimitExceeded { session_id: String, session_spend: i64, session_limit: i64 },
    /// A call was blocked as a loop; `call_count` includes the blocked call.
    LoopDetected { detection_type: LoopDetectionType, call_count: u32, window_ms: i64, max_calls: u32 },
    /// The period rolled over.
    Reset { previous_spend: i64, new_period_start: i64, interval: ResetInterval },
}

impl LedgerEvent {
    /// The webhook event type this event is delivered as.
    pub const fn webhook_type(&self) -> &'static str {
        match self {
            Self::ThresholdCrossed { severity: Severity::Warning, .. } => "budget.threshold.warning",
            Self::ThresholdCrossed { severity: Severity::Critical, .. } => "budget.threshold.critical",
            Self::Exceeded { .. } => "budget.exceeded",
            Self::VelocityExceeded { .. } => "velocity.exceeded",
            Self::VelocityRecovered { .. } => "velocity.recovered",
            Self::SessionLimitExceeded { .. } => "session.limit_exceeded",
            Self::LoopDetected { .. } => "loop.detected",
            Self::Reset { .. } => "budget.reset",
        }
    }
}

/// A reservation was admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    /// The budget after the reservation.
    pub snapshot: BudgetSnapshot,
    /// What was reserved: the estimate, or less on an `exact_ceiling` budget that
    /// granted a request with a floor only the room it had left.
    pub granted: i64,
    /// Usually empty: a period roll, a breaker recovery or a warn-policy alert.
    pub events: Vec<LedgerEvent>,
}

/// Why a reservation was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DenialReason {
    #[error("budget exceeded")]
    BudgetExceeded,
    #[error("velocity limit exceeded; retry after {retry_after_ms} ms")]
    VelocityExceeded { retry_after_ms: i64 },
    #[error("session {session_id:?} has committed {session_spend} of its {session_limit} microdollars")]
    SessionLimitExceeded { session_id: String, session_spend: i64, session_limit: i64 },
    #[error("{detection_type} loop detected: {call_count} calls within {window_ms} ms (max {max_calls})")]
    LoopDetected { detection_type: LoopDetectionType, call_count: u32, window_ms: i64, max_calls: u32 },
}

impl DenialReason {
    /// A stable machine-readable name for logs and error bodies.
    pub const fn code(&self) -> &'static str {
        match self {
            Self::BudgetExceeded => "budget_exceeded",
            Self::VelocityExceeded { .. } => "velocity_exceeded",
            Self::SessionLimitExceeded { .. } => "session_limit_exceeded",
            Self::LoopDetected { .. } => "loop_detected",
        }
    }
}

/// A refused reservation: why, the budget as it stands, and what to announce.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Denial {
    pub reason: DenialReason,
    pub snapshot: BudgetSnapshot,
    pub events: Vec<LedgerEvent>,
}
