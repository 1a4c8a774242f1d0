import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  BindingInactiveError,
  CustomerDataUnsupportedError,
  CustomerNotAllowedError,
  IdempotencyConflictError,
  InvalidBudgetCapError,
  InvalidCustomerIdError,
  InvalidEstimateError,
  InvalidFeatureError,
  InvalidIdempotencyKeyError,
  InvalidMarginTargetError,
  InvalidPlanRefError,
  NotFoundError,
  Spendgate,
  type SpendgateApiError,
} from "../src/index.js";
import { type World, runId, world } from "./support.js";

let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

test("bind replays with one key and conflicts on another body", async () => {
  const run = runId();
  const c = w.client();
  const input = { customerId: `cust-${run}`, planRef: "pro", budgetCap: 50_000, marginTargetPercent: 40, idempotencyKey: `b-${run}` };
  const b = await c.bind(input);
  assert.deepEqual([b.status, b.budgetCapMicrodollars, b.marginTargetPercent, b.replayed], ["active", 50_000, 40, false]);
  const again = await c.bind(input);
  assert.ok(again.replayed);
  assert.equal(again.bindingId, b.bindingId);
  await assert.rejects(c.bind({ ...input, budgetCap: 1 }), (e: unknown) => e instanceof IdempotencyConflictError && e.status === 409);
});

test("gate charges once per idempotency key and denies as a value", async () => {
  const run = runId();
  const cust = `gated-${run}`;
  const c = w.client();
  await c.bind({ customerId: cust, planRef: "basic", budgetCap: 10_000 });
  const g = { customerId: cust, estimatedCostMicrodollars: 4_000, feature: "report", sendEvent: true, idempotencyKey: `g-${run}` };
  const first = await c.gate(g);
  const replay = await c.gate(g);
  assert.ok(first.allowed && !first.replayed);
  assert.ok(replay.replayed);
  assert.equal(replay.decisionId, first.decisionId);
  assert.match(first.decisionId, /^dec_/);
  const ue = await c.unitEconomics(cust);
  assert.equal(ue.budget.spendMicrodollars, 4_000, "the replay did not charge again");
  assert.equal(ue.binding.planRef, "basic");
  assert.ok((await c.gate({ customerId: cust, estimatedCostMicrodollars: 5_000 })).allowed, "advisory");
  assert.equal((await c.unitEconomics(cust)).budget.spendMicrodollars, 4_000, "advisory gates charge nothing");
  const denied = await c.gate({ customerId: cust, estimatedCostMicrodollars: 7_000, sendEvent: true, withPreview: true });
  assert.deepEqual([denied.allowed, denied.reason], [false, "budget_exceeded"]);
  assert.ok(denied.recovery);
  assert.equal(denied.preview?.customerId, cust);
  assert.equal((await c.unitEconomics(cust)).latestBudgetCheck.decision, "denied");
});

test("an unbound customer is bind_not_found at the gate and not found for unit economics", async () => {
  const c = w.client();
  const d = await c.gate({ customerId: `nobody-${runId()}`, estimatedCostMicrodollars: 10, withPreview: true });
  assert.deepEqual([d.allowed, d.reason, d.preview?.scenario], [false, "bind_not_found", "feature_flag"]);
  await assert.rejects(c.unitEconomics(`nobody-${runId()}`), NotFoundError);
});

test("bind against a suspended binding is binding_inactive", async () => {
  const cust = `susp-${runId()}`;
  const c = w.client();
  await c.bind({ customerId: cust, planRef: "pro", budgetCap: 100 });
  assert.equal((await w.owner.post(`/api/customer-bindings/${cust}/suspend`)).status, 200);
  await assert.rejects(c.bind({ customerId: cust, planRef: "pro", budgetCap: 200 }), BindingInactiveError);
});

test("a customer outside the key's allow list is refused", async () => {
  const run = runId();
  const k = await w.owner.createKey("allow-listed", { allowedCustomers: [`ok-${run}`] });
  const c = new Spendgate({ apiKey: k.rawKey, baseUrl: w.server.control, proxyUrl: w.server.proxy });
  assert.equal((await c.bind({ customerId: `ok-${run}`, planRef: "p", budgetCap: 5 })).status, "active");
  await assert.rejects(c.gate({ customerId: `other-${run}`, estimatedCostMicrodollars: 5 }), CustomerNotAllowedError);
});

const bad: [string, (c: Spendgate) => Promise<unknown>, typeof SpendgateApiError][] = [
  ["invalid_customer_id", (c) => c.bind({ customerId: "bad id!", planRef: "p", budgetCap: 1 }), InvalidCustomerIdError],
  ["invalid_plan_ref", (c) => c.bind({ customerId: "c1", planRef: "", budgetCap: 1 }), InvalidPlanRefError],
  ["invalid_budget_cap", (c) => c.bind({ customerId: "c1", planRef: "p", budgetCap: -1 }), InvalidBudgetCapError],
  ["invalid_margin_target", (c) => c.bind({ customerId: "c1", planRef: "p", budgetCap: 1, marginTargetPercent: 101 }), InvalidMarginTargetError],
  ["invalid_estimate", (c) => c.gate({ customerId: "c1", estimatedCostMicrodollars: 0 }), InvalidEstimateError],
  ["invalid_feature", (c) => c.gate({ customerId: "c1", estimatedCostMicrodollars: 10, feature: "" }), InvalidFeatureError],
  ["invalid_idempotency_key", (c) => c.gate({ customerId: "c1", estimatedCostMicrodollars: 10, idempotencyKey: "k".repeat(300) }), InvalidIdempotencyKeyError],
  [
    "customer_data_unsupported",
    (c) => c.bind({ customerId: "c1", planRef: "p", budgetCap: 1, customerData: { email: "x" } } as never),
    CustomerDataUnsupportedError,
  ],
];

for (const [code, call, Cls] of bad) {
  test(`bad per-customer input maps to ${code}`, async () => {
    await assert.rejects(call(w.client()), (e: unknown) => e instanceof Cls && e.status === 400 && e.code === code);
  });
}
