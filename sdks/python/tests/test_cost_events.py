"""Cost events: single reports, batches retried after a 503, the background batcher."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import List, Tuple

import pytest

from spendgate import CostBatcher, CostEvent, Spendgate
from spendgate.errors import (
    QueueFullError,
    SpendgateAPIError,
    SpendgateConnectionError,
    SpendgateError,
    ValidationError,
)

from .support import Dashboard, Server, flaky_forwarder


def event(run_id: str, cost: int = 1500) -> CostEvent:
    return CostEvent(provider="openai", model="gpt-4o-mini", input_tokens=100, output_tokens=20,
                     cost_microdollars=cost, tags={"run": run_id})


def test_report_is_stored_once_and_a_repeat_is_a_duplicate(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    e = event(run_id)
    first = client.report(e)
    again = client.report(e)
    assert (first.duplicate, again.duplicate) == (False, True)
    assert first.id == again.id and first.id.startswith("svc_evt_")
    stored = owner.events_tagged("run", run_id)
    assert [s["costMicrodollars"] for s in stored] == [1500]
    assert stored[0]["source"] == "sdk"


def test_batch_answered_503_after_it_was_stored_is_retried_and_stored_once(
        server: Server, key: Tuple[str, str], owner: Dashboard, run_id: str) -> None:
    flaky = flaky_forwarder(server.control, failures=1, retry_after="1")
    try:
        with Spendgate(key[1], base_url=flaky.url, proxy_url=server.proxy) as c:
            started = time.monotonic()
            receipt = c.report_batch([event(run_id, 10), event(run_id, 20), event(run_id, 30)])
            elapsed = time.monotonic() - started
    finally:
        flaky.close()
    assert len(flaky.requests) == 2, "one lost answer, one retry"
    assert flaky.requests[0][3] == flaky.requests[1][3], "the retry resends the same keys"
    assert elapsed >= 1.0, "Retry-After: 1 was honoured"
    assert receipt.inserted == 0 and len(receipt.ids) == 3, "the retry found all three stored"
    assert sorted(s["costMicrodollars"] for s in owner.events_tagged("run", run_id)) == [10, 20, 30]
    assert flaky.requests[0][2]["user-agent"].startswith("spendgate-python/")


def test_retries_give_up_with_the_last_error(server: Server, key: Tuple[str, str], run_id: str) -> None:
    flaky = flaky_forwarder(server.control, failures=5, retry_after="0")
    try:
        with Spendgate(key[1], base_url=flaky.url, proxy_url=server.proxy, max_retries=2) as c:
            with pytest.raises(SpendgateAPIError) as err:
                c.report(event(run_id))
    finally:
        flaky.close()
    assert err.value.status == 503 and err.value.retry_after == 0
    assert len(flaky.requests) == 3


def test_batch_bounds_are_checked_before_sending(client: Spendgate, run_id: str) -> None:
    with pytest.raises(ValidationError):
        client.report_batch([])
    with pytest.raises(ValidationError):
        client.report_batch([event(run_id) for _ in range(101)])


def test_batcher_sends_by_size_interval_and_on_close(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    b = CostBatcher(client, max_batch_size=2, flush_interval=0.3, max_queue=50)
    for i in range(5):
        b.add(event(run_id, 100 + i))
    deadline = time.monotonic() + 10
    while b.sent < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert b.sent == 5 and b.pending == 0
    b.add(event(run_id, 200))
    b.close()
    assert b.sent == 6
    assert len(owner.events_tagged("run", run_id)) == 6
    with pytest.raises(SpendgateError):
        b.add(event(run_id))


def test_batcher_overflow_is_raised_and_counted_and_flush_sends_the_rest(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    b = CostBatcher(client, max_batch_size=100, flush_interval=60, max_queue=3)
    for i in range(3):
        b.add(event(run_id, i + 1))
    with pytest.raises(QueueFullError):
        b.add(event(run_id, 99))
    assert b.overflowed == 1 and b.pending == 3
    b.flush()
    assert b.pending == 0 and b.sent == 3
    b.close()
    assert sorted(s["costMicrodollars"] for s in owner.events_tagged("run", run_id)) == [1, 2, 3]


def test_batcher_reports_a_refused_batch_to_on_error(client: Spendgate, run_id: str) -> None:
    refused: List[SpendgateError] = []
    b = CostBatcher(client, flush_interval=60, on_error=lambda e, events: refused.append(e))
    b.add(CostEvent(provider="openai", model="", input_tokens=1, output_tokens=1, cost_microdollars=1))
    b.flush()
    b.close()
    assert b.rejected == 1 and isinstance(refused[0], ValidationError)


def test_batcher_flushes_at_interpreter_exit(server: Server, key: Tuple[str, str], owner: Dashboard,
                                             run_id: str) -> None:
    script = (
        "import sys\n"
        "from spendgate import CostBatcher, CostEvent, Spendgate\n"
        "sg = Spendgate(sys.argv[1], base_url=sys.argv[2], proxy_url=sys.argv[3])\n"
        "b = CostBatcher(sg, flush_interval=3600)\n"
        "b.add(CostEvent(provider='openai', model='gpt-4o-mini', input_tokens=1, output_tokens=1,\n"
        "                cost_microdollars=42, tags={'run': sys.argv[4]}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script, key[1], server.control, server.proxy, run_id],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [s["costMicrodollars"] for s in owner.events_tagged("run", run_id)] == [42]


def test_a_429_is_retried_after_retry_after(server: Server, key: Tuple[str, str], owner: Dashboard,
                                            run_id: str) -> None:
    limited = flaky_forwarder(server.control, failures=1, retry_after="1", status=429)
    try:
        with Spendgate(key[1], base_url=limited.url, proxy_url=server.proxy) as c:
            started = time.monotonic()
            c.report(event(run_id, 7))
            assert time.monotonic() - started >= 1.0
    finally:
        limited.close()
    assert len(limited.requests) == 2
    assert [s["costMicrodollars"] for s in owner.events_tagged("run", run_id)] == [7]


def test_an_unreachable_server_is_a_connection_error_after_the_retries(key: Tuple[str, str], run_id: str) -> None:
    with Spendgate(key[1], base_url="http://127.0.0.1:9", max_retries=2, max_retry_delay=0.1) as c:
        with pytest.raises(SpendgateConnectionError):
            c.report(event(run_id))
