/**
 * The `reqkey-store/1` adapter over HTTP/1.1, on Node's own `http` module.
 *
 *   GET  /health -> 200 {"name", "version", "protocol": "reqkey-store/1"}
 *   POST /rpc    -> 200 {"ok": ...} | {"error": ...}
 *
 * Every /rpc answer is 200, even for a body that is not JSON (that is an
 * `invalid_argument`): SPEC 6 calls any other status a broken adapter.
 * Bodies are parsed and answers written by json.ts, so every number in an
 * `input` goes back to the client exactly as it was written.
 * Requests are served concurrently: each handler awaits the store, so
 * eight racing commits reach the store at once and the store's own
 * atomicity (a transaction, a lock) is what the race scenarios judge.
 */
import { type IncomingMessage, type Server, type ServerResponse, createServer } from "node:http";
import type { ErrorClassifier } from "./errors.js";
import { parseJson, stringifyJson } from "./json.js";
import { dispatch } from "./protocol.js";
import type { SessionStateStore } from "./types.js";

export const PROTOCOL = "reqkey-store/1";
export const MAX_BODY_BYTES = 1 << 20;

export interface AdapterOptions {
  /** `name` of `/health`. */
  name?: string;
  /** `version` of `/health`. */
  version?: string;
  /**
   * `durable` of `/health` (SPEC 6 `[[wire.store.durable]]`): what the store
   * answered as written survives a restart of the adapter. Left out when
   * not given (not promised).
   */
  durable?: boolean;
  /** Maps the store's own error types; see errors.ts. */
  classifyError?: ErrorClassifier;
  /** Called with every error answer of kind `internal` (for logging). */
  onInternalError?: (message: string) => void;
}

function send(res: ServerResponse, code: number, body: unknown): void {
  const text = stringifyJson(body);
  res.writeHead(code, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** Reads the body, at most `MAX_BODY_BYTES`; `undefined` if it is larger. */
function readBody(req: IncomingMessage): Promise<Buffer | undefined> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let tooLarge = false;
    req.on("data", (chunk: Buffer) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) tooLarge = true;
      else chunks.push(chunk);
    });
    req.on("end", () => resolve(tooLarge ? undefined : Buffer.concat(chunks)));
    req.on("error", reject);
  });
}

/**
 * Why `body` is not JSON: `JSON.parse`'s own words when it refuses the text
 * too (so the messages are the ones Node gives), else the lossless parser's
 * (nesting deeper than it allows).
 */
function notJson(body: Buffer, e: unknown): string {
  try {
    JSON.parse(body.toString("utf8"));
  } catch (native) {
    return native instanceof Error ? native.message : String(native);
  }
  return e instanceof Error ? e.message : String(e);
}

async function handleRpc(store: SessionStateStore, opts: AdapterOptions, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const body = await readBody(req);
  if (body === undefined) {
    return send(res, 200, { error: { kind: "invalid_argument", message: `the body is over ${MAX_BODY_BYTES} bytes` } });
  }
  let request: unknown;
  try {
    request = parseJson(body.toString("utf8"));
  } catch (e) {
    return send(res, 200, { error: { kind: "invalid_argument", message: `the body is not JSON: ${notJson(body, e)}` } });
  }
  const answer = await dispatch(store, request, opts.classifyError);
  if ("error" in answer && answer.error.kind === "internal") opts.onInternalError?.(answer.error.message);
  send(res, 200, answer);
}

/** An HTTP server serving `store` as `reqkey-store/1`. Call `listen` on it. */
export function createAdapterServer(store: SessionStateStore, opts: AdapterOptions = {}): Server {
  const health = {
    name: opts.name ?? "reqkey-store-adapter",
    version: opts.version ?? "0.1.0",
    protocol: PROTOCOL,
    ...(opts.durable === undefined ? {} : { durable: opts.durable }),
  };
  return createServer((req, res) => {
    if (req.method === "GET" && req.url === "/health") return send(res, 200, health);
    if (req.url !== "/rpc") return send(res, 404, { error: "not found: GET /health, POST /rpc" });
    if (req.method !== "POST") return send(res, 405, { error: "POST /rpc" });
    handleRpc(store, opts, req, res).catch((e: unknown) => {
      // Only a failed read of the request body gets here (dispatch never throws).
      if (!res.headersSent) send(res, 200, { error: { kind: "internal", message: `reading the request: ${String(e)}` } });
      else res.destroy();
    });
  });
}

/** Listens on 127.0.0.1:`port` (0: a free port) and resolves to the bound port. */
export function listen(server: Server, port: number, host = "127.0.0.1"): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(port, host, () => {
      server.off("error", reject);
      const addr = server.address();
      resolve(typeof addr === "object" && addr !== null ? addr.port : port);
    });
  });
}
