"""reqkey-idem/1 app around fastapi-idempotency-key (PyPI): its IdempotencyMiddleware in front of our five routes."""

from __future__ import annotations

import fastapi_idempotency_key as lib

import reqkey_idem_asgi
import reqkey_idem_common as c

NAME = "fastapi-idempotency-key"
DEFAULT_TTL_S = 86400  # IdempotencyMiddleware(default_ttl=86400)


def main() -> None:
    opts = c.parse_options(NAME, ["memory", "redis"], expiry=True)
    ttl_s = DEFAULT_TTL_S if opts.expiry_ms is None else c.whole_seconds(opts.expiry_ms)
    # What the library does as configured here, per its README and code
    # (adapters/idempotency-key/README.md cites each).
    profile = {
        "keyRequired": False,  # required=False by default
        "keySyntax": "any",
        "invalidKeyStatus": None,  # a blank value counts as no key; anything else is a key
        "fingerprint": "bytes",  # SHA-256 over method, path, sorted query and the raw body
        "mismatchStatus": 422,  # on_mismatch_status
        "concurrent": "conflict",  # timeout=0.0: no wait
        "concurrentStatus": 409,  # on_conflict_status
        "errors": "released",  # 5xx are not in cache_statuses: the lock is released
        "scope": [],  # one key space; method and path are in the fingerprint, not the key
        "expiryMs": ttl_s * 1000,  # default_ttl, whole seconds
        "lockMs": ttl_s * 1000,  # the IN_PROGRESS record carries the same TTL
        "replayHeader": "idempotency-replayed",
        "durable": opts.storage == "redis",
    }
    effects = c.Effects(opts.effects_file)
    if opts.storage == "redis":
        backend = lib.RedisBackend(redis_url=opts.redis_url, prefix=f"{opts.key_prefix}:fik:")
    else:
        backend = lib.MemoryBackend()

    def wrap(app):
        app.add_middleware(lib.IdempotencyMiddleware, backend=backend, default_ttl=ttl_s)
        return app

    reqkey_idem_asgi.serve(opts.port, effects, c.health(NAME, opts.storage, profile), wrap)


if __name__ == "__main__":
    main()
