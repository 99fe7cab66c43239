"""reqkey-idem/1 app around asgi-idempotency-header (PyPI): its IdempotencyHeaderMiddleware in front of our five routes."""

from __future__ import annotations

from idempotency_header_middleware import IdempotencyHeaderMiddleware
from idempotency_header_middleware.backends import MemoryBackend, RedisBackend

import reqkey_idem_asgi
import reqkey_idem_common as c

NAME = "asgi-idempotency-header"
DEFAULT_EXPIRY_S = 60 * 60 * 24  # the backends' `expiry` default
# The README's default is ['POST', 'PATCH']; PUT is added so that the
# contract's PUT route is behind the layer (a documented option).
METHODS = ["POST", "PUT", "PATCH"]


def main() -> None:
    opts = c.parse_options(NAME, ["memory", "redis"], expiry=True)
    if opts.storage == "redis":
        # Redis EXPIRE takes whole seconds.
        expiry_s = DEFAULT_EXPIRY_S if opts.expiry_ms is None else c.whole_seconds(opts.expiry_ms)
        expiry_ms = expiry_s * 1000
    else:
        # The memory backend compares time.time() with a float: milliseconds hold.
        expiry_ms = DEFAULT_EXPIRY_S * 1000 if opts.expiry_ms is None else opts.expiry_ms
    # What the library does as configured here, per its README and code
    # (adapters/idempotency-key/README.md cites each).
    profile = {
        "keyRequired": False,  # "Responses are only cached when an idempotency-key HTTP header is present"
        "keySyntax": "any",
        "invalidKeyStatus": None,  # enforce_uuid4_formatting=False (422 when enabled)
        "fingerprint": "none",  # the payload is never compared
        "mismatchStatus": None,
        "concurrent": "conflict",
        "concurrentStatus": 409,  # "the middleware will return a 409"
        "errors": "stored",  # any JSON answer is stored, whatever its status
        "scope": [],  # one key space for every path, method and client
        "expiryMs": expiry_ms,
        "lockMs": None,  # the pending-key set has no expiry
        "replayHeader": "idempotent-replayed",
        "durable": opts.storage == "redis",
    }
    effects = c.Effects(opts.effects_file)
    if opts.storage == "redis":
        from redis.asyncio import from_url

        backend = RedisBackend(
            redis=from_url(opts.redis_url),
            keys_key=f"{opts.key_prefix}:aih:keys",
            response_key=f"{opts.key_prefix}:aih:responses:",
            expiry=expiry_ms // 1000,
        )
    else:
        backend = MemoryBackend(expiry=expiry_ms / 1000)

    def wrap(app):
        app.add_middleware(IdempotencyHeaderMiddleware, backend=backend, applicable_methods=METHODS)
        return app

    reqkey_idem_asgi.serve(opts.port, effects, c.health(NAME, opts.storage, profile), wrap)


if __name__ == "__main__":
    main()
