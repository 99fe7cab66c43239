# orders_api.py: a small orders API with its own Idempotency-Key layer, Bearer
# authentication and its own paths. It knows nothing of reqkey: it is certified
# unchanged through an API map (orders_api.map.yaml; docs/idempotency-key.md,
# "Certifying your own API").
#
#   ORDERS_API_TOKENS='alice=tok-a,bob=tok-b' python3 orders_api.py --port 7095
#   --broken BUG[,BUG]   ships bugs on purpose (harness/tests/api_map.rs):
#     check-then-set     the layer looks for the key, then takes it after the
#                        handler ran (a burst runs twice)
#     racy-declines      the same, on declined charges only (the failing route)
#     unscoped-key       one record per method, path and key, whoever asks:
#                        another customer's retry gets the first one's order
import hashlib, json, os, sys, threading, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

TOKENS = dict(p.split("=", 1) for p in os.environ.get("ORDERS_API_TOKENS", "").split(",") if "=" in p)
CUSTOMERS = {token: name for name, token in TOKENS.items()}
BUGS = set(sys.argv[sys.argv.index("--broken") + 1].split(",")) if "--broken" in sys.argv else set()
LOCK, SEQ, ORDERS, CHARGES, KEYS = threading.Lock(), [0], {}, {}, {}

def new_id(prefix):
    with LOCK:
        SEQ[0] += 1
        return f"{prefix}_{SEQ[0]}"

def create_order(customer, body, method):
    if not isinstance(body.get("sku"), str):
        return 400, {}, {"error": {"type": "invalid_request", "message": "sku is required"}}
    time.sleep(min(int(body.get("processing_ms", 0)), 10000) / 1000)
    order = {"id": new_id("ord"), "customer": customer, "sku": body["sku"],
             "quantity": body.get("quantity", 1), "metadata": body.get("metadata"), "via": method}
    with LOCK:
        ORDERS[order["id"]] = order
    return 201, {"Location": f"/v1/orders/{order['id']}"}, order

def create_charge(customer, body):
    charge = {"id": new_id("ch"), "customer": customer, "amount": body.get("amount"),
              "metadata": body.get("metadata"),
              "status": "declined" if body.get("card") == "declined" else "succeeded"}
    with LOCK:
        CHARGES[charge["id"]] = charge
    if charge["status"] == "declined":
        return 402, {}, {"error": {"type": "card_declined", "charge": charge["id"]}}
    return 201, {"Location": f"/v1/charges/{charge['id']}"}, charge

def idempotent(customer, method, path, headers, raw, handler):
    """The layer: one record per (customer, method, path, key); the body's JSON value is its fingerprint."""
    key = headers.get("Idempotency-Key")
    if key is None or key == "":
        return 400, {}, {"error": {"type": "idempotency_key_required"}}
    body = json.loads(raw)
    fingerprint = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    slot = (None if "unscoped-key" in BUGS else customer, method, path, key)
    racy = "check-then-set" in BUGS or ("racy-declines" in BUGS and body.get("card") == "declined")
    if racy:
        with LOCK:
            record = KEYS.get(slot)
        if record is None:
            time.sleep(0.05)
    else:
        with LOCK:
            record = KEYS.get(slot)
            if record is None:
                KEYS[slot] = {"fingerprint": fingerprint, "answer": None}
    if record is not None:
        if record["fingerprint"] != fingerprint:
            return 422, {}, {"error": {"type": "idempotency_key_reused"}}
        if record["answer"] is None:
            return 409, {}, {"error": {"type": "idempotency_key_in_use"}}
        status, extra, body = record["answer"]
        return status, {**extra, "Idempotent-Replayed": "true"}, body
    answer = handler()
    with LOCK:
        KEYS[slot] = {"fingerprint": fingerprint, "answer": answer}
    return answer

class Handler(BaseHTTPRequestHandler):
    def answer(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        path = self.path.split("?")[0]
        auth = self.headers.get("Authorization", "")
        customer = CUSTOMERS.get(auth[len("Bearer "):]) if auth.startswith("Bearer ") else None
        if path == "/v1/health":
            status, extra, out = 200, {}, {"ok": True}
        elif customer is None:
            status, extra, out = 401, {}, {"error": {"type": "unauthorized"}}
        elif self.command == "GET" and path in ("/v1/orders", "/v1/charges"):
            with LOCK:
                rows = ORDERS if path == "/v1/orders" else CHARGES
                # A list shows each resource's summary, never its metadata: the
                # fuzz pass sends bodies up to 256 KiB, and a list that echoed
                # them all would outgrow any reader's cap (reqkey's: 16 MiB).
                status, extra, out = 200, {}, {"data": [
                    {k: v for k, v in r.items() if k != "metadata"}
                    for r in rows.values() if r["customer"] == customer]}
        elif self.command == "DELETE" and path.startswith(("/v1/orders/", "/v1/charges/")):
            with LOCK:
                rows = ORDERS if path.startswith("/v1/orders/") else CHARGES
                found = rows.get(path.rsplit("/", 1)[1])
                if found and found["customer"] == customer:
                    del rows[found["id"]]
            status, extra, out = (204, {}, None) if found else (404, {}, {"error": {"type": "not_found"}})
        elif (self.command, path) in (("POST", "/v1/orders"), ("PUT", "/v1/orders"), ("POST", "/v1/charges")):
            try:
                body = json.loads(raw)
            except ValueError:
                body = None
            if not isinstance(body, dict):
                status, extra, out = 400, {}, {"error": {"type": "invalid_request", "message": "a JSON object"}}
            else:
                handler = (lambda: create_charge(customer, body)) if path == "/v1/charges" \
                    else (lambda: create_order(customer, body, self.command))
                status, extra, out = idempotent(customer, self.command, path, self.headers, raw, handler)
        else:
            status, extra, out = 404, {}, {"error": {"type": "not_found"}}
        data = b"" if out is None else json.dumps(out).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **extra}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    do_GET = do_POST = do_PUT = do_DELETE = answer
    def log_message(self, *args):
        pass

if __name__ == "__main__":
    port = int(sys.argv[sys.argv.index("--port") + 1]) if "--port" in sys.argv else 7095
    ThreadingHTTPServer.request_queue_size = 128  # a burst of duplicates must not wait for a SYN retry
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()
