"""reqkey-idem/1 app around fastidempotent (PyPI): its IdempotencyMiddleware (app-wide) in front of our five routes."""

from __future__ import annotations

from fastidempotent import IdempotencyMiddleware, MemoryBackend, RedisBackend

import reqkey_idem_asgi
import reqkey_idem_common as c

NAME = "fastidempotent"
DEFAULT_TTL_S = 3600  # IdempotencyConfig.ttl
LOCK_TIMEOUT_S = 30  # IdempotencyConfig.lock_timeout


def main() -> None:
    opts = c.parse_options(NAME, ["memory", "redis"], expiry=True)
    ttl_s = DEFAULT_TTL_S if opts.expiry_ms is None else c.whole_seconds(opts.expiry_ms)
    if opts.storage == "redis":
        backend = RedisBackend(url=opts.redis_url, key_prefix=f"{opts.key_prefix}:fi:", ttl=ttl_s)
    else:
        backend = MemoryBackend(ttl=ttl_s)
    # What the library does as configured here, per its README and code
    # (adapters/idempotency-key/README.md cites each).
    profile = {
        "keyRequired": True,  # optional=False: "{header} header is required", 400
        "keySyntax": "any",
        "invalidKeyStatus": 400,  # an empty value is a missing key (400); over key_max_length (256): 400
        "fingerprint": "bytes",  # SHA-256 of method, path and the body bytes
        "mismatchStatus": 422,
        "concurrent": "conflict",  # PENDING record or a lock held: 409
        "concurrentStatus": 409,
        "errors": "stored",  # every answer is cached; only an exception releases the lock
        "scope": ["method", "path"],  # scoped_key = f"{method}:{path}:{key}"
        "expiryMs": ttl_s * 1000,  # ttl (whole seconds)
        "lockMs": LOCK_TIMEOUT_S * 1000,  # acquire_lock(key, lock_timeout): a lock lapses after 30 s
        "replayHeader": "x-idempotent-replayed",  # replay_header default
        "durable": opts.storage == "redis",
    }
    effects = c.Effects(opts.effects_file)

    def wrap(app):
        app.add_middleware(IdempotencyMiddleware, backend=backend, ttl=ttl_s, methods=["POST", "PUT", "PATCH"])
        return app

    async def startup(_app) -> None:
        if opts.storage == "redis":
            await backend.init()  # RedisBackend: "Call init() first"

    reqkey_idem_asgi.serve(opts.port, effects, c.health(NAME, opts.storage, profile), wrap, startup=startup)


if __name__ == "__main__":
    main()
