// The HTTP side of the adapter: /health, 200 for every /rpc answer, and
// requests served concurrently.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createAdapterServer, listen } from "../src/server.js";
import { MemorySessionStore } from "../src/stores/memory.js";
import type { SessionStateStore } from "../src/types.js";

async function serve(store: SessionStateStore) {
  const server = createAdapterServer(store, { name: "t", version: "1" });
  const port = await listen(server, 0);
  const rpc = async (body: string) => {
    const r = await fetch(`http://127.0.0.1:${port}/rpc`, { method: "POST", body, signal: AbortSignal.timeout(5000) });
    return { status: r.status, json: (await r.json()) as Record<string, unknown> };
  };
  return { server, port, rpc, close: () => new Promise<void>((ok) => { server.close(() => ok()); server.closeAllConnections(); }) };
}

test("GET /health names the protocol; /rpc answers 200 even for a body that is not JSON", async () => {
  const s = await serve(new MemorySessionStore());
  try {
    const health = await (await fetch(`http://127.0.0.1:${s.port}/health`)).json();
    assert.deepEqual(health, { name: "t", version: "1", protocol: "reqkey-store/1" });
    const bad = await s.rpc("{not json");
    assert.equal(bad.status, 200);
    assert.equal((bad.json.error as { kind: string }).kind, "invalid_argument");
    const ok = await s.rpc(JSON.stringify({ op: "listRuns", args: { sessionId: "s" } }));
    assert.deepEqual(ok, { status: 200, json: { ok: [] } });
    assert.equal((await fetch(`http://127.0.0.1:${s.port}/nope`)).status, 404);
  } finally {
    await s.close();
  }
});

test("a body over 1 MiB is invalid_argument, and the server stays up", async () => {
  const s = await serve(new MemorySessionStore());
  try {
    const big = await s.rpc(JSON.stringify({ op: "listRuns", args: { sessionId: "x".repeat(1 << 20) } }));
    assert.equal((big.json.error as { kind: string }).kind, "invalid_argument");
    assert.deepEqual((await s.rpc(JSON.stringify({ op: "listRuns", args: { sessionId: "s" } }))).json, { ok: [] });
  } finally {
    await s.close();
  }
});

test("requests are served concurrently: one waits in the store until another arrives", async () => {
  // listRuns("a") resolves only once listRuns("b") has reached the store. An
  // adapter that served one request at a time would never answer the first.
  let arrivedB: () => void = () => {};
  const b = new Promise<void>((ok) => (arrivedB = ok));
  const store = new MemorySessionStore();
  const gated: SessionStateStore = Object.assign(Object.create(store) as SessionStateStore, {
    async listRuns(sessionId: string) {
      if (sessionId === "b") arrivedB();
      else await b;
      return [];
    },
  });
  const s = await serve(gated);
  try {
    const first = s.rpc(JSON.stringify({ op: "listRuns", args: { sessionId: "a" } }));
    await new Promise((ok) => setTimeout(ok, 50));
    const second = s.rpc(JSON.stringify({ op: "listRuns", args: { sessionId: "b" } }));
    const answers = await Promise.all([first, second]);
    assert.deepEqual(answers.map((a) => a.json), [{ ok: [] }, { ok: [] }]);
  } finally {
    await s.close();
  }
});
