//! The span queue: finished spans wait here, bounded, for a thread of their own that
//! sends them in batches with the OTLP exporter. A call never waits for it: a full
//! queue drops the span, and a batch the collector did not take (down, refusing, or
//! past the exporter's timeout) is dropped too; both are counted in
//! `spendgate_otel_dropped_spans_total{reason}`.
//!
//! The SDK's `BatchSpanProcessor` does the same batching but keeps its drop count to
//! itself (a log line at shutdown), and counts no failed exports at all; an operator
//! needs both as a metric, so this small loop stands in for it.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use prometheus::IntCounterVec;

/// What the export thread is told.
enum Message {
    Span(Box<SpanData>),
    /// Send what is queued now, then answer.
    Flush(SyncSender<()>),
}

/// The counters of spans that left the queue: `exported`, and dropped by reason.
#[derive(Clone)]
pub struct SpanCounters {
    /// `spendgate_otel_exported_spans_total`.
    pub exported: prometheus::IntCounter,
    /// `spendgate_otel_dropped_spans_total{reason}`: `queue_full`, `export_failed`.
    pub dropped: IntCounterVec,
}

/// Bounds of the queue and its batches.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub queue_size: usize,
    pub batch_size: usize,
    pub batch_delay: Duration,
}

/// The producer side: cheap to push to from any thread.
pub struct SpanQueue {
    tx: SyncSender<Message>,
    counters: SpanCounters,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl SpanQueue {
    /// Starts the export thread.
    pub fn start<E>(exporter: E, bounds: Bounds, counters: SpanCounters) -> std::io::Result<SpanQueue>
    where
        E: SpanExporter + 'static,
    {
        for reason in ["queue_full", "export_failed"] {
            // Both series exist from the start, at 0.
            let _ = counters.dropped.with_label_values(&[reason]);
        }
        let (tx, rx) = mpsc::sync_channel(bounds.queue_size);
        let thread_counters = counters.clone();
        let thread = std::thread::Builder::new()
            .name("otel-spans".to_owned())
            .spawn(move || export_loop(&exporter, &rx, bounds, &thread_counters))?;
        Ok(SpanQueue { tx, counters, thread: Mutex::new(Some(thread)) })
    }

    /// Queues a finished span, or drops and counts it when the queue is full.
    pub fn push(&self, span: SpanData) {
        match self.tx.try_send(Message::Span(Box::new(span))) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.counters.dropped.with_label_values(&["queue_full"]).inc();
            }
        }
    }

    /// Sends what is queued and waits for it at most `timeout` (at shutdown).
    pub fn flush(&self, timeout: Duration) {
        let (ack_tx, ack_rx) = mpsc::sync_channel(1);
        let deadline = Instant::now() + timeout;
        let mut message = Message::Flush(ack_tx);
        // The queue may be full: retry until there is room or the time is up.
        loop {
            match self.tx.try_send(message) {
                Ok(()) => break,
                Err(TrySendError::Disconnected(_)) => return,
                Err(TrySendError::Full(m)) if Instant::now() < deadline => {
                    message = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(TrySendError::Full(_)) => return,
            }
        }
        let _ = ack_rx.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

impl Drop for SpanQueue {
    fn drop(&mut self) {
        // The thread ends when the channel closes; it is not waited for (an export
        // may be hanging on a collector that never answers).
        if let Ok(mut thread) = self.thread.lock() {
            drop(thread.take());
        }
    }
}

fn export_loop<E: SpanExporter>(
    exporter: &E,
    rx: &Receiver<Message>,
    bounds: Bounds,
    counters: &SpanCounters,
) {
    let mut batch: Vec<SpanData> = Vec::with_capacity(bounds.batch_size);
    let mut failing = false;
    loop {
        // Wait for the first span of a batch, then at most `batch_delay` for the rest.
        let mut flush = None;
        match rx.recv() {
            Ok(Message::Span(span)) => batch.push(*span),
            Ok(Message::Flush(ack)) => flush = Some(ack),
            Err(_) => return,
        }
        let deadline = Instant::now() + bounds.batch_delay;
        while flush.is_none() && batch.len() < bounds.batch_size {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Message::Span(span)) => batch.push(*span),
                Ok(Message::Flush(ack)) => flush = Some(ack),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    send(exporter, &mut batch, counters, &mut failing);
                    return;
                }
            }
        }
        if flush.is_some() {
            // Everything queued before the flush goes too.
            while let Ok(message) = rx.try_recv() {
                match message {
                    Message::Span(span) => batch.push(*span),
                    Message::Flush(ack) => drop(ack.try_send(())),
                }
                if batch.len() >= bounds.batch_size {
                    send(exporter, &mut batch, counters, &mut failing);
                }
            }
        }
        send(exporter, &mut batch, counters, &mut failing);
        if let Some(ack) = flush {
            let _ = ack.try_send(());
        }
    }
}

