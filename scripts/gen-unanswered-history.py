#!/usr/bin/env python3
"""Writes a history with many unanswered (timed-out) operations, in the
JSON form `reqkey check history` reads (issue 39, docs/benchmarks.md
"Unanswered operations").

    scripts/gen-unanswered-history.py KIND COUNT > FILE

KIND is `reads` (COUNT unanswered `getCurrentRun`s, each from a process
of its own, around a commit that is answered and a read that sees it:
linearizable) or `commits` (COUNT unanswered commits of distinct runs,
then a read that sees the last of them as the session's only run:
linearizable only if that one commit, alone, took effect). Deterministic;
bounded by COUNT.
"""
import json
import sys

kind = sys.argv[1] if len(sys.argv) > 1 else "reads"
count = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000


def commit(run):
    return {"startRun": {"sessionId": "s", "runId": run, "expectedCurrentRunId": None,
                         "input": {"text": "a"}}}


def run(run_id, seq):
    return {"sessionId": "s", "runId": run_id, "status": "running", "startSequence": seq}


entries = []
if kind == "reads":
    for i in range(count):
        entries.append({"process": f"p{i}", "call_ns": i, "op": "getCurrentRun",
                        "args": {"sessionId": "s"}})
    entries.append({"process": "a", "call_ns": count // 2, "return_ns": count // 2 + 10,
                    "op": "commitRunStart", "args": commit("r1"),
                    "answer": {"ok": {"outcome": "started", "run": run("r1", 1)}}})
    entries.append({"process": "b", "call_ns": count + 10, "return_ns": count + 20,
                    "op": "getRun", "args": {"sessionId": "s", "runId": "r1"},
                    "answer": {"ok": run("r1", 1)}})
elif kind == "commits":
    for i in range(count):
        entries.append({"process": f"p{i}", "call_ns": i, "op": "commitRunStart",
                        "args": commit(f"r{i}")})
    last = f"r{count - 1}"
    entries.append({"process": "b", "call_ns": count + 10, "return_ns": count + 20,
                    "op": "listRuns", "args": {"sessionId": "s"},
                    "answer": {"ok": [run(last, 1)]}})
else:
    sys.exit("KIND is reads or commits")

out = sys.stdout
out.write("[\n")
for k, e in enumerate(entries):
    out.write(json.dumps(e, separators=(",", ":")))
    out.write(",\n" if k + 1 < len(entries) else "\n")
out.write("]\n")
