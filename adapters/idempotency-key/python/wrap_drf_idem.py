"""reqkey-idem/1 app around drf-idem (PyPI): its IdempotencyMiddleware (Django) in front of our five routes.

A Django project in one file, as for django-idempotency-key: settings in
code, the routes and Django's threaded WSGI server (a listen queue deep
enough for a burst) from `reqkey_idem_django.py`.
"""

from __future__ import annotations

import reqkey_idem_common as c
import reqkey_idem_django as dj

NAME = "drf-idem"
MAX_TTL_S = 60  # "Seconds to remember a request. Capped at 60."
OPTS = c.parse_options(NAME, ["memory", "redis"], expiry=True)
EFFECTS = c.Effects(OPTS.effects_file)
TTL_S = MAX_TTL_S if OPTS.expiry_ms is None else min(c.whole_seconds(OPTS.expiry_ms), MAX_TTL_S)

if OPTS.storage == "redis":
    CACHE = {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": OPTS.redis_url,
        "KEY_PREFIX": f"{OPTS.key_prefix}:drfidem",
    }
else:
    CACHE = {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "drf-idem"}

# What the library does as configured here, per its README and code
# (adapters/idempotency-key/README.md cites each). Where no declared value
# matches it (concurrent), the draft's default is declared and the judge says.
PROFILE = {
    "keyRequired": False,  # no header: get_response(request) untouched
    "keySyntax": "any",
    "invalidKeyStatus": 400,  # "invalid idempotency key": not 1-128 of [A-Za-z0-9-_./]
    "fingerprint": "none",  # only method, path and the key are hashed
    "mismatchStatus": None,
    "concurrent": "conflict",  # draft default: it keeps no in-flight state
    "concurrentStatus": 409,
    "errors": "stored",  # every status is stored by cache.add
    "scope": ["method", "path"],  # _make_key(method, path, request_id)
    "expiryMs": TTL_S * 1000,
    "lockMs": None,
    "replayHeader": None,
    "durable": OPTS.storage == "redis",
}

dj.configure(
    __name__,
    ["drf_idem.middleware.IdempotencyMiddleware"],
    {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}, "drf_idem": CACHE},
    # The contract's header instead of its default X-Request-ID.
    DRF_IDEM={"HEADER": "HTTP_IDEMPOTENCY_KEY", "TTL": TTL_S, "METHODS": ["POST", "PUT", "PATCH"]},
)


# GET is not among METHODS: the control routes pass the middleware untouched.
urlpatterns = dj.routes(NAME, OPTS.storage, EFFECTS, PROFILE)


def main() -> None:
    dj.serve(NAME, OPTS)


if __name__ == "__main__":
    main()
