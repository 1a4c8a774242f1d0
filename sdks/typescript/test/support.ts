/**
 * Test support: the real `spendgate` binary on ephemeral ports, its database (to
 * inject faults behind its back), a signed-in dashboard session, a flaky forwarding
 * proxy, a fake OpenAI upstream and a fake payment processor.
 */

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { existsSync, mkdtempSync, openSync, readFileSync, rmSync } from "node:fs";
import { type IncomingMessage, type Server as HttpServer, createServer } from "node:http";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

import { Spendgate, type SpendgateOptions } from "../src/index.js";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../../../..");
export const PASSWORD = "correct-horse-battery";

/** `SPENDGATE_BIN`, else the workspace's debug build (built when missing). */
export function binary(): string {
  const path = process.env.SPENDGATE_BIN ?? join(REPO, "target", "debug", "spendgate");
  if (!existsSync(path)) execFileSync("cargo", ["build", "--bin", "spendgate"], { cwd: REPO, stdio: "inherit" });
  return path;
}

const PG = process.env.SPENDGATE_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432";

/** One `spendgate serve` process on a fresh SQLite file (or PostgreSQL database). */
export class Server {
  control = "";
  proxy = "";
  private proc!: ChildProcess;
  private readonly dir = mkdtempSync(join(tmpdir(), "spendgate-sdk-ts-"));
  private pgName: string | null = null;
  dbUrl = "";

  static async start(extraEnv: Record<string, string> = {}): Promise<Server> {
    const s = new Server();
    await s.boot(extraEnv);
    return s;
  }

  private async boot(extraEnv: Record<string, string>): Promise<void> {
    if (process.env.SPENDGATE_TEST_BACKEND === "postgres") {
      this.pgName = `sg_sdk_${randomUUID().replaceAll("-", "")}`;
      execFileSync("psql", [`${PG}/postgres`, "-qc", `CREATE DATABASE ${this.pgName}`]);
      this.dbUrl = `${PG}/${this.pgName}`;
    } else {
      this.dbUrl = `sqlite://${this.dir}/spendgate.db`;
    }
    const log = openSync(join(this.dir, "server.log"), "w");
    this.proc = spawn(binary(), ["serve"], {
      env: {
        PATH: process.env.PATH ?? "",
        SPENDGATE_DATABASE_URL: this.dbUrl,
        SPENDGATE_CONTROL_ADDR: "127.0.0.1:0",
        SPENDGATE_PROXY_ADDR: "127.0.0.1:0",
        SPENDGATE_DEV: "1",
        SPENDGATE_WORKERS: "2",
        SPENDGATE_ARBITERS: "2",
        SPENDGATE_DB_MAX_CONNECTIONS: "4",
        SPENDGATE_DEFAULT_PLAN: "free",
        SPENDGATE_LOG: "warn",
        // Nothing leaves the machine: a call that passes enforcement meets a closed
        // loopback port unless a test gives a fake upstream.
        SPENDGATE_UPSTREAM_OPENAI: "http://127.0.0.1:9",
        SPENDGATE_UPSTREAM_ANTHROPIC: "http://127.0.0.1:9",
        SPENDGATE_UPSTREAM_GEMINI: "http://127.0.0.1:9",
        ...extraEnv,
      },
      stdio: ["ignore", "pipe", log],
    });
    const line = await new Promise<string>((ok, fail) => {
      const timer = setTimeout(() => fail(new Error(`not ready: ${readFileSync(join(this.dir, "server.log"), "utf8")}`)), 60_000);
      createInterface({ input: this.proc.stdout! }).on("line", (l) => {
        if (l.startsWith("spendgate ready")) {
          clearTimeout(timer);
          ok(l);
        }
      });
    });
    const field = (n: string) => line.split(/\s+/).find((p) => p.startsWith(`${n}=`))?.slice(n.length + 1) ?? "";
    this.control = field("control");
    this.proxy = field("proxy");
  }

  /** The database the server runs on. */
  get backend(): "sqlite" | "postgres" {
    return this.pgName ? "postgres" : "sqlite";
  }

