//! The budget ledger: the pure, synchronous spending rules of one budget entity.
//!
//! A budget actor owns one [`BudgetLedger`], feeds it requests and cost reports, persists
//! what changed and turns the returned [`LedgerEvent`]s into webhooks. Nothing here does
//! I/O or reads a clock: every call takes `now_ms` (UTC epoch milliseconds), so the rules
//! are deterministic and tested exhaustively below. Money is `i64` microdollars; every
//! sum saturates and no amount ever goes below zero (negative inputs count as zero,
//! except a [refund](BudgetLedger::record_spend), which lowers spend down to zero).
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
use std::sync::Arc;

use super::period::{next_period_start, period_start};

mod loops;
mod sessions;
#[cfg(test)]
mod tests;
mod window;

pub use super::vocabulary::*;
use loops::LoopTracker;
use sessions::SessionTracker;
use window::SlidingWindow;

/// How many settled reservation ids are remembered to make a repeated settle a no-op.
const RECENTLY_SETTLED_IDS: usize = 256;

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
            exact_ceiling: self.config.exact_ceiling && self.config.policy == Policy::StrictBlock,
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
        let full = request.estimate.max(0);
        let committed = self.committed();
        let limit = self.limit_for(committed, request.finalize);
        // An exact-ceiling budget grants a request with a floor what its room pays for,
        // down to the floor; `None`: not even the floor fits. Every later check holds
        // what is granted, never more.
        let flexible =
            request.floor.filter(|_| self.config.exact_ceiling && self.config.policy == Policy::StrictBlock);
        let granted = flexible.map(|floor| grant(full, floor, limit.saturating_sub(committed)));
        let mut estimate = granted.flatten().unwrap_or(full);

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
            // The session's room clamps like the budget's: down to the floor.
            let session_room = session_limit.saturating_sub(session_spend);
            let fits = match flexible {
                Some(floor) if granted != Some(None) => grant(estimate, floor, session_room),
                _ => (estimate <= session_room).then_some(estimate),
            };
            if let Some(fits) = fits {
                estimate = fits;
            } else {
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

        let over = committed.saturating_add(estimate) > limit || granted == Some(None);
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
        Ok(Admission { snapshot: self.snapshot(), granted: estimate, events })
    }

    /// Lowers an open reservation to `amount` (a clamped call holds only what the
    /// tightest of its budgets granted); never raises it. Returns whether it was open.
    pub fn shrink(&mut self, reservation_id: u64, amount: i64) -> bool {
        let Some(reservation) = self.reservations.get_mut(&reservation_id) else {
            return false;
        };
        let surplus = reservation.amount.saturating_sub(amount.max(0)).max(0);
        reservation.amount -= surplus;
        let session = reservation.session.clone();
        self.reserved = self.reserved.saturating_sub(surplus).max(0);
        if let Some(session) = session {
            self.sessions.release(&session, surplus);
        }
        true
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

    /// Counts cost reported without a reservation (SDK and API cost events). A negative
    /// amount is a refund of an earlier gate charge (the edge checked it against the
    /// charge): it lowers spend, never below zero, and touches nothing else (thresholds
    /// stay fired, the velocity window and sessions keep what they counted).
    pub fn record_spend(&mut self, amount: i64, session_id: Option<&str>, now_ms: i64) -> Vec<LedgerEvent> {
        let mut events = Vec::new();
        events.extend(self.roll_period(now_ms));
        if amount < 0 {
            self.spend = self.spend.saturating_add(amount).max(0);
            return events;
        }
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

/// What an exact-ceiling budget grants a request of `full` with `floor` when `room` is
/// left: the whole estimate when it fits, else the room when it is at least the floor
/// (and positive), else nothing.
pub fn grant(full: i64, floor: i64, room: i64) -> Option<i64> {
    if full <= room {
        Some(full)
    } else if room >= floor.max(1) {
        Some(room)
    } else {
        None
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
