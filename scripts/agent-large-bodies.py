#!/usr/bin/env python3
"""What 1 MiB bodies cost `reqkey serve agent` (issue 29, issue 39;
docs/benchmarks.md "Hostile clients" and "Large bodies").

    scripts/agent-large-bodies.py [REQKEY_BINARY] [COUNT]
        [--concurrent N] [--shape SHAPE] [--rounds R]

Starts `REQKEY_BINARY serve agent --store memory` (default
target/release/reqkey) and sends it bodies of just under 1 MiB as
`POST /sessions/.../start`, each session deleted after.

- Without --concurrent (issue 29): COUNT (default 30) bodies one after
  another, each followed by its `DELETE`.
- With --concurrent N (issue 39): R rounds (default 3) of N bodies sent at
  once from N threads (released together), then their `DELETE`s.

SHAPE (default `numbers`) is the body's input:

- `numbers`: `{"text":"large","n":[0,1,...,999,0,...]}` (about 250,000
  numbers; the soak benchmark's body);
- `zeros`: `[0,0,...]` (about 524,000 zeros: the most values a MiB holds);
- `string`: `{"text":"xxx..."}` (one string of a MiB);
- `objects`: `[{"k":0},{"k":0},...]` (about 130,000 small objects);
- `keys`: `{"k0000000":0,"k0000001":0,...}` (one object, about 80,000 keys).

Prints the server's RSS before, its VmHWM (the kernel's peak) after, and
its RSS 12 s later. Loopback only; bounded by COUNT or R x N and a 30 s
timeout per call.
"""
import argparse
import http.client
import re
import subprocess
import sys
import threading
import time

LIMIT = 1024 * 1024 - 64  # the server's limit is 1 MiB; the wrapper fits


def body_of(shape):
    if shape == "numbers":
        numbers, size, i = [], 0, 0
        while size < 1_000_000:
            n = str(i % 1000)
            numbers.append(n)
            size += len(n) + 1
            i += 1
        inner = '{"text":"large","n":[' + ",".join(numbers) + "]}"
    elif shape == "zeros":
        inner = "[" + ",".join(["0"] * ((LIMIT - 16) // 2)) + "]"
    elif shape == "string":
        inner = '{"text":"' + "x" * (LIMIT - 32) + '"}'
    elif shape == "objects":
        inner = "[" + ",".join(['{"k":0}'] * ((LIMIT - 16) // 8)) + "]"
    elif shape == "keys":
        inner = "{" + ",".join(f'"k{i:07d}":0' for i in range((LIMIT - 16) // 13)) + "}"
    else:
        sys.exit(f"unknown shape {shape}")
    body = ('{"input":' + inner + "}").encode()
    assert len(body) <= 1024 * 1024, len(body)
    return body


parser = argparse.ArgumentParser()
parser.add_argument("exe", nargs="?", default="target/release/reqkey")
parser.add_argument("count", nargs="?", type=int, default=30)
parser.add_argument("--concurrent", type=int, default=0)
parser.add_argument("--rounds", type=int, default=3)
parser.add_argument("--shape", default="numbers")
args = parser.parse_args()

server = subprocess.Popen(
    [args.exe, "serve", "agent", "--store", "memory", "--listen", "127.0.0.1:0"],
    stdout=subprocess.PIPE,
    text=True,
)
try:
    addr = None
    for _ in range(8):
        m = re.search(r"listening on http://([0-9.]+):(\d+)", server.stdout.readline())
        if m:
            addr = (m.group(1), int(m.group(2)))
            break
    if addr is None:
        sys.exit("the server did not print its address")

    def memory():
        status = open(f"/proc/{server.pid}/status").read()
        field = lambda k: int(re.search(k + r":\s+(\d+)", status).group(1)) / 1024
        return field("VmRSS"), field("VmHWM")

    def call(method, path, payload=None):
        c = http.client.HTTPConnection(*addr, timeout=30)
        headers = {"content-type": "application/json"} if payload is not None else {}
        c.request(method, path, payload, headers)
        r = c.getresponse()
        r.read()
        c.close()
        return r.status

    body = body_of(args.shape)
    time.sleep(0.5)
    before, _ = memory()
    failures = []
    if args.concurrent <= 0:
        for k in range(args.count):
            status = call("POST", f"/sessions/seq-{k}/start", body)
            if status != 201:
                sys.exit(f"POST answered {status}")
            call("DELETE", f"/sessions/seq-{k}")
        what = f"{args.count} bodies of {len(body)} bytes ({args.shape}) in turn"
    else:
        for r in range(args.rounds):
            gate = threading.Barrier(args.concurrent)

            def send(k):
                gate.wait(timeout=30)
                status = call("POST", f"/sessions/c-{r}-{k}/start", body)
                if status != 201:
                    failures.append(status)

            threads = [threading.Thread(target=send, args=(k,)) for k in range(args.concurrent)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            for k in range(args.concurrent):
                call("DELETE", f"/sessions/c-{r}-{k}")
        if failures:
            sys.exit(f"POSTs answered {failures}")
        what = (
            f"{args.rounds} rounds of {args.concurrent} concurrent bodies of "
            f"{len(body)} bytes ({args.shape})"
        )
    _, peak = memory()
    time.sleep(12)
    after, _ = memory()
    print(f"{what}: RSS before {before:.1f} MB, VmHWM {peak:.1f} MB, RSS 12 s after {after:.1f} MB")
finally:
    server.kill()
    server.wait()
