/**
 * The error codes the server answers when something around a call went wrong: a
 * repeat of a request still running, a database that lost a table or changed a row
 * under a transition. The real server produces each (the suite owns its database, so
 * the fault is injected there, on SQLite and PostgreSQL alike) and the SDK throws the
 * class of the code.
 */

import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { after, before, test } from "node:test";

import {
  type CostEventInput,
  IdempotencyUnavailableError,
  InternalError,
  RequestInProgressError,
  type SpendgateApiError,
  StaleActionError,
} from "../src/index.js";
import { type World, runId, world } from "./support.js";

// A server of its own: these tests break its database for a moment.
let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

const sha256 = (text: string): string => createHash("sha256").update(text).digest("hex");

const event = (run: string): CostEventInput & { idempotencyKey: string } => ({
  provider: "openai", model: "gpt-4o-mini", inputTokens: 10, outputTokens: 2, costMicrodollars: 5,
  tags: { run }, idempotencyKey: `sdk_${run}`,
});

/** Awaits `p`, which must throw exactly `Cls` with its code and `status`. */
async function expectError(p: Promise<unknown>, Cls: typeof SpendgateApiError, code: string, status: number): Promise<SpendgateApiError> {
  const err = await p.then(() => null, (e: unknown) => e);
  assert.ok(err instanceof Cls && err.constructor === Cls, String(err));
  assert.deepEqual([err.status, err.code], [status, code]);
  return err;
}

// The SDK retries every 503: these clients show the first answer.
const noRetry = () => w.client({ maxRetries: 0 });

test("a repeat of a request still running is request_in_progress", async () => {
  const e = event(runId());
  assert.equal((await noRetry().report(e)).duplicate, false);
  // The first request's claim of its idempotency key as it is while it runs:
  // pending, owned by this live server.
  const claim = sha256(`${sha256(w.key.rawKey)}\n/api/cost-events\n${e.idempotencyKey}`);
  w.server.sql(`UPDATE idempotency_keys SET state = 'pending', response_status = NULL, response_body = NULL WHERE id = '${claim}'`);
  const err = await expectError(noRetry().report(e), RequestInProgressError, "request_in_progress", 503);
  assert.equal(err.retryAfter, 1);
});

test("a lost idempotency store is idempotency_unavailable", async () => {
  w.server.sql("ALTER TABLE idempotency_keys RENAME TO idempotency_keys_away");
  try {
    await expectError(noRetry().report(event(runId())), IdempotencyUnavailableError, "idempotency_unavailable", 503);
  } finally {
    w.server.sql("ALTER TABLE idempotency_keys_away RENAME TO idempotency_keys");
  }
  assert.equal((await noRetry().report(event(runId()))).duplicate, false);
});

test("a failing write is internal_error", async () => {
  const customerId = `acme-${runId()}`;
  w.server.sql("ALTER TABLE customer_bindings RENAME TO customer_bindings_away");
  try {
    await expectError(noRetry().bind({ customerId, planRef: "pro", budgetCap: 1_000 }), InternalError, "internal_error", 500);
  } finally {
    w.server.sql("ALTER TABLE customer_bindings_away RENAME TO customer_bindings");
  }
  assert.equal((await noRetry().bind({ customerId, planRef: "pro", budgetCap: 1_000 })).customerId, customerId);
});

// The row changes under the transition: its conditional write matches nothing, as
// when another instance changed the action between this one's read and its write.
const SKIP_ACTION_WRITES = {
  sqlite: "CREATE TRIGGER skip_action_writes BEFORE UPDATE ON actions BEGIN SELECT RAISE(IGNORE); END",
  postgres:
    "CREATE FUNCTION skip_row() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$; " +
    "CREATE TRIGGER skip_action_writes BEFORE UPDATE ON actions FOR EACH ROW EXECUTE FUNCTION skip_row()",
};
const ALLOW_ACTION_WRITES = {
  sqlite: "DROP TRIGGER skip_action_writes",
  postgres: "DROP TRIGGER skip_action_writes ON actions; DROP FUNCTION skip_row()",
};

test("a transition that lost a race is stale_action", async () => {
  const c = noRetry();
  const action = await c.createAction({ agentId: `racer-${runId()}`, actionType: "send_email", payload: { to: "ada@example.com" } });
  assert.equal((await w.owner.post(`/api/actions/${action.id}/approve`)).status, 200);
  w.server.sql(SKIP_ACTION_WRITES[w.server.backend]);
  try {
    await expectError(c.reportResult(action.id, { status: "executing" }), StaleActionError, "stale_action", 409);
  } finally {
    w.server.sql(ALLOW_ACTION_WRITES[w.server.backend]);
  }
  assert.equal((await c.reportResult(action.id, { status: "executing" })).status, "executing");
});
