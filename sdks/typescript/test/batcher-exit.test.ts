import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath, pathToFileURL } from "node:url";
import { promisify } from "node:util";

import { type World, runId, world } from "./support.js";

let w: World;
before(async () => {
  w = await world();
});
after(() => w.server.stop());

test("the batcher flushes before Node exits", async () => {
  const run = runId();
  const index = pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), "../src/index.js")).href;
  const script = `
    import { CostBatcher, Spendgate } from ${JSON.stringify(index)};
    const [apiKey, baseUrl, proxyUrl, run] = process.argv.slice(1);
    const b = new CostBatcher(new Spendgate({ apiKey, baseUrl, proxyUrl }), { flushIntervalMs: 3_600_000 });
    b.add({ provider: "openai", model: "gpt-4o-mini", inputTokens: 1, outputTokens: 1, costMicrodollars: 42, tags: { run } });
  `;
  await promisify(execFile)(process.execPath, ["--input-type=module", "-e", script, w.key.rawKey, w.server.control, w.server.proxy, run]);
  const stored = await w.owner.eventsTagged("run", run);
  assert.deepEqual(stored.map((s) => s.costMicrodollars), [42]);
});
