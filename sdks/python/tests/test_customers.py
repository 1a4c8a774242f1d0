"""Per-customer: bind, gate (charging, advisory, replays, denials), unit economics."""

from __future__ import annotations

from typing import Tuple

import pytest

from spendgate import Spendgate
from spendgate import _calls as calls
from spendgate.errors import (
    BindingInactiveError,
    CustomerDataUnsupportedError,
    CustomerNotAllowedError,
    IdempotencyConflictError,
    InvalidBudgetCapError,
    InvalidCustomerIdError,
    InvalidEstimateError,
    InvalidFeatureError,
    InvalidIdempotencyKeyError,
    InvalidMarginTargetError,
    InvalidPlanRefError,
    NotFoundError,
)

from .support import Dashboard, Server


def test_bind_replays_with_one_key_and_conflicts_on_another_body(client: Spendgate, run_id: str) -> None:
    cust = f"cust-{run_id}"
    b = client.bind(cust, plan_ref="pro", budget_cap_microdollars=50_000, margin_target_percent=40,
                    idempotency_key=f"bind-{run_id}")
    assert (b.customer_id, b.status, b.budget_cap_microdollars, b.margin_target_percent, b.replayed) == (
        cust, "active", 50_000, 40, False)
    again = client.bind(cust, plan_ref="pro", budget_cap_microdollars=50_000, margin_target_percent=40,
                        idempotency_key=f"bind-{run_id}")
    assert again.replayed and again.binding_id == b.binding_id
    with pytest.raises(IdempotencyConflictError) as err:
        client.bind(cust, plan_ref="pro", budget_cap_microdollars=1, idempotency_key=f"bind-{run_id}")
    assert err.value.status == 409


def test_gate_charges_once_per_idempotency_key_and_denies_as_a_value(client: Spendgate, run_id: str) -> None:
    cust = f"gated-{run_id}"
    client.bind(cust, plan_ref="basic", budget_cap_microdollars=10_000)
    first = client.gate(cust, 4_000, feature="report", send_event=True, idempotency_key=f"g-{run_id}")
    replay = client.gate(cust, 4_000, feature="report", send_event=True, idempotency_key=f"g-{run_id}")
    assert first.allowed and not first.replayed
    assert replay.replayed and replay.decision_id == first.decision_id
    assert first.decision_id.startswith("dec_")
    ue = client.unit_economics(cust)
    assert ue.spend_microdollars == 4_000, "the replay did not charge again"
    assert ue.max_microdollars == 10_000 and ue.binding["planRef"] == "basic"
    advisory = client.gate(cust, 5_000)
    assert advisory.allowed
    assert client.unit_economics(cust).spend_microdollars == 4_000, "advisory gates charge nothing"
    denied = client.gate(cust, 7_000, feature="report", send_event=True, with_preview=True)
    assert not denied.allowed and denied.reason == "budget_exceeded"
    assert denied.recovery is not None and denied.preview is not None
    assert denied.preview["customerId"] == cust
    assert client.unit_economics(cust).latest_decision == "denied"


def test_gate_for_an_unbound_customer_is_bind_not_found(client: Spendgate, run_id: str) -> None:
    d = client.gate(f"nobody-{run_id}", 10, with_preview=True)
    assert (d.allowed, d.reason) == (False, "bind_not_found")
    assert d.preview is not None and d.preview["scenario"] == "feature_flag"


def test_unit_economics_of_an_unbound_customer_is_not_found(client: Spendgate, run_id: str) -> None:
    with pytest.raises(NotFoundError):
        client.unit_economics(f"nobody-{run_id}")


def test_bind_against_a_suspended_binding_is_binding_inactive(
        client: Spendgate, owner: Dashboard, run_id: str) -> None:
    cust = f"susp-{run_id}"
    client.bind(cust, plan_ref="pro", budget_cap_microdollars=100)
    r = owner.http.post(f"/api/customer-bindings/{cust}/suspend")
    assert r.status_code == 200, r.text
    with pytest.raises(BindingInactiveError) as err:
        client.bind(cust, plan_ref="pro", budget_cap_microdollars=200)
    assert err.value.status == 409


def test_customer_outside_the_keys_allow_list_is_refused(
        server: Server, owner: Dashboard, run_id: str) -> None:
    _, raw = owner.create_key("allow-listed", allowedCustomers=[f"ok-{run_id}"])
    with Spendgate(raw, base_url=server.control, proxy_url=server.proxy) as c:
        assert c.bind(f"ok-{run_id}", plan_ref="p", budget_cap_microdollars=5).status == "active"
        with pytest.raises(CustomerNotAllowedError) as err:
            c.gate(f"other-{run_id}", 5)
    assert err.value.status == 403


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda c: c.bind("bad id!", plan_ref="p", budget_cap_microdollars=1), InvalidCustomerIdError),
        (lambda c: c.bind("c1", plan_ref="", budget_cap_microdollars=1), InvalidPlanRefError),
        (lambda c: c.bind("c1", plan_ref="p", budget_cap_microdollars=-1), InvalidBudgetCapError),
        (lambda c: c.bind("c1", plan_ref="p", budget_cap_microdollars=1, margin_target_percent=101),
         InvalidMarginTargetError),
        (lambda c: c.gate("c1", 0), InvalidEstimateError),
        (lambda c: c.gate("c1", 10, feature=""), InvalidFeatureError),
        (lambda c: c.gate("c1", 10, idempotency_key="k" * 300), InvalidIdempotencyKeyError),
        (lambda c: c._run(calls.bind("c1", "p", 1, None, None, extra={"customerData": {"email": "x"}})),
         CustomerDataUnsupportedError),
    ],
)
def test_bad_per_customer_input_maps_to_its_error(client: Spendgate, call, error) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error) as err:
        call(client)
    assert err.value.status == 400 and err.value.code == error.code_name
