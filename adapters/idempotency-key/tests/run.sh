#!/usr/bin/env bash
# The folder's own tests (no reqkey binary needed): probe self-test, table unit tests, certify-all.sh plumbing.
#
#   adapters/idempotency-key/tests/run.sh
#
# 1. probe.py --selftest: the probe fails an app without an idempotency layer;
# 2. tests/test_conformance_table.py: verdict ranking, not judged, escaping;
# 3. certify-all.sh exits 2 with $REQKEY unset or not executable;
# 4. certify-all.sh driven by tests/fake_reqkey.py (a TEST DOUBLE, not the
#    judge) on express-idempotency and django-idempotency-key: the table is
#    written to a temporary file (never docs/), names django's concurrent
#    double execution with its seed and replay command, and express as passing;
# 5. the same with CERTIFY_START=1 (the --start command, quoted as the harness
#    gets it) on asgi-idempotency-header.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
fail() { echo "tests/run.sh: FAIL: $*" >&2; exit 1; }

python3 "$here/probe.py" --selftest
python3 "$here/tests/test_conformance_table.py" 2>&1 | tail -n 1 | grep -qx OK || fail "test_conformance_table.py"
echo "ok   test_conformance_table.py"

for bad in "" /nonexistent/reqkey; do
  code=0; REQKEY="$bad" "$here/certify-all.sh" "$tmp/none" >"$tmp/no-reqkey.log" 2>&1 || code=$?
  [ "$code" = 2 ] || fail "certify-all.sh with REQKEY='$bad' exited $code, expected 2"
  grep -q 'REQKEY' "$tmp/no-reqkey.log" || fail "certify-all.sh did not say why (REQKEY='$bad')"
done
echo "ok   certify-all.sh exits 2 without a reqkey binary"

LIBRARIES="express-idempotency django-idempotency-key" DOC="$tmp/table.md" REQKEY="$here/tests/fake_reqkey.py" \
  "$here/certify-all.sh" "$tmp/out" >"$tmp/certify-all.log" 2>&1 || { cat "$tmp/certify-all.log" >&2; fail "certify-all.sh with the fake"; }
grep -q '^| express-idempotency | 1.0.6 | memory | CONFORMS |' "$tmp/table.md" || fail "express-idempotency row"
grep -q '^| django-idempotency-key | 1.3.0 | memory | \*\*DOES NOT CONFORM\*\* |' "$tmp/table.md" || fail "django-idempotency-key memory row"
grep -q '^| `idem.fake.concurrent` | \*\*FAIL\*\* | \*\*FAIL\*\* | `pass` |' "$tmp/table.md" || fail "clause row"
grep -q -- "--seed 7" "$tmp/table.md" || fail "replay command with the seed"
grep -q '&lt;b&gt;&#124;x&#124;&lt;/b&gt;' "$tmp/table.md" || fail "target text escaped"
[ "$(grep -c '^| ' "$tmp/table.md")" -ge 10 ] || fail "tables"
echo "ok   certify-all.sh + fake reqkey: table written, violation with seed and replay, text escaped"

# The --start form: the fake starts the quoted command itself, as the harness would.
CERTIFY_START=1 LIBRARIES="asgi-idempotency-header" DOC="$tmp/start.md" REQKEY="$here/tests/fake_reqkey.py" \
  "$here/certify-all.sh" "$tmp/start" >"$tmp/start.log" 2>&1 || { cat "$tmp/start.log" >&2; fail "certify-all.sh CERTIFY_START=1"; }
grep -q '^| asgi-idempotency-header | 0.2.0 | redis | CONFORMS |' "$tmp/start.md" || { cat "$tmp/start.log" >&2; fail "CERTIFY_START=1 row"; }
echo "ok   certify-all.sh CERTIFY_START=1: the --start command starts the wrapper"
echo "tests/run.sh: all passed"
