/**
 * `reqkey-store/1` (SPEC 6) over any `SessionStateStore`: a parsed request
 * `{"op", "args"}` in, exactly one of `{"ok": RESULT}` or `{"error": ERROR}`
 * out.
 *
 * Validation is strict and happens before the store is called: an unknown
 * op, a missing or unknown field, a wrong JSON type, an empty string, an id
 * outside its alphabet, half a key or an unknown status is
 * `invalid_argument`, so a malformed request never reaches (or changes) the
 * store. Answers are projected onto the protocol's fields, so a framework
 * store's extra fields (timestamps, ...) stay out; a field the protocol
 * defines is passed on exactly as the store returned it, so the
 * certification judges the store and not this adapter.
 */
import { type ErrorClassifier, type WireError, toWireError } from "./errors.js";
import { JsonNumber } from "./json.js";
import { type InputRecord, type RunMetadata, type RunStatus, type SessionStateStore, type StartRun, isRunStatus } from "./types.js";

/** Session ids (SPEC 1). */
const SESSION_ID = /^[A-Za-z0-9._:-]{1,256}$/;
/** Request keys (SPEC 1 and 2). */
const REQUEST_KEY = /^[A-Za-z0-9._:-]{1,128}$/;

export const OPS = [
  "commitRunStart",
  "getRun",
  "getCurrentRun",
  "listRuns",
  "getRunByRequestKey",
  "listInputs",
  "setRunStatus",
  "deleteSession",
] as const;
export type Op = (typeof OPS)[number];

export type WireAnswer = { ok: unknown } | { error: WireError };

/** A malformed request; becomes `invalid_argument`. */
export class BadRequest extends Error {
  override readonly name = "BadRequest";
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v) && !(v instanceof JsonNumber);
}

/** `args` with exactly the `required` fields and maybe the `optional` ones, nothing else. */
function fields(where: string, args: unknown, required: readonly string[], optional: readonly string[] = []): Record<string, unknown> {
  if (!isRecord(args)) throw new BadRequest(`${where}: args must be an object`);
  for (const k of Object.keys(args)) {
    if (!required.includes(k) && !optional.includes(k)) throw new BadRequest(`${where}: unknown field \`${k}\``);
  }
  for (const k of required) {
    if (!Object.hasOwn(args, k)) throw new BadRequest(`${where}: missing field \`${k}\``);
  }
  return args;
}

function sessionId(v: unknown): string {
  if (typeof v !== "string" || !SESSION_ID.test(v)) {
    throw new BadRequest("sessionId must be 1 to 256 characters of [A-Za-z0-9._:-]");
  }
  return v;
}

/** A run id (SPEC 1): like a session id, 1 to 256 characters of [A-Za-z0-9._:-]. */
function runId(name: string, v: unknown): string {
  if (typeof v !== "string" || !SESSION_ID.test(v)) {
    throw new BadRequest(`${name} must be 1 to 256 characters of [A-Za-z0-9._:-]`);
  }
  return v;
}

function nonEmpty(name: string, v: unknown): string {
  if (typeof v !== "string" || v.length === 0) throw new BadRequest(`${name} must be a non-empty string`);
  return v;
}

function requestKey(v: unknown): string {
  if (typeof v !== "string" || !REQUEST_KEY.test(v)) {
    throw new BadRequest("requestKey must be 1 to 128 characters of [A-Za-z0-9._:-]");
  }
  return v;
}

function status(v: unknown): RunStatus {
  if (!isRunStatus(v)) {
    throw new BadRequest("status must be one of running, suspended_input, suspended_tool, completed, failed, interrupted");
  }
  return v;
}

/** Validates a StartRun. An absent or null optional field reads as absent (SPEC 4 allows it). */
export function parseStartRun(raw: unknown): StartRun {
  const a = fields("startRun", raw, ["sessionId", "runId", "input"], ["expectedCurrentRunId", "requestKey", "requestDigest"]);
  const start: StartRun = {
    sessionId: sessionId(a.sessionId),
    runId: runId("runId", a.runId),
    expectedCurrentRunId: a.expectedCurrentRunId == null ? null : runId("expectedCurrentRunId", a.expectedCurrentRunId),
    input: a.input,
  };
  const hasKey = a.requestKey != null;
  const hasDigest = a.requestDigest != null;
  if (hasKey !== hasDigest) throw new BadRequest("requestKey and requestDigest come together");
  if (hasKey) {
    start.requestKey = requestKey(a.requestKey);
    start.requestDigest = nonEmpty("requestDigest", a.requestDigest);
  }
  return start;
}

