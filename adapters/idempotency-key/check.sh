#!/usr/bin/env bash
# Smoke-checks every wrapper over every storage it has: install, start on a free port, probe.py, stop.
#
#   adapters/idempotency-key/check.sh [LOG_DIR]
#
# First `probe.py --selftest` proves the probe fails on an app without an
# idempotency layer. Then for each line of libraries.txt and each storage:
# start `run.sh LIB --port P --storage S` (Redis at $REQKEY_REDIS_URL,
# default redis://127.0.0.1:6379/0, under a key prefix of its own), wait at
# most 30 s for /.reqkey/health, run probe.py (health JSON with every profile
# field, a keyed POST sent twice runs once per /.reqkey/effects or is answered
# the first order (the library is in the path), each route
# runs and is counted), and stop it. Exits 1 if any probe fails, 2 if the
# tools are missing or a wrapper never answers.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
logs="${1:-$(mktemp -d)}"
mkdir -p "$logs"
redis_url="${REQKEY_REDIS_URL:-redis://127.0.0.1:6379/0}"
start_timeout_s=30

"$here/install.sh"
python3 "$here/probe.py" --selftest

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

pid=""
stop() {
  [ -n "$pid" ] || return 0
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  pid=""
}
trap stop EXIT

failed=0; total=0
while read -r lib storages; do
  case "$lib" in ''|'#'*) continue ;; esac
  if [ "$lib" = axum-idempotent ] && ! [ -x "$here/.deps/rust-target/debug/reqkey-idem-axum-idempotent" ]; then
    echo "check.sh: $lib skipped: built only when the table is regenerated (install.sh --with-rust)"
    continue
  fi
  for storage in $storages; do
    storage="${storage%!}"
    total=$((total + 1))
    port="$(free_port)"
    log="$logs/$lib-$storage.log"
    "$here/run.sh" "$lib" --port "$port" --storage "$storage" --redis-url "$redis_url" \
      --key-prefix "reqkey-check-$$-$RANDOM" >"$log" 2>&1 &
    pid=$!
    up=0
    for _ in $(seq 1 $((start_timeout_s * 5))); do
      if curl -fsS -m 2 "http://127.0.0.1:$port/.reqkey/health" >/dev/null 2>&1; then up=1; break; fi
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.2
    done
    if [ "$up" != 1 ]; then
      cat "$log" >&2
      echo "check.sh: $lib ($storage) did not answer /.reqkey/health within ${start_timeout_s}s" >&2
      stop; exit 2
    fi
    if python3 "$here/probe.py" --url "http://127.0.0.1:$port" --storage "$storage" >>"$log" 2>&1; then
      echo "ok   $lib ($storage)"
    else
      echo "FAIL $lib ($storage):" >&2; sed 's/^/    /' "$log" >&2
      failed=$((failed + 1))
    fi
    stop
  done
done <"$here/libraries.txt"

echo "check.sh: $((total - failed))/$total wrapper x storage probes held (logs: $logs)"
[ "$failed" = 0 ]
