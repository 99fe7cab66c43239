#!/usr/bin/env bash
# Certifies this example store with reqkey, the way a CI job would:
# starts the adapter on a free port, waits for /health, runs
# `reqkey certify --target store+http://127.0.0.1:PORT`, stops the adapter,
# and exits with reqkey's exit code (0 conforms, 1 does not, 2 not judged).
#
#   examples/typescript-store/certify.sh [OUT_DIR]
#
# OUT_DIR defaults to examples/typescript-store/certification. The reqkey
# command defaults to `cargo run -q -p reqkey-harness --`; set REQKEY to a
# built binary to skip cargo (for example REQKEY=target/debug/reqkey).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:-$here/certification}"
# Paths given relative to the caller's directory stay so after the cd.
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
if [ -n "${REQKEY:-}" ]; then
  read -r -a reqkey <<<"$REQKEY"
  case "${reqkey[0]}" in
    /*) ;;
    */*) [ -e "${reqkey[0]}" ] && reqkey[0]="$PWD/${reqkey[0]}" ;;
  esac
else
  reqkey=(cargo run -q -p reqkey-harness --)
fi
cd "$repo"   # reqkey certify reads the suite from ./scenarios

command -v node >/dev/null || { echo "certify.sh: node (20 or later) is needed" >&2; exit 2; }

log="$(mktemp)"
node "$here/src/server.js" 0 >"$log" 2>&1 &
server=$!
cleanup() { kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -f "$log"; }
trap cleanup EXIT

# The adapter picks a free port and prints it; wait for that line, bounded.
port=""
for _ in $(seq 1 100); do
  port="$(sed -n 's/^listening on http:\/\/127\.0\.0\.1:\([0-9][0-9]*\)$/\1/p' "$log")"
  [ -n "$port" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$log" >&2; echo "certify.sh: the adapter exited" >&2; exit 2; }
  sleep 0.1
done
[ -n "$port" ] || { cat "$log" >&2; echo "certify.sh: the adapter did not start within 10 s" >&2; exit 2; }

# Wait until /health answers (bounded), with node itself: no curl needed.
node -e '
  const url = process.argv[1];
  const deadline = Date.now() + 10000;
  (async () => {
    for (;;) {
      try { const r = await fetch(url); if (r.ok) return; } catch {}
      if (Date.now() > deadline) { console.error(`certify.sh: no answer from ${url}`); process.exit(2); }
      await new Promise((ok) => setTimeout(ok, 100));
    }
  })();
' "http://127.0.0.1:$port/health"

rc=0
"${reqkey[@]}" certify --target "store+http://127.0.0.1:$port" --out "$out" || rc=$?
echo "certify.sh: certificate in $out/certificate.md (exit $rc)"
exit "$rc"
