"""The reqkey-idem/1 app side shared by the Python wrappers: options, the effects oracle, the order counter, health.

Everything here is ours and sits OUTSIDE the library under test: the effects
oracle is recorded by the app's own handler (so it counts what really ran,
whatever the library answered), and the control routes are reached without
passing through the library.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import threading
from importlib.metadata import version as installed_version
from typing import Any, Optional

PROTOCOL = "reqkey-idem/1"
SLOW_DEFAULT_MS = 1000
SLEEP_MAX_MS = 120000


def parse_options(prog: str, storages: list[str], expiry: bool) -> argparse.Namespace:
    """`--port P --storage S --redis-url URL --expiry-ms MS --effects-file F --key-prefix S`; exit 2 on a bad one."""
    p = argparse.ArgumentParser(prog=prog)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--storage", choices=storages, default="memory")
    p.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--expiry-ms", type=int, default=None)
    p.add_argument("--effects-file", default=None)
    p.add_argument("--key-prefix", default="reqkey-idem")
    opts = p.parse_args()
    if not 1 <= opts.port <= 65535:
        p.error("--port must be 1-65535")
    if opts.expiry_ms is not None:
        if not expiry:
            p.error("--expiry-ms: this library has no expiry setting")
        if opts.expiry_ms < 1:
            p.error("--expiry-ms must be a positive integer")
    return opts


def whole_seconds(ms: int) -> int:
    """A library that counts expiry in whole seconds gets the next whole second up."""
    return max(1, math.ceil(ms / 1000))


class Effects:
    """The effects oracle and the global order counter (thread-safe).

    With `effects_file` every effect is appended and flushed before the answer
    is sent, and reloaded at start, so the oracle survives a crash and restart.
    """

    def __init__(self, effects_file: Optional[str]) -> None:
        self._lock = threading.Lock()
        self._file = effects_file
        self._entries: dict[tuple, dict[str, Any]] = {}
        self._order = 0
        if effects_file and os.path.exists(effects_file):
            with open(effects_file, encoding="utf-8") as f:
                for line in f:
                    try:
                        self._add(json.loads(line), persist=False)
                    except ValueError:
                        continue  # a line cut by a crash

    def _add(self, e: dict[str, Any], persist: bool) -> int:
        ident = (e["method"], e["path"], e["caller"], e["key"], e["bodySha256"])
        entry = self._entries.setdefault(ident, {**e, "count": 0})
        entry["count"] += 1
        self._order += 1
        if persist and self._file:
            with open(self._file, "a", encoding="utf-8") as f:
                f.write(json.dumps(e) + "\n")
                f.flush()
        return self._order

    def record(self, method: str, path: str, caller: Optional[str], key: Optional[str], raw_body: bytes) -> int:
        """Runs the side effect: records it and returns the new order number."""
        e = {
            "method": method,
            "path": path,
            "caller": caller,
            "key": key,
            "bodySha256": hashlib.sha256(raw_body or b"").hexdigest(),
        }
        with self._lock:
            return self._add(e, persist=True)

    def listing(self) -> dict[str, Any]:
        with self._lock:
            return {"effects": [dict(v) for v in self._entries.values()]}


def parse_body(raw: bytes) -> Any:
    """The request's JSON body, or None when it is empty or not JSON."""
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


REFUSED_BODY_STATUS = 422
REFUSED_BODY_ERROR = "the body must be a JSON object"


def kind_of(kind: str, body: Any) -> str:
    """The route's kind, or "refused" for a body that is not a JSON object: the handler's own
    4xx (reqkey-idem/1), which counts its run like any other and answers 422 with its order."""
    return kind if isinstance(body, dict) else "refused"


def sleep_ms(kind: str, body: Any) -> int:
    """How long a handler sleeps before its side effect (reqkey-idem/1): `sleepMs` of the body
    on `/orders/slow` (default 1000) and `/orders/fail` (default 0), capped at 120000."""
    if kind not in ("slow", "fail"):
        return 0
    default = SLOW_DEFAULT_MS if kind == "slow" else 0
    v = body.get("sleepMs") if isinstance(body, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        return default
    return min(int(v), SLEEP_MAX_MS)


def slow_ms(body: Any) -> int:
    """How long `/orders/slow` sleeps: `sleepMs` from the body, default 1000, capped at 120000."""
    return sleep_ms("slow", body)


def health(name: str, storage: str, profile: dict[str, Any]) -> dict[str, Any]:
    """The `/.reqkey/health` document; the version is the installed distribution's."""
    return {
        "protocol": PROTOCOL,
        "implementation": {"name": name, "version": installed_version(name), "storage": storage},
        "profile": profile,
    }


def caller_of(value: Optional[str]) -> Optional[str]:
    return value if value else None
