// @ts-check
/**
 * `reqkey-store/1` (SPEC 6): a request `{"op", "args"}` in, exactly one of
 * `{"ok": RESULT}` or `{"error": ERROR}` out.
 *
 * Validation is strict because the certification suite checks it: unknown
 * ops, missing or unknown fields, wrong JSON types, empty strings, ids
 * outside their alphabet, half a key and unknown statuses are all
 * `invalid_argument`, raised before the store is touched, so a malformed
 * request never changes anything.
 */
import { MemoryStore, StoreError, LIVE, FINISHED } from "./store.js";

const ID = /^[A-Za-z0-9._:-]+$/;
const KEY = /^[A-Za-z0-9._:-]{1,128}$/;

/** @param {string} message */
const invalid = (message) => new StoreError("invalid_argument", message);

/**
 * @param {unknown} v
 * @returns {v is Record<string, unknown>}
 */
const isObject = (v) => v !== null && typeof v === "object" && !Array.isArray(v);

/**
 * Checks that `args` has exactly the `required` fields (and maybe the
 * `optional` ones), nothing else.
 * @param {unknown} args @param {string[]} required @param {string[]} [optional]
 * @returns {Record<string, unknown>}
 */
function fields(args, required, optional = []) {
  if (!isObject(args)) throw invalid("args must be an object");
  for (const k of Object.keys(args)) {
    if (!required.includes(k) && !optional.includes(k)) throw invalid(`unknown field \`${k}\``);
  }
  for (const k of required) {
    if (!(k in args)) throw invalid(`missing field \`${k}\``);
  }
  return args;
}

/** @param {unknown} v @returns {string} */
function sessionId(v) {
  if (typeof v !== "string" || v.length < 1 || v.length > 256 || !ID.test(v)) {
    throw invalid("sessionId must be 1 to 256 characters of [A-Za-z0-9._:-]");
  }
  return v;
}

/** @param {string} name @param {unknown} v @returns {string} */
function runId(name, v) {
  if (typeof v !== "string" || v.length < 1 || v.length > 256 || !ID.test(v)) {
    throw invalid(`${name} must be 1 to 256 characters of [A-Za-z0-9._:-]`);
  }
  return v;
}

/** @param {unknown} v @returns {string} */
function requestKey(v) {
  if (typeof v !== "string" || !KEY.test(v)) throw invalid("requestKey must be 1 to 128 characters of [A-Za-z0-9._:-]");
  return v;
}

/**
 * @param {unknown} raw
 * @returns {import("./store.js").StartRun}
 */
function startRun(raw) {
  const a = fields(raw, ["sessionId", "runId", "input"], ["expectedCurrentRunId", "requestKey", "requestDigest"]);
  /** @type {import("./store.js").StartRun} */
  const s = {
    sessionId: sessionId(a.sessionId),
    runId: runId("runId", a.runId),
    // An absent expectedCurrentRunId reads as null (SPEC 4 allows it).
    expectedCurrentRunId: a.expectedCurrentRunId == null ? null : runId("expectedCurrentRunId", a.expectedCurrentRunId),
    input: a.input,
  };
  // An absent or null optional field is absent.
  const hasKey = a.requestKey != null;
  const hasDigest = a.requestDigest != null;
  if (hasKey !== hasDigest) throw invalid("requestKey and requestDigest come together");
  if (hasKey) {
    s.requestKey = requestKey(a.requestKey);
    if (typeof a.requestDigest !== "string" || a.requestDigest.length === 0) {
      throw invalid("requestDigest must be a non-empty string");
    }
    s.requestDigest = a.requestDigest;
  }
  return s;
}

/** @param {unknown} v @returns {import("./store.js").RunStatus} */
function status(v) {
  if (typeof v !== "string" || !(LIVE.has(v) || FINISHED.has(v))) {
    throw invalid("status must be one of running, suspended_input, suspended_tool, completed, failed, interrupted");
  }
  return /** @type {import("./store.js").RunStatus} */ (v);
}

/**
 * Runs one request against the store.
 * @param {MemoryStore} store
 * @param {unknown} request the parsed JSON body
 * @returns {{ ok: unknown } | { error: Record<string, unknown> }}
 */
export function dispatch(store, request) {
  try {
    return { ok: call(store, request) };
  } catch (e) {
    if (e instanceof StoreError) return { error: e.toWire() };
    return { error: { kind: "internal", message: String(e) } };
  }
}

/** @param {MemoryStore} store @param {unknown} request */
function call(store, request) {
  if (!isObject(request) || typeof request.op !== "string") throw invalid("request needs a string field `op`");
  const { op, args } = request;
  switch (op) {
    case "commitRunStart": {
      const a = fields(args, ["startRun"]);
      return store.commitRunStart(startRun(a.startRun));
    }
    case "getRun": {
      const a = fields(args, ["sessionId", "runId"]);
      return store.getRun(sessionId(a.sessionId), runId("runId", a.runId));
    }
    case "getCurrentRun":
      return store.getCurrentRun(sessionId(fields(args, ["sessionId"]).sessionId));
    case "listRuns":
      return store.listRuns(sessionId(fields(args, ["sessionId"]).sessionId));
    case "getRunByRequestKey": {
      const a = fields(args, ["sessionId", "requestKey"]);
      return store.getRunByRequestKey(sessionId(a.sessionId), requestKey(a.requestKey));
    }
    case "listInputs":
      return store.listInputs(sessionId(fields(args, ["sessionId"]).sessionId));
    case "setRunStatus": {
      const a = fields(args, ["sessionId", "runId", "status"]);
      return store.setRunStatus(sessionId(a.sessionId), runId("runId", a.runId), status(a.status));
    }
    case "deleteSession":
      return store.deleteSession(sessionId(fields(args, ["sessionId"]).sessionId));
    default:
      throw invalid(`unknown op \`${op}\``);
  }
}
