#!/usr/bin/env bash
# Regenerates the certificates of the reference backends under reports/.
#
#   reports/regenerate.sh            # every backend below
#   reports/regenerate.sh memory     # only the named ones
#
# Run it from anywhere; it works from the repository root. Each backend is
# certified with `reqkey certify` (the whole suite of its level, nothing
# skipped) into reports/<name>/: certificate.md, junit.xml, results.json.
# The test harness/tests/reports.rs fails when a committed certificate was
# made against another suite digest than the current scenarios: after
# changing a scenario, run this script and commit reports/.
#
# Backends that need a service read its address from the environment, as
# the tests do:
#   REQKEY_POSTGRES_URL (default postgres://postgres@127.0.0.1:5432/test)
#   REQKEY_REDIS_URL    (default redis://127.0.0.1:6379/)
# Exit code: 0 when every certificate was written and is green, else the
# first non-zero exit code of `reqkey certify`.
set -euo pipefail
cd "$(dirname "$0")/.."

# name -> --target. A backend is listed here once its target is in reqkey.
# `sqlite` certifies a scratch file (removed before and after); `memory-http`
# is the memory store behind `reqkey serve store`, certified through the
# reqkey-store/1 wire exactly as an adapter in another language would be.
# `reference-agent` is the reference agent server (in process, over HTTP on
# an ephemeral port) certified against the agent suite; the
# `reference-agent-*` variants are the same server on the other profiles
# (keys ignored; concurrentEntry interrupt_previous; entries admitted one at
# a time with entryWaitMs declared), each certified against the profile its
# /health declares. `reference-agent-crash` is three reference servers over
# one PostgreSQL database, started by the harness (`--start`), so that the
# crash scenarios (kill, pause, restart) run: the certificate of crash
# behaviour. `reference-idem` is the reference Idempotency-Key middleware
# (SPEC 10) in process over memory; `reference-idem-redis-crash` the same
# over Redis, started by the harness, so that its crash scenario (a
# completed key survives a restart) runs.
SQLITE_FILE="${TMPDIR:-/tmp}/reqkey-certify.sqlite"
HTTP_LISTEN="127.0.0.1:7311"
declare -A TARGETS=(
  [memory]="memory"
  [sqlite]="sqlite:$SQLITE_FILE"
  [postgres]="${REQKEY_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
  [redis]="${REQKEY_REDIS_URL:-redis://127.0.0.1:6379/}"
  [memory-http]="store+http://$HTTP_LISTEN"
  [reference-agent]="reference-agent"
  [reference-agent-no-request-keys]="reference-agent:no-request-keys"
  [reference-agent-interrupt-previous]="reference-agent:interrupt-previous"
  [reference-agent-entry-wait]="reference-agent:entry-wait"
  [reference-agent-crash]="http://127.0.0.1:{port0},http://127.0.0.1:{port1},http://127.0.0.1:{port2}"
  [reference-idem]="reference-idem"
  [reference-idem-redis-crash]="idem+http://127.0.0.1:{port}"
)
ORDER=(memory sqlite postgres redis memory-http reference-agent reference-agent-no-request-keys reference-agent-interrupt-previous reference-agent-entry-wait reference-agent-crash reference-idem reference-idem-redis-crash)

rm_sqlite() { rm -f "$SQLITE_FILE" "$SQLITE_FILE-wal" "$SQLITE_FILE-shm"; }
server_pid=""
stop_server() { if [ -n "$server_pid" ]; then kill "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; server_pid=""; fi; }
trap 'stop_server; rm_sqlite' EXIT

cargo build -q -p reqkey-harness --bin reqkey
bin="${CARGO_TARGET_DIR:-target}/debug/reqkey"

names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${ORDER[@]}")

status=0
for name in "${names[@]}"; do
  target="${TARGETS[$name]:-}"
  if [ -z "$target" ]; then
    echo "reports/regenerate.sh: unknown backend '$name' (known: ${ORDER[*]})" >&2
    exit 2
  fi
  echo "== $name ($target)"
  rc=0
  case "$name" in
    sqlite) rm_sqlite ;;
    memory-http)
      "$bin" serve store --store memory --listen "$HTTP_LISTEN" >/dev/null 2>&1 &
      server_pid=$!
      for _ in $(seq 1 50); do curl -sf "http://$HTTP_LISTEN/health" >/dev/null 2>&1 && break; sleep 0.1; done
      ;;
  esac
  start=()
  if [ "$name" = reference-agent-crash ]; then
    pg="${REQKEY_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
    for _ in 1 2 3; do start+=(--start "$bin serve agent --store $pg --listen 127.0.0.1:{port}"); done
  fi
  if [ "$name" = reference-idem-redis-crash ]; then
    redis="${REQKEY_REDIS_URL:-redis://127.0.0.1:6379/}"
    start+=(--start "$bin serve idem --storage $redis --listen 127.0.0.1:{port}")
  fi
  "$bin" certify "${start[@]}" --target "$target" --out "reports/$name" --quiet || rc=$?
  [ "$name" = memory-http ] && stop_server
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
done
exit "$status"
