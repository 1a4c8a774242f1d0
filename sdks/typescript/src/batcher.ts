/**
 * A background batcher for cost events: code that calls a provider without the
 * proxy queues events and they reach `POST /api/cost-events/batch` in bounded
 * batches, on a timer, on demand, and when Node is about to exit (`beforeExit`).
 *
 * Each event's idempotency key is fixed when it is queued, so a batch sent again
 * after a lost answer or a 503 is stored once. A full queue throws
 * {@link QueueFullError} from {@link CostBatcher.add} rather than dropping silently.
 *
 * @module
 */

import { MAX_BATCH, type Spendgate, withKey } from "./client.js";
import { QueueFullError, SpendgateApiError, SpendgateError } from "./errors.js";
import type { CostEventInput } from "./models.js";

/** Options of a {@link CostBatcher}. */
export interface CostBatcherOptions {
  /** Events per request, 1-100 (default 100). */
  maxBatchSize?: number;
  /** Milliseconds between timed flushes (default 5,000). */
  flushIntervalMs?: number;
  /** The most events held (default 10,000); one more throws {@link QueueFullError}. */
  maxQueue?: number;
  /** Called with the error and events of a batch the server refused (a 4xx other than 429); it is not retried. */
  onError?: (error: SpendgateError, events: CostEventInput[]) => void;
}

/** Queues cost events and posts them in batches. */
export class CostBatcher {
  /** Events the server accepted (new or duplicate). */
  sent = 0;
  /** Events in batches the server refused. */
  rejected = 0;
  /** Events refused because the queue was full. */
  overflowed = 0;

  private readonly queue: CostEventInput[] = [];
  private readonly size: number;
  private readonly maxQueue: number;
  private readonly onError: CostBatcherOptions["onError"];
  private readonly timer: ReturnType<typeof setInterval>;
  private readonly exitHook = () => void this.close();
  private sending: Promise<void> = Promise.resolve();
  private closed = false;

  constructor(
    private readonly client: Spendgate,
    options: CostBatcherOptions = {},
  ) {
    this.size = options.maxBatchSize ?? MAX_BATCH;
    this.maxQueue = options.maxQueue ?? 10_000;
    const interval = options.flushIntervalMs ?? 5_000;
    if (!(this.size >= 1 && this.size <= MAX_BATCH)) throw new RangeError(`maxBatchSize must be 1 to ${MAX_BATCH}`);
    if (!(interval > 0) || !(this.maxQueue >= 1)) throw new RangeError("flushIntervalMs must be positive, maxQueue at least 1");
    this.onError = options.onError;
    this.timer = setInterval(() => void this.flush(), interval);
    this.timer.unref?.();
    nodeProcess()?.once("beforeExit", this.exitHook);
  }

  /** Events queued and not yet accepted. */
  get pending(): number {
    return this.queue.length;
  }

  /** Queues one event; a full batch is sent at once. Throws {@link QueueFullError} when full. */
  add(event: CostEventInput): void {
    if (this.closed) throw new SpendgateError("the batcher is closed");
    if (this.queue.length >= this.maxQueue) {
      this.overflowed++;
      throw new QueueFullError(`cost-event queue full (${this.maxQueue} events)`);
    }
    this.queue.push(withKey(event));
    if (this.queue.length >= this.size) void this.flush();
  }

  /** Sends everything queued; resolves when done (events of a batch that could not be sent stay queued). */
  flush(): Promise<void> {
    this.sending = this.sending.then(() => this.drain());
    return this.sending;
  }

  /** Flushes, stops the timer and the exit hook. */
  async close(): Promise<void> {
    if (this.closed) return this.sending;
    this.closed = true;
    clearInterval(this.timer);
    nodeProcess()?.removeListener("beforeExit", this.exitHook);
    await this.flush();
  }

  private async drain(): Promise<void> {
    while (this.queue.length > 0) {
      const batch = this.queue.slice(0, this.size);
      try {
        await this.client.reportBatch(batch);
      } catch (e) {
        if (e instanceof SpendgateApiError && e.status < 500 && e.status !== 429) {
          this.queue.splice(0, batch.length);
          this.rejected += batch.length;
          this.onError?.(e, batch);
          continue;
        }
        return;
      }
      this.queue.splice(0, batch.length);
      this.sent += batch.length;
    }
  }
}

interface ExitEvents {
  once(event: "beforeExit", fn: () => void): unknown;
  removeListener(event: "beforeExit", fn: () => void): unknown;
}

/** Node's `process` where the runtime has one (Node, Bun; absent in edge runtimes). */
function nodeProcess(): ExitEvents | undefined {
  return (globalThis as { process?: ExitEvents }).process;
}
