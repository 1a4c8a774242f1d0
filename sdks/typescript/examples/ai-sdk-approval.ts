/**
 * A Vercel AI SDK agent whose `sendEmail` tool runs only after a human approved it
 * in spendgate, and whose model calls go through spendgate's proxy.
 *
 * Run against a real deployment with `SPENDGATE_API_KEY` and `OPENAI_API_KEY` set:
 * `node build/examples/ai-sdk-approval.js "Tell ada@example.com the build is green"`.
 */

import { createOpenAI } from "@ai-sdk/openai";
import { generateText, stepCountIs, tool } from "ai";
import { z } from "zod";

import { ActionExpiredBeforeDecisionError, ActionRejectedError, Spendgate } from "../src/index.js";

/** Stands in for a mail service in this example. */
export const outbox: { to: string; subject: string; body: string }[] = [];

/** The tool: each email is an action a human approves before it is sent. */
export function sendEmailTool(sg: Spendgate) {
  return tool({
    description: "Send an email. A human approves every email first.",
    inputSchema: z.object({ to: z.string(), subject: z.string(), body: z.string() }),
    execute: async (email) => {
      try {
        await sg.withApproval(
          { agentId: "mail-agent", actionType: "send_email", payload: email, timeoutMs: 600_000 },
          () => {
            outbox.push(email);
            return { delivered: email.to };
          },
        );
      } catch (e) {
        if (e instanceof ActionRejectedError) return "a human rejected this email: do not send it again";
        if (e instanceof ActionExpiredBeforeDecisionError) return "nobody approved this email in time: it was not sent";
        throw e;
      }
      return `email to ${email.to} sent`;
    },
  });
}

/** Runs the agent on `task`, its model reached through the proxy (the one changed line). */
export async function runAgent(sg: Spendgate, openaiApiKey: string, task: string): Promise<string> {
  const { baseURL, defaultHeaders } = sg.openaiSettings();
  const openai = createOpenAI({ apiKey: openaiApiKey, baseURL, headers: defaultHeaders });
  const result = await generateText({
    model: openai.chat("gpt-4o-mini"),
    system: "You send short status emails with the sendEmail tool.",
    prompt: task,
    tools: { sendEmail: sendEmailTool(sg) },
    stopWhen: stepCountIs(3),
  });
  return result.text;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const task = process.argv.slice(2).join(" ") || "Tell ada@example.com the build is green";
  console.log(await runAgent(new Spendgate(), process.env.OPENAI_API_KEY ?? "", task));
}
