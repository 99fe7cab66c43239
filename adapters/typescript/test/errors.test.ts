// The mapping of a store's typed errors onto reqkey-store/1 errors (SPEC 6).
import assert from "node:assert/strict";
import { test } from "node:test";
import { InvalidArgumentError, InvalidTransitionError, NotFoundError, RunStartRejectedError, toWireError } from "../src/errors.js";

test("each rejection cause maps with the one detail the protocol names", () => {
  assert.deepEqual(toWireError(new RunStartRejectedError("request_key_taken", { existingRunId: "r1" })), {
    kind: "run_start_rejected",
    cause: "request_key_taken",
    details: { existingRunId: "r1" },
  });
  assert.deepEqual(toWireError(new RunStartRejectedError("run_id_conflict", { existingRunId: "r2", extra: 1 })), {
    kind: "run_start_rejected",
    cause: "run_id_conflict",
    details: { existingRunId: "r2" },
  });
  assert.deepEqual(toWireError(new RunStartRejectedError("cas_mismatch", { currentRunId: null })), {
    kind: "run_start_rejected",
    cause: "cas_mismatch",
    details: { currentRunId: null },
  });
  assert.deepEqual(toWireError(new RunStartRejectedError("cas_mismatch", { currentRunId: "r3" })), {
    kind: "run_start_rejected",
    cause: "cas_mismatch",
    details: { currentRunId: "r3" },
  });
});

test("a framework's own RunStartRejectedError class maps by its shape", () => {
  class RunStartRejectedErrorOfTheFramework extends Error {
    override name = "RunStartRejectedError";
    constructor(
      override readonly cause: string,
      readonly details: Record<string, unknown>,
    ) {
      super(cause);
    }
  }
  assert.deepEqual(toWireError(new RunStartRejectedErrorOfTheFramework("request_key_taken", { existingRunId: "holder" })), {
    kind: "run_start_rejected",
    cause: "request_key_taken",
    details: { existingRunId: "holder" },
  });
});

test("a rejection the protocol cannot express faithfully is internal, saying why", () => {
  const noHolder = toWireError(new RunStartRejectedError("request_key_taken", {}));
  assert.equal(noHolder.kind, "internal");
  assert.match("message" in noHolder ? noHolder.message : "", /existingRunId/);
  const emptyHolder = toWireError(new RunStartRejectedError("run_id_conflict", { existingRunId: "" }));
  assert.equal(emptyHolder.kind, "internal");
  const noCurrent = toWireError(new RunStartRejectedError("cas_mismatch", {}));
  assert.equal(noCurrent.kind, "internal");
  assert.match("message" in noCurrent ? noCurrent.message : "", /currentRunId/);
  const unknown = toWireError({ name: "RunStartRejectedError", cause: "session_busy", details: {} });
  assert.equal(unknown.kind, "internal");
  assert.match("message" in unknown ? unknown.message : "", /session_busy/);
});

test("not found, invalid transition and invalid argument keep their message", () => {
  assert.deepEqual(toWireError(new NotFoundError("no run r9")), { kind: "not_found", message: "no run r9" });
  assert.deepEqual(toWireError(new InvalidTransitionError("r1 is completed")), { kind: "invalid_transition", message: "r1 is completed" });
  assert.deepEqual(toWireError(new InvalidArgumentError("U+0000")), { kind: "invalid_argument", message: "U+0000" });
});

test("anything else, a raw unique violation included, is internal", () => {
  const unique = Object.assign(new Error('duplicate key value violates unique constraint "x"'), { code: "23505" });
  assert.deepEqual(toWireError(unique), { kind: "internal", message: 'Error: duplicate key value violates unique constraint "x"' });
  assert.deepEqual(toWireError("a string"), { kind: "internal", message: "a string" });
  assert.deepEqual(toWireError(new TypeError("boom")), { kind: "internal", message: "TypeError: boom" });
});

test("classifyError is asked first, and undefined falls back to the default mapping", () => {
  class Busy extends Error {}
  const classify = (e: unknown) => (e instanceof Busy ? { kind: "not_found" as const, message: "mapped" } : undefined);
  assert.deepEqual(toWireError(new Busy("x"), classify), { kind: "not_found", message: "mapped" });
  assert.deepEqual(toWireError(new NotFoundError("y"), classify), { kind: "not_found", message: "y" });
});