  /** Runs SQL statements on the database behind the running server's back, as an operator or a failing disk would. */
  sql(script: string): void {
    if (this.pgName) execFileSync("psql", [this.dbUrl, "-v", "ON_ERROR_STOP=1", "-qc", script]);
    else execFileSync("sqlite3", ["-bail", "-cmd", ".timeout 10000", join(this.dir, "spendgate.db"), script]);
  }

  stop(): void {
    this.proc.kill("SIGKILL");
    rmSync(this.dir, { recursive: true, force: true });
    if (this.pgName) {
      try {
        execFileSync("psql", [`${PG}/postgres`, "-qc", `DROP DATABASE IF EXISTS ${this.pgName} WITH (FORCE)`]);
      } catch {
        // best effort
      }
    }
  }
}

/** A JSON answer of the dashboard. */
export interface Res {
  status: number;
  body: any;
}

/** A signed-in dashboard user: what a human does in the browser. */
export class Dashboard {
  private cookie = "";
  constructor(readonly base: string) {}

  static async signup(server: Server, email: string): Promise<Dashboard> {
    const d = new Dashboard(server.control);
    const r = await d.post("/api/auth/signup", { email, password: PASSWORD });
    if (r.status !== 201) throw new Error(`signup: ${JSON.stringify(r.body)}`);
    return d;
  }

  static async inNewOrg(server: Server, email: string, org: string): Promise<Dashboard> {
    execFileSync(binary(), ["user", "create", "--email", email, "--password", PASSWORD, "--org", org, "--role", "owner"], {
      env: { PATH: process.env.PATH ?? "", SPENDGATE_DATABASE_URL: server.dbUrl, SPENDGATE_DEFAULT_PLAN: "free" },
    });
    const d = new Dashboard(server.control);
    const r = await d.post("/api/auth/login", { email, password: PASSWORD });
    if (r.status !== 200) throw new Error(`login: ${JSON.stringify(r.body)}`);
    return d;
  }

  async request(method: string, path: string, body?: unknown): Promise<Res> {
    const headers: Record<string, string> = { Origin: this.base, Cookie: this.cookie };
    if (body !== undefined) headers["content-type"] = "application/json";
    const r = await fetch(this.base + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
    const set = r.headers.getSetCookie().map((c) => c.split(";")[0]).filter((c) => c && !c.endsWith("="));
    if (set.length) this.cookie = set.join("; ");
    const text = await r.text();
    return { status: r.status, body: text ? JSON.parse(text) : null };
  }

  get(path: string): Promise<Res> {
    return this.request("GET", path);
  }

  post(path: string, body?: unknown): Promise<Res> {
    return this.request("POST", path, body);
  }

  async createKey(name: string, fields: Record<string, unknown> = {}): Promise<{ id: string; rawKey: string }> {
    const r = await this.post("/api/keys", { name, ...fields });
    if (r.status !== 201) throw new Error(`create key: ${JSON.stringify(r.body)}`);
    return r.body.data;
  }

  async eventsTagged(key: string, value: string): Promise<any[]> {
    const r = await this.get(`/api/cost-events?tag.${key}=${encodeURIComponent(value)}&limit=100`);
    return r.body.data;
  }

  /** Decides the agent's next pending action a moment after it appears, as a human would. */
  async decideWhenPending(agentId: string, approve: boolean): Promise<string> {
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      const r = await this.get("/api/actions?status=pending");
      const mine = (r.body.data as any[]).find((a) => a.agentId === agentId);
      if (mine) {
        await new Promise((ok) => setTimeout(ok, 500));
        await this.post(`/api/actions/${mine.id}/${approve ? "approve" : "reject"}`);
        return mine.id as string;
      }
      await new Promise((ok) => setTimeout(ok, 100));
    }
    throw new Error(`no pending action of ${agentId}`);
  }
}

/** A recorded request. */
export interface Recorded {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
  body: Buffer;
}

/** An answer of a {@link Recorder}. */
export interface Out {
  status: number;
  headers: Record<string, string>;
  body: string;
}

type Handler = (r: Recorded) => Promise<Out>;

