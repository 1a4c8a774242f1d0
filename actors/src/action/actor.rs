//! The actor of one live action: it owns the action's status (published on a watch
//! channel, so waiters need no polling) and its expiry timer, and serializes every
//! transition in its mailbox.
//!
//! A transition reads the row, decides with [`decide`], and writes conditionally on the
//! version it read: within one process the mailbox orders transitions, and between
//! processes sharing a database the version check lets exactly one win (the other gets
//! [`ActionError::Stale`]). Each handler holds the mailbox for its whole database round
//! trip ([`AtomicResponse`]): actions are decided by people, so one round trip at a time
//! per action costs nothing, and no other message can interleave between read and write.
//!
//! The actor stops as soon as its action is no longer `pending` (nothing is left to time
//! out); a later report about the action starts a fresh one for its transition.

use std::sync::Arc;
use std::time::Duration;

use actix::{
    fut, Actor, ActorContext, ActorFutureExt, AsyncContext, AtomicResponse, Context, Handler, Message,
    SpawnHandle,
};
use tokio::sync::watch;

use super::{
    decide, is_due, ActionStatus, ActionStore, ActionStoreError, Applied, Change, Command, StoredAction,
    TransitionError,
};

/// Reads the service's clock: UTC epoch milliseconds.
pub type Clock = fn() -> i64;

/// How long the actor waits before trying again to expire an action when storage failed.
const EXPIRE_RETRY: Duration = Duration::from_secs(1);

/// Why a transition did not happen.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ActionError {
    #[error("action not found")]
    NotFound,
    #[error(transparent)]
    Transition(#[from] TransitionError),
    /// Another instance changed the action between our read and our write.
    #[error("the action was changed concurrently")]
    Stale,
    #[error("{0}")]
    Refused(String),
    #[error("{0}")]
    Unavailable(String),
}

impl From<ActionStoreError> for ActionError {
    fn from(e: ActionStoreError) -> Self {
        Self::Unavailable(e.0)
    }
}

/// A transition that happened: the new status and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transitioned {
    pub status: ActionStatus,
    pub at: i64,
}

/// Move the action of `org_id` (another organization's action is not found).
#[derive(Message)]
#[rtype(result = "Result<Transitioned, ActionError>")]
pub struct Transition {
    pub org_id: String,
    pub command: Command,
}

/// A receiver of the action's status as this process sees it.
#[derive(Message)]
#[rtype(result = "Result<watch::Receiver<ActionStatus>, ActionError>")]
pub struct Subscribe {
    pub org_id: String,
}

/// Re-read the row: another instance may have moved the action.
#[derive(Message)]
#[rtype(result = "()")]
pub struct Refresh;

pub struct ActionActor {
    state: StoredAction,
    store: Arc<dyn ActionStore>,
    clock: Clock,
    status: watch::Sender<ActionStatus>,
    timer: Option<SpawnHandle>,
    /// Deregisters the actor from its registry when it stops.
    on_stop: Option<Box<dyn FnOnce()>>,
}

impl ActionActor {
    pub fn new(
        state: StoredAction,
        store: Arc<dyn ActionStore>,
        clock: Clock,
        on_stop: Box<dyn FnOnce()>,
    ) -> Self {
        let (status, _) = watch::channel(state.status);
        Self { state, store, clock, status, timer: None, on_stop: Some(on_stop) }
    }

    /// Schedules the expiry of a pending action at its `expires_at` (at once when it is
    /// past), re-checking the clock when the timer fires.
    fn arm_timer(&mut self, ctx: &mut Context<Self>, at_least: Duration) {
        if let Some(handle) = self.timer.take() {
            ctx.cancel_future(handle);
        }
        let (ActionStatus::Pending, Some(expires_at)) = (self.state.status, self.state.expires_at) else {
            return;
        };
        let now = (self.clock)();
        let wait = Duration::from_millis(u64::try_from(expires_at - now).unwrap_or(0)).max(at_least);
        self.timer = Some(ctx.run_later(wait, |act, ctx| {
            act.timer = None;
            if is_due(act.state.expires_at, (act.clock)()) {
                let org_id = act.state.org_id.clone();
                ctx.notify(Transition { org_id, command: Command::Expire });
            } else {
                act.arm_timer(ctx, Duration::ZERO);
            }
        }));
    }

