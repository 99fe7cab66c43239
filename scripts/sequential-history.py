#!/usr/bin/env python3
"""Writes a sequential store history (one session, N commits one after the other) for `reqkey check history`.

    scripts/sequential-history.py N good|bad FILE

Each commit starts the next run from the last (reqkey's JSON history form,
docs/race-safety.md); with `bad` the last answer names a start sequence no
order gives, so the history is not linearizable and its failing subset is
every write before it. The figures of check history's memory at scale
(docs/benchmarks.md, "check history's memory") are measured on these files:

    /usr/bin/time -f "%e s %M KB" reqkey check history FILE
"""

import sys


def main() -> None:
    if len(sys.argv) != 4 or sys.argv[2] not in ("good", "bad") or not sys.argv[1].isdigit():
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        sys.exit(2)
    n, bad, path = int(sys.argv[1]), sys.argv[2] == "bad", sys.argv[3]
    with open(path, "w", encoding="utf-8") as out:
        out.write("[\n")
        for i in range(n):
            expected = "null" if i == 0 else f'"r{i - 1}"'
            seq = i + 5 if bad and i == n - 1 else i + 1
            request = (
                f'"op":"commitRunStart","args":{{"startRun":{{"sessionId":"s","runId":"r{i}",'
                f'"expectedCurrentRunId":{expected},"input":{{"text":"hello world {i}"}},'
                f'"requestKey":"k{i}","requestDigest":"d{i}"}}}}'
            )
            answer = (
                f'{{"ok":{{"outcome":"started","run":{{"sessionId":"s","runId":"r{i}","status":"running",'
                f'"startSequence":{seq},"requestKey":"k{i}","requestDigest":"d{i}"}}}}}}'
            )
            sep = ",\n" if i + 1 < n else "\n"
            out.write(f'{{"process":"c.0","call_ns":{10 * i},"return_ns":{10 * i + 5},{request},"answer":{answer}}}{sep}')
        out.write("]")


if __name__ == "__main__":
    main()
