//! The budget ledger: the pure, synchronous spending rules of one budget entity.
//!
//! A budget actor owns one [`BudgetLedger`], feeds it requests and cost reports, persists
//! what changed and turns the returned [`LedgerEvent`]s into webhooks. Nothing here does
//! I/O or reads a clock: every call takes `now_ms` (UTC epoch milliseconds), so the rules
//! are deterministic and tested exhaustively below. Money is `i64` microdollars; every
//! sum saturates and no amount ever goes below zero (negative inputs count as zero).
//!
//! # Reserve, settle, release
//!
//! Before an upstream call the proxy [reserves](BudgetLedger::reserve) an estimate: it
//! is added to `reserved` and remembered under the caller's reservation id (with its
//! session). Afterwards it [settles](BudgetLedger::settle) the id to the actual cost:
//! the reservation leaves `reserved`, the actual cost joins `spend` (and the session's
//! spend and the velocity window), then thresholds are checked. A settle for an id the
//! ledger never saw (for example after the actor restarted and lost its in-memory
//! reservations) is counted as plain spend, so no cost is lost; a settle for an id that
//! was settled recently (the last 256) is a duplicate and does nothing, so no cost is
//! counted twice. [Release](BudgetLedger::release) drops a reservation without spend.
//! Cost reported without a reservation (SDK cost events) goes through
//! [`record_spend`](BudgetLedger::record_spend).
//!
//! `committed = spend + reserved` is what every limit is checked against.
//!
//! # Order of checks in `reserve`
//!
//! 1. The period rolls if it has elapsed (see below).
//! 2. Velocity breaker: while open, deny [`DenialReason::VelocityExceeded`] with the
//!    cooldown still remaining and no new event. The first check (or [`tick`]) at or after
//!    the end of the cooldown closes it and emits [`LedgerEvent::VelocityRecovered`] once.
//! 3. Loop detection.
//! 4. Session limit.
//! 5. Velocity limit.
//! 6. Budget policy.
//!
//! The first failing check decides. A denied request leaves spend, reservations,
//! session usage and loop counters as they were: only the breaker (tripped by step 5)
//! and the once-per-period alert bookkeeping change. Steps 2 to 5 apply whatever the
//! budget policy is — `warn` relaxes the budget ceiling only.
//!
//! # Budget policy and the finalization reserve
//!
//! The effective limit is `limit - finalization_reserve`. A request flagged `finalize`
//! (header `X-Service-Finalize: 1`) gets the full `limit` instead, but only when the
//! entity is already in its reserve zone (`committed >= limit - finalization_reserve`);
//! outside the zone the flag is ignored.
//!
//! * `strict_block` denies when `committed + estimate > effective limit`; a request that
//!   lands exactly on the limit is admitted.
//! * `soft_block` denies only when `committed >= effective limit`: the request that
//!   crosses the limit goes through, the ones after it are denied.
//! * `warn` never denies. The first request of a period with
//!   `committed + estimate > effective limit` emits [`LedgerEvent::Exceeded`] as an alert.
//!
//! Every budget denial emits [`LedgerEvent::Exceeded`], whose `spend` is the committed
//! amount the decision was made on (the figure of `X-Service-Budget-Spent`).
//!
//! # Thresholds
//!
//! Threshold `p` (1 to 100 percent) is crossed when settled spend reaches `p`% of the
//! limit, in integer math: `spend * 100 >= limit * p`. Reservations do not count. Each
//! threshold fires at most once per period; one settlement that crosses several emits one
//! [`LedgerEvent::ThresholdCrossed`] per threshold, ascending; `p >= 90` is critical.
//! Thresholds already passed when a ledger is built or reconfigured count as fired, so a
//! restart or a lowered limit never re-fires them, while a raised limit re-arms the
//! thresholds that are above spend again. Threshold lists are sorted and deduplicated,
//! and values outside 1..=100 are ignored (the API rejects them).
//!
//! # Velocity
//!
//! When configured, settled spend is kept in a sliding window of `window_ms`. The current
//! velocity is the settled spend in the window plus everything reserved. A request with
//! `current + estimate > velocity limit` trips the breaker: it opens for `cooldown_ms`,
//! [`LedgerEvent::VelocityExceeded`] is emitted and the request is denied with
//! `retry_after_ms = cooldown_ms`. The window is kept across period resets (it measures
//! rate, not period spend) and records spend only while velocity is configured.
//!
//! Windows coalesce amounts into buckets of 1/64 of their length, so memory stays
//! bounded whatever the traffic. A bucket carries the time of its latest amount, so an
//! amount may stay in the window up to one bucket longer than `window_ms`, never shorter:
//! the rounding only ever errs toward enforcement.
//!
//! # Session limit
//!
//! When configured, each session's committed amount (settled plus reserved for that
//! session) plus the estimate must not exceed `session_limit`, whatever the policy;
//! otherwise the request is denied with [`DenialReason::SessionLimitExceeded`] and an
//! event. Session spend is cleared when the period rolls or is reset. At most 10,000
//! sessions are tracked; beyond that the least recently used tenth is forgotten. Sessions
//! are tracked only while a session limit is configured.
//!
//! # Loop detection
//!
//! When `max_calls > 0` and the request carries a [`Fingerprint`], the ledger keeps the
//! times of admitted calls per `(provider, model, hash)` within `window_ms`:
//!
//! * exact: the fingerprint already has `max_calls` calls in the window;
//! * semantic (aggregate): the provider+model already has `max_calls` calls in the window
//!   and they come from at most `aggregate_max_keys` distinct fingerprints, this one
//!   included — an agent alternating between a few prompts escapes the exact rule.
//!
//! Either denies with [`DenialReason::LoopDetected`] and an event whose `call_count`
//! includes the blocked call. A call is recorded only when the whole reservation is
//! admitted. At most 1,024 fingerprints are kept per entity; when full, the one whose
//! last call is oldest is dropped (its calls still count toward the model's total, and it
//! still counts as a distinct key until they expire, so eviction never causes a block).
//!
//! # Periods
//!
//! With a reset interval, the period ends at the next UTC-aligned boundary (see
//! [`period`](super::period)). The first call at or after it rolls the period: it emits
//! [`LedgerEvent::Reset`] with the previous spend and the aligned start of the period
//! that contains `now`, then sets spend to zero, re-arms thresholds and the warn alert and
//! clears session spend. Reservations in flight stay reserved and settle into the new
//! period; velocity windows, the breaker and loop counters are kept. However many periods
//! were missed, one roll happens. A manual [`reset`](BudgetLedger::reset) does the same
//! without an event, and its period starts at `now` (unaligned). Without an interval
//! there is no period start and nothing rolls.
//!
//! # Reconfiguration
//!
//! [`reconfigure`](BudgetLedger::reconfigure) (a budget upsert) keeps spend, reservations
//! and the period start. Setting a reset interval where there was none starts a period at
//! `now`; removing it clears the period start. Thresholds are recomputed as described
//! above. Removing velocity closes an open breaker without an event (the operator lifted
//! the limit) and forgets the window; removing the session limit or loop detection
//! forgets their tracking. The warn alert is re-armed when committed spend no longer
//! exceeds the new effective limit.
//!
//! [`tick`]: BudgetLedger::tick

use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::period::{next_period_start, period_start};

