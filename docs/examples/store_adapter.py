#!/usr/bin/env python3
"""A complete reqkey-store/1 adapter over an in-memory store, in Python's
standard library only: the smallest independent store `reqkey` certifies.

    python3 docs/examples/store_adapter.py --port 7002 &
    reqkey run scenarios/store --target store+http://127.0.0.1:7002

`--broken no-key-rule` skips the key rule, to watch the suite fail (exit 1);
`--broken racy` reads the key's holder outside the commit's lock (and
pauses before the write), the race a conformance kit exists to catch.
`--broken scan` answers getRunByRequestKey correctly but by searching every
run of every session, as a SQL store missing its key index would: the
suite passes, and `reqkey bench lookup --max-ratio` catches it.
One lock makes each operation atomic (a real store would use its own
transaction, row lock or script instead; see docs/store-adapter.md).
"""
import argparse
import hashlib
import json
import re
import socket
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ID = re.compile(r"^[A-Za-z0-9._:-]{1,256}$")
KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
STATUSES = {"running", "suspended_input", "suspended_tool", "completed", "failed", "interrupted"}
LIVE = {"running", "suspended_input", "suspended_tool"}
MAX_BODY = 1 << 20


class Invalid(Exception):
    pass


def reject(cause, **details):
    return {"error": {"kind": "run_start_rejected", "cause": cause, "details": details}}


def error(kind, message):
    return {"error": {"kind": kind, "message": message}}


def parse_json(data):
    # Fractions and exponents as Decimals (integers are exact already), so
    # `input` echoes with its exact values: 1e400 is not inf, 0.1 stays
    # 0.1 (SPEC 4 [[store.input.numbers-exact]]).
    return json.loads(data, parse_float=Decimal)


