# idem_app.py: the reqkey-idem/1 app (docs/idempotency-key.md) around the idempotency layer you judge.
import hashlib, json, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK, ORDER, EFFECTS = threading.Lock(), [0], {}  # EFFECTS: (method, path, caller, key, sha) -> count
PROFILE = {"keyRequired": True, "keySyntax": "sf-string", "invalidKeyStatus": 400,
           "fingerprint": "json", "mismatchStatus": 422, "concurrent": "conflict",
           "concurrentStatus": 409, "errors": "stored", "scope": ["caller", "method", "path"],
           "expiryMs": None, "lockMs": None, "replayHeader": None, "durable": False}
CREATE = {("POST", "/orders"), ("PUT", "/orders"), ("POST", "/payments"), ("POST", "/orders/slow")}

def effect(method, path, headers, body):
    with LOCK:
        ORDER[0] += 1
        k = (method, path, headers.get("X-Reqkey-Caller", ""), headers.get("Idempotency-Key"),
             hashlib.sha256(body).hexdigest())
        EFFECTS[k] = EFFECTS.get(k, 0) + 1
        return ORDER[0]

def app(method, path, headers, body):
    """The routes behind the layer; answers (status, extra headers, body bytes)."""
    caller = headers.get("X-Reqkey-Caller", "")
    try:
        echo = json.loads(body)
    except ValueError:
        echo = None
    if (method, path) not in CREATE | {("POST", "/orders/fail")}:
        return 404, {}, b'{"error": "no such route"}'
    if not isinstance(echo, dict):  # the handler's own 4xx: it counts its run and refuses the body
        n = effect(method, path, headers, body)
        return 422, {"X-Reqkey-Order": str(n)}, json.dumps({"error": "the body must be a JSON object", "order": n, "caller": caller}).encode()
    if (method, path) == ("POST", "/orders/slow"):
        time.sleep(min(int(echo.get("sleepMs", 1000)), 10000) / 1000)
    if (method, path) in CREATE:
        n = effect(method, path, headers, body)
        return 201, {"X-Reqkey-Order": str(n)}, json.dumps({"order": n, "caller": caller, "echo": echo}).encode()
    n = effect(method, path, headers, body)  # POST /orders/fail
    return 500, {"X-Reqkey-Order": str(n)}, json.dumps({"error": "failed after effect", "order": n, "caller": caller}).encode()

def guarded(method, path, headers, body):
    # The layer being judged goes here: it sees the request and calls `app` (at most once per key).
    return app(method, path, headers, body)

class Server(ThreadingHTTPServer):
    # The listen backlog: Python's default is 5, and a burst of 8 then overflows it; the kernel drops
    # the extra connections and the client retries them a second later, after the first request ended.
    request_queue_size = 128
    daemon_threads = True

class Handler(BaseHTTPRequestHandler):
    def answer(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if (self.command, self.path) == ("GET", "/.reqkey/health"):
            implementation = {"name": "none", "version": "0", "storage": "memory"}
            status, extra, out = 200, {}, json.dumps({"protocol": "reqkey-idem/1",
                "implementation": implementation, "profile": PROFILE}).encode()
        elif (self.command, self.path) == ("GET", "/.reqkey/effects"):
            with LOCK:
                rows = [dict(zip(("method", "path", "caller", "key", "bodySha256"), k), count=c)
                        for k, c in EFFECTS.items()]
            status, extra, out = 200, {}, json.dumps({"effects": rows}).encode()
        else:
            status, extra, out = guarded(self.command, self.path, self.headers, body)
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **extra}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = answer

if __name__ == "__main__":
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 7090
    Server(("127.0.0.1", port), Handler).serve_forever()