/// Sessions tracked per entity before the least recently used ones are forgotten.
const MAX_TRACKED_SESSIONS: usize = 10_000;
/// Loop fingerprints tracked per entity before the stalest is dropped.
const MAX_LOOP_FINGERPRINTS: usize = 1_024;
/// Fingerprints dropped at once when the table is full (see `LoopTracker::make_room`).
const LOOP_EVICT_BATCH: usize = MAX_LOOP_FINGERPRINTS / 8;
/// How many settled reservation ids are remembered to make a repeated settle a no-op.
const RECENTLY_SETTLED_IDS: usize = 256;
/// Sliding windows are coalesced into buckets of `window / WINDOW_BUCKETS`.
const WINDOW_BUCKETS: i64 = 64;

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
            loop_detection: LoopConfig::default(),
        }
    }

    /// Sorts and deduplicates thresholds and drops values outside 1..=100, so the rules
    /// can walk them in ascending order.
    fn normalized(mut self) -> Self {
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

/// The spending state and rules of one budget entity. See the module documentation.
#[derive(Debug, Clone)]
pub struct BudgetLedger {
    /// Normalized (see [`BudgetConfig::normalized`]).
    config: BudgetConfig,
    spend: i64,
    reserved: i64,
    period_start: Option<i64>,
    /// Cached `next_period_start(interval, period_start)`, so the hot path never does
    /// calendar math. `None` exactly when there is no reset interval.
    next_roll_at: Option<i64>,
    /// Bit `p` set: threshold `p`% has fired (or was already passed) this period.
    fired: u128,
    /// The warn-policy `Exceeded` alert went out this period.
    exceeded_alerted: bool,
    reservations: HashMap<u64, Reservation>,
    recently_settled: RecentIds,
    velocity_window: SlidingWindow,
    breaker: Option<Breaker>,
    sessions: SessionTracker,
    loops: LoopTracker,
}

#[derive(Debug, Clone)]
struct Reservation {
    amount: i64,
    /// Shared with the session tracker's key: no allocation per reservation.
    session: Option<Arc<str>>,
}

#[derive(Debug, Clone, Copy)]
struct Breaker {
    open_until: i64,
    /// The configuration that tripped it, reported again on recovery.
    velocity: VelocityConfig,
}

impl BudgetLedger {
    /// Builds the ledger of a budget loaded with `spend` in the period that started at
    /// `period_start`. With a reset interval but no period start, a period starts at
    /// `now_ms`; without an interval the period start is dropped. Thresholds already
    /// passed by `spend` count as fired, and a warn budget already over its limit counts
    /// as alerted, so loading a budget never repeats an announcement.
    pub fn new(config: BudgetConfig, spend: i64, period_start: Option<i64>, now_ms: i64) -> Self {
        let config = config.normalized();
        let spend = spend.max(0);
        let period_start = config.reset_interval.map(|_| period_start.unwrap_or(now_ms));
        let mut ledger = Self {
            fired: passed_thresholds(spend, config.limit),
            exceeded_alerted: spend > effective_limit(&config),
            config,
            spend,
            reserved: 0,
            period_start,
            next_roll_at: None,
            reservations: HashMap::new(),
            recently_settled: RecentIds::default(),
            velocity_window: SlidingWindow::default(),
            breaker: None,
            sessions: SessionTracker::default(),
            loops: LoopTracker::default(),
        };
        ledger.next_roll_at = ledger.compute_next_roll();
        ledger
    }

    /// The normalized configuration in force.
    pub fn config(&self) -> &BudgetConfig {
        &self.config
    }

    /// Settled spend of the current period.
    pub fn spend(&self) -> i64 {
        self.spend
    }

    /// Sum of the estimates still in flight.
    pub fn reserved(&self) -> i64 {
        self.reserved
    }

    /// Start of the current period, `None` without a reset interval.
    pub fn period_start(&self) -> Option<i64> {
        self.period_start
    }

    /// Number of reservations in flight.
    pub fn open_reservations(&self) -> usize {
        self.reservations.len()
    }

    /// The budget's figures now.
    pub fn snapshot(&self) -> BudgetSnapshot {
        BudgetSnapshot {
            limit: self.config.limit,
            spend: self.spend,
            reserved: self.reserved,
            remaining: self.config.limit.saturating_sub(self.spend).saturating_sub(self.reserved),
            finalization_reserve: self.config.finalization_reserve.max(0),
            policy: self.config.policy,
            reset_interval: self.config.reset_interval,
            period_start: self.period_start,
            breaker_open_until: self.breaker.map(|breaker| breaker.open_until),
        }
    }

    /// Applies an upserted budget row, keeping spend, reservations and the period.
    pub fn reconfigure(&mut self, config: BudgetConfig, now_ms: i64) {
        let config = config.normalized();
        let had_interval = self.config.reset_interval.is_some();
        self.config = config;

        self.period_start = match (had_interval, self.config.reset_interval) {
            (_, None) => None,
            (false, Some(_)) => Some(now_ms),
            (true, Some(_)) => Some(self.period_start.unwrap_or(now_ms)),
        };
        self.next_roll_at = self.compute_next_roll();

        self.fired = passed_thresholds(self.spend, self.config.limit);
        if self.committed() <= effective_limit(&self.config) {
            self.exceeded_alerted = false;
        }
        if self.config.velocity.is_none() {
            self.breaker = None;
            self.velocity_window.clear();
        }
        if self.config.session_limit.is_none() {
            self.sessions.clear();
        }
        if !self.config.loop_detection.is_enabled() {
            self.loops.clear();
        }
    }

    /// Decides whether a call may go ahead and, if so, holds its estimate. See the module
    /// documentation for the order of checks. A denial changes no spend, reservation,
    /// session or loop state.
    #[expect(
        clippy::result_large_err,
        reason = "a denial is the cold path and the actor consumes it at once; \
                  boxing would only add an allocation to every refused request"
    )]
    pub fn reserve(&mut self, request: &ReserveRequest<'_>, now_ms: i64) -> Result<Admission, Denial> {
        let mut events = Vec::new();
        events.extend(self.roll_period(now_ms));
        let estimate = request.estimate.max(0);

        if let Some(breaker) = self.breaker {
            if now_ms < breaker.open_until {
                let retry_after_ms = breaker.open_until - now_ms;
                return Err(self.deny(DenialReason::VelocityExceeded { retry_after_ms }, events));
            }
            events.push(self.close_breaker(breaker));
        }

        let loop_config = self.config.loop_detection;
        let fingerprint = request.fingerprint.filter(|_| loop_config.is_enabled());
        if let Some(fingerprint) = fingerprint {
            if let Some((detection_type, call_count)) = self.loops.check(fingerprint, loop_config, now_ms) {
                let LoopConfig { max_calls, window_ms, .. } = loop_config;
                events.push(LedgerEvent::LoopDetected { detection_type, call_count, window_ms, max_calls });
                let reason = DenialReason::LoopDetected { detection_type, call_count, window_ms, max_calls };
                return Err(self.deny(reason, events));
            }
        }

        let session = self.config.session_limit.zip(request.session_id);
        if let Some((session_limit, session_id)) = session {
            let session_spend = self.sessions.committed(session_id);
            if session_spend.saturating_add(estimate) > session_limit {
                let session_id = session_id.to_owned();
                events.push(LedgerEvent::SessionLimitExceeded {
                    session_id: session_id.clone(),
                    session_spend,
                    session_limit,
                });
                let reason = DenialReason::SessionLimitExceeded { session_id, session_spend, session_limit };
                return Err(self.deny(reason, events));
            }
        }

        if let Some(velocity) = self.config.velocity {
            self.velocity_window.prune(now_ms, velocity.window_ms);
            let current = self.velocity_window.total.saturating_add(self.reserved);
            if current.saturating_add(estimate) > velocity.limit {
                let cooldown_ms = velocity.cooldown_ms.max(0);
                self.breaker = Some(Breaker { open_until: now_ms.saturating_add(cooldown_ms), velocity });
                events.push(LedgerEvent::VelocityExceeded {
                    limit: velocity.limit,
                    window_ms: velocity.window_ms,
                    current,
                    cooldown_ms: velocity.cooldown_ms,
                });
                return Err(self.deny(DenialReason::VelocityExceeded { retry_after_ms: cooldown_ms }, events));
            }
        }

        let committed = self.committed();
        let limit = self.limit_for(committed, request.finalize);
        let over = committed.saturating_add(estimate) > limit;
        let exceeded = LedgerEvent::Exceeded { limit: self.config.limit, spend: committed, estimate };
        match self.config.policy {
            Policy::StrictBlock if over => {
                events.push(exceeded);
                return Err(self.deny(DenialReason::BudgetExceeded, events));
            }
            Policy::SoftBlock if committed >= limit => {
                events.push(exceeded);
                return Err(self.deny(DenialReason::BudgetExceeded, events));
            }
            Policy::Warn if over && !self.exceeded_alerted => {
                self.exceeded_alerted = true;
                events.push(exceeded);
            }
            Policy::StrictBlock | Policy::SoftBlock | Policy::Warn => {}
        }

        let session = session.map(|(_, session_id)| self.sessions.reserve(session_id, estimate));
        let reservation = Reservation { amount: estimate, session };
        if let Some(replaced) = self.reservations.insert(request.reservation_id, reservation) {
            tracing::warn!(
                reservation_id = request.reservation_id,
                "reservation id reused while still open; the earlier reservation was released"
            );
            self.unreserve(&replaced);
        }
        self.reserved = self.reserved.saturating_add(estimate);
        if let Some(fingerprint) = fingerprint {
            self.loops.record(fingerprint, loop_config, now_ms);
        }
        Ok(Admission { snapshot: self.snapshot(), events })
    }

    /// Settles a reservation to the actual cost: the estimate leaves `reserved`, the
    /// actual cost joins spend, session spend and the velocity window, and thresholds are
    /// checked. An unknown id is counted as plain spend; an id settled recently is a
    /// duplicate and changes nothing.
    pub fn settle(&mut self, reservation_id: u64, actual: i64, now_ms: i64) -> Vec<LedgerEvent> {
        let mut events = Vec::new();
        events.extend(self.roll_period(now_ms));
        let actual = actual.max(0);
        match self.reservations.remove(&reservation_id) {
            Some(reservation) => {
                self.reserved = self.reserved.saturating_sub(reservation.amount).max(0);
                if let Some(session) = &reservation.session {
                    if self.config.session_limit.is_some() {
                        self.sessions.settle(session, reservation.amount, actual);
                    }
                }
                self.recently_settled.insert(reservation_id);
                self.add_spend(actual, now_ms, &mut events);
            }
            None if self.recently_settled.contains(reservation_id) => {}
            None => self.add_spend(actual, now_ms, &mut events),
        }
        events
    }

    /// Drops a reservation without spend (the call never happened). Returns whether the
    /// id was open.
    pub fn release(&mut self, reservation_id: u64) -> bool {
        match self.reservations.remove(&reservation_id) {
            Some(reservation) => {
                self.unreserve(&reservation);
                true
            }
            None => false,
        }
    }

    /// Counts cost reported without a reservation (SDK and API cost events).
    pub fn record_spend(&mut self, amount: i64, session_id: Option<&str>, now_ms: i64) -> Vec<LedgerEvent> {
        let mut events = Vec::new();
        events.extend(self.roll_period(now_ms));
        let amount = amount.max(0);
        if let (Some(_), Some(session_id)) = (self.config.session_limit, session_id) {
            self.sessions.record(session_id, amount);
        }
        self.add_spend(amount, now_ms, &mut events);
        events
    }

    /// Starts a new period if the current one has elapsed, returning the `Reset` event.
    pub fn roll_period(&mut self, now_ms: i64) -> Option<LedgerEvent> {
        let next_roll_at = self.next_roll_at?;
        let interval = self.config.reset_interval?;
        if now_ms < next_roll_at {
            return None;
        }
        let previous_spend = self.spend;
        let new_period_start = period_start(interval, now_ms);
        self.start_period(Some(new_period_start));
        Some(LedgerEvent::Reset { previous_spend, new_period_start, interval })
    }

    /// Manual reset (`POST /api/budgets/:id`): spend 0 and a new period starting now.
    /// Thresholds, the warn alert and session spend are re-armed; reservations in flight,
    /// velocity and loop state are kept.
    pub fn reset(&mut self, now_ms: i64) {
        let start = self.config.reset_interval.map(|_| now_ms);
        self.start_period(start);
    }

    /// Housekeeping for the actor's timer: rolls an elapsed period, closes a breaker whose
    /// cooldown is over (`VelocityRecovered`), and forgets expired window entries.
    pub fn tick(&mut self, now_ms: i64) -> Vec<LedgerEvent> {
        let mut events = Vec::new();
        events.extend(self.roll_period(now_ms));
        if let Some(breaker) = self.breaker {
            if now_ms >= breaker.open_until {
                events.push(self.close_breaker(breaker));
            }
        }
        if let Some(velocity) = self.config.velocity {
            self.velocity_window.prune(now_ms, velocity.window_ms);
        }
        if self.config.loop_detection.is_enabled() {
            self.loops.prune(now_ms, self.config.loop_detection.window_ms);
        }
        events
    }

    /// Adopts spend and period start as storage holds them (the budget row changed
    /// elsewhere: an upsert, a manual reset, other writers), keeping reservations in
    /// flight, velocity and loop state. Call it after [`reconfigure`](Self::reconfigure)
    /// with the same row.
    ///
    /// * A stored period that ended where the ledger's began (or earlier) means storage has
    ///   not caught up with a roll this ledger made: spend and period stay as they are.
    /// * Another period start, or lower spend, means the budget was reset
    ///   meanwhile: everything that is once per period re-arms, as a reset does, then the
    ///   stored spend applies.
    /// * Otherwise the stored spend applies as is.
    ///
    /// Thresholds already passed by the adopted spend count as fired and a warn budget
    /// already over its limit counts as alerted, as when a ledger is built, so a reload
    /// never repeats an announcement for spend another writer already counted.
    pub fn restore_spend(&mut self, spend: i64, period_start: Option<i64>, now_ms: i64) {
        let spend = spend.max(0);
        let period_start =
            self.config.reset_interval.map(|_| period_start.or(self.period_start).unwrap_or(now_ms));
        if let (Some(interval), Some(stored), Some(current)) =
            (self.config.reset_interval, period_start, self.period_start)
        {
            if next_period_start(interval, stored) <= current {
                return;
            }
        }
        if period_start != self.period_start || spend < self.spend {
            self.start_period(period_start);
        }
        self.spend = spend;
        self.fired |= passed_thresholds(spend, self.config.limit);
        if spend > effective_limit(&self.config) {
            self.exceeded_alerted = true;
        }
    }

    /// The velocity window and breaker now, `None` when the budget has no velocity limit.
    pub fn velocity_status(&self, now_ms: i64) -> Option<VelocityStatus> {
        let velocity = self.config.velocity?;
        let window_spend = self.velocity_window.total_within(now_ms, velocity.window_ms);
        Some(VelocityStatus {
            limit: velocity.limit,
            window_ms: velocity.window_ms,
            cooldown_ms: velocity.cooldown_ms,
            window_spend,
            current: window_spend.saturating_add(self.reserved),
            breaker_open_until: self
                .breaker
                .map(|breaker| breaker.open_until)
                .filter(|&until| until > now_ms),
        })
    }

    fn committed(&self) -> i64 {
        self.spend.saturating_add(self.reserved)
    }

    /// The limit a request is checked against: the full limit for a finalize request in
    /// the reserve zone, otherwise the limit minus the finalization reserve.
    fn limit_for(&self, committed: i64, finalize: bool) -> i64 {
        let reserve_floor = effective_limit(&self.config);
        if finalize && committed >= reserve_floor {
            self.config.limit
        } else {
            reserve_floor
        }
    }

    fn deny(&self, reason: DenialReason, events: Vec<LedgerEvent>) -> Denial {
        Denial { reason, snapshot: self.snapshot(), events }
    }

    fn close_breaker(&mut self, breaker: Breaker) -> LedgerEvent {
        self.breaker = None;
        let VelocityConfig { limit, window_ms, cooldown_ms } = breaker.velocity;
        LedgerEvent::VelocityRecovered { limit, window_ms, cooldown_ms }
    }

    fn unreserve(&mut self, reservation: &Reservation) {
        self.reserved = self.reserved.saturating_sub(reservation.amount).max(0);
        if let Some(session) = &reservation.session {
            self.sessions.release(session, reservation.amount);
        }
    }

    fn add_spend(&mut self, amount: i64, now_ms: i64, events: &mut Vec<LedgerEvent>) {
        self.spend = self.spend.saturating_add(amount);
        if let Some(velocity) = self.config.velocity {
            self.velocity_window.add(now_ms, amount, velocity.window_ms);
        }
        let limit = self.config.limit;
        for &percent in &self.config.thresholds {
            let bit = 1u128 << percent;
            if self.fired & bit == 0 && threshold_reached(self.spend, limit, percent) {
                self.fired |= bit;
                events.push(LedgerEvent::ThresholdCrossed {
                    percent,
                    severity: Severity::of(percent),
                    spend: self.spend,
                    limit,
                    remaining: limit.saturating_sub(self.spend).max(0),
                });
            }
        }
    }

    /// Zero spend and re-arm everything that is once per period. `start` is `None` when
    /// the budget has no reset interval.
    fn start_period(&mut self, start: Option<i64>) {
        self.spend = 0;
        self.period_start = start;
        self.next_roll_at = self.compute_next_roll();
        self.fired = passed_thresholds(0, self.config.limit);
        self.exceeded_alerted = false;
        self.sessions.start_period();
    }

    fn compute_next_roll(&self) -> Option<i64> {
        let interval = self.config.reset_interval?;
        self.period_start.map(|start| next_period_start(interval, start))
    }
}

/// `limit - finalization_reserve`: the ceiling for everything but finalize requests.
fn effective_limit(config: &BudgetConfig) -> i64 {
    config.limit.saturating_sub(config.finalization_reserve.max(0))
}

/// `spend * 100 >= limit * percent`, without overflow.
fn threshold_reached(spend: i64, limit: i64, percent: u8) -> bool {
    i128::from(spend) * 100 >= i128::from(limit) * i128::from(percent)
}

