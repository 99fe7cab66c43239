"""Probes one running reqkey-idem/1 app (stdlib only): health document, effects oracle, a keyed POST twice runs once or is replayed (the library is in the path).

    probe.py --url http://127.0.0.1:PORT --storage memory|redis [--seed N]
    probe.py --selftest   # runs the probe against an app with no idempotency layer and insists it FAILS

This is check.sh's smoke test of a wrapper, not the judge: `reqkey certify`
is. Every read is bounded by a timeout. Exit 0 when every check holds, 1
with the failed checks listed otherwise.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import random
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional

TIMEOUT_S = 15.0
MAX_BODY_BYTES = 1 << 20
PROFILE_FIELDS = {
    "keyRequired", "keySyntax", "invalidKeyStatus", "fingerprint", "mismatchStatus", "concurrent",
    "concurrentStatus", "errors", "scope", "expiryMs", "lockMs", "replayHeader", "durable",
}


class Probe:
    def __init__(self, url: str) -> None:
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname or not u.port:
            raise SystemExit(f"probe.py: --url must be http://HOST:PORT, got {url!r}")
        self.host, self.port = u.hostname, u.port
        self.failures: list[str] = []

    def check(self, ok: bool, what: str) -> bool:
        if not ok:
            self.failures.append(what)
        return ok

    def request(self, method: str, path: str, body: Optional[bytes] = None, headers: Optional[dict] = None):
        """One bounded exchange: (status, headers lower-cased, parsed JSON or None, raw)."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT_S)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            raw = resp.read(MAX_BODY_BYTES + 1)
            hdrs = {k.lower(): v for k, v in resp.getheaders()}
            status = resp.status
        finally:
            conn.close()
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return status, hdrs, parsed, raw

    def order_request(self, method: str, path: str, caller: str, key: Optional[str], body: Any):
        raw = json.dumps(body).encode()
        headers = {"Content-Type": "application/json", "X-Reqkey-Caller": caller}
        if key is not None:
            headers["Idempotency-Key"] = key
        return self.request(method, path, raw, headers), hashlib.sha256(raw).hexdigest()

    def effects_count(self, method: str, path: str, caller: str, key: Optional[str], sha: str) -> Optional[int]:
        status, _, doc, _ = self.request("GET", "/.reqkey/effects")
        if not self.check(status == 200 and isinstance(doc, dict) and isinstance(doc.get("effects"), list),
                          f"GET /.reqkey/effects: 200 with {{effects: [...]}} (got {status})"):
            return None
        n = 0
        for e in doc["effects"]:
            if (e.get("method"), e.get("path"), e.get("caller"), e.get("key"), e.get("bodySha256")) == (method, path, caller, key, sha):
                if not self.check(isinstance(e.get("count"), int), f"effects entry count is an integer: {e}"):
                    return None
                n += e["count"]
        return n

    def health(self, storage: str) -> Optional[dict]:
        status, _, doc, _ = self.request("GET", "/.reqkey/health")
        if not self.check(status == 200 and isinstance(doc, dict), f"GET /.reqkey/health: 200 JSON object (got {status})"):
            return None
        self.check(doc.get("protocol") == "reqkey-idem/1", f"health.protocol is reqkey-idem/1 (got {doc.get('protocol')!r})")
        impl = doc.get("implementation")
        if self.check(isinstance(impl, dict), "health.implementation is an object"):
            for f in ("name", "version"):
                self.check(isinstance(impl.get(f), str) and impl.get(f) != "", f"health.implementation.{f} is a non-empty string")
            self.check(impl.get("storage") == storage, f"health.implementation.storage is {storage!r} (got {impl.get('storage')!r})")
        p = doc.get("profile")
        if not self.check(isinstance(p, dict), "health.profile is an object"):
            return None
        self.check(set(p) == PROFILE_FIELDS, f"health.profile has exactly the fields of reqkey-idem/1 (missing {sorted(PROFILE_FIELDS - set(p))}, extra {sorted(set(p) - PROFILE_FIELDS)})")
        status_or_null = lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and 100 <= v <= 599)
        ms_or_null = lambda v: v is None or (isinstance(v, int) and not isinstance(v, bool) and v > 0)
        self.check(isinstance(p.get("keyRequired"), bool), "profile.keyRequired is a bool")
        self.check(p.get("keySyntax") in ("sf-string", "any"), "profile.keySyntax is sf-string|any")
        self.check(status_or_null(p.get("invalidKeyStatus")), "profile.invalidKeyStatus is a status or null")
        self.check(p.get("fingerprint") in ("none", "bytes", "json"), "profile.fingerprint is none|bytes|json")
        self.check(status_or_null(p.get("mismatchStatus")), "profile.mismatchStatus is a status or null")
        self.check((p.get("fingerprint") == "none") == (p.get("mismatchStatus") is None), "profile.mismatchStatus is null exactly when fingerprint is none")
        self.check(p.get("concurrent") in ("conflict", "wait"), "profile.concurrent is conflict|wait")
        self.check(status_or_null(p.get("concurrentStatus")), "profile.concurrentStatus is a status or null")
        self.check((p.get("concurrent") == "wait") == (p.get("concurrentStatus") is None), "profile.concurrentStatus is null exactly when concurrent is wait")
        self.check(p.get("errors") in ("stored", "released"), "profile.errors is stored|released")
        scope = p.get("scope")
        self.check(isinstance(scope, list) and len(set(scope)) == len(scope) and set(scope) <= {"caller", "method", "path"}, "profile.scope is a subset of [caller, method, path]")
        self.check(ms_or_null(p.get("expiryMs")), "profile.expiryMs is a positive integer or null")
        self.check(ms_or_null(p.get("lockMs")), "profile.lockMs is a positive integer or null")
        rh = p.get("replayHeader")
        self.check(rh is None or (isinstance(rh, str) and rh != ""), "profile.replayHeader is a header name or null")
        self.check(isinstance(p.get("durable"), bool), "profile.durable is a bool")
        return p

    def executed(self, label: str, answer, caller: str, body: Any, want_status: int) -> Optional[int]:
        """An answer of our own handler: status, X-Reqkey-Order, caller echo; returns the order."""
        status, hdrs, doc, _ = answer
        if not self.check(status == want_status and isinstance(doc, dict), f"{label}: {want_status} JSON (got {status})"):
            return None
        order = doc.get("order")
        self.check(isinstance(order, int), f"{label}: body.order is an integer")
        self.check(doc.get("caller") == caller, f"{label}: body.caller echoes {caller!r}")
        self.check(hdrs.get("x-reqkey-order") == str(order), f"{label}: X-Reqkey-Order header is the order")
        if want_status == 201:
            self.check(doc.get("echo") == body, f"{label}: body.echo is the request body")
        return order

    def run(self, storage: str, seed: int) -> None:
        rnd = random.Random(seed)
        tag = f"{rnd.getrandbits(48):012x}"
        profile = self.health(storage)
        if profile is None:
            return
        caller = f"probe-{tag}"
        # A keyed POST twice: the handler runs once.
        key = f"probe-{tag}-once"
        body = {"item": "probe", "n": rnd.randint(1, 1000)}
        (first, sha) = self.order_request("POST", "/orders", caller, key, body)
        self.executed("POST /orders with a new key", first, caller, body, 201)
        (second, _) = self.order_request("POST", "/orders", caller, key, body)
        self.check(second[0] < 500, f"POST /orders again with the key: no 5xx (got {second[0]})")
        # The library is in the path: the retry ran nothing, or (a library
        # that runs first and stores after, as drf-idem does) was answered
        # the first's order. Whether that conforms is the judge's to say.
        docs = (first[2], second[2])
        replayed = all(isinstance(d, dict) for d in docs) and docs[0].get("order") is not None and docs[1].get("order") == docs[0].get("order")
        ran = self.effects_count("POST", "/orders", caller, key, sha)
        self.check(ran == 1 or replayed, f"a keyed POST sent twice ran its side effect exactly once or replayed the first order (ran {ran})")
        # The other routes run and are counted.
        for method, path, status in (("PUT", "/orders", 201), ("POST", "/payments", 201), ("POST", "/orders/slow", 201), ("POST", "/orders/fail", 500)):
            k = f"probe-{tag}-{method}-{path.strip('/').replace('/', '-')}"
            b = {"sleepMs": 50} if path == "/orders/slow" else {"item": path}
            (ans, sha) = self.order_request(method, path, caller, k, b)
            self.executed(f"{method} {path}", ans, caller, b, status)
            self.check(self.effects_count(method, path, caller, k, sha) == 1, f"{method} {path} ran once (effects)")
        # A body that is not a JSON object: the handler's own 4xx, after counting its run.
        k = f"probe-{tag}-refused"
        b = ["probe", tag]
        (ans, sha) = self.order_request("POST", "/orders", caller, k, b)
        self.executed("POST /orders with a JSON array (the handler refuses it)", ans, caller, b, 422)
        self.check(self.effects_count("POST", "/orders", caller, k, sha) == 1, "the refused array ran once (effects)")
        # No key: 400 and nothing runs (keyRequired) or it runs (not required).
        b = {"item": "keyless", "tag": tag}
        (ans, sha) = self.order_request("POST", "/orders", caller, None, b)
        ran = self.effects_count("POST", "/orders", caller, None, sha)
        if profile.get("keyRequired"):
            self.check(ans[0] == 400 and ran == 0, f"keyRequired: a keyless POST gets 400 and runs nothing (got {ans[0]}, ran {ran})")
        else:
            self.check(ans[0] == 201 and ran == 1, f"key optional: a keyless POST runs once (got {ans[0]}, ran {ran})")


