// The reqkey-idem/1 app side shared by the Node wrappers: options, the effects oracle, the order counter, health.
//
// Everything here is ours and sits OUTSIDE the library under test: the
// effects oracle is recorded by the app's own handler (so it counts what
// really ran, whatever the library answered), and the control routes are
// mounted where the library never sees them.
'use strict';

const crypto = require('crypto');
const fs = require('fs');
const path = require('path');

const PROTOCOL = 'reqkey-idem/1';
const SLOW_DEFAULT_MS = 1000;
const SLEEP_MAX_MS = 120000;

/** A bad command line: exit 2 with the reason (never a stack trace). */
function usageError(message) {
  process.stderr.write(`${path.basename(process.argv[1])}: ${message}\n`);
  process.exit(2);
}

/**
 * Parses `--port P --storage memory|redis --redis-url URL --expiry-ms MS --effects-file F --key-prefix S`.
 * `storages` lists what the library has; `expiry` says whether it can set one;
 * `flags` are the wrapper's own valueless options (in `opts.flags`).
 */
function parseOptions(argv, { storages, expiry, flags = [] }) {
  const opts = { port: null, storage: storages[0], redisUrl: 'redis://127.0.0.1:6379', expiryMs: null, effectsFile: null, keyPrefix: 'reqkey-idem', flags: new Set() };
  const names = { '--port': 'port', '--storage': 'storage', '--redis-url': 'redisUrl', '--expiry-ms': 'expiryMs', '--effects-file': 'effectsFile', '--key-prefix': 'keyPrefix' };
  for (let i = 0; i < argv.length; i += 2) {
    if (flags.includes(argv[i])) { opts.flags.add(argv[i]); i -= 1; continue; }
    const field = names[argv[i]];
    if (!field) usageError(`unknown option ${JSON.stringify(argv[i])}`);
    if (i + 1 >= argv.length) usageError(`${argv[i]} needs a value`);
    opts[field] = argv[i + 1];
  }
  const port = Number(opts.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) usageError('--port P (1-65535) is required');
  opts.port = port;
  if (!storages.includes(opts.storage)) usageError(`--storage must be one of ${storages.join(', ')} (what this library has)`);
  if (opts.expiryMs !== null) {
    if (!expiry) usageError('--expiry-ms: this library has no expiry setting');
    const ms = Number(opts.expiryMs);
    if (!Number.isInteger(ms) || ms < 1) usageError('--expiry-ms must be a positive integer');
    opts.expiryMs = ms;
  }
  return opts;
}

/** The version of an installed package, read from its own package.json (never hard-coded). */
function installedVersion(pkg) {
  // Read from the module search path: some packages do not export ./package.json.
  for (const dir of require.resolve.paths(pkg) || []) {
    const file = path.join(dir, pkg, 'package.json');
    if (fs.existsSync(file)) return JSON.parse(fs.readFileSync(file, 'utf8')).version;
  }
  return 'unknown';
}

/**
 * The effects oracle and the global order counter. With `effectsFile` every
 * effect is appended (synchronously, before the answer is sent) and reloaded
 * at start, so the oracle survives a crash and restart of the app.
 */
class Effects {
  constructor(effectsFile) {
    this.file = effectsFile;
    this.entries = new Map();
    this.order = 0;
    if (this.file && fs.existsSync(this.file)) {
      for (const line of fs.readFileSync(this.file, 'utf8').split('\n')) {
        if (line.trim() === '') continue;
        let e;
        try { e = JSON.parse(line); } catch { continue; } // a line cut by a crash
        this.add(e, false);
      }
    }
  }

  add(e, persist) {
    const id = JSON.stringify([e.method, e.path, e.caller, e.key, e.bodySha256]);
    const entry = this.entries.get(id) || { method: e.method, path: e.path, caller: e.caller, key: e.key, bodySha256: e.bodySha256, count: 0 };
    entry.count += 1;
    this.entries.set(id, entry);
    this.order += 1;
    if (persist && this.file) fs.appendFileSync(this.file, JSON.stringify(e) + '\n');
    return this.order;
  }

  /** Runs the side effect: records it and returns the new order number. */
  record({ method, path: p, caller, key, rawBody }) {
    const bodySha256 = crypto.createHash('sha256').update(rawBody || Buffer.alloc(0)).digest('hex');
    return this.add({ method, path: p, caller, key, bodySha256 }, true);
  }

  list() {
    return { effects: [...this.entries.values()] };
  }
}

/** The caller named by `X-Reqkey-Caller`, or null. */
function callerOf(headers) {
  const c = headers['x-reqkey-caller'];
  return typeof c === 'string' && c !== '' ? c : null;
}

/** The raw Idempotency-Key header value, or null. */
function keyOf(headers) {
  const k = headers['idempotency-key'];
  return typeof k === 'string' ? k : null;
}

/** The request's JSON body, or null when it is empty or not JSON. */
function parseBody(raw) {
  if (!raw || raw.length === 0) return null;
  try { return JSON.parse(raw.toString('utf8')); } catch { return null; }
}

/**
 * The route's kind, or 'refused' for a body that is not a JSON object: the
 * handler's own 4xx (reqkey-idem/1), which counts its run like any other and
 * answers 422 with its order.
 */
function kindOf(kind, body) {
  return body !== null && typeof body === 'object' && !Array.isArray(body) ? kind : 'refused';
}
const REFUSED_BODY_STATUS = 422;
const REFUSED_BODY_ERROR = 'the body must be a JSON object';

/**
 * How long a handler sleeps before its side effect (reqkey-idem/1): `sleepMs`
 * from the body on `/orders/slow` (default 1000) and `/orders/fail` (default
 * 0), capped at 120000; the other routes do not sleep.
 */
function sleepMs(kind, body) {
  if (kind === 'slow') return slowMs(body);
  if (kind !== 'fail') return 0;
  const v = body && typeof body === 'object' ? body.sleepMs : undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) return 0;
  return Math.min(Math.floor(v), SLEEP_MAX_MS);
}

/** How long `/orders/slow` sleeps: `sleepMs` from the body, default 1000, capped at 120000. */
function slowMs(body) {
  const v = body && typeof body === 'object' ? body.sleepMs : undefined;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0) return SLOW_DEFAULT_MS;
  return Math.min(Math.floor(v), SLEEP_MAX_MS);
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** The `/.reqkey/health` document. */
function health(name, version, storage, profile) {
  return { protocol: PROTOCOL, implementation: { name, version, storage }, profile };
}

module.exports = { parseOptions, installedVersion, Effects, callerOf, keyOf, parseBody, kindOf, REFUSED_BODY_STATUS, REFUSED_BODY_ERROR, slowMs, sleepMs, sleep, health, usageError };
