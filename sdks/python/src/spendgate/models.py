"""Typed results and inputs: dataclasses named after the spec's resources.

Field names are the spec's camelCase names in snake_case; money stays in integer
microdollars. Each result keeps the server's JSON in ``raw`` so a field added by a
newer server is still reachable.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def _opt_int(v: Any) -> Optional[int]:
    return int(v) if isinstance(v, int) and not isinstance(v, bool) else None


@dataclass
class CostEvent:
    """One cost event to report (the spec's ingest fields).

    ``idempotency_key`` is fixed when the event is created, so every retry of the
    same event carries the same key and the server stores it once.
    """

    provider: str
    model: str
    input_tokens: int
    output_tokens: int
    cost_microdollars: int
    cached_input_tokens: Optional[int] = None
    reasoning_tokens: Optional[int] = None
    duration_ms: Optional[int] = None
    session_id: Optional[str] = None
    trace_id: Optional[str] = None
    event_type: Optional[str] = None
    tool_name: Optional[str] = None
    tool_server: Optional[str] = None
    tags: Optional[Dict[str, str]] = None
    customer: Optional[str] = None
    cost_breakdown: Optional[Dict[str, int]] = None
    source: str = "sdk"
    idempotency_key: str = field(default_factory=lambda: f"sdk_{uuid.uuid4()}")

    def to_json(self) -> Dict[str, Any]:
        """The request body of this event."""
        body: Dict[str, Any] = {
            "provider": self.provider,
            "model": self.model,
            "inputTokens": self.input_tokens,
            "outputTokens": self.output_tokens,
            "costMicrodollars": self.cost_microdollars,
            "source": self.source,
            "idempotencyKey": self.idempotency_key,
        }
        optional = {
            "cachedInputTokens": self.cached_input_tokens,
            "reasoningTokens": self.reasoning_tokens,
            "durationMs": self.duration_ms,
            "sessionId": self.session_id,
            "traceId": self.trace_id,
            "eventType": self.event_type,
            "toolName": self.tool_name,
            "toolServer": self.tool_server,
            "tags": self.tags,
            "customer": self.customer,
            "costBreakdown": self.cost_breakdown,
        }
        body.update({k: v for k, v in optional.items() if v is not None})
        return body


@dataclass
class CostEventReceipt:
    """The answer to one reported event; ``duplicate`` when it was already stored."""

    id: str
    created_at: str
    duplicate: bool


@dataclass
class BatchReceipt:
    """The answer to a batch: how many events were new, and their ids."""

    inserted: int
    ids: List[str]


@dataclass
class Action:
    """A human-in-the-loop action."""

    id: str
    status: str
    agent_id: Optional[str]
    action_type: Optional[str]
    payload: Optional[Dict[str, Any]]
    metadata: Optional[Dict[str, Any]]
    result: Optional[Dict[str, Any]]
    error_message: Optional[str]
    expires_at: Optional[str]
    approved_by: Optional[str]
    rejected_by: Optional[str]
    raw: Dict[str, Any]

    @property
    def is_pending(self) -> bool:
        """True while nobody decided and it has not expired."""
        return self.status == "pending"

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Action":
        """Reads an action from the server's JSON."""
        return cls(
            id=str(d["id"]),
            status=str(d["status"]),
            agent_id=d.get("agentId"),
            action_type=d.get("actionType"),
            payload=d.get("payload"),
            metadata=d.get("metadata"),
            result=d.get("result"),
            error_message=d.get("errorMessage"),
            expires_at=d.get("expiresAt"),
            approved_by=d.get("approvedBy"),
            rejected_by=d.get("rejectedBy"),
            raw=d,
        )


@dataclass
class Binding:
    """A customer bound to a plan and a cap (``POST /v1/bind``)."""

    binding_id: str
    customer_id: str
    plan_ref: str
    budget_cap_microdollars: int
    margin_target_percent: Optional[int]
    status: str
    replayed: bool
    raw: Dict[str, Any]

    @classmethod
    def from_json(cls, d: Dict[str, Any], replayed: bool) -> "Binding":
        """Reads a binding from the server's JSON."""
        return cls(
            binding_id=str(d["bindingId"]),
            customer_id=str(d["customerId"]),
            plan_ref=str(d["planRef"]),
            budget_cap_microdollars=int(d["budgetCapMicrodollars"]),
            margin_target_percent=_opt_int(d.get("marginTargetPercent")),
            status=str(d["status"]),
            replayed=replayed,
            raw=d,
        )


@dataclass
class GateRecovery:
    """How a denied caller may recover."""

    retryable: bool
    owner_action_required: bool
    retry_after_seconds: Optional[int]
    docs: Optional[str]


@dataclass
class GateDecision:
    """The answer of ``POST /v1/gate``. A denial is ``allowed=False``, not an error."""

    allowed: bool
    decision_id: str
    reason: Optional[str]
    remaining: Optional[int]
    recovery: Optional[GateRecovery]
    preview: Optional[Dict[str, Any]]
    replayed: bool
    raw: Dict[str, Any]

    @classmethod
    def from_json(cls, d: Dict[str, Any], replayed: bool) -> "GateDecision":
        """Reads a decision from the server's JSON."""
        rec = d.get("recovery")
        recovery = None
        if isinstance(rec, dict):
            recovery = GateRecovery(
                retryable=bool(rec.get("retryable")),
                owner_action_required=bool(rec.get("owner_action_required")),
                retry_after_seconds=_opt_int(rec.get("retry_after_seconds")),
                docs=rec.get("docs"),
            )
        return cls(
            allowed=bool(d["allowed"]),
            decision_id=str(d["decisionId"]),
            reason=d.get("reason"),
            remaining=_opt_int(d.get("remaining")),
            recovery=recovery,
            preview=d.get("preview"),
            replayed=replayed,
            raw=d,
        )


@dataclass
class UnitEconomics:
    """A bound customer's binding, budget, lifetime cost and latest gate decision."""

    customer_id: str
    binding: Dict[str, Any]
    max_microdollars: int
    spend_microdollars: int
    remaining_microdollars: int
    propagated: bool
    lifetime_cost_microdollars: int
    event_count: int
    latest_decision: Optional[str]
    raw: Dict[str, Any]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "UnitEconomics":
        """Reads unit economics from the server's JSON."""
        budget = d.get("budget") or {}
        cost = d.get("cost") or {}
        latest = d.get("latestBudgetCheck") or {}
        return cls(
            customer_id=str(d["customerId"]),
            binding=dict(d.get("binding") or {}),
            max_microdollars=int(budget.get("maxMicrodollars", 0)),
            spend_microdollars=int(budget.get("spendMicrodollars", 0)),
            remaining_microdollars=int(budget.get("remainingMicrodollars", 0)),
            propagated=bool(budget.get("propagated")),
            lifetime_cost_microdollars=int(cost.get("lifetimeCostMicrodollars", 0)),
            event_count=int(cost.get("eventCount", 0)),
            latest_decision=latest.get("decision"),
            raw=d,
        )


@dataclass
class BudgetEntityStatus:
    """Live status of one budget entity of the key (``GET /api/budgets/status``)."""

    entity_type: str
    entity_id: str
    limit_microdollars: int
    spend_microdollars: int
    remaining_microdollars: int
    policy: str
    reset_interval: Optional[str]
    raw: Dict[str, Any]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "BudgetEntityStatus":
        """Reads one entity's status from the server's JSON."""
        return cls(
            entity_type=str(d["entityType"]),
            entity_id=str(d["entityId"]),
            limit_microdollars=int(d["limitMicrodollars"]),
            spend_microdollars=int(d["spendMicrodollars"]),
            remaining_microdollars=int(d["remainingMicrodollars"]),
            policy=str(d.get("policy", "")),
            reset_interval=d.get("resetInterval"),
            raw=d,
        )


@dataclass
class ModelPrice:
    """A model and its prices per million tokens."""

    model: str
    provider: Optional[str]
    input_per_mtok: float
    output_per_mtok: float


@dataclass
class Policy:
    """What the key may use and has left (``GET /v1/policy``)."""

    allowed_models: List[str]
    allowed_providers: List[str]
    cheapest_per_provider: Dict[str, ModelPrice]
    cheapest_overall: Optional[ModelPrice]
    restrictions_active: bool
    budget: Optional[Dict[str, Any]]
    raw: Dict[str, Any]

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Policy":
        """Reads a policy from the server's JSON."""

        def price(p: Dict[str, Any], provider: Optional[str]) -> ModelPrice:
            return ModelPrice(
                model=str(p["model"]),
                provider=p.get("provider", provider),
                input_per_mtok=float(p.get("input_per_mtok", 0)),
                output_per_mtok=float(p.get("output_per_mtok", 0)),
            )

        per = d.get("cheapest_per_provider") or {}
        overall = d.get("cheapest_overall")
        return cls(
            allowed_models=list(d.get("allowed_models") or []),
            allowed_providers=list(d.get("allowed_providers") or []),
            cheapest_per_provider={k: price(v, k) for k, v in per.items()},
            cheapest_overall=price(overall, None) if isinstance(overall, dict) else None,
            restrictions_active=bool(d.get("restrictions_active")),
            budget=d.get("budget"),
            raw=d,
        )


@dataclass
class Introspection:
    """Who the key belongs to (``GET /api/auth/introspect``)."""

    user_id: str
    key_id: str
    dev: bool


@dataclass
class ProviderSettings:
    """Arguments for an official provider SDK so it calls through the proxy."""

    base_url: str
    default_headers: Dict[str, str]
