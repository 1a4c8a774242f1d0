import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import { AuthenticationRequiredError, Spendgate, UnauthorizedError } from "../src/index.js";
import { type World, world } from "./support.js";

let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

test("budget status shows the key's budget", async () => {
  const r = await w.owner.post("/api/budgets", { entityType: "api_key", entityId: w.key.id, maxBudgetMicrodollars: 5_000_000 });
  assert.equal(r.status, 201);
  const mine = (await w.client().budgetStatus()).find((e) => e.entityType === "api_key" && e.entityId === w.key.id);
  assert.ok(mine);
  assert.equal(mine.limitMicrodollars, 5_000_000);
  assert.equal(mine.remainingMicrodollars, 5_000_000 - mine.spendMicrodollars);
  assert.equal(mine.policy, "strict_block");
});

test("policy names the cheapest model per provider", async () => {
  const p = await w.client().policy();
  assert.ok(p.cheapest_per_provider.openai?.model);
  assert.ok(p.cheapest_per_provider.anthropic?.model);
  assert.ok(p.cheapest_overall && p.cheapest_overall.provider in p.cheapest_per_provider);
  assert.equal(p.restrictions_active, false);
});

test("introspect names the user (development mode reads the key id as dev)", async () => {
  const me = await w.client().introspect();
  assert.match(me.userId, /^svc_usr_/);
  assert.deepEqual([me.keyId, me.dev], ["dev", true]);
});

test("settings come from the environment, and provider settings point at the proxy", async () => {
  const saved = { ...process.env };
  try {
    process.env.SPENDGATE_API_KEY = w.key.rawKey;
    process.env.SPENDGATE_BASE_URL = `${w.server.control}/`;
    process.env.SPENDGATE_PROXY_URL = w.server.proxy;
    const c = new Spendgate();
    assert.equal(c.settings.baseUrl, w.server.control);
    assert.match((await c.introspect()).userId, /^svc_usr_/);
    assert.deepEqual(c.openaiSettings(), { baseURL: `${w.server.proxy}/v1`, defaultHeaders: { "X-Service-Key": w.key.rawKey } });
    assert.equal(c.anthropicSettings().baseURL, w.server.proxy);
  } finally {
    process.env = saved;
  }
});

test("a missing or provider key is refused before any call", () => {
  const saved = process.env.SPENDGATE_API_KEY;
  delete process.env.SPENDGATE_API_KEY;
  try {
    assert.throws(() => new Spendgate(), /SPENDGATE_API_KEY/);
    assert.throws(() => new Spendgate({ apiKey: "sk-proj-abc" }), /not a spendgate key/);
  } finally {
    if (saved !== undefined) process.env.SPENDGATE_API_KEY = saved;
  }
});

test("a wrong key is authentication_required on the control plane and unauthorized on the proxy", async () => {
  const c = new Spendgate({ apiKey: `svc_live_sk_${"0".repeat(32)}`, baseUrl: w.server.control, proxyUrl: w.server.proxy });
  await assert.rejects(c.introspect(), (e: unknown) => e instanceof AuthenticationRequiredError && e.status === 401);
  await assert.rejects(c.policy(), (e: unknown) => e instanceof UnauthorizedError && e.status === 401);
});
