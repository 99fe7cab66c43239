"""reqkey-idem/1 app around django-idempotency-key (PyPI, yoyowallet): its IdempotencyKeyMiddleware in front of our five routes.

A Django project in one file: settings configured in code, URLs here,
served by Django's own threaded WSGI server (`ThreadedWSGIServer`).
"""

from __future__ import annotations

import sys
import time

import django
from django.conf import settings
from django.http import HttpResponseNotAllowed, JsonResponse
from django.urls import path

import reqkey_idem_common as c

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

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="reqkey-idem-wrapper-not-a-secret",
    MIDDLEWARE=[
        f"{__name__}.CallerAuthMiddleware",
        "idempotency_key.middleware.IdempotencyKeyMiddleware",
    ],
    INSTALLED_APPS=[],
    CACHES=CACHES,
    IDEMPOTENCY_KEY={
        # The replay keeps the first answer's status (the default, 409, would
        # overwrite it); see the README of this folder.
        "CONFLICT_STATUS_CODE": None,
        "STORAGE": STORAGE,
    },
)
django.setup()


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


def run(kind: str, request) -> JsonResponse:
    raw = request.body
    body = c.parse_body(raw)
    caller = c.caller_of(request.META.get("HTTP_X_REQKEY_CALLER"))
    time.sleep(c.sleep_ms(kind, body) / 1000)
    order = EFFECTS.record(request.method, request.path, caller, request.META.get("HTTP_IDEMPOTENCY_KEY"), raw)
    if kind == "fail":
        resp = JsonResponse({"error": "failed after effect", "order": order, "caller": caller}, status=500)
    else:
        resp = JsonResponse({"order": order, "caller": caller, "echo": body}, status=201)
    resp["X-Reqkey-Order"] = str(order)
    return resp


def view(kind: str, methods: tuple[str, ...]):
    def handle(request):
        if request.method not in methods:
            return HttpResponseNotAllowed(methods)
        return run(kind, request)

    handle.__name__ = f"orders_{kind}"
    return handle


def health(request):
    return JsonResponse(c.health(NAME, OPTS.storage, PROFILE))


def effects(request):
    return JsonResponse(EFFECTS.listing())


# GET routes are exempt from the library ("safe" methods): the control routes.
urlpatterns = [
    path(".reqkey/health", health),
    path(".reqkey/effects", effects),
    path("orders", view("ok", ("POST", "PUT"))),
    path("orders/fail", view("fail", ("POST",))),
    path("orders/slow", view("slow", ("POST",))),
    path("payments", view("ok", ("POST",))),
]


def main() -> None:
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args):  # no access log
            pass


    httpd = ThreadedWSGIServer(("127.0.0.1", OPTS.port), QuietHandler)
    httpd.daemon_threads = True
    httpd.set_app(WSGIHandler())
    print(f"{NAME} on 127.0.0.1:{OPTS.port} ({OPTS.storage})", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
