// reqkey-store/1 dispatch (SPEC 6): malformed requests never reach the
// store; valid ones call the right method and answer the protocol's shape.
import assert from "node:assert/strict";
import { test } from "node:test";
import { RunStartRejectedError } from "../src/errors.js";
import { dispatch } from "../src/protocol.js";
import type { RunMetadata, SessionStateStore } from "../src/types.js";

/** A store that records every call and answers from `answers` (or throws). */
function recordingStore(answers: Partial<Record<keyof SessionStateStore, unknown>> = {}) {
  const calls: { method: string; args: unknown[] }[] = [];
  const store = new Proxy({} as SessionStateStore, {
    get(_target, method: string) {
      return async (...args: unknown[]) => {
        calls.push({ method, args });
        const a = answers[method as keyof SessionStateStore];
        if (a instanceof Error) throw a;
        return a;
      };
    },
  });
  return { store, calls };
}

const S = "s-1";
const start = (extra: Record<string, unknown> = {}) => ({
  op: "commitRunStart",
  args: { startRun: { sessionId: S, runId: "r1", expectedCurrentRunId: null, input: { text: "a" }, ...extra } },
});

const MALFORMED: [string, unknown][] = [
  ["not an object", "getRun"],
  ["an array", [1]],
  ["null", null],
  ["no op", { args: { sessionId: S } }],
  ["a numeric op", { op: 7, args: {} }],
  ["an unknown op", { op: "frobnicate", args: { sessionId: S } }],
  ["an op from Object.prototype", { op: "toString", args: {} }],
  ["no args", { op: "listRuns" }],
  ["args an array", { op: "listRuns", args: [S] }],
  ["a missing field", { op: "getRun", args: { sessionId: S } }],
  ["an unknown field", { op: "listRuns", args: { sessionId: S, limit: 3 } }],
  ["a numeric session id", { op: "getRun", args: { sessionId: 7, runId: "r" } }],
  ["an empty session id", { op: "listRuns", args: { sessionId: "" } }],
  ["a session id outside the alphabet", { op: "listRuns", args: { sessionId: "a b" } }],
  ["a session id of 257 characters", { op: "listRuns", args: { sessionId: "s".repeat(257) } }],
  ["an empty run id", { op: "getRun", args: { sessionId: S, runId: "" } }],
  ["a key of 129 characters", { op: "getRunByRequestKey", args: { sessionId: S, requestKey: "k".repeat(129) } }],
  ["a key with a space", { op: "getRunByRequestKey", args: { sessionId: S, requestKey: "a b" } }],
  ["a non-ASCII key", { op: "getRunByRequestKey", args: { sessionId: S, requestKey: "clé" } }],
  ["an unknown status", { op: "setRunStatus", args: { sessionId: S, runId: "r1", status: "done" } }],
  ["a numeric status", { op: "setRunStatus", args: { sessionId: S, runId: "r1", status: 3 } }],
  ["commitRunStart without startRun", { op: "commitRunStart", args: {} }],
  ["a key without a digest", start({ requestKey: "k" })],
  ["a digest without a key", start({ requestDigest: "d" })],
  ["an empty digest", start({ requestKey: "k", requestDigest: "" })],
  ["a StartRun without input", { op: "commitRunStart", args: { startRun: { sessionId: S, runId: "r1", expectedCurrentRunId: null } } }],
  ["a StartRun with an unknown field", start({ priority: 1 })],
  ["a numeric expectedCurrentRunId", start({ expectedCurrentRunId: 4 })],
  ["an empty runId in StartRun", start({ runId: "" })],
];

for (const [what, request] of MALFORMED) {
  test(`${what}: invalid_argument, and the store is never called`, async () => {
    const { store, calls } = recordingStore();
    const answer = await dispatch(store, request);
    assert.ok("error" in answer, JSON.stringify(answer));
    assert.equal(answer.error.kind, "invalid_argument");
    assert.ok("message" in answer.error && answer.error.message.length > 0);
    assert.deepEqual(calls, []);
  });
}

const keyed: RunMetadata = { sessionId: S, runId: "r1", status: "running", startSequence: 1, requestKey: "k", requestDigest: "d" };

