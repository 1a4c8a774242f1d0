//! Storage: one pool type over the two backends, and the macros that let one query
//! body serve both.
//!
//! diesel-async has no multi-backend connection, so a query is written once inside
//! [`with_conn!`]/[`with_tx!`], which expand it for SQLite and for PostgreSQL. The
//! SQL itself is portable (see `migrations/`).
//!
//! SQLite keeps a single writer connection: SQLite serializes writers anyway, and one
//! writer connection can never hit the "database is locked" lock-upgrade deadlock of
//! two deferred transactions. Readers use their own small pool (WAL lets them run
//! beside the writer).

pub mod actions;
pub mod audit;
pub mod bindings;
pub mod budget_leases;
pub mod budgets;
pub mod change_feed;
pub mod checkpoint;
pub mod cost_event_queries;
pub mod cost_event_scans;
pub mod cost_events;
pub mod exact_sum;
pub mod fold;
pub mod fold_sums;
pub mod keys;
pub mod margins;
pub mod mcp_servers;
pub mod model_prices;
pub mod models;
pub mod orgs;
pub mod prepared;
pub mod processor;
pub mod provider_credentials;
pub mod refunds;
pub mod rollup_labels;
pub mod rollup_series;
pub mod rollup_shape;
pub mod rollup_top;
pub mod rollups;
pub mod schema;
pub mod shared_budgets;
pub mod tool_costs;
pub mod trace_spans;
pub mod unpriced;
pub mod users;
pub mod webhooks;

use std::time::Duration;

use deadpool::managed::{Hook, HookError, Metrics};
use deadpool::Runtime;
use diesel::result::{DatabaseErrorKind, Error as DieselError};
use diesel::sqlite::SqliteConnection;
use diesel::Connection as _;
use diesel_async::async_connection_wrapper::AsyncConnectionWrapper;
use diesel_async::pooled_connection::deadpool::{Object, Pool as DeadPool};
use diesel_async::pooled_connection::{AsyncDieselConnectionManager, ManagerConfig, RecyclingMethod};
use diesel_async::sync_connection_wrapper::{SpawnBlocking, SyncConnectionWrapper};
use diesel_async::{AsyncConnection, AsyncPgConnection, SimpleAsyncConnection};
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use futures_util::FutureExt;

pub type SqliteConn = SyncConnectionWrapper<SqliteConnection, DetachedBlocking>;

/// Runs SQLite work on tokio's blocking pool without diesel-async's default
/// cancel guard. That guard blocks in `block_in_place` when a query future is
/// dropped mid-flight, which panics on actix's current-thread workers (a failed
/// extractor or a client disconnect is enough to drop one). Here a dropped future
/// simply detaches: the blocking task finishes on its own, the connection's mutex
/// keeps the next query waiting for it, and the pool discards a connection whose
/// transaction was left open.
pub struct DetachedBlocking;

impl SpawnBlocking for DetachedBlocking {
    fn spawn_blocking<'a, R>(
        &mut self,
        task: impl FnOnce() -> R + Send + 'static,
    ) -> futures_util::future::BoxFuture<'a, Result<R, Box<dyn std::error::Error + Send + Sync + 'static>>>
    where
        R: Send + 'static,
    {
        tokio::task::spawn_blocking(task)
            .map(|r| r.map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync + 'static>))
            .boxed()
    }

    fn get_runtime() -> Self {
        DetachedBlocking
    }
}
pub type PgConn = AsyncPgConnection;

pub const MIGRATIONS: EmbeddedMigrations = embed_migrations!("../../migrations");

/// How long a request waits for a pooled connection, and the connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(5_000);

#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// The database could not be reached or a connection could not be had in time.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    #[error("not found")]
    NotFound,
    #[error("query failed: {0}")]
    Query(DieselError),
}

impl DbError {
    pub fn unavailable(err: impl std::fmt::Display) -> Self {
        Self::Unavailable(err.to_string())
    }

    pub fn is_unique_violation(&self) -> bool {
        matches!(self, Self::Query(DieselError::DatabaseError(DatabaseErrorKind::UniqueViolation, _)))
    }
}

impl From<DieselError> for DbError {
    fn from(err: DieselError) -> Self {
        match err {
            DieselError::NotFound => Self::NotFound,
            DieselError::DatabaseError(DatabaseErrorKind::ClosedConnection, info) => {
                Self::Unavailable(info.message().to_owned())
            }
            // A transaction that lost a PostgreSQL race: nothing of it was applied and
            // running it again is safe.
            DieselError::DatabaseError(DatabaseErrorKind::SerializationFailure, info) => {
                Self::Unavailable(info.message().to_owned())
            }
            DieselError::DatabaseError(_, ref info) if info.message().contains("deadlock detected") => {
                Self::Unavailable(info.message().to_owned())
            }
            // SQLite reports lock timeouts as a plain database error; they are transient.
            DieselError::DatabaseError(_, ref info) if info.message().contains("database is locked") => {
                Self::Unavailable(info.message().to_owned())
            }
            other => Self::Query(other),
        }
    }
}

