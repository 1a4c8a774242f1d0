import assert from "node:assert/strict";
import { after, before, test } from "node:test";

import {
  ActionExpiredError,
  ERROR_CLASSES,
  ForbiddenError,
  InvalidJsonError,
  LimitExceededError,
  PayloadTooLargeError,
  RateLimitExceededError,
  Spendgate,
  SpendgateApiError,
  UnsupportedMediaTypeError,
  ValidationError,
  errorFromResponse,
} from "../src/index.js";
import { Dashboard, Server, type World, runId, world } from "./support.js";

let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

const SPEC_CODES = `validation_error invalid_json invalid_input spend_cap_exceeded invalid_key invalid_upstream
processor_validation_failed invalid_customer_id invalid_plan_ref invalid_budget_cap invalid_margin_target
invalid_estimate invalid_feature invalid_idempotency_key customer_data_unsupported authentication_required
unauthorized forbidden customer_not_allowed not_found payload_too_large unsupported_media_type limit_exceeded
invalid_action_transition action_expired stale_action conflict binding_inactive idempotency_conflict
rate_limit_exceeded session_limit_exceeded customer_budget_exceeded mandate_violation internal_error
idempotency_unavailable request_in_progress`.split(/\s+/);

test("every code of the spec's table has its own class", () => {
  assert.deepEqual(SPEC_CODES.filter((c) => !(c in ERROR_CLASSES)), []);
  assert.equal(new Set(SPEC_CODES.map((c) => ERROR_CLASSES[c])).size, SPEC_CODES.length);
});

test("a validation error carries its issues", async () => {
  await assert.rejects(
    w.client().createAction({ agentId: "a", actionType: "launch_rockets" as never, payload: {} }),
    (e: unknown) => e instanceof ValidationError && e.status === 400 && JSON.stringify(e.details).includes("actionType"),
  );
});

test("budget_increase on the Free tier is forbidden", async () => {
  const payload = { entityType: "api_key", entityId: w.key.id, requestedAmountMicrodollars: 1, reason: "more" };
  await assert.rejects(w.client().createAction({ agentId: "a", actionType: "budget_increase", payload }), ForbiddenError);
});

test("a payload over a megabyte is payload_too_large", async () => {
  await assert.rejects(
    w.client().createAction({ agentId: "a", actionType: "file_write", payload: { blob: "x".repeat(1_100_000) } }),
    (e: unknown) => e instanceof PayloadTooLargeError && e.status === 413,
  );
});

test("the rate limit carries Retry-After", async () => {
  const server = await Server.start({ SPENDGATE_RATE_LIMIT_KEY_PER_MINUTE: "2" });
  try {
    const owner = await Dashboard.signup(server, "limited@example.com");
    const k = await owner.createKey("limited");
    const c = new Spendgate({ apiKey: k.rawKey, baseUrl: server.control, proxyUrl: server.proxy, maxRetries: 0 });
    const outcome = await (async () => {
      for (let i = 0; i < 5; i++) await c.introspect();
    })().catch((e: unknown) => e);
    assert.ok(outcome instanceof RateLimitExceededError);
    assert.equal(outcome.status, 429);
    assert.ok((outcome.retryAfter ?? 0) > 0);
  } finally {
    server.stop();
  }
});

test("answers only a session or a broken client meets map to their classes", async () => {
  const post = (type: string, body: string) =>
    fetch(`${w.server.control}/api/cost-events`, { method: "POST", headers: { "X-Service-Key": w.key.rawKey, "content-type": type }, body });
  let r = await post("application/json", "{not json");
  assert.ok(errorFromResponse(r.status, await r.json()) instanceof InvalidJsonError);
  r = await post("text/plain", "{}");
  assert.ok(errorFromResponse(r.status, await r.json()) instanceof UnsupportedMediaTypeError);
  const a = await w.client().createAction({ agentId: `late-${runId()}`, actionType: "send_email", payload: {}, expiresInSeconds: 1 });
  await new Promise((ok) => setTimeout(ok, 1_500));
  const approve = await w.owner.post(`/api/actions/${a.id}/approve`);
  assert.ok(errorFromResponse(approve.status, approve.body) instanceof ActionExpiredError);
});

test("the eleventh key on the Free tier is limit_exceeded", async () => {
  const other = await Dashboard.inNewOrg(w.server, "keys@example.com", "Keys Inc");
  let last = { status: 0, body: null as unknown };
  for (let i = 0; i < 11; i++) last = await other.post("/api/keys", { name: `k${i}` });
  const e = errorFromResponse(last.status, last.body);
  assert.ok(e instanceof LimitExceededError);
  assert.equal(e.status, 409);
});

test("an unknown code is still an API error", () => {
  const e = errorFromResponse(418, { error: { code: "teapot", message: "short", details: null } });
  assert.equal(e.constructor, SpendgateApiError);
  assert.equal(e.code, "teapot");
  assert.equal(errorFromResponse(502, "<html>").code, "http_error");
});
