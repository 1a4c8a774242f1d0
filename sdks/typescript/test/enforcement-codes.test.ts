/**
 * The remaining error codes of the spec's table that the real server produces for
 * proxied calls and dashboard writes: their answers map to their classes too. The
 * SDK does not proxy provider calls itself (the official provider SDKs do, see
 * `openaiSettings`), but an agent that catches errors from both meets these.
 */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  BudgetExceededError,
  CustomerBudgetExceededError,
  InvalidInputError,
  InvalidKeyError,
  InvalidUpstreamError,
  MandateViolationError,
  SessionLimitExceededError,
  type SpendgateApiError,
  errorFromResponse,
} from "../src/index.js";
import { type World, runId, world } from "./support.js";

let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

const CHAT = { model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], max_tokens: 100 };

async function chat(key: string, headers: Record<string, string> = {}): Promise<SpendgateApiError> {
  const r = await fetch(`${w.server.proxy}/v1/chat/completions`, {
    method: "POST",
    headers: { "X-Service-Key": key, Authorization: "Bearer sk-test", "content-type": "application/json", ...headers },
    body: JSON.stringify(CHAT),
  });
  assert.ok(r.status >= 400);
  return errorFromResponse(r.status, await r.json());
}

function expect(err: SpendgateApiError, Cls: typeof SpendgateApiError, code: string, status: number): void {
  assert.ok(err instanceof Cls, String(err));
  assert.deepEqual([err.status, err.code], [status, code]);
}

test("proxied call denials map to their classes", async () => {
  const run = runId();
  const k = await w.owner.createKey(`enforced-${run}`);
  expect(await chat(k.rawKey, { "X-Service-Upstream": "https://upstream.invalid" }), InvalidUpstreamError, "invalid_upstream", 400);
  const c = w.client({ apiKey: k.rawKey });
  await c.bind({ customerId: `tiny-${run}`, planRef: "p", budgetCap: 1 });
  expect(await chat(k.rawKey, { "X-Service-Customer": `tiny-${run}` }), CustomerBudgetExceededError, "customer_budget_exceeded", 429);
  let r = await w.owner.post("/api/budgets", { entityType: "api_key", entityId: k.id, maxBudgetMicrodollars: 10_000_000, sessionLimitMicrodollars: 1 });
  assert.equal(r.status, 201);
  expect(await chat(k.rawKey, { "X-Service-Session": `s-${run}` }), SessionLimitExceededError, "session_limit_exceeded", 429);
  r = await w.owner.post("/api/budgets", { entityType: "api_key", entityId: k.id, maxBudgetMicrodollars: 1 });
  assert.equal(r.status, 201);
  expect(await chat(k.rawKey), BudgetExceededError, "budget_exceeded", 429);
});

test("a key that requires a customer is a mandate violation without one", async () => {
  const k = await w.owner.createKey(`mandated-${runId()}`, { requireCustomerId: true });
  expect(await chat(k.rawKey), MandateViolationError, "mandate_violation", 403);
});

test("dashboard write codes map to their classes", async () => {
  let r = await w.owner.post("/api/budgets", {
    entityType: "api_key", entityId: w.key.id, maxBudgetMicrodollars: 100, finalizationReserveMicrodollars: 100,
  });
  expect(errorFromResponse(r.status, r.body), InvalidInputError, "invalid_input", 400);
  r = await w.owner.get("/api/cost-events/attribution/svc_key_nope?groupBy=api_key");
  expect(errorFromResponse(r.status, r.body), InvalidKeyError, "invalid_key", 400);
});
