/**
 * The shapes of the release notes' `SessionStateStore` (SPEC 1 and 4), as
 * far as request keys and `reqkey-store/1` need them. A framework store has
 * more methods and more fields; the adapter only calls these eight and only
 * answers these fields, so any object with this shape can be served.
 */

/** Live statuses may still change; finished ones never do (SPEC 1). */
export type LiveStatus = "running" | "suspended_input" | "suspended_tool";
export type FinishedStatus = "completed" | "failed" | "interrupted";
export type RunStatus = LiveStatus | FinishedStatus;

export const LIVE_STATUSES: readonly LiveStatus[] = ["running", "suspended_input", "suspended_tool"];
export const FINISHED_STATUSES: readonly FinishedStatus[] = ["completed", "failed", "interrupted"];
export const RUN_STATUSES: readonly RunStatus[] = [...LIVE_STATUSES, ...FINISHED_STATUSES];

export function isRunStatus(v: unknown): v is RunStatus {
  return typeof v === "string" && (RUN_STATUSES as readonly string[]).includes(v);
}

export function isFinished(status: RunStatus): boolean {
  return (FINISHED_STATUSES as readonly string[]).includes(status);
}

/**
 * One run. `requestKey` and `requestDigest` are absent (not null, not
 * undefined-valued in the answer) on a keyless run.
 */
export interface RunMetadata {
  sessionId: string;
  runId: string;
  status: RunStatus;
  startSequence: number;
  requestKey?: string;
  requestDigest?: string;
}

/**
 * The argument of the run-start commit (SPEC 4). `input` is JSON as the
 * adapter parsed it: a number not written in its ECMAScript form (`1.50`,
 * `-0`, `1e400`) is a `JsonNumber` holding its text (json.ts), to be kept
 * and answered as written.
 */
export interface StartRun {
  sessionId: string;
  runId: string;
  expectedCurrentRunId: string | null;
  input: unknown;
  requestKey?: string;
  requestDigest?: string;
}

export interface CommitRunStartResult {
  outcome: "started" | "replayed";
  run: RunMetadata;
}

/** One entry of a session's input log. */
export interface InputRecord {
  runId: string;
  input: unknown;
}

/**
 * What the adapter needs of a store. `commitRunStart` refuses with a
 * `RunStartRejectedError` (see errors.ts); `setRunStatus` throws a
 * `NotFoundError` or an `InvalidTransitionError`. `deleteSession` resolves
 * to whether the session existed.
 */
export interface SessionStateStore {
  commitRunStart(startRun: StartRun): Promise<CommitRunStartResult>;
  getRun(sessionId: string, runId: string): Promise<RunMetadata | null>;
  getCurrentRun(sessionId: string): Promise<RunMetadata | null>;
  listRuns(sessionId: string): Promise<RunMetadata[]>;
  getRunByRequestKey(sessionId: string, requestKey: string): Promise<RunMetadata | null>;
  listInputs(sessionId: string): Promise<InputRecord[]>;
  setRunStatus(sessionId: string, runId: string, status: RunStatus): Promise<RunMetadata>;
  deleteSession(sessionId: string): Promise<boolean>;
}
