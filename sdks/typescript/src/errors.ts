/**
 * Errors: one class per error code of spendgate's error table, so an agent can
 * `instanceof`-check exactly the case it handles, plus the outcomes of a human
 * decision (rejected, expired, still pending at the deadline) and queue overflow.
 *
 * @module
 */

/** Base of every error this package throws. */
export class SpendgateError extends Error {
  constructor(message: string) {
    super(message);
    this.name = new.target.name;
  }
}

/** The server could not be reached (after the configured retries). */
export class SpendgateConnectionError extends SpendgateError {}

/** The server answered with an error envelope `{ error: { code, message, details } }`. */
export class SpendgateApiError extends SpendgateError {
  /** The HTTP status. */
  readonly status: number;
  /** The machine code (`validation_error`, ...). */
  readonly code: string;
  /** The envelope's `details`, or `null`. */
  readonly details: Record<string, unknown> | null;
  /** Seconds from a `Retry-After` header, when present. */
  readonly retryAfter: number | null;

  constructor(
    status: number,
    code: string,
    message: string,
    details: Record<string, unknown> | null = null,
    retryAfter: number | null = null,
  ) {
    super(`${status} ${code}: ${message}`);
    this.status = status;
    this.code = code;
    this.details = details;
    this.retryAfter = retryAfter;
  }
}

/** 400: invalid fields, query parameters or ids (`details.issues`). */
export class ValidationError extends SpendgateApiError {}

/** 400: malformed JSON body. */
export class InvalidJsonError extends SpendgateApiError {}

/** 400: budget finalization reserve not below its limit. */
export class InvalidInputError extends SpendgateApiError {}

/** 400: budget over the tier's spending cap. */
export class SpendCapExceededError extends SpendgateApiError {}

/** 400: malformed attribution key or `svc_key_` id. */
export class InvalidKeyError extends SpendgateApiError {}

/** 400: upstream override not on the allow list. */
export class InvalidUpstreamError extends SpendgateApiError {}

/** 400: the payment processor rejected the key. */
export class ProcessorValidationFailedError extends SpendgateApiError {}

/** 400: customer id missing, malformed or over 256 characters. */
export class InvalidCustomerIdError extends SpendgateApiError {}

/** 400: bind plan reference missing or over 256 characters. */
export class InvalidPlanRefError extends SpendgateApiError {}

/** 400: bind cap not a non-negative integer. */
export class InvalidBudgetCapError extends SpendgateApiError {}

/** 400: margin target outside 0-100. */
export class InvalidMarginTargetError extends SpendgateApiError {}

/** 400: gate estimate not a positive integer. */
export class InvalidEstimateError extends SpendgateApiError {}

/** 400: gate feature empty or over 256 characters. */
export class InvalidFeatureError extends SpendgateApiError {}

/** 400: idempotency key over 256 characters or not printable ASCII. */
export class InvalidIdempotencyKeyError extends SpendgateApiError {}

/** 400: customer data on bind. */
export class CustomerDataUnsupportedError extends SpendgateApiError {}

/** 401 (control plane): no valid API key. */
export class AuthenticationRequiredError extends SpendgateApiError {}

/** 401 (proxy): missing, malformed, invalid or revoked key. */
export class UnauthorizedError extends SpendgateApiError {}

/** 403: role, tier or ownership forbids the call. */
export class ForbiddenError extends SpendgateApiError {}

/** 403: customer outside the key's `allowedCustomers`. */
export class CustomerNotAllowedError extends SpendgateApiError {}

/** 403: the key requires a customer id and none was given. */
export class MandateViolationError extends SpendgateApiError {}

/** 404: missing, revoked or another organization's resource. */
export class NotFoundError extends SpendgateApiError {}

/** 413: body over 1 MB. */
export class PayloadTooLargeError extends SpendgateApiError {}

/** 415: content type not `application/json`. */
export class UnsupportedMediaTypeError extends SpendgateApiError {}

/** 409: key or webhook count at the tier limit. */
export class LimitExceededError extends SpendgateApiError {}

/** 409: the action is not in the status the call needs. */
export class InvalidActionTransitionError extends SpendgateApiError {}

/** 409: approve/reject on an expired action. */
export class ActionExpiredError extends SpendgateApiError {}

/** 409: the action changed concurrently. */
export class StaleActionError extends SpendgateApiError {}

/** 409: conflicting state. */
export class ConflictError extends SpendgateApiError {}

/** 409: bind against a suspended or archived binding. */
export class BindingInactiveError extends SpendgateApiError {}

/** 409: same idempotency key, different body. */
export class IdempotencyConflictError extends SpendgateApiError {}

