//! The fold: committed cost events added into the rollups, off the commit path.
//!
//! The commit that makes an event durable stamps it with `fold_seq`, its place in
//! commit order, taken from the `clock` row of `fold_marks` as the commit's first
//! statement. That row lock orders every commit (of every instance on one
//! PostgreSQL; SQLite has one writer anyway): a commit gets its numbers only once the
//! previous holder has committed and become visible, so whatever a reader sees is a
//! prefix of commit order and a number not visible yet is above every visible one.
//!
//! A fold reads the events past the `folded` mark (a page of them, from any
//! connection), aggregates them in memory into deltas per rollup key
//! ([`rollups::partial`]: every dimension at every grain the rollups keep), then, in
//! one write transaction, checks that the mark has not moved (on PostgreSQL under
//! its row lock, which serializes the folders of every instance), upserts the deltas
//! and moves the mark to the page's last number. The deltas and the mark commit
//! together, so each event is added exactly once, whichever process folds it and
//! whenever a process dies; a fold that lost the race to another folder throws its
//! page away and reads again.
//!
//! Events from before the fold existed have no number: their own commits counted
//! them, and the fold never reads them.

use diesel::{ExpressionMethods, QueryDsl, SelectableHelper};

use crate::db::fold_sums::CommittedSums;
use crate::db::models::CostEvent;
use crate::db::rollups::{self, RollupRow, TagsById};
use crate::db::schema::{cost_event_tags, cost_events, fold_marks};
use crate::db::trace_spans::{self, SpanRow};
use crate::db::{DbError, DbResult, Pool};
use crate::with_conn;

/// The `fold_marks` row of the last number handed out to a commit.
pub const CLOCK: &str = "clock";
/// The `fold_marks` row of the last number folded into the rollups.
pub const FOLDED: &str = "folded";

/// Events read and folded per transaction.
const PAGE: i64 = 20_000;

/// Folds every event committed past the mark, a page per transaction; returns how
/// many were folded by this call.
pub async fn fold_pending(pool: &Pool) -> DbResult<u64> {
    fold_pending_with(pool, None).await
}

/// [`fold_pending`], taking first the sums this process's writer held for its own
/// commits right after the mark (see [`crate::db::fold_sums`]), and reading from the
/// database only what they do not cover. Returns the commit numbers folded from
/// held sums plus the events read.
async fn fold_pending_with(pool: &Pool, held: Option<&CommittedSums>) -> DbResult<u64> {
    let mut folded = 0u64;
    loop {
        if let Some(held) = held {
            if let Some(n) = fold_held(pool, held).await? {
                folded += n;
                continue;
            }
        }
        match fold_page(pool).await? {
            Folded::Page(n) => {
                folded += n;
                if n < PAGE as u64 {
                    return Ok(folded);
                }
            }
            Folded::Raced => {}
        }
    }
}

/// Folds what is pending, if anything: what a rollup read calls first, so that its
/// answer counts every event committed before it (one index probe when nothing is).
pub async fn catch_up(pool: &Pool) -> DbResult<()> {
    if pending(pool).await? {
        fold_pending(pool).await?;
    }
    Ok(())
}

/// The folded mark.
macro_rules! mark_query {
    () => {
        fold_marks::table.filter(fold_marks::name.eq(FOLDED)).select(fold_marks::seq)
    };
}

/// Whether a committed event is past the mark.
pub async fn pending(pool: &Pool) -> DbResult<bool> {
    use diesel_async::RunQueryDsl;
    with_conn!(pool, read, |conn| {
        let mark: i64 = mark_query!().get_result(conn).await?;
        let next: Vec<Option<i64>> = cost_events::table
            .filter(cost_events::fold_seq.gt(mark))
            .select(cost_events::fold_seq)
            .limit(1)
            .load(conn)
            .await?;
        Ok::<_, DbError>(!next.is_empty())
    })
}

enum Folded {
    /// This many events were folded.
    Page(u64),
    /// Another folder moved the mark first: nothing was written.
    Raced,
}

/// Writes the held sums that follow the mark with the new mark; `None` when none
/// do. A fold that lost the race throws them away: the database still has their
/// events.
async fn fold_held(pool: &Pool, held: &CommittedSums) -> DbResult<Option<u64>> {
    use diesel_async::RunQueryDsl;
    let mark: i64 = with_conn!(pool, read, |conn| Ok::<_, DbError>(mark_query!().get_result(conn).await?))?;
    let Some(run) = held.take_after(mark, PAGE as u64) else { return Ok(None) };
    let rows = (rollups::rows(run.sums.rollups), trace_spans::rows(run.sums.spans));
    let written = write_page(pool, mark, run.last, rows).await?;
    Ok(Some(if written { run.numbers } else { 0 }))
}

