/**
 * reqkey-store-adapter: serve any `SessionStateStore`-shaped object as a
 * `reqkey-store/1` adapter (SPEC 6), so `reqkey certify` can judge it.
 *
 *   import { createAdapterServer, listen } from "reqkey-store-adapter";
 *   const port = await listen(createAdapterServer(myStore), 7001);
 */
export * from "./types.js";
export * from "./errors.js";
export { canonicalJson, canonicalNumber, requestDigest, sha256Hex, startDigest } from "./canonical.js";
export { JsonNumber, cloneJson, parseJson, stringifyJson } from "./json.js";
export { BadRequest, dispatch, parseRequest, parseStartRun, wireRun, type WireAnswer } from "./protocol.js";
export { createAdapterServer, listen, PROTOCOL, type AdapterOptions } from "./server.js";
export { MemorySessionStore, type MemoryDefect } from "./stores/memory.js";
export { PostgresSessionStore, DEFAULT_POSTGRES_URL, type PostgresStoreOptions, type PostgresDefect } from "./stores/postgres.js";
