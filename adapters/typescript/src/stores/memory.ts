/**
 * An in-memory `SessionStateStore` implementing SPEC 4 exactly.
 *
 * The run-start commit must be ONE atomic step: read the session, decide
 * (replay, key holder, CAS), write. Node runs JavaScript on one thread, so
 * a method that does all of that without an `await` in between cannot
 * interleave with another request, even though the adapter serves many at
 * once: that is the whole concurrency story here. Every read returns
 * copies, so no caller can change the store's state. Inputs are kept as
 * given, numbers written as the client wrote them (`JsonNumber`) included.
 *
 * `broken` deliberately breaks it, to prove the certification suite can
 * fail: `no-key-rule` skips rule 2; `racy` reads the key's holder, awaits
 * a timer, then decides on that stale holder (the race a database store
 * gets by reading the holder outside its transaction).
 */
import { startDigest } from "../canonical.js";
import { cloneJson } from "../json.js";
import { InvalidTransitionError, NotFoundError, RunStartRejectedError } from "../errors.js";
import { type CommitRunStartResult, type InputRecord, type RunMetadata, type RunStatus, type SessionStateStore, type StartRun, isFinished } from "../types.js";

export type MemoryDefect = "no-key-rule" | "racy";
export const MEMORY_DEFECTS: readonly MemoryDefect[] = ["no-key-rule", "racy"];

interface Session {
  runs: RunMetadata[]; // by startSequence
  byRunId: Map<string, RunMetadata>;
  startDigests: Map<string, string>; // runId -> start digest
  byRequestKey: Map<string, string>; // requestKey -> runId (the index)
  inputs: InputRecord[]; // in commit order
}

const copy = <T>(v: T): T => structuredClone(v);
const pause = (ms: number) => new Promise<void>((ok) => setTimeout(ok, ms));

export class MemorySessionStore implements SessionStateStore {
  private readonly sessions = new Map<string, Session>();

  constructor(private readonly broken?: MemoryDefect) {}

  async commitRunStart(start: StartRun): Promise<CommitRunStartResult> {
    if (this.broken === "racy" && start.requestKey !== undefined) {
      // BUG (on purpose): the holder is read, then other requests run, then the commit decides on it.
      const stale = this.sessions.get(start.sessionId)?.byRequestKey.get(start.requestKey);
      await pause(2);
      return this.commitNow(start, { holder: stale });
    }
    return this.commitNow(start);
  }

  /** SPEC 4's four ordered rules in one synchronous step. */
  private commitNow(start: StartRun, stale?: { holder: string | undefined }): CommitRunStartResult {
    const session = this.sessions.get(start.sessionId);
    // 1. Same-runId replay.
    const existing = session?.byRunId.get(start.runId);
    if (session && existing) {
      if (session.startDigests.get(start.runId) === startDigest(start)) {
        return { outcome: "replayed", run: copy(existing) };
      }
      throw new RunStartRejectedError("run_id_conflict", { existingRunId: start.runId });
    }
    // 2. Key holder (in this session only).
    if (start.requestKey !== undefined && this.broken !== "no-key-rule") {
      const holder = stale ? stale.holder : session?.byRequestKey.get(start.requestKey);
      if (holder !== undefined) throw new RunStartRejectedError("request_key_taken", { existingRunId: holder });
    }
    // 3. CAS on the current run.
    const current = session?.runs.at(-1)?.runId ?? null;
    if (current !== start.expectedCurrentRunId) {
      throw new RunStartRejectedError("cas_mismatch", { currentRunId: current });
    }
    // 4. Write (a refused commit never got here, so it created nothing).
    const s = session ?? this.newSession(start.sessionId);
    const run: RunMetadata = { sessionId: start.sessionId, runId: start.runId, status: "running", startSequence: s.runs.length + 1 };
    if (start.requestKey !== undefined && start.requestDigest !== undefined) {
      run.requestKey = start.requestKey;
      run.requestDigest = start.requestDigest;
      s.byRequestKey.set(start.requestKey, start.runId);
    }
    s.runs.push(run);
    s.byRunId.set(run.runId, run);
    s.startDigests.set(run.runId, startDigest(start));
    s.inputs.push({ runId: run.runId, input: cloneJson(start.input) });
    return { outcome: "started", run: copy(run) };
  }

  private newSession(sessionId: string): Session {
    const s: Session = { runs: [], byRunId: new Map(), startDigests: new Map(), byRequestKey: new Map(), inputs: [] };
    this.sessions.set(sessionId, s);
    return s;
  }

  async getRun(sessionId: string, runId: string): Promise<RunMetadata | null> {
    const run = this.sessions.get(sessionId)?.byRunId.get(runId);
    return run ? copy(run) : null;
  }

  async getCurrentRun(sessionId: string): Promise<RunMetadata | null> {
    const run = this.sessions.get(sessionId)?.runs.at(-1);
    return run ? copy(run) : null;
  }

  async listRuns(sessionId: string): Promise<RunMetadata[]> {
    return copy(this.sessions.get(sessionId)?.runs ?? []);
  }

  /** An indexed read (a Map lookup), never a scan. */
  async getRunByRequestKey(sessionId: string, requestKey: string): Promise<RunMetadata | null> {
    const session = this.sessions.get(sessionId);
    const runId = session?.byRequestKey.get(requestKey);
    const run = runId === undefined ? undefined : session?.byRunId.get(runId);
    return run ? copy(run) : null;
  }

  async listInputs(sessionId: string): Promise<InputRecord[]> {
    return (this.sessions.get(sessionId)?.inputs ?? []).map((i) => ({ runId: i.runId, input: cloneJson(i.input) }));
  }

  /** Live -> any status; a finished run refuses every change, to its own status too. */
  async setRunStatus(sessionId: string, runId: string, status: RunStatus): Promise<RunMetadata> {
    const session = this.sessions.get(sessionId);
    if (!session) throw new NotFoundError(`no session ${sessionId}`);
    const run = session.byRunId.get(runId);
    if (!run) throw new NotFoundError(`no run ${runId} in session ${sessionId}`);
    if (isFinished(run.status)) {
      throw new InvalidTransitionError(`run ${runId} is ${run.status}, which is final (asked: ${status})`);
    }
    run.status = status;
    return copy(run);
  }

  /** Removes runs, inputs and keys at once. */
  async deleteSession(sessionId: string): Promise<boolean> {
    return this.sessions.delete(sessionId);
  }
}