/// Reads one page past the mark, aggregates it, and writes it with the new mark.
async fn fold_page(pool: &Pool) -> DbResult<Folded> {
    let (mark, events, tags) = read_page(pool).await?;
    let Some(last) = events.last().and_then(|(_, seq)| *seq) else {
        return Ok(Folded::Page(0));
    };
    static NONE: Vec<(String, String)> = Vec::new();
    let sums = rollups::partial(events.iter().map(|(e, _)| {
        let t = tags.get(&e.id).unwrap_or(&NONE);
        (e, t.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    }));
    let rows = rollups::rows(sums);
    let mut spans = trace_spans::Spans::new();
    trace_spans::add_events(&mut spans, events.iter().map(|(e, _)| e));
    let n = events.len() as u64;
    let written = write_page(pool, mark, last, (rows, trace_spans::rows(spans))).await?;
    Ok(if written { Folded::Page(n) } else { Folded::Raced })
}

type Page = (i64, Vec<(CostEvent, Option<i64>)>, TagsById);

/// The mark and the events past it (with their tags), in commit order.
async fn read_page(pool: &Pool) -> DbResult<Page> {
    use diesel_async::RunQueryDsl;
    with_conn!(pool, read, |conn| {
        let mark: i64 = mark_query!().get_result(conn).await?;
        let events: Vec<(CostEvent, Option<i64>)> = cost_events::table
            .filter(cost_events::fold_seq.gt(mark))
            .order(cost_events::fold_seq.asc())
            .limit(PAGE)
            .select((CostEvent::as_select(), cost_events::fold_seq))
            .load(conn)
            .await?;
        let mut tags = TagsById::new();
        for chunk in events.chunks(500) {
            let ids: Vec<&str> = chunk.iter().map(|(e, _)| e.id.as_str()).collect();
            let rows: Vec<(String, String, String)> = cost_event_tags::table
                .filter(cost_event_tags::event_id.eq_any(ids))
                .select((cost_event_tags::event_id, cost_event_tags::tag_key, cost_event_tags::tag_value))
                .load(conn)
                .await?;
            for (id, k, v) in rows {
                tags.entry(id).or_default().push((k, v));
            }
        }
        Ok::<_, DbError>((mark, events, tags))
    })
}

/// Adds `rows` and `spans` and moves the mark from `mark` to `last`, in one
/// transaction, if the mark is still `mark`; says whether it was.
async fn write_page(
    pool: &Pool,
    mark: i64,
    last: i64,
    (rows, spans): (Vec<RollupRow>, Vec<SpanRow>),
) -> DbResult<bool> {
    Ok(match pool {
        Pool::Sqlite(p) => {
            let mut conn = p.write().await?;
            conn.spawn_blocking(move |c| {
                use diesel::RunQueryDsl;
                c.immediate_transaction(|c| {
                    let now: i64 = mark_query!().get_result(c)?;
                    if now != mark {
                        return Ok(false);
                    }
                    rollups::upsert_rollups!(c, &rows,);
                    trace_spans::upsert_spans!(c, &spans,);
                    diesel::update(fold_marks::table.filter(fold_marks::name.eq(FOLDED)))
                        .set(fold_marks::seq.eq(last))
                        .execute(c)?;
                    Ok::<_, diesel::result::Error>(true)
                })
            })
            .await?
        }
        Pool::Pg(p) => {
            let mut conn = p.write().await?;
            use diesel_async::{AsyncConnection, RunQueryDsl};
            conn.transaction::<_, diesel::result::Error, _>(async |c| {
                let now: i64 = mark_query!().for_update().get_result(c).await?;
                if now != mark {
                    return Ok(false);
                }
                rollups::upsert_rollups!(c, &rows, .await);
                trace_spans::upsert_spans!(c, &spans, .await);
                diesel::update(fold_marks::table.filter(fold_marks::name.eq(FOLDED)))
                    .set(fold_marks::seq.eq(last))
                    .execute(c)
                    .await?;
                Ok(true)
            })
            .await?
        }
    })
}

/// Starts the materializer: folds what is pending every `every` (and once at start,
/// which is where a restart folds exactly the events committed past the mark before
/// the process stopped), with the sums `held` for this process's commits.
pub fn start(pool: Pool, held: std::sync::Arc<CommittedSums>, every: std::time::Duration) {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match fold_pending_with(&pool, Some(&held)).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(events = n, "cost events folded into the rollups"),
                Err(e) => tracing::warn!(error = %e, "folding cost events into the rollups failed; retrying"),
            }
        }
    });
}
