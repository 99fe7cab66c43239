// idem_app.mjs: the reqkey-idem/1 app (docs/idempotency-key.md) around the idempotency middleware you judge.
import http from "node:http";
import { createHash } from "node:crypto";

const PROFILE = { keyRequired: true, keySyntax: "sf-string", invalidKeyStatus: 400,
  fingerprint: "json", mismatchStatus: 422, concurrent: "conflict", concurrentStatus: 409,
  errors: "stored", scope: ["caller", "method", "path"], expiryMs: null, lockMs: null,
  replayHeader: null, durable: false };
const effects = new Map(); // JSON [method, path, caller, key, sha] -> count
let order = 0;

function send(res, status, body, headers = {}) {
  res.writeHead(status, { "content-type": "application/json", ...headers });
  res.end(JSON.stringify(body));
}

function effect(req) {
  order += 1;
  const sha = createHash("sha256").update(req.rawBody).digest("hex");
  const k = JSON.stringify([req.method, req.path, req.caller, req.headers["idempotency-key"] ?? null, sha]);
  effects.set(k, (effects.get(k) ?? 0) + 1);
  return order;
}

// The routes behind the middleware (Express-style handlers).
async function routes(req, res) {
  const route = `${req.method} ${req.path}`;
  const contract = ["POST /orders", "PUT /orders", "POST /payments", "POST /orders/slow", "POST /orders/fail"];
  if (!contract.includes(route)) return send(res, 404, { error: "no such route" });
  let echo = null;
  try { echo = JSON.parse(req.rawBody.toString("utf8")); } catch { /* not JSON */ }
  if (echo === null || typeof echo !== "object" || Array.isArray(echo)) {
    // The handler's own 4xx: it counts its run, then refuses the body.
    const n = effect(req);
    return send(res, 422, { error: "the body must be a JSON object", order: n, caller: req.caller }, { "x-reqkey-order": String(n) });
  }
  if (route === "POST /orders/slow") {
    await new Promise((r) => setTimeout(r, Math.min(Number(echo.sleepMs ?? 1000), 10000)));
  }
  if (["POST /orders", "PUT /orders", "POST /payments", "POST /orders/slow"].includes(route)) {
    const n = effect(req);
    return send(res, 201, { order: n, caller: req.caller, echo }, { "x-reqkey-order": String(n) });
  }
  const n = effect(req); // POST /orders/fail
  send(res, 500, { error: "failed after effect", order: n, caller: req.caller }, { "x-reqkey-order": String(n) });
}

// The middleware being judged goes here, (req, res, next) as in Express.
const layer = (req, res, next) => next();

const port = Number(process.argv[process.argv.indexOf("--port") + 1]) || 7091;
http.createServer((req, res) => {
  const chunks = [];
  req.on("data", (c) => chunks.push(c));
  req.on("end", () => {
    req.rawBody = Buffer.concat(chunks);
    req.path = new URL(req.url, "http://x").pathname;
    req.caller = req.headers["x-reqkey-caller"] ?? "";
    if (req.method === "GET" && req.path === "/.reqkey/health") {
      const implementation = { name: "none", version: "0", storage: "memory" };
      return send(res, 200, { protocol: "reqkey-idem/1", implementation, profile: PROFILE });
    }
    if (req.method === "GET" && req.path === "/.reqkey/effects") {
      const rows = [...effects].map(([k, count]) => {
        const [method, path, caller, key, bodySha256] = JSON.parse(k);
        return { method, path, caller, key, bodySha256, count };
      });
      return send(res, 200, { effects: rows });
    }
    layer(req, res, () => routes(req, res));
  });
}).listen(port, "127.0.0.1");
