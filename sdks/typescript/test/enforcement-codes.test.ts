/**
 * The remaining error codes of the spec's table that the real server produces for
 * proxied calls and dashboard writes (the faults are in `faults.test.ts`): their
 * answers map to their classes too. The
 * SDK does not proxy provider calls itself (the official provider SDKs do, see
 * `openaiSettings`), but an agent that catches errors from both meets these.
 */

import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  BudgetExceededError,
  ConflictError,
  CustomerBudgetExceededError,
  InvalidInputError,
  InvalidKeyError,
  InvalidUpstreamError,
  MandateViolationError,
  ProcessorValidationFailedError,
  SessionLimitExceededError,
  SpendCapExceededError,
  Spendgate,
  type SpendgateApiError,
  errorFromResponse,
} from "../src/index.js";
import { Dashboard, Server, type World, fakeProcessor, runId, world } from "./support.js";

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
  r = await w.owner.post("/api/budgets", { entityType: "api_key", entityId: w.key.id, maxBudgetMicrodollars: 1_000_000_001 });
  const err = errorFromResponse(r.status, r.body);
  expect(err, SpendCapExceededError, "spend_cap_exceeded", 400);
  assert.deepEqual(err.details, { capMicrodollars: 1_000_000_000, plan: "free" });
});

test("paid tier codes map to their classes", async () => {
  // A Pro organization: connecting a payment processor that refuses the key, and
  // approving a budget increase whose budget was deleted meanwhile.
  const processor = await fakeProcessor();
  const server = await Server.start({
    SPENDGATE_DEFAULT_PLAN: "pro", SPENDGATE_PROCESSOR_URL: processor.url,
    SPENDGATE_SECRET_KEY: "sdk-tests-secret-key-of-forty-characters",
  });
  try {
    const owner = await Dashboard.signup(server, "paid@example.com");
    let r = await owner.post("/api/payprocessor/connect", { processorKey: "rk_test_unknown_0001" });
    expect(errorFromResponse(r.status, r.body), ProcessorValidationFailedError, "processor_validation_failed", 400);
    assert.match(r.body.error.message, /Invalid API Key/);
    assert.equal(processor.requests.length, 1);
    assert.ok(processor.requests[0]!.path.startsWith("/v1/customers"));
    assert.equal(processor.requests[0]!.headers.authorization, "Bearer rk_test_unknown_0001");

    const run = runId();
    const k = await owner.createKey(`raise-${run}`);
    r = await owner.post("/api/budgets", { entityType: "api_key", entityId: k.id, maxBudgetMicrodollars: 1_000 });
    assert.equal(r.status, 201);
    const c = new Spendgate({ apiKey: k.rawKey, baseUrl: server.control, proxyUrl: server.proxy });
    const action = await c.createAction({
      agentId: `raiser-${run}`, actionType: "budget_increase",
      payload: { entityType: "api_key", entityId: k.id, requestedAmountMicrodollars: 500, reason: "a bigger job" },
    });
    assert.equal((await owner.request("DELETE", `/api/budgets/${r.body.id}`)).status, 200);
    r = await owner.post(`/api/actions/${action.id}/approve`);
    expect(errorFromResponse(r.status, r.body), ConflictError, "conflict", 409);
  } finally {
    server.stop();
    await processor.close();
  }
});
