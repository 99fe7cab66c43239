// @ts-check
/**
 * The `reqkey-store/1` adapter over HTTP/1.1, on Node's own `http` module.
 *
 *   GET  /health -> 200 {"name", "version", "protocol": "reqkey-store/1"}
 *   POST /rpc    -> 200 {"ok": ...} | {"error": ...}
 *
 * Every /rpc answer is 200, even for a body that is not JSON (that is an
 * `invalid_argument`): SPEC 6 calls any other status a broken adapter.
 * Requests are served concurrently by Node's event loop; each is handled
 * synchronously once its body has arrived, so a commit is atomic.
 *
 * Usage: node src/server.js [PORT]   (PORT 0 or absent: a free port)
 * It prints `listening on http://127.0.0.1:PORT` once it accepts requests.
 */
import { createServer } from "node:http";
import { MemoryStore } from "./store.js";
import { dispatch } from "./protocol.js";

const MAX_BODY_BYTES = 1 << 20;
const HEALTH = { name: "reqkey-example-typescript-store", version: "0.1.0", protocol: "reqkey-store/1" };

/**
 * @param {import("node:http").ServerResponse} res
 * @param {number} code
 * @param {unknown} body
 */
function send(res, code, body) {
  const text = JSON.stringify(body);
  res.writeHead(code, { "content-type": "application/json", "content-length": Buffer.byteLength(text) });
  res.end(text);
}

/** @param {MemoryStore} store */
export function makeServer(store = new MemoryStore()) {
  return createServer((req, res) => {
    if (req.method === "GET" && req.url === "/health") return send(res, 200, HEALTH);
    if (req.url !== "/rpc") return send(res, 404, { error: "not found" });
    if (req.method !== "POST") return send(res, 405, { error: "POST /rpc" });
    /** @type {Buffer[]} */
    const chunks = [];
    let size = 0;
    let tooLarge = false;
    req.on("data", (chunk) => {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) tooLarge = true;
      else chunks.push(chunk);
    });
    req.on("end", () => {
      if (tooLarge) {
        return send(res, 200, { error: { kind: "invalid_argument", message: `body over ${MAX_BODY_BYTES} bytes` } });
      }
      let request;
      try {
        request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
      } catch (e) {
        return send(res, 200, { error: { kind: "invalid_argument", message: `body is not JSON: ${e}` } });
      }
      send(res, 200, dispatch(store, request));
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const port = Number(process.argv[2] ?? process.env.PORT ?? 0);
  const server = makeServer();
  server.listen(port, "127.0.0.1", () => {
    const addr = server.address();
    const bound = typeof addr === "object" && addr ? addr.port : port;
    console.log(`listening on http://127.0.0.1:${bound}`);
  });
  const stop = () => server.close(() => process.exit(0));
  process.on("SIGTERM", stop);
  process.on("SIGINT", stop);
}
