//! Finds or starts the actor of an action. Actors live on one arbiter of their own
//! (actions are decided by people: a thread is plenty) and are started lazily: by a
//! transition, by a waiter, or at startup for every pending action that can expire,
//! so its timer runs again after a restart. An actor deregisters itself when it stops.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use actix::{Actor, Addr, Arbiter, ArbiterHandle, MailboxError};
use dashmap::mapref::entry::Entry;
use dashmap::DashMap;
use tokio::sync::watch;

use super::actor::{ActionActor, ActionError, Clock, Refresh, Subscribe, Transition, Transitioned};
use super::{ActionStatus, ActionStore, Command, StoredAction};

/// Attempts of a message: the first, and one on a fresh actor if the first one had
/// just stopped.
const MAX_ATTEMPTS: u32 = 2;

type Actors = DashMap<String, (u64, Addr<ActionActor>)>;

pub struct ActionRegistry {
    store: Arc<dyn ActionStore>,
    actors: Arc<Actors>,
    arbiter: ArbiterHandle,
    /// Keeps the arbiter thread alive as long as the registry.
    _thread: Arbiter,
    generation: AtomicU64,
    clock: Clock,
}

impl ActionRegistry {
    /// Starts the registry's arbiter. Must run inside the actix system.
    pub fn new(store: Arc<dyn ActionStore>, clock: Clock) -> Result<Self, String> {
        let thread = Arbiter::try_new().map_err(|e| e.to_string())?;
        Ok(Self {
            store,
            actors: Arc::new(DashMap::new()),
            arbiter: thread.handle(),
            _thread: thread,
            generation: AtomicU64::new(1),
            clock,
        })
    }

    /// Live actors (pending actions with a running timer, mostly).
    pub fn live(&self) -> usize {
        self.actors.len()
    }

    fn live_addr(&self, id: &str) -> Option<Addr<ActionActor>> {
        self.actors.get(id).map(|e| e.1.clone()).filter(Addr::connected)
    }

    /// The actor of `state`'s action: the live one, or a new one started with `state`.
    fn start(&self, state: StoredAction) -> Addr<ActionActor> {
        let id = state.id.clone();
        match self.actors.entry(id.clone()) {
            Entry::Occupied(e) if e.get().1.connected() => e.get().1.clone(),
            entry => {
                let generation = self.generation.fetch_add(1, Ordering::Relaxed);
                let actors = Arc::clone(&self.actors);
                let on_stop = Box::new(move || {
                    actors.remove_if(&id, |_, v| v.0 == generation);
                });
                let (store, clock) = (Arc::clone(&self.store), self.clock);
                let addr = ActionActor::start_in_arbiter(&self.arbiter, move |_| {
                    ActionActor::new(state, store, clock, on_stop)
                });
                match entry {
                    Entry::Occupied(mut e) => {
                        e.insert((generation, addr.clone()));
                    }
                    Entry::Vacant(e) => {
                        e.insert((generation, addr.clone()));
                    }
                }
                addr
            }
        }
    }

    /// The live actor of `id`, or one started from storage.
    async fn addr(&self, id: &str) -> Result<Addr<ActionActor>, ActionError> {
        if let Some(addr) = self.live_addr(id) {
            return Ok(addr);
        }
        let state = self.store.load(id).await?.ok_or(ActionError::NotFound)?;
        Ok(self.start(state))
    }

    /// Moves action `id` of `org_id` by `command`, in its actor's mailbox.
    pub async fn transition(
        &self,
        org_id: &str,
        id: &str,
        command: Command,
    ) -> Result<Transitioned, ActionError> {
        for _ in 0..MAX_ATTEMPTS {
            let addr = self.addr(id).await?;
            let msg = Transition { org_id: org_id.to_owned(), command: command.clone() };
            match addr.send(msg).await {
                Ok(outcome) => return outcome,
                Err(MailboxError::Closed | MailboxError::Timeout) => continue,
            }
        }
        Err(ActionError::Unavailable("the action's actor stopped".to_owned()))
    }

    /// The status of action `id` of `org_id` as it changes. A settled action needs no
    /// actor: its receiver simply holds the final status.
    pub async fn subscribe(
        &self,
        org_id: &str,
        id: &str,
    ) -> Result<watch::Receiver<ActionStatus>, ActionError> {
        for _ in 0..MAX_ATTEMPTS {
            let addr = match self.live_addr(id) {
                Some(addr) => addr,
                None => {
                    let state = self.store.load(id).await?.ok_or(ActionError::NotFound)?;
                    if state.org_id != org_id {
                        return Err(ActionError::NotFound);
                    }
                    if state.status != ActionStatus::Pending {
                        return Ok(watch::channel(state.status).1);
                    }
                    self.start(state)
                }
            };
            match addr.send(Subscribe { org_id: org_id.to_owned() }).await {
                Ok(outcome) => return outcome,
                Err(MailboxError::Closed | MailboxError::Timeout) => continue,
            }
        }
        Err(ActionError::Unavailable("the action's actor stopped".to_owned()))
    }

    /// Starts the actor of a stored pending action so its expiry timer runs (startup,
    /// and right after creation).
    pub fn resume(&self, state: StoredAction) {
        if state.status == ActionStatus::Pending && state.expires_at.is_some() {
            self.start(state);
        }
    }

    /// Tells a live actor to re-read its action (another instance moved it).
    pub fn refresh(&self, id: &str) {
        if let Some(addr) = self.live_addr(id) {
            addr.do_send(Refresh);
        }
    }
}
