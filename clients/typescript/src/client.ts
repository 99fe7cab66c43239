// A chat client on `fetch` for a `reqkey-agent/1` server, keyed the way
// SPEC 9 asks: a fresh request key per user action (a sent message, a
// regenerate), and the same key and the same body on every re-send of that
// action after a failure (a network error, a timeout, a 502/503/504).
//
// A tool result (a chat send whose last message has role `tool`) is
// keyless for the server (SPEC 7), so SPEC 9 asks for at least once with a
// read before every re-send: after a failed answer the client reads the
// session's snapshot and re-sends only when the result is not recorded
// there (`toolResult`).
//
// `mode` builds the deliberately broken twins `reqkey proxy` must catch:
//
//   correct                      what the release notes spell out
//   new-key-per-retry            mints a new key on every attempt
//   same-key-for-two-messages    two consecutive messages share one key
//   no-key-on-retry              the first attempt is keyed, re-sends are not
//   resend-tool-without-reread   re-sends a lost tool result without reading
//                                the snapshot first

import { randomUUID } from "node:crypto";

export const MODES = [
  "correct",
  "new-key-per-retry",
  "same-key-for-two-messages",
  "no-key-on-retry",
  "resend-tool-without-reread",
] as const;
export type Mode = (typeof MODES)[number];

export const KEY_HEADER = "X-Helix-Request-Key";

export interface Message {
  role: "user" | "assistant" | "tool";
  content: string;
}

export interface ClientOptions {
  /** The server (or the proxy in front of it), e.g. `http://127.0.0.1:7070`. */
  baseUrl: string;
  sessionId: string;
  /** Bound on one attempt (request and whole answer), in milliseconds. */
  timeoutMs: number;
  /** Attempts per user action at most (the first one included). */
  maxAttempts: number;
  /** Pause before re-send n is n * backoffMs. */
  backoffMs: number;
  /** The largest answer body read, in bytes. */
  maxAnswerBytes: number;
  mode: Mode;
  log: (line: string) => void;
}

/** How one user action ended. */
export interface Reply {
  runId: string;
  attached: boolean;
  /** The assistant's text (chat), or "" (regenerate). */
  text: string;
  status: string;
  attempts: number;
}

/** A user action that did not get an answer within `maxAttempts`, or was refused. */
export class ActionFailed extends Error {
  constructor(
    message: string,
    readonly status: number | undefined,
  ) {
    super(message);
    this.name = "ActionFailed";
  }
}

/** A failure worth re-sending the same request for. */
class Retryable extends Error {}

const RETRY_STATUSES = new Set([502, 503, 504]);

function freshKey(): string {
  // 36 characters of [0-9a-f-]: within SPEC 2's ^[A-Za-z0-9._:-]{1,128}$.
  return `rk-${randomUUID()}`;
}

async function readBounded(res: Response, maxBytes: number): Promise<string> {
  if (res.body === null) {
    return "";
  }
  const reader = res.body.getReader();
  const chunks: Uint8Array[] = [];
  let total = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) {
      break;
    }
    total += value.byteLength;
    if (total > maxBytes) {
      await reader.cancel();
      throw new Retryable(`the answer is over ${maxBytes} bytes`);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString("utf8");
}

interface SseEvent {
  event: string;
  data: unknown;
}

/** Parses a whole `text/event-stream` body. */
export function parseSse(text: string): SseEvent[] {
  const events: SseEvent[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    let event = "message";
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith("event:")) {
        event = line.slice(6).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).trimStart());
      }
    }
    if (data.length > 0) {
      try {
        events.push({ event, data: JSON.parse(data.join("\n")) as unknown });
      } catch {
        events.push({ event, data: data.join("\n") });
      }
    }
  }
  return events;
}

function field(v: unknown, name: string): unknown {
  return typeof v === "object" && v !== null ? (v as Record<string, unknown>)[name] : undefined;
}

/** A chat stream's run, status and text; `Retryable` when it is not whole. */
function readStream(sse: string): { runId: string; attached: boolean; text: string; status: string } {
  const events = parseSse(sse);
  const start = events.find((e) => e.event === "run-start");
  const finish = events.find((e) => e.event === "finish");
  const deltas = events
    .filter((e) => e.event === "text")
    .map((e) => field(e.data, "delta"))
    .filter((d): d is string => typeof d === "string");
  const runId = field(start?.data, "runId");
  const status = field(finish?.data, "status");
  if (typeof runId !== "string" || typeof status !== "string") {
    throw new Retryable("the stream has no run-start or no finish");
  }
  return { runId, attached: field(start?.data, "attached") === true, text: deltas.join(""), status };
}

export class ChatClient {
  readonly history: Message[] = [];
  private sends = 0;
  private lastSendKey: string | undefined;
  /** The last run an answer named: the run a tool result answers. */
  private lastRunId: string | undefined;

