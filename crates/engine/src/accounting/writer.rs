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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::db::cost_events::{self, Batch, CommitResult, NewCostEvent, Outcome, SpendChange};
use crate::db::fold_sums::{CommittedSums, FoldSums};
use crate::db::{DbError, Pool};
use crate::util::time;
use actors::registry::ReservationTicket;

/// Upper bound of events in one transaction.
pub const MAX_BATCH_EVENTS: usize = 2_000;
/// Queued jobs before callers wait for room (backpressure instead of memory growth).
const QUEUE_CAPACITY: usize = 4_096;

struct Job {
    /// Moved out while a commit holds them (see [`take_events`]).
    events: Vec<NewCostEvent>,
    /// The events' rollup sums and trace spans, aggregated by the caller when it hands
    /// over a batch: the writer, which serializes every commit, only merges them (for
    /// the fold, see [`crate::db::fold_sums`]). A lone event's (a proxied call's) are
    /// aggregated with the commit's other lone events instead, where calls of one
    /// shape share their keys.
    sums: Option<FoldSums>,
    size: usize,
    reply: oneshot::Sender<Result<Vec<Outcome>, String>>,
    /// A caller is waiting to acknowledge these events: commit without lingering.
    urgent: bool,
}

/// Handle to the writer task; cheap to clone.
#[derive(Clone)]
pub struct AccountingWriter {
    tx: mpsc::Sender<Job>,
    /// The writer's own runtime, when it has one (see [`spawn_thread`]).
    runtime: Option<tokio::runtime::Handle>,
    /// The rollup sums of its commits, until the fold takes them.
    committed: Arc<CommittedSums>,
}

/// Where the writer counts its work (see [`crate::metrics::Metrics::accounting`]).
#[derive(Clone)]
pub struct WriterMetrics(pub prometheus::IntCounterVec);

impl WriterMetrics {
    fn add(&self, figure: &str, n: u64) {
        self.0.with_label_values(&[figure]).inc_by(n);
    }
}

/// Called after each commit with the budgets whose spend moved without a reservation,
/// and the reservations its events settle (each with the event's committed cost).
pub type OnCommit = Box<dyn Fn(&[SpendChange], Vec<(ReservationTicket, i64)>) + Send + Sync>;

impl AccountingWriter {
    /// Starts the writer on its own thread (see [`spawn_thread`]); `linger` is how long
    /// a commit of background events only ([`AccountingWriter::record`]) waits for
    /// company.
    pub fn start(
        pool: Pool,
        outbox: crate::outbox::Outbox,
        on_commit: OnCommit,
        linger: Duration,
        metrics: WriterMetrics,
    ) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE_CAPACITY);
        let committed = Arc::new(CommittedSums::default());
        let runtime = spawn_thread(run(pool, outbox, rx, on_commit, committed.clone(), linger, metrics));
        AccountingWriter { tx, runtime, committed }
    }

    /// The rollup sums of the commits made so far and not folded yet, for the fold.
    pub fn committed_sums(&self) -> Arc<CommittedSums> {
        self.committed.clone()
    }

    /// Runs `task` beside the writer, on its thread (a proxied call's settlement: the
    /// work that turns a finished answer into its cost event); on the caller's runtime
    /// when the writer has no thread of its own.
    pub fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        match self.runtime.clone().or_else(|| tokio::runtime::Handle::try_current().ok()) {
            Some(runtime) => {
                runtime.spawn(task);
            }
            None => tracing::error!("no runtime to run a settlement on; its reservation is released"),
        }
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

    async fn submit(&self, mut events: Vec<NewCostEvent>, urgent: bool) -> Result<Vec<Outcome>, DbError> {
        events.iter_mut().for_each(sanitize);
        // A batch's on the caller's thread: the writer only merges these sums.
        let sums = (events.len() > 1).then(|| FoldSums::of(&events));
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Job { size: events.len(), events, sums, reply, urgent })
            .await
            .map_err(|_| DbError::unavailable("accounting writer stopped"))?;
        rx.await.map_err(|_| DbError::unavailable("accounting writer stopped"))?.map_err(DbError::Unavailable)
    }
}

