#!/usr/bin/env bash
# Certifies the Python skeleton agent server (docs/examples/agent_server.py)
# over HTTP, the way an independent agent server is certified: with its test
# agent on, it must pass every agent scenario its declared profile admits
# (supportsRequestKey true, concurrentEntry reject: exit 0), and with
# `--broken ignore-key` (keys read but never looked up) it must fail the
# keyed scenarios (exit 1). Exits non-zero if any of that does not hold (2
# if reqkey or python3 is missing). Takes about 15 s.
#
#   REQKEY=target/debug/reqkey docs/examples/check-python-agent.sh
set -euo pipefail
repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
reqkey="${REQKEY:-target/debug/reqkey}"
case "$reqkey" in */*) [ -f "$reqkey" ] && [ -x "$reqkey" ] ;; *) command -v "$reqkey" >/dev/null 2>&1 ;; esac || {
  echo "check-python-agent.sh: the reqkey binary is missing: $reqkey is not an executable (build it with \`cargo build -p reqkey-harness\`, or set REQKEY)" >&2
  exit 2
}
command -v python3 >/dev/null 2>&1 || { echo "check-python-agent.sh: python3 is needed" >&2; exit 2; }
# start() runs in a command substitution (a subshell): it records the
# servers' pids in a file, which the cleanup reads.
pidfile="$(mktemp)"
cleanup() { while read -r p; do kill "$p" 2>/dev/null || true; done <"$pidfile"; rm -f "$pidfile"; }
trap cleanup EXIT

# Starts the server with the given flags on a free port; prints the port.
start() {
  local log; log="$(mktemp)"
  python3 docs/examples/agent_server.py --port 0 --test-agent "$@" >"$log" 2>&1 &
  echo $! >>"$pidfile"
  for _ in $(seq 1 100); do
    port="$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$log")"
    [ -n "$port" ] && { echo "$port"; return 0; }
    sleep 0.1
  done
  cat "$log" >&2; echo "the Python agent server did not start" >&2; return 2
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
echo "the skeleton agent server:"
expect_exit 0 "$out/ok.log" -- run --target "http://127.0.0.1:$port"
grep -q "profile: supportsRequestKey: true, concurrentEntry: reject (declared by /health)" "$out/ok.log" \
  || { cat "$out/ok.log"; echo "FAIL: not judged under the profile it declares" >&2; exit 1; }
if grep -q "warning\[nagle_stall\]" "$out/ok.log"; then
  cat "$out/ok.log"; echo "FAIL: the skeleton's answers stall (TCP_NODELAY)" >&2; exit 1
fi

port="$(start --broken ignore-key)"
echo "the skeleton that ignores the key while declaring it records keys:"
expect_exit 1 "$out/broken.log" -- run --target "http://127.0.0.1:$port"
for s in agent.key-conflict agent.keyed-retry agent.concurrent-duplicates; do
  grep -q "^FAIL  $s " "$out/broken.log" || { cat "$out/broken.log"; echo "FAIL: $s did not fail" >&2; exit 1; }
done
echo "the Python agent server passes when correct and fails when it ignores keys"
