#!/usr/bin/env bash
# Certifies the Python example adapter through store+http, the way an
# implementer in another language would: the correct adapter must pass the
# whole store suite (exit 0); `--broken no-key-rule` must fail it (exit 1);
# `--broken racy` must fail the race scenarios with a linearizability
# counterexample (exit 1); `--broken scan` (a key lookup without an index)
# passes the suite, which cannot see speed, but `reqkey bench lookup
# --max-ratio 3` must flag it (exit 1) while passing the correct adapter
# (a 40x larger store: the scan must outgrow the fixed cost of an HTTP round trip). Exits non-zero
# if any of that does not hold (2 if reqkey or python3 is missing).
#
#   REQKEY=target/debug/reqkey docs/examples/check-python-adapter.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
reqkey="${REQKEY:-target/debug/reqkey}"
# Exit 2 (not judged), with a clear message, when there is no reqkey to run.
case "$reqkey" in */*) [ -f "$reqkey" ] && [ -x "$reqkey" ] ;; *) command -v "$reqkey" >/dev/null 2>&1 ;; esac || {
  echo "check-python-adapter.sh: the reqkey binary is missing: $reqkey is not an executable (build it with \`cargo build -p reqkey-harness\`, or set REQKEY)" >&2
  exit 2
}
command -v python3 >/dev/null 2>&1 || { echo "check-python-adapter.sh: python3 is needed" >&2; exit 2; }
# start() runs in a command substitution (a subshell): it records the
# adapters' pids in a file, which the cleanup reads (an array set there
# would be lost, and the adapters left running).
pidfile="$(mktemp)"
cleanup() { while read -r p; do kill "$p" 2>/dev/null || true; done <"$pidfile"; rm -f "$pidfile"; }
trap cleanup EXIT

# Starts the adapter with the given flags on a free port; prints the port.
start() {
  local log; log="$(mktemp)"
  python3 docs/examples/store_adapter.py --port 0 "$@" >"$log" 2>&1 &
  echo $! >>"$pidfile"
  for _ in $(seq 1 100); do
    port="$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$log")"
    [ -n "$port" ] && { echo "$port"; return 0; }
    sleep 0.1
  done
  cat "$log" >&2; echo "the Python adapter did not start" >&2; return 2
}

expect_exit() {  # expect_exit CODE LOGFILE -- reqkey args...
  local want="$1" log="$2"; shift 3
  set +e; "$reqkey" "$@" >"$log" 2>&1; local got=$?; set -e
  if [ "$got" != "$want" ]; then
    cat "$log" >&2; echo "FAIL: reqkey $* exited $got, expected $want" >&2; exit 1
  fi
  tail -n 1 "$log"
}

out="$(mktemp -d)"
port="$(start)"
echo "correct adapter:"
expect_exit 0 "$out/ok.log" -- run scenarios/store --target "store+http://127.0.0.1:$port" --quiet

port="$(start --broken no-key-rule)"
echo "adapter without the key rule:"
expect_exit 1 "$out/nokey.log" -- run scenarios/store --target "store+http://127.0.0.1:$port" --quiet
grep -q "FAIL  request-key.taken-names-holder" "$out/nokey.log" || { cat "$out/nokey.log"; exit 1; }
# The same bug in the reference store fails the same scenarios (the docs say
# so instead of quoting a count that would drift).
expect_exit 1 "$out/nokey-ref.log" -- run scenarios/store --target broken-memory:no-key-rule --quiet
failing() { sed -n 's/^FAIL  \([^ ]*\).*/\1/p' "$1" | sort -u; }
if [ "$(failing "$out/nokey.log")" != "$(failing "$out/nokey-ref.log")" ]; then
  diff <(failing "$out/nokey.log") <(failing "$out/nokey-ref.log") >&2 || true
  echo "FAIL: the Python adapter without the key rule and broken-memory:no-key-rule fail different scenarios" >&2; exit 1
fi
echo "  fails the same $(failing "$out/nokey.log" | wc -l) scenarios as broken-memory:no-key-rule"

port="$(start --broken racy)"
echo "racy adapter:"
expect_exit 1 "$out/racy.log" -- run scenarios/store --tag race --target "store+http://127.0.0.1:$port" --quiet
grep -q "FAIL  request-key.race" "$out/racy.log" || { cat "$out/racy.log"; exit 1; }
grep -qi "linearizab" "$out/racy.log" || { cat "$out/racy.log"; echo "no linearizability counterexample" >&2; exit 1; }
lookup=(bench lookup --small 1000 --large 40000 --samples 300 --max-ratio 3 --seed 1)
port="$(start)"
echo "key lookup of the correct adapter:"
expect_exit 0 "$out/lookup-ok.log" -- "${lookup[@]}" --target "store+http://127.0.0.1:$port"

port="$(start --broken scan)"
echo "adapter that scans for keys:"
expect_exit 0 "$out/scan-suite.log" -- run scenarios/store --target "store+http://127.0.0.1:$port" --quiet
expect_exit 1 "$out/scan.log" -- "${lookup[@]}" --target "store+http://127.0.0.1:$port"
grep -q "the lookup grows with the store" "$out/scan.log" || { cat "$out/scan.log"; exit 1; }
echo "the Python adapter passes when correct and fails when broken"