def selftest() -> int:
    """A contract app with NO idempotency layer: the probe must report the double execution."""
    effects: dict = {}
    lock = threading.Lock()
    counter = [0]

    class NoLayer(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def reply(self, status, doc, extra=None):
            raw = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            if self.path == "/.reqkey/health":
                self.reply(200, {"protocol": "reqkey-idem/1", "implementation": {"name": "no-layer", "version": "0", "storage": "memory"},
                                 "profile": {"keyRequired": False, "keySyntax": "any", "invalidKeyStatus": None, "fingerprint": "bytes",
                                             "mismatchStatus": 422, "concurrent": "conflict", "concurrentStatus": 409, "errors": "stored",
                                             "scope": [], "expiryMs": None, "lockMs": None, "replayHeader": None, "durable": False}})
            else:
                with lock:
                    self.reply(200, {"effects": [dict(zip(("method", "path", "caller", "key", "bodySha256"), k), count=n) for k, n in effects.items()]})

        def do_POST(self):
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            caller = self.headers.get("X-Reqkey-Caller")
            ident = (self.command, self.path, caller, self.headers.get("Idempotency-Key"), hashlib.sha256(raw).hexdigest())
            with lock:
                effects[ident] = effects.get(ident, 0) + 1
                counter[0] += 1
                order = counter[0]
            body = json.loads(raw)
            status = 422 if not isinstance(body, dict) else 500 if self.path == "/orders/fail" else 201
            doc = {"order": order, "caller": caller, "echo": body} if status == 201 else {"error": "refused or failed", "order": order, "caller": caller}
            self.reply(status, doc, {"X-Reqkey-Order": str(order)})

        do_PUT = do_POST

    server = ThreadingHTTPServer(("127.0.0.1", 0), NoLayer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        p = Probe(f"http://127.0.0.1:{server.server_address[1]}")
        p.run("memory", 1)
    finally:
        server.shutdown()
    caught = any("exactly once" in f for f in p.failures)
    others = [f for f in p.failures if "exactly once" not in f]
    if caught and not others:
        print("probe.py --selftest: the probe caught the app without an idempotency layer (double execution), and nothing else")
        return 0
    print(f"probe.py --selftest: FAILED: caught={caught}, other failures={others}", file=sys.stderr)
    return 1


def main() -> int:
    ap = argparse.ArgumentParser(prog="probe.py")
    ap.add_argument("--url")
    ap.add_argument("--storage", choices=["memory", "redis"], default="memory")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--selftest", action="store_true")
    a = ap.parse_args()
    if a.selftest:
        return selftest()
    if not a.url:
        ap.error("--url is required")
    seed = a.seed if a.seed is not None else random.SystemRandom().getrandbits(32)
    p = Probe(a.url)
    try:
        p.run(a.storage, seed)
    except (OSError, http.client.HTTPException) as e:
        p.failures.append(f"could not talk to {a.url}: {e}")
    if p.failures:
        print(f"probe.py: {a.url}: {len(p.failures)} check(s) failed (seed {seed}, replay with --seed {seed}):", file=sys.stderr)
        for f in p.failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(f"probe.py: {a.url}: every check held (seed {seed})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
