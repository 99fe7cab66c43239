#!/usr/bin/env node
// The scripted conversation of the reference client (and its broken twins):
//
//   node dist/src/cli.js [--base URL] [--mode MODE] [--session PREFIX]
//                        [--conversations N] [--timeout-ms MS] [--max-attempts N]
//
// `--base` defaults to $REQKEY_PROXY_URL, which `reqkey proxy -- CMD` sets.
// Each conversation (session PREFIX-1, PREFIX-2, ...) sends messages,
// re-sends each one after a failure, regenerates answers, and answers tool
// calls (`[suspend]` ends a run waiting for its tool result). Exit 0 when
// every user action got its answer, 1 when one did not, 2 on bad arguments.

import { randomUUID } from "node:crypto";

import { ActionFailed, ChatClient, MODES, type Mode, type Reply } from "./client.js";

/** One conversation: what a user does, in order. */
export const SCRIPT: ReadonlyArray<{ send: string } | { regenerate: true } | { tool: string }> = [
  { send: "hello" },
  { send: "what is a request key?" },
  { regenerate: true },
  { send: "[suspend] look up the weather" },
  { tool: "sunny, 21 C" },
  { send: "[sleep:100] think a little" },
  { send: "[suspend] and tomorrow?" },
  { tool: "rain, 14 C" },
  { send: "thanks" },
  { regenerate: true },
  { send: "[suspend] convert to F" },
  { tool: "57 F" },
  { send: "bye" },
];

function usage(message: string): never {
  console.error(`reqkey-reference-client: ${message}`);
  console.error(
    "usage: cli.js [--base URL] [--mode correct|new-key-per-retry|same-key-for-two-messages|no-key-on-retry|resend-tool-without-reread]" +
      " [--session PREFIX] [--conversations N] [--timeout-ms MS] [--max-attempts N]",
  );
  process.exit(2);
}

function positive(name: string, raw: string | undefined, max: number): number {
  const n = Number(raw);
  if (raw === undefined || !Number.isInteger(n) || n < 1 || n > max) {
    usage(`${name} takes an integer from 1 to ${max}`);
  }
  return n;
}

async function main(): Promise<number> {
  const args = process.argv.slice(2);
  let base = process.env["REQKEY_PROXY_URL"];
  let mode: Mode = "correct";
  let prefix = `chat-${randomUUID().slice(0, 8)}`;
  let conversations = 2;
  let timeoutMs = 1_000;
  let maxAttempts = 10;
  for (let i = 0; i < args.length; i += 2) {
    const value = args[i + 1];
    switch (args[i]) {
      case "--base":
        base = value;
        break;
      case "--mode":
        if (!MODES.includes(value as Mode)) {
          usage(`unknown mode ${String(value)} (known: ${MODES.join(", ")})`);
        }
        mode = value as Mode;
        break;
      case "--session":
        if (value === undefined || !/^[A-Za-z0-9._:-]{1,100}$/.test(value)) {
          usage("--session takes 1 to 100 of [A-Za-z0-9._:-]");
        }
        prefix = value;
        break;
      case "--conversations":
        conversations = positive("--conversations", value, 100);
        break;
      case "--timeout-ms":
        timeoutMs = positive("--timeout-ms", value, 600_000);
        break;
      case "--max-attempts":
        maxAttempts = positive("--max-attempts", value, 100);
        break;
      default:
        usage(`unknown argument ${String(args[i])}`);
    }
  }
  if (base === undefined || !/^https?:\/\//.test(base)) {
    usage("no server: pass --base URL or set REQKEY_PROXY_URL");
  }
  const log = (line: string) => console.log(line);
  log(`reqkey-reference-client (${mode}) -> ${base}, ${conversations} conversations, sessions ${prefix}-N`);
  let failed = 0;
  for (let c = 1; c <= conversations; c++) {
    const client = new ChatClient({
      baseUrl: base,
      sessionId: `${prefix}-${c}`,
      timeoutMs,
      maxAttempts,
      backoffMs: 20,
      maxAnswerBytes: 1024 * 1024,
      mode,
      log,
    });
    for (const step of SCRIPT) {
      const what = "send" in step ? `send "${step.send}"` : "tool" in step ? `tool result "${step.tool}"` : "regenerate";
      try {
        const reply: Reply =
          "send" in step
            ? await client.send(step.send)
            : "tool" in step
              ? await client.toolResult(step.tool)
              : await client.regenerate();
        log(
          `${prefix}-${c}: ${what}: run ${reply.runId} ${reply.status}` +
            `${reply.attached ? " (attached)" : ""} after ${reply.attempts} attempt(s)`,
        );
      } catch (e) {
        failed += 1;
        const message = e instanceof ActionFailed ? e.message : e instanceof Error ? e.stack ?? e.message : String(e);
        log(`${prefix}-${c}: ${what}: FAILED: ${message}`);
      }
    }
  }
  log(failed === 0 ? "every user action got its answer" : `${failed} user actions failed`);
  return failed === 0 ? 0 : 1;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    console.error(e);
    process.exit(1);
  },
);
