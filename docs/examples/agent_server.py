#!/usr/bin/env python3
"""A reqkey-agent/1 server with request keys, in Python's standard library only.

The skeleton docs/agent-server.md walks through: every route of SPEC 7,
keyed entries planned as SPEC 5 says, and the test agent's markers
(`[sleep:N]`, `[suspend]`, `[fail]`, `[lose-run]`, `[admit:N]`) behind
`--test-agent`, the switch a real server would keep off in production.

    python3 docs/examples/agent_server.py --port 7080 --test-agent &
    reqkey run --target http://127.0.0.1:7080

Its profile (GET /health): supportsRequestKey true, concurrentEntry
reject, no entryWaitMs, not durable (state lives in memory). One lock
makes each entry's decision and its run-start commit one atomic step; a
real server keeps that step in its store (docs/store-adapter.md).

`--broken ignore-key` reads the key but never looks its holder up (every
keyed entry plans "new"), while still declaring supportsRequestKey true:
the agent suite must fail it.
"""
import argparse
import hashlib
import json
import re
import socket
import threading
import time
import uuid
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote

ID = re.compile(r"^[A-Za-z0-9._:-]{1,256}$")
KEY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
KEY_HEADER = "X-Helix-Request-Key"
LIVE = {"running", "suspended_input", "suspended_tool"}
MAX_BODY = 1 << 20
MAX_SLEEP_MS = 60_000
MAX_WAIT_MS = 60_000
STREAM_LIMIT_S = 120
REDECIDE_LIMIT = 8
HEAD_TIMEOUT_S = 10


class Refused(Exception):
    """An HTTP error answer: status, code, and `runId` for the two keyed 409s."""

    def __init__(self, status, code, message, run_id=None):
        super().__init__(message)
        self.status, self.code, self.message, self.run_id = status, code, message, run_id


# --- JSON as values (SPEC 3): 1, 1.0 and 1e0 are one number ----------------

def parse_json(data):
    """Numbers as Decimals, so 2^64 and 1e400 are kept exactly."""
    return json.loads(data, parse_float=Decimal, parse_int=Decimal)