  constructor(private readonly opts: ClientOptions) {}

  private url(path: string): string {
    return `${this.opts.baseUrl.replace(/\/+$/, "")}/sessions/${encodeURIComponent(this.opts.sessionId)}${path}`;
  }

  /** The key of a new send (the broken twin reuses the previous one on every second send). */
  private keyForSend(): string {
    this.sends += 1;
    if (this.opts.mode === "same-key-for-two-messages" && this.sends % 2 === 0 && this.lastSendKey !== undefined) {
      return this.lastSendKey;
    }
    this.lastSendKey = freshKey();
    return this.lastSendKey;
  }

  /** The key attempt `attempt` (from 1) of an action keyed `key` carries. */
  private keyForAttempt(key: string, attempt: number): string | undefined {
    if (attempt === 1) {
      return key;
    }
    switch (this.opts.mode) {
      case "new-key-per-retry":
        return freshKey();
      case "no-key-on-retry":
        return undefined;
      default:
        return key;
    }
  }

  /** Sends one request of an action, re-sending after a failure. */
  private async withRetries<T>(
    what: string,
    path: string,
    body: string,
    key: string,
    read: (res: Response, text: string) => T,
  ): Promise<{ value: T; attempts: number }> {
    let lastError = "";
    for (let attempt = 1; attempt <= this.opts.maxAttempts; attempt++) {
      if (attempt > 1) {
        await new Promise((r) => setTimeout(r, (attempt - 1) * this.opts.backoffMs));
      }
      const headers: Record<string, string> = { "content-type": "application/json" };
      const k = this.keyForAttempt(key, attempt);
      if (k !== undefined) {
        headers[KEY_HEADER] = k;
      }
      try {
        const res = await fetch(this.url(path), {
          method: "POST",
          headers,
          body,
          signal: AbortSignal.timeout(this.opts.timeoutMs),
          redirect: "manual",
        });
        const text = await readBounded(res, this.opts.maxAnswerBytes);
        if (RETRY_STATUSES.has(res.status)) {
          throw new Retryable(`answered ${res.status}`);
        }
        if (res.status < 200 || res.status >= 300) {
          throw new ActionFailed(`${what}: refused ${res.status}: ${text.slice(0, 200)}`, res.status);
        }
        return { value: read(res, text), attempts: attempt };
      } catch (e) {
        if (e instanceof ActionFailed) {
          throw e;
        }
        lastError = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        this.opts.log(`${this.opts.sessionId}: ${what}: attempt ${attempt} failed (${lastError}); re-sending`);
      }
    }
    throw new ActionFailed(`${what}: no answer after ${this.opts.maxAttempts} attempts (${lastError})`, undefined);
  }

  /** Sends a user message: a new action with a fresh key. */
  async send(text: string): Promise<Reply> {
    const key = this.keyForSend();
    const messages: Message[] = [...this.history, { role: "user", content: text }];
    const body = JSON.stringify({ messages });
    const { value, attempts } = await this.withRetries(`send "${text}"`, "/chat", body, key, (_res, sse) =>
      readStream(sse),
    );
    this.history.push({ role: "user", content: text }, { role: "assistant", content: value.text });
    this.lastRunId = value.runId;
    return { ...value, attempts };
  }

  /**
   * Sends a tool result (the answer to the tool call of the last run).
   * Keyless: the server ignores a key on it (SPEC 7), so a re-send of one
   * that was committed would run again. After a failed answer the client
   * reads the snapshot first and re-sends only when the result is not
   * recorded there (SPEC 9, `client.tool-result.reread-before-resend`); it
   * re-sends until answered or recorded (`client.tool-result.at-least-once`).
   */
  async toolResult(content: string): Promise<Reply> {
    const messages: Message[] = [...this.history, { role: "tool", content }];
    const body = JSON.stringify({ messages });
    const what = `tool result "${content}"`;
    let lastError = "";
    for (let attempt = 1; attempt <= this.opts.maxAttempts; attempt++) {
      if (attempt > 1) {
        await new Promise((r) => setTimeout(r, (attempt - 1) * this.opts.backoffMs));
        if (this.opts.mode !== "resend-tool-without-reread") {
          const recorded = await this.recordedRun(content);
          if (recorded !== undefined) {
            const value = await this.reconnect(recorded);
            this.history.push({ role: "tool", content }, { role: "assistant", content: value.text });
            this.lastRunId = recorded;
            return { ...value, attempts: attempt - 1 };
          }
        }
      }
      try {
        const res = await fetch(this.url("/chat"), {
          method: "POST",
          headers: { "content-type": "application/json" },
          body,
          signal: AbortSignal.timeout(this.opts.timeoutMs),
          redirect: "manual",
        });
        const text = await readBounded(res, this.opts.maxAnswerBytes);
        if (RETRY_STATUSES.has(res.status)) {
          throw new Retryable(`answered ${res.status}`);
        }
        if (res.status < 200 || res.status >= 300) {
          throw new ActionFailed(`${what}: refused ${res.status}: ${text.slice(0, 200)}`, res.status);
        }
        const value = readStream(text);
        this.history.push({ role: "tool", content }, { role: "assistant", content: value.text });
        this.lastRunId = value.runId;
        return { ...value, attempts: attempt };
      } catch (e) {
        if (e instanceof ActionFailed) {
          throw e;
        }
        lastError = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
        this.opts.log(`${this.opts.sessionId}: ${what}: attempt ${attempt} failed (${lastError})`);
      }
    }
    throw new ActionFailed(`${what}: no answer after ${this.opts.maxAttempts} attempts (${lastError})`, undefined);
  }

