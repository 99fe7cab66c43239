// reqkey-idem/1 app around express-idempotency (npm, VilledeMontreal): its middleware in front of our five routes.
'use strict';

const express = require('express');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');
const c = require('./common');

const LIB = 'express-idempotency';
// The library has an in-memory data adapter and a Mongo one (a separate
// package); no Redis adapter and no expiry setting.
const opts = c.parseOptions(process.argv.slice(2), { storages: ['memory'], expiry: false });

// What the library does with its defaults, per its README and code
// (adapters/idempotency-key/README.md cites each).
const profile = {
  keyRequired: false, // "The idempotency middleware will call the next function, whenever a idempotency key is detected or not"
  keySyntax: 'any', // the raw header value is the key
  invalidKeyStatus: null, // no validation; an empty value counts as no key
  fingerprint: 'json', // intent validator: deep-equal of the parsed body (and url, method, query)
  mismatchStatus: 417, // "Misuse of the idempotency key": EXPECTATION_FAILED
  concurrent: 'conflict',
  concurrentStatus: 409, // "A previous request is still in progress for this key."
  errors: 'released', // only 2xx responses are persisted; any other deletes the key
  scope: [], // one global key space: no per-client scoping
  expiryMs: null, // the in-memory adapter never forgets
  lockMs: null,
  replayHeader: null,
  durable: false,
};

const effects = new c.Effects(opts.effectsFile);
const app = express();
app.disable('x-powered-by');

// Control routes: mounted before the library, which never sees them.
app.get('/.reqkey/health', (req, res) => res.json(c.health(LIB, c.installedVersion(LIB), opts.storage, profile)));
app.get('/.reqkey/effects', (req, res) => res.json(effects.list()));

// JSON bodies, keeping the raw bytes for the oracle's bodySha256.
// strict: false: JSON of every type at the top level reaches the handler, which
// refuses what is not an object itself (reqkey-idem/1).
app.use(express.json({ type: () => true, strict: false, limit: '1mb', verify: (req, _res, buf) => { req.rawBody = Buffer.from(buf); } }));

// The library, as its README wires it.
const guarded = ['/orders', '/orders/fail', '/orders/slow', '/payments'];
app.post(guarded, idempotency());
app.put('/orders', idempotency());

function handler(kind) {
  return async (req, res) => {
    // The README's documented hit check: the middleware calls next() after a replay.
    if (getSharedIdempotencyService().isHit(req)) return;
    const caller = c.callerOf(req.headers);
    const k = c.kindOf(kind, req.body === undefined ? null : req.body);
    await c.sleep(c.sleepMs(k, req.body));
    const order = effects.record({ method: req.method, path: req.path, caller, key: c.keyOf(req.headers), rawBody: req.rawBody });
    res.set('X-Reqkey-Order', String(order));
    if (k === 'refused') {
      res.status(c.REFUSED_BODY_STATUS).json({ error: c.REFUSED_BODY_ERROR, order, caller });
    } else if (k === 'fail') {
      res.status(500).json({ error: 'failed after effect', order, caller });
    } else {
      res.status(201).json({ order, caller, echo: req.body === undefined ? null : req.body });
    }
  };
}
app.post('/orders', handler('ok'));
app.post('/orders/fail', handler('fail'));
app.post('/orders/slow', handler('slow'));
app.put('/orders', handler('ok'));
app.post('/payments', handler('ok'));

// Errors the library raises with next(err) (409, 417) and bad JSON: a JSON answer echoing the caller.
app.use((err, req, res, _next) => {
  const status = err.status || err.statusCode || (res.statusCode >= 400 ? res.statusCode : 500);
  if (res.headersSent) return;
  res.status(status).json({ error: String(err.message || err), caller: c.callerOf(req.headers) });
});

app.listen(opts.port, '127.0.0.1', () => process.stdout.write(`${LIB} on 127.0.0.1:${opts.port} (${opts.storage})\n`));