/// Largest cost, token count and duration one event may carry (one million dollars,
/// ten billion tokens, one week). The edges (ingest, MCP, the proxy) refuse or never
/// produce larger values; the writer clamps as a last line, so that no sum in a shared
/// commit can overflow.
pub const MAX_EVENT_COST_MICRODOLLARS: i64 = 1_000_000_000_000;
pub const MAX_EVENT_TOKENS: i64 = 10_000_000_000;
pub const MAX_EVENT_DURATION_MS: i64 = 604_800_000;

/// Makes an event storable on both backends before it is queued: numbers within the
/// bounds above, and no NUL character in any text (PostgreSQL refuses it, which would
/// fail the whole commit).
fn sanitize(event: &mut NewCostEvent) {
    let row = &mut event.row;
    let floor = if super::event::is_refund(row) { -MAX_EVENT_COST_MICRODOLLARS } else { 0 };
    let clamped = row.cost_microdollars.clamp(floor, MAX_EVENT_COST_MICRODOLLARS);
    if clamped != row.cost_microdollars {
        tracing::warn!(cost = row.cost_microdollars, request_id = %row.request_id, "cost event cost clamped");
        row.cost_microdollars = clamped;
    }
    for n in [
        &mut row.input_tokens,
        &mut row.output_tokens,
        &mut row.cached_input_tokens,
        &mut row.reasoning_tokens,
    ] {
        *n = (*n).clamp(0, MAX_EVENT_TOKENS);
    }
    for d in [&mut row.duration_ms, &mut row.upstream_duration_ms].into_iter().flatten() {
        *d = (*d).clamp(0, MAX_EVENT_DURATION_MS);
    }
    let texts = [
        &mut row.org_id,
        &mut row.request_id,
        &mut row.provider,
        &mut row.model,
        &mut row.tags,
        &mut row.dedup_key,
    ];
    let optional = [
        &mut row.session_id,
        &mut row.trace_id,
        &mut row.tool_name,
        &mut row.tool_server,
        &mut row.customer_id,
    ];
    for text in texts.into_iter().chain(optional.into_iter().flatten()) {
        if text.contains('\0') {
            *text = text.replace('\0', "\u{fffd}");
        }
    }
    if event.tags.iter().any(|(k, v)| k.contains('\0') || v.contains('\0')) {
        event.tags = std::mem::take(&mut event.tags)
            .into_iter()
            .map(|(k, v)| (k.replace('\0', "\u{fffd}"), v.replace('\0', "\u{fffd}")))
            .collect();
    }
}

/// Runs the writer on a thread of its own, with a runtime of its own whose one blocking
/// thread runs the SQLite commits: the commits, and the proxied calls' settlements
/// spawned beside them ([`AccountingWriter::spawn`]), stay off the HTTP workers' and
/// the actix system's threads. Not at a lower priority: the writer is what bounds the
/// proxy's throughput at saturation (admission's unsettled-call permits wait for it),
/// and measured on a shared 2-core machine a lower priority (`nice` 10) cut that
/// throughput instead of the latency tail. Without a runtime of its own (it could not
/// be built), the writer runs on the caller's. Returns the handle of the writer's
/// runtime.
fn spawn_thread(
    writer: impl std::future::Future<Output = ()> + Send + 'static,
) -> Option<tokio::runtime::Handle> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .max_blocking_threads(1)
        .thread_keep_alive(Duration::from_secs(3600))
        .thread_name("accounting-sql")
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            tracing::warn!(error = %e, "no runtime for the accounting writer; it shares the caller's");
            tokio::spawn(writer);
            return None;
        }
    };
    let handle = runtime.handle().clone();
    let spawned = std::thread::Builder::new()
        .name("accounting-writer".to_owned())
        .spawn(move || runtime.block_on(writer));
    match spawned {
        Ok(_) => Some(handle),
        Err(e) => {
            tracing::error!(error = %e, "could not start the accounting writer thread");
            None
        }
    }
}