/// Bits of every percentage 1..=100 that `spend` has reached.
fn passed_thresholds(spend: i64, limit: i64) -> u128 {
    (1..=100u8).filter(|&percent| threshold_reached(spend, limit, percent)).fold(0, |bits, p| bits | 1 << p)
}

/// A bounded memory of settled reservation ids, oldest forgotten first.
#[derive(Debug, Clone, Default)]
struct RecentIds {
    ids: HashSet<u64>,
    order: VecDeque<u64>,
}

impl RecentIds {
    fn insert(&mut self, id: u64) {
        if self.ids.insert(id) {
            self.order.push_back(id);
            if self.order.len() > RECENTLY_SETTLED_IDS {
                if let Some(oldest) = self.order.pop_front() {
                    self.ids.remove(&oldest);
                }
            }
        }
    }

    fn contains(&self, id: u64) -> bool {
        self.ids.contains(&id)
    }
}

/// Amounts over a sliding time window, coalesced into at most about `WINDOW_BUCKETS`
/// entries per window. Each entry carries the time of its latest amount, so coalescing
/// can only keep an amount in the window longer, never drop it early.
#[derive(Debug, Clone, Default)]
struct SlidingWindow {
    /// `(time of the latest amount, sum)`, oldest first.
    entries: VecDeque<(i64, i64)>,
    /// Sum of `entries`.
    total: i64,
}

impl SlidingWindow {
    /// Forgets entries that are `window_ms` or more old.
    fn prune(&mut self, now_ms: i64, window_ms: i64) {
        let horizon = now_ms.saturating_sub(window_ms);
        while let Some(&(at, amount)) = self.entries.front() {
            if at > horizon {
                break;
            }
            self.entries.pop_front();
            self.total = self.total.saturating_sub(amount);
        }
        if self.entries.is_empty() {
            // A saturated sum cannot be unwound exactly; an empty window is exactly zero.
            self.total = 0;
        }
    }

    fn add(&mut self, now_ms: i64, amount: i64, window_ms: i64) {
        self.prune(now_ms, window_ms);
        self.total = self.total.saturating_add(amount);
        let width = (window_ms / WINDOW_BUCKETS).max(1);
        if let Some(newest) = self.entries.back_mut() {
            // Same bucket, or the clock stepped back: fold into the newest entry.
            if now_ms.div_euclid(width) <= newest.0.div_euclid(width) {
                newest.0 = newest.0.max(now_ms);
                newest.1 = newest.1.saturating_add(amount);
                return;
            }
        }
        self.entries.push_back((now_ms, amount));
    }

    fn newest(&self) -> Option<i64> {
        self.entries.back().map(|&(at, _)| at)
    }

    /// The sum of the entries younger than `window_ms`, without pruning.
    fn total_within(&self, now_ms: i64, window_ms: i64) -> i64 {
        let horizon = now_ms.saturating_sub(window_ms);
        self.entries
            .iter()
            .filter(|&&(at, _)| at > horizon)
            .fold(0, |sum, &(_, amount)| sum.saturating_add(amount))
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.total = 0;
    }
}

/// Spend and reservations per session, bounded by forgetting the least recently used.
#[derive(Debug, Clone, Default)]
struct SessionTracker {
    by_id: HashMap<Arc<str>, SessionUsage>,
    /// Logical clock for least-recently-used eviction.
    clock: u64,
}

#[derive(Debug, Clone)]
struct SessionUsage {
    /// The map key again, so an update can hand it out without a second lookup.
    id: Arc<str>,
    spend: i64,
    reserved: i64,
    last_used: u64,
}

impl SessionTracker {
    fn committed(&self, session_id: &str) -> i64 {
        self.by_id.get(session_id).map_or(0, |usage| usage.spend.saturating_add(usage.reserved))
    }

    /// Adds a reservation and returns the shared session key to store with it.
    fn reserve(&mut self, session_id: &str, amount: i64) -> Arc<str> {
        self.update(session_id, |usage| usage.reserved = usage.reserved.saturating_add(amount))
    }

    fn settle(&mut self, session_id: &str, reserved: i64, actual: i64) {
        self.update(session_id, |usage| {
            usage.reserved = usage.reserved.saturating_sub(reserved).max(0);
            usage.spend = usage.spend.saturating_add(actual);
        });
    }

    fn record(&mut self, session_id: &str, amount: i64) {
        self.update(session_id, |usage| usage.spend = usage.spend.saturating_add(amount));
    }

    /// Returns a reservation. A session forgotten meanwhile is not brought back for it.
    fn release(&mut self, session_id: &str, amount: i64) {
        if let Some(usage) = self.by_id.get_mut(session_id) {
            usage.reserved = usage.reserved.saturating_sub(amount).max(0);
        }
    }

    /// Session spend belongs to the period; sessions with reservations in flight stay.
    fn start_period(&mut self) {
        self.by_id.retain(|_, usage| {
            usage.spend = 0;
            usage.reserved > 0
        });
    }

    fn clear(&mut self) {
        self.by_id.clear();
    }

    fn update(&mut self, session_id: &str, apply: impl FnOnce(&mut SessionUsage)) -> Arc<str> {
        self.clock += 1;
        if let Some(usage) = self.by_id.get_mut(session_id) {
            usage.last_used = self.clock;
            apply(usage);
            return Arc::clone(&usage.id);
        }
        if self.by_id.len() >= MAX_TRACKED_SESSIONS {
            self.evict_least_recent();
        }
        let id: Arc<str> = Arc::from(session_id);
        let mut usage = SessionUsage { id: Arc::clone(&id), spend: 0, reserved: 0, last_used: self.clock };
        apply(&mut usage);
        self.by_id.insert(Arc::clone(&id), usage);
        id
    }

    /// Forgets the least recently used tenth at once, so a stream of new sessions costs
    /// one scan per thousand sessions rather than one per session.
    fn evict_least_recent(&mut self) {
        let keep = MAX_TRACKED_SESSIONS - MAX_TRACKED_SESSIONS / 10;
        let Some(evict) = self.by_id.len().checked_sub(keep).filter(|&n| n > 0) else {
            return;
        };
        let mut last_used: Vec<u64> = self.by_id.values().map(|usage| usage.last_used).collect();
        let (_, &mut cutoff, _) = last_used.select_nth_unstable(evict - 1);
        // INVARIANT: `last_used` values are unique (one clock tick per update), so exactly
        // `evict` sessions are at or below the cutoff.
        self.by_id.retain(|_, usage| usage.last_used > cutoff);
    }
}

/// Recent admitted calls per fingerprint, grouped by provider and model.
#[derive(Debug, Clone, Default)]
struct LoopTracker {
    providers: HashMap<String, HashMap<String, ModelCalls>>,
    /// Number of fingerprint windows across all models.
    fingerprints: usize,
}

#[derive(Debug, Clone, Default)]
struct ModelCalls {
    /// Every admitted call of the model, whatever its fingerprint.
    all: SlidingWindow,
    by_hash: HashMap<u64, SlidingWindow>,
    /// One unit per fingerprint dropped for space, at the time of its last call: they
    /// still count as distinct keys until that call leaves the window.
    evicted: SlidingWindow,
}

impl LoopTracker {
    /// Whether admitting `fingerprint` now would be a loop, with the rule and the call
    /// count including this call.
    fn check(
        &mut self,
        fingerprint: Fingerprint<'_>,
        config: LoopConfig,
        now_ms: i64,
    ) -> Option<(LoopDetectionType, u32)> {
        let window_ms = config.window_ms;
        let max_calls = i64::from(config.max_calls);
        let calls = self.providers.get_mut(fingerprint.provider)?.get_mut(fingerprint.model)?;

        let exact = match calls.by_hash.get_mut(&fingerprint.hash) {
            Some(window) => {
                window.prune(now_ms, window_ms);
                window.total
            }
            None => 0,
        };
        if exact >= max_calls {
            return Some((LoopDetectionType::Exact, call_count(exact)));
        }

        calls.all.prune(now_ms, window_ms);
        if calls.all.total < max_calls {
            return None;
        }
        calls.evicted.prune(now_ms, window_ms);
        let max_keys = i64::from(config.aggregate_max_keys);
        // This fingerprint counts even before its first call.
        let mut distinct = i64::from(exact == 0).saturating_add(calls.evicted.total);
        for window in calls.by_hash.values_mut() {
            if distinct > max_keys {
                return None;
            }
            window.prune(now_ms, window_ms);
            distinct += i64::from(window.total > 0);
        }
        (distinct <= max_keys).then(|| (LoopDetectionType::Semantic, call_count(calls.all.total)))
    }

    /// Remembers an admitted call.
    fn record(&mut self, fingerprint: Fingerprint<'_>, config: LoopConfig, now_ms: i64) {
        let known = self
            .providers
            .get(fingerprint.provider)
            .and_then(|models| models.get(fingerprint.model))
            .is_some_and(|calls| calls.by_hash.contains_key(&fingerprint.hash));
        if !known && self.fingerprints >= MAX_LOOP_FINGERPRINTS {
            self.make_room(now_ms, config.window_ms);
        }

        if !self.providers.contains_key(fingerprint.provider) {
            self.providers.insert(fingerprint.provider.to_owned(), HashMap::new());
        }
        let Some(models) = self.providers.get_mut(fingerprint.provider) else {
            return;
        };
        if !models.contains_key(fingerprint.model) {
            models.insert(fingerprint.model.to_owned(), ModelCalls::default());
        }
        let Some(calls) = models.get_mut(fingerprint.model) else {
            return;
        };
        calls.all.add(now_ms, 1, config.window_ms);
        let window = calls.by_hash.entry(fingerprint.hash).or_insert_with(|| {
            self.fingerprints += 1;
            SlidingWindow::default()
        });
        window.add(now_ms, 1, config.window_ms);
    }

    /// Forgets expired calls, empty fingerprints and idle models.
    fn prune(&mut self, now_ms: i64, window_ms: i64) {
        let mut fingerprints = 0;
        self.providers.retain(|_, models| {
            models.retain(|_, calls| {
                calls.all.prune(now_ms, window_ms);
                calls.evicted.prune(now_ms, window_ms);
                calls.by_hash.retain(|_, window| {
                    window.prune(now_ms, window_ms);
                    window.total > 0
                });
                fingerprints += calls.by_hash.len();
                calls.all.total > 0 || !calls.by_hash.is_empty()
            });
            !models.is_empty()
        });
        self.fingerprints = fingerprints;
    }

    /// Makes space for more fingerprints: first by pruning, then by dropping the
    /// [`LOOP_EVICT_BATCH`] whose last calls are oldest, in one pass. Evicting a batch
    /// at a time keeps a budget that sees many distinct calls from paying a walk of the
    /// whole table on every new one (the cost is O(n) once per batch, not per call).
    fn make_room(&mut self, now_ms: i64, window_ms: i64) {
        self.prune(now_ms, window_ms);
        if self.fingerprints < MAX_LOOP_FINGERPRINTS {
            return;
        }
        let mut all: Vec<(i64, &String, &String, u64)> = Vec::with_capacity(self.fingerprints);
        for (provider, models) in &self.providers {
            for (model, calls) in models {
                for (&hash, window) in &calls.by_hash {
                    all.push((window.newest().unwrap_or(i64::MIN), provider, model, hash));
                }
            }
        }
        let batch = LOOP_EVICT_BATCH.min(all.len());
        if batch == 0 {
            return;
        }
        all.select_nth_unstable_by_key(batch - 1, |e| e.0);
        let stalest: Vec<(i64, String, String, u64)> =
            all[..batch].iter().map(|(at, p, m, h)| (*at, (*p).clone(), (*m).clone(), *h)).collect();
        for (last_call, provider, model, hash) in stalest {
            if let Some(calls) = self.providers.get_mut(&provider).and_then(|models| models.get_mut(&model)) {
                if calls.by_hash.remove(&hash).is_some() {
                    calls.evicted.add(last_call, 1, window_ms);
                    self.fingerprints -= 1;
                }
            }
        }
    }

    fn clear(&mut self) {
        self.providers.clear();
        self.fingerprints = 0;
    }
}

