/**
 * `@spendgate/sdk`: the TypeScript client of the spendgate gateway.
 *
 * Report cost events (one at a time or through a background {@link CostBatcher}),
 * ask a human before an action and report its outcome ({@link Spendgate.withApproval}),
 * bind and gate end customers, and read budget status, policy and the key's identity.
 *
 * ```ts
 * import { Spendgate } from "@spendgate/sdk";
 * const sg = new Spendgate(); // SPENDGATE_API_KEY, SPENDGATE_BASE_URL, SPENDGATE_PROXY_URL
 * const sendEmail = sg.requiresApproval(
 *   { agentId: "mailer", actionType: "send_email", payload: (to: string) => ({ to }) },
 *   async (to: string) => mailer.send(to),
 * );
 * ```
 *
 * @packageDocumentation
 */

export { CostBatcher, type CostBatcherOptions } from "./batcher.js";
export { type ApprovalOptions, MAX_BATCH, Spendgate } from "./client.js";
export { type Settings, type SpendgateOptions, VERSION } from "./config.js";
export * from "./errors.js";
export type * from "./models.js";
