"""reqkey-idem/1 app around drf-idem (PyPI): its IdempotencyMiddleware (Django) in front of our five routes.

A Django project in one file, as for django-idempotency-key: settings in
code, URLs here, served by Django's threaded WSGI server with a listen queue
deep enough for a burst.
"""

from __future__ import annotations

import time

import django
from django.conf import settings
from django.http import HttpResponseNotAllowed, JsonResponse
from django.urls import path

import reqkey_idem_common as c

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

settings.configure(
    DEBUG=False,
    ALLOWED_HOSTS=["127.0.0.1", "localhost"],
    ROOT_URLCONF=__name__,
    SECRET_KEY="reqkey-idem-wrapper-not-a-secret",
    MIDDLEWARE=["drf_idem.middleware.IdempotencyMiddleware"],
    INSTALLED_APPS=[],
    CACHES={"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}, "drf_idem": CACHE},
    # The contract's header instead of its default X-Request-ID.
    DRF_IDEM={"HEADER": "HTTP_IDEMPOTENCY_KEY", "TTL": TTL_S, "METHODS": ["POST", "PUT", "PATCH"]},
)
django.setup()


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


# GET is not among METHODS: the control routes pass the middleware untouched.
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

    class Server(ThreadedWSGIServer):
        request_queue_size = 1024  # a burst must not overflow the listen queue

    httpd = Server(("127.0.0.1", OPTS.port), QuietHandler)
    httpd.daemon_threads = True
    httpd.set_app(WSGIHandler())
    print(f"{NAME} on 127.0.0.1:{OPTS.port} ({OPTS.storage})", flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
