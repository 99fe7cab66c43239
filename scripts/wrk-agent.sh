#!/usr/bin/env bash
# Runs wrk (Debian's package) against the reference agent server on
# loopback, keyless then keyed (fresh session and key per request), RUNS
# times each, and prints one WRK line per run (docs/benchmarks.md).
# Usage: scripts/wrk-agent.sh [RUNS] [SECONDS] [STORE]   (defaults 20 5 memory)
# Needs target/release/reqkey (cargo build --release -p reqkey-harness).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"; secs="${2:-5}"; store="${3:-memory}"
reqkey="${REQKEY:-target/release/reqkey}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 2; }
[ -x "$reqkey" ] || { echo "$reqkey is missing: cargo build --release -p reqkey-harness" >&2; exit 2; }
log="$(mktemp)"
"$reqkey" serve agent --store "$store" --listen 127.0.0.1:0 >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
url="$(sed -n 's/^listening on //p' "$log" | head -n1)"
[ -n "$url" ] || { echo "the server did not start:" >&2; cat "$log" >&2; exit 2; }
for mode in keyless keyed; do
  for i in $(seq 1 "$runs"); do
    printf '%s run %s: ' "$mode" "$i"
    wrk -t2 -c32 -d"${secs}s" -s scripts/wrk-agent.lua "$url" -- "$mode" | grep '^WRK'
  done
done
echo "server RSS after all runs: $(ps -o rss= -p "$server") KiB"