pub type DbResult<T> = Result<T, DbError>;

#[derive(Clone)]
pub struct SqlitePools {
    read: DeadPool<SqliteConn>,
    write: DeadPool<SqliteConn>,
    path: std::sync::Arc<str>,
}

impl SqlitePools {
    pub async fn read(&self) -> DbResult<Object<SqliteConn>> {
        self.read.get().await.map_err(DbError::unavailable)
    }

    pub async fn write(&self) -> DbResult<Object<SqliteConn>> {
        self.write.get().await.map_err(DbError::unavailable)
    }

    /// The database file's path, as the URL gave it (`:memory:` for an in-memory one).
    pub fn path(&self) -> &str {
        &self.path
    }
}

#[derive(Clone)]
pub struct PgPool(DeadPool<PgConn>);

impl PgPool {
    pub async fn read(&self) -> DbResult<Object<PgConn>> {
        self.0.get().await.map_err(DbError::unavailable)
    }

    pub async fn write(&self) -> DbResult<Object<PgConn>> {
        self.0.get().await.map_err(DbError::unavailable)
    }

    /// A connection taken out of the pool for good, for a session that must outlive
    /// any request (a session lock); the pool opens another in its place.
    pub async fn detached(&self) -> DbResult<PgConn> {
        Ok(Object::take(self.write().await?))
    }
}

/// The application's connection pool, on one of the two backends.
#[derive(Clone)]
pub enum Pool {
    Sqlite(SqlitePools),
    Pg(PgPool),
}

/// Runs `$body` with `$conn` bound to a pooled connection of either backend.
/// `$mode` is `read` or `write`.
#[macro_export]
macro_rules! with_conn {
    ($pool:expr, $mode:ident, |$conn:ident| $body:expr) => {{
        match $pool {
            $crate::db::Pool::Sqlite(p) => {
                let mut guard = p.$mode().await?;
                let $conn: &mut $crate::db::SqliteConn = &mut guard;
                $body
            }
            $crate::db::Pool::Pg(p) => {
                let mut guard = p.$mode().await?;
                let $conn: &mut $crate::db::PgConn = &mut guard;
                $body
            }
        }
    }};
}

/// Runs `$body` inside one transaction on the write connection; an `Err` rolls back.
#[macro_export]
macro_rules! with_tx {
    ($pool:expr, |$conn:ident| $body:expr) => {{
        $crate::with_conn!($pool, write, |c| {
            use diesel_async::AsyncConnection as _;
            c.transaction::<_, $crate::db::DbError, _>(async |$conn| $body).await
        })
    }};
}

/// Which backend a database URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

pub fn backend_of(url: &str) -> Option<Backend> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Some(Backend::Postgres)
    } else if url.starts_with("sqlite:") {
        Some(Backend::Sqlite)
    } else {
        None
    }
}

/// `sqlite://./spendgate.db` → `./spendgate.db`.
pub(crate) fn sqlite_path(url: &str) -> &str {
    url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")).unwrap_or(url)
}

/// WAL with `synchronous = NORMAL` is durable against process crashes (what an
/// acknowledged event must survive); a page cache of 64 MiB, memory-mapped reads and
/// in-memory temp storage keep group commits from spilling and re-reading pages
/// (profiling showed half the commit time in page I/O with the defaults).
///
/// `busy_timeout` comes first: switching to WAL takes a lock, and without the
/// timeout a connection opened while another holds it fails at once. When the WAL
/// starts over, a file grown past 64 MiB is truncated back to that.
const SQLITE_PRAGMAS: &str = "PRAGMA busy_timeout = 5000; PRAGMA journal_mode = WAL; \
     PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF; PRAGMA cache_size = -65536; \
     PRAGMA temp_store = MEMORY; PRAGMA mmap_size = 268435456; PRAGMA wal_autocheckpoint = 0; \
     PRAGMA journal_size_limit = 67108864;";

/// A PostgreSQL connection checked out again within this long of its last checkout
/// is used as it is; one idle for longer is first asked `SELECT 1` (one round trip),
/// so a connection the server dropped while it sat idle is replaced before use
/// instead of failing the first statement given to it.
const VERIFY_AFTER_IDLE: Duration = Duration::from_secs(5);

