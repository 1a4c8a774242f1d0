"""Error codes reached from the real server map to their classes."""

from __future__ import annotations

import time
from typing import Tuple

import httpx
import pytest

from spendgate import ERROR_CLASSES, Spendgate
from spendgate.errors import (
    ActionExpiredError,
    ForbiddenError,
    InvalidJSONError,
    LimitExceededError,
    PayloadTooLargeError,
    RateLimitExceededError,
    SpendgateAPIError,
    UnsupportedMediaTypeError,
    ValidationError,
    error_from_response,
)

from .support import Dashboard, Server

SPEC_CODES = """validation_error invalid_json invalid_input spend_cap_exceeded invalid_key invalid_upstream
processor_validation_failed invalid_customer_id invalid_plan_ref invalid_budget_cap invalid_margin_target
invalid_estimate invalid_feature invalid_idempotency_key customer_data_unsupported authentication_required
unauthorized forbidden customer_not_allowed not_found payload_too_large unsupported_media_type limit_exceeded
invalid_action_transition action_expired stale_action conflict binding_inactive idempotency_conflict
rate_limit_exceeded session_limit_exceeded customer_budget_exceeded mandate_violation internal_error
idempotency_unavailable request_in_progress""".split()


def test_every_code_of_the_spec_table_has_its_own_class() -> None:
    missing = [c for c in SPEC_CODES if c not in ERROR_CLASSES]
    assert missing == []
    assert len({ERROR_CLASSES[c] for c in SPEC_CODES}) == len(SPEC_CODES)


def test_validation_error_carries_the_issues(client: Spendgate, run_id: str) -> None:
    with pytest.raises(ValidationError) as err:
        client.create_action(f"a-{run_id}", "launch_rockets", {})
    assert err.value.status == 400
    assert err.value.details and err.value.details["issues"][0]["path"] == ["actionType"]


def test_budget_increase_on_the_free_tier_is_forbidden(client: Spendgate, key: Tuple[str, str]) -> None:
    with pytest.raises(ForbiddenError) as err:
        client.create_action("a", "budget_increase", {
            "entityType": "api_key", "entityId": key[0], "requestedAmountMicrodollars": 1, "reason": "more"})
    assert err.value.status == 403


def test_a_payload_over_a_megabyte_is_payload_too_large(client: Spendgate) -> None:
    with pytest.raises(PayloadTooLargeError) as err:
        client.create_action("a", "file_write", {"blob": "x" * 1_100_000})
    assert err.value.status == 413


def test_rate_limit_carries_retry_after() -> None:
    server = Server({"SPENDGATE_RATE_LIMIT_KEY_PER_MINUTE": "2"})
    try:
        owner = Dashboard(server, "limited@example.com")
        _, raw = owner.create_key("limited")
        with Spendgate(raw, base_url=server.control, proxy_url=server.proxy, max_retries=0) as c:
            with pytest.raises(RateLimitExceededError) as err:
                for _ in range(5):
                    c.introspect()
    finally:
        server.stop()
    assert err.value.status == 429 and err.value.retry_after is not None and err.value.retry_after > 0


def test_answers_only_a_session_or_a_broken_client_meets_map_to_their_classes(
        owner: Dashboard, client: Spendgate, key: Tuple[str, str], run_id: str) -> None:
    """The SDK never sends malformed JSON nor approves; these real answers still map."""
    raw = httpx.post(owner.base + "/api/cost-events", content=b"{not json",
                     headers={"X-Service-Key": key[1], "content-type": "application/json"})
    assert isinstance(error_from_response(raw.status_code, raw.json()), InvalidJSONError)
    raw = httpx.post(owner.base + "/api/cost-events", content=b"{}",
                     headers={"X-Service-Key": key[1], "content-type": "text/plain"})
    assert isinstance(error_from_response(raw.status_code, raw.json()), UnsupportedMediaTypeError)
    action = client.create_action(f"late-{run_id}", "send_email", {}, expires_in_seconds=1)
    time.sleep(1.5)
    raw = owner.approve(action.id)
    assert isinstance(error_from_response(raw.status_code, raw.json()), ActionExpiredError)


def test_the_eleventh_key_on_the_free_tier_is_limit_exceeded(server: Server) -> None:
    other = Dashboard(server, "keys@example.com", org="Keys Inc")
    answers = [other.http.post("/api/keys", json={"name": f"k{i}"}) for i in range(11)]
    last = answers[-1]
    err = error_from_response(last.status_code, last.json())
    assert isinstance(err, LimitExceededError) and err.status == 409


def test_an_unknown_code_is_still_an_api_error() -> None:
    err = error_from_response(418, {"error": {"code": "teapot", "message": "short and stout", "details": None}})
    assert type(err) is SpendgateAPIError and err.code == "teapot"
    assert error_from_response(502, "<html>").code == "http_error"
