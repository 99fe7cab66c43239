#!/usr/bin/env python3
"""A TEST DOUBLE of `reqkey certify` for testing certify-all.sh's plumbing before reqkey judges idem+http targets.

    fake_reqkey.py certify [--start CMD] --target idem+http://127.0.0.1:PORT|{port} --out DIR

It is not the judge and its verdicts certify nothing: it starts CMD like
`--start` does ({port} replaced, its own process group, stopped on exit),
runs two checks of its own (a keyed POST sent twice runs once; two
concurrent duplicates on /orders/slow run once) judged by /.reqkey/effects,
and writes a reqkey-results/1 document shaped as docs/reports.md says.
Exit 0 when both pass, 1 when one fails, 2 when the target never answers.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from probe import Probe  # noqa: E402

SEED = 7


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def scenario(sid: str, checks: list[str], ok: bool, message: str, actual) -> dict:
    return {
        "id": sid, "file": f"embedded/idempotency-key/{sid}.yaml", "level": "idempotency-key", "tags": [],
        "checks": checks, "summary": "fake", "verdict": "pass" if ok else "fail", "trials_run": 1,
        "trials_with_groups": 0, "trials_overlapped": 0, "duration_ms": 1,
        "failure": None if ok else {"trial": 0, "step": "steps[1] post", "message": message, "expected": {"count": 1},
                                    "actual": actual, "detail": None, "reason": None},
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("command")
    ap.add_argument("--start")
    ap.add_argument("--target", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    port = free_port()
    target = a.target.replace("{port}", str(port))
    proc = None
    if a.start:
        proc = subprocess.Popen(a.start.replace("{port}", str(port)), shell=True, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = "http://" + target.split("://", 1)[1]
    os.makedirs(a.out, exist_ok=True)
    try:
        p = Probe(url)
        health = None
        for _ in range(150):
            try:
                status, _, health, _ = p.request("GET", "/.reqkey/health")
                if status == 200:
                    break
            except OSError:
                time.sleep(0.2)
        if not isinstance(health, dict):
            print("fake reqkey: no /.reqkey/health", file=sys.stderr)
            return 2
        (_, sha) = p.order_request("POST", "/orders", "fake", "fake-once", {"n": 1})
        p.order_request("POST", "/orders", "fake", "fake-once", {"n": 1})
        once = p.effects_count("POST", "/orders", "fake", "fake-once", sha)
        answers = []
        body = {"sleepMs": 300}

        def go():
            answers.append(p.order_request("POST", "/orders/slow", "fake", "fake-race", body)[0][0])

        ts = [threading.Thread(target=go) for _ in range(2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(15)

        race = p.effects_count("POST", "/orders/slow", "fake", "fake-race", hashlib.sha256(json.dumps(body).encode()).hexdigest())
        scenarios = [
            scenario("fake.replay-once", ["idem.fake.once"], once == 1, f"ran {once} times", {"count": once}),
            scenario("fake.concurrent-once", ["idem.fake.once", "idem.fake.concurrent"], race == 1,
                     f"two concurrent duplicates ran {race} times <b>|x|</b>", {"count": race, "answers": answers}),
        ]
        failed = sum(1 for s in scenarios if s["verdict"] == "fail")
        doc = {
            "schema": "reqkey-results/1", "command": "certify", "certification": True, "reqkey_version": "fake",
            "date": "1970-01-01T00:00:00Z", "target": {"spec": a.target, "defaulted": False, "health": health},
            "profile": None, "not_applicable": [], "suite": {"source": "embedded/idempotency-key", "version": "0",
            "digest": "sha256:fake", "files": 2, "embedded": True}, "clause_coverage": None, "selection": [],
            "expected_failures": [], "seed": SEED, "duration_ms": 1,
            "counts": {"total": 2, "passed": 2 - failed, "failed": failed, "errored": 0, "indefinite": 0,
                       "expected_failures": 0, "unexpected_passes": 0},
            "exit_code": 1 if failed else 0, "closing_line": f"{2 - failed} passed, {failed} failed",
            "indefinite": None, "scenarios": scenarios,
        }
        with open(os.path.join(a.out, "results.json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=2)
        print(doc["closing_line"])
        return doc["exit_code"]
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(5)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
