"""Actions: a human decides from a dashboard session while the SDK waits."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Tuple

import pytest

from spendgate import AsyncSpendgate, Spendgate
from spendgate.errors import (
    ActionExpiredBeforeDecisionError,
    ActionRejectedError,
    ApprovalTimeoutError,
    InvalidActionTransitionError,
    NotFoundError,
)

from .support import Dashboard, Server


def decide_when_pending(owner: Dashboard, client: Spendgate, agent: str, approve: bool) -> threading.Thread:
    """In the background, finds the agent's next pending action (as a human would on
    the Actions page) and decides it a moment after the SDK started waiting."""

    def run() -> None:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = owner.http.get("/api/actions", params={"status": "pending"})
            mine = [a for a in r.json()["data"] if a["agentId"] == agent]
            if mine:
                time.sleep(0.5)
                (owner.approve if approve else owner.reject)(mine[0]["id"])
                return
            time.sleep(0.1)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_decorated_function_runs_after_approval_and_reports_its_result(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    sent: List[str] = []

    @client.requires_approval(agent_id=f"mailer-{run_id}", action_type="send_email",
                              payload=lambda to, body: {"to": to, "body": body}, timeout=30)
    def send_email(to: str, body: str) -> Dict[str, Any]:
        sent.append(to)
        return {"messageId": "m-1"}

    helper = decide_when_pending(owner, client, f"mailer-{run_id}", approve=True)
    started = time.monotonic()
    assert send_email("a@example.com", "hi") == {"messageId": "m-1"}
    helper.join()
    assert sent == ["a@example.com"]
    assert time.monotonic() - started >= 0.5, "the call waited for the human"
    actions = owner.http.get("/api/actions", params={"status": "executed"}).json()["data"]
    mine = [a for a in actions if a["agentId"] == f"mailer-{run_id}"]
    assert len(mine) == 1
    assert mine[0]["payload"] == {"to": "a@example.com", "body": "hi"}
    assert mine[0]["result"] == {"messageId": "m-1"}


def test_rejection_is_a_typed_error_and_the_function_never_runs(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    ran: List[bool] = []
    helper = decide_when_pending(owner, client, f"deleter-{run_id}", approve=False)
    with pytest.raises(ActionRejectedError) as err:
        client.run_approved(lambda: ran.append(True), agent_id=f"deleter-{run_id}",
                            action_type="file_delete", payload={"path": "/tmp/x"}, timeout=30)
    helper.join()
    assert ran == []
    assert err.value.action.status == "rejected"
    assert owner.action(err.value.action.id)["status"] == "rejected"


def test_expiry_is_a_typed_error(client: Spendgate, run_id: str) -> None:
    action = client.create_action(f"slow-{run_id}", "shell_command", {"cmd": "ls"}, expires_in_seconds=1)
    assert action.status == "pending" and action.expires_at
    with pytest.raises(ActionExpiredBeforeDecisionError) as err:
        client.wait_for_decision(action.id, timeout=20)
    assert err.value.action.status == "expired"


def test_caller_deadline_is_a_typed_error_and_the_action_stays_pending(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    action = client.create_action(f"patient-{run_id}", "db_write", {"sql": "update"})
    started = time.monotonic()
    with pytest.raises(ApprovalTimeoutError):
        client.wait_for_decision(action.id, timeout=1.5)
    assert 1.0 <= time.monotonic() - started < 10
    assert owner.action(action.id)["status"] == "pending"


def test_context_manager_reports_failed_with_the_error(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    helper = decide_when_pending(owner, client, f"poster-{run_id}", approve=True)
    with pytest.raises(RuntimeError):
        with client.approval(agent_id=f"poster-{run_id}", action_type="http_post",
                             payload={"url": "https://example.com"}, timeout=30) as handle:
            assert handle.action.status == "approved"
            raise RuntimeError("upstream said no")
    helper.join()
    stored = owner.action(handle.action.id)
    assert stored["status"] == "failed"
    assert stored["errorMessage"] == "RuntimeError: upstream said no"


def test_result_reports_follow_the_state_machine(client: Spendgate, owner: Dashboard, run_id: str) -> None:
    action = client.create_action(f"manual-{run_id}", "file_write", {"path": "a"}, metadata={"ticket": "7"})
    with pytest.raises(InvalidActionTransitionError) as err:
        client.report_result(action.id, "executing")
    assert err.value.status == 409
    assert owner.approve(action.id).status_code == 200
    assert client.wait_for_decision(action.id, timeout=5).status == "approved"
    assert client.report_result(action.id, "executing").status == "executing"
    done = client.report_result(action.id, "executed", result={"bytes": 3})
    assert done.status == "executed"
    got = client.get_action(action.id)
    assert (got.result, got.metadata) == ({"bytes": 3}, {"ticket": "7"})
    with pytest.raises(InvalidActionTransitionError):
        client.report_result(action.id, "failed", error_message="too late")


def test_create_with_one_idempotency_key_makes_one_action(client: Spendgate, run_id: str) -> None:
    a = client.create_action(f"idem-{run_id}", "send_email", {"to": "x"}, idempotency_key=f"k-{run_id}")
    b = client.create_action(f"idem-{run_id}", "send_email", {"to": "x"}, idempotency_key=f"k-{run_id}")
    assert a.id == b.id


def test_unknown_action_is_not_found(client: Spendgate) -> None:
    with pytest.raises(NotFoundError) as err:
        client.get_action("svc_act_00000000-0000-4000-8000-000000000000")
    assert err.value.status == 404


def test_async_client_waits_for_approval(
        server: Server, key: Tuple[str, str], client: Spendgate, owner: Dashboard, run_id: str) -> None:
    async def main() -> Any:
        async with AsyncSpendgate(key[1], base_url=server.control, proxy_url=server.proxy) as sg:

            @sg.requires_approval(agent_id=f"async-{run_id}", action_type="http_delete", timeout=30)
            async def delete(url: str) -> str:
                return f"deleted {url}"

            return await delete("https://example.com/1")

    helper = decide_when_pending(owner, client, f"async-{run_id}", approve=True)
    assert asyncio.run(main()) == "deleted https://example.com/1"
    helper.join()
    actions = owner.http.get("/api/actions", params={"status": "executed"}).json()["data"]
    mine = [a for a in actions if a["agentId"] == f"async-{run_id}"]
    assert mine and mine[0]["result"] == {"value": "deleted https://example.com/1"}


def test_async_client_covers_the_other_calls(server: Server, key: Tuple[str, str], owner: Dashboard,
                                             run_id: str) -> None:
    from spendgate import CostEvent

    async def main() -> None:
        async with AsyncSpendgate(key[1], base_url=server.control, proxy_url=server.proxy) as sg:
            e = CostEvent(provider="openai", model="gpt-4o-mini", input_tokens=1, output_tokens=1,
                          cost_microdollars=5, tags={"run": run_id})
            assert (await sg.report(e)).duplicate is False
            assert (await sg.report_batch([e])).inserted == 0
            b = await sg.bind(f"async-{run_id}", plan_ref="p", budget_cap_microdollars=100)
            assert b.status == "active"
            g = await sg.gate(f"async-{run_id}", 30, send_event=True)
            assert g.allowed
            assert (await sg.unit_economics(f"async-{run_id}")).spend_microdollars == 30
            assert isinstance(await sg.budget_status(), list)
            assert "openai" in (await sg.policy()).cheapest_per_provider
            assert (await sg.introspect()).user_id.startswith("svc_usr_")
            a = await sg.create_action(f"async-low-{run_id}", "db_write", {"q": 1})
            assert owner.approve(a.id).status_code == 200
            assert (await sg.wait_for_decision(a.id, timeout=5)).status == "approved"
            assert (await sg.report_result(a.id, "executing")).status == "executing"
            assert (await sg.report_result(a.id, "failed", error_message="boom")).status == "failed"
            assert (await sg.get_action(a.id)).error_message == "boom"
            assert sg.anthropic_settings().base_url == server.proxy

    asyncio.run(main())
    assert len(owner.events_tagged("run", run_id)) == 1
