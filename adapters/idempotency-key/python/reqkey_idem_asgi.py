"""The FastAPI app shared by the ASGI wrappers: our five routes behind the library, control routes beside it.

`serve` wraps the order app in the library's middleware (given by the
wrapper) and puts a dispatcher in front that sends `/.reqkey/...` to a
control app the library never sees.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import reqkey_idem_common as c


def order_app(effects: c.Effects) -> FastAPI:
    """The routes behind the idempotency layer (reqkey-idem/1)."""
    app = FastAPI(openapi_url=None, docs_url=None, redoc_url=None)

    async def run(kind: str, request: Request) -> JSONResponse:
        raw = await request.body()
        body = c.parse_body(raw)
        caller = c.caller_of(request.headers.get("x-reqkey-caller"))
        if kind == "slow":
            await asyncio.sleep(c.slow_ms(body) / 1000)
        order = effects.record(request.method, request.url.path, caller, request.headers.get("idempotency-key"), raw)
        headers = {"X-Reqkey-Order": str(order)}
        if kind == "fail":
            return JSONResponse({"error": "failed after effect", "order": order, "caller": caller}, 500, headers)
        return JSONResponse({"order": order, "caller": caller, "echo": body}, 201, headers)

    @app.post("/orders")
    async def create(request: Request) -> JSONResponse:
        return await run("ok", request)

    @app.put("/orders")
    async def replace(request: Request) -> JSONResponse:
        return await run("ok", request)

    @app.post("/orders/fail")
    async def fail(request: Request) -> JSONResponse:
        return await run("fail", request)

    @app.post("/orders/slow")
    async def slow(request: Request) -> JSONResponse:
        return await run("slow", request)

    @app.post("/payments")
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


def serve(port: int, effects: c.Effects, health: dict[str, Any], wrap: Callable[[FastAPI], Any]) -> None:
    """Serves `wrap(order_app)` with the control routes beside it, on 127.0.0.1:port."""
    guarded = wrap(order_app(effects))
    control = control_app(effects, health)

    async def dispatch(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] == "http" and scope.get("path", "").startswith("/.reqkey/"):
            await control(scope, receive, send)
        else:
            await guarded(scope, receive, send)

    uvicorn.run(dispatch, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
