/**
 * The client: every call of the SDK, plus the approval helpers that run a function
 * only after a human said yes and report what happened.
 *
 * @module
 */

import { type Settings, type SpendgateOptions, resolveSettings } from "./config.js";
import {
  ActionExpiredBeforeDecisionError,
  ActionRejectedError,
  ApprovalTimeoutError,
  ValidationError,
} from "./errors.js";
import type {
  Action,
  BatchReceipt,
  Binding,
  BindInput,
  BudgetEntityStatus,
  CostEventInput,
  CostEventReceipt,
  CreateActionInput,
  GateDecision,
  GateInput,
  Introspection,
  Policy,
  ProviderSettings,
  UnitEconomics,
} from "./models.js";
import { type Answer, type Request, send } from "./transport.js";

/** The most events in one batch. */
export const MAX_BATCH = 100;

/** Options of the approval helpers. */
export interface ApprovalOptions extends Omit<CreateActionInput, "idempotencyKey"> {
  /** Milliseconds to wait for a decision; default: until the action expires. */
  timeoutMs?: number;
}

/** A fresh idempotency key. */
export function newKey(prefix: string): string {
  return `${prefix}_${uuid()}`;
}

/** A random UUID: Web Crypto where the runtime exposes it globally (Node 19+, Bun,
 * Deno, edge runtimes); Node 18 lacks the global, and a key only has to be unique. */
