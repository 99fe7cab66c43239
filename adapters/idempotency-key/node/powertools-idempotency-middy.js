// reqkey-idem/1 app around @aws-lambda-powertools/idempotency's Middy middleware, with an HTTP front that plays API Gateway.
//
// Each route is its own Lambda handler (middy + makeHandlerIdempotent, as
// the library's README shows), with its own persistence layer and key prefix,
// as separate Lambda functions would have. The HTTP front turns a request
// into an API Gateway HTTP API (payload 2.0) event and the handler's result
// into the answer; a thrown error becomes what API Gateway answers for a
// failed invocation: 500 {"message": "Internal Server Error"}.
'use strict';

const http = require('http');
const crypto = require('crypto');
const middyModule = require('@middy/core');
const middy = typeof middyModule === 'function' ? middyModule : middyModule.default;
const { IdempotencyConfig } = require('@aws-lambda-powertools/idempotency');
const { makeHandlerIdempotent } = require('@aws-lambda-powertools/idempotency/middleware');
const { CachePersistenceLayer } = require('@aws-lambda-powertools/idempotency/cache');
const { createClient } = require('@redis/client');
const c = require('./common');

const LIB = '@aws-lambda-powertools/idempotency';
const DEFAULT_EXPIRY_S = 3600; // IdempotencyConfig expiresAfterSeconds default
const LAMBDA_TIMEOUT_MS = 30000; // the emulated function timeout: getRemainingTimeInMillis()
const MAX_BODY_BYTES = 1 << 20;
// The library's persistence layers are DynamoDB and a cache (Redis/Valkey): no in-memory one.
const opts = c.parseOptions(process.argv.slice(2), { storages: ['redis'], expiry: true, flags: ['--payload-validation'] });
// The README's Middy example has no payload validation; --payload-validation
// adds payloadValidationJmesPath: 'body' (the raw body string).
const validation = opts.flags.has('--payload-validation');
const expiryS = opts.expiryMs === null ? DEFAULT_EXPIRY_S : Math.max(1, Math.ceil(opts.expiryMs / 1000));

// What the library does as configured here, per its README and code
// (adapters/idempotency-key/README.md cites each).
const profile = {
  keyRequired: false, // throwOnNoIdempotencyKey: false (the README's example): no key, no idempotency
  keySyntax: 'any',
  invalidKeyStatus: null,
  fingerprint: validation ? 'bytes' : 'none', // payloadValidationJmesPath 'body' (the raw body string), or none
  mismatchStatus: validation ? 422 : null, // draft default: IdempotencyValidationError is thrown (500 through API Gateway)
  concurrent: 'conflict',
  concurrentStatus: 409, // draft default: IdempotencyAlreadyInProgressError is thrown (500 through API Gateway)
  errors: 'stored', // a returned 5xx response is a successful invocation: stored (a thrown error is released)
  scope: ['method', 'path'], // one function, one key prefix, per route
  expiryMs: expiryS * 1000, // expiresAfterSeconds
  lockMs: Math.min(expiryS * 1000, LAMBDA_TIMEOUT_MS), // in progress until the invocation's remaining time, or the record's expiry if sooner
  replayHeader: null,
  durable: true,
};

const effects = new c.Effects(opts.effectsFile);
const redis = createClient({ url: opts.redisUrl });
redis.on('error', (e) => process.stderr.write(`${LIB}: redis: ${e && e.message}\n`));

function route(name, kind) {
  const base = async (event) => {
    const raw = Buffer.from(event.body || '', 'utf8');
    const body = c.parseBody(raw);
    const caller = c.callerOf(event.headers);
    const k = c.kindOf(kind, body);
    await c.sleep(c.sleepMs(k, body));
    const order = effects.record({ method: event.requestContext.http.method, path: event.rawPath, caller, key: c.keyOf(event.headers), rawBody: raw });
    const headers = { 'content-type': 'application/json', 'x-reqkey-order': String(order) };
    if (k === 'refused') return { statusCode: c.REFUSED_BODY_STATUS, headers, body: JSON.stringify({ error: c.REFUSED_BODY_ERROR, order, caller }) };
    if (k === 'fail') return { statusCode: 500, headers, body: JSON.stringify({ error: 'failed after effect', order, caller }) };
    return { statusCode: 201, headers, body: JSON.stringify({ order, caller, echo: body }) };
  };
  const persistenceStore = new CachePersistenceLayer({ client: redis });
  const config = new IdempotencyConfig({
    eventKeyJmesPath: 'headers."idempotency-key"',
    payloadValidationJmesPath: validation ? 'body' : undefined,
    expiresAfterSeconds: expiryS,
    throwOnNoIdempotencyKey: false,
  });
  return { name, handler: middy(base).use(makeHandlerIdempotent({ persistenceStore, config, keyPrefix: `${opts.keyPrefix}:${name}` })) };
}

const routes = {
  'POST /orders': route('orders-post', 'ok'),
  'PUT /orders': route('orders-put', 'ok'),
  'POST /orders/fail': route('orders-fail', 'fail'),
  'POST /orders/slow': route('orders-slow', 'slow'),
  'POST /payments': route('payments-post', 'ok'),
};

function send(res, status, doc, headers = {}) {
  const raw = typeof doc === 'string' ? doc : JSON.stringify(doc);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(raw), ...headers });
  res.end(raw);
}

const server = http.createServer((req, res) => {
  const url = new URL(req.url, 'http://127.0.0.1');
  if (req.method === 'GET' && url.pathname === '/.reqkey/health') return send(res, 200, c.health(LIB, c.installedVersion(LIB), opts.storage, profile));
  if (req.method === 'GET' && url.pathname === '/.reqkey/effects') return send(res, 200, effects.list());
  const r = routes[`${req.method} ${url.pathname}`];
  if (!r) return send(res, 404, { error: 'no such route', caller: c.callerOf(req.headers) });
  const chunks = [];
  let size = 0;
  req.on('data', (d) => { size += d.length; if (size <= MAX_BODY_BYTES) chunks.push(d); });
  req.on('end', async () => {
    if (size > MAX_BODY_BYTES) return send(res, 413, { error: 'body too large', caller: c.callerOf(req.headers) });
    const started = Date.now();
    const event = {
      version: '2.0', routeKey: `${req.method} ${url.pathname}`, rawPath: url.pathname, rawQueryString: url.search.slice(1),
      headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(',') : v])),
      requestContext: { http: { method: req.method, path: url.pathname }, requestId: crypto.randomUUID() },
      body: Buffer.concat(chunks).toString('utf8'), isBase64Encoded: false,
    };
    const context = { functionName: r.name, awsRequestId: event.requestContext.requestId, getRemainingTimeInMillis: () => Math.max(0, LAMBDA_TIMEOUT_MS - (Date.now() - started)) };
    try {
      const out = await r.handler(event, context);
      send(res, out.statusCode, out.body || '', out.headers || {});
    } catch (e) {
      // What API Gateway answers for a failed invocation; the error type as Lambda reports it.
      send(res, 500, { message: 'Internal Server Error', errorType: (e && e.name) || 'Error', caller: c.callerOf(req.headers) });
    }
  });
});

redis.connect().then(() => server.listen(opts.port, '127.0.0.1', () => process.stdout.write(`${LIB} on 127.0.0.1:${opts.port} (${opts.storage})\n`)))
  .catch((e) => { process.stderr.write(`${LIB}: ${e && e.message}\n`); process.exit(1); });
