// Every JSON number a client may send in `input` is kept as written (issue
// 29 item 3; SPEC 3 [[digest.numbers]], SPEC 6 [[certify.match.input-exact]]):
// parsed losslessly, stored, echoed with the same characters, and digested
// by value.
import assert from "node:assert/strict";
import { test } from "node:test";
import { canonicalJson, canonicalNumber, startDigest } from "../src/canonical.js";
import { JsonNumber, MAX_DEPTH, cloneJson, parseJson, stringifyJson } from "../src/json.js";
import { dispatch } from "../src/protocol.js";
import { createAdapterServer, listen } from "../src/server.js";
import { MemorySessionStore } from "../src/stores/memory.js";
import type { SessionStateStore, StartRun } from "../src/types.js";

/** The spellings JSON.parse loses (Infinity, rounding, -0, underflow, trailing zero), and plain ones. */
export const NUMBERS = [
  "18446744073709551616",
  "-9223372036854775809",
  "123456789012345678901234567890123456789",
  "1e400",
  "-1E+400",
  "-0",
  "1e-400",
  "1.50",
  "1.0",
  "0.1",
  "1",
  "-7",
];

const commitBody = (sessionId: string, n: string) =>
  `{"op":"commitRunStart","args":{"startRun":{"sessionId":"${sessionId}","runId":"r1","input":{"n":${n},"list":[${n}]},"expectedCurrentRunId":null}}}`;
const want = (n: string) => `"input":{"n":${n},"list":[${n}]}`;

/** One request through the adapter as the server does it: body text in, answer text out. */
async function rpc(store: SessionStateStore, body: string): Promise<string> {
  return stringifyJson(await dispatch(store, parseJson(body)));
}

test("parseJson keeps lossy spellings as JsonNumber and plain ones as numbers", () => {
  const v = parseJson(`{"a":[1.50, -0, 1e400, 18446744073709551616, 1, 0.5, 1e+21], "b": "x\\u00e9\\n", "__proto__": 2}`) as Record<string, unknown>;
  const a = v.a as unknown[];
  assert.deepEqual(a.map((x) => (x instanceof JsonNumber ? `J${x.text}` : x)), ["J1.50", "J-0", "J1e400", "J18446744073709551616", 1, 0.5, 1e21]);
  assert.equal(v.b, "x\u00e9\n");
  assert.ok(Object.hasOwn(v, "__proto__"), "__proto__ is an own key, as with JSON.parse");
  assert.equal(Object.getPrototypeOf(v), Object.prototype);
  assert.equal(stringifyJson(v), `{"a":[1.50,-0,1e400,18446744073709551616,1,0.5,1e+21],"b":"x\u00e9\\n","__proto__":2}`);
  // Everything else as JSON.parse has it.
  const doc = `{"s":"\\ud83d\\ude00\\"\\\\\\/","t":true,"f":false,"z":null,"e":[],"o":{}, "neg":-0.0125}`;
  assert.deepEqual(parseJson(doc), JSON.parse(doc));
});

test("parseJson refuses what JSON.parse refuses, and nesting beyond MAX_DEPTH", () => {
  for (const bad of ["", "{not json", "[1,]", "{\"a\":1,}", "01", "1.", ".5", "+1", "-", "1e", "NaN", "[1] 2", "\"a\u0001\"", "\"\\x\"", "\"\\u12G4\"", "'a'", "{a:1}", "tru", "[", "\"abc"]) {
    assert.throws(() => JSON.parse(bad), SyntaxError, `JSON.parse(${JSON.stringify(bad)})`);
    assert.throws(() => parseJson(bad), SyntaxError, `parseJson(${JSON.stringify(bad)})`);
  }
  assert.doesNotThrow(() => parseJson("[".repeat(MAX_DEPTH) + "]".repeat(MAX_DEPTH)));
  assert.throws(() => parseJson("[".repeat(MAX_DEPTH + 1) + "]".repeat(MAX_DEPTH + 1)), /nested deeper/);
});

test("cloneJson keeps JsonNumbers; canonical JSON reads numbers by value", () => {
  const v = parseJson(`{"x":[1.50,{"y":-0}]}`);
  assert.equal(stringifyJson(cloneJson(v)), `{"x":[1.50,{"y":-0}]}`);
  assert.equal(canonicalJson(v), `{"x":[1.5,{"y":0}]}`);
  for (const [text, canon] of [
    ["1", "1"], ["1.0", "1"], ["1e0", "1"], ["1.00", "1"], ["-0", "0"], ["1e-400", "0"], ["0.1", "0.1"],
    ["18446744073709551616", "18446744073709552000"], ["1E21", "1e+21"],
    // beyond the double range: the exact value, normalised
    ["1e400", "1e+400"], ["10E399", "1e+400"], ["1.0e+400", "1e+400"], ["-2.50e999", "-2.5e+999"],
    ["0.00012e405", "1.2e+401"], [`1${"0".repeat(400)}`, "1e+400"],
  ] as const) {
    assert.equal(canonicalNumber(text), canon, text);
    assert.equal(canonicalJson(parseJson(text)), canon, text);
  }
  assert.notEqual(canonicalNumber("1e400"), canonicalNumber("2e400"));
  assert.notEqual(canonicalNumber("1e400"), canonicalNumber("-1e400"));
});

