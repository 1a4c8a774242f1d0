import assert from "node:assert/strict";
import { after, afterEach, before, test } from "node:test";

import { outbox, runAgent } from "../examples/ai-sdk-approval.js";
import { Spendgate } from "../src/index.js";
import { Dashboard, type Recorder, Server, fakeOpenAI } from "./support.js";

const TOOL_CALL = {
  role: "assistant",
  content: null,
  tool_calls: [{
    id: "call_1",
    type: "function",
    function: { name: "sendEmail", arguments: JSON.stringify({ to: "ada@example.com", subject: "Build", body: "The build is green." }) },
  }],
};
const FINAL = { role: "assistant", content: "Done: Ada knows the build is green." };

let upstream: Recorder;
let server: Server;
let owner: Dashboard;
let sg: Spendgate;

before(async () => {
  upstream = await fakeOpenAI(TOOL_CALL, FINAL);
  server = await Server.start({ SPENDGATE_UPSTREAM_OPENAI: upstream.url });
  owner = await Dashboard.signup(server, "agents@example.com");
  const key = await owner.createKey("agent");
  sg = new Spendgate({ apiKey: key.rawKey, baseUrl: server.control, proxyUrl: server.proxy });
});
after(async () => {
  server.stop();
  await upstream.close();
});
afterEach(() => {
  outbox.length = 0;
  upstream.requests.length = 0;
});

async function decideNext(approve: boolean): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    const pending = (await owner.get("/api/actions?status=pending")).body.data as { id: string }[];
    if (pending[0]) {
      await owner.post(`/api/actions/${pending[0].id}/${approve ? "approve" : "reject"}`);
      return;
    }
    await new Promise((ok) => setTimeout(ok, 100));
  }
}

test("the AI SDK tool runs after approval and both model turns are costed by the proxy", async () => {
  const [text] = await Promise.all([runAgent(sg, "sk-test-not-real", "Tell ada@example.com the build is green"), decideNext(true)]);
  assert.equal(text, "Done: Ada knows the build is green.");
  assert.deepEqual(outbox, [{ to: "ada@example.com", subject: "Build", body: "The build is green." }]);
  assert.equal(upstream.requests.length, 2);
  assert.equal(upstream.requests[0]!.headers.authorization, "Bearer sk-test-not-real");
  const executed = (await owner.get("/api/actions?status=executed")).body.data as { payload: { to: string } }[];
  assert.deepEqual(executed.map((a) => a.payload.to), ["ada@example.com"]);
  const proxied = (await owner.get("/api/cost-events?source=proxy")).body.data as { costMicrodollars: number }[];
  assert.equal(proxied.length, 2, "this test runs first on its server");
  assert.ok(proxied.every((e) => e.costMicrodollars > 0));
});

test("a rejected tool call never sends and the model is told", async () => {
  await Promise.all([runAgent(sg, "sk-test-not-real", "Tell ada@example.com the build is green"), decideNext(false)]);
  assert.deepEqual(outbox, []);
  const second = JSON.parse(upstream.requests[1]!.body.toString()) as { messages: { role: string; content: unknown }[] };
  const toolMessage = second.messages.find((m) => m.role === "tool");
  assert.match(JSON.stringify(toolMessage?.content), /a human rejected this email/);
});
