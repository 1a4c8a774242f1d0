//! Human-in-the-loop actions in this process: the storage behind the action actors
//! (`actors::action`), their registry, the restart of pending timers at startup, and the
//! wait for a decision behind `GET /api/actions/:id?waitSeconds=N`.

pub mod events;

use std::sync::Arc;
use std::time::Duration;

use actors::action::actor::{ActionError, Transitioned};
use actors::action::registry::ActionRegistry;
use actors::action::{ActionStatus, ActionStore, ActionStoreError, Applied, Change, Command, StoredAction};
use futures_util::future::BoxFuture;

use crate::budgets::BudgetService;
use crate::db::models::ActionRow;
use crate::db::{self, Backend, DbError, Pool};
use crate::util::time;

/// With several instances on one database another one may decide an action: a waiter
/// re-reads the row this often besides listening to the local actor.
const SHARED_REREAD: Duration = Duration::from_secs(1);
/// How often startup tries again to resume pending actions while the database fails.
const RESUME_RETRY: Duration = Duration::from_secs(1);

/// The state an actor needs, from a row.
pub fn stored(row: &ActionRow) -> StoredAction {
    StoredAction {
        id: row.id.clone(),
        org_id: row.org_id.clone(),
        // An unknown status (written by a newer version) is treated as settled.
        status: row.status.parse().unwrap_or(ActionStatus::Failed),
        version: row.version,
        expires_at: row.expires_at,
    }
}

struct DbActionStore {
    pool: Pool,
    outbox: crate::outbox::Outbox,
    budgets: BudgetService,
}

fn store_error(e: DbError) -> ActionStoreError {
    ActionStoreError(e.to_string())
}

impl ActionStore for DbActionStore {
    fn load(&self, id: &str) -> BoxFuture<'static, Result<Option<StoredAction>, ActionStoreError>> {
        let (pool, id) = (self.pool.clone(), id.to_owned());
        Box::pin(
            async move { Ok(db::actions::load(&pool, &id).await.map_err(store_error)?.as_ref().map(stored)) },
        )
    }

    fn apply(&self, change: Change) -> BoxFuture<'static, Result<Applied, ActionStoreError>> {
        let (pool, outbox, budgets) = (self.pool.clone(), self.outbox.clone(), self.budgets.clone());
        Box::pin(async move {
            match db::actions::apply(&pool, &outbox, &change).await.map_err(store_error)? {
                db::actions::Applied::Done(row, raised) => {
                    // This process's budget actor sees the new limit at once; the others
                    // through the budget change feed.
                    if let Some(entity) = raised {
                        budgets.invalidate(&entity).await;
                    }
                    Ok(Applied::Done(stored(&row)))
                }
                db::actions::Applied::Stale => Ok(Applied::Stale),
                db::actions::Applied::NoBudget => {
                    Ok(Applied::Refused("The budget this increase would raise no longer exists".to_owned()))
                }
            }
        })
    }
}

/// Handle to the action actors.
#[derive(Clone)]
pub struct ActionService {
    registry: Arc<ActionRegistry>,
    pool: Pool,
}

impl ActionService {
    /// Starts the registry (its arbiter). Must run inside the actix system.
    pub fn start(pool: Pool, outbox: crate::outbox::Outbox, budgets: BudgetService) -> Result<Self, String> {
        let store = Arc::new(DbActionStore { pool: pool.clone(), outbox, budgets });
        let registry = ActionRegistry::new(store, time::now_ms)?;
        Ok(Self { registry: Arc::new(registry), pool })
    }

    /// Restarts the timers of every pending action that can expire; those that expired
    /// while no process ran expire at once.
    pub async fn resume_pending(&self) -> Result<usize, DbError> {
        let rows = db::actions::pending_with_expiry(&self.pool).await?;
        for row in &rows {
            self.registry.resume(stored(row));
        }
        Ok(rows.len())
    }

    /// Runs [`Self::resume_pending`] in the background, retrying every second until the
    /// database answers: a process that started while it was away still expires its
    /// actions.
    pub fn resume_pending_until_done(&self) {
        let service = self.clone();
        tokio::spawn(async move {
            loop {
                match service.resume_pending().await {
                    Ok(n) => {
                        tracing::info!(pending = n, "resumed action timers");
                        return;
                    }
                    Err(e) => tracing::warn!(error = %e, "could not resume pending actions; retrying"),
                }
                tokio::time::sleep(RESUME_RETRY).await;
            }
        });
    }

    /// A new pending action: its actor starts now when it can expire.
    pub fn created(&self, row: &ActionRow) {
        self.registry.resume(stored(row));
    }

    pub async fn transition(
        &self,
        org_id: &str,
        id: &str,
        command: Command,
    ) -> Result<Transitioned, ActionError> {
        self.registry.transition(org_id, id, command).await
    }

    /// Waits up to `wait` for action `id` of `org_id` to leave `pending`: wakes on its
    /// actor's status channel, and on a shared database also re-reads the row every
    /// [`SHARED_REREAD`]. Returns when it left pending or at the deadline; the caller
    /// reads the row afterwards.
    pub async fn wait_decided(&self, org_id: &str, id: &str, wait: Duration) -> Result<(), ActionError> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut rx = self.registry.subscribe(org_id, id).await?;
        let shared = self.pool.backend() == Backend::Postgres;
        loop {
            let next_check =
                if shared { deadline.min(tokio::time::Instant::now() + SHARED_REREAD) } else { deadline };
            let decided =
                tokio::time::timeout_at(next_check, rx.wait_for(|s| *s != ActionStatus::Pending)).await;
            match decided {
                Ok(_) => return Ok(()),
                Err(_) if tokio::time::Instant::now() >= deadline => return Ok(()),
                Err(_) => {
                    let row = db::actions::find(&self.pool, org_id, id)
                        .await
                        .map_err(|e| ActionError::Unavailable(e.to_string()))?;
                    if row.is_none_or(|r| r.status != ActionStatus::Pending.as_str()) {
                        // Decided elsewhere: the local actor has nothing left to time.
                        self.registry.refresh(id);
                        return Ok(());
                    }
                }
            }
        }
    }
}
