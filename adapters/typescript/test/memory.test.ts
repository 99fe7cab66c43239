// The memory store's SPEC 4 rules, and SPEC 3's digest vectors.
import assert from "node:assert/strict";
import { test } from "node:test";
import { canonicalJson, requestDigest } from "../src/canonical.js";
import { RunStartRejectedError } from "../src/errors.js";
import { MemorySessionStore } from "../src/stores/memory.js";
import type { StartRun } from "../src/types.js";

test("the SPEC 3 digest vectors", () => {
  assert.equal(requestDigest("execute", { text: "hello" }), "eb47905c4cf88de233bd23a7bb177a0c88b74e1fcd6931e4b788a893948c1a98");
  const input = { text: "hello", b: 1, a: [1, 2, { z: "é", y: null }] };
  assert.equal(canonicalJson({ kind: "execute", input }), '{"input":{"a":[1,2,{"y":null,"z":"é"}],"b":1,"text":"hello"},"kind":"execute"}');
  assert.equal(requestDigest("execute", input), "07deedf1365fd163ebb722a283466d6a132c314d02560b78ba769778b6d3421d");
  assert.equal(requestDigest("resume", { text: "go on" }), "31d98a10b9b2f96edca9e6819db997a600f8cf6bd4ac4e5d255323709f6a76f2");
});

test("keys sort by code point, not by UTF-16 code unit", () => {
  // As UTF-16 units, U+1F600's high surrogate (0xD83D) sorts before U+FF61; by code point U+FF61 comes first.
  assert.equal(canonicalJson({ "\u{1F600}": 1, "\uFF61": 2 }), '{"\uFF61":2,"\u{1F600}":1}');
});

const run = (fields: Partial<StartRun> & { runId: string }): StartRun => ({ sessionId: "s", expectedCurrentRunId: null, input: { text: "a" }, ...fields });

async function rejected(p: Promise<unknown>): Promise<RunStartRejectedError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof RunStartRejectedError, String(e));
    return e;
  }
  assert.fail("expected a RunStartRejectedError");
}

test("the key rule comes after the replay check and before the CAS, and names the holder", async () => {
  const store = new MemorySessionStore();
  const first = run({ runId: "r1", requestKey: "k", requestDigest: "d" });
  assert.equal((await store.commitRunStart(first)).outcome, "started");
  assert.equal((await store.commitRunStart(first)).outcome, "replayed");
  const taken = await rejected(store.commitRunStart(run({ runId: "r2", requestKey: "k", requestDigest: "d" })));
  assert.equal(taken.cause, "request_key_taken");
  assert.deepEqual(taken.details, { existingRunId: "r1" });
  assert.equal((await store.listRuns("s")).length, 1);
  assert.equal((await store.listInputs("s")).length, 1);
});

test("the broken no-key-rule store lets the CAS answer instead", async () => {
  const store = new MemorySessionStore("no-key-rule");
  await store.commitRunStart(run({ runId: "r1", requestKey: "k", requestDigest: "d" }));
  const e = await rejected(store.commitRunStart(run({ runId: "r2", requestKey: "k", requestDigest: "d" })));
  assert.equal(e.cause, "cas_mismatch");
});

test("a replay compares input canonically; other fields are a run_id_conflict", async () => {
  const store = new MemorySessionStore();
  await store.commitRunStart(run({ runId: "r1", input: { a: 1, b: 2 } }));
  assert.equal((await store.commitRunStart(run({ runId: "r1", input: { b: 2, a: 1 } }))).outcome, "replayed");
  const e = await rejected(store.commitRunStart(run({ runId: "r1", input: { a: 2 } })));
  assert.deepEqual([e.cause, e.details], ["run_id_conflict", { existingRunId: "r1" }]);
});

test("a keyless run has no key fields; a refused commit creates no session; delete frees the key", async () => {
  const store = new MemorySessionStore();
  const keyless = (await store.commitRunStart(run({ runId: "r1" }))).run;
  assert.ok(!("requestKey" in keyless) && !("requestDigest" in keyless));
  await rejected(store.commitRunStart(run({ sessionId: "t", runId: "x", expectedCurrentRunId: "nope" })));
  assert.equal(await store.deleteSession("t"), false);
  await store.commitRunStart(run({ runId: "r2", expectedCurrentRunId: "r1", requestKey: "k", requestDigest: "d" }));
  assert.equal(await store.deleteSession("s"), true);
  assert.equal(await store.getRunByRequestKey("s", "k"), null);
  const again = await store.commitRunStart(run({ runId: "r3", requestKey: "k", requestDigest: "d" }));
  assert.equal(again.run.startSequence, 1);
});

test("eight concurrent commits with one key: one starts, seven name it", async () => {
  const store = new MemorySessionStore();
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, (_, i) => store.commitRunStart(run({ runId: `r${i}`, requestKey: "k", requestDigest: "d" }))),
  );
  const started = results.filter((r) => r.status === "fulfilled");
  assert.equal(started.length, 1);
  const winner = started[0]?.status === "fulfilled" ? started[0].value.run.runId : "";
  for (const r of results.filter((r) => r.status === "rejected")) {
    assert.deepEqual(r.status === "rejected" && [r.reason.cause, r.reason.details], ["request_key_taken", { existingRunId: winner }]);
  }
});

test("the racy store loses that race (a commit decides on a stale holder)", async () => {
  const store = new MemorySessionStore("racy");
  const results = await Promise.allSettled(
    Array.from({ length: 8 }, (_, i) => store.commitRunStart(run({ runId: `r${i}`, requestKey: "k", requestDigest: "d" }))),
  );
  const causes = results.map((r) => (r.status === "rejected" ? r.reason.cause : "started"));
  assert.equal(causes.filter((c) => c === "started").length, 1);
  assert.ok(causes.includes("cas_mismatch"), causes.join(","));
});

test("a finished run refuses every change; unknown runs are not found", async () => {
  const store = new MemorySessionStore();
  await store.commitRunStart(run({ runId: "r1" }));
  assert.equal((await store.setRunStatus("s", "r1", "suspended_input")).status, "suspended_input");
  assert.equal((await store.setRunStatus("s", "r1", "completed")).status, "completed");
  await assert.rejects(store.setRunStatus("s", "r1", "completed"), { name: "InvalidTransitionError" });
  await assert.rejects(store.setRunStatus("s", "nope", "running"), { name: "NotFoundError" });
  await assert.rejects(store.setRunStatus("nope", "r1", "running"), { name: "NotFoundError" });
});
