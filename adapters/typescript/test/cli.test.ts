// The command line: bad arguments and an unreachable database exit 2 with
// a message (and never print a password); a good start prints the port.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

const cli = fileURLToPath(new URL("../src/cli.js", import.meta.url));
const run = (args: string[], env: Record<string, string> = {}) =>
  spawnSync(process.execPath, [cli, ...args], { encoding: "utf8", timeout: 20_000, env: { ...process.env, ...env } });

test("bad arguments exit 2, saying what is wrong", () => {
  const cases: [string[], RegExp][] = [
    [["--store", "mongo"], /--store is memory or postgres, not mongo/],
    [["--store", "memory", "--broken", "no-lock"], /--broken for the memory store is one of no-key-rule, racy/],
    [["--store", "postgres", "--broken", "racy"], /--broken for the postgres store is one of no-key-rule, no-lock/],
    [["--port", "70000"], /--port must be 0\.\.65535/],
    [["--frobnicate"], /Unknown option/],
  ];
  for (const [args, message] of cases) {
    const r = run(args);
    assert.equal(r.status, 2, `${args.join(" ")}: ${r.stderr}`);
    assert.match(r.stderr, message);
  }
});

test("an unreachable PostgreSQL exits 2 without printing the password", () => {
  const r = run(["--store", "postgres"], { REQKEY_POSTGRES_URL: "postgres://u:s3cret@127.0.0.1:1/db" });
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /cannot open PostgreSQL at postgres:\/\/u:\*\*\*@127\.0\.0\.1:1\/db/);
  assert.doesNotMatch(r.stderr + r.stdout, /s3cret/);
});

test("the memory adapter prints the port it listens on and answers /health there", async () => {
  const child = spawn(process.execPath, [cli, "--store", "memory"], { stdio: ["ignore", "pipe", "pipe"] });
  try {
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no 'listening on' line within 10 s")), 10_000);
      child.stdout.setEncoding("utf8").on("data", (text: string) => {
        const m = /^listening on http:\/\/127\.0\.0\.1:(\d+)$/m.exec(text);
        if (m?.[1]) {
          clearTimeout(timer);
          resolve(Number(m[1]));
        }
      });
    });
    const health = await (await fetch(`http://127.0.0.1:${port}/health`, { signal: AbortSignal.timeout(5000) })).json();
    assert.deepEqual(health, { name: "reqkey-ts-memory-store", version: "0.1.0", protocol: "reqkey-store/1", durable: false });
  } finally {
    child.kill("SIGTERM");
  }
});
