#!/usr/bin/env python3
"""What 1 MiB bodies sent one after another cost `reqkey serve agent`
(issue 29, docs/benchmarks.md "Hostile clients").

    scripts/agent-large-bodies.py [REQKEY_BINARY] [COUNT]

Starts `REQKEY_BINARY serve agent --store memory` (default
target/release/reqkey), sends COUNT (default 30) times the soak
benchmark's 1 MiB body (`{"input":{"text":"large","n":[...]}}`, about
250,000 numbers) as `POST /sessions/seq-N/start`, each followed by its
`DELETE`, one at a time, and prints the server's RSS before, its VmHWM
after, and its RSS 12 s later. Loopback only; bounded by COUNT and a 30 s
timeout per call.
"""
import http.client
import re
import subprocess
import sys
import time

exe = sys.argv[1] if len(sys.argv) > 1 else "target/release/reqkey"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 30

server = subprocess.Popen(
    [exe, "serve", "agent", "--store", "memory", "--listen", "127.0.0.1:0"],
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

    numbers, size, i = [], 0, 0
    while size < 1_000_000:
        n = str(i % 1000)
        numbers.append(n)
        size += len(n) + 1
        i += 1
    body = ('{"input":{"text":"large","n":[' + ",".join(numbers) + "]}}").encode()
    time.sleep(0.5)
    before, _ = memory()
    for k in range(count):
        c = http.client.HTTPConnection(*addr, timeout=30)
        c.request("POST", f"/sessions/seq-{k}/start", body, {"content-type": "application/json"})
        r = c.getresponse()
        r.read()
        if r.status != 201:
            sys.exit(f"POST answered {r.status}")
        c.request("DELETE", f"/sessions/seq-{k}")
        c.getresponse().read()
        c.close()
    _, peak = memory()
    time.sleep(12)
    after, _ = memory()
    print(
        f"{count} bodies of {len(body)} bytes in turn: RSS before {before:.1f} MB, "
        f"VmHWM {peak:.1f} MB, RSS 12 s after {after:.1f} MB"
    )
finally:
    server.kill()
    server.wait()
