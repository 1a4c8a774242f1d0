/**
 * Types of what the client sends and receives, named as in spendgate's spec
 * (camelCase JSON fields; money in integer microdollars).
 *
 * @module
 */

/** A cost event to report (the spec's ingest fields). */
export interface CostEventInput {
  provider: string;
  model: string;
  inputTokens: number;
  outputTokens: number;
  costMicrodollars: number;
  cachedInputTokens?: number;
  reasoningTokens?: number;
  durationMs?: number;
  sessionId?: string;
  traceId?: string;
  eventType?: "llm" | "tool" | "custom";
  toolName?: string;
  toolServer?: string;
  tags?: Record<string, string>;
  customer?: string;
  costBreakdown?: { input: number; output: number; cached: number; reasoning?: number };
  source?: "sdk" | "api" | "proxy" | "mcp";
  /** Fixed once per event so that every retry is stored once; generated when absent. */
  idempotencyKey?: string;
}

/** The answer to one reported event. */
export interface CostEventReceipt {
  id: string;
  createdAt: string;
  /** True when the event was already stored (a retry or a repeat). */
  duplicate: boolean;
}

/** The answer to a batch. */
export interface BatchReceipt {
  /** Events that were new. */
  inserted: number;
  ids: string[];
}

/** Action types accepted at creation. */
export type ActionType =
  | "send_email"
  | "http_post"
  | "http_delete"
  | "shell_command"
  | "db_write"
  | "file_write"
  | "file_delete"
  | "budget_increase";

/** Action statuses. */
export type ActionStatus = "pending" | "approved" | "rejected" | "expired" | "executing" | "executed" | "failed";

/** A human-in-the-loop action. Fields beyond `id` and `status` are present when the server returns them. */
export interface Action {
  id: string;
  status: ActionStatus;
  agentId?: string;
  actionType?: ActionType;
  payload?: Record<string, unknown>;
  metadata?: Record<string, unknown> | null;
  result?: Record<string, unknown> | null;
  errorMessage?: string | null;
  createdAt?: string;
  approvedAt?: string | null;
  rejectedAt?: string | null;
  executedAt?: string | null;
  expiresAt?: string | null;
  expiredAt?: string | null;
  approvedBy?: string | null;
  rejectedBy?: string | null;
}

/** Input of {@link Spendgate.createAction}. */
export interface CreateActionInput {
  agentId: string;
  actionType: ActionType;
  payload: Record<string, unknown>;
  metadata?: Record<string, unknown>;
  /** Seconds until it expires (default 3,600); `null` never expires. */
  expiresInSeconds?: number | null;
  idempotencyKey?: string;
}

/** A customer binding (`POST /v1/bind`). */
export interface Binding {
  bindingId: string;
  customerId: string;
  planRef: string;
  budgetCapMicrodollars: number;
  marginTargetPercent: number | null;
  status: "active" | "suspended" | "archived";
  /** True when this answer is a replay of an earlier call with the same idempotency key. */
  replayed: boolean;
}

/** Input of {@link Spendgate.bind}. */
export interface BindInput {
  customerId: string;
  planRef: string;
  /** Microdollars. */
  budgetCap: number;
  marginTargetPercent?: number | null;
  idempotencyKey?: string;
}

/** Input of {@link Spendgate.gate}. */
export interface GateInput {
  customerId: string;
  estimatedCostMicrodollars: number;
  feature?: string | null;
  /** Charge the estimate when allowed (atomic with the check). */
  sendEvent?: boolean;
  withPreview?: boolean;
  idempotencyKey?: string;
}

/** The answer of `POST /v1/gate`: a denial is `allowed: false`, not an error. */
export interface GateDecision {
  allowed: boolean;
  decisionId: string;
  reason?: "budget_exceeded" | "bind_not_found";
  remaining?: number;
  recovery?: {
    retryable: boolean;
    owner_action_required: boolean;
    retry_after_seconds: number | null;
    docs: string | null;
  };
  preview?: {
    scenario: string;
    title: string;
    message: string;
    customerId: string;
    currentBalance: number;
    requiredBalance: number;
    upgradeUrl: string | null;
  };
  /** True when this answer is a replay. */
  replayed: boolean;
}

/** `GET /v1/customers/:customerId/unit-economics`. */
export interface UnitEconomics {
  customerId: string;
  binding: {
    bindingId: string;
    planRef: string;
    budgetCapMicrodollars: number;
    marginTargetPercent: number | null;
    status: string;
  };
  budget: { maxMicrodollars: number; spendMicrodollars: number; remainingMicrodollars: number; propagated: boolean };
  cost: { lifetimeCostMicrodollars: number; eventCount: number };
  latestBudgetCheck: { decision: "approved" | "denied" | "skipped" | null; at: string | null };
}

/** One entity of `GET /api/budgets/status`. */
export interface BudgetEntityStatus {
  entityType: string;
  entityId: string;
  limitMicrodollars: number;
  spendMicrodollars: number;
  remainingMicrodollars: number;
  policy: string;
  resetInterval: string | null;
  currentPeriodStart: string | null;
  thresholdPercentages: number[];
  velocityLimitMicrodollars: number | null;
  velocityWindowSeconds: number | null;
  velocityCooldownSeconds: number | null;
  sessionLimitMicrodollars: number | null;
  finalizationReserveMicrodollars: number | null;
  /** Strict budgets: calls are clamped to the room left instead of refused. */
  exactCeiling?: boolean;
}

/** A model and its prices per million tokens. */
export interface ModelPrice {
  model: string;
  input_per_mtok: number;
  output_per_mtok: number;
}

/** `GET /v1/policy`. */
export interface Policy {
  budget: {
    remaining_microdollars: number;
    max_microdollars: number;
    spend_microdollars: number;
    period_end: string | null;
    entity_type: string;
    entity_id: string;
  } | null;
  allowed_models: string[];
  allowed_providers: string[];
  cheapest_per_provider: Record<string, ModelPrice>;
  cheapest_overall: (ModelPrice & { provider: string }) | null;
  restrictions_active: boolean;
}

/** `GET /api/auth/introspect`. */
export interface Introspection {
  userId: string;
  /** `svc_key_...`, or `dev` in local development mode. */
  keyId: string;
  dev?: boolean;
}

/** Options for an official provider SDK so it calls through the proxy. */
export interface ProviderSettings {
  baseURL: string;
  defaultHeaders: Record<string, string>;
}
