//! SQLite WAL checkpoints, off the writer's commits and without stalling them.
//!
//! With `wal_autocheckpoint` on, a checkpoint (with an fsync) would run inside the
//! writer's commit every 1,000 pages: profiling showed it as a fifth of group-commit
//! time. So a background task checkpoints instead, every [`CHECKPOINT_EVERY`]:
//!
//! 1. a PASSIVE checkpoint on a reader connection copies the log back into the
//!    database without taking the write lock: commits carry on meanwhile;
//! 2. under sustained writes PASSIVE never reaches the end of the log, so the log is
//!    never started over and the file grows without bound (new blocks to allocate and
//!    zero in every commit). Past [`WAL_RESTART_FRAMES`], a RESTART checkpoint makes
//!    the next commit start the log over. It runs on the one write connection, taking
//!    its turn in the write pool like any commit, and does not wait for readers
//!    (`busy_timeout = 0`; readers still on the old log make it a PASSIVE one, tried
//!    again at the next tick).
//!
//! Why the write connection: RESTART holds SQLite's write lock, and a commit that
//! meets it is not queued but retried by SQLite's busy handler, which sleeps 1, 2, 5,
//! 10, ... up to 100 ms between tries. A checkpoint of a few milliseconds on a reader
//! connection thus held the writer for 70 to 180 ms, the unsettled-call permits ran
//! out under a fast client, and proxied calls stalled behind them (issue 25). Waiting
//! in the pool instead wakes the writer the moment the checkpoint is done.

use std::time::{Duration, Instant};

use diesel_async::SimpleAsyncConnection;

use super::{DbError, SqlitePools};

/// How often the background checkpointer copies the WAL back into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(500);
/// WAL frames (pages) past which the checkpointer makes the log start over: 8 MiB.
const WAL_RESTART_FRAMES: i64 = 2_048;

/// A row of `PRAGMA wal_checkpoint`.
#[derive(diesel::QueryableByName)]
struct Checkpoint {
    #[diesel(sql_type = diesel::sql_types::BigInt)]
    log: i64,
}

/// Checkpoints in the background on the current runtime, for as long as it runs.
pub fn start(pools: SqlitePools) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
        loop {
            tick.tick().await;
            if let Err(e) = checkpoint(&pools).await {
                tracing::warn!(error = %e, "WAL checkpoint failed; retrying");
            }
        }
    });
}

async fn checkpoint(pools: &SqlitePools) -> Result<(), DbError> {
    let log = {
        let mut conn = pools.read().await?;
        let passive: Vec<Checkpoint> =
            diesel_async::RunQueryDsl::load(diesel::sql_query("PRAGMA wal_checkpoint(PASSIVE)"), &mut conn)
                .await?;
        passive.first().map_or(0, |c| c.log)
    };
    if log <= WAL_RESTART_FRAMES {
        return Ok(());
    }
    let mut conn = pools.write().await?;
    let started = Instant::now();
    conn.batch_execute("PRAGMA busy_timeout = 0").await?;
    let restart = conn.batch_execute("PRAGMA wal_checkpoint(RESTART)").await;
    conn.batch_execute("PRAGMA busy_timeout = 5000").await?;
    restart?;
    tracing::debug!(frames = log, micros = started.elapsed().as_micros(), "WAL restart checkpoint");
    Ok(())
}
