import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  ActionExpiredBeforeDecisionError,
  ActionRejectedError,
  ApprovalTimeoutError,
  InvalidActionTransitionError,
  NotFoundError,
} from "../src/index.js";
import { type World, runId, world } from "./support.js";

let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

test("a wrapped function runs after approval granted while it waits, and reports its result", async () => {
  const run = runId();
  const sent: string[] = [];
  const sendEmail = w.client().requiresApproval(
    { agentId: `mailer-${run}`, actionType: "send_email", payload: (to: string, body: string) => ({ to, body }), timeoutMs: 30_000 },
    async (to: string, _body: string) => {
      sent.push(to);
      return { messageId: "m-1" };
    },
  );
  const started = Date.now();
  const [result, id] = await Promise.all([sendEmail("a@example.com", "hi"), w.owner.decideWhenPending(`mailer-${run}`, true)]);
  assert.deepEqual(result, { messageId: "m-1" });
  assert.deepEqual(sent, ["a@example.com"]);
  assert.ok(Date.now() - started >= 500, "the call waited for the human");
  const stored = (await w.owner.get(`/api/actions/${id}`)).body.data;
  assert.equal(stored.status, "executed");
  assert.deepEqual(stored.payload, { to: "a@example.com", body: "hi" });
  assert.deepEqual(stored.result, { messageId: "m-1" });
});

test("rejection is a typed error and the function never runs", async () => {
  const run = runId();
  let ran = false;
  const attempt = w.client().withApproval(
    { agentId: `deleter-${run}`, actionType: "file_delete", payload: { path: "/tmp/x" }, timeoutMs: 30_000 },
    () => {
      ran = true;
    },
  );
  const [outcome, id] = await Promise.all([attempt.catch((e: unknown) => e), w.owner.decideWhenPending(`deleter-${run}`, false)]);
  assert.ok(outcome instanceof ActionRejectedError);
  assert.equal(outcome.action.id, id);
  assert.equal(ran, false);
});

test("expiry is a typed error", async () => {
  const c = w.client();
  const a = await c.createAction({ agentId: `slow-${runId()}`, actionType: "shell_command", payload: { cmd: "ls" }, expiresInSeconds: 1 });
  assert.equal(a.status, "pending");
  assert.ok(a.expiresAt);
  await assert.rejects(c.waitForDecision(a.id, { timeoutMs: 20_000 }), ActionExpiredBeforeDecisionError);
});

test("the caller's deadline is a typed error and the action stays pending", async () => {
  const c = w.client();
  const a = await c.createAction({ agentId: `patient-${runId()}`, actionType: "db_write", payload: {} });
  const started = Date.now();
  await assert.rejects(c.waitForDecision(a.id, { timeoutMs: 1_500 }), ApprovalTimeoutError);
  assert.ok(Date.now() - started >= 1_000);
  assert.equal((await c.getAction(a.id)).status, "pending");
});

test("a throwing function reports failed with its error, which is rethrown", async () => {
  const run = runId();
  const attempt = w.client().withApproval(
    { agentId: `poster-${run}`, actionType: "http_post", payload: { url: "https://example.com" }, timeoutMs: 30_000 },
    () => {
      throw new RangeError("upstream said no");
    },
  );
  const [outcome, id] = await Promise.all([attempt.catch((e: unknown) => e), w.owner.decideWhenPending(`poster-${run}`, true)]);
  assert.ok(outcome instanceof RangeError);
  const stored = (await w.owner.get(`/api/actions/${id}`)).body.data;
  assert.equal(stored.status, "failed");
  assert.equal(stored.errorMessage, "RangeError: upstream said no");
});

test("result reports follow the state machine", async () => {
  const c = w.client();
  const a = await c.createAction({ agentId: `manual-${runId()}`, actionType: "file_write", payload: { path: "a" }, metadata: { ticket: "7" } });
  await assert.rejects(c.reportResult(a.id, { status: "executing" }), (e: unknown) => e instanceof InvalidActionTransitionError && e.status === 409);
  assert.equal((await w.owner.post(`/api/actions/${a.id}/approve`)).status, 200);
  assert.equal((await c.waitForDecision(a.id, { timeoutMs: 5_000 })).status, "approved");
  assert.equal((await c.reportResult(a.id, { status: "executing" })).status, "executing");
  assert.equal((await c.reportResult(a.id, { status: "executed", result: { bytes: 3 } })).status, "executed");
  const got = await c.getAction(a.id);
  assert.deepEqual([got.result, got.metadata], [{ bytes: 3 }, { ticket: "7" }]);
  await assert.rejects(c.reportResult(a.id, { status: "failed", errorMessage: "late" }), InvalidActionTransitionError);
});

test("one idempotency key makes one action", async () => {
  const run = runId();
  const c = w.client();
  const input = { agentId: `idem-${run}`, actionType: "send_email" as const, payload: { to: "x" }, idempotencyKey: `k-${run}` };
  assert.equal((await c.createAction(input)).id, (await c.createAction(input)).id);
});

test("an unknown action is not found", async () => {
  await assert.rejects(w.client().getAction("svc_act_00000000-0000-4000-8000-000000000000"), NotFoundError);
});
