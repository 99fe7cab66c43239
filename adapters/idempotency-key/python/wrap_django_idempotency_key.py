"""reqkey-idem/1 app around django-idempotency-key (PyPI, yoyowallet): its IdempotencyKeyMiddleware in front of our five routes.

A Django project in one file: settings configured in code, the routes and
Django's threaded WSGI server from `reqkey_idem_django.py` (shared with
drf-idem).
"""

from __future__ import annotations

import sys

import reqkey_idem_common as c
import reqkey_idem_django as dj

NAME = "django-idempotency-key"
DJANGO_DEFAULT_CACHE_TIMEOUT_S = 300  # Django's CACHES TIMEOUT default
OPTS = c.parse_options(NAME, ["memory", "redis"], expiry=True)
EFFECTS = c.Effects(OPTS.effects_file)

if OPTS.storage == "redis":
    _timeout_s = DJANGO_DEFAULT_CACHE_TIMEOUT_S if OPTS.expiry_ms is None else c.whole_seconds(OPTS.expiry_ms)
    EXPIRY_MS = _timeout_s * 1000
    STORAGE = {"CLASS": "idempotency_key.storage.CacheKeyStorage", "CACHE_NAME": "default"}
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": OPTS.redis_url,
            "KEY_PREFIX": f"{OPTS.key_prefix}:dik",
            "TIMEOUT": _timeout_s,
        }
    }
else:
    if OPTS.expiry_ms is not None:
        print(f"{NAME}: --expiry-ms: the memory storage (MemoryKeyStorage) never expires; use --storage redis", file=sys.stderr)
        sys.exit(2)
    EXPIRY_MS = None
    STORAGE = {"CLASS": "idempotency_key.storage.MemoryKeyStorage"}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# What the library does as configured here, per its README and code
# (adapters/idempotency-key/README.md cites each). Where no declared value
# matches it (fingerprint, concurrent), the draft's default is declared and
# the judge says.
PROFILE = {
    "keyRequired": True,  # IdempotencyKeyMiddleware: "If this is missing then a 400 BAD REQUEST is returned"
    "keySyntax": "any",
    "invalidKeyStatus": None,  # any header value, the empty one included, is a key
    "fingerprint": "bytes",  # draft default; the library hashes the body INTO the key (another body = another key)
    "mismatchStatus": 422,
    "concurrent": "conflict",  # draft default; the library keeps no in-flight state
    "concurrentStatus": 409,
    "errors": "released",  # STORE_ON_STATUSES: 2xx only
    "scope": ["caller", "method", "path"],  # the key is hashed with path, method and the Authorization header
    "expiryMs": EXPIRY_MS,
    "lockMs": None,
    "replayHeader": None,
    "durable": OPTS.storage == "redis",
}

dj.configure(
    __name__,
    [f"{__name__}.CallerAuthMiddleware", "idempotency_key.middleware.IdempotencyKeyMiddleware"],
    CACHES,
    IDEMPOTENCY_KEY={
        # The replay keeps the first answer's status (the default, 409, would
        # overwrite it); see the README of this folder.
        "CONFLICT_STATUS_CODE": None,
        "STORAGE": STORAGE,
    },
)


class CallerAuthMiddleware:
    """Our "authentication": X-Reqkey-Caller becomes the Authorization header the library scopes keys by."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        caller = request.META.get("HTTP_X_REQKEY_CALLER")
        request.META.pop("HTTP_AUTHORIZATION", None)
        if caller:
            request.META["HTTP_AUTHORIZATION"] = f"Caller {caller}"
        return self.get_response(request)


# GET routes are exempt from the library ("safe" methods): the control routes.
urlpatterns = dj.routes(NAME, OPTS.storage, EFFECTS, PROFILE)


def main() -> None:
    dj.serve(NAME, OPTS)


if __name__ == "__main__":
    main()