def write_json(value):
    """json.dumps, with a Decimal written as it was read (the same value)."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + write_json(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(write_json(v) for v in value) + "]"
    return json.dumps(value)


def _numbers_by_value(value):
    # SPEC 3 [[digest.numbers]]: a number is its value, not its spelling, so
    # 1.0 and 1e0 canonicalize as 1 (RFC 8785 prints numbers the ECMAScript
    # way). Whole floats become ints; other floats keep Python's shortest
    # round-trip form, which is ECMAScript's for every number the suite uses.
    if isinstance(value, Decimal):
        # The digest alone reads numbers as doubles (SPEC 3); a value past
        # their range digests by its exact decimal form.
        value = float(value) if abs(value.adjusted()) < 300 else str(value.normalize())
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {k: _numbers_by_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_numbers_by_value(v) for v in value]
    return value


def canonical(value):
    return json.dumps(
        _numbers_by_value(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


class Store:
    def __init__(self, broken=None):
        self.lock = threading.Lock()
        self.sessions = {}  # id -> {"runs": [run], "digests": {runId: d}, "keys": {key: runId}, "inputs": [...]}
        self.broken = broken

    def commit(self, s):
        digest = hashlib.sha256(canonical(s).encode()).hexdigest()
        stale = None
        if self.broken == "racy" and s.get("requestKey") is not None:
            with self.lock:  # BUG (on purpose): the holder is read outside the commit
                sess = self.sessions.get(s["sessionId"])
                stale = (sess["keys"].get(s["requestKey"]) if sess else None) or ""
            time.sleep(0.002)
        with self.lock:
            sess = self.sessions.get(s["sessionId"]) or {"runs": [], "digests": {}, "keys": {}, "inputs": []}
            by_id = {r["runId"]: r for r in sess["runs"]}
            # 1. same runId: replay or conflict
            if s["runId"] in by_id:
                if sess["digests"][s["runId"]] == digest:
                    return {"ok": {"outcome": "replayed", "run": dict(by_id[s["runId"]])}}
                return reject("run_id_conflict", existingRunId=s["runId"])
            # 2. key holder
            key = s.get("requestKey")
            if key is not None and self.broken != "no-key-rule":
                holder = sess["keys"].get(key) if stale is None else (stale or None)
                if holder is not None and holder != s["runId"]:
                    return reject("request_key_taken", existingRunId=holder)
            # 3. CAS
            current = sess["runs"][-1]["runId"] if sess["runs"] else None
            if current != s.get("expectedCurrentRunId"):
                return reject("cas_mismatch", currentRunId=current)
            # 4. write
            run = {"sessionId": s["sessionId"], "runId": s["runId"], "status": "running",
                   "startSequence": len(sess["runs"]) + 1}
            if key is not None:
                run["requestKey"], run["requestDigest"] = key, s["requestDigest"]
                sess["keys"][key] = s["runId"]
            sess["runs"].append(run)
            sess["digests"][s["runId"]] = digest
            sess["inputs"].append({"runId": s["runId"], "input": s["input"]})
            self.sessions[s["sessionId"]] = sess
            return {"ok": {"outcome": "started", "run": dict(run)}}

    def call(self, op, a):
        if op == "commitRunStart":
            return self.commit(a["startRun"])
        with self.lock:
            sess = self.sessions.get(a["sessionId"])
            runs = sess["runs"] if sess else []
            if op == "getRun":
                return {"ok": next((dict(r) for r in runs if r["runId"] == a["runId"]), None)}
            if op == "getCurrentRun":
                return {"ok": dict(runs[-1]) if runs else None}
            if op == "listRuns":
                return {"ok": [dict(r) for r in runs]}
            if op == "getRunByRequestKey" and self.broken == "scan":
                found = None  # BUG (on purpose): no index, a full scan
                for other in self.sessions.values():
                    for r in other["runs"]:
                        if r["sessionId"] == a["sessionId"] and r.get("requestKey") == a["requestKey"]:
                            found = dict(r)
                return {"ok": found}
            if op == "getRunByRequestKey":
                rid = sess["keys"].get(a["requestKey"]) if sess else None
                return {"ok": next((dict(r) for r in runs if r["runId"] == rid), None)}
            if op == "listInputs":
                return {"ok": list(sess["inputs"]) if sess else []}
            if op == "setRunStatus":
                run = next((r for r in runs if r["runId"] == a["runId"]), None)
                if run is None:
                    return error("not_found", f"no run {a['runId']} in session {a['sessionId']}")
                if run["status"] not in LIVE:
                    return error("invalid_transition", f"run {a['runId']} is {run['status']}")
                run["status"] = a["status"]
                return {"ok": dict(run)}
            if op == "deleteSession":
                return {"ok": {"deleted": self.sessions.pop(a["sessionId"], None) is not None}}
        raise Invalid(f"unknown op {op!r}")


FIELDS = {
    "getRun": ("sessionId", "runId"), "getCurrentRun": ("sessionId",), "listRuns": ("sessionId",),
    "getRunByRequestKey": ("sessionId", "requestKey"), "listInputs": ("sessionId",),
    "setRunStatus": ("sessionId", "runId", "status"), "deleteSession": ("sessionId",),
    "commitRunStart": ("startRun",),
}


def text(args, name, pattern=None):
    v = args.get(name)
    if not isinstance(v, str) or v == "" or (pattern and not pattern.fullmatch(v)):
        raise Invalid(f"{name} must be a valid non-empty string")
    return v


def validate(req):
    if not isinstance(req, dict) or not isinstance(req.get("op"), str):
        raise Invalid("request needs a string op")
    op, args = req["op"], req.get("args")
    if op not in FIELDS:
        raise Invalid(f"unknown op {op!r}")
    if not isinstance(args, dict) or set(args) != set(FIELDS[op]):
        raise Invalid(f"{op} takes exactly {FIELDS[op]}")
    if op == "commitRunStart":
        s = args["startRun"]
        if not isinstance(s, dict) or "input" not in s:
            raise Invalid("startRun needs sessionId, runId and input")
        if set(s) - {"sessionId", "runId", "expectedCurrentRunId", "input", "requestKey", "requestDigest"}:
            raise Invalid("startRun has an unknown field")
        text(s, "sessionId", ID), text(s, "runId", ID)
        s.setdefault("expectedCurrentRunId", None)
        if s["expectedCurrentRunId"] is not None:
            text(s, "expectedCurrentRunId", ID)
        for f in ("requestKey", "requestDigest"):
            if s.get(f, 0) is None:
                del s[f]  # an explicit null reads as absent
        if ("requestKey" in s) != ("requestDigest" in s):
            raise Invalid("requestKey and requestDigest come together")
        if "requestKey" in s:
            text(s, "requestKey", KEY), text(s, "requestDigest")
        return op, args
    text(args, "sessionId", ID)
    if "runId" in args:
        text(args, "runId", ID)
    if "requestKey" in args:
        text(args, "requestKey", KEY)
    if "status" in args and args["status"] not in STATUSES:
        raise Invalid("unknown status")
    return op, args


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Headers and body go out in two writes; without this, Nagle and
        # delayed ACKs add 40 ms to every keep-alive request.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def answer(self, body):
        data = write_json(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/health":
            return self.answer({"name": "python-example", "version": "1", "protocol": "reqkey-store/1"})
        self.send_error(404)

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        if self.path != "/rpc":
            return self.send_error(404)
        if length > MAX_BODY:
            self.close_connection = True
            return self.answer(error("invalid_argument", "body too large"))
        try:
            op, args = validate(parse_json(self.rfile.read(length) or b"null"))
            self.answer(self.server.store.call(op, args))
        except (Invalid, ValueError) as e:
            self.answer(error("invalid_argument", str(e)))
        except Exception as e:  # a backend failure, never a contract answer
            self.answer(error("internal", repr(e)))

    def log_message(self, *args):
        pass


class Server(ThreadingHTTPServer):
    # The listen backlog: Python's default is 5, and a burst of 8 then overflows it; the kernel drops
    # the extra connections and the client retries them a second later, after the first request ended.
    request_queue_size = 128
    daemon_threads = True


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, default=7002)
    p.add_argument("--broken", choices=["no-key-rule", "racy", "scan"])
    a = p.parse_args()
    server = Server(("127.0.0.1", a.port), Handler)
    server.store = Store(a.broken)
    print(f"listening on http://127.0.0.1:{server.server_port}", flush=True)
    server.serve_forever()