test("commitRunStart passes the StartRun on and answers {outcome, run}", async () => {
  const { store, calls } = recordingStore({ commitRunStart: { outcome: "started", run: keyed } });
  const answer = await dispatch(store, start({ requestKey: "k", requestDigest: "d" }));
  assert.deepEqual(answer, { ok: { outcome: "started", run: keyed } });
  assert.deepEqual(calls, [
    { method: "commitRunStart", args: [{ sessionId: S, runId: "r1", expectedCurrentRunId: null, input: { text: "a" }, requestKey: "k", requestDigest: "d" }] },
  ]);
});

test("absent or null optional StartRun fields read as absent", async () => {
  const { store, calls } = recordingStore({ commitRunStart: { outcome: "started", run: keyed } });
  await dispatch(store, { op: "commitRunStart", args: { startRun: { sessionId: S, runId: "r1", input: null, requestKey: null, requestDigest: null } } });
  assert.deepEqual(calls[0]?.args, [{ sessionId: S, runId: "r1", expectedCurrentRunId: null, input: null }]);
});

test("every op calls its method with its arguments", async () => {
  const cases: [unknown, string, unknown[]][] = [
    [{ op: "getRun", args: { sessionId: S, runId: "r1" } }, "getRun", [S, "r1"]],
    [{ op: "getCurrentRun", args: { sessionId: S } }, "getCurrentRun", [S]],
    [{ op: "listRuns", args: { sessionId: S } }, "listRuns", [S]],
    [{ op: "getRunByRequestKey", args: { sessionId: S, requestKey: "K.1:x-y_z" } }, "getRunByRequestKey", [S, "K.1:x-y_z"]],
    [{ op: "listInputs", args: { sessionId: S } }, "listInputs", [S]],
    [{ op: "setRunStatus", args: { sessionId: S, runId: "r1", status: "suspended_tool" } }, "setRunStatus", [S, "r1", "suspended_tool"]],
    [{ op: "deleteSession", args: { sessionId: S } }, "deleteSession", [S]],
  ];
  for (const [request, method, args] of cases) {
    const { store, calls } = recordingStore({ getRun: null, getCurrentRun: null, listRuns: [], getRunByRequestKey: null, listInputs: [], setRunStatus: keyed, deleteSession: false });
    const answer = await dispatch(store, request);
    assert.ok("ok" in answer, `${method}: ${JSON.stringify(answer)}`);
    assert.deepEqual(calls, [{ method, args }]);
  }
});

test("answers keep the protocol's fields only, and pass a store's null key on for the suite to judge", async () => {
  const framework = { ...keyed, createdAt: "2026-01-01", requestKey: undefined, requestDigest: undefined };
  const { store } = recordingStore({ getRun: framework, listRuns: [{ ...keyed, requestKey: null }], listInputs: [{ runId: "r1", input: { a: 1 }, at: 5 }], deleteSession: true });
  assert.deepEqual(await dispatch(store, { op: "getRun", args: { sessionId: S, runId: "r1" } }), {
    ok: { sessionId: S, runId: "r1", status: "running", startSequence: 1 },
  });
  const listed = await dispatch(store, { op: "listRuns", args: { sessionId: S } });
  assert.deepEqual(listed, { ok: [{ ...keyed, requestKey: null }] });
  assert.deepEqual(await dispatch(store, { op: "listInputs", args: { sessionId: S } }), { ok: [{ runId: "r1", input: { a: 1 } }] });
  assert.deepEqual(await dispatch(store, { op: "deleteSession", args: { sessionId: S } }), { ok: { deleted: true } });
});

test("a store error is mapped, and a deleteSession that is not a boolean is internal", async () => {
  const { store } = recordingStore({ commitRunStart: new RunStartRejectedError("request_key_taken", { existingRunId: "r0" }), deleteSession: undefined });
  assert.deepEqual(await dispatch(store, start({ requestKey: "k", requestDigest: "d" })), {
    error: { kind: "run_start_rejected", cause: "request_key_taken", details: { existingRunId: "r0" } },
  });
  const del = await dispatch(store, { op: "deleteSession", args: { sessionId: S } });
  assert.ok("error" in del && del.error.kind === "internal");
});
