"""The Django half of the Django wrappers (django-idempotency-key, drf-idem).

The contract's five routes and two control routes as Django views, and
Django's threaded WSGI server with a listen queue deep enough for a burst.
What differs between the wrappers (the library's settings and middleware,
the declared profile) stays in each wrapper: it calls `configure(...)` with
them, binds `urlpatterns = routes(...)` in its own module (the project's
`ROOT_URLCONF`) and calls `serve(...)`.
"""

from __future__ import annotations

import time

import django
from django.conf import settings
from django.http import HttpResponseNotAllowed, JsonResponse
from django.urls import path

import reqkey_idem_common as c

LISTEN_QUEUE = 1024  # a burst must not overflow the listen queue


def configure(urlconf: str, middleware: list[str], caches: dict, **library) -> None:
    """Settings in code for a one-file project whose URLs are in `urlconf`; `library` is the library's own settings."""
    settings.configure(
        DEBUG=False,
        ALLOWED_HOSTS=["127.0.0.1", "localhost"],
        ROOT_URLCONF=urlconf,
        SECRET_KEY="reqkey-idem-wrapper-not-a-secret",
        MIDDLEWARE=middleware,
        INSTALLED_APPS=[],
        CACHES=caches,
        **library,
    )
    django.setup()


def _run(effects: c.Effects, kind: str, request) -> JsonResponse:
    raw = request.body
    body = c.parse_body(raw)
    kind = c.kind_of(kind, body)
    caller = c.caller_of(request.META.get("HTTP_X_REQKEY_CALLER"))
    time.sleep(c.sleep_ms(kind, body) / 1000)
    order = effects.record(request.method, request.path, caller, request.META.get("HTTP_IDEMPOTENCY_KEY"), raw)
    if kind == "refused":
        resp = JsonResponse({"error": c.REFUSED_BODY_ERROR, "order": order, "caller": caller}, status=c.REFUSED_BODY_STATUS)
    elif kind == "fail":
        resp = JsonResponse({"error": "failed after effect", "order": order, "caller": caller}, status=500)
    else:
        resp = JsonResponse({"order": order, "caller": caller, "echo": body}, status=201)
    resp["X-Reqkey-Order"] = str(order)
    return resp


def _view(effects: c.Effects, kind: str, methods: tuple[str, ...]):
    def handle(request):
        if request.method not in methods:
            return HttpResponseNotAllowed(methods)
        return _run(effects, kind, request)

    handle.__name__ = f"orders_{kind}"
    return handle


def routes(name: str, storage: str, effects: c.Effects, profile: dict) -> list:
    """The URL patterns: GET control routes, then the contract's routes."""

    def health(request):
        return JsonResponse(c.health(name, storage, profile))

    def listing(request):
        return JsonResponse(effects.listing())

    return [
        path(".reqkey/health", health),
        path(".reqkey/effects", listing),
        path("orders", _view(effects, "ok", ("POST", "PUT"))),
        path("orders/fail", _view(effects, "fail", ("POST",))),
        path("orders/slow", _view(effects, "slow", ("POST",))),
        path("payments", _view(effects, "ok", ("POST",))),
    ]


def serve(name: str, opts) -> None:
    """Serve the configured project on 127.0.0.1:opts.port until killed."""
    from django.core.handlers.wsgi import WSGIHandler
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, *args):  # no access log
            pass

    class Server(ThreadedWSGIServer):
        request_queue_size = LISTEN_QUEUE

    httpd = Server(("127.0.0.1", opts.port), QuietHandler)
    httpd.daemon_threads = True
    httpd.set_app(WSGIHandler())
    print(f"{name} on 127.0.0.1:{opts.port} ({opts.storage})", flush=True)
    httpd.serve_forever()
