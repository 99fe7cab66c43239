// @ts-check
/**
 * A small in-memory session store implementing SPEC 4 exactly.
 *
 * The run-start commit must be ONE atomic step: read the session, decide
 * (replay, key holder, CAS), write. Node runs JavaScript on one thread, so
 * a function that does all of that synchronously, without an `await` in
 * between, cannot interleave with another request: that is the whole
 * concurrency story, and the reason nothing here is async. (A store on a
 * real database would do the same inside one transaction, with a unique
 * index on (sessionId, requestKey) as the backstop.)
 *
 * Every read returns copies, so no caller can change the store's state.
 */
import { canonicalJson, sha256Hex } from "./canonical.js";

/**
 * @typedef {"running" | "suspended_input" | "suspended_tool" | "completed" | "failed" | "interrupted"} RunStatus
 *
 * @typedef {object} RunMetadata
 * @property {string} sessionId
 * @property {string} runId
 * @property {RunStatus} status
 * @property {number} startSequence
 * @property {string} [requestKey]    absent (not null) on a keyless run
 * @property {string} [requestDigest] absent (not null) on a keyless run
 *
 * @typedef {object} StartRun
 * @property {string} sessionId
 * @property {string} runId
 * @property {string | null} expectedCurrentRunId
 * @property {unknown} input
 * @property {string} [requestKey]
 * @property {string} [requestDigest]
 *
 * @typedef {{ outcome: "started" | "replayed", run: RunMetadata }} CommitResult
 *
 * @typedef {object} Session
 * @property {RunMetadata[]} runs              by startSequence
 * @property {Map<string, RunMetadata>} byRunId
 * @property {Map<string, string>} startDigests runId -> start digest
 * @property {Map<string, string>} byRequestKey requestKey -> runId (the index)
 * @property {{ runId: string, input: unknown }[]} inputs in commit order
 */

export const LIVE = new Set(["running", "suspended_input", "suspended_tool"]);
export const FINISHED = new Set(["completed", "failed", "interrupted"]);

/** A store error; `toWire()` is the `{"error": ...}` body of SPEC 6. */
export class StoreError extends Error {
  /**
   * @param {string} kind
   * @param {string} message
   * @param {{ cause: string, details: Record<string, unknown> }} [rejection]
   */
  constructor(kind, message, rejection) {
    super(message);
    this.kind = kind;
    this.rejection = rejection;
  }

  toWire() {
    if (this.rejection) {
      return { kind: this.kind, cause: this.rejection.cause, details: this.rejection.details };
    }
    return { kind: this.kind, message: this.message };
  }

  /** @param {"request_key_taken" | "cas_mismatch" | "run_id_conflict"} cause @param {Record<string, unknown>} details */
  static rejected(cause, details) {
    return new StoreError("run_start_rejected", cause, { cause, details });
  }
}

/**
 * The start digest (SPEC 4 rule 1): every StartRun field, the key and the
 * request digest included, with `input` compared canonically.
 * @param {StartRun} s
 */
export function startDigest(s) {
  /** @type {Record<string, unknown>} */
  const fields = {
    sessionId: s.sessionId,
    runId: s.runId,
    expectedCurrentRunId: s.expectedCurrentRunId,
    input: s.input,
  };
  if (s.requestKey !== undefined) fields.requestKey = s.requestKey;
  if (s.requestDigest !== undefined) fields.requestDigest = s.requestDigest;
  return sha256Hex(canonicalJson(fields));
}

/** @template T @param {T} v @returns {T} */
const copy = (v) => structuredClone(v);

export class MemoryStore {
  constructor() {
    /** @type {Map<string, Session>} */
    this.sessions = new Map();
  }

