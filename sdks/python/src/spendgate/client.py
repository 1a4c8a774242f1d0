"""The synchronous client: every call of the SDK over one ``httpx.Client``."""

from __future__ import annotations

import contextlib
import functools
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, TypeVar

import httpx

from . import _calls as calls
from ._approval import as_result, check_decided, default_payload, error_text, next_wait, timed_out
from ._config import Settings, resolve_settings
from .errors import SpendgateConnectionError, error_from_response
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
    ProviderSettings,
    UnitEconomics,
)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


class ApprovedAction:
    """The handle of :meth:`Spendgate.approval`: set ``result`` to report it."""

    def __init__(self, action: Action) -> None:
        self.action = action
        self.result: Optional[Dict[str, Any]] = None


class Spendgate:
    """Synchronous spendgate client.

    Args:
        api_key: the raw ``svc_live_sk_...`` key; default ``SPENDGATE_API_KEY``.
        base_url: the control plane; default ``SPENDGATE_BASE_URL`` or ``http://127.0.0.1:3000``.
        proxy_url: the proxy; default ``SPENDGATE_PROXY_URL`` or ``http://127.0.0.1:8787``.
        timeout: seconds per HTTP request (a long-poll adds its wait).
        max_retries: retries on 429, 503 and network errors.
        max_retry_delay: the longest wait between two attempts, ``Retry-After`` included.
    """

    def __init__(
        self,
        api_key: Optional[str] = None,
        *,
        base_url: Optional[str] = None,
        proxy_url: Optional[str] = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_delay: float = 60.0,
        http_client: Optional[httpx.Client] = None,
    ) -> None:
        self.settings: Settings = resolve_settings(api_key, base_url, proxy_url, timeout, max_retries, max_retry_delay)
        self._http = http_client or httpx.Client(timeout=timeout)

    def __enter__(self) -> "Spendgate":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Closes the HTTP connections."""
        self._http.close()

    def _run(self, call: "calls.Call[T]") -> T:
        s = self.settings
        url = (s.base_url if call.surface == "control" else s.proxy_url) + call.path
        headers = {"X-Service-Key": s.api_key, "User-Agent": s.user_agent, **call.headers}
        for attempt in range(s.max_retries + 1):
            last = attempt == s.max_retries
            try:
                r = self._http.request(
                    call.method, url, json=call.json, params=call.params, headers=headers,
                    timeout=s.timeout + call.extra_timeout,
                )
            except httpx.TransportError as e:
                if last:
                    raise SpendgateConnectionError(f"{call.method} {url}: {e}") from e
                time.sleep(calls.retry_delay(attempt, None, s.max_retry_delay))
                continue
            retry_after = calls.parse_retry_after(r.headers.get("retry-after"))
            if r.status_code in calls.RETRYABLE_STATUSES and not last:
                time.sleep(calls.retry_delay(attempt, retry_after, s.max_retry_delay))
                continue
            body = _json(r)
            if r.status_code >= 400:
                raise error_from_response(r.status_code, body, retry_after)
            return call.parse(calls.Answer(r.status_code, r.headers, body))
        raise AssertionError("unreachable: the last attempt returns or raises")

    # Cost events

    def report(self, event: CostEvent) -> CostEventReceipt:
        """Reports one cost event now (``POST /api/cost-events``)."""
        return self._run(calls.report(event))

    def report_batch(self, events: Sequence[CostEvent]) -> BatchReceipt:
        """Reports 1-100 events in one request; duplicates are skipped by the server."""
        return self._run(calls.report_batch(events))

    # Actions

    def create_action(
        self,
        agent_id: str,
        action_type: str,
        payload: Mapping[str, Any],
        *,
        metadata: Optional[Mapping[str, Any]] = None,
        expires_in_seconds: Optional[int] = None,
        no_expiry: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> Action:
        """Asks a human for approval; the action starts ``pending``."""
        return self._run(calls.create_action(
            agent_id, action_type, payload, metadata, expires_in_seconds, idempotency_key, no_expiry))

    def get_action(self, action_id: str, *, wait_seconds: Optional[int] = None) -> Action:
        """Reads an action; with ``wait_seconds`` (0-60) the server holds the answer
        until it leaves ``pending`` or the wait ends."""
        return self._run(calls.get_action(action_id, wait_seconds))

    def wait_for_decision(self, action_id: str, *, timeout: Optional[float] = None) -> Action:
        """Long-polls until a human decided, looping up to ``timeout`` seconds
        (``None``: until the action expires).

        Raises:
            ActionRejectedError: rejected.
            ActionExpiredBeforeDecisionError: expired before a decision.
            ApprovalTimeoutError: still pending at the deadline.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        action = self.get_action(action_id)
        while action.is_pending:
            wait = next_wait(deadline)
            if wait is None:
                raise timed_out(action)
            action = self.get_action(action_id, wait_seconds=wait)
        return check_decided(action)

    def report_result(
        self,
        action_id: str,
        status: str,
        *,
        result: Optional[Mapping[str, Any]] = None,
        error_message: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Action:
        """Reports ``executing``, then ``executed`` (with ``result``) or ``failed``
        (with ``error_message``)."""
        return self._run(calls.report_result(action_id, status, result, error_message, idempotency_key))

    def run_approved(
        self,
        fn: Callable[[], T],
        *,
        agent_id: str,
        action_type: str,
        payload: Mapping[str, Any],
        metadata: Optional[Mapping[str, Any]] = None,
        expires_in_seconds: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> T:
        """Runs ``fn`` only after a human approved, reporting ``executing`` before it
        and ``executed`` (its return value) or ``failed`` (its exception) after it."""
        with self.approval(agent_id=agent_id, action_type=action_type, payload=payload, metadata=metadata,
                           expires_in_seconds=expires_in_seconds, timeout=timeout) as handle:
            value = fn()
            handle.result = as_result(value)
            return value

    @contextlib.contextmanager
    def approval(
        self,
        *,
        agent_id: str,
        action_type: str,
        payload: Mapping[str, Any],
        metadata: Optional[Mapping[str, Any]] = None,
        expires_in_seconds: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Iterator[ApprovedAction]:
        """A block that runs only after approval: ``executing`` is reported on entry,
        ``executed`` with ``handle.result`` on a normal exit, ``failed`` on an exception
        (which propagates). Rejection and expiry raise before the block runs."""
        action = self.create_action(agent_id, action_type, payload, metadata=metadata,
                                    expires_in_seconds=expires_in_seconds)
        action = self.wait_for_decision(action.id, timeout=timeout)
        self.report_result(action.id, "executing")
        handle = ApprovedAction(action)
        try:
            yield handle
        except BaseException as exc:
            self.report_result(action.id, "failed", error_message=error_text(exc))
            raise
        self.report_result(action.id, "executed", result=handle.result or {})

    def requires_approval(
        self,
        *,
        agent_id: str,
        action_type: str,
        payload: Optional[Callable[..., Mapping[str, Any]]] = None,
        expires_in_seconds: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Callable[[F], F]:
        """Decorator: each call of the function asks for approval first (see
        :meth:`run_approved`). ``payload`` builds what the approver sees from the
        call's arguments; by default their ``repr``."""

        def decorate(fn: F) -> F:
            @functools.wraps(fn)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                shown = payload(*args, **kwargs) if payload else default_payload(fn, args, kwargs)
                return self.run_approved(lambda: fn(*args, **kwargs), agent_id=agent_id, action_type=action_type,
                                         payload=shown, expires_in_seconds=expires_in_seconds, timeout=timeout)

            return wrapper  # type: ignore[return-value]

        return decorate

    # Per-customer

    def bind(
        self,
        customer_id: str,
        *,
        plan_ref: str,
        budget_cap_microdollars: int,
        margin_target_percent: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Binding:
        """Binds a customer to a plan and a cap (``POST /v1/bind``)."""
        return self._run(calls.bind(customer_id, plan_ref, budget_cap_microdollars, margin_target_percent,
                                    idempotency_key))

    def gate(
        self,
        customer_id: str,
        estimated_cost_microdollars: int,
        *,
        feature: Optional[str] = None,
        send_event: bool = False,
        with_preview: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> GateDecision:
        """Asks whether a customer may spend ``estimated_cost_microdollars``. A denial
        is a value (``allowed=False``); ``send_event=True`` also charges it."""
        return self._run(calls.gate(customer_id, estimated_cost_microdollars, feature, send_event, with_preview,
                                    idempotency_key))

    def unit_economics(self, customer_id: str) -> UnitEconomics:
        """A bound customer's binding, budget, lifetime cost and latest decision."""
        return self._run(calls.unit_economics(customer_id))

    # Budgets, policy, identity

    def budget_status(self) -> List[BudgetEntityStatus]:
        """Live budget status of the key's user and key entities."""
        return self._run(calls.budget_status())

    def policy(self) -> Policy:
        """Allowed models and providers, budget left, cheapest model per provider."""
        return self._run(calls.policy())

    def introspect(self) -> Introspection:
        """The user and key this client's key belongs to."""
        return self._run(calls.introspect())

    def openai_settings(self) -> ProviderSettings:
        """``base_url`` and ``default_headers`` for ``openai.OpenAI(...)`` to call
        through the proxy."""
        return provider_settings(self.settings, "openai")

    def anthropic_settings(self) -> ProviderSettings:
        """``base_url`` and ``default_headers`` for ``anthropic.Anthropic(...)``."""
        return provider_settings(self.settings, "anthropic")


def provider_settings(settings: Settings, provider: str) -> ProviderSettings:
    """Proxy settings for an official provider SDK (OpenAI's base URL ends in ``/v1``,
    Anthropic's does not)."""
    base = settings.proxy_url + ("/v1" if provider == "openai" else "")
    return ProviderSettings(base_url=base, default_headers={"X-Service-Key": settings.api_key})


def _json(r: httpx.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return None
