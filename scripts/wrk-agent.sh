#!/usr/bin/env bash
# Runs wrk (Debian's package) against the reference agent server on
# loopback, RUNS rounds of one keyless run, one keyed run (fresh session,
# and fresh key when keyed, per request) and one run of GET /health (the
# control: no store, no run, so its tail is the machine's and the HTTP
# stack's), alternating so that load drifting on the machine and the
# store's growth fall on every mode alike; prints one WRK line per run,
# then a summary per mode and the server's memory per session
# (docs/benchmarks.md).
# Usage: scripts/wrk-agent.sh [RUNS] [SECONDS] [STORE]   (defaults 20 5 memory)
# Needs target/release/reqkey (cargo build --release -p reqkey-harness).
set -euo pipefail
cd "$(dirname "$0")/.."
runs="${1:-20}"; secs="${2:-5}"; store="${3:-memory}"
reqkey="${REQKEY:-target/release/reqkey}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 2; }
[ -x "$reqkey" ] || { echo "$reqkey is missing: cargo build --release -p reqkey-harness" >&2; exit 2; }
log="$(mktemp)"; out="$(mktemp)"
"$reqkey" serve agent --store "$store" --listen 127.0.0.1:0 >"$log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null; rm -f "$log" "$out"' EXIT
for _ in $(seq 1 100); do grep -q "listening on" "$log" && break; sleep 0.1; done
url="$(sed -n 's/^listening on //p' "$log" | head -n1)"
[ -n "$url" ] || { echo "the server did not start:" >&2; cat "$log" >&2; exit 2; }
rss_kib() { ps -o rss= -p "$server" | tr -d ' '; }
# The server's user + system CPU time in clock ticks (fields 14 and 15 of
# /proc/PID/stat; its name field has no spaces): CPU per request does not
# depend on what else the machine runs, as the rate does.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$server/stat"; }
hz="$(getconf CLK_TCK)"
rss_before="$(rss_kib)"
for i in $(seq 1 "$runs"); do
  for mode in keyless keyed health; do
    before="$(cpu_ticks)"
    line="$(wrk -t2 -c32 -d"${secs}s" -s scripts/wrk-agent.lua "$url" -- "$mode" | grep '^WRK')"
    cpu="$(( $(cpu_ticks) - before ))"
    requests="$(sed -n 's/.*requests=\([0-9]*\).*/\1/p' <<<"$line")"
    line="$line server_cpu_us_per_request=$(awk -v t="$cpu" -v hz="$hz" -v n="$requests" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }')"
    echo "$mode run $i: $line" | tee -a "$out"
  done
done
rss_after="$(rss_kib)"
awk -v before="$rss_before" -v after="$rss_after" '
  function field(name,   i, kv) {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); if (kv[1] == name) return kv[2] + 0 }
  }
  {
    m = $1; n[m]++; rps = field("rps"); p = field("p999_ms"); x = field("max_ms")
    req[m] += field("requests"); sum[m] += rps; errs[m] += field("errors")
    cpu[m] += field("server_cpu_us_per_request")
    if (n[m] == 1 || rps < lo[m]) lo[m] = rps
    if (n[m] == 1 || rps > hi[m]) hi[m] = rps
    if (p > p999[m]) p999[m] = p
    if (x > mx[m]) mx[m] = x
    if (x > 100) over[m]++
  }
  END {
    for (m in n)
      printf "%s: %d runs, %.0f-%.0f requests/s (mean %.0f), worst p99.9 %.2f ms, max %.2f ms, runs with a request over 100 ms: %d, errors %d, server CPU %.1f us per request\n",
        m, n[m], lo[m], hi[m], sum[m] / n[m], p999[m], mx[m], over[m] + 0, errs[m], cpu[m] / n[m]
    printf "keyed / keyless mean rate: %.2fx; by server CPU per request (keyless / keyed): %.2fx\n",
      (sum["keyed"] / n["keyed"]) / (sum["keyless"] / n["keyless"]), (cpu["keyless"] / n["keyless"]) / (cpu["keyed"] / n["keyed"])
    sessions = req["keyed"] + req["keyless"]  # health creates none
    printf "server RSS %d KiB before, %d KiB after %d sessions (one run each): %.2f KiB per session\n",
      before, after, sessions, (after - before) / sessions
  }' "$out"
