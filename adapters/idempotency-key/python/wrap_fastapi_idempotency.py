"""reqkey-idem/1 app around fastapi-idempotency (PyPI): its IdempotencyMiddleware, scoped by caller, in front of our five routes."""

from __future__ import annotations

from datetime import timedelta

from fastapi_idempotency import IdempotencyMiddleware, MemoryStore

import reqkey_idem_asgi
import reqkey_idem_common as c

NAME = "fastapi-idempotency"
DEFAULT_KEY_WINDOW_MS = 24 * 60 * 60 * 1000  # key_window=timedelta(hours=24)


def caller_scope(request) -> str:
    """Our "authentication": the library's `scope` function returns the caller."""
    caller = request.headers.get("x-reqkey-caller") or ""
    return f"caller:{caller}"


def main() -> None:
    # Its stores: MemoryStore and TortoiseStore (an ORM extra); no Redis.
    opts = c.parse_options(NAME, ["memory"], expiry=True)
    window_ms = DEFAULT_KEY_WINDOW_MS if opts.expiry_ms is None else opts.expiry_ms
    # What the library does as configured here, per its README and code
    # (adapters/idempotency-key/README.md cites each).
    profile = {
        "keyRequired": False,  # no key: its "automatic" mode (identical requests within 10 s), else it runs
        "keySyntax": "any",
        "invalidKeyStatus": 422,  # InvalidKeyError: empty or over max_key_length (255)
        "fingerprint": "bytes",  # digest of method, path, query and the body bytes
        "mismatchStatus": 422,  # ConflictingRequestError
        "concurrent": "wait",  # a duplicate polls until the first completes (409 only after wait_seconds=15)
        "concurrentStatus": None,
        "errors": "released",  # "5xx responses ... are never stored"
        "scope": ["caller"],  # the key is digest(scope(request), header); method and path are in the fingerprint
        "expiryMs": window_ms,  # key_window
        "lockMs": None,  # the lease is renewed by a heartbeat for as long as the request runs
        "replayHeader": "idempotent-replayed",
        "durable": False,
    }
    effects = c.Effects(opts.effects_file)

    def wrap(app):
        app.add_middleware(
            IdempotencyMiddleware,
            store=MemoryStore(),
            scope=caller_scope,
            key_window=timedelta(milliseconds=window_ms),
        )
        return app

    reqkey_idem_asgi.serve(opts.port, effects, c.health(NAME, opts.storage, profile), wrap)


if __name__ == "__main__":
    main()