/** A loopback HTTP server whose answers come from a function. */
export class Recorder {
  readonly requests: Recorded[] = [];
  private server!: HttpServer;
  url = "";

  static async start(handle: Handler): Promise<Recorder> {
    const r = new Recorder();
    r.server = createServer(async (req, res) => {
      const chunks: Buffer[] = [];
      for await (const c of req) chunks.push(c as Buffer);
      const rec = { method: req.method ?? "GET", path: req.url ?? "/", headers: req.headers, body: Buffer.concat(chunks) };
      r.requests.push(rec);
      const out = await handle(rec);
      res.writeHead(out.status, out.headers);
      res.end(out.body);
    });
    await new Promise<void>((ok) => r.server.listen(0, "127.0.0.1", ok));
    const addr = r.server.address();
    r.url = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
    return r;
  }

  close(): Promise<void> {
    return new Promise((ok) => {
      this.server.closeAllConnections();
      this.server.close(() => ok());
    });
  }
}

/** Forwards to `target`; the first `failures` answers become `status` (503) after the request reached the server. */
export function flakyForwarder(target: string, failures: number, retryAfter = "1", status = 503): Promise<Recorder> {
  let left = failures;
  return Recorder.start(async (r): Promise<Out> => {
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(r.headers)) {
      if (typeof v === "string" && !["host", "content-length", "connection"].includes(k)) headers[k] = v;
    }
    const up = await fetch(target + r.path, { method: r.method, headers, body: r.method === "GET" ? undefined : new Uint8Array(r.body) });
    const text = await up.text();
    if (left > 0) {
      left--;
      return {
        status,
        headers: { "retry-after": retryAfter, "content-type": "application/json" },
        body: JSON.stringify({ error: { code: "service_unavailable", message: "try again", details: null } }),
      };
    }
    return { status: up.status, headers: { "content-type": up.headers.get("content-type") ?? "application/json" }, body: text };
  });
}

/**
 * An OpenAI-compatible chat completions upstream: it answers `toolCall` to a
 * conversation without a tool result yet, and `final` once one is there.
 */
export function fakeOpenAI(toolCall: Record<string, unknown>, final: Record<string, unknown>): Promise<Recorder> {
  return Recorder.start(async (r) => {
    const req = r.body.length ? (JSON.parse(r.body.toString()) as { model?: string; messages?: { role: string }[] }) : {};
    const message = req.messages?.some((m) => m.role === "tool") ? final : toolCall;
    return {
      status: 200,
      headers: { "content-type": "application/json", "x-request-id": randomUUID() },
      body: JSON.stringify({
        id: `chatcmpl-${randomUUID()}`,
        object: "chat.completion",
        created: 1_700_000_000,
        model: req.model ?? "gpt-4o-mini",
        choices: [{ index: 0, message, finish_reason: message.tool_calls ? "tool_calls" : "stop" }],
        usage: { prompt_tokens: 100, completion_tokens: 20, total_tokens: 120 },
      }),
    };
  });
}

/** A payment processor answering like Stripe's REST API to a key it does not know: every call is 401 with its error body. */
export function fakeProcessor(): Promise<Recorder> {
  return Recorder.start(async () => ({
    status: 401,
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ error: { type: "invalid_request_error", message: "Invalid API Key provided: rk_test_****0001" } }),
  }));
}

/** A short unique id for one test's data. */
export const runId = (): string => randomUUID().slice(0, 12);

/** One server, its signed-up owner and an API key, for one test file. */
export interface World {
  server: Server;
  owner: Dashboard;
  key: { id: string; rawKey: string };
  client: (options?: Partial<SpendgateOptions>) => Spendgate;
}

/** Starts a {@link World}; stop it with `world.server.stop()`. */
export async function world(): Promise<World> {
  const server = await Server.start();
  const owner = await Dashboard.signup(server, "owner@example.com");
  const key = await owner.createKey("sdk-tests");
  const client = (options: Partial<SpendgateOptions> = {}) =>
    new Spendgate({ apiKey: key.rawKey, baseUrl: server.control, proxyUrl: server.proxy, maxRetryDelayMs: 2_000, ...options });
  return { server, owner, key, client };
}