def write_json(value):
    """JSON text; a Decimal is written as it was read (same value)."""
    if isinstance(value, Decimal):
        return str(value) if value.is_finite() else "null"
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k) + ":" + write_json(v) for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(write_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def canonical(value):
    """Sorted keys, numbers by value: the digest's input (its own algorithm,
    SPEC 3 [[digest.black-box]]; what matters is same value, same digest)."""
    if isinstance(value, Decimal):
        n = value.normalize()
        return "0" if n.is_zero() else format(n, "E") if abs(n.adjusted()) > 20 else format(n, "f")
    if isinstance(value, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(value[k]) for k in sorted(value)) + "}"
    if isinstance(value, list):
        return "[" + ",".join(canonical(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def request_digest(kind, value):
    return hashlib.sha256(canonical({"input": value, "kind": kind}).encode()).hexdigest()


# --- the test agent (SPEC 7 "Test agent") ------------------------------------

def marker_ms(text, marker):
    """The first well-formed `[marker:N]`, capped; None when there is none."""
    m = re.search(re.escape(marker) + r"(\d+)\]", text)
    return None if m is None else min(int(m.group(1)), MAX_SLEEP_MS)


def input_text(value):
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    return canonical(value)


class Script:
    """What a run does, read from its input text when --test-agent is on."""

    def __init__(self, text, test_agent):
        self.sleep_ms = (marker_ms(text, "[sleep:") or 0) if test_agent else 0
        self.admit_ms = (marker_ms(text, "[admit:") or 0) if test_agent else 0
        self.lose_run = test_agent and "[lose-run]" in text
        if test_agent and "[fail]" in text:
            self.end = "failed"
        elif test_agent and "[suspend]" in text:
            self.end = "suspended_input"
        else:
            self.end = "completed"


# --- state ---------------------------------------------------------------------

class Run:
    def __init__(self, session, run_id, seq, key, digest):
        self.session, self.run_id, self.seq = session, run_id, seq
        self.key, self.digest = key, digest
        self.status = "running"
        self.events = []  # (event, data) after run-start; `finish` is last

    def meta(self):
        m = {"sessionId": self.session.sid, "runId": self.run_id, "status": self.status,
             "startSequence": self.seq}
        if self.key is not None:
            m["requestKey"], m["requestDigest"] = self.key, self.digest
        return m

    def finished_stream(self):
        return bool(self.events) and self.events[-1][0] == "finish"


class Session:
    def __init__(self, sid):
        self.sid = sid
        self.runs = []
        self.inputs = []  # {"runId", "input"}
        self.keys = {}  # request key -> Run
        self.deleted = False

    def current(self):
        return self.runs[-1] if self.runs else None


class Agent:
    """The executor: plans entries and runs them. `cv` guards everything."""

    def __init__(self, test_agent, broken):
        self.cv = threading.Condition()
        self.sessions = {}
        self.test_agent = test_agent
        self.broken = broken

    def finish(self, run, status):
        """Ends a live run (no-op on a finished one: finished is final)."""
        if run.status in LIVE:
            run.status = status
        if not run.finished_stream():
            run.events.append(("finish", {"status": run.status}))
        self.cv.notify_all()

    def execute(self, run, text, script):
        """The scripted agent: echo, stay running, end as the markers say."""
        with self.cv:
            run.events.append(("text", {"delta": "echo: " + text}))
            self.cv.notify_all()
        deadline = time.monotonic() + script.sleep_ms / 1000
        with self.cv:
            while run.status == "running" and not run.session.deleted:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cv.wait(min(left, 0.5))
            if run.status == "running" and not run.session.deleted:
                self.finish(run, script.end)

    def plan(self, session, key, digest):
        """SPEC 5 `planKeyedEntry`: None for a new run, else (attached Run)
        or a Refused. Called under the lock, before any policy."""
        if key is None or self.broken == "ignore-key" or session is None:
            return None
        holder = session.keys.get(key)
        if holder is None:
            return None
        if holder.digest != digest:
            raise Refused(409, "state_request_key_conflict", "the key was used for another request", holder.run_id)
        if holder.status in LIVE or holder is session.current():
            return holder
        raise Refused(409, "state_request_already_completed", "the key's run finished and a later run exists", holder.run_id)

    def policy(self, route, session):
        """The refusals of an entry that starts a new run (SPEC 7 table)."""
        current = session.current() if session else None
        if route == "start":
            if current is not None:
                raise Refused(409, "state_session_exists", "the session already has runs")
            return
        if current is None and route in ("resume", "retry"):
            raise Refused(404, "state_session_not_found", "no such session")
        if current is None:
            return
        if current.status == "running" or (route == "retry" and current.status in LIVE):
            raise Refused(409, "state_already_running", "the current run is live")

    def enter(self, sid, route, key, kind, value):
        """An entry: plan, policy, commit (one atomic step), or an attach.
        Returns (run, attached, script)."""
        digest = request_digest(kind, value) if key is not None else None
        for _ in range(REDECIDE_LIMIT):
            with self.cv:
                session = self.sessions.get(sid)
                holder = self.plan(session, key, digest)
                if holder is not None:
                    return holder, True, None
                self.policy(route, session)
                if route == "retry":
                    value = session.inputs[-1]["input"]
                text = input_text(value)
                script = Script(text, self.test_agent)
                expected = session.current() if session else None
            if script.admit_ms:
                # [admit:N]: decided, not yet committed; no run exists meanwhile.
                time.sleep(script.admit_ms / 1000)
            with self.cv:
                session = self.sessions.get(sid)
                current = session.current() if session else None
                if current is not expected or (key is not None and session and key in session.keys
                                                and self.broken != "ignore-key"):
                    continue  # the CAS failed or the key was taken: decide again
                if session is None:
                    session = self.sessions[sid] = Session(sid)
                if current is not None and current.status in LIVE:
                    self.finish(current, "completed")  # a suspended run ends when the next starts
                run = Run(session, uuid.uuid4().hex, len(session.runs) + 1, key, digest)
                session.runs.append(run)
                session.inputs.append({"runId": run.run_id, "input": value})
                if key is not None:
                    session.keys[key] = run
                self.cv.notify_all()
            threading.Thread(target=self.execute, args=(run, text, script), daemon=True).start()
            return run, False, script
        raise Refused(409, "state_already_running", "concurrent entries kept winning; try again")

    def delete(self, sid):
        with self.cv:
            session = self.sessions.pop(sid, None)
            if session is None:
                raise Refused(404, "state_session_not_found", "no such session")
            session.deleted = True
            for run in session.runs:
                if run.status in LIVE:
                    self.finish(run, "interrupted")
            self.cv.notify_all()


# --- HTTP ------------------------------------------------------------------

def path_id(segment):
    """A path segment percent-decoded exactly once, then held to SPEC 1."""
    value = unquote(segment, errors="strict") if "%" in segment else segment
    if not ID.match(value):
        raise Refused(400, "validation_error", "an id in the path is outside [A-Za-z0-9._:-]{1,256}")
    return value


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        # Head and body go out in two writes: without TCP_NODELAY, Nagle's
        # algorithm and the client's delayed ACK add ~40 ms to every answer.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connection.settimeout(HEAD_TIMEOUT_S)

    def log_message(self, *args):
        pass  # a key must never reach a log (SPEC 2)

    # answers
    def send_json(self, status, body):
        data = write_json(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        if self.close_connection:
            self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def send_refusal(self, r):
        body = {"code": r.code, "message": r.message}
        if r.run_id is not None:
            body["runId"] = r.run_id
        self.send_json(r.status, body)

    def stream(self, run, attached):
        """SSE: run-start, then the run's events until its finish."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        agent = self.server.agent
        frames = [("run-start", {"runId": run.run_id, "startSequence": run.seq, "attached": attached})]
        sent = 0
        deadline = time.monotonic() + STREAM_LIMIT_S
        while True:
            for event, data in frames:
                self.wfile.write(("event: %s\ndata: %s\n\n" % (event, json.dumps(data))).encode())
                if event == "finish":
                    return
            self.wfile.flush()
            with agent.cv:
                while sent == len(run.events) and not run.session.deleted and time.monotonic() < deadline:
                    agent.cv.wait(0.5)
                frames = run.events[sent:]
                sent = len(run.events)
                if not frames and (run.session.deleted or time.monotonic() >= deadline):
                    return

    # requests
    def target(self):
        """(path segments, query) of the request target, an absolute-form
        target (`http://host/...`, RFC 9112 3.2.2) read as its origin form."""
        path = self.path
        m = re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*", path)
        if m:
            path = path[m.end():] or "/"
        path, _, query = path.partition("?")
        return path.split("/")[1:], parse_qs(query, keep_blank_values=True)

    def key(self):
        """The request key, parsed before any lookup (SPEC 2): None when
        absent; a repeated or malformed header is refused, never echoed."""
        values = self.headers.get_all(KEY_HEADER) or []
        if len(values) > 1:
            raise Refused(400, "validation_error", "the request key header is repeated")
        if not values:
            return None
        value = values[0].strip(" \t")
        if not KEY.match(value):
            raise Refused(400, "validation_error", "the request key is malformed")
        return value

    def body(self):
        self.body_read = True
        length = self.headers.get("content-length")
        try:
            length = int(length or 0)
        except ValueError:
            raise Refused(400, "validation_error", "bad content-length")
        if length > MAX_BODY:
            self.close_connection = True  # the rest of the body is not read
            raise Refused(413, "payload_too_large", "the body is over 1 MiB")
        try:
            return parse_json(self.rfile.read(length))
        except (ValueError, UnicodeDecodeError):
            raise Refused(400, "validation_error", "the body is not JSON")
        except OSError:
            raise Refused(400, "validation_error", "the body did not arrive in time")

    def handle_one(self, method):
        self.body_read = False
        try:
            self.route(method)
        except Refused as r:
            if not self.body_read:
                self.drain()
            self.send_refusal(r)

    def drain(self):
        """Reads and drops a body a refusal did not need, so that the next
        request on the connection starts where it should."""
        try:
            length = int(self.headers.get("content-length") or 0)
        except ValueError:
            length = MAX_BODY + 1
        if length > MAX_BODY:
            self.close_connection = True
            return
        try:
            self.rfile.read(length)
        except OSError:
            self.close_connection = True

    def __getattr__(self, name):
        # Any other method (OPTIONS, a made-up one) is routed too: 405 on a
        # known route, 404 on an unknown one, never the library's 501 page.
        if name.startswith("do_") and name[3:].isupper():
            return lambda: self.handle_one(name[3:])
        raise AttributeError(name)

    def do_GET(self):
        self.handle_one("GET")

    def do_POST(self):
        self.handle_one("POST")

    def do_DELETE(self):
        self.handle_one("DELETE")

    def do_PUT(self):
        self.handle_one("PUT")

    def do_PATCH(self):
        self.handle_one("PATCH")

    def route(self, method):
        agent = self.server.agent
        parts, query = self.target()
        if parts == ["health"]:
            self.allow(method, "GET")
            return self.send_json(200, {"name": "python-agent-skeleton", "version": "0.1.0",
                                        "protocol": "reqkey-agent/1", "supportsRequestKey": True,
                                        "concurrentEntry": "reject", "durable": False})
        if len(parts) < 2 or parts[0] != "sessions" or len(parts) > 4:
            raise Refused(404, "not_found", "no such route")
        rest = parts[2:]
        if rest == []:
            self.allow(method, "GET", "DELETE")
            sid = path_id(parts[1])
            if method == "DELETE":
                agent.delete(sid)
                self.send_response(204)
                self.send_header("content-length", "0")
                return self.end_headers()
            return self.snapshot(sid)
        if len(rest) == 1 and rest[0] in ("start", "resume", "retry"):
            self.allow(method, "POST")
            return self.entry(path_id(parts[1]), rest[0])
        if rest == ["chat"]:
            self.allow(method, "GET", "POST")
            sid = path_id(parts[1])
            return self.chat_reconnect(sid) if method == "GET" else self.chat_send(sid)
        if len(rest) == 2 and rest[0] == "runs":
            self.allow(method, "GET")
            return self.run_read(path_id(parts[1]), path_id(rest[1]), query)
        raise Refused(404, "not_found", "no such route")

    def allow(self, method, *allowed):
        if method not in allowed:
            raise Refused(405, "method_not_allowed", "method not allowed on this route")

    def entry(self, sid, route):
        key = self.key()
        body = self.body()
        if not isinstance(body, dict):
            raise Refused(400, "validation_error", "the body is not a JSON object")
        if route in ("start", "resume"):
            if "input" not in body:
                raise Refused(400, "validation_error", "the body lacks `input`")
            kind, value = ("execute" if route == "start" else "resume"), body["input"]
        else:
            kind, value = "retry", None
        run, attached, _ = self.server.agent.enter(sid, route, key, kind, value)
        status, word = (200, "attached") if attached else (201, "started")
        self.send_json(status, {"sessionId": sid, "runId": run.run_id, "status": word,
                                "startSequence": run.seq})

    def chat_send(self, sid):
        key = self.key()
        body = self.body()
        messages = body.get("messages") if isinstance(body, dict) else None
        last = messages[-1] if isinstance(messages, list) and messages else None
        if not (isinstance(last, dict) and isinstance(last.get("role"), str)
                and isinstance(last.get("content"), str)):
            raise Refused(400, "validation_error", "`messages` must end with a {role, content} message")
        if last["role"] == "tool":
            key = None  # a tool result continues the run: keyless (SPEC 7)
        run, attached, script = self.server.agent.enter(sid, "chat", key, "execute", {"text": last["content"]})
        if not attached and script is not None and script.lose_run:
            raise Refused(500, "transport_error", "the send's run was committed but cannot be identified; re-read the session")
        self.stream(run, attached)

    def chat_reconnect(self, sid):
        # Not an entry: reads no key, starts nothing (SPEC 7 "Chat reconnect").
        with self.server.agent.cv:
            session = self.server.agent.sessions.get(sid)
            run = session.current() if session else None
        if run is None:
            raise Refused(404, "state_session_not_found", "no such session")
        self.stream(run, True)

    def snapshot(self, sid):
        with self.server.agent.cv:
            session = self.server.agent.sessions.get(sid)
            if session is None:
                raise Refused(404, "state_session_not_found", "no such session")
            body = {"sessionId": sid, "runs": [r.meta() for r in session.runs],
                    "inputs": [dict(i) for i in session.inputs]}
        self.send_json(200, body)

    def run_read(self, sid, run_id, query):
        wait = query.get("waitMs", ["0"])
        if len(wait) != 1 or not re.match(r"^\d{1,9}$", wait[0]):
            raise Refused(400, "validation_error", "waitMs is a whole number of milliseconds")
        agent = self.server.agent
        deadline = time.monotonic() + min(int(wait[0]), MAX_WAIT_MS) / 1000
        with agent.cv:
            while True:
                session = agent.sessions.get(sid)
                if session is None:
                    raise Refused(404, "state_session_not_found", "no such session")
                run = next((r for r in session.runs if r.run_id == run_id), None)
                if run is None:
                    raise Refused(404, "state_run_not_found", "no such run")
                left = deadline - time.monotonic()
                if run.status != "running" or left <= 0:
                    body = run.meta()
                    break
                agent.cv.wait(min(left, 0.5))
        self.send_json(200, body)


class Server(ThreadingHTTPServer):
    # The listen backlog: Python's default is 5, and a burst of 8 then overflows it; the kernel drops
    # the extra connections and the client retries them a second later, after the first request ended
    # (reqkey then cannot judge the burst: warning[listen_queue]).
    request_queue_size = 128
    daemon_threads = True


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=7080)
    p.add_argument("--test-agent", action="store_true", help="honour the SPEC 7 test markers")
    p.add_argument("--broken", choices=["ignore-key"], help="a deliberate bug, to watch the suite fail")
    a = p.parse_args()
    server = Server(("127.0.0.1", a.port), Handler)
    server.agent = Agent(a.test_agent, a.broken)
    print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