/// The PostgreSQL pool's connections. diesel-async's default recycling asks every
/// checkout `SELECT 1`: one more round trip before each transaction (a commit, a lease)
/// and each read. Only a connection idle past [`VERIFY_AFTER_IDLE`] is asked.
fn pg_pool(url: &str, max_connections: usize) -> Result<DeadPool<PgConn>, String> {
    let mut config = ManagerConfig::<PgConn>::default();
    config.recycling_method = RecyclingMethod::Fast;
    let manager = AsyncDieselConnectionManager::<PgConn>::new_with_config(url, config);
    let verify_idle = Hook::async_fn(|conn: &mut PgConn, metrics: &Metrics| {
        let idle = metrics.last_used() >= VERIFY_AFTER_IDLE;
        Box::pin(async move {
            if idle {
                conn.batch_execute("SELECT 1").await.map_err(|e| HookError::Message(e.to_string().into()))?;
            }
            Ok(())
        })
    });
    DeadPool::builder(manager)
        .max_size(max_connections.max(1))
        .wait_timeout(Some(CONNECT_TIMEOUT))
        .create_timeout(Some(CONNECT_TIMEOUT))
        .runtime(Runtime::Tokio1)
        .pre_recycle(verify_idle)
        .build()
        .map_err(|e| e.to_string())
}

/// The SQLite pools' connections: a local file does not go away between two uses, so
/// a checkout asks nothing (the default would run `SELECT 1` on a blocking thread).
fn sqlite_manager(path: &str) -> AsyncDieselConnectionManager<SqliteConn> {
    let mut config = ManagerConfig::<SqliteConn>::default();
    config.recycling_method = RecyclingMethod::Fast;
    config.custom_setup = Box::new(|url: &str| {
        let url = url.to_owned();
        async move {
            let mut conn = SqliteConn::establish(&url).await?;
            conn.batch_execute(SQLITE_PRAGMAS)
                .await
                .map_err(|e| diesel::ConnectionError::BadConnection(e.to_string()))?;
            Ok(conn)
        }
        .boxed()
    });
    AsyncDieselConnectionManager::new_with_config(path, config)
}

impl Pool {
    /// Opens a pool for `url` (`sqlite://…` or `postgres://…`).
    pub fn connect(url: &str, max_connections: usize) -> Result<Self, String> {
        match backend_of(url) {
            Some(Backend::Sqlite) => {
                let path = sqlite_path(url);
                let build = |size: usize| {
                    DeadPool::builder(sqlite_manager(path))
                        .max_size(size)
                        .wait_timeout(Some(CONNECT_TIMEOUT))
                        .create_timeout(Some(CONNECT_TIMEOUT))
                        .runtime(Runtime::Tokio1)
                        .build()
                        .map_err(|e| e.to_string())
                };
                Ok(Pool::Sqlite(SqlitePools {
                    read: build(max_connections.max(1))?,
                    write: build(1)?,
                    path: path.into(),
                }))
            }
            Some(Backend::Postgres) => Ok(Pool::Pg(PgPool(pg_pool(url, max_connections)?))),
            None => Err(format!("unsupported database URL {url:?}: use sqlite://PATH or postgres://…")),
        }
    }

    pub fn backend(&self) -> Backend {
        match self {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Pg(_) => Backend::Postgres,
        }
    }

    /// Starts background maintenance. On SQLite: WAL checkpoints (see [`checkpoint`]).
    pub fn start_maintenance(&self) {
        if let Pool::Sqlite(pools) = self {
            checkpoint::start(pools.clone());
        }
    }

    /// A trivial round trip: readiness means the database answers.
    pub async fn ping(&self) -> DbResult<()> {
        with_conn!(self, read, |conn| conn.batch_execute("SELECT 1").await.map_err(DbError::from))
    }
}

/// Applies pending migrations. Blocking: call it off the async runtime.
pub fn run_migrations(url: &str) -> Result<Vec<String>, String> {
    let applied = match backend_of(url) {
        Some(Backend::Sqlite) => {
            let mut conn = SqliteConnection::establish(sqlite_path(url)).map_err(|e| e.to_string())?;
            diesel::connection::SimpleConnection::batch_execute(&mut conn, SQLITE_PRAGMAS)
                .map_err(|e| e.to_string())?;
            conn.run_pending_migrations(MIGRATIONS)
                .map_err(|e| e.to_string())?
                .iter()
                .map(|v| v.to_string())
                .collect()
        }
        Some(Backend::Postgres) => {
            let mut conn = <AsyncConnectionWrapper<PgConn> as diesel::Connection>::establish(url)
                .map_err(|e| e.to_string())?;
            conn.run_pending_migrations(MIGRATIONS)
                .map_err(|e| e.to_string())?
                .iter()
                .map(|v| v.to_string())
                .collect()
        }
        None => return Err(format!("unsupported database URL {url:?}")),
    };
    Ok(applied)
}

/// Runs [`run_migrations`] on a plain thread, so it works from any runtime flavour.
pub async fn migrate(url: &str) -> Result<Vec<String>, String> {
    let url = url.to_owned();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = tx.send(run_migrations(&url));
    });
    rx.await.map_err(|_| "migration thread died".to_owned())?
}