async fn run(
    pool: Pool,
    outbox: crate::outbox::Outbox,
    mut rx: mpsc::Receiver<Job>,
    on_commit: OnCommit,
    committed: Arc<CommittedSums>,
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
        let commit = |events| cost_events::commit_batch(&pool, &outbox, events, time::now_ms());
        commit_isolating(&commit, jobs, &on_commit, &committed, &metrics).await;
    }
}

/// Commits `jobs` together; when that fails for a reason a retry cannot mend (a row
/// the database refuses, an overflow), splits them in halves and commits each, so one
/// bad event never sinks the other callers' events of the same commit. A job that
/// fails alone is answered with the error (its caller acknowledged nothing).
async fn commit_isolating<C, F>(
    commit: &C,
    jobs: Vec<Job>,
    on_commit: &OnCommit,
    committed: &CommittedSums,
    metrics: &WriterMetrics,
) where
    C: Fn(Events) -> F,
    F: std::future::Future<Output = Result<CommitResult, DbError>>,
{
    let mut groups = vec![jobs];
    while let Some(mut group) = groups.pop() {
        let count = group.iter().map(|j| j.size).sum::<usize>();
        let started = std::time::Instant::now();
        let result = commit_with_retry(commit, &mut group, metrics).await;
        metrics.add("commit_microseconds", u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
        match result {
            Ok((CommitResult { outcomes, changes, numbers, .. }, settled, sums)) => {
                committed.push(*numbers.start(), *numbers.end(), sums);
                metrics.add("commits", 1);
                metrics.add("events", u64::try_from(count).unwrap_or(u64::MAX));
                tracing::debug!(
                    events = count,
                    jobs = group.len(),
                    micros = started.elapsed().as_micros(),
                    "committed"
                );
                on_commit(&changes, settled);
                let mut outcomes = outcomes.into_iter();
                for job in group {
                    let _ = job.reply.send(Ok(outcomes.by_ref().take(job.size).collect()));
                }
            }
            Err(e) if group.len() > 1 => {
                metrics.add("split_commits", 1);
                tracing::warn!(error = %e, jobs = group.len(), "cost event commit failed; committing its halves apart");
                let second = group.split_off(group.len() / 2);
                groups.push(second);
                groups.push(group);
            }
            Err(e) => {
                metrics.add("failed_commits", 1);
                for job in group {
                    for event in &job.events {
                        // The whole event, so that an operator can recover it.
                        tracing::error!(error = %e, event = ?event.row, "cost event could not be committed");
                    }
                    let _ = job.reply.send(Err(e.to_string()));
                }
            }
        }
    }
}

/// The events of one commit attempt, shared with the attempt.
type Events = std::sync::Arc<Batch>;

/// First retry after this; doubled after each failure up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
const RETRY_MAX: Duration = Duration::from_secs(5);
/// A caller waiting to acknowledge its events gets an error after this many failed
/// attempts; events nobody waits for (proxied calls, already answered) are retried
/// until the database is back.
const URGENT_ATTEMPTS: u32 = 3;

/// Retries while the database is unavailable (a transient lock, a dropped connection,
/// a server restart), backing off, and says so in logs and metrics. The transaction
/// either committed whole or not at all, and duplicates are skipped on
/// (org, provider, dedup key), so a retry can never count an event twice. Jobs whose
/// callers wait are answered with the error after a few attempts and leave the group.
async fn commit_with_retry<C, F>(
    commit: &C,
    group: &mut Vec<Job>,
    metrics: &WriterMetrics,
) -> Result<(CommitResult, Vec<(ReservationTicket, i64)>, FoldSums), DbError>
where
    C: Fn(Events) -> F,
    F: std::future::Future<Output = Result<CommitResult, DbError>>,
{
    let mut delay = RETRY_FIRST;
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let batch = std::sync::Arc::new(take_batch(group));
        let e = match commit(batch.clone()).await {
            Ok(done) => {
                let settled = batch
                    .events
                    .iter()
                    .filter_map(|e| e.ticket.clone().map(|ticket| (ticket, e.row.cost_microdollars)))
                    .collect();
                let sums = sums_of_inserted(group, &batch.events, &done.outcomes);
                return Ok((done, settled, sums));
            }
            Err(DbError::Unavailable(e)) => {
                give_back(group, batch);
                e
            }
            Err(other) => {
                give_back(group, batch);
                return Err(other);
            }
        };
        metrics.add("retries", 1);
        tracing::warn!(error = %e, attempt = attempts, jobs = group.len(), "database unavailable: retrying the cost event commit");
        if attempts >= URGENT_ATTEMPTS && group.iter().any(|j| j.urgent) {
            let (urgent, background): (Vec<Job>, Vec<Job>) = group.drain(..).partition(|j| j.urgent);
            for job in urgent {
                let _ = job.reply.send(Err(format!("database unavailable: {e}")));
            }
            *group = background;
            if group.is_empty() {
                return Err(DbError::Unavailable(e));
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(RETRY_MAX);
    }
}

/// The rollup sums of a commit's inserted events (`events` and `outcomes` in job
/// order): a job's sums aggregated by its caller when all of its events were
/// inserted (the common case for batches); the other inserted events (lone events,
/// and a batch with a duplicate) aggregated here together. A duplicate adds nothing.
/// Takes the jobs' sums: the commit is done with them.
fn sums_of_inserted(group: &mut [Job], events: &[NewCostEvent], outcomes: &[Outcome]) -> FoldSums {
    let inserted = |o: &Outcome| matches!(o, Outcome::Inserted { .. });
    let mut total = FoldSums::default();
    let mut here: Vec<&NewCostEvent> = Vec::new();
    let mut start = 0;
    for job in group {
        let end = (start + job.size).min(events.len()).min(outcomes.len());
        let (mine, theirs) = (&events[start..end], &outcomes[start..end]);
        start = end;
        match job.sums.take() {
            Some(sums) if theirs.iter().all(inserted) => total.merge(sums),
            _ => here.extend(mine.iter().zip(theirs).filter(|(_, o)| inserted(o)).map(|(e, _)| e)),
        }
    }
    if !here.is_empty() {
        total.merge(FoldSums::of(here));
    }
    total
}

/// The events of `group`, in job order, moved out of the jobs for one commit.
fn take_batch(group: &mut [Job]) -> Batch {
    let mut batch = Batch { events: Vec::with_capacity(group.iter().map(|j| j.size).sum()) };
    for job in group.iter_mut() {
        batch.events.append(&mut job.events);
    }
    batch
}

/// Puts the events of a finished commit attempt back into their jobs (for a retry, a
/// split, or the log of a failure). The commit has let go of them, so this is a move.
fn give_back(group: &mut [Job], batch: Events) {
    let Batch { events } = std::sync::Arc::try_unwrap(batch).unwrap_or_else(|shared| (*shared).clone());
    let mut events = events.into_iter();
    for job in group.iter_mut() {
        job.events = events.by_ref().take(job.size).collect();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::db::cost_events::BudgetTarget;
    use crate::db::models::CostEvent;

    fn event(org: &str, request_id: &str, cost: i64, target: Option<&str>) -> NewCostEvent {
        let id = crate::util::ids::new_id();
        let row = CostEvent {
            dedup_key: request_id.to_owned(),
            id,
            org_id: org.to_owned(),
            request_id: request_id.to_owned(),
            api_key_id: None,
            user_id: None,
            provider: "openai".to_owned(),
            model: "gpt-4o\0mini".to_owned(),
            input_tokens: -5,
            output_tokens: 1,
            cached_input_tokens: 0,
            reasoning_tokens: 0,
            cost_microdollars: cost,
            duration_ms: None,
            upstream_duration_ms: None,
            session_id: None,
            trace_id: None,
            event_type: "llm".to_owned(),
            tool_name: None,
            tool_server: None,
            tags: "{}".to_owned(),
            customer_id: None,
            cost_breakdown: None,
            source: "sdk".to_owned(),
            budget_status: "skipped".to_owned(),
            action_id: None,
            estimated: false,
            created_at: 1,
            tool_calls_requested: None,
            tool_definition_tokens: 0,
        };
        let targets = target
            .map(|t| {
                vec![BudgetTarget { org_id: org.to_owned(), entity_type: "tag", entity_id: t.to_owned() }]
            })
            .unwrap_or_default();
        NewCostEvent {
            row,
            tags: Default::default(),
            targets,
            outbox: Vec::new(),
            holds: Vec::new(),
            leased: Vec::new(),
            reserved: false,
            body: None,
            ticket: None,
        }
    }

    #[test]
    fn sanitize_clamps_numbers_and_strips_nul() {
        let mut e = event("o", "r", i64::MAX, None);
        sanitize(&mut e);
        assert_eq!(e.row.cost_microdollars, MAX_EVENT_COST_MICRODOLLARS);
        assert_eq!(e.row.input_tokens, 0);
        assert_eq!(e.row.model, "gpt-4o\u{fffd}mini");
    }

    fn job(e: NewCostEvent, urgent: bool) -> (Job, oneshot::Receiver<Result<Vec<Outcome>, String>>) {
        let (reply, rx) = oneshot::channel();
        (Job { size: 1, events: vec![e], sums: None, reply, urgent }, rx)
    }

    fn metrics() -> WriterMetrics {
        WriterMetrics(prometheus::IntCounterVec::new(prometheus::Opts::new("t", "t"), &["figure"]).unwrap())
    }

    /// A commit that fails for good when it holds the poisoned event.
    async fn fake_commit(batch: Events) -> Result<CommitResult, DbError> {
        if batch.events.iter().any(|e| e.row.request_id == "poison") {
            return Err(DbError::Query(diesel::result::Error::RollbackTransaction));
        }
        let outcomes = batch
            .events
            .iter()
            .map(|e| Outcome::Inserted { id: e.row.id.clone(), created_at: e.row.created_at })
            .collect();
        Ok(CommitResult {
            outcomes,
            changes: Vec::new(),
            deliveries: 0,
            numbers: std::ops::RangeInclusive::new(1, 0),
        })
    }

    /// One event that cannot be stored fails its own job only: the other jobs of the
    /// same commit are committed, split and retried apart.
    #[tokio::test]
    async fn a_bad_event_does_not_sink_the_others() {
        let mut jobs = Vec::new();
        let mut answers = Vec::new();
        for (i, id) in ["a", "b", "poison", "c", "d", "e", "f"].into_iter().enumerate() {
            let (j, rx) = job(event("org", id, 5, None), i % 2 == 0);
            jobs.push(j);
            answers.push((id, rx));
        }
        let commit = |events| fake_commit(events);
        let ignore: OnCommit = Box::new(|_: &[SpendChange], _| {});
        commit_isolating(&commit, jobs, &ignore, &CommittedSums::default(), &metrics()).await;
        for (id, rx) in answers {
            let answer = rx.await.unwrap();
            assert_eq!(answer.is_ok(), id != "poison", "{id}: {answer:?}");
        }
    }

    /// A budget whose spend would pass i64::MAX stays an integer at i64::MAX (SQLite
    /// would make it a REAL).
    /// A fresh SQLite database holding one `warn` budget `b1` on the tag `hot=1` of
    /// `org`; the directory must outlive the pool.
    async fn db_with_tag_budget(org: &str, max: i64, spend: i64) -> (tempfile::TempDir, Pool) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("w.db").display());
        crate::db::migrate(&url).await.unwrap();
        let pool = Pool::connect(&url, 2).unwrap();
        let now = time::now_ms();
        let seed = async {
            crate::with_conn!(&pool, write, |conn| {
                use diesel_async::RunQueryDsl;
                diesel::sql_query(format!(
                    "INSERT INTO budgets (id, org_id, entity_type, entity_id, max_budget_microdollars, \
                     spend_microdollars, policy, threshold_percentages, created_at, updated_at) \
                     VALUES ('b1', '{org}', 'tag', 'hot=1', {max}, {spend}, 'warn', '[]', {now}, {now})",
                ))
                .execute(conn)
                .await?;
                Ok::<_, DbError>(())
            })
        };
        seed.await.unwrap();
        (dir, pool)
    }

    #[tokio::test]
    async fn spend_saturates_instead_of_overflowing() {
        let (_dir, pool) = db_with_tag_budget("org-b", i64::MAX, i64::MAX - 10).await;
        let writer = AccountingWriter::start(
            pool.clone(),
            crate::outbox::Outbox::new(),
            Box::new(|_, _| {}),
            Duration::ZERO,
            metrics(),
        );
        let outcomes = writer.commit(vec![event("org-b", "b", 100, Some("hot=1"))]).await.unwrap();
        assert!(matches!(outcomes[0], Outcome::Inserted { .. }));
        let read = async {
            crate::with_conn!(&pool, read, |conn| {
                use diesel_async::RunQueryDsl;
                let (spend, kind): (i64, String) = diesel::select((
                    diesel::dsl::sql::<diesel::sql_types::BigInt>("(SELECT spend_microdollars FROM budgets)"),
                    diesel::dsl::sql::<diesel::sql_types::Text>(
                        "(SELECT typeof(spend_microdollars) FROM budgets)",
                    ),
                ))
                .get_result(conn)
                .await?;
                Ok::<_, DbError>((spend, kind))
            })
        };
        assert_eq!(read.await.unwrap(), (i64::MAX, "integer".to_owned()));
    }

    /// Each commit that adds spend to a budget row increments its `spend_seq` and tells
    /// the actors that number (the commit's mark), which the row read by an actor's load
    /// carries too: what lets a refresh count every settle exactly once.
    #[tokio::test]
    async fn each_commit_marks_the_budget_rows_it_adds_spend_to() {
        let (_dir, pool) = db_with_tag_budget("org-m", 1_000_000, 0).await;
        let marks = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let on_commit: OnCommit = {
            let marks = marks.clone();
            Box::new(move |changes: &[SpendChange], _| {
                let mut marks = marks.lock().unwrap();
                marks.extend(changes.iter().map(|c| (c.budget_id.clone(), c.spend_seq, c.added)));
            })
        };
        let writer = AccountingWriter::start(
            pool.clone(),
            crate::outbox::Outbox::new(),
            on_commit,
            Duration::ZERO,
            metrics(),
        );
        writer.commit(vec![event("org-m", "m1", 100, Some("hot=1"))]).await.unwrap();
        writer
            .commit(vec![event("org-m", "m2", 30, Some("hot=1")), event("org-m", "m3", 5, None)])
            .await
            .unwrap();
        // A duplicate adds nothing: no mark, no increment.
        writer.commit(vec![event("org-m", "m1", 100, Some("hot=1"))]).await.unwrap();
        let expected = vec![("b1".to_owned(), 1, 100), ("b1".to_owned(), 2, 30)];
        assert_eq!(*marks.lock().unwrap(), expected);
        let (row, spend_seq) =
            crate::db::budgets::find_for_actor(&pool, "org-m", "tag", "hot=1").await.unwrap().unwrap();
        assert_eq!((row.spend_microdollars, spend_seq), (130, 2));
    }
}
