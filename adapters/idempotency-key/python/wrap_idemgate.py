"""reqkey-idem/1 app around idemgate (PyPI): its @idempotent routes (IdempotencyRoute) over Redis, the caller as its namespace."""

from __future__ import annotations

from idemgate import IdempotencyRoute, idempotent
from idemgate.core import IdempotencyConfig
from idemgate.redis_store import RedisAcquirer
from redis.asyncio import Redis

import reqkey_idem_asgi
import reqkey_idem_common as c

NAME = "idemgate"
DEFAULT_TTL_S = 3600  # IdempotencyConfig.ttl_seconds


def caller_namespace(request) -> str:
    """Our "authentication": the verified caller ID the README asks `namespace=` to return."""
    return "caller:" + (request.headers.get("x-reqkey-caller") or "anonymous")


def main() -> None:
    # "IdemGate adds Redis-backed idempotency": its one store is RedisAcquirer.
    opts = c.parse_options(NAME, ["redis"], expiry=True)
    ttl_s = DEFAULT_TTL_S if opts.expiry_ms is None else c.whole_seconds(opts.expiry_ms)
    profile = {
        "keyRequired": True,  # MissingKeyError: 400 "An Idempotency-Key header is required."
        "keySyntax": "any",
        "invalidKeyStatus": 400,  # InvalidKeyError: 1-255 characters of visible ASCII (33-126), one header
        "fingerprint": "bytes",  # make_request_identity: method, path, query, content type and the body bytes
        "mismatchStatus": 409,  # KeyReuseError: 409 idempotency_key_reused
        "concurrent": "conflict",  # InProgressError: 409 idempotency_in_progress
        "concurrentStatus": 409,
        "errors": "released",  # "Non-2xx responses and handler exceptions are not cached as successes"
        "scope": ["caller", "method", "path"],  # RequestIdentity(method, path, namespace, key); the namespace is the caller
        "expiryMs": ttl_s * 1000,
        "lockMs": None,  # the processing lease (30 s) is renewed every 10 s while the endpoint runs
        "replayHeader": None,
        "durable": True,
    }
    effects = c.Effects(opts.effects_file)
    decorate = idempotent(config=IdempotencyConfig(ttl_seconds=ttl_s), namespace=caller_namespace)

    async def startup(app) -> None:
        app.state.idempotency_store = RedisAcquirer(
            Redis.from_url(opts.redis_url, decode_responses=False), key_prefix=f"{opts.key_prefix}:idemgate"
        )

    reqkey_idem_asgi.serve(
        opts.port,
        effects,
        c.health(NAME, opts.storage, profile),
        lambda app: app,
        decorate=decorate,
        route_class=IdempotencyRoute,
        startup=startup,
    )


if __name__ == "__main__":
    main()