/** 429: per-key rate limit (`retryAfter` set). */
export class RateLimitExceededError extends SpendgateApiError {}

/** 429: session spend limit reached. */
export class SessionLimitExceededError extends SpendgateApiError {}

/** 429: customer budget reached. */
export class CustomerBudgetExceededError extends SpendgateApiError {}

/** 429 (proxy): a budget would be exceeded. */
export class BudgetExceededError extends SpendgateApiError {}

/** 500: the server failed to write. */
export class InternalError extends SpendgateApiError {}

/** 503: idempotency persistence failed; retry later. */
export class IdempotencyUnavailableError extends SpendgateApiError {}

/** 503: a concurrent duplicate is still running. */
export class RequestInProgressError extends SpendgateApiError {}

/** Every known error code mapped to its class. */
export const ERROR_CLASSES: Readonly<Record<string, typeof SpendgateApiError>> = {
  validation_error: ValidationError,
  invalid_json: InvalidJsonError,
  invalid_input: InvalidInputError,
  spend_cap_exceeded: SpendCapExceededError,
  invalid_key: InvalidKeyError,
  invalid_upstream: InvalidUpstreamError,
  processor_validation_failed: ProcessorValidationFailedError,
  invalid_customer_id: InvalidCustomerIdError,
  invalid_plan_ref: InvalidPlanRefError,
  invalid_budget_cap: InvalidBudgetCapError,
  invalid_margin_target: InvalidMarginTargetError,
  invalid_estimate: InvalidEstimateError,
  invalid_feature: InvalidFeatureError,
  invalid_idempotency_key: InvalidIdempotencyKeyError,
  customer_data_unsupported: CustomerDataUnsupportedError,
  authentication_required: AuthenticationRequiredError,
  unauthorized: UnauthorizedError,
  forbidden: ForbiddenError,
  customer_not_allowed: CustomerNotAllowedError,
  mandate_violation: MandateViolationError,
  not_found: NotFoundError,
  payload_too_large: PayloadTooLargeError,
  unsupported_media_type: UnsupportedMediaTypeError,
  limit_exceeded: LimitExceededError,
  invalid_action_transition: InvalidActionTransitionError,
  action_expired: ActionExpiredError,
  stale_action: StaleActionError,
  conflict: ConflictError,
  binding_inactive: BindingInactiveError,
  idempotency_conflict: IdempotencyConflictError,
  rate_limit_exceeded: RateLimitExceededError,
  session_limit_exceeded: SessionLimitExceededError,
  customer_budget_exceeded: CustomerBudgetExceededError,
  budget_exceeded: BudgetExceededError,
  internal_error: InternalError,
  idempotency_unavailable: IdempotencyUnavailableError,
  request_in_progress: RequestInProgressError,
};

/** Builds the error for an error answer (with or without an envelope). */
export function errorFromResponse(status: number, body: unknown, retryAfter: number | null = null): SpendgateApiError {
  const err = typeof body === "object" && body !== null ? (body as { error?: unknown }).error : undefined;
  if (typeof err === "object" && err !== null && typeof (err as { code?: unknown }).code === "string") {
    const e = err as { code: string; message?: unknown; details?: unknown };
    const details = typeof e.details === "object" && e.details !== null ? (e.details as Record<string, unknown>) : null;
    const Cls = ERROR_CLASSES[e.code] ?? SpendgateApiError;
    return new Cls(status, e.code, String(e.message ?? ""), details, retryAfter);
  }
  return new SpendgateApiError(status, "http_error", `HTTP ${status} without an error envelope`, null, retryAfter);
}

/** An action as the server last showed it (carried by the decision errors). */
export interface DecidedAction {
  /** `svc_act_...` */
  id: string;
  /** Its status. */
  status: string;
}

/** A human rejected the action the agent waited for. */
export class ActionRejectedError extends SpendgateError {
  /** The rejected action. */
  readonly action: DecidedAction;
  constructor(action: DecidedAction) {
    super(`action ${action.id} was rejected`);
    this.action = action;
  }
}

/** The action expired before anyone decided. */
export class ActionExpiredBeforeDecisionError extends SpendgateError {
  /** The expired action. */
  readonly action: DecidedAction;
  constructor(action: DecidedAction) {
    super(`action ${action.id} expired before a decision`);
    this.action = action;
  }
}

/** The caller's deadline passed while the action was still pending. */
export class ApprovalTimeoutError extends SpendgateError {
  /** The pending action. */
  readonly action: DecidedAction;
  constructor(action: DecidedAction) {
    super(`action ${action.id} still pending at the deadline`);
    this.action = action;
  }
}

/** The cost-event batcher's queue is full; the event was not queued. */
export class QueueFullError extends SpendgateError {}
