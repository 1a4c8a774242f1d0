"""Rules of waiting for a human decision, shared by both clients."""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Mapping, Optional

from .errors import ActionExpiredBeforeDecisionError, ActionRejectedError, ApprovalTimeoutError
from .models import Action

PayloadFn = Callable[..., Mapping[str, Any]]


def next_wait(deadline: Optional[float]) -> Optional[int]:
    """Seconds for the next long-poll (at most 60), or ``None`` when the deadline passed."""
    if deadline is None:
        return 60
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    return max(1, min(60, int(left + 0.999)))


def check_decided(action: Action) -> Action:
    """Returns an approved action; raises for rejected or expired ones."""
    if action.status == "rejected":
        raise ActionRejectedError(action)
    if action.status == "expired":
        raise ActionExpiredBeforeDecisionError(action)
    return action


def timed_out(action: Action) -> ApprovalTimeoutError:
    """The error for an action still pending at the caller's deadline."""
    return ApprovalTimeoutError(action)


def default_payload(fn: Callable[..., Any], args: Any, kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """The payload a decorated function's call is shown to the approver with."""
    return {"function": getattr(fn, "__name__", "call"), "args": [repr(a) for a in args],
            "kwargs": {k: repr(v) for k, v in kwargs.items()}}


def as_result(value: Any) -> Dict[str, Any]:
    """The ``result`` object reported for a function's return value."""
    if isinstance(value, dict):
        return value
    return {"value": value if isinstance(value, (str, int, float, bool, type(None))) else repr(value)}


def error_text(exc: BaseException) -> str:
    """The ``errorMessage`` reported for a failure (at most 4,000 characters)."""
    return f"{type(exc).__name__}: {exc}"[:4000]
