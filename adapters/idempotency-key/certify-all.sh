#!/usr/bin/env bash
# Certifies every wrapped library x storage with `reqkey certify` and writes docs/conformance/idempotency-key.md.
#
#   REQKEY=target/release/reqkey adapters/idempotency-key/certify-all.sh [OUT_DIR]
#
# For each line of libraries.txt and each storage: first the wrapper is
# started once to save its /.reqkey/health (health.json: what it declares,
# even if certification cannot judge it), then it is started on a free port
# and judged with
#   $REQKEY certify --target idem+http://127.0.0.1:PORT --out OUT_DIR/LIB-S
# With CERTIFY_START=1 the harness starts it instead, so that it can kill and
# restart it for the crash scenarios:
#   $REQKEY certify --start 'run.sh LIB --storage S ... --port {port}' \
#                   --target 'idem+http://127.0.0.1:{port}' --out OUT_DIR/LIB-S
# Either way the effects oracle is kept in OUT_DIR/LIB-S/effects.jsonl, so
# it survives a restart.
# LIBRARIES="a b" keeps only those run.sh names (default: every line).
# Each wrapper runs with --expiry-ms $EXPIRY_MS (default 2000) where the
# library can set an expiry, so expiry scenarios take seconds.
# Then conformance_table.py reads every results.json and writes the table
# (DOC, default docs/conformance/idempotency-key.md).
#
# Exit 2 when $REQKEY is unset or not an executable (nothing is run), or
# when the table cannot be written; otherwise 0, whatever the verdicts
# (they are the table's content: a library that does not conform is a
# finding, not a failure of this script).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [ -z "${REQKEY:-}" ]; then
  echo "certify-all.sh: \$REQKEY is not set: point it at the reqkey binary (REQKEY=target/release/reqkey $0)" >&2
  exit 2
fi
if ! [ -x "$REQKEY" ] && ! command -v "$REQKEY" >/dev/null 2>&1; then
  echo "certify-all.sh: \$REQKEY=$REQKEY is not an executable reqkey binary" >&2
  exit 2
fi

out="${1:-$repo/target/idem-conformance}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
doc="${DOC:-$repo/docs/conformance/idempotency-key.md}"
expiry_ms="${EXPIRY_MS:-2000}"
redis_url="${REQKEY_REDIS_URL:-redis://127.0.0.1:6379/0}"
use_start="${CERTIFY_START:-0}"
health_timeout_s=30
mkdir -p "$out"

# The Rust wrapper is built only when it is certified.
install_args=()
if [ -z "${LIBRARIES:-}" ] || [[ " $LIBRARIES " == *" axum-idempotent "* ]]; then install_args+=(--with-rust); fi
"$here/install.sh" "${install_args[@]}"

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
# start_wrapper PORT ARGS...: starts run.sh in the background and waits for /.reqkey/health (0 when it answers).
start_wrapper() {
  local port="$1"; shift
  "$here/run.sh" "$@" --port "$port" >>"$dir/wrapper.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 $((health_timeout_s * 5))); do
    curl -fsS -m 2 "http://127.0.0.1:$port/.reqkey/health" >/dev/null 2>&1 && return 0
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.2
  done
  return 1
}

started_at=$(date +%s)
while read -r lib storages; do
  case "$lib" in ''|'#'*) continue ;; esac
  if [ -n "${LIBRARIES:-}" ] && ! [[ " $LIBRARIES " == *" $lib "* ]]; then continue; fi
  for token in $storages; do
    storage="${token%!}"
    dir="$out/$lib-$storage"
    rm -rf "$dir"; mkdir -p "$dir"
    args=("$lib" --storage "$storage" --redis-url "$redis_url" --key-prefix "reqkey-cert-$(date +%s)-$$" --effects-file "$dir/effects.jsonl")
    replay_args=("$lib" --storage "$storage")
    if [ "$token" = "$storage" ]; then args+=(--expiry-ms "$expiry_ms"); replay_args+=(--expiry-ms "$expiry_ms"); fi
    printf '%q ' "${replay_args[@]}" >"$dir/replay-args.txt"
    printf '%q ' "$here/run.sh" "${args[@]}" >"$dir/start-command.txt"
    printf '{"wrapper": "%s", "storage": "%s"}\n' "$lib" "$storage" >"$dir/wrapper.json"

    # What it declares, saved whatever certification makes of it.
    port="$(free_port)"
    if start_wrapper "$port" "${args[@]}"; then
      curl -fsS -m 5 "http://127.0.0.1:$port/.reqkey/health" >"$dir/health.json" || true
    fi
    stop
    rm -f "$dir/effects.jsonl"

    t0=$(date +%s)
    code=0
    if [ "$use_start" = 1 ]; then
      start_cmd="$(cat "$dir/start-command.txt")--port {port}"
      "$REQKEY" certify --start "$start_cmd" --target 'idem+http://127.0.0.1:{port}' --out "$dir" \
        >"$dir/certify.log" 2>&1 || code=$?
    else
      port="$(free_port)"
      if start_wrapper "$port" "${args[@]}"; then
        "$REQKEY" certify --target "idem+http://127.0.0.1:$port" --out "$dir" >"$dir/certify.log" 2>&1 || code=$?
      else
        echo "certify-all.sh: the wrapper did not answer /.reqkey/health within ${health_timeout_s}s" >"$dir/certify.log"
        code=2
      fi
      stop
    fi
    echo "$code" >"$dir/exit-code"
    echo $(( $(date +%s) - t0 )) >"$dir/seconds"
    echo "certify-all.sh: $lib ($storage): exit $code in $(cat "$dir/seconds")s: $(tail -n 1 "$dir/certify.log")"
  done
done <"$here/libraries.txt"

echo "certify-all.sh: every certification took $(( $(date +%s) - started_at ))s"
mkdir -p "$(dirname "$doc")"
# The table this one replaces, so that the page says which FAILs went and came.
previous=()
if [ -f "$doc" ]; then cp "$doc" "$out/previous-table.md"; previous=(--previous "$out/previous-table.md"); fi
python3 "$here/conformance_table.py" --results "$out" --out "$doc" "${previous[@]}" || { echo "certify-all.sh: could not write $doc" >&2; exit 2; }
echo "certify-all.sh: wrote $doc"
