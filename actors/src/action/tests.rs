#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests fail loudly by design")]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;

use super::actor::ActionError;
use super::registry::ActionRegistry;
use super::*;

use ActionStatus::*;

fn report(status: ActionStatus) -> Command {
    Command::Report(Report { status, result: None, error_message: None })
}

#[test]
fn the_transition_table() {
    let approve = Command::Approve { by: "u".into() };
    let reject = Command::Reject { by: "u".into() };
    assert_eq!(decide(Pending, None, &approve, 0), Ok(Approved));
    assert_eq!(decide(Pending, Some(10), &reject, 9), Ok(Rejected));
    assert_eq!(decide(Pending, Some(10), &approve, 10), Err(TransitionError::Expired));
    assert_eq!(decide(Expired, Some(10), &reject, 99), Err(TransitionError::Expired));
    for s in [Approved, Rejected, Executing, Executed, Failed] {
        assert_eq!(decide(s, None, &approve, 0), Err(TransitionError::Invalid), "{s}");
        assert_eq!(decide(s, None, &reject, 0), Err(TransitionError::Invalid), "{s}");
    }
    assert_eq!(decide(Pending, Some(10), &Command::Expire, 10), Ok(Expired));
    assert_eq!(decide(Pending, Some(10), &Command::Expire, 9), Err(TransitionError::Invalid));
    assert_eq!(decide(Pending, None, &Command::Expire, i64::MAX), Err(TransitionError::Invalid));
    assert_eq!(decide(Approved, Some(1), &Command::Expire, 99), Err(TransitionError::Invalid));
    assert_eq!(decide(Approved, None, &report(Executing), 0), Ok(Executing));
    assert_eq!(decide(Executing, None, &report(Executed), 0), Ok(Executed));
    assert_eq!(decide(Executing, None, &report(Failed), 0), Ok(Failed));
    // Everything else the agent may report is refused, terminal statuses included.
    for from in ActionStatus::ALL {
        for to in [Executing, Executed, Failed] {
            let allowed = matches!((from, to), (Approved, Executing) | (Executing, Executed | Failed));
            assert_eq!(decide(from, None, &report(to), 0).is_ok(), allowed, "{from} -> {to}");
        }
    }
    assert!(ActionStatus::ALL.iter().all(|s| s.as_str().parse::<ActionStatus>() == Ok(*s)));
}

/// Storage in memory with the version check of the real one.
#[derive(Default, Clone)]
struct MemoryActions(Arc<Mutex<HashMap<String, StoredAction>>>);

impl ActionStore for MemoryActions {
    fn load(&self, id: &str) -> BoxFuture<'static, Result<Option<StoredAction>, ActionStoreError>> {
        let row = self.0.lock().unwrap().get(id).cloned();
        Box::pin(std::future::ready(Ok(row)))
    }

    fn apply(&self, change: Change) -> BoxFuture<'static, Result<Applied, ActionStoreError>> {
        let mut rows = self.0.lock().unwrap();
        let row = rows.get_mut(&change.before.id).unwrap();
        let outcome = if row.version == change.before.version {
            row.version += 1;
            row.status = change.to;
            Applied::Done(row.clone())
        } else {
            Applied::Stale
        };
        Box::pin(std::future::ready(Ok(outcome)))
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn pending(store: &MemoryActions, id: &str, expires_at: Option<i64>) -> StoredAction {
    let row = StoredAction { id: id.into(), org_id: "o".into(), status: Pending, version: 0, expires_at };
    store.0.lock().unwrap().insert(id.into(), row.clone());
    row
}

#[actix::test]
async fn one_of_two_concurrent_decisions_wins() {
    let store = MemoryActions::default();
    pending(&store, "a", None);
    let registry = ActionRegistry::new(Arc::new(store.clone()), now).unwrap();
    let (a, b) = tokio::join!(
        registry.transition("o", "a", Command::Approve { by: "u".into() }),
        registry.transition("o", "a", Command::Reject { by: "v".into() }),
    );
    assert!(a.is_ok() != b.is_ok(), "{a:?} {b:?}");
    let loser = if a.is_ok() { b } else { a };
    assert_eq!(loser, Err(ActionError::Transition(TransitionError::Invalid)));
    assert_eq!(
        registry.transition("x", "a", Command::Approve { by: "u".into() }).await,
        Err(ActionError::NotFound)
    );
}

#[actix::test]
async fn the_timer_expires_a_pending_action_and_wakes_waiters() {
    let store = MemoryActions::default();
    let row = pending(&store, "a", Some(now() + 50));
    let registry = ActionRegistry::new(Arc::new(store.clone()), now).unwrap();
    registry.resume(row);
    let mut rx = registry.subscribe("o", "a").await.unwrap();
    let seen = *rx.wait_for(|s| *s != Pending).await.unwrap();
    assert_eq!(seen, Expired);
    assert_eq!(store.0.lock().unwrap()["a"].status, Expired);
    // A settled action needs no actor; the waiter still sees its status.
    let rx = registry.subscribe("o", "a").await.unwrap();
    assert_eq!(*rx.borrow(), Expired);
}

#[actix::test]
async fn a_write_that_lost_a_race_is_stale() {
    let store = MemoryActions::default();
    pending(&store, "a", None);
    let registry = ActionRegistry::new(Arc::new(store.clone()), now).unwrap();
    let _rx = registry.subscribe("o", "a").await.unwrap();
    // Another instance bumps the version after our read: simulated by a store whose
    // next apply sees a newer version.
    struct Racing(MemoryActions);
    impl ActionStore for Racing {
        fn load(&self, id: &str) -> BoxFuture<'static, Result<Option<StoredAction>, ActionStoreError>> {
            self.0.load(id)
        }
        fn apply(&self, change: Change) -> BoxFuture<'static, Result<Applied, ActionStoreError>> {
            self.0 .0.lock().unwrap().get_mut(&change.before.id).unwrap().version += 1;
            self.0.apply(change)
        }
    }
    let racing = ActionRegistry::new(Arc::new(Racing(store.clone())), now).unwrap();
    let lost = racing.transition("o", "a", Command::Approve { by: "u".into() }).await;
    assert_eq!(lost, Err(ActionError::Stale));
    assert_eq!(store.0.lock().unwrap()["a"].status, Pending);
}
