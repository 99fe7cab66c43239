"""reqkey-idem/1 app around ichido (PyPI): its IchidoMiddleware (ASGI) over Redis in front of our five routes."""

from __future__ import annotations

import redis.asyncio as aioredis
from ichido import IchidoConfig, IchidoMiddleware
from ichido.storage import RedisIdempotencyStore

import reqkey_idem_asgi
import reqkey_idem_common as c

NAME = "ichido"
DEFAULT_TTL_S = 86400  # IchidoConfig.ttl_seconds, "24 hours matches Stripe's default"


def main() -> None:
    # Its one store is RedisIdempotencyStore.
    opts = c.parse_options(NAME, ["redis"], expiry=True)
    ttl_s = DEFAULT_TTL_S if opts.expiry_ms is None else c.whole_seconds(opts.expiry_ms)
    store = RedisIdempotencyStore(aioredis.from_url(opts.redis_url), prefix=f"{opts.key_prefix}:ichido:", ttl=ttl_s)
    config = IchidoConfig(ttl_seconds=ttl_s, key_prefix=f"{opts.key_prefix}:ichido:")
    profile = {
        "keyRequired": False,  # "No key provided — pass through without idempotency enforcement."
        "keySyntax": "any",
        "invalidKeyStatus": None,  # an empty value is no key; any other value is a key
        "fingerprint": "json",  # canonicalize_body: JSON re-serialised with sorted keys; method and path hashed in
        "mismatchStatus": 422,
        "concurrent": "conflict",  # status "processing": 409
        "concurrentStatus": 409,
        "errors": "stored",  # "We cache all responses, not just 2xx"; an exception deletes the key
        "scope": [],  # the Redis key is prefix + key alone (method and path are in the fingerprint)
        "expiryMs": ttl_s * 1000,
        "lockMs": ttl_s * 1000,  # the "processing" record is SET NX EX ttl
        "replayHeader": None,  # it sends x-ichido-status on every answer (executed / replayed): no header marks a replay by its presence
        "durable": True,
    }
    effects = c.Effects(opts.effects_file)

    def wrap(app):
        return IchidoMiddleware(app, store=store, config=config)

    reqkey_idem_asgi.serve(opts.port, effects, c.health(NAME, opts.storage, profile), wrap)


if __name__ == "__main__":
    main()