test("the start digest treats 1, 1.0 and 1e0 as one input, and 1 and 2 as two", () => {
  const start = (body: string): StartRun => ({ sessionId: "s", runId: "r1", expectedCurrentRunId: null, input: parseJson(body) });
  const one = startDigest(start(`{"n":1}`));
  assert.equal(startDigest(start(`{"n":1.0}`)), one);
  assert.equal(startDigest(start(`{"n":1e0}`)), one);
  assert.notEqual(startDigest(start(`{"n":2}`)), one);
  assert.notEqual(startDigest(start(`{"n":"1"}`)), one);
});

test("memory store: every number round-trips through commitRunStart, getRun and listInputs", async () => {
  const store = new MemorySessionStore();
  for (const [i, n] of NUMBERS.entries()) {
    const s = `num${i}`;
    const started = await rpc(store, commitBody(s, n));
    assert.match(started, /^\{"ok":\{"outcome":"started"/, `${n}: ${started}`);
    assert.equal(await rpc(store, `{"op":"getRun","args":{"sessionId":"${s}","runId":"r1"}}`),
      `{"ok":{"sessionId":"${s}","runId":"r1","status":"running","startSequence":1}}`);
    const inputs = await rpc(store, `{"op":"listInputs","args":{"sessionId":"${s}"}}`);
    assert.equal(inputs, `{"ok":[{"runId":"r1",${want(n)}}]}`, n);
    // The same commit again is a replay, not a conflict.
    assert.match(await rpc(store, commitBody(s, n)), /"outcome":"replayed"/, n);
  }
});

test("memory store: a replay with 1.0 for 1 is a replay, and the input stays as first written", async () => {
  const store = new MemorySessionStore();
  assert.match(await rpc(store, commitBody("s", "1")), /"outcome":"started"/);
  assert.match(await rpc(store, commitBody("s", "1.0")), /"outcome":"replayed"/);
  assert.match(await rpc(store, commitBody("s", "1e0")), /"outcome":"replayed"/);
  assert.match(await rpc(store, commitBody("s", "2")), /"cause":"run_id_conflict"/);
  assert.equal(await rpc(store, `{"op":"listInputs","args":{"sessionId":"s"}}`), `{"ok":[{"runId":"r1",${want("1")}}]}`);
});

test("HTTP: the answer's bytes carry every number as written; malformed bodies are still invalid_argument", async () => {
  const server = createAdapterServer(new MemorySessionStore());
  const port = await listen(server, 0);
  const post = async (body: string) => {
    const r = await fetch(`http://127.0.0.1:${port}/rpc`, { method: "POST", body, signal: AbortSignal.timeout(5000) });
    assert.equal(r.status, 200);
    return r.text();
  };
  try {
    for (const [i, n] of NUMBERS.entries()) {
      const s = `http${i}`;
      assert.match(await post(commitBody(s, n)), /^\{"ok":\{"outcome":"started"/, n);
      assert.equal(await post(`{"op":"listInputs","args":{"sessionId":"${s}"}}`), `{"ok":[{"runId":"r1",${want(n)}}]}`, n);
    }
    // A body JSON.parse refuses gets JSON.parse's own message, as before.
    let native = "";
    try {
      JSON.parse("{not json");
    } catch (e) {
      native = (e as Error).message;
    }
    assert.deepEqual(JSON.parse(await post("{not json")), { error: { kind: "invalid_argument", message: `the body is not JSON: ${native}` } });
    const deep = JSON.parse(await post(`{"op":"listRuns","args":${"[".repeat(MAX_DEPTH + 1)}${"]".repeat(MAX_DEPTH + 1)}}`));
    assert.equal(deep.error.kind, "invalid_argument");
    assert.match(deep.error.message, /nested deeper than/);
    // A number where an object belongs is invalid_argument, not read as an object.
    const num = JSON.parse(await post(`{"op":"listRuns","args":1.50}`));
    assert.deepEqual(num, { error: { kind: "invalid_argument", message: "listRuns: args must be an object" } });
  } finally {
    await new Promise<void>((ok) => {
      server.close(() => ok());
      server.closeAllConnections();
    });
  }
});