/// Calls in the window plus the one being blocked, as reported in events.
fn call_count(calls_in_window: i64) -> u32 {
    u32::try_from(calls_in_window.saturating_add(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// 2026-01-01T00:00:00Z, a Thursday.
    const T0: i64 = 1_767_225_600_000;
    /// 2026-02-01T00:00:00Z.
    const FEB_1: i64 = 1_769_904_000_000;
    const SECOND: i64 = 1_000;
    const MINUTE: i64 = 60 * SECOND;
    const HOUR: i64 = 60 * MINUTE;
    const DAY: i64 = 24 * HOUR;

    fn config(limit: i64) -> BudgetConfig {
        BudgetConfig::new(limit)
    }

    fn with_policy(limit: i64, policy: Policy) -> BudgetConfig {
        BudgetConfig { policy, ..config(limit) }
    }

    fn with_thresholds(limit: i64, thresholds: &[u8]) -> BudgetConfig {
        BudgetConfig { thresholds: thresholds.to_vec(), ..config(limit) }
    }

    fn daily(limit: i64) -> BudgetConfig {
        BudgetConfig { reset_interval: Some(ResetInterval::Daily), ..config(limit) }
    }

    /// A large budget whose velocity is limited to `limit` per minute, cooldown 30 s.
    fn velocity(limit: i64) -> BudgetConfig {
        BudgetConfig {
            velocity: Some(VelocityConfig { limit, window_ms: MINUTE, cooldown_ms: 30 * SECOND }),
            ..config(1_000_000)
        }
    }

    /// A large budget with a per-session limit.
    fn sessions(session_limit: i64) -> BudgetConfig {
        BudgetConfig { session_limit: Some(session_limit), ..config(1_000_000) }
    }

    /// A budget of 1,000 holding back 100 for finalization.
    fn reserve_zone(policy: Policy) -> BudgetConfig {
        BudgetConfig { finalization_reserve: 100, ..with_policy(1_000, policy) }
    }

    /// A large budget with loop detection over a one-minute window.
    fn loops(max_calls: u32, aggregate_max_keys: u32) -> BudgetConfig {
        BudgetConfig {
            loop_detection: LoopConfig { max_calls, window_ms: MINUTE, aggregate_max_keys },
            ..config(1_000_000_000)
        }
    }

    fn ledger(config: BudgetConfig) -> BudgetLedger {
        BudgetLedger::new(config, 0, Some(T0), T0)
    }

    fn req(reservation_id: u64, estimate: i64) -> ReserveRequest<'static> {
        ReserveRequest { reservation_id, estimate, session_id: None, finalize: false, fingerprint: None }
    }

    fn in_session(reservation_id: u64, estimate: i64, session: &str) -> ReserveRequest<'_> {
        ReserveRequest { session_id: Some(session), ..req(reservation_id, estimate) }
    }

    fn finalizing(reservation_id: u64, estimate: i64) -> ReserveRequest<'static> {
        ReserveRequest { finalize: true, ..req(reservation_id, estimate) }
    }

    fn call_to(reservation_id: u64, model: &str, hash: u64) -> ReserveRequest<'_> {
        let fingerprint = Fingerprint { provider: "openai", model, hash };
        ReserveRequest { fingerprint: Some(fingerprint), ..req(reservation_id, 1) }
    }

    fn call(reservation_id: u64, hash: u64) -> ReserveRequest<'static> {
        call_to(reservation_id, "gpt-4o", hash)
    }

    fn admit(ledger: &mut BudgetLedger, request: ReserveRequest<'_>, now_ms: i64) -> Admission {
        ledger.reserve(&request, now_ms).expect("request should be admitted")
    }

    fn deny(ledger: &mut BudgetLedger, request: ReserveRequest<'_>, now_ms: i64) -> Denial {
        ledger.reserve(&request, now_ms).expect_err("request should be denied")
    }

    fn crossed(percent: u8, spend: i64, limit: i64) -> LedgerEvent {
        LedgerEvent::ThresholdCrossed {
            percent,
            severity: Severity::of(percent),
            spend,
            limit,
            remaining: (limit - spend).max(0),
        }
    }

    // ----- strict_block -----

    #[test]
    fn strict_admits_a_request_below_the_limit() {
        let mut ledger = ledger(config(1_000));
        let admission = admit(&mut ledger, req(1, 400), T0);
        assert_eq!(admission.snapshot.reserved, 400);
        assert_eq!(admission.snapshot.remaining, 600);
        assert!(admission.events.is_empty());
    }

    #[test]
    fn strict_admits_a_request_landing_exactly_on_the_limit() {
        let mut ledger = ledger(config(1_000));
        ledger.record_spend(600, None, T0);
        let admission = admit(&mut ledger, req(1, 400), T0);
        assert_eq!(admission.snapshot.remaining, 0);
    }

    #[test]
    fn strict_denies_one_microdollar_over_the_limit_with_an_exceeded_event() {
        let mut ledger = ledger(config(1_000));
        ledger.record_spend(600, None, T0);
        let denial = deny(&mut ledger, req(1, 401), T0);
        assert_eq!(denial.reason, DenialReason::BudgetExceeded);
        assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 600, estimate: 401 }]);
        assert_eq!(denial.snapshot.reserved, 0);
    }

    #[test]
    fn strict_counts_reservations_in_flight_toward_the_limit() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 700), T0);
        let denial = deny(&mut ledger, req(2, 301), T0);
        assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 700, estimate: 301 }]);
        admit(&mut ledger, req(3, 300), T0);
        assert_eq!(ledger.reserved(), 1_000);
    }

    #[test]
    fn strict_emits_an_exceeded_event_on_every_denial() {
        let mut ledger = ledger(config(1_000));
        ledger.record_spend(1_000, None, T0);
        assert_eq!(deny(&mut ledger, req(1, 1), T0).events.len(), 1);
        assert_eq!(deny(&mut ledger, req(2, 1), T0).events.len(), 1);
    }

    // ----- soft_block -----

    #[test]
    fn soft_block_admits_the_request_that_crosses_the_limit() {
        let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
        ledger.record_spend(900, None, T0);
        let admission = admit(&mut ledger, req(1, 500), T0);
        assert!(admission.events.is_empty());
        assert_eq!(admission.snapshot.remaining, -400);
    }

    #[test]
    fn soft_block_denies_the_requests_after_the_crossing() {
        let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
        ledger.record_spend(900, None, T0);
        admit(&mut ledger, req(1, 500), T0);
        let denial = deny(&mut ledger, req(2, 1), T0);
        assert_eq!(denial.reason, DenialReason::BudgetExceeded);
        assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 1_400, estimate: 1 }]);
    }

    #[test]
    fn soft_block_denies_when_committed_equals_the_limit() {
        let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
        ledger.record_spend(1_000, None, T0);
        deny(&mut ledger, req(1, 1), T0);
    }

    #[test]
    fn soft_block_admits_any_estimate_one_microdollar_below_the_limit() {
        let mut ledger = ledger(with_policy(1_000, Policy::SoftBlock));
        ledger.record_spend(999, None, T0);
        admit(&mut ledger, req(1, 1_000_000), T0);
    }

    // ----- warn -----

    #[test]
    fn warn_below_the_limit_emits_nothing() {
        let mut ledger = ledger(with_policy(1_000, Policy::Warn));
        let admission = admit(&mut ledger, req(1, 1_000), T0);
        assert!(admission.events.is_empty());
    }

    #[test]
    fn warn_never_denies_and_alerts_once_per_period() {
        let mut ledger = ledger(with_policy(1_000, Policy::Warn));
        assert!(admit(&mut ledger, req(1, 900), T0).events.is_empty());
        let crossing = admit(&mut ledger, req(2, 200), T0);
        assert_eq!(crossing.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 900, estimate: 200 }]);
        assert!(admit(&mut ledger, req(3, 5_000), T0).events.is_empty());
        ledger.settle(1, 900, T0);
        ledger.settle(2, 200, T0);
        ledger.settle(3, 5_000, T0);
        assert!(admit(&mut ledger, req(4, 1), T0).events.is_empty());
        assert_eq!(ledger.spend(), 6_100);
    }

    #[test]
    fn warn_alert_is_rearmed_by_a_period_roll() {
        let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..daily(1_000) });
        assert_eq!(admit(&mut ledger, req(1, 2_000), T0).events.len(), 1);
        let next_day = admit(&mut ledger, req(2, 2_000), T0 + DAY);
        assert_eq!(
            next_day.events,
            vec![
                LedgerEvent::Reset {
                    previous_spend: 0,
                    new_period_start: T0 + DAY,
                    interval: ResetInterval::Daily
                },
                LedgerEvent::Exceeded { limit: 1_000, spend: 2_000, estimate: 2_000 },
            ]
        );
    }

    #[test]
    fn warn_alert_is_rearmed_by_a_manual_reset() {
        let mut ledger = ledger(with_policy(1_000, Policy::Warn));
        ledger.record_spend(1_000, None, T0);
        assert_eq!(admit(&mut ledger, req(1, 1), T0).events.len(), 1);
        ledger.release(1);
        ledger.reset(T0);
        assert!(admit(&mut ledger, req(2, 1_000), T0).events.is_empty());
        assert_eq!(admit(&mut ledger, req(3, 1), T0).events.len(), 1);
    }

    #[test]
    fn a_loaded_warn_budget_already_over_its_limit_does_not_alert_again() {
        let mut ledger = BudgetLedger::new(with_policy(1_000, Policy::Warn), 1_500, None, T0);
        assert!(admit(&mut ledger, req(1, 1), T0).events.is_empty());
    }

    // ----- reserve, settle, release -----

    #[test]
    fn reserve_holds_the_estimate_under_its_id() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(7, 300), T0);
        assert_eq!(ledger.reserved(), 300);
        assert_eq!(ledger.spend(), 0);
        assert_eq!(ledger.open_reservations(), 1);
    }

    #[test]
    fn settle_lower_than_the_estimate_frees_the_difference() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 500), T0);
        assert!(ledger.settle(1, 200, T0).is_empty());
        assert_eq!((ledger.spend(), ledger.reserved()), (200, 0));
        assert_eq!(ledger.snapshot().remaining, 800);
    }

    #[test]
    fn settle_higher_than_the_estimate_charges_the_actual_cost() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 100), T0);
        ledger.settle(1, 300, T0);
        assert_eq!((ledger.spend(), ledger.reserved()), (300, 0));
    }

    #[test]
    fn settle_may_take_spend_past_a_strict_limit() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 1_000), T0);
        ledger.settle(1, 1_200, T0);
        assert_eq!(ledger.snapshot().remaining, -200);
        deny(&mut ledger, req(2, 0), T0);
    }

    #[test]
    fn settle_of_an_unknown_id_counts_as_spend() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 100), T0);
        ledger.settle(42, 250, T0);
        assert_eq!((ledger.spend(), ledger.reserved()), (250, 100));
    }

    #[test]
    fn settling_the_same_id_twice_is_a_no_op() {
        let mut ledger = ledger(with_thresholds(1_000, &[10]));
        admit(&mut ledger, req(1, 500), T0);
        assert_eq!(ledger.settle(1, 200, T0).len(), 1);
        assert!(ledger.settle(1, 200, T0).is_empty());
        assert_eq!((ledger.spend(), ledger.reserved()), (200, 0));
    }

    #[test]
    fn settled_ids_are_forgotten_after_enough_newer_settlements() {
        let mut ledger = ledger(with_policy(1_000_000, Policy::Warn));
        admit(&mut ledger, req(0, 1), T0);
        ledger.settle(0, 1, T0);
        for id in 1..=RECENTLY_SETTLED_IDS as u64 {
            admit(&mut ledger, req(id, 1), T0);
            ledger.settle(id, 1, T0);
        }
        let spend = ledger.spend();
        ledger.settle(0, 1, T0);
        assert_eq!(ledger.spend(), spend + 1);
    }

    #[test]
    fn a_reused_reservation_id_settles_normally() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 100), T0);
        ledger.settle(1, 100, T0);
        admit(&mut ledger, req(1, 100), T0);
        ledger.settle(1, 50, T0);
        assert_eq!((ledger.spend(), ledger.reserved()), (150, 0));
    }

    #[test]
    fn settle_after_release_still_counts_the_cost() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 100), T0);
        assert!(ledger.release(1));
        ledger.settle(1, 80, T0);
        assert_eq!((ledger.spend(), ledger.reserved()), (80, 0));
    }

    #[test]
    fn release_returns_the_estimate_without_spend() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 400), T0);
        assert!(ledger.release(1));
        assert_eq!((ledger.spend(), ledger.reserved(), ledger.open_reservations()), (0, 0, 0));
    }

    #[test]
    fn release_of_an_unknown_or_already_released_id_returns_false() {
        let mut ledger = ledger(config(1_000));
        assert!(!ledger.release(1));
        admit(&mut ledger, req(1, 400), T0);
        assert!(ledger.release(1));
        assert!(!ledger.release(1));
        assert_eq!(ledger.reserved(), 0);
    }

    #[test]
    fn reusing_an_open_reservation_id_replaces_the_earlier_reservation() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, 300), T0);
        admit(&mut ledger, req(1, 200), T0);
        assert_eq!((ledger.reserved(), ledger.open_reservations()), (200, 1));
    }

    #[test]
    fn negative_amounts_count_as_zero() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, req(1, -500), T0);
        assert_eq!(ledger.reserved(), 0);
        ledger.settle(1, -100, T0);
        ledger.record_spend(-7, None, T0);
        assert_eq!((ledger.spend(), ledger.reserved()), (0, 0));
    }

    #[test]
    fn amounts_saturate_instead_of_overflowing() {
        let mut ledger =
            ledger(BudgetConfig { thresholds: vec![50, 100], ..with_policy(i64::MAX, Policy::Warn) });
        let events = ledger.record_spend(i64::MAX, None, T0);
        assert_eq!(events.len(), 2);
        ledger.record_spend(1, None, T0);
        admit(&mut ledger, req(1, i64::MAX), T0);
        let snapshot = ledger.snapshot();
        assert_eq!((snapshot.spend, snapshot.reserved, snapshot.committed()), (i64::MAX, i64::MAX, i64::MAX));
        assert_eq!(snapshot.remaining, i64::MIN + 1);
    }

    // ----- thresholds -----

    #[test]
    fn threshold_fires_when_spend_reaches_it_exactly() {
        let mut ledger = ledger(with_thresholds(1_000, &[50]));
        assert!(ledger.record_spend(499, None, T0).is_empty());
        assert_eq!(ledger.record_spend(1, None, T0), vec![crossed(50, 500, 1_000)]);
    }

    #[test]
    fn threshold_fires_once_per_period() {
        let mut ledger = ledger(with_thresholds(1_000, &[50]));
        assert_eq!(ledger.record_spend(600, None, T0).len(), 1);
        assert!(ledger.record_spend(100, None, T0).is_empty());
        assert!(ledger.record_spend(1_000, None, T0).is_empty());
    }

    #[test]
    fn one_settlement_crossing_several_thresholds_emits_each_in_ascending_order() {
        let mut ledger = ledger(with_thresholds(1_000, &[90, 50, 75]));
        admit(&mut ledger, req(1, 950), T0);
        assert_eq!(
            ledger.settle(1, 950, T0),
            vec![crossed(50, 950, 1_000), crossed(75, 950, 1_000), crossed(90, 950, 1_000)]
        );
    }

    #[test]
    fn thresholds_below_90_are_warnings_and_from_90_critical() {
        let mut ledger = ledger(with_thresholds(100, &[89, 90]));
        let events = ledger.record_spend(90, None, T0);
        let severities: Vec<_> = events
            .iter()
            .map(|event| match event {
                LedgerEvent::ThresholdCrossed { severity, .. } => *severity,
                other => panic!("unexpected event {other:?}"),
            })
            .collect();
        assert_eq!(severities, vec![Severity::Warning, Severity::Critical]);
        assert_eq!(Severity::of(1), Severity::Warning);
        assert_eq!(Severity::of(100), Severity::Critical);
    }

    #[test]
    fn thresholds_count_settled_spend_not_reservations() {
        let mut ledger = ledger(with_thresholds(1_000, &[50]));
        assert!(admit(&mut ledger, req(1, 900), T0).events.is_empty());
        assert!(ledger.settle(1, 400, T0).is_empty());
        assert_eq!(ledger.record_spend(100, None, T0), vec![crossed(50, 500, 1_000)]);
    }

    #[test]
    fn threshold_math_is_exact_on_limits_not_divisible_by_100() {
        let mut ledger = ledger(with_thresholds(3, &[50]));
        assert!(ledger.record_spend(1, None, T0).is_empty()); // 33%
        assert_eq!(ledger.record_spend(1, None, T0).len(), 1); // 66%
    }

    #[test]
    fn the_100_percent_threshold_reports_zero_remaining_when_overspent() {
        let mut ledger = ledger(BudgetConfig { thresholds: vec![100], ..with_policy(1_000, Policy::Warn) });
        assert_eq!(ledger.record_spend(1_500, None, T0), vec![crossed(100, 1_500, 1_000)]);
    }

    #[test]
    fn manual_reset_rearms_thresholds() {
        let mut ledger = ledger(with_thresholds(1_000, &[50]));
        ledger.record_spend(600, None, T0);
        ledger.reset(T0 + HOUR);
        assert_eq!(ledger.spend(), 0);
        assert_eq!(ledger.record_spend(500, None, T0 + HOUR), vec![crossed(50, 500, 1_000)]);
    }

    #[test]
    fn period_roll_rearms_thresholds() {
        let mut ledger = ledger(BudgetConfig { thresholds: vec![50], ..daily(1_000) });
        assert_eq!(ledger.record_spend(600, None, T0).len(), 1);
        let events = ledger.record_spend(600, None, T0 + DAY);
        assert_eq!(
            events,
            vec![
                LedgerEvent::Reset {
                    previous_spend: 600,
                    new_period_start: T0 + DAY,
                    interval: ResetInterval::Daily
                },
                crossed(50, 600, 1_000),
            ]
        );
    }

    #[test]
    fn loading_a_ledger_does_not_refire_thresholds_its_spend_already_passed() {
        let mut ledger = BudgetLedger::new(with_thresholds(1_000, &[50, 80]), 600, None, T0);
        assert!(ledger.record_spend(100, None, T0).is_empty());
        assert_eq!(ledger.record_spend(100, None, T0), vec![crossed(80, 800, 1_000)]);
    }

    #[test]
    fn thresholds_are_sorted_deduplicated_and_bounded_to_1_through_100() {
        let ledger = ledger(with_thresholds(1_000, &[0, 80, 50, 50, 101, 200]));
        assert_eq!(ledger.config().thresholds, vec![50, 80]);
    }

    // ----- periods -----

    #[test]
    fn a_budget_without_interval_has_no_period_and_never_rolls() {
        let mut ledger = BudgetLedger::new(config(1_000), 500, Some(T0), T0);
        assert_eq!(ledger.period_start(), None);
        assert_eq!(ledger.roll_period(T0 + 400 * DAY), None);
        assert!(ledger.tick(T0 + 400 * DAY).is_empty());
        assert_eq!(ledger.spend(), 500);
    }

    #[test]
    fn a_budget_with_interval_but_no_period_start_starts_one_now() {
        let ledger = BudgetLedger::new(daily(1_000), 0, None, T0 + 5 * HOUR);
        assert_eq!(ledger.period_start(), Some(T0 + 5 * HOUR));
        assert_eq!(ledger.snapshot().period_start, Some(T0 + 5 * HOUR));
    }

    #[test]
    fn roll_period_before_the_boundary_does_nothing() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(700, None, T0);
        assert_eq!(ledger.roll_period(T0 + DAY - 1), None);
        assert_eq!(ledger.spend(), 700);
    }

    #[test]
    fn roll_period_at_the_boundary_emits_reset_and_zeroes_spend() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(700, None, T0);
        assert_eq!(
            ledger.roll_period(T0 + DAY),
            Some(LedgerEvent::Reset {
                previous_spend: 700,
                new_period_start: T0 + DAY,
                interval: ResetInterval::Daily
            })
        );
        assert_eq!((ledger.spend(), ledger.period_start()), (0, Some(T0 + DAY)));
        assert_eq!(ledger.roll_period(T0 + DAY), None);
    }

    #[test]
    fn several_missed_periods_roll_once_to_the_current_aligned_period() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(300, None, T0);
        let event = ledger.roll_period(T0 + 3 * DAY + 5 * HOUR);
        assert_eq!(
            event,
            Some(LedgerEvent::Reset {
                previous_spend: 300,
                new_period_start: T0 + 3 * DAY,
                interval: ResetInterval::Daily
            })
        );
        assert_eq!(ledger.roll_period(T0 + 3 * DAY + 6 * HOUR), None);
    }

    #[test]
    fn monthly_budget_rolls_on_the_first_of_the_next_month() {
        let config = BudgetConfig { reset_interval: Some(ResetInterval::Monthly), ..config(1_000) };
        let mut ledger = BudgetLedger::new(config, 10, None, T0 + 14 * DAY);
        assert_eq!(ledger.roll_period(FEB_1 - 1), None);
        assert_eq!(
            ledger.roll_period(FEB_1),
            Some(LedgerEvent::Reset {
                previous_spend: 10,
                new_period_start: FEB_1,
                interval: ResetInterval::Monthly
            })
        );
    }

    #[test]
    fn weekly_budget_rolls_on_monday() {
        let config = BudgetConfig { reset_interval: Some(ResetInterval::Weekly), ..config(1_000) };
        let mut ledger = ledger(config); // T0 is a Thursday
        let monday = T0 + 4 * DAY;
        assert_eq!(ledger.roll_period(monday - 1), None);
        assert!(matches!(
            ledger.roll_period(monday + HOUR),
            Some(LedgerEvent::Reset { new_period_start, .. }) if new_period_start == monday
        ));
    }

    #[test]
    fn reserve_rolls_the_period_before_checking_the_budget() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(1_000, None, T0);
        deny(&mut ledger, req(1, 500), T0 + DAY - 1);
        let admission = admit(&mut ledger, req(2, 500), T0 + DAY);
        assert_eq!(
            admission.events,
            vec![LedgerEvent::Reset {
                previous_spend: 1_000,
                new_period_start: T0 + DAY,
                interval: ResetInterval::Daily
            }]
        );
    }

    #[test]
    fn reservations_in_flight_survive_a_roll_and_settle_into_the_new_period() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(500, None, T0);
        admit(&mut ledger, req(1, 400), T0 + DAY - 1);
        ledger.roll_period(T0 + DAY);
        assert_eq!((ledger.spend(), ledger.reserved()), (0, 400));
        ledger.settle(1, 350, T0 + DAY + 1);
        assert_eq!((ledger.spend(), ledger.reserved()), (350, 0));
    }

    #[test]
    fn settle_rolls_the_period_first() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(800, None, T0);
        admit(&mut ledger, req(1, 100), T0);
        let events = ledger.settle(1, 100, T0 + DAY);
        assert!(matches!(events.as_slice(), [LedgerEvent::Reset { previous_spend: 800, .. }]));
        assert_eq!(ledger.spend(), 100);
    }

    #[test]
    fn tick_rolls_the_period() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(800, None, T0);
        assert!(ledger.tick(T0 + DAY - 1).is_empty());
        assert!(matches!(ledger.tick(T0 + DAY).as_slice(), [LedgerEvent::Reset { previous_spend: 800, .. }]));
    }

    #[test]
    fn manual_reset_zeroes_spend_and_starts_the_period_now_until_the_next_boundary() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(500, None, T0);
        ledger.reset(T0 + 15 * HOUR);
        assert_eq!((ledger.spend(), ledger.period_start()), (0, Some(T0 + 15 * HOUR)));
        assert_eq!(ledger.roll_period(T0 + DAY - 1), None);
        assert!(matches!(
            ledger.roll_period(T0 + DAY),
            Some(LedgerEvent::Reset { previous_spend: 0, new_period_start, .. }) if new_period_start == T0 + DAY
        ));
    }

    #[test]
    fn manual_reset_without_interval_keeps_no_period_and_keeps_reservations() {
        let mut ledger = ledger(config(1_000));
        ledger.record_spend(500, None, T0);
        admit(&mut ledger, req(1, 300), T0);
        ledger.reset(T0 + HOUR);
        assert_eq!((ledger.spend(), ledger.reserved(), ledger.period_start()), (0, 300, None));
    }

    // ----- velocity -----

    #[test]
    fn velocity_admits_up_to_the_limit_inclusive() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(600, None, T0);
        admit(&mut ledger, req(1, 400), T0);
    }

    #[test]
    fn velocity_breach_trips_the_breaker_and_denies_with_the_full_cooldown() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(600, None, T0);
        let denial = deny(&mut ledger, req(1, 401), T0);
        assert_eq!(denial.reason, DenialReason::VelocityExceeded { retry_after_ms: 30 * SECOND });
        assert_eq!(
            denial.events,
            vec![LedgerEvent::VelocityExceeded {
                limit: 1_000,
                window_ms: MINUTE,
                current: 600,
                cooldown_ms: 30 * SECOND
            }]
        );
        assert_eq!(denial.snapshot.breaker_open_until, Some(T0 + 30 * SECOND));
        assert_eq!(denial.snapshot.reserved, 0);
    }

    #[test]
    fn velocity_counts_reservations_in_flight() {
        let mut ledger = ledger(velocity(1_000));
        admit(&mut ledger, req(1, 700), T0);
        let denial = deny(&mut ledger, req(2, 301), T0);
        assert!(matches!(denial.events.as_slice(), [LedgerEvent::VelocityExceeded { current: 700, .. }]));
    }

    #[test]
    fn an_open_breaker_denies_with_the_remaining_cooldown_and_no_new_event() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(1_000, None, T0);
        deny(&mut ledger, req(1, 1), T0);
        let denial = deny(&mut ledger, req(2, 1), T0 + 10 * SECOND);
        assert_eq!(denial.reason, DenialReason::VelocityExceeded { retry_after_ms: 20 * SECOND });
        assert!(denial.events.is_empty());
    }

    #[test]
    fn the_breaker_recovers_exactly_once_on_tick_after_the_cooldown() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(1_000, None, T0);
        deny(&mut ledger, req(1, 1), T0);
        assert!(ledger.tick(T0 + 30 * SECOND - 1).is_empty());
        assert_eq!(
            ledger.tick(T0 + 30 * SECOND),
            vec![LedgerEvent::VelocityRecovered {
                limit: 1_000,
                window_ms: MINUTE,
                cooldown_ms: 30 * SECOND
            }]
        );
        assert!(ledger.tick(T0 + 31 * SECOND).is_empty());
        assert_eq!(ledger.snapshot().breaker_open_until, None);
    }

    #[test]
    fn the_first_reserve_after_the_cooldown_recovers_the_breaker_and_admits() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(1_000, None, T0);
        deny(&mut ledger, req(1, 1), T0);
        let admission = admit(&mut ledger, req(2, 1), T0 + MINUTE);
        assert_eq!(
            admission.events,
            vec![LedgerEvent::VelocityRecovered {
                limit: 1_000,
                window_ms: MINUTE,
                cooldown_ms: 30 * SECOND
            }]
        );
        assert!(admit(&mut ledger, req(3, 1), T0 + MINUTE).events.is_empty());
    }

    #[test]
    fn a_breaker_closing_while_still_over_the_limit_trips_again() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(1_000, None, T0);
        deny(&mut ledger, req(1, 1), T0);
        let denial = deny(&mut ledger, req(2, 1), T0 + 30 * SECOND);
        assert!(matches!(
            denial.events.as_slice(),
            [LedgerEvent::VelocityRecovered { .. }, LedgerEvent::VelocityExceeded { .. }]
        ));
        assert_eq!(denial.snapshot.breaker_open_until, Some(T0 + 60 * SECOND));
    }

    #[test]
    fn velocity_window_expiry_frees_capacity() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(1_000, None, T0);
        let mut probe = ledger.clone();
        deny(&mut probe, req(1, 1), T0 + MINUTE - 1);
        admit(&mut ledger, req(1, 1_000), T0 + MINUTE);
    }

    #[test]
    fn settled_spend_enters_the_velocity_window() {
        let mut ledger = ledger(velocity(1_000));
        admit(&mut ledger, req(1, 100), T0);
        ledger.settle(1, 900, T0 + SECOND);
        let denial = deny(&mut ledger, req(2, 101), T0 + 2 * SECOND);
        assert!(matches!(denial.events.as_slice(), [LedgerEvent::VelocityExceeded { current: 900, .. }]));
    }

    #[test]
    fn recording_spend_never_trips_the_breaker_by_itself() {
        let mut ledger = ledger(velocity(1_000));
        assert!(ledger.record_spend(5_000, None, T0).is_empty());
        assert_eq!(ledger.snapshot().breaker_open_until, None);
        deny(&mut ledger, req(1, 1), T0);
    }

    #[test]
    fn velocity_applies_even_under_the_warn_policy() {
        let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..velocity(1_000) });
        ledger.record_spend(1_000, None, T0);
        let denial = deny(&mut ledger, req(1, 1), T0);
        assert!(matches!(denial.reason, DenialReason::VelocityExceeded { .. }));
    }

    #[test]
    fn the_velocity_window_survives_a_period_roll() {
        let mut ledger =
            ledger(BudgetConfig { reset_interval: Some(ResetInterval::Daily), ..velocity(1_000) });
        ledger.record_spend(900, None, T0 + DAY - SECOND);
        let denial = deny(&mut ledger, req(1, 200), T0 + DAY);
        assert!(matches!(
            denial.events.as_slice(),
            [
                LedgerEvent::Reset { previous_spend: 900, .. },
                LedgerEvent::VelocityExceeded { current: 900, .. }
            ]
        ));
    }

    #[test]
    fn removing_velocity_closes_an_open_breaker() {
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(1_000, None, T0);
        deny(&mut ledger, req(1, 1), T0);
        ledger.reconfigure(config(1_000_000), T0 + SECOND);
        assert_eq!(ledger.snapshot().breaker_open_until, None);
        assert!(admit(&mut ledger, req(2, 1), T0 + SECOND).events.is_empty());
    }

    #[test]
    fn sliding_window_never_expires_an_amount_early() {
        let mut window = SlidingWindow::default();
        // Width of a bucket: 60_000 / 64 = 937 ms; both land in the same bucket.
        let start = 937 * 1_000;
        window.add(start, 5, MINUTE);
        window.add(start + 900, 7, MINUTE);
        window.prune(start + MINUTE, MINUTE);
        assert_eq!(window.total, 12, "the earlier amount may outlive its window, never the reverse");
        window.prune(start + 900 + MINUTE, MINUTE);
        assert_eq!(window.total, 0);
    }

    #[test]
    fn sliding_window_memory_is_bounded_under_constant_traffic() {
        let mut window = SlidingWindow::default();
        let mut exact = VecDeque::new();
        for step in 0..200_000 {
            let now = T0 + step * 3;
            window.add(now, 1, MINUTE);
            exact.push_back(now);
            while exact.front().is_some_and(|&at| at <= now - MINUTE) {
                exact.pop_front();
            }
            assert!(window.total >= exact.len() as i64);
        }
        assert!(
            window.entries.len() <= usize::try_from(WINDOW_BUCKETS).unwrap() + 1,
            "{} entries",
            window.entries.len()
        );
    }

    #[test]
    fn sliding_window_folds_amounts_from_a_clock_that_stepped_back() {
        let mut window = SlidingWindow::default();
        window.add(T0, 5, MINUTE);
        window.add(T0 - 10 * SECOND, 7, MINUTE);
        assert_eq!((window.entries.len(), window.total), (1, 12));
        window.prune(T0 + MINUTE, MINUTE);
        assert_eq!(window.total, 0);
    }

    // ----- session limit -----

    #[test]
    fn session_limit_denies_a_session_going_over_with_an_event() {
        let mut ledger = ledger(sessions(500));
        admit(&mut ledger, in_session(1, 300, "s1"), T0);
        ledger.settle(1, 300, T0);
        let denial = deny(&mut ledger, in_session(2, 201, "s1"), T0);
        let details = ("s1".to_owned(), 300, 500);
        assert_eq!(
            denial.reason,
            DenialReason::SessionLimitExceeded {
                session_id: details.0.clone(),
                session_spend: details.1,
                session_limit: details.2
            }
        );
        assert_eq!(
            denial.events,
            vec![LedgerEvent::SessionLimitExceeded {
                session_id: details.0,
                session_spend: details.1,
                session_limit: details.2
            }]
        );
    }

    #[test]
    fn session_limit_admits_a_request_landing_exactly_on_it() {
        let mut ledger = ledger(sessions(500));
        ledger.record_spend(300, Some("s1"), T0);
        admit(&mut ledger, in_session(1, 200, "s1"), T0);
    }

    #[test]
    fn session_limit_counts_the_sessions_reservations() {
        let mut ledger = ledger(sessions(500));
        admit(&mut ledger, in_session(1, 300, "s1"), T0);
        deny(&mut ledger, in_session(2, 201, "s1"), T0);
    }

    #[test]
    fn other_sessions_are_unaffected_by_one_sessions_spend() {
        let mut ledger = ledger(sessions(500));
        ledger.record_spend(500, Some("s1"), T0);
        deny(&mut ledger, in_session(1, 1, "s1"), T0);
        admit(&mut ledger, in_session(2, 500, "s2"), T0);
    }

    #[test]
    fn requests_without_a_session_skip_the_session_limit() {
        let mut ledger = ledger(sessions(500));
        admit(&mut ledger, req(1, 10_000), T0);
    }

    #[test]
    fn session_limit_is_strict_even_under_the_warn_policy() {
        let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..sessions(500) });
        ledger.record_spend(400, Some("s1"), T0);
        let denial = deny(&mut ledger, in_session(1, 101, "s1"), T0);
        assert!(matches!(denial.reason, DenialReason::SessionLimitExceeded { .. }));
    }

    #[test]
    fn releasing_a_sessions_reservation_frees_its_room() {
        let mut ledger = ledger(sessions(500));
        admit(&mut ledger, in_session(1, 400, "s1"), T0);
        ledger.release(1);
        admit(&mut ledger, in_session(2, 500, "s1"), T0);
    }

    #[test]
    fn settling_moves_a_sessions_reservation_to_its_actual_spend() {
        let mut ledger = ledger(sessions(500));
        admit(&mut ledger, in_session(1, 400, "s1"), T0);
        ledger.settle(1, 100, T0);
        assert_eq!(ledger.sessions.committed("s1"), 100);
        admit(&mut ledger, in_session(2, 400, "s1"), T0);
    }

    #[test]
    fn session_spend_resets_with_the_period_but_reservations_stay() {
        let mut ledger = ledger(BudgetConfig { reset_interval: Some(ResetInterval::Daily), ..sessions(500) });
        ledger.record_spend(500, Some("s1"), T0);
        admit(&mut ledger, in_session(1, 200, "s2"), T0);
        admit(&mut ledger, in_session(2, 500, "s1"), T0 + DAY);
        assert_eq!(ledger.sessions.committed("s2"), 200);
        ledger.settle(1, 150, T0 + DAY);
        assert_eq!(ledger.sessions.committed("s2"), 150);
    }

    #[test]
    fn session_spend_resets_with_a_manual_reset() {
        let mut ledger = ledger(sessions(500));
        ledger.record_spend(500, Some("s1"), T0);
        ledger.reset(T0 + HOUR);
        admit(&mut ledger, in_session(1, 500, "s1"), T0 + HOUR);
    }

    #[test]
    fn tracked_sessions_are_bounded_and_the_recent_ones_kept() {
        let mut ledger = ledger(sessions(500));
        for n in 0..=MAX_TRACKED_SESSIONS {
            ledger.record_spend(1, Some(&format!("session-{n}")), T0);
        }
        assert!(ledger.sessions.by_id.len() <= MAX_TRACKED_SESSIONS);
        let newest = format!("session-{MAX_TRACKED_SESSIONS}");
        assert_eq!(ledger.sessions.committed(&newest), 1);
        assert_eq!(ledger.sessions.committed("session-0"), 0);
    }

    #[test]
    fn sessions_are_not_tracked_without_a_session_limit() {
        let mut ledger = ledger(config(1_000));
        admit(&mut ledger, in_session(1, 100, "s1"), T0);
        ledger.record_spend(100, Some("s1"), T0);
        assert!(ledger.sessions.by_id.is_empty());
    }

    // ----- finalization reserve -----

    #[test]
    fn the_finalization_reserve_is_held_back_from_ordinary_requests() {
        let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
        ledger.record_spend(850, None, T0);
        let denial = deny(&mut ledger, req(1, 51), T0);
        assert_eq!(denial.events, vec![LedgerEvent::Exceeded { limit: 1_000, spend: 850, estimate: 51 }]);
        admit(&mut ledger, req(2, 50), T0);
    }

    #[test]
    fn finalize_is_honoured_in_the_reserve_zone() {
        let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
        ledger.record_spend(900, None, T0);
        deny(&mut ledger, req(1, 1), T0);
        let admission = admit(&mut ledger, finalizing(2, 100), T0);
        assert_eq!(admission.snapshot.remaining, 0);
    }

    #[test]
    fn finalize_is_ignored_outside_the_reserve_zone() {
        let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
        ledger.record_spend(850, None, T0);
        deny(&mut ledger, finalizing(1, 100), T0);
        admit(&mut ledger, finalizing(2, 50), T0);
    }

    #[test]
    fn finalize_in_the_zone_is_still_capped_by_the_full_limit() {
        let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
        ledger.record_spend(950, None, T0);
        deny(&mut ledger, finalizing(1, 51), T0);
        admit(&mut ledger, finalizing(2, 50), T0);
    }

    #[test]
    fn reservations_count_toward_entering_the_reserve_zone() {
        let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
        admit(&mut ledger, req(1, 900), T0);
        admit(&mut ledger, finalizing(2, 100), T0);
    }

    #[test]
    fn soft_block_with_a_reserve_lets_finalize_requests_use_it() {
        let mut ledger = ledger(reserve_zone(Policy::SoftBlock));
        ledger.record_spend(900, None, T0);
        deny(&mut ledger, req(1, 1), T0);
        admit(&mut ledger, finalizing(2, 150), T0);
        deny(&mut ledger, finalizing(3, 1), T0);
    }

    #[test]
    fn snapshot_reports_the_reserve_and_the_effective_remaining() {
        let mut ledger = ledger(reserve_zone(Policy::StrictBlock));
        ledger.record_spend(300, None, T0);
        let snapshot = ledger.snapshot();
        assert_eq!((snapshot.remaining, snapshot.finalization_reserve), (700, 100));
        assert_eq!(snapshot.effective_remaining(), 600);
        assert!(!snapshot.in_reserve_zone());
        ledger.record_spend(600, None, T0);
        assert!(ledger.snapshot().in_reserve_zone());
    }

    #[test]
    fn snapshot_clamps_remaining_for_status_display() {
        let mut ledger = ledger(with_policy(1_000, Policy::Warn));
        ledger.record_spend(1_500, None, T0);
        let snapshot = ledger.snapshot();
        assert_eq!((snapshot.remaining, snapshot.remaining_clamped()), (-500, 0));
    }

    // ----- loop detection -----

    #[test]
    fn exact_loop_is_blocked_once_a_fingerprint_reached_max_calls() {
        let mut ledger = ledger(loops(3, 0));
        for id in 0..3 {
            admit(&mut ledger, call(id, 42), T0 + id as i64);
        }
        let denial = deny(&mut ledger, call(3, 42), T0 + 3);
        let (detection_type, call_count, window_ms, max_calls) = (LoopDetectionType::Exact, 4, MINUTE, 3);
        assert_eq!(
            denial.reason,
            DenialReason::LoopDetected { detection_type, call_count, window_ms, max_calls }
        );
        assert_eq!(
            denial.events,
            vec![LedgerEvent::LoopDetected { detection_type, call_count, window_ms, max_calls }]
        );
    }

    #[test]
    fn a_different_prompt_is_not_an_exact_loop() {
        let mut ledger = ledger(loops(3, 0));
        for id in 0..3 {
            admit(&mut ledger, call(id, 42), T0);
        }
        admit(&mut ledger, call(3, 43), T0);
    }

    #[test]
    fn aggregate_rule_blocks_an_agent_alternating_between_a_few_prompts() {
        let mut ledger = ledger(loops(4, 2));
        for (id, hash) in [1, 2, 1, 2].into_iter().enumerate() {
            admit(&mut ledger, call(id as u64, hash), T0);
        }
        let denial = deny(&mut ledger, call(9, 1), T0);
        assert_eq!(
            denial.reason,
            DenialReason::LoopDetected {
                detection_type: LoopDetectionType::Semantic,
                call_count: 5,
                window_ms: MINUTE,
                max_calls: 4
            }
        );
    }

    #[test]
    fn aggregate_rule_counts_the_new_fingerprint_as_one_of_the_keys() {
        let mut ledger = ledger(loops(4, 2));
        for (id, hash) in [1, 1, 2, 2].into_iter().enumerate() {
            admit(&mut ledger, call(id as u64, hash), T0);
        }
        // Two keys so far plus this third one: more than two, so not a loop.
        admit(&mut ledger, call(9, 3), T0);
    }

    #[test]
    fn many_distinct_prompts_escape_the_aggregate_rule() {
        let mut ledger = ledger(loops(3, 2));
        for id in 0..20 {
            admit(&mut ledger, call(id, id), T0);
        }
    }

    #[test]
    fn zero_max_calls_disables_loop_detection() {
        let mut ledger = ledger(loops(0, 5));
        for id in 0..200 {
            admit(&mut ledger, call(id, 42), T0);
        }
        assert_eq!(ledger.loops.fingerprints, 0);
    }

    #[test]
    fn requests_without_a_fingerprint_skip_loop_detection() {
        let mut ledger = ledger(loops(1, 5));
        for id in 0..10 {
            admit(&mut ledger, req(id, 1), T0);
        }
        assert!(ledger.loops.providers.is_empty());
    }

    #[test]
    fn loop_calls_leave_the_window() {
        let mut ledger = ledger(loops(2, 0));
        admit(&mut ledger, call(1, 42), T0);
        admit(&mut ledger, call(2, 42), T0 + 10 * SECOND);
        deny(&mut ledger, call(3, 42), T0 + 20 * SECOND);
        admit(&mut ledger, call(4, 42), T0 + MINUTE);
        deny(&mut ledger, call(5, 42), T0 + MINUTE);
    }

    #[test]
    fn loops_are_counted_per_model() {
        let mut ledger = ledger(loops(2, 0));
        admit(&mut ledger, call_to(1, "gpt-4o", 42), T0);
        admit(&mut ledger, call_to(2, "gpt-4o", 42), T0);
        admit(&mut ledger, call_to(3, "gpt-4o-mini", 42), T0);
        deny(&mut ledger, call_to(4, "gpt-4o", 42), T0);
    }

    #[test]
    fn only_admitted_calls_count_toward_a_loop() {
        let mut ledger = ledger(BudgetConfig { limit: 10, ..loops(2, 0) });
        let too_expensive = ReserveRequest { estimate: 100, ..call(1, 42) };
        assert_eq!(deny(&mut ledger, too_expensive, T0).reason, DenialReason::BudgetExceeded);
        admit(&mut ledger, call(2, 42), T0);
        admit(&mut ledger, call(3, 42), T0);
        let denial = deny(&mut ledger, call(4, 42), T0);
        assert!(matches!(denial.reason, DenialReason::LoopDetected { call_count: 3, .. }));
    }

    #[test]
    fn loop_fingerprints_are_bounded_per_entity() {
        let mut ledger = ledger(loops(1_000_000, 0));
        for id in 0..(MAX_LOOP_FINGERPRINTS as u64 + 100) {
            admit(&mut ledger, call(id, id), T0 + id as i64);
        }
        let tracked = ledger.loops.fingerprints;
        assert!(
            (MAX_LOOP_FINGERPRINTS - LOOP_EVICT_BATCH..=MAX_LOOP_FINGERPRINTS).contains(&tracked),
            "{tracked}"
        );
        let counted: usize =
            ledger.loops.providers.values().flat_map(|models| models.values()).map(|c| c.by_hash.len()).sum();
        assert_eq!(counted, tracked);
        // The newest call is always kept; the stalest went first.
        let calls = &ledger.loops.providers["openai"];
        assert!(calls.values().any(|c| c.by_hash.contains_key(&(MAX_LOOP_FINGERPRINTS as u64 + 99))));
        assert!(calls.values().all(|c| !c.by_hash.contains_key(&0)));
    }

    #[test]
    fn evicted_fingerprints_still_count_as_distinct_keys() {
        let mut ledger = ledger(loops(3, 2));
        for hash in 1..=3 {
            admit(&mut ledger, call_to(hash, "model-a", hash), T0);
        }
        // Fill the table from another model so model-a's fingerprints are evicted.
        for n in 0..MAX_LOOP_FINGERPRINTS as u64 {
            admit(&mut ledger, call_to(100 + n, "model-b", 100 + n), T0 + 1 + n as i64);
        }
        let model_a = &ledger.loops.providers["openai"]["model-a"];
        assert!(model_a.by_hash.is_empty());
        // Three calls from three keys are in the window: a fourth key is not a loop.
        admit(&mut ledger, call_to(9_999, "model-a", 4), T0 + 2_000);
    }

    #[test]
    fn tick_forgets_expired_loop_fingerprints() {
        let mut ledger = ledger(loops(5, 5));
        admit(&mut ledger, call(1, 1), T0);
        admit(&mut ledger, call(2, 2), T0);
        ledger.tick(T0 + MINUTE);
        assert_eq!(ledger.loops.fingerprints, 0);
        assert!(ledger.loops.providers.is_empty());
    }

    #[test]
    fn loop_detection_applies_even_under_the_warn_policy() {
        let mut ledger = ledger(BudgetConfig { policy: Policy::Warn, ..loops(1, 0) });
        admit(&mut ledger, call(1, 42), T0);
        deny(&mut ledger, call(2, 42), T0);
    }

    // ----- order of checks and denial side effects -----

    /// Everything configured tightly, so one request can violate several checks.
    fn everything() -> BudgetConfig {
        BudgetConfig {
            limit: 1_000,
            velocity: Some(VelocityConfig { limit: 500, window_ms: MINUTE, cooldown_ms: 30 * SECOND }),
            session_limit: Some(300),
            loop_detection: LoopConfig { max_calls: 1, window_ms: MINUTE, aggregate_max_keys: 0 },
            ..config(1_000)
        }
    }

    fn everything_request(reservation_id: u64, estimate: i64) -> ReserveRequest<'static> {
        ReserveRequest { session_id: Some("s1"), estimate, ..call(reservation_id, 42) }
    }

    #[test]
    fn an_open_breaker_is_checked_before_loops_sessions_and_budget() {
        let mut ledger = ledger(everything());
        admit(&mut ledger, everything_request(1, 300), T0);
        ledger.settle(1, 300, T0);
        ledger.record_spend(700, None, T0);
        let trip = deny(&mut ledger, req(2, 1), T0);
        assert!(matches!(trip.reason, DenialReason::VelocityExceeded { .. }));
        let denial = deny(&mut ledger, everything_request(3, 5_000), T0 + SECOND);
        assert_eq!(denial.reason, DenialReason::VelocityExceeded { retry_after_ms: 29 * SECOND });
    }

    #[test]
    fn loop_detection_is_checked_before_the_session_limit() {
        let mut ledger = ledger(everything());
        admit(&mut ledger, everything_request(1, 300), T0);
        let denial = deny(&mut ledger, everything_request(2, 300), T0);
        assert!(matches!(denial.reason, DenialReason::LoopDetected { .. }));
    }

    #[test]
    fn the_session_limit_is_checked_before_velocity_and_does_not_trip_the_breaker() {
        let mut ledger = ledger(everything());
        let denial =
            deny(&mut ledger, ReserveRequest { fingerprint: None, ..everything_request(1, 600) }, T0);
        assert!(matches!(denial.reason, DenialReason::SessionLimitExceeded { .. }));
        assert_eq!(denial.snapshot.breaker_open_until, None);
    }

    #[test]
    fn velocity_is_checked_before_the_budget() {
        let mut ledger = ledger(everything());
        let denial = deny(&mut ledger, req(1, 2_000), T0);
        assert!(matches!(denial.reason, DenialReason::VelocityExceeded { .. }));
    }

    #[test]
    fn denials_leave_spend_reservations_sessions_and_loop_counts_unchanged() {
        let mut ledger = ledger(BudgetConfig { velocity: None, ..everything() });
        admit(&mut ledger, everything_request(1, 200), T0);
        let before = ledger.snapshot();
        let denials = [
            deny(&mut ledger, everything_request(2, 1), T0),
            deny(&mut ledger, ReserveRequest { fingerprint: None, ..everything_request(3, 101) }, T0),
            deny(&mut ledger, req(4, 801), T0),
        ];
        for denial in &denials {
            assert_eq!(denial.snapshot, before);
        }
        assert_eq!(ledger.snapshot(), before);
        assert_eq!(ledger.open_reservations(), 1);
        assert_eq!(ledger.sessions.committed("s1"), 200);
        let fingerprint_calls = ledger.loops.providers["openai"]["gpt-4o"].all.total;
        assert_eq!(fingerprint_calls, 1);
    }

    // ----- reconfiguration -----

    #[test]
    fn reconfigure_keeps_spend_reservations_and_the_period() {
        let mut ledger = ledger(daily(1_000));
        ledger.record_spend(300, None, T0);
        admit(&mut ledger, req(1, 200), T0);
        ledger.reconfigure(BudgetConfig { policy: Policy::SoftBlock, ..daily(5_000) }, T0 + HOUR);
        let snapshot = ledger.snapshot();
        assert_eq!((snapshot.spend, snapshot.reserved, snapshot.limit), (300, 200, 5_000));
        assert_eq!((snapshot.policy, snapshot.period_start), (Policy::SoftBlock, Some(T0)));
    }

    #[test]
    fn a_lower_limit_applies_at_once() {
        let mut ledger = ledger(config(1_000));
        ledger.record_spend(300, None, T0);
        ledger.reconfigure(config(400), T0);
        deny(&mut ledger, req(1, 101), T0);
        admit(&mut ledger, req(2, 100), T0);
    }

    #[test]
    fn lowering_the_limit_does_not_refire_thresholds_already_passed() {
        let mut ledger = ledger(with_thresholds(1_000, &[50, 80]));
        ledger.record_spend(400, None, T0);
        ledger.reconfigure(with_thresholds(500, &[50, 80]), T0);
        assert!(ledger.record_spend(10, None, T0).is_empty());
    }

    #[test]
    fn raising_the_limit_rearms_thresholds_above_spend() {
        let mut ledger = ledger(with_thresholds(1_000, &[50]));
        assert_eq!(ledger.record_spend(600, None, T0).len(), 1);
        ledger.reconfigure(with_thresholds(2_000, &[50]), T0);
        assert!(ledger.record_spend(300, None, T0).is_empty());
        assert_eq!(ledger.record_spend(100, None, T0), vec![crossed(50, 1_000, 2_000)]);
    }

    #[test]
    fn adding_a_threshold_below_spend_does_not_fire_it() {
        let mut ledger = ledger(config(1_000));
        ledger.record_spend(600, None, T0);
        ledger.reconfigure(with_thresholds(1_000, &[50, 80]), T0);
        assert_eq!(ledger.record_spend(200, None, T0), vec![crossed(80, 800, 1_000)]);
    }

    #[test]
    fn adding_a_reset_interval_starts_a_period_now() {
        let mut ledger = ledger(config(1_000));
        ledger.record_spend(300, None, T0);
        ledger.reconfigure(daily(1_000), T0 + 5 * HOUR);
        assert_eq!((ledger.period_start(), ledger.spend()), (Some(T0 + 5 * HOUR), 300));
        assert!(matches!(ledger.roll_period(T0 + DAY), Some(LedgerEvent::Reset { previous_spend: 300, .. })));
    }

    #[test]
    fn removing_the_reset_interval_clears_the_period() {
        let mut ledger = ledger(daily(1_000));
        ledger.reconfigure(config(1_000), T0 + HOUR);
        assert_eq!(ledger.period_start(), None);
        assert_eq!(ledger.roll_period(T0 + 10 * DAY), None);
    }

    #[test]
    fn changing_the_interval_keeps_the_period_start_and_moves_the_next_roll() {
        let mut ledger = ledger(daily(1_000));
        let monthly = BudgetConfig { reset_interval: Some(ResetInterval::Monthly), ..config(1_000) };
        ledger.reconfigure(monthly, T0 + HOUR);
        assert_eq!(ledger.period_start(), Some(T0));
        assert_eq!(ledger.roll_period(T0 + DAY), None);
        assert!(ledger.roll_period(FEB_1).is_some());
    }

    #[test]
    fn raising_a_warn_limit_above_committed_rearms_the_alert() {
        let mut ledger = ledger(with_policy(1_000, Policy::Warn));
        ledger.record_spend(1_500, None, T0);
        assert_eq!(admit(&mut ledger, req(1, 1), T0).events.len(), 1);
        ledger.release(1);
        ledger.reconfigure(with_policy(2_000, Policy::Warn), T0);
        assert!(admit(&mut ledger, req(2, 500), T0).events.is_empty());
        assert_eq!(admit(&mut ledger, req(3, 1), T0).events.len(), 1);
    }

    #[test]
    fn disabling_loop_detection_and_session_limits_forgets_their_state() {
        let mut ledger = ledger(BudgetConfig { velocity: None, ..everything() });
        admit(&mut ledger, everything_request(1, 100), T0);
        let no_loops = LoopConfig { max_calls: 0, ..LoopConfig::default() };
        ledger.reconfigure(BudgetConfig { loop_detection: no_loops, ..config(1_000) }, T0);
        assert!(ledger.sessions.by_id.is_empty());
        assert!(ledger.loops.providers.is_empty());
        admit(&mut ledger, everything_request(2, 500), T0);
        ledger.settle(1, 100, T0);
        assert_eq!((ledger.spend(), ledger.reserved()), (100, 500));
    }

    #[test]
    fn a_ledger_can_move_between_threads() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<BudgetLedger>();
    }

    // ----- wire names -----

    #[test]
    fn enums_parse_and_print_their_wire_names() {
        for policy in [Policy::StrictBlock, Policy::SoftBlock, Policy::Warn] {
            assert_eq!(policy.as_str().parse::<Policy>(), Ok(policy));
        }
        assert_eq!(Policy::SoftBlock.to_string(), "soft_block");
        assert_eq!("weekly".parse::<ResetInterval>(), Ok(ResetInterval::Weekly));
        assert_eq!("api_key".parse::<EntityType>(), Ok(EntityType::ApiKey));
        assert_eq!(EntityType::Customer.as_str(), "customer");
        assert_eq!(LoopDetectionType::Semantic.as_str(), "semantic");
    }

    #[test]
    fn unknown_wire_names_are_rejected_with_what_was_parsed() {
        let error = "Strict_Block".parse::<Policy>().unwrap_err();
        assert_eq!(error.to_string(), r#"unknown budget policy "Strict_Block""#);
        assert!("yearly".parse::<ResetInterval>().is_err());
    }

    #[test]
    fn serde_uses_the_wire_names() {
        assert_eq!(serde_json::to_string(&Policy::StrictBlock).unwrap(), r#""strict_block""#);
        assert_eq!(serde_json::from_str::<EntityType>(r#""tag""#).unwrap(), EntityType::Tag);
        assert_eq!(serde_json::to_string(&ResetInterval::Monthly).unwrap(), r#""monthly""#);
        let event = LedgerEvent::LoopDetected {
            detection_type: LoopDetectionType::Exact,
            call_count: 51,
            window_ms: MINUTE,
            max_calls: 50,
        };
        let json = serde_json::to_value(&event).unwrap();
        assert_eq!(json["kind"], "loop_detected");
        assert_eq!(json["detection_type"], "exact");
    }

    #[test]
    fn defaults_match_the_spec() {
        assert_eq!(Policy::default(), Policy::StrictBlock);
        let defaults = LoopConfig::default();
        assert_eq!((defaults.max_calls, defaults.window_ms, defaults.aggregate_max_keys), (50, 60_000, 5));
        let config = BudgetConfig::new(1);
        assert_eq!((config.finalization_reserve, config.reset_interval, config.velocity), (0, None, None));
    }

    #[test]
    fn events_name_their_webhook_types() {
        let cases = [
            (crossed(50, 500, 1_000), "budget.threshold.warning"),
            (crossed(90, 900, 1_000), "budget.threshold.critical"),
            (LedgerEvent::Exceeded { limit: 1, spend: 1, estimate: 1 }, "budget.exceeded"),
            (
                LedgerEvent::VelocityExceeded { limit: 1, window_ms: 1, current: 1, cooldown_ms: 1 },
                "velocity.exceeded",
            ),
            (LedgerEvent::VelocityRecovered { limit: 1, window_ms: 1, cooldown_ms: 1 }, "velocity.recovered"),
            (
                LedgerEvent::SessionLimitExceeded {
                    session_id: "s".into(),
                    session_spend: 1,
                    session_limit: 1,
                },
                "session.limit_exceeded",
            ),
            (
                LedgerEvent::LoopDetected {
                    detection_type: LoopDetectionType::Exact,
                    call_count: 1,
                    window_ms: 1,
                    max_calls: 1,
                },
                "loop.detected",
            ),
            (
                LedgerEvent::Reset { previous_spend: 1, new_period_start: 1, interval: ResetInterval::Daily },
                "budget.reset",
            ),
        ];
        for (event, webhook_type) in cases {
            assert_eq!(event.webhook_type(), webhook_type);
        }
    }

    #[test]
    fn denial_reasons_have_codes_and_messages() {
        assert_eq!(DenialReason::BudgetExceeded.code(), "budget_exceeded");
        let velocity = DenialReason::VelocityExceeded { retry_after_ms: 1_500 };
        assert_eq!(velocity.code(), "velocity_exceeded");
        assert_eq!(velocity.to_string(), "velocity limit exceeded; retry after 1500 ms");
        let denial = Denial { reason: velocity, snapshot: ledger(config(1)).snapshot(), events: Vec::new() };
        assert_eq!(denial.to_string(), "velocity limit exceeded; retry after 1500 ms");
    }

    // ----- property-style -----

    /// A 64-bit linear congruential generator (Knuth's MMIX constants): deterministic
    /// randomness without the rand crate.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next() % bound
        }

        fn index(&mut self, len: usize) -> usize {
            usize::try_from(self.below(len as u64)).unwrap()
        }

        fn amount(&mut self, range: std::ops::RangeInclusive<i64>) -> i64 {
            let span = u64::try_from(range.end() - range.start()).unwrap() + 1;
            range.start() + i64::try_from(self.below(span)).unwrap()
        }
    }

    #[test]
    fn random_operations_never_overcommit_a_strict_budget_and_drain_to_zero() {
        const LIMIT: i64 = 10_000;
        let (mut admitted, mut denied) = (0, 0);
        for seed in 0..32 {
            let mut rng = Lcg(seed);
            let mut ledger = ledger(BudgetConfig {
                thresholds: vec![25, 50, 90, 100],
                finalization_reserve: if seed % 2 == 0 { 0 } else { 500 },
                ..config(LIMIT)
            });
            let mut open: Vec<(u64, i64)> = Vec::new();
            let mut fired = Vec::new();
            let mut now = T0;
            for id in 0..2_000u64 {
                now += rng.amount(0..=999);
                match rng.below(4) {
                    0 | 1 => {
                        let estimate = rng.amount(0..=2_999);
                        let request = ReserveRequest { finalize: rng.below(4) == 0, ..req(id, estimate) };
                        if ledger.reserve(&request, now).is_ok() {
                            open.push((id, estimate));
                            admitted += 1;
                        } else {
                            denied += 1;
                        }
                    }
                    2 if !open.is_empty() => {
                        let (open_id, estimate) = open.swap_remove(rng.index(open.len()));
                        let actual = rng.amount(0..=estimate);
                        fired.extend(ledger.settle(open_id, actual, now));
                    }
                    3 if !open.is_empty() => {
                        let (open_id, _) = open.swap_remove(rng.index(open.len()));
                        assert!(ledger.release(open_id));
                    }
                    _ => {}
                }
                assert!(ledger.spend() + ledger.reserved() <= LIMIT, "seed {seed}: overcommitted");
                assert_eq!(ledger.reserved(), open.iter().map(|&(_, estimate)| estimate).sum::<i64>());
            }
            for (open_id, estimate) in open.drain(..) {
                if open_id % 2 == 0 {
                    fired.extend(ledger.settle(open_id, estimate, now));
                } else {
                    ledger.release(open_id);
                }
            }
            assert_eq!((ledger.reserved(), ledger.open_reservations()), (0, 0), "seed {seed}");
            assert!(ledger.spend() <= LIMIT);
            let mut percents: Vec<u8> = fired
                .iter()
                .filter_map(|event| match event {
                    LedgerEvent::ThresholdCrossed { percent, .. } => Some(*percent),
                    _ => None,
                })
                .collect();
            let count = percents.len();
            percents.dedup();
            assert_eq!(percents.len(), count, "seed {seed}: a threshold fired twice");
        }
        assert!(
            admitted > 1_000 && denied > 1_000,
            "both outcomes exercised: {admitted} admitted, {denied} denied"
        );
    }

    #[test]
    fn restore_spend_adopts_storage_and_rearms_after_a_reset() {
        let mut ledger = ledger(with_thresholds(1_000, &[50]));
        ledger.reserve(&req(1, 100), T0).unwrap();
        // Other writers raised spend: adopted, and the thresholds it passed count as fired.
        ledger.restore_spend(600, None, T0);
        assert_eq!((ledger.spend(), ledger.reserved()), (600, 100));
        assert!(ledger.settle(1, 10, T0).is_empty(), "50% was passed by the stored spend");
        // Lower spend in storage is a reset made elsewhere: thresholds re-arm.
        ledger.restore_spend(0, None, T0);
        assert_eq!(ledger.spend(), 0);
        assert_eq!(ledger.record_spend(500, None, T0).len(), 1);
    }

    #[test]
    fn restore_spend_ignores_a_row_a_period_behind_and_takes_a_manual_reset() {
        let mut ledger = BudgetLedger::new(daily(1_000), 300, Some(T0), T0);
        ledger.record_spend(50, None, T0 + DAY + HOUR);
        assert_eq!(ledger.period_start(), Some(T0 + DAY), "rolled into the next day");
        // Storage has not recorded the roll yet.
        ledger.restore_spend(300, Some(T0), T0 + DAY + HOUR);
        assert_eq!((ledger.spend(), ledger.period_start()), (50, Some(T0 + DAY)));
        // A manual reset at 15:00 stored spend 0 and a period starting then.
        ledger.restore_spend(0, Some(T0 + DAY + 15 * HOUR), T0 + DAY + 15 * HOUR);
        assert_eq!((ledger.spend(), ledger.period_start()), (0, Some(T0 + DAY + 15 * HOUR)));
    }

    #[test]
    fn velocity_status_reports_window_reservations_and_breaker() {
        assert_eq!(ledger(config(1_000)).velocity_status(T0), None);
        let mut ledger = ledger(velocity(1_000));
        ledger.record_spend(300, None, T0);
        ledger.reserve(&req(1, 200), T0).unwrap();
        let status = ledger.velocity_status(T0 + SECOND).unwrap();
        assert_eq!((status.window_spend, status.current, status.breaker_open_until), (300, 500, None));
        assert!(ledger.reserve(&req(2, 600), T0 + SECOND).is_err());
        assert_eq!(ledger.velocity_status(T0 + SECOND).unwrap().breaker_open_until, Some(T0 + 31 * SECOND));
        let later = ledger.velocity_status(T0 + 2 * MINUTE).unwrap();
        assert_eq!((later.window_spend, later.current, later.breaker_open_until), (0, 200, None));
    }
}
