"""The error codes the server answers when something around a call went wrong: a
repeat of a request still running, a database that lost a table or changed a row
under a transition. The real server produces each (the suite owns its database, so
the fault is injected there, on SQLite and PostgreSQL alike) and the SDK raises the
class of the code."""

from __future__ import annotations

import hashlib
from typing import Iterator, Tuple, Type

import pytest

from spendgate import CostEvent, Spendgate
from spendgate.errors import (
    IdempotencyUnavailableError,
    InternalError,
    RequestInProgressError,
    SpendgateAPIError,
    StaleActionError,
)

from .support import Dashboard, Server


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def event(run_id: str) -> CostEvent:
    return CostEvent(provider="openai", model="gpt-4o-mini", input_tokens=10, output_tokens=2,
                     cost_microdollars=5, tags={"run": run_id})


def expect(err: SpendgateAPIError, cls: Type[SpendgateAPIError], status: int) -> None:
    assert type(err) is cls, err
    assert (err.status, err.code) == (status, cls.code_name)


@pytest.fixture(scope="module")
def faulty() -> Iterator[Tuple[Server, Dashboard, str]]:
    """A server of its own: these tests break its database for a moment."""
    server = Server()
    try:
        owner = Dashboard(server, "faults@example.com")
        _, raw = owner.create_key("faults")
        yield server, owner, raw
    finally:
        server.stop()


def no_retry(server: Server, raw: str) -> Spendgate:
    """A client that shows the first answer (the SDK retries every 503)."""
    return Spendgate(raw, base_url=server.control, proxy_url=server.proxy, max_retries=0)


def test_a_repeat_of_a_request_still_running_is_request_in_progress(
        faulty: Tuple[Server, Dashboard, str], run_id: str) -> None:
    server, _, raw = faulty
    e = event(run_id)
    with no_retry(server, raw) as c:
        assert not c.report(e).duplicate
        # The first request's claim of its idempotency key as it is while it runs:
        # pending, owned by this live server.
        claim = sha256(f"{sha256(raw)}\n/api/cost-events\n{e.idempotency_key}")
        server.db.sql("UPDATE idempotency_keys SET state = 'pending', response_status = NULL, "
                      f"response_body = NULL WHERE id = '{claim}'")
        with pytest.raises(RequestInProgressError) as err:
            c.report(e)
    expect(err.value, RequestInProgressError, 503)
    assert err.value.retry_after == 1


def test_a_lost_idempotency_store_is_idempotency_unavailable(
        faulty: Tuple[Server, Dashboard, str], run_id: str) -> None:
    server, _, raw = faulty
    server.db.sql("ALTER TABLE idempotency_keys RENAME TO idempotency_keys_away")
    try:
        with no_retry(server, raw) as c, pytest.raises(IdempotencyUnavailableError) as err:
            c.report(event(run_id))
    finally:
        server.db.sql("ALTER TABLE idempotency_keys_away RENAME TO idempotency_keys")
    expect(err.value, IdempotencyUnavailableError, 503)
    with no_retry(server, raw) as c:
        assert not c.report(event(run_id)).duplicate


def test_a_failing_write_is_internal_error(faulty: Tuple[Server, Dashboard, str], run_id: str) -> None:
    server, _, raw = faulty
    server.db.sql("ALTER TABLE customer_bindings RENAME TO customer_bindings_away")
    try:
        with no_retry(server, raw) as c, pytest.raises(InternalError) as err:
            c.bind(f"acme-{run_id}", plan_ref="pro", budget_cap_microdollars=1_000)
    finally:
        server.db.sql("ALTER TABLE customer_bindings_away RENAME TO customer_bindings")
    expect(err.value, InternalError, 500)
    with no_retry(server, raw) as c:
        assert c.bind(f"acme-{run_id}", plan_ref="pro", budget_cap_microdollars=1_000).customer_id == f"acme-{run_id}"


# The row changes under the transition: its conditional write matches nothing, as
# when another instance changed the action between this one's read and its write.
SKIP_ACTION_WRITES = {
    "sqlite": "CREATE TRIGGER skip_action_writes BEFORE UPDATE ON actions BEGIN SELECT RAISE(IGNORE); END",
    "postgres": "CREATE FUNCTION skip_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; "
                "CREATE TRIGGER skip_action_writes BEFORE UPDATE ON actions FOR EACH ROW EXECUTE FUNCTION skip_row()",
}
ALLOW_ACTION_WRITES = {
    "sqlite": "DROP TRIGGER skip_action_writes",
    "postgres": "DROP TRIGGER skip_action_writes ON actions; DROP FUNCTION skip_row()",
}


def test_a_transition_that_lost_a_race_is_stale_action(faulty: Tuple[Server, Dashboard, str], run_id: str) -> None:
    server, owner, raw = faulty
    backend = "postgres" if server.db.pg_name else "sqlite"
    with no_retry(server, raw) as c:
        action = c.create_action(f"racer-{run_id}", "send_email", {"to": "ada@example.com"})
        assert owner.approve(action.id).status_code == 200
        server.db.sql(SKIP_ACTION_WRITES[backend])
        try:
            with pytest.raises(StaleActionError) as err:
                c.report_result(action.id, "executing")
        finally:
            server.db.sql(ALLOW_ACTION_WRITES[backend])
        expect(err.value, StaleActionError, 409)
        assert c.report_result(action.id, "executing").status == "executing"