/// Exports one batch (emptying it); a failure drops the batch and is counted, and
/// logged when exporting starts or stops failing, not once per batch.
fn send<E: SpanExporter>(
    exporter: &E,
    batch: &mut Vec<SpanData>,
    counters: &SpanCounters,
    failing: &mut bool,
) {
    if batch.is_empty() {
        return;
    }
    let n = u64::try_from(batch.len()).unwrap_or(u64::MAX);
    let spans = std::mem::replace(batch, Vec::with_capacity(batch.capacity()));
    match futures_executor::block_on(exporter.export(spans)) {
        Ok(()) => {
            counters.exported.inc_by(n);
            if std::mem::replace(failing, false) {
                tracing::info!("OpenTelemetry span export works again");
            }
        }
        Err(e) => {
            counters.dropped.with_label_values(&["export_failed"]).inc_by(n);
            if !std::mem::replace(failing, true) {
                tracing::warn!(error = %e, spans = n, "OpenTelemetry span export failed; spans are dropped (counted in spendgate_otel_dropped_spans_total) until it works again");
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState};
    use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};

    use super::*;

    #[derive(Debug, Clone)]
    struct Fake {
        exported: Arc<AtomicUsize>,
        fail: bool,
        delay: Duration,
    }

    impl SpanExporter for Fake {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            std::thread::sleep(self.delay);
            if self.fail {
                return Err(OTelSdkError::InternalFailure("collector down".into()));
            }
            self.exported.fetch_add(batch.len(), Ordering::SeqCst);
            Ok(())
        }
    }

    fn counters() -> SpanCounters {
        SpanCounters {
            exported: prometheus::IntCounter::new("e", "e").unwrap(),
            dropped: IntCounterVec::new(prometheus::Opts::new("d", "d"), &["reason"]).unwrap(),
        }
    }

    fn span() -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(1),
                SpanId::from(1),
                TraceFlags::SAMPLED,
                false,
                TraceState::NONE,
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "s".into(),
            start_time: std::time::UNIX_EPOCH,
            end_time: std::time::UNIX_EPOCH + Duration::from_millis(1),
            attributes: Vec::new(),
            dropped_attributes_count: 0,
            events: Default::default(),
            links: Default::default(),
            status: Status::Unset,
            instrumentation_scope: Default::default(),
        }
    }

    const BOUNDS: Bounds = Bounds { queue_size: 4, batch_size: 2, batch_delay: Duration::from_millis(20) };

    #[test]
    fn spans_are_exported_in_batches_and_flushed() {
        let exported = Arc::new(AtomicUsize::new(0));
        let c = counters();
        let fake = Fake { exported: exported.clone(), fail: false, delay: Duration::ZERO };
        let q = SpanQueue::start(fake, BOUNDS, c.clone()).unwrap();
        for _ in 0..3 {
            q.push(span());
        }
        q.flush(Duration::from_secs(5));
        assert_eq!(exported.load(Ordering::SeqCst), 3);
        assert_eq!(c.exported.get(), 3);
    }

    #[test]
    fn failed_exports_and_a_full_queue_are_counted_as_drops() {
        let exported = Arc::new(AtomicUsize::new(0));
        let c = counters();
        let fake = Fake { exported, fail: true, delay: Duration::from_millis(200) };
        let q = SpanQueue::start(fake, BOUNDS, c.clone()).unwrap();
        let started = Instant::now();
        for _ in 0..20 {
            q.push(span());
        }
        assert!(started.elapsed() < Duration::from_millis(100), "pushing never waits for the exporter");
        q.flush(Duration::from_secs(10));
        let dropped = |r: &str| c.dropped.with_label_values(&[r]).get();
        assert!(dropped("queue_full") > 0);
        assert_eq!(dropped("queue_full") + dropped("export_failed"), 20);
        assert_eq!(c.exported.get(), 0);
    }
}
