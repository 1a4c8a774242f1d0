//! Durable answers (`durable_answers`): a proxied call's answer ends only once its
//! cost event is committed, so a process killed at any moment leaves no call that a
//! client saw answered whole without its record.
//!
//! The answer's body is wrapped: a JSON answer's last chunk (with a `Content-Length`,
//! its last bytes) and a stream's end are held back until the settlement says the
//! call's record is in. A record that could not be committed ends the body with an
//! error instead, so the client never holds a whole answer nobody recorded. The
//! chunks before the last pass at once: an event stream reaches the client as it
//! comes, and from the chunk that holds its end marker on (see
//! [`DurableEnd::hold_from_end_marker`]) it waits: the official SDKs stop reading at a
//! stream's last event (`data: [DONE]`, `message_stop`, `response.completed`) without
//! waiting for the body's end, so that event is the answer's end to them.
//!
//! The same wrapper holds back the end of a call an `exactCeiling` budget admitted
//! until the holds beyond its cost are given back (see `Reservation::give_back`):
//! there the settlement answers `true` as soon as they are, before the commit.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use tokio::sync::oneshot;

/// The sender the settlement answers on (`true`: committed), and the receiver the
/// body waits on.
pub fn channel() -> (oneshot::Sender<bool>, oneshot::Receiver<bool>) {
    oneshot::channel()
}

/// A body whose end waits for the call's record.
pub struct DurableEnd<S> {
    inner: Pin<Box<S>>,
    /// An event stream: chunks pass at once, only the end waits.
    sse: bool,
    /// The last chunk seen, not passed yet (JSON answers); an event stream's chunks
    /// from its end marker on.
    held: Option<Bytes>,
    /// Set by the meter once the stream's end marker came (event streams).
    end_marker: Option<Arc<AtomicBool>>,
    /// The inner body has ended; what is left waits for `recorded`.
    ended: bool,
    /// `None` once answered.
    recorded: Option<oneshot::Receiver<bool>>,
    /// What the settlement answered.
    committed: Option<bool>,
}

impl<S> DurableEnd<S> {
    pub fn new(inner: S, sse: bool, recorded: oneshot::Receiver<bool>) -> Self {
        DurableEnd {
            inner: Box::pin(inner),
            sse,
            held: None,
            end_marker: None,
            ended: false,
            recorded: Some(recorded),
            committed: None,
        }
    }

    /// An event stream's chunks pass until `flag` is set (by the meter, as the chunk
    /// with the end marker comes out: `Metered::signal_end_marker`); that chunk and any
    /// after it wait with the end.
    pub fn hold_from_end_marker(mut self, flag: Arc<AtomicBool>) -> Self {
        self.end_marker = Some(flag);
        self
    }

    fn past_end_marker(&self) -> bool {
        self.end_marker.as_ref().is_some_and(|f| f.load(Ordering::Acquire))
    }

    fn hold(&mut self, chunk: Bytes) {
        self.held = Some(match self.held.take() {
            None => chunk,
            Some(before) => {
                let mut both = BytesMut::from(before);
                both.extend_from_slice(&chunk);
                both.freeze()
            }
        });
    }
}

impl<S> Stream for DurableEnd<S>
where
    S: Stream<Item = Result<Bytes, std::io::Error>>,
{
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if this.ended {
                let committed = match (this.committed, this.recorded.as_mut()) {
                    (Some(committed), _) => committed,
                    (None, None) => false,
                    (None, Some(rx)) => match Pin::new(rx).poll(cx) {
                        Poll::Pending => return Poll::Pending,
                        Poll::Ready(answer) => {
                            // A oneshot must not be polled again once answered.
                            this.recorded = None;
                            let committed = answer.unwrap_or(false);
                            this.committed = Some(committed);
                            if !committed {
                                // Once; the next poll ends the body.
                                this.held = None;
                                let e = std::io::Error::other("the call was not recorded");
                                return Poll::Ready(Some(Err(e)));
                            }
                            committed
                        }
                    },
                };
                return Poll::Ready(this.held.take().filter(|_| committed).map(Ok));
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Ready(Some(Ok(chunk))) if this.sse && this.past_end_marker() => this.hold(chunk),
                Poll::Ready(Some(Ok(chunk))) if this.sse => return Poll::Ready(Some(Ok(chunk))),
                Poll::Ready(Some(Ok(chunk))) => {
                    if let Some(previous) = this.held.replace(chunk) {
                        return Poll::Ready(Some(Ok(previous)));
                    }
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => this.ended = true,
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use futures_util::StreamExt;

    fn body(chunks: &[&'static str]) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
        futures_util::stream::iter(
            chunks.iter().map(|c| Ok(Bytes::from_static(c.as_bytes()))).collect::<Vec<_>>(),
        )
    }

    #[tokio::test]
    async fn a_json_answer_keeps_its_last_chunk_until_the_record_is_in() {
        let (tx, rx) = channel();
        let mut s = DurableEnd::new(body(&["a", "b", "c"]), false, rx);
        assert_eq!(s.next().await.unwrap().unwrap(), "a");
        assert_eq!(s.next().await.unwrap().unwrap(), "b");
        let waiting = futures_util::poll!(s.next());
        assert!(waiting.is_pending(), "the last chunk waits for the record");
        tx.send(true).unwrap();
        assert_eq!(s.next().await.unwrap().unwrap(), "c");
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_stream_holds_its_end_marker_with_its_end() {
        let (tx, rx) = channel();
        let flag = Arc::new(AtomicBool::new(false));
        let setter = flag.clone();
        // The meter sets the flag as the chunk with the end marker ("b") comes out.
        let marked = body(&["a", "b", "\n"]).map(move |c| {
            if c.as_ref().is_ok_and(|c| c == "b") {
                setter.store(true, Ordering::Release);
            }
            c
        });
        let mut s = DurableEnd::new(marked, true, rx).hold_from_end_marker(flag);
        assert_eq!(s.next().await.unwrap().unwrap(), "a");
        assert!(futures_util::poll!(s.next()).is_pending(), "the end marker waits for the record");
        tx.send(true).unwrap();
        assert_eq!(s.next().await.unwrap().unwrap(), "b\n");
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn a_stream_passes_its_chunks_and_holds_its_end() {
        let (tx, rx) = channel();
        let mut s = DurableEnd::new(body(&["a", "b"]), true, rx);
        assert_eq!(s.next().await.unwrap().unwrap(), "a");
        assert_eq!(s.next().await.unwrap().unwrap(), "b");
        assert!(futures_util::poll!(s.next()).is_pending());
        tx.send(true).unwrap();
        assert!(s.next().await.is_none());
    }

    #[tokio::test]
    async fn an_unrecorded_call_ends_in_an_error_not_a_whole_answer() {
        for sse in [false, true] {
            let (tx, rx) = channel();
            let mut s = DurableEnd::new(body(&["a", "b"]), sse, rx);
            assert_eq!(s.next().await.unwrap().unwrap(), "a");
            if sse {
                assert_eq!(s.next().await.unwrap().unwrap(), "b");
            }
            drop(tx);
            assert!(s.next().await.unwrap().is_err());
            assert!(s.next().await.is_none());
        }
    }
}
