/**
 * Client settings: from options first, then the environment
 * (`SPENDGATE_API_KEY`, `SPENDGATE_BASE_URL`, `SPENDGATE_PROXY_URL`), then defaults.
 *
 * @module
 */

/** The package version, sent in the user agent. */
export const VERSION = "0.1.0";

/** Options of a client. */
export interface SpendgateOptions {
  /** The raw `svc_live_sk_...` key; default `SPENDGATE_API_KEY`. */
  apiKey?: string;
  /** The control plane; default `SPENDGATE_BASE_URL` or `http://127.0.0.1:3000`. */
  baseUrl?: string;
  /** The proxy; default `SPENDGATE_PROXY_URL` or `http://127.0.0.1:8787`. */
  proxyUrl?: string;
  /** Milliseconds per HTTP request (a long-poll adds its wait). Default 30,000. */
  timeoutMs?: number;
  /** Retries on 429, 503 and network errors. Default 3. */
  maxRetries?: number;
  /** The longest wait between two attempts in milliseconds, `Retry-After` included. Default 60,000. */
  maxRetryDelayMs?: number;
  /** A `fetch` to use instead of the global one. */
  fetch?: typeof fetch;
}

/** Resolved settings. */
export interface Settings {
  apiKey: string;
  baseUrl: string;
  proxyUrl: string;
  timeoutMs: number;
  maxRetries: number;
  maxRetryDelayMs: number;
  userAgent: string;
  fetch: typeof fetch;
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const v = p?.env?.[name];
  return v === "" ? undefined : v;
}

/** Resolves options; throws `TypeError` for a missing or non-spendgate key or bad numbers. */
export function resolveSettings(o: SpendgateOptions = {}): Settings {
  const apiKey = o.apiKey ?? env("SPENDGATE_API_KEY");
  if (!apiKey) throw new TypeError("no API key: pass apiKey or set SPENDGATE_API_KEY");
  if (!apiKey.startsWith("svc_")) {
    throw new TypeError("apiKey is not a spendgate key (svc_live_sk_...); provider keys go to the provider SDK");
  }
  const timeoutMs = o.timeoutMs ?? 30_000;
  const maxRetries = o.maxRetries ?? 3;
  const maxRetryDelayMs = o.maxRetryDelayMs ?? 60_000;
  if (!(timeoutMs > 0) || !(maxRetries >= 0) || !(maxRetryDelayMs >= 0)) {
    throw new TypeError("timeoutMs must be positive, maxRetries and maxRetryDelayMs not negative");
  }
  const trim = (u: string) => u.replace(/\/+$/, "");
  return {
    apiKey,
    baseUrl: trim(o.baseUrl ?? env("SPENDGATE_BASE_URL") ?? "http://127.0.0.1:3000"),
    proxyUrl: trim(o.proxyUrl ?? env("SPENDGATE_PROXY_URL") ?? "http://127.0.0.1:8787"),
    timeoutMs,
    maxRetries,
    maxRetryDelayMs,
    userAgent: `spendgate-typescript/${VERSION}`,
    fetch: o.fetch ?? globalThis.fetch.bind(globalThis),
  };
}
