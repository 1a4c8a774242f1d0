/**
 * One HTTP call with spendgate's retry rules: 429, 503 and network errors are
 * retried with backoff, honouring `Retry-After`; every other error answer becomes
 * the error class of its code.
 *
 * @module
 */

import type { Settings } from "./config.js";
import { SpendgateConnectionError, errorFromResponse } from "./errors.js";

/** A request to send. */
export interface Request {
  method: "GET" | "POST";
  surface: "control" | "proxy";
  path: string;
  body?: unknown;
  query?: Record<string, string>;
  headers?: Record<string, string>;
  /** Milliseconds added to the timeout (a long-poll's wait). */
  extraTimeoutMs?: number;
}

/** A successful answer. */
export interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

const RETRYABLE = new Set([429, 503]);

/** Milliseconds before retry `attempt` (0-based): `Retry-After` when given, else jittered backoff. */
export function retryDelayMs(attempt: number, retryAfterSeconds: number | null, capMs: number): number {
  if (retryAfterSeconds !== null) return Math.min(Math.max(retryAfterSeconds * 1000, 0), capMs);
  const base = Math.min(250 * 2 ** attempt, capMs);
  return base / 2 + Math.random() * (base / 2);
}

function parseRetryAfter(v: string | null): number | null {
  if (v === null) return null;
  const n = Number(v);
  return Number.isFinite(n) ? n : null;
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Sends `req`, retrying as described above. */
export async function send(s: Settings, req: Request): Promise<Answer> {
  const url = new URL((req.surface === "control" ? s.baseUrl : s.proxyUrl) + req.path);
  for (const [k, v] of Object.entries(req.query ?? {})) url.searchParams.set(k, v);
  const headers: Record<string, string> = {
    "X-Service-Key": s.apiKey,
    "User-Agent": s.userAgent,
    Accept: "application/json",
    ...req.headers,
  };
  if (req.body !== undefined) headers["Content-Type"] = "application/json";
  const body = req.body === undefined ? undefined : JSON.stringify(req.body);
  for (let attempt = 0; ; attempt++) {
    const last = attempt >= s.maxRetries;
    let r: Response;
    try {
      r = await s.fetch(url, {
        method: req.method,
        headers,
        body,
        signal: AbortSignal.timeout(s.timeoutMs + (req.extraTimeoutMs ?? 0)),
      });
    } catch (e) {
      if (last) throw new SpendgateConnectionError(`${req.method} ${url.href}: ${String(e)}`);
      await sleep(retryDelayMs(attempt, null, s.maxRetryDelayMs));
      continue;
    }
    const retryAfter = parseRetryAfter(r.headers.get("retry-after"));
    if (RETRYABLE.has(r.status) && !last) {
      await r.body?.cancel();
      await sleep(retryDelayMs(attempt, retryAfter, s.maxRetryDelayMs));
      continue;
    }
    const text = await r.text();
    let parsed: unknown = null;
    try {
      parsed = text ? JSON.parse(text) : null;
    } catch {
      parsed = null;
    }
    if (r.status >= 400) throw errorFromResponse(r.status, parsed, retryAfter);
    return { status: r.status, headers: r.headers, body: parsed };
  }
}
