//! A lock each process holds for as long as it lives, released the moment it dies:
//! on SQLite an advisory file lock beside the database file (the kernel drops it with
//! the process), on PostgreSQL a session advisory lock (the server drops it with the
//! session, which ends when the process's socket closes).
//!
//! A heartbeat alone cannot tell a crashed process from a live one until several
//! beats were missed; the lock can at once. So a retry of a request whose claim a
//! crashed process held (the same deployment restarted, or a dead peer) runs without
//! waiting out a timeout.
//!
//! A process is only reported gone when its lock is provably free; when nothing can
//! be learnt (no lock file: an in-memory database or a process that never took one)
//! the caller falls back to the heartbeat. On PostgreSQL a process whose lock
//! connection broke takes the lock again at its next heartbeat.

use std::fs::{File, OpenOptions, TryLockError};
use std::path::PathBuf;

use diesel::sql_types::{BigInt, Integer};
use diesel_async::RunQueryDsl;

use crate::db::{DbError, DbResult, PgConn, Pool};

/// The first key of every spendgate process lock (`pg_advisory_lock(int4, int4)`),
/// the second being derived from the instance id: "SG" and 1.
const LOCK_SPACE: i32 = 0x5347_0001;

/// What another process's lock says about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Owner {
    /// It holds its lock: the process runs.
    Alive,
    /// Its lock is free: the process is gone.
    Gone,
    /// Nothing to learn from a lock; ask the heartbeat.
    Unknown,
}

/// This process's lock, held until it is dropped (or the process dies).
pub enum Held {
    Sqlite(File),
    Pg(Box<PgConn>),
    Nothing,
}

/// Takes the lock of process `id` (this process).
pub async fn take(pool: &Pool, id: &str) -> DbResult<Held> {
    match pool {
        Pool::Sqlite(pools) => {
            let Some(path) = lock_file(pools.path(), id) else { return Ok(Held::Nothing) };
            let file = std::fs::create_dir_all(lock_dir(pools.path()))
                .and_then(|()| OpenOptions::new().create(true).truncate(false).write(true).open(&path))
                .map_err(|e| DbError::Unavailable(format!("process lock {}: {e}", path.display())))?;
            file.try_lock()
                .map_err(|e| DbError::Unavailable(format!("process lock {}: {e}", path.display())))?;
            Ok(Held::Sqlite(file))
        }
        Pool::Pg(pg) => {
            let mut conn = pg.detached().await?;
            diesel::sql_query("SELECT pg_advisory_lock($1, $2)")
                .bind::<Integer, _>(LOCK_SPACE)
                .bind::<Integer, _>(pg_key(id).0)
                .execute(&mut conn)
                .await?;
            Ok(Held::Pg(Box::new(conn)))
        }
    }
}

/// Checks that a held lock is still held: on PostgreSQL a broken session lost it, and
/// it is taken again on a new connection.
pub async fn keep(pool: &Pool, id: &str, held: &mut Held) -> DbResult<()> {
    let Held::Pg(conn) = held else { return Ok(()) };
    if diesel::sql_query("SELECT 1").execute(conn.as_mut()).await.is_ok() {
        return Ok(());
    }
    tracing::warn!("the process lock's connection broke; taking the lock again");
    *held = take(pool, id).await?;
    Ok(())
}

/// Whether process `id` (another one) still holds its lock.
pub async fn probe(pool: &Pool, id: &str) -> DbResult<Owner> {
    match pool {
        Pool::Sqlite(pools) => Ok(probe_file(pools.path(), id)),
        Pool::Pg(pg) => {
            #[derive(diesel::QueryableByName)]
            struct Holders {
                #[diesel(sql_type = BigInt)]
                n: i64,
            }
            let mut conn = pg.read().await?;
            let held: Holders = diesel::sql_query(
                "SELECT COUNT(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND granted \
                 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
                 AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 2",
            )
            .bind::<BigInt, _>(i64::from(LOCK_SPACE))
            .bind::<BigInt, _>(i64::from(pg_key(id).1))
            .get_result(&mut conn)
            .await?;
            Ok(if held.n > 0 { Owner::Alive } else { Owner::Gone })
        }
    }
}

/// Removes the lock files of gone processes last written before `before_ms` (epoch
/// milliseconds); returns how many.
pub fn forget_gone(pool: &Pool, before_ms: i64) -> usize {
    let Pool::Sqlite(pools) = pool else { return 0 };
    let Ok(entries) = std::fs::read_dir(lock_dir(pools.path())) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .is_some_and(|ms| ms < before_ms);
        let free = File::open(entry.path()).is_ok_and(|f| f.try_lock().is_ok());
        if old && free && std::fs::remove_file(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

fn probe_file(db_path: &str, id: &str) -> Owner {
    let Some(path) = lock_file(db_path, id) else { return Owner::Unknown };
    let Ok(file) = File::open(&path) else { return Owner::Unknown };
    match file.try_lock() {
        // Nobody holds it; our own hold ends when `file` is dropped.
        Ok(()) => Owner::Gone,
        Err(TryLockError::WouldBlock) => Owner::Alive,
        Err(TryLockError::Error(e)) => {
            tracing::warn!(error = %e, path = %path.display(), "could not probe a process lock");
            Owner::Unknown
        }
    }
}

fn lock_dir(db_path: &str) -> PathBuf {
    PathBuf::from(format!("{db_path}-instances"))
}

/// The lock file of process `id`; `None` for an in-memory database, or an id that is
/// not a plain file name (ids are UUIDs).
fn lock_file(db_path: &str, id: &str) -> Option<PathBuf> {
    let plain = !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    let in_memory = db_path.is_empty() || db_path.starts_with(":memory:") || db_path.contains("mode=memory");
    (plain && !in_memory).then(|| lock_dir(db_path).join(format!("{id}.lock")))
}

/// The second lock key of process `id`, as `pg_advisory_lock` takes it (int4) and as
/// `pg_locks.objid` shows it (oid, unsigned). Two ids sharing a key only make a gone
/// process look alive (the heartbeat then decides), never the reverse.
fn pg_key(id: &str) -> (i32, u32) {
    let digest = <sha2::Sha256 as sha2::Digest>::digest(id.as_bytes());
    let bytes = [digest[0], digest[1], digest[2], digest[3]];
    (i32::from_be_bytes(bytes), u32::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_file_lock_is_alive_and_a_released_one_gone() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("x.db");
        let db = db.to_str().unwrap();
        assert_eq!(probe_file(db, "p1"), Owner::Unknown);
        std::fs::create_dir_all(lock_dir(db)).unwrap();
        let file = File::create(lock_file(db, "p1").unwrap()).unwrap();
        file.try_lock().unwrap();
        // A second open file description cannot take it while the first holds it.
        assert_eq!(probe_file(db, "p1"), Owner::Alive);
        drop(file);
        assert_eq!(probe_file(db, "p1"), Owner::Gone);
    }

    #[test]
    fn odd_ids_and_memory_databases_have_no_lock_file() {
        assert!(lock_file("/tmp/x.db", "../etc").is_none());
        assert!(lock_file(":memory:", "p1").is_none());
        assert!(lock_file("/tmp/x.db", "0190-ab_c").is_some());
    }

    #[test]
    fn the_pg_key_is_one_value_in_both_types() {
        let (signed, unsigned) = pg_key("0190c3a2-0000-7000-8000-000000000000");
        assert_eq!(signed.to_be_bytes(), unsigned.to_be_bytes());
    }
}
