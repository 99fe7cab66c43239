// The PostgreSQL store against a real server ($REQKEY_POSTGRES_URL, default
// postgres://postgres@127.0.0.1:5432/test), in tables of its own
// (ts_reqkey_t<pid>_*), dropped afterwards. Without a server these tests are
// skipped, unless REQKEY_REQUIRE_SERVICES=1 (as in CI), where they fail.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import pg from "pg";
import { RunStartRejectedError } from "../src/errors.js";
import { parseJson, stringifyJson } from "../src/json.js";
import { dispatch } from "../src/protocol.js";
import { DEFAULT_POSTGRES_URL, PostgresSessionStore } from "../src/stores/postgres.js";
import type { StartRun } from "../src/types.js";

const url = process.env.REQKEY_POSTGRES_URL || DEFAULT_POSTGRES_URL;
const prefix = `ts_reqkey_t${process.pid}_`;

async function reachable(): Promise<boolean> {
  const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3000 });
  try {
    await c.connect();
    return true;
  } catch {
    return false;
  } finally {
    await c.end().catch(() => {});
  }
}

const up = await reachable();
if (!up && process.env.REQKEY_REQUIRE_SERVICES === "1") {
  throw new Error(`PostgreSQL at ${url} does not answer, and REQKEY_REQUIRE_SERVICES=1`);
}
const skip = up ? false : `no PostgreSQL at ${url}`;

let store: PostgresSessionStore;
let broken: PostgresSessionStore;
before(async () => {
  if (!up) return;
  store = new PostgresSessionStore({ connectionString: url, tablePrefix: prefix });
  broken = new PostgresSessionStore({ connectionString: url, tablePrefix: prefix, broken: "no-key-rule" });
  await store.migrate();
  await broken.migrate(); // a second migration of the same tables is a no-op
});
after(async () => {
  if (!up) return;
  await store.dropTables();
  await store.close();
  await broken.close();
});

let n = 0;
const session = () => `pg-${process.pid}-${++n}`;
const run = (sessionId: string, fields: Partial<StartRun> & { runId: string }): StartRun => ({
  sessionId,
  expectedCurrentRunId: null,
  input: { text: "a" },
  ...fields,
});

async function rejected(p: Promise<unknown>): Promise<RunStartRejectedError> {
  try {
    await p;
  } catch (e) {
    assert.ok(e instanceof RunStartRejectedError, String(e));
    return e;
  }
  assert.fail("expected a RunStartRejectedError");
}

test("the key index is unique and partial on (session_id, request_key)", { skip }, async () => {
  const r = await store.pool.query<{ indexdef: string }>("SELECT indexdef FROM pg_indexes WHERE indexname = $1", [`${prefix}runs_request_key`]);
  const def = r.rows[0]?.indexdef ?? "";
  assert.match(def, /CREATE UNIQUE INDEX .* \(session_id, request_key\) WHERE \(request_key IS NOT NULL\)/);
});

test("a keyed run is recorded and found; the rules run in order", { skip }, async () => {
  const s = session();
  const first = run(s, { runId: "r1", requestKey: "k", requestDigest: "d", input: { b: 2, a: [1, { z: null }] } });
  const started = await store.commitRunStart(first);
  assert.deepEqual(started, { outcome: "started", run: { sessionId: s, runId: "r1", status: "running", startSequence: 1, requestKey: "k", requestDigest: "d" } });
  assert.deepEqual(await store.getRunByRequestKey(s, "k"), started.run);
  assert.equal(await store.getRunByRequestKey(s, "K"), null);
  // replay (input compared canonically) before the key rule
  assert.equal((await store.commitRunStart({ ...first, input: { a: [1, { z: null }], b: 2 } })).outcome, "replayed");
  // key rule before the CAS
  const taken = await rejected(store.commitRunStart(run(s, { runId: "r2", requestKey: "k", requestDigest: "d" })));
  assert.deepEqual([taken.cause, taken.details], ["request_key_taken", { existingRunId: "r1" }]);
  const conflict = await rejected(store.commitRunStart({ ...first, input: { other: true } }));
  assert.deepEqual([conflict.cause, conflict.details], ["run_id_conflict", { existingRunId: "r1" }]);
  const cas = await rejected(store.commitRunStart(run(s, { runId: "r3" })));
  assert.deepEqual([cas.cause, cas.details], ["cas_mismatch", { currentRunId: "r1" }]);
  const keyless = await store.commitRunStart(run(s, { runId: "r4", expectedCurrentRunId: "r1", input: [1, "x"] }));
  assert.deepEqual(keyless.run, { sessionId: s, runId: "r4", status: "running", startSequence: 2 });
  assert.deepEqual(await store.listInputs(s), [
    { runId: "r1", input: { b: 2, a: [1, { z: null }] } },
    { runId: "r4", input: [1, "x"] },
  ]);
  assert.deepEqual((await store.listRuns(s)).map((r) => r.runId), ["r1", "r4"]);
  assert.equal((await store.getCurrentRun(s))?.runId, "r4");
});

test("a refused commit creates no session; delete frees the key and restarts the sequence", { skip }, async () => {
  const s = session();
  await rejected(store.commitRunStart(run(s, { runId: "x", expectedCurrentRunId: "nope", requestKey: "k", requestDigest: "d" })));
  assert.equal(await store.deleteSession(s), false);
  await store.commitRunStart(run(s, { runId: "r1", requestKey: "k", requestDigest: "d" }));
  assert.equal(await store.deleteSession(s), true);
  assert.deepEqual([await store.listRuns(s), await store.listInputs(s), await store.getRunByRequestKey(s, "k")], [[], [], null]);
  const again = await store.commitRunStart(run(s, { runId: "r9", requestKey: "k", requestDigest: "d" }));
  assert.equal(again.run.startSequence, 1);
});