    /// Takes the latest known state: publishes it, and stops once nothing is pending.
    fn observe(&mut self, latest: Option<StoredAction>, ctx: &mut Context<Self>) {
        let Some(latest) = latest else {
            ctx.stop();
            return;
        };
        self.state = latest;
        self.status.send_replace(self.state.status);
        if self.state.status == ActionStatus::Pending {
            if self.timer.is_none() {
                self.arm_timer(ctx, Duration::ZERO);
            }
        } else {
            ctx.stop();
        }
    }
}

impl Actor for ActionActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        self.arm_timer(ctx, Duration::ZERO);
    }

    fn stopped(&mut self, _ctx: &mut Context<Self>) {
        if let Some(on_stop) = self.on_stop.take() {
            on_stop();
        }
    }
}

/// Reads, decides and writes one transition; returns the latest known state with the
/// outcome.
async fn run(
    store: Arc<dyn ActionStore>,
    id: String,
    command: Command,
    now: i64,
) -> (Option<StoredAction>, Result<Transitioned, ActionError>) {
    let current = match store.load(&id).await {
        Ok(Some(current)) => current,
        Ok(None) => return (None, Err(ActionError::NotFound)),
        Err(e) => return (None, Err(e.into())),
    };
    let to = match decide(current.status, current.expires_at, &command, now) {
        Ok(to) => to,
        Err(TransitionError::Expired) if current.status == ActionStatus::Pending => {
            // Past its expiry but the timer has not fired yet: expire it now, so that
            // storage, events and waiters agree with the answer.
            let change =
                Change { before: current.clone(), command: Command::Expire, to: ActionStatus::Expired, now };
            let latest = match store.apply(change).await {
                Ok(Applied::Done(state)) => Some(state),
                _ => store.load(&id).await.ok().flatten(),
            };
            return (latest, Err(TransitionError::Expired.into()));
        }
        Err(e) => return (Some(current), Err(e.into())),
    };
    let change = Change { before: current.clone(), command, to, now };
    match store.apply(change).await {
        Ok(Applied::Done(state)) => (Some(state), Ok(Transitioned { status: to, at: now })),
        Ok(Applied::Stale) => (store.load(&id).await.ok().flatten(), Err(ActionError::Stale)),
        Ok(Applied::Refused(why)) => (Some(current), Err(ActionError::Refused(why))),
        Err(e) => (Some(current), Err(e.into())),
    }
}

impl Handler<Transition> for ActionActor {
    type Result = AtomicResponse<Self, Result<Transitioned, ActionError>>;

    fn handle(&mut self, msg: Transition, _ctx: &mut Context<Self>) -> Self::Result {
        if msg.org_id != self.state.org_id {
            return AtomicResponse::new(Box::pin(fut::ready(Err(ActionError::NotFound))));
        }
        let expiring = msg.command == Command::Expire;
        let work = run(self.store.clone(), self.state.id.clone(), msg.command, (self.clock)());
        AtomicResponse::new(Box::pin(fut::wrap_future::<_, Self>(work).map(
            move |(latest, outcome), act, ctx| {
                let failed = matches!(outcome, Err(ActionError::Unavailable(_)));
                if latest.is_some() || !failed {
                    act.observe(latest, ctx);
                }
                if expiring && failed && act.state.status == ActionStatus::Pending {
                    act.arm_timer(ctx, EXPIRE_RETRY);
                }
                outcome
            },
        )))
    }
}

impl Handler<Subscribe> for ActionActor {
    type Result = Result<watch::Receiver<ActionStatus>, ActionError>;

    fn handle(&mut self, msg: Subscribe, _ctx: &mut Context<Self>) -> Self::Result {
        if msg.org_id == self.state.org_id {
            Ok(self.status.subscribe())
        } else {
            Err(ActionError::NotFound)
        }
    }
}

impl Handler<Refresh> for ActionActor {
    type Result = AtomicResponse<Self, ()>;

    fn handle(&mut self, _: Refresh, _ctx: &mut Context<Self>) -> Self::Result {
        let load = self.store.load(&self.state.id);
        AtomicResponse::new(Box::pin(fut::wrap_future::<_, Self>(load).map(|result, act, ctx| {
            if let Ok(latest) = result {
                act.observe(latest, ctx);
            }
        })))
    }
}
