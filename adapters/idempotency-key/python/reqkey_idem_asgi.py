"""The FastAPI app shared by the ASGI wrappers: our five routes behind the library, control routes beside it.

`serve` wraps the order app in the library's middleware (given by the
wrapper) and puts a dispatcher in front that sends `/.reqkey/...` to a
control app the library never sees.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import reqkey_idem_common as c


def order_app(effects: c.Effects, decorate: Callable[[Any], Any] | None = None, route_class: Any = None) -> FastAPI:
    """The routes behind the idempotency layer (reqkey-idem/1).

    A library that is a decorator of route functions gets each route's
    function through `decorate`; one that needs its own route class (set
    before the routes are added) passes `route_class`.
    """
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)
    if route_class is not None:
        app.router.route_class = route_class
    wrap = decorate or (lambda f: f)

    async def run(kind: str, request: Request) -> JSONResponse:
        raw = await request.body()
        body = c.parse_body(raw)
        kind = c.kind_of(kind, body)
        caller = c.caller_of(request.headers.get("x-reqkey-caller"))
        await asyncio.sleep(c.sleep_ms(kind, body) / 1000)
        order = effects.record(request.method, request.url.path, caller, request.headers.get("idempotency-key"), raw)
        headers = {"X-Reqkey-Order": str(order)}
        if kind == "refused":
            return JSONResponse({"error": c.REFUSED_BODY_ERROR, "order": order, "caller": caller}, c.REFUSED_BODY_STATUS, headers)
        if kind == "fail":
            return JSONResponse({"error": "failed after effect", "order": order, "caller": caller}, 500, headers)
        return JSONResponse({"order": order, "caller": caller, "echo": body}, 201, headers)

    @app.post("/orders")
    @wrap
    async def create(request: Request) -> JSONResponse:
        return await run("ok", request)

    @app.put("/orders")
    @wrap
    async def replace(request: Request) -> JSONResponse:
        return await run("ok", request)

    @app.post("/orders/fail")
    @wrap
    async def fail(request: Request) -> JSONResponse:
        return await run("fail", request)

    @app.post("/orders/slow")
    @wrap
    async def slow(request: Request) -> JSONResponse:
        return await run("slow", request)

    @app.post("/payments")
    @wrap
    async def pay(request: Request) -> JSONResponse:
        return await run("ok", request)

    return app


def control_app(effects: c.Effects, health: dict[str, Any]) -> FastAPI:
    """`/.reqkey/health` and `/.reqkey/effects`, outside the idempotency layer."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    @app.get("/.reqkey/health")
    async def get_health() -> JSONResponse:
        return JSONResponse(health)

    @app.get("/.reqkey/effects")
    async def get_effects() -> JSONResponse:
        return JSONResponse(effects.listing())

    return app


def serve(
    port: int,
    effects: c.Effects,
    health: dict[str, Any],
    wrap: Callable[[FastAPI], Any],
    decorate: Callable[[Any], Any] | None = None,
    route_class: Any = None,
    startup: Callable[[FastAPI], Awaitable[None]] | None = None,
) -> None:
    """Serves `wrap(order_app)` with the control routes beside it, on 127.0.0.1:port.

    `startup(app)`, when given, runs once on the server's event loop before
    the first request is let through (a library's Redis client opened there).
    """
    app = order_app(effects, decorate, route_class)
    guarded = wrap(app)
    control = control_app(effects, health)
    started = asyncio.Lock()
    ready: list[bool] = []

    async def dispatch(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith("/.reqkey/"):
            await control(scope, receive, send)
            return
        if startup is not None and not ready:
            async with started:
                if not ready:
                    await startup(app)
                    ready.append(True)
        await guarded(scope, receive, send)

    uvicorn.run(dispatch, host="127.0.0.1", port=port, log_level="warning", lifespan="off", backlog=1024)
