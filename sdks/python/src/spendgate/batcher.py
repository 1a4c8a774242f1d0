"""A background batcher for cost events: code that calls a provider without the
proxy queues events here and they reach ``POST /api/cost-events/batch`` in bounded
batches, on a timer, on demand, and at interpreter exit.

Each event's idempotency key is fixed when it is created, so a batch sent again after
a lost answer or a 503 is stored once. A full queue raises :class:`QueueFullError`
from :meth:`CostBatcher.add` (and counts it) rather than dropping silently.
"""

from __future__ import annotations

import atexit
import collections
import threading
from typing import Callable, Deque, List, Optional

from .client import Spendgate
from .errors import QueueFullError, SpendgateAPIError, SpendgateConnectionError, SpendgateError
from .models import CostEvent

MAX_BATCH = 100


class CostBatcher:
    """Queues cost events and posts them in batches from a daemon thread.

    Args:
        client: the client that sends (its retry settings apply to each batch).
        max_batch_size: events per request, 1-100.
        flush_interval: seconds between timed flushes.
        max_queue: the most events held; one more raises :class:`QueueFullError`.
        on_error: called with the error and the events of a batch the server refused
            (a 4xx other than 429); such a batch is not retried.
    """

    def __init__(
        self,
        client: Spendgate,
        *,
        max_batch_size: int = MAX_BATCH,
        flush_interval: float = 5.0,
        max_queue: int = 10_000,
        on_error: Optional[Callable[[SpendgateError, List[CostEvent]], None]] = None,
    ) -> None:
        if not 1 <= max_batch_size <= MAX_BATCH:
            raise ValueError(f"max_batch_size must be 1 to {MAX_BATCH}")
        if flush_interval <= 0 or max_queue < 1:
            raise ValueError("flush_interval must be positive and max_queue at least 1")
        self._client = client
        self._size = max_batch_size
        self._interval = flush_interval
        self._max_queue = max_queue
        self._on_error = on_error
        self._queue: Deque[CostEvent] = collections.deque()
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self.sent = 0
        """Events the server accepted (new or duplicate)."""
        self.rejected = 0
        """Events in batches the server refused."""
        self.overflowed = 0
        """Events refused because the queue was full."""
        self._thread = threading.Thread(target=self._loop, name="spendgate-batcher", daemon=True)
        self._thread.start()
        atexit.register(self.close)

    def add(self, event: CostEvent) -> None:
        """Queues one event; a full batch wakes the sender at once.

        Raises:
            QueueFullError: the queue holds ``max_queue`` events already.
        """
        with self._lock:
            if self._closed:
                raise SpendgateError("the batcher is closed")
            if len(self._queue) >= self._max_queue:
                self.overflowed += 1
                raise QueueFullError(f"cost-event queue full ({self._max_queue} events)")
            self._queue.append(event)
            full = len(self._queue) >= self._size
        if full:
            self._wake.set()

    report = add

    @property
    def pending(self) -> int:
        """Events queued and not yet accepted."""
        with self._lock:
            return len(self._queue)

    def flush(self) -> None:
        """Sends everything queued now and returns when done (or when a batch could
        not be sent: those events stay queued for the next flush)."""
        with self._send_lock:
            while self._send_one():
                pass

    def close(self) -> None:
        """Flushes and stops the thread; called at interpreter exit too."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._wake.set()
        self._thread.join(timeout=self._interval + 1)
        self.flush()
        atexit.unregister(self.close)

    def _loop(self) -> None:
        while not self._closed:
            self._wake.wait(self._interval)
            self._wake.clear()
            if self._closed:
                return
            self.flush()

    def _send_one(self) -> bool:
        """Sends the oldest batch; True when it left the queue (sent or refused)."""
        with self._lock:
            batch = [self._queue[i] for i in range(min(self._size, len(self._queue)))]
        if not batch:
            return False
        try:
            self._client.report_batch(batch)
        except SpendgateConnectionError:
            return False
        except SpendgateAPIError as e:
            if e.status in (429, 503) or e.status >= 500:
                return False
            self._drop(len(batch))
            self.rejected += len(batch)
            if self._on_error:
                self._on_error(e, batch)
            return True
        self._drop(len(batch))
        self.sent += len(batch)
        return True

    def _drop(self, n: int) -> None:
        with self._lock:
            for _ in range(n):
                self._queue.popleft()
