"""The remaining error codes of the spec's table that the real server produces for
proxied calls and dashboard writes (the faults are in ``test_faults``): their answers
map to their classes too.

The SDK does not proxy provider calls itself (the official provider SDKs do, see
``openai_settings``), but an agent that catches errors from both meets these."""

from __future__ import annotations

from typing import Dict, Optional, Tuple, Type

import httpx

from spendgate import Spendgate
from spendgate.errors import (
    BudgetExceededError,
    ConflictError,
    CustomerBudgetExceededError,
    InvalidInputError,
    InvalidKeyError,
    InvalidUpstreamError,
    MandateViolationError,
    ProcessorValidationFailedError,
    SessionLimitExceededError,
    SpendCapExceededError,
    SpendgateAPIError,
    error_from_response,
)

from .support import Dashboard, Server, fake_processor

CHAT = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 100}


def chat(server: Server, key: str, headers: Optional[Dict[str, str]] = None) -> SpendgateAPIError:
    r = httpx.post(server.proxy + "/v1/chat/completions", json=CHAT, timeout=30,
                   headers={"X-Service-Key": key, "Authorization": "Bearer sk-test", **(headers or {})})
    assert r.status_code >= 400, r.text
    return error_from_response(r.status_code, r.json())


def expect(err: SpendgateAPIError, cls: Type[SpendgateAPIError], status: int) -> None:
    assert isinstance(err, cls), err
    assert err.status == status and err.code == cls.code_name


def test_proxied_call_denials_map_to_their_classes(server: Server, owner: Dashboard, run_id: str) -> None:
    key_id, raw = owner.create_key(f"enforced-{run_id}")
    expect(chat(server, raw, {"X-Service-Upstream": "https://upstream.invalid"}), InvalidUpstreamError, 400)

    with Spendgate(raw, base_url=server.control, proxy_url=server.proxy) as c:
        c.bind(f"tiny-{run_id}", plan_ref="p", budget_cap_microdollars=1)
    expect(chat(server, raw, {"X-Service-Customer": f"tiny-{run_id}"}), CustomerBudgetExceededError, 429)

    r = owner.http.post("/api/budgets", json={"entityType": "api_key", "entityId": key_id,
                                              "maxBudgetMicrodollars": 10_000_000, "sessionLimitMicrodollars": 1})
    assert r.status_code == 201, r.text
    expect(chat(server, raw, {"X-Service-Session": f"s-{run_id}"}), SessionLimitExceededError, 429)

    r = owner.http.post("/api/budgets", json={"entityType": "api_key", "entityId": key_id,
                                              "maxBudgetMicrodollars": 1})
    assert r.status_code == 201, r.text
    expect(chat(server, raw), BudgetExceededError, 429)


def test_a_key_that_requires_a_customer_is_a_mandate_violation_without_one(
        server: Server, owner: Dashboard, run_id: str) -> None:
    _, raw = owner.create_key(f"mandated-{run_id}", requireCustomerId=True)
    expect(chat(server, raw), MandateViolationError, 403)


def test_dashboard_write_codes_map_to_their_classes(owner: Dashboard, key: Tuple[str, str]) -> None:
    r = owner.http.post("/api/budgets", json={"entityType": "api_key", "entityId": key[0],
                                              "maxBudgetMicrodollars": 100, "finalizationReserveMicrodollars": 100})
    expect(error_from_response(r.status_code, r.json()), InvalidInputError, 400)
    r = owner.http.get("/api/cost-events/attribution/svc_key_nope", params={"groupBy": "api_key"})
    expect(error_from_response(r.status_code, r.json()), InvalidKeyError, 400)
    r = owner.http.post("/api/budgets", json={"entityType": "api_key", "entityId": key[0],
                                              "maxBudgetMicrodollars": 1_000_000_001})
    err = error_from_response(r.status_code, r.json())
    expect(err, SpendCapExceededError, 400)
    assert err.details == {"capMicrodollars": 1_000_000_000, "plan": "free"}


def test_paid_tier_codes_map_to_their_classes(run_id: str) -> None:
    """A Pro organization: connecting a payment processor that refuses the key, and
    approving a budget increase whose budget was deleted meanwhile."""
    processor = fake_processor()
    server = Server({"SPENDGATE_DEFAULT_PLAN": "pro", "SPENDGATE_PROCESSOR_URL": processor.url,
                     "SPENDGATE_SECRET_KEY": "sdk-tests-secret-key-of-forty-characters"})
    try:
        owner = Dashboard(server, "paid@example.com")
        r = owner.http.post("/api/payprocessor/connect", json={"processorKey": "rk_test_unknown_0001"})
        expect(error_from_response(r.status_code, r.json()), ProcessorValidationFailedError, 400)
        assert "Invalid API Key" in r.json()["error"]["message"]
        (_, path, headers, _), = processor.requests
        assert path.startswith("/v1/customers") and headers["authorization"] == "Bearer rk_test_unknown_0001"

        key_id, raw = owner.create_key(f"raise-{run_id}")
        r = owner.http.post("/api/budgets", json={"entityType": "api_key", "entityId": key_id,
                                                  "maxBudgetMicrodollars": 1_000})
        assert r.status_code == 201, r.text
        with Spendgate(raw, base_url=server.control, proxy_url=server.proxy) as c:
            action = c.create_action(f"raiser-{run_id}", "budget_increase", {
                "entityType": "api_key", "entityId": key_id, "requestedAmountMicrodollars": 500,
                "reason": "a bigger job"})
        assert owner.http.delete(f"/api/budgets/{r.json()['id']}").status_code == 200
        r = owner.approve(action.id)
        expect(error_from_response(r.status_code, r.json()), ConflictError, 409)
    finally:
        server.stop()
        processor.close()