/** A validated request: the op and a call that runs it on a store. */
export interface ParsedRequest {
  op: Op;
  run(store: SessionStateStore): Promise<unknown>;
}

/** Validates a request without touching any store. Throws `BadRequest`. */
export function parseRequest(request: unknown): ParsedRequest {
  if (!isRecord(request)) throw new BadRequest("the request must be an object {op, args}");
  const { op, args } = request;
  if (typeof op !== "string") throw new BadRequest("the request needs a string field `op`");
  switch (op) {
    case "commitRunStart": {
      const start = parseStartRun(fields(op, args, ["startRun"]).startRun);
      return { op, run: async (s) => commitAnswer(await s.commitRunStart(start)) };
    }
    case "getRun": {
      const a = fields(op, args, ["sessionId", "runId"]);
      const [sid, rid] = [sessionId(a.sessionId), runId("runId", a.runId)];
      return { op, run: async (s) => runOrNull(await s.getRun(sid, rid)) };
    }
    case "getCurrentRun": {
      const sid = sessionId(fields(op, args, ["sessionId"]).sessionId);
      return { op, run: async (s) => runOrNull(await s.getCurrentRun(sid)) };
    }
    case "listRuns": {
      const sid = sessionId(fields(op, args, ["sessionId"]).sessionId);
      return { op, run: async (s) => (await s.listRuns(sid)).map(wireRun) };
    }
    case "getRunByRequestKey": {
      const a = fields(op, args, ["sessionId", "requestKey"]);
      const [sid, key] = [sessionId(a.sessionId), requestKey(a.requestKey)];
      return { op, run: async (s) => runOrNull(await s.getRunByRequestKey(sid, key)) };
    }
    case "listInputs": {
      const sid = sessionId(fields(op, args, ["sessionId"]).sessionId);
      return { op, run: async (s) => (await s.listInputs(sid)).map(wireInput) };
    }
    case "setRunStatus": {
      const a = fields(op, args, ["sessionId", "runId", "status"]);
      const [sid, rid, st] = [sessionId(a.sessionId), runId("runId", a.runId), status(a.status)];
      return { op, run: async (s) => wireRun(await s.setRunStatus(sid, rid, st)) };
    }
    case "deleteSession": {
      const sid = sessionId(fields(op, args, ["sessionId"]).sessionId);
      return {
        op,
        run: async (s) => {
          const deleted: unknown = await s.deleteSession(sid);
          if (typeof deleted !== "boolean") throw new TypeError(`deleteSession resolved to ${typeof deleted}, not a boolean`);
          return { deleted };
        },
      };
    }
    default:
      throw new BadRequest(`unknown op \`${op}\``);
  }
}

/**
 * A run as the protocol shows it: the six fields of SPEC 1, key fields
 * only when the store returned them (`undefined` is absent; a `null` is
 * passed on, and the suite's `keyless-has-no-key-fields` catches it).
 */
export function wireRun(run: RunMetadata): Record<string, unknown> {
  const out: Record<string, unknown> = {
    sessionId: run.sessionId,
    runId: run.runId,
    status: run.status,
    startSequence: run.startSequence,
  };
  if (run.requestKey !== undefined) out.requestKey = run.requestKey;
  if (run.requestDigest !== undefined) out.requestDigest = run.requestDigest;
  return out;
}

function runOrNull(run: RunMetadata | null | undefined): Record<string, unknown> | null {
  return run == null ? null : wireRun(run);
}

function wireInput(i: InputRecord): Record<string, unknown> {
  return { runId: i.runId, input: i.input };
}

function commitAnswer(r: { outcome: string; run: RunMetadata }): Record<string, unknown> {
  return { outcome: r.outcome, run: wireRun(r.run) };
}

/**
 * Runs one request against the store. Never throws: a malformed request is
 * `invalid_argument` (the store is not called), a store error goes through
 * `toWireError`.
 */
export async function dispatch(store: SessionStateStore, request: unknown, classify?: ErrorClassifier): Promise<WireAnswer> {
  let parsed: ParsedRequest;
  try {
    parsed = parseRequest(request);
  } catch (e) {
    return { error: { kind: "invalid_argument", message: e instanceof Error ? e.message : String(e) } };
  }
  try {
    return { ok: await parsed.run(store) };
  } catch (e) {
    return { error: toWireError(e, classify) };
  }
}
