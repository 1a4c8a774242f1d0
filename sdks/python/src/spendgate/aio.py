"""The asynchronous client: the same calls as :class:`spendgate.Spendgate`, awaited,
over one ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from typing import Any, AsyncIterator, Awaitable, Callable, List, Mapping, Optional, Sequence, TypeVar

import httpx

from . import _calls as calls
from ._approval import as_result, check_decided, default_payload, error_text, next_wait, timed_out
from ._config import Settings, resolve_settings
from .client import ApprovedAction, _json, provider_settings
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
F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


class AsyncSpendgate:
    """Asynchronous spendgate client; arguments as :class:`spendgate.Spendgate`."""

    def __init__(
        self,
        api_key: Optional[str] = None,
        *,
        base_url: Optional[str] = None,
        proxy_url: Optional[str] = None,
        timeout: float = 30.0,
        max_retries: int = 3,
        max_retry_delay: float = 60.0,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self.settings: Settings = resolve_settings(api_key, base_url, proxy_url, timeout, max_retries, max_retry_delay)
        self._http = http_client or httpx.AsyncClient(timeout=timeout)

    async def __aenter__(self) -> "AsyncSpendgate":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Closes the HTTP connections."""
        await self._http.aclose()

    async def _run(self, call: "calls.Call[T]") -> T:
        s = self.settings
        url = (s.base_url if call.surface == "control" else s.proxy_url) + call.path
        headers = {"X-Service-Key": s.api_key, "User-Agent": s.user_agent, **call.headers}
        for attempt in range(s.max_retries + 1):
            last = attempt == s.max_retries
            try:
                r = await self._http.request(
                    call.method, url, json=call.json, params=call.params, headers=headers,
                    timeout=s.timeout + call.extra_timeout,
                )
            except httpx.TransportError as e:
                if last:
                    raise SpendgateConnectionError(f"{call.method} {url}: {e}") from e
                await asyncio.sleep(calls.retry_delay(attempt, None, s.max_retry_delay))
                continue
            retry_after = calls.parse_retry_after(r.headers.get("retry-after"))
            if r.status_code in calls.RETRYABLE_STATUSES and not last:
                await asyncio.sleep(calls.retry_delay(attempt, retry_after, s.max_retry_delay))
                continue
            body = _json(r)
            if r.status_code >= 400:
                raise error_from_response(r.status_code, body, retry_after)
            return call.parse(calls.Answer(r.status_code, r.headers, body))
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def report(self, event: CostEvent) -> CostEventReceipt:
        """Reports one cost event now."""
        return await self._run(calls.report(event))

    async def report_batch(self, events: Sequence[CostEvent]) -> BatchReceipt:
        """Reports 1-100 events in one request."""
        return await self._run(calls.report_batch(events))

    async def create_action(
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
        """Asks a human for approval."""
        return await self._run(calls.create_action(
            agent_id, action_type, payload, metadata, expires_in_seconds, idempotency_key, no_expiry))

    async def get_action(self, action_id: str, *, wait_seconds: Optional[int] = None) -> Action:
        """Reads an action, optionally long-polling up to ``wait_seconds``."""
        return await self._run(calls.get_action(action_id, wait_seconds))

    async def wait_for_decision(self, action_id: str, *, timeout: Optional[float] = None) -> Action:
        """Long-polls until a decision; raises as :meth:`spendgate.Spendgate.wait_for_decision`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        action = await self.get_action(action_id)
        while action.is_pending:
            wait = next_wait(deadline)
            if wait is None:
                raise timed_out(action)
            action = await self.get_action(action_id, wait_seconds=wait)
        return check_decided(action)

    async def report_result(
        self,
        action_id: str,
        status: str,
        *,
        result: Optional[Mapping[str, Any]] = None,
        error_message: Optional[str] = None,
        idempotency_key: Optional[str] = None,
    ) -> Action:
        """Reports ``executing``, ``executed`` or ``failed``."""
        return await self._run(calls.report_result(action_id, status, result, error_message, idempotency_key))

    @contextlib.asynccontextmanager
    async def approval(
        self,
        *,
        agent_id: str,
        action_type: str,
        payload: Mapping[str, Any],
        metadata: Optional[Mapping[str, Any]] = None,
        expires_in_seconds: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> AsyncIterator[ApprovedAction]:
        """``async with``: as :meth:`spendgate.Spendgate.approval`."""
        action = await self.create_action(agent_id, action_type, payload, metadata=metadata,
                                          expires_in_seconds=expires_in_seconds)
        action = await self.wait_for_decision(action.id, timeout=timeout)
        await self.report_result(action.id, "executing")
        handle = ApprovedAction(action)
        try:
            yield handle
        except BaseException as exc:
            await self.report_result(action.id, "failed", error_message=error_text(exc))
            raise
        await self.report_result(action.id, "executed", result=handle.result or {})

    async def run_approved(
        self,
        fn: Callable[[], Awaitable[T]],
        *,
        agent_id: str,
        action_type: str,
        payload: Mapping[str, Any],
        metadata: Optional[Mapping[str, Any]] = None,
        expires_in_seconds: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> T:
        """Awaits ``fn()`` only after approval, reporting its outcome."""
        async with self.approval(agent_id=agent_id, action_type=action_type, payload=payload, metadata=metadata,
                                 expires_in_seconds=expires_in_seconds, timeout=timeout) as handle:
            value = await fn()
            handle.result = as_result(value)
            return value

    def requires_approval(
        self,
        *,
        agent_id: str,
        action_type: str,
        payload: Optional[Callable[..., Mapping[str, Any]]] = None,
        expires_in_seconds: Optional[int] = None,
        timeout: Optional[float] = None,
    ) -> Callable[[F], F]:
        """Decorator for coroutine functions: each call asks for approval first."""

        def decorate(fn: F) -> F:
            @functools.wraps(fn)
            async def wrapper(*args: Any, **kwargs: Any) -> Any:
                shown = payload(*args, **kwargs) if payload else default_payload(fn, args, kwargs)
                return await self.run_approved(lambda: fn(*args, **kwargs), agent_id=agent_id,
                                               action_type=action_type, payload=shown,
                                               expires_in_seconds=expires_in_seconds, timeout=timeout)

            return wrapper  # type: ignore[return-value]

        return decorate

    async def bind(
        self,
        customer_id: str,
        *,
        plan_ref: str,
        budget_cap_microdollars: int,
        margin_target_percent: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Binding:
        """Binds a customer to a plan and a cap."""
        return await self._run(calls.bind(customer_id, plan_ref, budget_cap_microdollars, margin_target_percent,
                                          idempotency_key))

    async def gate(
        self,
        customer_id: str,
        estimated_cost_microdollars: int,
        *,
        feature: Optional[str] = None,
        send_event: bool = False,
        with_preview: bool = False,
        idempotency_key: Optional[str] = None,
    ) -> GateDecision:
        """Asks whether a customer may spend; a denial is a value."""
        return await self._run(calls.gate(customer_id, estimated_cost_microdollars, feature, send_event,
                                          with_preview, idempotency_key))

    async def unit_economics(self, customer_id: str) -> UnitEconomics:
        """A bound customer's unit economics."""
        return await self._run(calls.unit_economics(customer_id))

    async def budget_status(self) -> List[BudgetEntityStatus]:
        """Live budget status of the key's entities."""
        return await self._run(calls.budget_status())

    async def policy(self) -> Policy:
        """What the key may use and has left."""
        return await self._run(calls.policy())

    async def introspect(self) -> Introspection:
        """The user and key this client's key belongs to."""
        return await self._run(calls.introspect())

    def openai_settings(self) -> ProviderSettings:
        """Proxy settings for ``openai.AsyncOpenAI(...)``."""
        return provider_settings(self.settings, "openai")

    def anthropic_settings(self) -> ProviderSettings:
        """Proxy settings for ``anthropic.AsyncAnthropic(...)``."""
        return provider_settings(self.settings, "anthropic")