function uuid(): string {
  const c = (globalThis as { crypto?: { randomUUID?: () => string } }).crypto;
  if (c?.randomUUID) return c.randomUUID();
  const hex = Array.from({ length: 32 }, () => Math.floor(Math.random() * 16).toString(16));
  hex[12] = "4";
  hex[16] = ((parseInt(hex[16] ?? "0", 16) & 0x3) | 0x8).toString(16);
  const h = hex.join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

/** Gives an event its idempotency key if it has none, so retries reuse it. */
export function withKey(e: CostEventInput): CostEventInput & { idempotencyKey: string } {
  return { source: "sdk", ...e, idempotencyKey: e.idempotencyKey ?? newKey("sdk") };
}

const data = <T>(a: Answer): T => {
  const b = a.body as { data?: T };
  return (b && typeof b === "object" && "data" in b ? b.data : a.body) as T;
};

const replayed = (a: Answer): boolean =>
  a.headers.get("idempotent-replayed") === "true" || a.headers.get("x-idempotent-replayed") === "true";

const asResult = (v: unknown): Record<string, unknown> =>
  v !== null && typeof v === "object" && !Array.isArray(v) ? (v as Record<string, unknown>) : { value: v ?? null };

const errorText = (e: unknown): string =>
  (e instanceof Error ? `${e.name}: ${e.message}` : `Error: ${String(e)}`).slice(0, 4000);

/** The spendgate client. */
export class Spendgate {
  /** Resolved settings. */
  readonly settings: Settings;

  constructor(options: SpendgateOptions = {}) {
    this.settings = resolveSettings(options);
  }

  private call(req: Request): Promise<Answer> {
    return send(this.settings, req);
  }

  /** Reports one cost event now (`POST /api/cost-events`). */
  async report(event: CostEventInput): Promise<CostEventReceipt> {
    const e = withKey(event);
    const a = await this.call({
      method: "POST", surface: "control", path: "/api/cost-events", body: e,
      headers: { "Idempotency-Key": e.idempotencyKey },
    });
    const d = data<{ id: string; createdAt: string }>(a);
    return { id: d.id, createdAt: d.createdAt, duplicate: a.status === 200 || replayed(a) };
  }

  /** Reports 1-100 events in one request; each keeps its own idempotency key. */
  async reportBatch(events: CostEventInput[]): Promise<BatchReceipt> {
    if (events.length < 1 || events.length > MAX_BATCH) {
      throw new ValidationError(0, "validation_error", `a batch holds 1 to ${MAX_BATCH} events`, {
        issues: [{ path: ["events"], message: `a batch holds 1 to ${MAX_BATCH} events` }],
      });
    }
    const a = await this.call({
      method: "POST", surface: "control", path: "/api/cost-events/batch", body: { events: events.map(withKey) },
    });
    return a.body as BatchReceipt;
  }

  /** Asks a human for approval; the action starts `pending`. */
  async createAction(input: CreateActionInput): Promise<Action> {
    const { idempotencyKey, ...body } = input;
    const a = await this.call({
      method: "POST", surface: "control", path: "/api/actions", body,
      headers: { "Idempotency-Key": idempotencyKey ?? newKey("act") },
    });
    const { agentId, actionType, payload } = input;
    return { agentId, actionType, payload, ...data<Action>(a) };
  }

  /** Reads an action; with `waitSeconds` (0-60) the server answers when it leaves `pending` or the wait ends. */
  async getAction(actionId: string, options: { waitSeconds?: number } = {}): Promise<Action> {
    const w = options.waitSeconds;
    const a = await this.call({
      method: "GET", surface: "control", path: `/api/actions/${encodeURIComponent(actionId)}`,
      query: w === undefined ? {} : { waitSeconds: String(w) }, extraTimeoutMs: (w ?? 0) * 1000,
    });
    return data<Action>(a);
  }

  /**
   * Long-polls until a human decided, looping to `timeoutMs` (default: until it expires).
   * Resolves with the approved action; rejects with {@link ActionRejectedError},
   * {@link ActionExpiredBeforeDecisionError} or {@link ApprovalTimeoutError}.
   */
  async waitForDecision(actionId: string, options: { timeoutMs?: number } = {}): Promise<Action> {
    const deadline = options.timeoutMs === undefined ? null : Date.now() + options.timeoutMs;
    let action = await this.getAction(actionId);
    while (action.status === "pending") {
      const left = deadline === null ? 60_000 : deadline - Date.now();
      if (left <= 0) throw new ApprovalTimeoutError(action);
      action = await this.getAction(actionId, { waitSeconds: Math.max(1, Math.min(60, Math.ceil(left / 1000))) });
    }
    if (action.status === "rejected") throw new ActionRejectedError(action);
    if (action.status === "expired") throw new ActionExpiredBeforeDecisionError(action);
    return action;
  }

  /** Reports `executing`, then `executed` (with `result`) or `failed` (with `errorMessage`). */
  async reportResult(
    actionId: string,
    report: { status: "executing" | "executed" | "failed"; result?: Record<string, unknown>; errorMessage?: string },
    options: { idempotencyKey?: string } = {},
  ): Promise<Action> {
    const a = await this.call({
      method: "POST", surface: "control", path: `/api/actions/${encodeURIComponent(actionId)}/result`,
      body: report, headers: { "Idempotency-Key": options.idempotencyKey ?? newKey("res") },
    });
    return data<Action>(a);
  }

  /**
   * Runs `fn` only after a human approved the action described by `options`:
   * reports `executing` before it, then `executed` with its return value or `failed`
   * with its error (which is rethrown).
   */
  async withApproval<T>(options: ApprovalOptions, fn: (action: Action) => Promise<T> | T): Promise<T> {
    const { timeoutMs, ...create } = options;
    const created = await this.createAction(create);
    const approved = await this.waitForDecision(created.id, timeoutMs === undefined ? {} : { timeoutMs });
    await this.reportResult(approved.id, { status: "executing" });
    let value: T;
    try {
      value = await fn(approved);
    } catch (e) {
      await this.reportResult(approved.id, { status: "failed", errorMessage: errorText(e) });
      throw e;
    }
    await this.reportResult(approved.id, { status: "executed", result: asResult(value) });
    return value;
  }

  /**
   * Wraps `fn` so that each call asks for approval first (see {@link withApproval});
   * `payload` builds what the approver sees from the call's arguments.
   */
  requiresApproval<A extends unknown[], T>(
    options: Omit<ApprovalOptions, "payload"> & { payload: (...args: A) => Record<string, unknown> },
    fn: (...args: A) => Promise<T> | T,
  ): (...args: A) => Promise<T> {
    const { payload, ...rest } = options;
    return (...args: A) => this.withApproval({ ...rest, payload: payload(...args) }, () => fn(...args));
  }

  /** Binds a customer to a plan and a cap (`POST /v1/bind`). */
  async bind(input: BindInput): Promise<Binding> {
    const { idempotencyKey, ...body } = input;
    const a = await this.call({
      method: "POST", surface: "proxy", path: "/v1/bind", body,
      headers: { "Idempotency-Key": idempotencyKey ?? newKey("bind") },
    });
    return { ...(a.body as Omit<Binding, "replayed">), replayed: replayed(a) };
  }

  /** Asks whether a customer may spend; a denial is `allowed: false`. */
  async gate(input: GateInput): Promise<GateDecision> {
    const { idempotencyKey, ...body } = input;
    const a = await this.call({
      method: "POST", surface: "proxy", path: "/v1/gate", body: { sendEvent: false, withPreview: false, ...body },
      headers: { "Idempotency-Key": idempotencyKey ?? newKey("gate") },
    });
    return { ...(a.body as Omit<GateDecision, "replayed">), replayed: replayed(a) };
  }

  /** A bound customer's binding, budget, lifetime cost and latest decision. */
  async unitEconomics(customerId: string): Promise<UnitEconomics> {
    const path = `/v1/customers/${encodeURIComponent(customerId)}/unit-economics`;
    return (await this.call({ method: "GET", surface: "proxy", path })).body as UnitEconomics;
  }

  /** Live budget status of the key's user and key entities. */
  async budgetStatus(): Promise<BudgetEntityStatus[]> {
    const a = await this.call({ method: "GET", surface: "control", path: "/api/budgets/status" });
    return (a.body as { entities: BudgetEntityStatus[] }).entities;
  }

  /** Allowed models and providers, budget left, cheapest model per provider. */
  async policy(): Promise<Policy> {
    return (await this.call({ method: "GET", surface: "proxy", path: "/v1/policy" })).body as Policy;
  }

  /** The user and key this client's key belongs to. */
  async introspect(): Promise<Introspection> {
    return data<Introspection>(await this.call({ method: "GET", surface: "control", path: "/api/auth/introspect" }));
  }

  /** `baseURL` and `defaultHeaders` for `new OpenAI({...})` to call through the proxy. */
  openaiSettings(): ProviderSettings {
    return { baseURL: `${this.settings.proxyUrl}/v1`, defaultHeaders: { "X-Service-Key": this.settings.apiKey } };
  }

  /** `baseURL` and `defaultHeaders` for `new Anthropic({...})`. */
  anthropicSettings(): ProviderSettings {
    return { baseURL: this.settings.proxyUrl, defaultHeaders: { "X-Service-Key": this.settings.apiKey } };
  }
}
