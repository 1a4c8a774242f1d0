"""Errors raised by the client: one class per error code of spendgate's error table.

Every error the server answers with its envelope ``{"error": {"code", "message",
"details"}}`` becomes an instance of the class registered for that code (or
:class:`SpendgateAPIError` for a code this version does not know), so an agent can
``except`` exactly the case it handles. Outcomes of a human decision that are not HTTP
errors (a rejected or expired action) have their own classes below.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class SpendgateError(Exception):
    """Base of every error this package raises."""


class SpendgateConnectionError(SpendgateError):
    """The server could not be reached (after the configured retries)."""


class SpendgateAPIError(SpendgateError):
    """The server answered with an error envelope.

    Attributes:
        status: the HTTP status.
        code: the machine code of the envelope (``validation_error``, ...).
        message: the human text.
        details: the envelope's ``details`` object, or ``None``.
        retry_after: seconds from a ``Retry-After`` header, when present.
    """

    code_name: str = ""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: Optional[Mapping[str, Any]] = None,
        retry_after: Optional[float] = None,
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details: Optional[Dict[str, Any]] = dict(details) if details is not None else None
        self.retry_after = retry_after


def _code(name: str) -> Any:
    def register(cls: Type[SpendgateAPIError]) -> Type[SpendgateAPIError]:
        cls.code_name = name
        ERROR_CLASSES[name] = cls
        return cls

    return register


ERROR_CLASSES: Dict[str, Type[SpendgateAPIError]] = {}
"""Every known error code mapped to its class."""


@_code("validation_error")
class ValidationError(SpendgateAPIError):
    """400: invalid fields, query parameters or ids (``details.issues``)."""


@_code("invalid_json")
class InvalidJSONError(SpendgateAPIError):
    """400: malformed JSON body."""


@_code("invalid_input")
class InvalidInputError(SpendgateAPIError):
    """400: budget finalization reserve not below its limit."""


@_code("spend_cap_exceeded")
class SpendCapExceededError(SpendgateAPIError):
    """400: budget over the tier's spending cap."""


@_code("invalid_key")
class InvalidKeyError(SpendgateAPIError):
    """400: malformed attribution key or ``svc_key_`` id."""


@_code("invalid_upstream")
class InvalidUpstreamError(SpendgateAPIError):
    """400: upstream override not on the allow list."""


@_code("processor_validation_failed")
class ProcessorValidationFailedError(SpendgateAPIError):
    """400: the payment processor rejected the supplied key."""


@_code("invalid_customer_id")
class InvalidCustomerIdError(SpendgateAPIError):
    """400: customer id missing, malformed or over 256 characters."""


@_code("invalid_plan_ref")
class InvalidPlanRefError(SpendgateAPIError):
    """400: bind plan reference missing or over 256 characters."""


@_code("invalid_budget_cap")
class InvalidBudgetCapError(SpendgateAPIError):
    """400: bind cap not a non-negative integer."""


@_code("invalid_margin_target")
class InvalidMarginTargetError(SpendgateAPIError):
    """400: margin target outside 0-100."""


@_code("invalid_estimate")
class InvalidEstimateError(SpendgateAPIError):
    """400: gate estimate not a positive integer."""


@_code("invalid_feature")
class InvalidFeatureError(SpendgateAPIError):
    """400: gate feature empty or over 256 characters."""


@_code("invalid_idempotency_key")
class InvalidIdempotencyKeyError(SpendgateAPIError):
    """400: idempotency key over 256 characters or not printable ASCII."""


@_code("customer_data_unsupported")
class CustomerDataUnsupportedError(SpendgateAPIError):
    """400: customer data on bind."""


@_code("authentication_required")
class AuthenticationRequiredError(SpendgateAPIError):
    """401 (control plane): no valid API key."""


@_code("unauthorized")
class UnauthorizedError(SpendgateAPIError):
    """401 (proxy): missing, malformed, invalid or revoked key."""


