#!/usr/bin/env bash
# Everything CI asks of the TypeScript adapter package (run by .ci/run):
#
#   1. `npm ci`, then `tsc --noEmit --strict -p .` (tsconfig.json is strict), then the
#      unit tests (`npm test`: node --test on the compiled output; the
#      PostgreSQL ones need $REQKEY_POSTGRES_URL, default
#      postgres://postgres@127.0.0.1:5432/test);
#   2. both stores certified green over store+http (the race included):
#      memory and postgres, certificates in OUT_DIR/{memory,postgres};
#   3. certify.sh exits 2 with a message when the reqkey binary is missing;
#   4. each store caught when broken (certify exits 1 naming the scenario):
#      memory --broken no-key-rule and --broken racy (a linearizability
#      counterexample), postgres --broken no-key-rule (where the unique
#      index backstop still answers request_key_taken naming the holder, so
#      taken-names-holder passes and key-rule-before-cas fails), and
#      postgres --broken no-lock (no session row lock: keyless-cas-race fails).
#
#   REQKEY=target/debug/reqkey adapters/typescript/check.sh [OUT_DIR]
#
# Exits non-zero if any of that does not hold (2 if node or npm is missing).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$(mktemp -d)}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$out"

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "check.sh: node and npm are needed" >&2; exit 2; }
(
  cd "$here"
  npm ci --no-audit --no-fund --loglevel=error
  echo "type-check (tsc --strict): $(npx tsc --version)"
  npx tsc --noEmit --strict -p .
  npm test --silent 2>&1 | tee "$out/unit.log" | grep -E '^# (tests|pass|fail|skipped)'
  # A skipped test is a test that did not run: CI must not accept one.
  grep -q '^# fail 0$' "$out/unit.log" && grep -q '^# skipped 0$' "$out/unit.log" \
    || { cat "$out/unit.log" >&2; echo "check.sh: unit tests failed or were skipped" >&2; exit 1; }
)

# expect CODE NAME -- ADAPTER_ARGS...: certify into $out/NAME and insist on the exit code.
expect() {
  local want="$1" name="$2"; shift 3
  local got=0
  "$here/certify.sh" "$out/$name" "$@" >"$out/$name.log" 2>&1 || got=$?
  if [ "$got" != "$want" ]; then
    cat "$out/$name.log" >&2
    echo "FAIL: certify.sh $* exited $got, expected $want" >&2
    exit 1
  fi
  tail -n 1 "$out/$name.log"
}
# verdict NAME SCENARIO pass|fail: the certificate's verdict for one scenario.
verdict() {
  grep -qi "^| \`$2\` | $3 |" "$out/$1/certificate.md" || {
    grep "^| \`$2\` |" "$out/$1/certificate.md" >&2 || true
    echo "FAIL: $1: expected $2 to $3 (certificate: $out/$1/certificate.md)" >&2; exit 1
  }
}

# Without reqkey, certify.sh cannot judge: exit 2 and say so (not 127).
got=0; REQKEY=/nonexistent/reqkey "$here/certify.sh" "$out/no-reqkey" >"$out/no-reqkey.log" 2>&1 || got=$?
if [ "$got" != 2 ] || ! grep -q "the reqkey binary is missing" "$out/no-reqkey.log"; then
  cat "$out/no-reqkey.log" >&2; echo "FAIL: certify.sh without reqkey exited $got, expected 2 with a message" >&2; exit 1
fi
echo "certify.sh without reqkey: exit 2, \"$(head -c 60 "$out/no-reqkey.log")...\""

expect 0 memory -- --store memory
expect 0 postgres -- --store postgres
for name in memory postgres; do verdict "$name" request-key.race pass; done

expect 1 memory-no-key-rule -- --store memory --broken no-key-rule
verdict memory-no-key-rule request-key.taken-names-holder fail
verdict memory-no-key-rule request-key.key-rule-before-cas fail

expect 1 memory-racy -- --store memory --broken racy
verdict memory-racy request-key.race fail
grep -q "not linearizable" "$out/memory-racy/certificate.md" || { echo "FAIL: no linearizability counterexample" >&2; exit 1; }

expect 1 postgres-no-key-rule -- --store postgres --broken no-key-rule
verdict postgres-no-key-rule request-key.key-rule-before-cas fail
verdict postgres-no-key-rule request-key.taken-names-holder pass

expect 1 postgres-no-lock -- --store postgres --broken no-lock
verdict postgres-no-lock store.keyless-cas-race fail
echo "check.sh: the TypeScript adapter type-checks, its tests pass, both stores certify, and each broken store is caught (reports in $out)"
