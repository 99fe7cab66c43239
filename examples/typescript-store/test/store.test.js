// @ts-check
// Unit tests of the example (node --test). The conformance verdict comes
// from `reqkey certify` (certify.sh); these pin the pieces it builds on.
import { test } from "node:test";
import assert from "node:assert/strict";
import { canonicalJson, requestDigest } from "../src/canonical.js";
import { MemoryStore } from "../src/store.js";
import { dispatch } from "../src/protocol.js";
import { makeServer } from "../src/server.js";

test("the SPEC 3 digest vectors", () => {
  assert.equal(requestDigest("execute", { text: "hello" }), "eb47905c4cf88de233bd23a7bb177a0c88b74e1fcd6931e4b788a893948c1a98");
  const input = { text: "hello", b: 1, a: [1, 2, { z: "é", y: null }] };
  assert.equal(canonicalJson({ kind: "execute", input }), '{"input":{"a":[1,2,{"y":null,"z":"é"}],"b":1,"text":"hello"},"kind":"execute"}');
  assert.equal(requestDigest("execute", input), "07deedf1365fd163ebb722a283466d6a132c314d02560b78ba769778b6d3421d");
  assert.equal(requestDigest("resume", { text: "go on" }), "31d98a10b9b2f96edca9e6819db997a600f8cf6bd4ac4e5d255323709f6a76f2");
  assert.equal(requestDigest("retry", null), "67aaa0843dbd37847691f8aa48afe9fd25ad581200d659efeca65e3f38b35895");
});

test("keys sort by code point, not by UTF-16 code unit", () => {
  // As UTF-16 units, U+1F600's high surrogate (0xD83D) sorts before U+FF61; by code point U+FF61 comes first.
  assert.equal(canonicalJson({ "\u{1F600}": 1, "\uFF61": 2 }), '{"\uFF61":2,"\u{1F600}":1}');
  assert.equal(JSON.stringify(Object.keys({ "\u{1F600}": 1, "\uFF61": 2 }).sort()), JSON.stringify(["\u{1F600}", "\uFF61"]));
});

/** @param {Record<string, unknown>} fields */
const commit = (fields) => ({ op: "commitRunStart", args: { startRun: { sessionId: "s", expectedCurrentRunId: null, input: { text: "a" }, ...fields } } });

test("the key rule comes before the CAS, and names the holder", () => {
  const store = new MemoryStore();
  assert.deepEqual(dispatch(store, commit({ runId: "r1", requestKey: "k", requestDigest: "d" })).ok, {
    outcome: "started",
    run: { sessionId: "s", runId: "r1", status: "running", startSequence: 1, requestKey: "k", requestDigest: "d" },
  });
  assert.deepEqual(dispatch(store, commit({ runId: "r2", requestKey: "k", requestDigest: "d" })), {
    error: { kind: "run_start_rejected", cause: "request_key_taken", details: { existingRunId: "r1" } },
  });
});

test("the same StartRun again is replayed, with input compared canonically", () => {
  const store = new MemoryStore();
  dispatch(store, commit({ runId: "r1", input: { a: 1, b: 2 }, requestKey: "k", requestDigest: "d" }));
  const again = dispatch(store, commit({ runId: "r1", input: { b: 2, a: 1 }, requestKey: "k", requestDigest: "d" }));
  assert.equal(/** @type {any} */ (again).ok.outcome, "replayed");
  const other = dispatch(store, commit({ runId: "r1", input: { a: 2 }, requestKey: "k", requestDigest: "d" }));
  assert.equal(/** @type {any} */ (other).error.cause, "run_id_conflict");
  assert.equal(store.listInputs("s").length, 1);
});

test("a keyless run has no key fields, and half a key is invalid", () => {
  const store = new MemoryStore();
  const run = /** @type {any} */ (dispatch(store, commit({ runId: "r1" }))).ok.run;
  assert.ok(!("requestKey" in run) && !("requestDigest" in run));
  const half = /** @type {any} */ (dispatch(store, commit({ runId: "r2", requestKey: "k" })));
  assert.equal(half.error.kind, "invalid_argument");
});

test("the adapter answers /health and /rpc over HTTP, 200 even for bad JSON", async () => {
  const server = makeServer();
  await new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(undefined)));
  const addr = server.address();
  const base = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}`;
  try {
    const health = await (await fetch(`${base}/health`)).json();
    assert.equal(health.protocol, "reqkey-store/1");
    const bad = await fetch(`${base}/rpc`, { method: "POST", body: "{not json" });
    assert.equal(bad.status, 200);
    assert.equal((await bad.json()).error.kind, "invalid_argument");
  } finally {
    server.close();
  }
});
