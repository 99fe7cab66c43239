#!/usr/bin/env node
/**
 * Starts a `reqkey-store/1` adapter over one of this package's stores.
 *
 *   reqkey-ts-adapter [--store memory|postgres] [--port N] [--broken MODE]
 *
 * --store     memory (default) or postgres; postgres connects to
 *             $REQKEY_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test),
 *             creates its ts_reqkey_* tables if missing, and serves them.
 * --port      0 (default) picks a free port.
 * --broken    a deliberate defect, to watch certification fail:
 *             memory: no-key-rule | racy; postgres: no-key-rule | no-lock.
 *
 * It prints `listening on http://127.0.0.1:PORT` once it accepts requests,
 * and stops on SIGTERM or SIGINT. Exit 2 on a bad argument or when the
 * store cannot be opened.
 */
import { parseArgs } from "node:util";
import { createAdapterServer, listen } from "./server.js";
import { MEMORY_DEFECTS, type MemoryDefect, MemorySessionStore } from "./stores/memory.js";
import { DEFAULT_POSTGRES_URL, POSTGRES_DEFECTS, type PostgresDefect, PostgresSessionStore } from "./stores/postgres.js";
import type { SessionStateStore } from "./types.js";

const USAGE = "usage: reqkey-ts-adapter [--store memory|postgres] [--port N] [--broken MODE]";

function fail(message: string): never {
  console.error(`reqkey-ts-adapter: ${message}`);
  process.exit(2);
}

/** Strips a password from a connection string before it is printed. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return "(unparsable connection string)";
  }
}

async function main(): Promise<void> {
  let values;
  try {
    ({ values } = parseArgs({
      options: {
        store: { type: "string", default: "memory" },
        port: { type: "string", default: "0" },
        broken: { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (e) {
    fail(`${e instanceof Error ? e.message : String(e)}\n${USAGE}`);
  }
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) fail(`--port must be 0..65535, not ${values.port}`);

  let store: SessionStateStore;
  let close = async (): Promise<void> => {};
  let name: string;
  // PostgreSQL keeps what it committed across a restart; memory does not.
  let durable = false;
  switch (values.store) {
    case "memory": {
      const broken = values.broken;
      if (broken !== undefined && !(MEMORY_DEFECTS as readonly string[]).includes(broken)) {
        fail(`--broken for the memory store is one of ${MEMORY_DEFECTS.join(", ")}, not ${broken}`);
      }
      store = new MemorySessionStore(broken as MemoryDefect | undefined);
      name = "reqkey-ts-memory-store";
      break;
    }
    case "postgres": {
      const broken = values.broken;
      if (broken !== undefined && !(POSTGRES_DEFECTS as readonly string[]).includes(broken)) {
        fail(`--broken for the postgres store is one of ${POSTGRES_DEFECTS.join(", ")}, not ${broken}`);
      }
      const url = process.env.REQKEY_POSTGRES_URL || DEFAULT_POSTGRES_URL;
      const pgStore = new PostgresSessionStore(broken === undefined ? { connectionString: url } : { connectionString: url, broken: broken as PostgresDefect });
      try {
        await pgStore.migrate();
      } catch (e) {
        await pgStore.close().catch(() => {});
        fail(`cannot open PostgreSQL at ${redact(url)}: ${e instanceof Error ? e.message : String(e)}`);
      }
      store = pgStore;
      close = () => pgStore.close();
      name = "reqkey-ts-postgres-store";
      durable = true;
      break;
    }
    default:
      fail(`--store is memory or postgres, not ${values.store}`);
  }
  if (values.broken !== undefined) name += ` (broken: ${values.broken})`;

  const server = createAdapterServer(store, {
    name,
    version: "0.1.0",
    durable,
    onInternalError: (message) => console.error(`internal error answered: ${message}`),
  });
  let bound: number;
  try {
    bound = await listen(server, port);
  } catch (e) {
    await close();
    fail(`cannot listen on 127.0.0.1:${port}: ${e instanceof Error ? e.message : String(e)}`);
  }
  console.log(`listening on http://127.0.0.1:${bound}`);
  const stop = () => {
    server.close(() => {
      close().finally(() => process.exit(0));
    });
    server.closeAllConnections();
  };
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
}

main().catch((e: unknown) => fail(e instanceof Error ? (e.stack ?? e.message) : String(e)));
