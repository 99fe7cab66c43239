/**
 * The store's typed errors and their mapping onto `reqkey-store/1` errors
 * (SPEC 6).
 *
 * A framework store throws its own classes, which are not these, so the
 * mapping goes by shape: an error whose `name` is `RunStartRejectedError`
 * (with `cause` and `details`), `NotFoundError`, `InvalidTransitionError`
 * or `InvalidArgumentError` maps like the classes below. A store with other
 * error types passes `classifyError` to the server (see server.ts).
 *
 * A rejection the protocol cannot express faithfully (an unknown cause, a
 * `request_key_taken` that does not name the holder) maps to `internal`
 * with a message that says why: certification then fails the step and
 * names the store's defect, instead of the adapter papering over it.
 */

export type RejectionCause = "request_key_taken" | "cas_mismatch" | "run_id_conflict";

export const REJECTION_CAUSES: readonly RejectionCause[] = ["request_key_taken", "cas_mismatch", "run_id_conflict"];

/**
 * The run-start commit refused (SPEC 4 rules 1 to 3). `details` is
 * `{existingRunId}` for `request_key_taken` and `run_id_conflict`,
 * `{currentRunId}` (null when the session has no runs) for `cas_mismatch`.
 */
export class RunStartRejectedError extends Error {
  override readonly name = "RunStartRejectedError";
  override readonly cause: RejectionCause;
  readonly details: Record<string, unknown>;

  constructor(cause: RejectionCause, details: Record<string, unknown>) {
    super(`run start rejected: ${cause}`);
    this.cause = cause;
    this.details = details;
  }
}

/** `setRunStatus` on an unknown session or run. */
export class NotFoundError extends Error {
  override readonly name = "NotFoundError";
}

/** `setRunStatus` on a finished run. */
export class InvalidTransitionError extends Error {
  override readonly name = "InvalidTransitionError";
}

/** An argument the store cannot hold (for example U+0000 in Postgres text). */
export class InvalidArgumentError extends Error {
  override readonly name = "InvalidArgumentError";
}

export type WireError =
  | { kind: "run_start_rejected"; cause: RejectionCause; details: Record<string, unknown> }
  | { kind: "not_found" | "invalid_transition" | "invalid_argument" | "internal"; message: string };

/** Maps a store-specific error to a wire error, or `undefined` to fall back to the default mapping. */
export type ErrorClassifier = (error: unknown) => WireError | undefined;

function isRecord(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === "object" && !Array.isArray(v);
}

function nameOf(e: unknown): string | undefined {
  return isRecord(e) && typeof e.name === "string" ? e.name : undefined;
}

function messageOf(e: unknown): string {
  if (e instanceof Error) return e.message;
  if (isRecord(e) && typeof e.message === "string") return e.message;
  return String(e);
}

const internal = (message: string): WireError => ({ kind: "internal", message });

/** The run id a detail names: a non-empty string. */
function runIdDetail(details: Record<string, unknown>, field: string): string | undefined {
  const v = details[field];
  return typeof v === "string" && v.length > 0 ? v : undefined;
}

/** Maps a `RunStartRejectedError`-shaped error, checking that it carries what the protocol needs. */
function rejection(e: Record<string, unknown>): WireError {
  const cause = e.cause;
  const details = isRecord(e.details) ? e.details : {};
  switch (cause) {
    case "request_key_taken":
    case "run_id_conflict": {
      const existingRunId = runIdDetail(details, "existingRunId");
      if (existingRunId === undefined) {
        return internal(`RunStartRejectedError(${cause}) without details.existingRunId: the store must name the run`);
      }
      return { kind: "run_start_rejected", cause, details: { existingRunId } };
    }
    case "cas_mismatch": {
      const current = details.currentRunId;
      if (current === null || (typeof current === "string" && current.length > 0)) {
        return { kind: "run_start_rejected", cause, details: { currentRunId: current } };
      }
      return internal("RunStartRejectedError(cas_mismatch) without details.currentRunId (a run id or null)");
    }
    default:
      return internal(`RunStartRejectedError with a cause reqkey-store/1 does not know: ${JSON.stringify(cause) ?? String(cause)}`);
  }
}

/**
 * The `{"error": ...}` body for anything a store threw. `classify` is asked
 * first; then the shapes above; everything else is `internal` (which fails
 * the certification step: a conforming store never leaks, say, a raw
 * unique-constraint error).
 */
export function toWireError(e: unknown, classify?: ErrorClassifier): WireError {
  if (classify) {
    const mapped = classify(e);
    if (mapped !== undefined) return mapped;
  }
  switch (nameOf(e)) {
    case "RunStartRejectedError":
      return rejection(e as Record<string, unknown>);
    case "NotFoundError":
      return { kind: "not_found", message: messageOf(e) };
    case "InvalidTransitionError":
      return { kind: "invalid_transition", message: messageOf(e) };
    case "InvalidArgumentError":
      return { kind: "invalid_argument", message: messageOf(e) };
    default: {
      const name = nameOf(e);
      return internal(name ? `${name}: ${messageOf(e)}` : messageOf(e));
    }
  }
}
