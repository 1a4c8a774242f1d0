//! The accounting writer: group commit for cost events.
//!
//! Every cost event (SDK ingest now, proxied calls later) is handed to one writer
//! task. While a transaction is in flight, new events queue up; the next
//! transaction takes everything queued (up to [`MAX_BATCH_EVENTS`]) at once. No
//! timer adds latency to a lone event, and under load one commit serves many
//! requests. A caller is answered only after the transaction that holds its event
//! has committed: an acknowledged event is durable, with its budget effects.
//!
//! Proxied calls are different: nobody waits for their record (the answer has
//! already gone to the client; the request's reservations keep its budgets honest
//! until the commit). A transaction that holds only such events waits up to
//! `accounting_linger` for more, so that even at low load one commit (one WAL append
//! of the touched pages) serves several calls. An acknowledged event arriving during
//! the wait ends it at once.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::db::cost_events::{self, CommitResult, NewCostEvent, Outcome, SpendChange};
use crate::db::{DbError, Pool};
use crate::util::time;

/// Upper bound of events in one transaction.
pub const MAX_BATCH_EVENTS: usize = 2_000;
/// Queued jobs before callers wait for room (backpressure instead of memory growth).
const QUEUE_CAPACITY: usize = 4_096;

struct Job {
    events: Vec<NewCostEvent>,
    reply: oneshot::Sender<Result<Vec<Outcome>, String>>,
    /// A caller is waiting to acknowledge these events: commit without lingering.
    urgent: bool,
}

/// Handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct AccountingWriter {
    tx: mpsc::Sender<Job>,
}

/// Where the writer counts its work (see [`crate::metrics::Metrics::accounting`]).
#[derive(Clone)]
pub struct WriterMetrics(pub prometheus::IntCounterVec);

impl WriterMetrics {
    fn add(&self, figure: &str, n: u64) {
        self.0.with_label_values(&[figure]).inc_by(n);
    }
}

/// Called after each commit with the budgets whose spend moved.
pub type OnCommit = Box<dyn Fn(&[SpendChange]) + Send + Sync>;

impl AccountingWriter {
    /// Starts the writer on the current runtime.
    /// Starts the writer on the current runtime; `linger` is how long a commit of
    /// background events only ([`AccountingWriter::record`]) waits for company.
    pub fn start(pool: Pool, on_commit: OnCommit, linger: Duration, metrics: WriterMetrics) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        tokio::spawn(run(pool, rx, on_commit, linger, metrics));
        AccountingWriter { tx }
    }

    /// Commit jobs waiting for the writer.
    pub fn queued(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// Makes `events` durable; returns one outcome per event, in order. An error
    /// means nothing of this call was committed.
    pub async fn commit(&self, events: Vec<NewCostEvent>) -> Result<Vec<Outcome>, DbError> {
        self.submit(events, true).await
    }

    /// Like [`AccountingWriter::commit`], for events nobody is waiting to acknowledge
    /// (a proxied call, recorded after its answer): the commit may wait up to the
    /// linger for other events to share it.
    pub async fn record(&self, events: Vec<NewCostEvent>) -> Result<Vec<Outcome>, DbError> {
        self.submit(events, false).await
    }

    async fn submit(&self, events: Vec<NewCostEvent>, urgent: bool) -> Result<Vec<Outcome>, DbError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { events, reply, urgent })
            .await
            .map_err(|_| DbError::unavailable("accounting writer stopped"))?;
        rx.await.map_err(|_| DbError::unavailable("accounting writer stopped"))?.map_err(DbError::Unavailable)
    }
}

async fn run(
    pool: Pool,
    mut rx: mpsc::Receiver<Job>,
    on_commit: OnCommit,
    linger: Duration,
    metrics: WriterMetrics,
) {
    while let Some(first) = rx.recv().await {
        let mut urgent = first.urgent;
        let mut count = first.events.len();
        let mut jobs = vec![first];
        let deadline = tokio::time::Instant::now() + linger;
        while count < MAX_BATCH_EVENTS {
            let job = match rx.try_recv() {
                Ok(job) => job,
                Err(mpsc::error::TryRecvError::Disconnected) => break,
                Err(mpsc::error::TryRecvError::Empty) if urgent || linger.is_zero() => break,
                Err(mpsc::error::TryRecvError::Empty) => {
                    match tokio::time::timeout_at(deadline, rx.recv()).await {
                        Ok(Some(job)) => job,
                        Ok(None) | Err(_) => break,
                    }
                }
            };
            urgent |= job.urgent;
            count += job.events.len();
            jobs.push(job);
        }
        let mut sizes = Vec::with_capacity(jobs.len());
        let mut events = Vec::with_capacity(count);
        let mut replies = Vec::with_capacity(jobs.len());
        for job in jobs {
            sizes.push(job.events.len());
            events.extend(job.events);
            replies.push(job.reply);
        }
        let started = std::time::Instant::now();
        let result = commit_with_retry(&pool, std::sync::Arc::new(events)).await;
        metrics.add("commit_microseconds", u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        match result {
            Ok(CommitResult { outcomes, changes }) => {
                metrics.add("commits", 1);
                metrics.add("events", u64::try_from(count).unwrap_or(u64::MAX));
                tracing::debug!(
                    events = count,
                    jobs = sizes.len(),
                    micros = started.elapsed().as_micros(),
                    "committed"
                );
                on_commit(&changes);
                let mut outcomes = outcomes.into_iter();
                for (size, reply) in sizes.into_iter().zip(replies) {
                    let _ = reply.send(Ok(outcomes.by_ref().take(size).collect()));
                }
            }
            Err(e) => {
                metrics.add("failed_commits", 1);
                tracing::error!(error = %e, "cost event commit failed");
                for reply in replies {
                    let _ = reply.send(Err(e.to_string()));
                }
            }
        }
    }
}

/// One retry covers a transient lock or a connection dropped by the server; the
/// transaction either committed whole or not at all, and duplicates are skipped on
/// (org, provider, dedup key), so a retry can never count an event twice.
async fn commit_with_retry(
    pool: &Pool,
    events: std::sync::Arc<Vec<NewCostEvent>>,
) -> Result<CommitResult, DbError> {
    match cost_events::commit_batch(pool, events.clone(), time::now_ms()).await {
        Err(DbError::Unavailable(e)) => {
            tracing::warn!(error = %e, "retrying cost event commit");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            cost_events::commit_batch(pool, events, time::now_ms()).await
        }
        other => other,
    }
}
