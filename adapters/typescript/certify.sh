#!/usr/bin/env bash
# Certifies one of this package's stores with reqkey, the way a CI job would:
# starts the adapter on a free port, waits for /health, runs
# `reqkey certify --target store+http://127.0.0.1:PORT --out OUT_DIR`, stops
# the adapter, and exits with reqkey's code (0 conforms, 1 does not, 2 not
# judged, including: no reqkey, no node, no build, the adapter did not start).
#
#   adapters/typescript/certify.sh [OUT_DIR] [--store memory|postgres] [--broken MODE]
#
# OUT_DIR defaults to adapters/typescript/certification. The arguments after
# it go to the adapter (dist/src/cli.js; build it first with `npm ci && npm
# run build`). The postgres store connects to $REQKEY_POSTGRES_URL (default
# postgres://postgres@127.0.0.1:5432/test).
#
# reqkey is $REQKEY if set (a path or a command with arguments, for example
# REQKEY=target/debug/reqkey), else `cargo run -q -p reqkey-harness --` in
# this repository, else `reqkey` on the PATH.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="$here/certification"
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then out="$1"; shift; fi
adapter_args=("$@")
# Paths given relative to the caller's directory stay so after the cd.
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac

die2() { echo "certify.sh: $*" >&2; exit 2; }

if [ -n "${REQKEY:-}" ]; then
  read -r -a reqkey <<<"$REQKEY"
  case "${reqkey[0]}" in
    /*) exe="${reqkey[0]}" ;;
    */*) exe="$PWD/${reqkey[0]}"; reqkey[0]="$exe" ;;
    *) exe="$(command -v "${reqkey[0]}" || true)" ;;
  esac
  if [ -z "$exe" ] || [ ! -f "$exe" ] || [ ! -x "$exe" ]; then
    die2 "the reqkey binary is missing: REQKEY=$REQKEY is not an executable file (build it with \`cargo build -p reqkey-harness\`, or install it with \`cargo install --path harness --locked\`)"
  fi
elif command -v cargo >/dev/null 2>&1; then
  reqkey=(cargo run -q --locked -p reqkey-harness --)
elif command -v reqkey >/dev/null 2>&1; then
  reqkey=(reqkey)
else
  die2 "the reqkey binary is missing: set REQKEY to it, put \`reqkey\` on the PATH (\`cargo install --path harness --locked\`), or install cargo"
fi
command -v node >/dev/null 2>&1 || die2 "node (20 or later) is needed"
[ -f "$here/dist/src/cli.js" ] || die2 "the adapter is not built: run \`npm ci && npm run build\` in $here"
cd "$repo"

log="$(mktemp)"
node "$here/dist/src/cli.js" --port 0 "${adapter_args[@]}" >"$log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT

# The adapter picks a free port and prints it; wait for that line, bounded.
port=""
for _ in $(seq 1 150); do
  port="$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$log")"
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; die2 "the adapter exited before listening"; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$log" >&2; die2 "the adapter did not start within 15 s"; }

# Wait until /health answers (bounded), with node itself: no curl needed.
node -e '
  const url = process.argv[1];
  const deadline = Date.now() + 10000;
  (async () => {
    for (;;) {
      try { const r = await fetch(url, { signal: AbortSignal.timeout(2000) }); if (r.ok) return; } catch {}
      if (Date.now() > deadline) { console.error(`certify.sh: no answer from ${url}`); process.exit(2); }
      await new Promise((ok) => setTimeout(ok, 100));
    }
  })();
' "http://127.0.0.1:$port/health"

rc=0
"${reqkey[@]}" certify --target "store+http://127.0.0.1:$port" --out "$out" --quiet || rc=$?
# What the adapter reported (internal errors, for one) helps read a red certificate.
if [ "$rc" != 0 ] && [ -s "$log" ]; then sed 's/^/adapter: /' "$log" >&2; fi
echo "certify.sh: ${adapter_args[*]:-(memory)}: $(tail -n 1 "$out/certificate.md" 2>/dev/null || echo 'no certificate'); certificate in $out/certificate.md (exit $rc)"
exit "$rc"