  /**
   * Reads the snapshot: the run whose input is `{"text": content}` after
   * the input of the last run this client saw, or `undefined` when there is
   * none. A snapshot that cannot be read is an `ActionFailed`: without it
   * the client cannot tell whether a re-send would run twice.
   */
  private async recordedRun(content: string): Promise<string | undefined> {
    let lastError = "";
    for (let attempt = 1; attempt <= this.opts.maxAttempts; attempt++) {
      try {
        const res = await fetch(this.url(""), { signal: AbortSignal.timeout(this.opts.timeoutMs), redirect: "manual" });
        const text = await readBounded(res, this.opts.maxAnswerBytes);
        if (res.status !== 200) {
          throw new Retryable(`the snapshot answered ${res.status}`);
        }
        const inputs = field(JSON.parse(text) as unknown, "inputs");
        if (!Array.isArray(inputs)) {
          throw new Retryable("the snapshot has no inputs");
        }
        const seen = inputs.findIndex((i) => field(i, "runId") === this.lastRunId);
        const later = inputs.slice(seen + 1).find((i) => field(field(i, "input"), "text") === content);
        const runId = field(later, "runId");
        return typeof runId === "string" ? runId : undefined;
      } catch (e) {
        lastError = e instanceof Error ? e.message : String(e);
      }
    }
    throw new ActionFailed(`the snapshot could not be read (${lastError})`, undefined);
  }

  /** The answer of a recorded run, through a chat reconnect (not an entry: it starts nothing). */
  private async reconnect(runId: string): Promise<{ runId: string; attached: boolean; text: string; status: string }> {
    for (let attempt = 1; attempt <= this.opts.maxAttempts; attempt++) {
      try {
        const res = await fetch(this.url("/chat"), { signal: AbortSignal.timeout(this.opts.timeoutMs), redirect: "manual" });
        const value = readStream(await readBounded(res, this.opts.maxAnswerBytes));
        if (res.status === 200 && value.runId === runId) {
          return value;
        }
        // Another run is current: the result is recorded, its text is not ours to show.
        return { runId, attached: true, text: "", status: "recorded" };
      } catch (e) {
        this.opts.log(`${this.opts.sessionId}: reconnect: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    return { runId, attached: true, text: "", status: "recorded" };
  }

  /** Regenerates the last answer (`POST /retry`): a new action with a fresh key. */
  async regenerate(): Promise<Reply> {
    const key = freshKey();
    const { value, attempts } = await this.withRetries("regenerate", "/retry", "{}", key, (_res, json) => {
      const parsed = JSON.parse(json) as unknown;
      const runId = field(parsed, "runId");
      if (typeof runId !== "string") {
        throw new ActionFailed(`regenerate: the answer has no runId: ${json.slice(0, 200)}`, undefined);
      }
      return { runId, attached: field(parsed, "status") === "attached" };
    });
    this.lastRunId = value.runId;
    const status = await this.waitRun(value.runId);
    return { runId: value.runId, attached: value.attached, text: "", status, attempts };
  }

  /** Waits for a run to leave `running` (a read: not keyed, re-sent freely). */
  private async waitRun(runId: string): Promise<string> {
    for (let attempt = 1; attempt <= this.opts.maxAttempts; attempt++) {
      try {
        const res = await fetch(this.url(`/runs/${encodeURIComponent(runId)}?waitMs=2000`), {
          signal: AbortSignal.timeout(this.opts.timeoutMs + 2000),
          redirect: "manual",
        });
        const text = await readBounded(res, this.opts.maxAnswerBytes);
        if (res.status === 200) {
          const status = field(JSON.parse(text) as unknown, "status");
          if (typeof status === "string" && status !== "running") {
            return status;
          }
        }
      } catch (e) {
        this.opts.log(`${this.opts.sessionId}: wait for ${runId}: ${e instanceof Error ? e.message : String(e)}`);
      }
    }
    throw new ActionFailed(`the run ${runId} did not finish`, undefined);
  }
}
