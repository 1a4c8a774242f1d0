import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  CostBatcher,
  type CostEventInput,
  QueueFullError,
  SpendgateApiError,
  SpendgateConnectionError,
  ValidationError,
} from "../src/index.js";
import { type World, flakyForwarder, runId, world } from "./support.js";

let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

const event = (run: string, cost = 1500): CostEventInput => ({
  provider: "openai", model: "gpt-4o-mini", inputTokens: 100, outputTokens: 20, costMicrodollars: cost, tags: { run },
});

test("a reported event is stored once and a repeat is a duplicate", async () => {
  const run = runId();
  const e = { ...event(run), idempotencyKey: `e-${run}` };
  const first = await w.client().report(e);
  const again = await w.client().report(e);
  assert.deepEqual([first.duplicate, again.duplicate], [false, true]);
  assert.equal(first.id, again.id);
  const stored = await w.owner.eventsTagged("run", run);
  assert.deepEqual(stored.map((s) => [s.costMicrodollars, s.source]), [[1500, "sdk"]]);
});

test("a batch answered 503 after it was stored is retried after Retry-After and stored once", async () => {
  const run = runId();
  const flaky = await flakyForwarder(w.server.control, 1, "1");
  try {
    const started = Date.now();
    const receipt = await w.client({ baseUrl: flaky.url }).reportBatch([event(run, 10), event(run, 20), event(run, 30)]);
    assert.ok(Date.now() - started >= 1000, "Retry-After: 1 honoured");
    assert.equal(flaky.requests.length, 2);
    assert.deepEqual(flaky.requests[0]!.body, flaky.requests[1]!.body, "the retry resends the same keys");
    assert.equal(receipt.inserted, 0);
    assert.equal(receipt.ids.length, 3);
    assert.match(String(flaky.requests[0]!.headers["user-agent"]), /^spendgate-typescript\//);
  } finally {
    await flaky.close();
  }
  const stored = await w.owner.eventsTagged("run", run);
  assert.deepEqual(stored.map((s) => s.costMicrodollars).sort((a, b) => a - b), [10, 20, 30]);
});

test("retries give up with the last error", async () => {
  const flaky = await flakyForwarder(w.server.control, 5, "0");
  try {
    await assert.rejects(w.client({ baseUrl: flaky.url, maxRetries: 2 }).report(event(runId())), (e: unknown) => {
      assert.ok(e instanceof SpendgateApiError);
      assert.equal(e.status, 503);
      assert.equal(e.retryAfter, 0);
      return true;
    });
    assert.equal(flaky.requests.length, 3);
  } finally {
    await flaky.close();
  }
});

test("batch bounds are checked before sending", async () => {
  await assert.rejects(w.client().reportBatch([]), ValidationError);
  await assert.rejects(w.client().reportBatch(Array.from({ length: 101 }, () => event("x"))), ValidationError);
});

test("the batcher sends by size and interval, and on close", async () => {
  const run = runId();
  const b = new CostBatcher(w.client(), { maxBatchSize: 2, flushIntervalMs: 300, maxQueue: 50 });
  for (let i = 0; i < 5; i++) b.add(event(run, 100 + i));
  const deadline = Date.now() + 10_000;
  while (b.sent < 5 && Date.now() < deadline) await new Promise((ok) => setTimeout(ok, 50));
  assert.equal(b.sent, 5);
  b.add(event(run, 200));
  await b.close();
  assert.equal(b.sent, 6);
  assert.equal((await w.owner.eventsTagged("run", run)).length, 6);
  assert.throws(() => b.add(event(run)));
});

test("queue overflow is thrown and counted, and flush sends the rest", async () => {
  const run = runId();
  const b = new CostBatcher(w.client(), { maxBatchSize: 100, flushIntervalMs: 60_000, maxQueue: 3 });
  for (let i = 1; i <= 3; i++) b.add(event(run, i));
  assert.throws(() => b.add(event(run, 99)), QueueFullError);
  assert.equal(b.overflowed, 1);
  await b.flush();
  assert.equal(b.pending, 0);
  await b.close();
  const stored = await w.owner.eventsTagged("run", run);
  assert.deepEqual(stored.map((s) => s.costMicrodollars).sort(), [1, 2, 3]);
});

test("a refused batch goes to onError and is not retried", async () => {
  const refused: unknown[] = [];
  const b = new CostBatcher(w.client(), { flushIntervalMs: 60_000, onError: (e) => refused.push(e) });
  b.add({ provider: "openai", model: "", inputTokens: 1, outputTokens: 1, costMicrodollars: 1 });
  await b.close();
  assert.equal(b.rejected, 1);
  assert.ok(refused[0] instanceof ValidationError);
});

test("a 429 is retried after Retry-After", async () => {
  const run = runId();
  const limited = await flakyForwarder(w.server.control, 1, "1", 429);
  try {
    const started = Date.now();
    await w.client({ baseUrl: limited.url }).report(event(run, 7));
    assert.ok(Date.now() - started >= 1000);
    assert.equal(limited.requests.length, 2);
  } finally {
    await limited.close();
  }
  assert.deepEqual((await w.owner.eventsTagged("run", run)).map((s) => s.costMicrodollars), [7]);
});

test("an unreachable server is a connection error after the retries", async () => {
  const c = w.client({ baseUrl: "http://127.0.0.1:9", maxRetries: 2, maxRetryDelayMs: 100 });
  await assert.rejects(c.report(event(runId())), SpendgateConnectionError);
});