@_code("forbidden")
class ForbiddenError(SpendgateAPIError):
    """403: role, tier or ownership forbids the call."""


@_code("customer_not_allowed")
class CustomerNotAllowedError(SpendgateAPIError):
    """403: customer outside the key's ``allowedCustomers``."""


@_code("mandate_violation")
class MandateViolationError(SpendgateAPIError):
    """403: the key requires a customer id and none was given."""


@_code("not_found")
class NotFoundError(SpendgateAPIError):
    """404: missing, revoked or another organization's resource."""


@_code("payload_too_large")
class PayloadTooLargeError(SpendgateAPIError):
    """413: body over 1 MB."""


@_code("unsupported_media_type")
class UnsupportedMediaTypeError(SpendgateAPIError):
    """415: content type not ``application/json``."""


@_code("limit_exceeded")
class LimitExceededError(SpendgateAPIError):
    """409: key or webhook count at the tier limit."""


@_code("invalid_action_transition")
class InvalidActionTransitionError(SpendgateAPIError):
    """409: the action is not in the status the call needs."""


@_code("action_expired")
class ActionExpiredError(SpendgateAPIError):
    """409: approve/reject on an expired action."""


@_code("stale_action")
class StaleActionError(SpendgateAPIError):
    """409: the action changed concurrently."""


@_code("conflict")
class ConflictError(SpendgateAPIError):
    """409: conflicting state (processor already connected, budget gone)."""


@_code("binding_inactive")
class BindingInactiveError(SpendgateAPIError):
    """409: bind against a suspended or archived binding."""


@_code("idempotency_conflict")
class IdempotencyConflictError(SpendgateAPIError):
    """409: same idempotency key, different body."""


@_code("rate_limit_exceeded")
class RateLimitExceededError(SpendgateAPIError):
    """429: per-key rate limit (``retry_after`` set)."""


@_code("session_limit_exceeded")
class SessionLimitExceededError(SpendgateAPIError):
    """429: session spend limit reached."""


@_code("customer_budget_exceeded")
class CustomerBudgetExceededError(SpendgateAPIError):
    """429: customer budget reached."""


@_code("budget_exceeded")
class BudgetExceededError(SpendgateAPIError):
    """429 (proxy): a budget would be exceeded."""


@_code("internal_error")
class InternalError(SpendgateAPIError):
    """500: the server failed to write."""


@_code("idempotency_unavailable")
class IdempotencyUnavailableError(SpendgateAPIError):
    """503: idempotency persistence failed; retry later."""


@_code("request_in_progress")
class RequestInProgressError(SpendgateAPIError):
    """503: a concurrent duplicate is still running (``Retry-After: 1``)."""


def error_from_response(
    status: int, body: Any, retry_after: Optional[float] = None
) -> SpendgateAPIError:
    """Builds the error for an error response (envelope or not)."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict) and isinstance(err.get("code"), str):
        code = err["code"]
        message = str(err.get("message", ""))
        details = err.get("details") if isinstance(err.get("details"), dict) else None
    else:
        code, message, details = "http_error", f"HTTP {status} without an error envelope", None
    cls = ERROR_CLASSES.get(code, SpendgateAPIError)
    return cls(status, code, message, details, retry_after)


class ActionRejectedError(SpendgateError):
    """A human rejected the action the agent waited for."""

    def __init__(self, action: Any) -> None:
        super().__init__(f"action {action.id} was rejected")
        self.action = action


class ActionExpiredBeforeDecisionError(SpendgateError):
    """The action expired before anyone decided."""

    def __init__(self, action: Any) -> None:
        super().__init__(f"action {action.id} expired before a decision")
        self.action = action


class ApprovalTimeoutError(SpendgateError):
    """The caller's deadline passed while the action was still pending."""

    def __init__(self, action: Any) -> None:
        super().__init__(f"action {action.id} still pending at the deadline")
        self.action = action


class QueueFullError(SpendgateError):
    """The cost-event batcher's queue is full; the event was not queued."""
