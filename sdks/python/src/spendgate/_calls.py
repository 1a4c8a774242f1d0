"""What each API call sends and how its answer is read, shared by the sync and
async clients so the two cannot drift; they differ only in how bytes move."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, List, Mapping, Optional, Sequence, TypeVar
from urllib.parse import quote

from .errors import ValidationError
from .models import (
    Action,
    BatchReceipt,
    Binding,
    BudgetEntityStatus,
    CostEvent,
    CostEventReceipt,
    GateDecision,
    Introspection,
    Policy,
    UnitEconomics,
)

T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({429, 503})
MAX_BATCH = 100
WAIT_STEP_SECONDS = 60


@dataclass
class Answer:
    """A successful HTTP answer."""

    status: int
    headers: Mapping[str, str]
    body: Any


@dataclass
class Call(Generic[T]):
    """One request and the function that turns its successful answer into ``T``.

    Every POST carries an ``Idempotency-Key`` fixed before the first attempt, so the
    retries of a call never act twice.
    """

    method: str
    surface: str  # "control" or "proxy"
    path: str
    parse: Callable[[Answer], T]
    json: Optional[Any] = None
    params: Dict[str, Any] = field(default_factory=dict)
    headers: Dict[str, str] = field(default_factory=dict)
    extra_timeout: float = 0.0


def new_key(prefix: str) -> str:
    """A fresh idempotency key."""
    return f"{prefix}_{uuid.uuid4()}"


def retry_delay(attempt: int, retry_after: Optional[float], cap: float) -> float:
    """Seconds to wait before retry ``attempt`` (0-based): the server's
    ``Retry-After`` when it gave one, else exponential backoff with jitter."""
    if retry_after is not None:
        return min(max(retry_after, 0.0), cap)
    base: float = min(0.25 * (2**attempt), cap)
    return base / 2 + random.uniform(0, base / 2)


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """The seconds of a ``Retry-After`` header (HTTP dates are treated as absent)."""
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _data(a: Answer) -> Dict[str, Any]:
    body = a.body
    return dict(body["data"]) if isinstance(body, dict) and "data" in body else dict(body)


def _replayed(a: Answer) -> bool:
    return "true" in (a.headers.get("idempotent-replayed", ""), a.headers.get("x-idempotent-replayed", ""))


def _local_invalid(path: str, message: str) -> ValidationError:
    return ValidationError(0, "validation_error", message, {"issues": [{"path": [path], "message": message}]})


def report(event: CostEvent) -> Call[CostEventReceipt]:
    """``POST /api/cost-events``."""

    def parse(a: Answer) -> CostEventReceipt:
        d = _data(a)
        return CostEventReceipt(id=str(d["id"]), created_at=str(d["createdAt"]), duplicate=a.status == 200 or _replayed(a))

    return Call(
        "POST", "control", "/api/cost-events", parse, json=event.to_json(),
        headers={"Idempotency-Key": event.idempotency_key},
    )


def report_batch(events: Sequence[CostEvent]) -> Call[BatchReceipt]:
    """``POST /api/cost-events/batch``; each event keeps its own idempotency key."""
    if not 1 <= len(events) <= MAX_BATCH:
        raise _local_invalid("events", f"a batch holds 1 to {MAX_BATCH} events")

    def parse(a: Answer) -> BatchReceipt:
        return BatchReceipt(inserted=int(a.body["inserted"]), ids=[str(i) for i in a.body["ids"]])

    return Call("POST", "control", "/api/cost-events/batch", parse, json={"events": [e.to_json() for e in events]})


def create_action(
    agent_id: str,
    action_type: str,
    payload: Mapping[str, Any],
    metadata: Optional[Mapping[str, Any]],
    expires_in_seconds: Optional[int],
    idempotency_key: Optional[str],
    no_expiry: bool,
) -> Call[Action]:
    """``POST /api/actions``."""
    body: Dict[str, Any] = {"agentId": agent_id, "actionType": action_type, "payload": dict(payload)}
    if metadata is not None:
        body["metadata"] = dict(metadata)
    if no_expiry:
        body["expiresInSeconds"] = None
    elif expires_in_seconds is not None:
        body["expiresInSeconds"] = expires_in_seconds

    def parse(a: Answer) -> Action:
        d = _data(a)
        d.setdefault("agentId", agent_id)
        d.setdefault("actionType", action_type)
        d.setdefault("payload", dict(payload))
        return Action.from_json(d)

    key = idempotency_key or new_key("act")
    return Call("POST", "control", "/api/actions", parse, json=body, headers={"Idempotency-Key": key})


def get_action(action_id: str, wait_seconds: Optional[int] = None) -> Call[Action]:
    """``GET /api/actions/:id``, optionally long-polling up to ``wait_seconds`` (0-60)."""
    params: Dict[str, Any] = {}
    if wait_seconds is not None:
        params["waitSeconds"] = wait_seconds
    return Call(
        "GET", "control", f"/api/actions/{quote(action_id, safe='')}",
        lambda a: Action.from_json(_data(a)), params=params, extra_timeout=float(wait_seconds or 0),
    )


def report_result(
    action_id: str,
    status: str,
    result: Optional[Mapping[str, Any]],
    error_message: Optional[str],
    idempotency_key: Optional[str],
) -> Call[Action]:
    """``POST /api/actions/:id/result``."""
    body: Dict[str, Any] = {"status": status}
    if result is not None:
        body["result"] = dict(result)
    if error_message is not None:
        body["errorMessage"] = error_message
    key = idempotency_key or new_key("res")
    return Call(
        "POST", "control", f"/api/actions/{quote(action_id, safe='')}/result",
        lambda a: Action.from_json(_data(a)), json=body, headers={"Idempotency-Key": key},
    )


def bind(
    customer_id: str,
    plan_ref: str,
    budget_cap_microdollars: int,
    margin_target_percent: Optional[int],
    idempotency_key: Optional[str],
    extra: Optional[Mapping[str, Any]] = None,
) -> Call[Binding]:
    """``POST /v1/bind``."""
    body: Dict[str, Any] = {"customerId": customer_id, "planRef": plan_ref, "budgetCap": budget_cap_microdollars}
    if margin_target_percent is not None:
        body["marginTargetPercent"] = margin_target_percent
    body.update(extra or {})
    return Call(
        "POST", "proxy", "/v1/bind", lambda a: Binding.from_json(dict(a.body), _replayed(a)), json=body,
        headers={"Idempotency-Key": idempotency_key or new_key("bind")},
    )


def gate(
    customer_id: str,
    estimated_cost_microdollars: int,
    feature: Optional[str],
    send_event: bool,
    with_preview: bool,
    idempotency_key: Optional[str],
) -> Call[GateDecision]:
    """``POST /v1/gate``."""
    body: Dict[str, Any] = {
        "customerId": customer_id,
        "estimatedCostMicrodollars": estimated_cost_microdollars,
        "sendEvent": send_event,
        "withPreview": with_preview,
    }
    if feature is not None:
        body["feature"] = feature
    return Call(
        "POST", "proxy", "/v1/gate", lambda a: GateDecision.from_json(dict(a.body), _replayed(a)), json=body,
        headers={"Idempotency-Key": idempotency_key or new_key("gate")},
    )


def unit_economics(customer_id: str) -> Call[UnitEconomics]:
    """``GET /v1/customers/:customerId/unit-economics``."""
    path = f"/v1/customers/{quote(customer_id, safe='')}/unit-economics"
    return Call("GET", "proxy", path, lambda a: UnitEconomics.from_json(dict(a.body)))


def budget_status() -> Call[List[BudgetEntityStatus]]:
    """``GET /api/budgets/status``."""
    return Call(
        "GET", "control", "/api/budgets/status",
        lambda a: [BudgetEntityStatus.from_json(e) for e in a.body.get("entities", [])],
    )


def policy() -> Call[Policy]:
    """``GET /v1/policy``."""
    return Call("GET", "proxy", "/v1/policy", lambda a: Policy.from_json(dict(a.body)))


def introspect() -> Call[Introspection]:
    """``GET /api/auth/introspect``."""

    def parse(a: Answer) -> Introspection:
        d = _data(a)
        return Introspection(user_id=str(d["userId"]), key_id=str(d["keyId"]), dev=bool(d.get("dev", False)))

    return Call("GET", "control", "/api/auth/introspect", parse)