  /**
   * SPEC 4: the four ordered rules, in one synchronous step.
   * @param {StartRun} start
   * @returns {CommitResult}
   */
  commitRunStart(start) {
    const session = this.sessions.get(start.sessionId);
    // 1. Same-runId replay.
    const existing = session?.byRunId.get(start.runId);
    if (session && existing) {
      if (session.startDigests.get(start.runId) === startDigest(start)) {
        return { outcome: "replayed", run: copy(existing) };
      }
      throw StoreError.rejected("run_id_conflict", { existingRunId: start.runId });
    }
    // 2. Key holder (in this session only).
    if (start.requestKey !== undefined) {
      const holder = session?.byRequestKey.get(start.requestKey);
      if (holder !== undefined) {
        throw StoreError.rejected("request_key_taken", { existingRunId: holder });
      }
    }
    // 3. CAS on the current run.
    const current = session && session.runs.length > 0 ? session.runs[session.runs.length - 1].runId : null;
    if (current !== start.expectedCurrentRunId) {
      throw StoreError.rejected("cas_mismatch", { currentRunId: current });
    }
    // 4. Write (a refused commit never got here, so it created nothing).
    const s = session ?? this.#newSession(start.sessionId);
    /** @type {RunMetadata} */
    const run = {
      sessionId: start.sessionId,
      runId: start.runId,
      status: "running",
      startSequence: s.runs.length + 1,
    };
    if (start.requestKey !== undefined) {
      run.requestKey = start.requestKey;
      run.requestDigest = start.requestDigest;
      s.byRequestKey.set(start.requestKey, start.runId);
    }
    s.runs.push(run);
    s.byRunId.set(run.runId, run);
    s.startDigests.set(run.runId, startDigest(start));
    s.inputs.push({ runId: run.runId, input: copy(start.input) });
    return { outcome: "started", run: copy(run) };
  }

  /** @param {string} sessionId @returns {Session} */
  #newSession(sessionId) {
    /** @type {Session} */
    const s = { runs: [], byRunId: new Map(), startDigests: new Map(), byRequestKey: new Map(), inputs: [] };
    this.sessions.set(sessionId, s);
    return s;
  }

  /** @param {string} sessionId @param {string} runId */
  getRun(sessionId, runId) {
    const run = this.sessions.get(sessionId)?.byRunId.get(runId);
    return run ? copy(run) : null;
  }

  /** @param {string} sessionId */
  getCurrentRun(sessionId) {
    const runs = this.sessions.get(sessionId)?.runs ?? [];
    return runs.length > 0 ? copy(runs[runs.length - 1]) : null;
  }

  /** @param {string} sessionId */
  listRuns(sessionId) {
    return copy(this.sessions.get(sessionId)?.runs ?? []);
  }

  /** An indexed read (a Map lookup), never a scan. @param {string} sessionId @param {string} requestKey */
  getRunByRequestKey(sessionId, requestKey) {
    const session = this.sessions.get(sessionId);
    const runId = session?.byRequestKey.get(requestKey);
    const run = runId === undefined ? undefined : session?.byRunId.get(runId);
    return run ? copy(run) : null;
  }

  /** @param {string} sessionId */
  listInputs(sessionId) {
    return copy(this.sessions.get(sessionId)?.inputs ?? []);
  }

  /**
   * Live -> live and live -> finished are allowed; a finished run refuses
   * every change, to its own status too.
   * @param {string} sessionId @param {string} runId @param {RunStatus} status
   */
  setRunStatus(sessionId, runId, status) {
    const session = this.sessions.get(sessionId);
    if (!session) throw new StoreError("not_found", `no session ${sessionId}`);
    const run = session.byRunId.get(runId);
    if (!run) throw new StoreError("not_found", `no run ${runId} in session ${sessionId}`);
    if (FINISHED.has(run.status)) {
      throw new StoreError("invalid_transition", `run ${runId} is ${run.status}, which is final`);
    }
    run.status = status;
    return copy(run);
  }

  /** Removes runs, inputs and keys at once. @param {string} sessionId */
  deleteSession(sessionId) {
    return { deleted: this.sessions.delete(sessionId) };
  }
}