test("setRunStatus: live changes, finished refuses, unknown is not found", { skip }, async () => {
  const s = session();
  await store.commitRunStart(run(s, { runId: "r1" }));
  assert.equal((await store.setRunStatus(s, "r1", "suspended_tool")).status, "suspended_tool");
  assert.equal((await store.setRunStatus(s, "r1", "failed")).status, "failed");
  await assert.rejects(store.setRunStatus(s, "r1", "failed"), { name: "InvalidTransitionError" });
  await assert.rejects(store.setRunStatus(s, "r2", "running"), { name: "NotFoundError" });
});

test("U+0000 in an id is refused as an invalid argument, before the store is touched", { skip }, async () => {
  const s = session();
  await assert.rejects(store.commitRunStart(run(s, { runId: "a\u0000b" })), { name: "InvalidArgumentError" });
  assert.deepEqual(await store.listRuns(s), []);
});

test("U+0000 in an input is stored and read back as written (json keeps the escape)", { skip }, async () => {
  const s = session();
  const input = { "k\u0000": ["nul\u0000end", "\u0001"] };
  await store.commitRunStart(run(s, { runId: "r1", input }));
  assert.deepEqual(await store.listInputs(s), [{ runId: "r1", input }]);
});

test("the unique index backstop answers request_key_taken naming the holder, never the raw violation", { skip }, async () => {
  // The no-key-rule store skips the holder read, so the duplicate key reaches the INSERT and the index fires.
  const s = session();
  await broken.commitRunStart(run(s, { runId: "r1", requestKey: "k", requestDigest: "d" }));
  const e = await rejected(broken.commitRunStart(run(s, { runId: "r2", expectedCurrentRunId: "r1", requestKey: "k", requestDigest: "d" })));
  assert.deepEqual([e.cause, e.details], ["request_key_taken", { existingRunId: "r1" }]);
  assert.deepEqual((await store.listRuns(s)).map((r) => r.runId), ["r1"]);
  assert.equal((await store.listInputs(s)).length, 1);
});

test("eight concurrent commits with one key, 20 times: one starts, the rest name it", { skip }, async () => {
  for (let trial = 0; trial < 20; trial++) {
    const s = session();
    const results = await Promise.allSettled(
      Array.from({ length: 8 }, (_, i) => store.commitRunStart(run(s, { runId: `r${i}`, requestKey: "k", requestDigest: "d" }))),
    );
    const started = results.flatMap((r) => (r.status === "fulfilled" ? [r.value.run.runId] : []));
    assert.equal(started.length, 1, `trial ${trial}`);
    for (const r of results) {
      if (r.status === "rejected") {
        assert.ok(r.reason instanceof RunStartRejectedError, String(r.reason));
        assert.deepEqual([r.reason.cause, r.reason.details], ["request_key_taken", { existingRunId: started[0] }]);
      }
    }
    assert.equal((await store.listRuns(s)).length, 1);
    assert.equal((await store.listInputs(s)).length, 1);
  }
});

test("every number round-trips as written: commitRunStart, getRun, listInputs, and the column's text", { skip }, async () => {
  // JSON.parse (pg's own json type parser included) would answer 18446744073709552000, null, 0, 0 and 1.5.
  const numbers = ["18446744073709551616", "-9223372036854775809", "1e400", "-1E+400", "-0", "1e-400", "1.50", "1.0", "0.1", "1"];
  const rpc = async (body: string) => stringifyJson(await dispatch(store, parseJson(body)));
  for (const n of numbers) {
    const s = session();
    const commit = `{"op":"commitRunStart","args":{"startRun":{"sessionId":"${s}","runId":"r1","input":{"n":${n},"list":[${n}]},"expectedCurrentRunId":null}}}`;
    assert.match(await rpc(commit), /^\{"ok":\{"outcome":"started"/, n);
    assert.equal(await rpc(`{"op":"getRun","args":{"sessionId":"${s}","runId":"r1"}}`), `{"ok":{"sessionId":"${s}","runId":"r1","status":"running","startSequence":1}}`);
    assert.equal(await rpc(`{"op":"listInputs","args":{"sessionId":"${s}"}}`), `{"ok":[{"runId":"r1","input":{"n":${n},"list":[${n}]}}]}`, n);
    const col = await store.pool.query<{ t: string }>(`SELECT input::text AS t FROM ${prefix}runs WHERE session_id = $1`, [s]);
    assert.equal(col.rows[0]?.t, `{"n":${n},"list":[${n}]}`, n);
    assert.match(await rpc(commit), /"outcome":"replayed"/, n);
  }
});

test("a replay with 1.0 for 1 is a replay (the start digest reads numbers by value)", { skip }, async () => {
  const s = session();
  await store.commitRunStart(run(s, { runId: "r1", input: parseJson(`{"n":1}`) }));
  assert.equal((await store.commitRunStart(run(s, { runId: "r1", input: parseJson(`{"n":1.0}`) }))).outcome, "replayed");
  assert.equal((await store.commitRunStart(run(s, { runId: "r1", input: parseJson(`{"n":1e0}`) }))).outcome, "replayed");
  const e = await rejected(store.commitRunStart(run(s, { runId: "r1", input: parseJson(`{"n":2}`) })));
  assert.equal(e.cause, "run_id_conflict");
  assert.equal(stringifyJson(await store.listInputs(s)), `[{"runId":"r1","input":{"n":1}}]`);
});
