// reqkey-idem/1 app around @node-idempotency/nestjs: a NestJS app whose order routes carry its @Idempotent() interceptor.
//
// Plain JavaScript, so the decorators are applied with Reflect.decorate
// instead of the `@` syntax; what they do is the same.
'use strict';

require('reflect-metadata');
const { Module, Controller, Get, Post, Put, HttpCode, HttpException, Req, Res } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { NodeIdempotencyModule, Idempotent } = require('@node-idempotency/nestjs');
const c = require('./common');

const LIB = '@node-idempotency/nestjs';
const DEFAULT_TTL_MS = 24 * 60 * 60 * 1000; // core's IDEMPOTENCY_CACHE_TTL_MS
const opts = c.parseOptions(process.argv.slice(2), { storages: ['memory', 'redis'], expiry: true });
const ttlMs = opts.expiryMs === null ? DEFAULT_TTL_MS : opts.expiryMs;

// What the library does as configured here, per its README and code
// (adapters/idempotency-key/README.md cites each).
const profile = {
  keyRequired: false, // enforceIdempotency defaults to false
  keySyntax: 'any',
  invalidKeyStatus: 400, // a key over keyMaxLength (256) is IDEMPOTENCY_KEY_LEN_EXEEDED -> 400
  fingerprint: 'json', // a hash of JSON.stringify(parsed body)
  mismatchStatus: 422,
  concurrent: 'conflict',
  concurrentStatus: 409, // REQUEST_IN_PROGRESS -> 409 with Retry-After
  errors: 'stored', // a thrown HttpException is stored and rethrown to a retry
  scope: ['method', 'path'], // cache key `prefix:METHOD:url:key`
  expiryMs: ttlMs, // cacheTTLMS
  lockMs: ttlMs, // the IN_PROGRESS record carries the same TTL
  replayHeader: 'idempotent-replayed',
  durable: opts.storage === 'redis',
};

const effects = new c.Effects(opts.effectsFile);

function decorate(cls, method, decorators) {
  const desc = Object.getOwnPropertyDescriptor(cls.prototype, method);
  Object.defineProperty(cls.prototype, method, Reflect.decorate(decorators, cls.prototype, method, desc) || desc);
}
function params(cls, method, decorators) {
  decorators.forEach((d, i) => d(cls.prototype, method, i));
}

// Control routes: a controller without the interceptor.
class ControlController {
  health() { return c.health(LIB, c.installedVersion('@node-idempotency/nestjs'), opts.storage, profile); }
  effects() { return effects.list(); }
}
decorate(ControlController, 'health', [Get('health')]);
decorate(ControlController, 'effects', [Get('effects')]);
Reflect.decorate([Controller('.reqkey')], ControlController);

async function run(route, req, res) {
  const caller = c.callerOf(req.headers);
  const kind = c.kindOf(route, req.body === undefined ? null : req.body);
  await c.sleep(c.sleepMs(kind, req.body));
  const order = effects.record({ method: req.method, path: req.path, caller, key: c.keyOf(req.headers), rawBody: req.rawBody });
  res.set('X-Reqkey-Order', String(order));
  if (kind === 'refused') {
    throw new HttpException({ error: c.REFUSED_BODY_ERROR, order, caller }, c.REFUSED_BODY_STATUS);
  }
  if (kind === 'fail') {
    throw new HttpException({ error: 'failed after effect', order, caller }, 500);
  }
  return { order, caller, echo: req.body === undefined ? null : req.body };
}

// The order routes: every handler @Idempotent(), as the README's second example.
class OrdersController {
  create(req, res) { return run('ok', req, res); }
  fail(req, res) { return run('fail', req, res); }
  slow(req, res) { return run('slow', req, res); }
  replace(req, res) { return run('ok', req, res); }
  pay(req, res) { return run('ok', req, res); }
}
for (const [m, route] of [['create', Post('orders')], ['fail', Post('orders/fail')], ['slow', Post('orders/slow')], ['replace', Put('orders')], ['pay', Post('payments')]]) {
  params(OrdersController, m, [Req(), Res({ passthrough: true })]);
  decorate(OrdersController, m, [Idempotent(), route, HttpCode(201)]);
}
Reflect.decorate([Controller()], OrdersController);

const storage = opts.storage === 'redis'
  ? { adapter: 'redis', options: { url: opts.redisUrl } }
  : { adapter: 'memory' };
class AppModule {}
Reflect.decorate([Module({
  imports: [NodeIdempotencyModule.forRootAsync({ storage, cacheTTLMS: ttlMs, cacheKeyPrefix: opts.keyPrefix })],
  controllers: [ControlController, OrdersController],
})], AppModule);

async function main() {
  // JSON of every type at the top level reaches the handler (strict: false), which
  // refuses what is not an object itself (reqkey-idem/1): Nest's own parser would
  // answer 400 before the interceptor sees the request.
  const app = await NestFactory.create(AppModule, { rawBody: true, bodyParser: false, logger: ['error', 'warn'] });
  app.useBodyParser('json', { strict: false, limit: '1mb' });
  app.getHttpAdapter().getInstance().disable('x-powered-by');
  await app.listen(opts.port, '127.0.0.1');
  process.stdout.write(`${LIB} on 127.0.0.1:${opts.port} (${opts.storage})\n`);
}
main().catch((e) => { process.stderr.write(`${LIB}: ${e && e.message}\n`); process.exit(1); });
