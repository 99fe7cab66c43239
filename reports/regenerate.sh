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

# name -> --target. The SQLite file is made afresh under the repository
# root (and removed after), so the certificate names a stable target.
PG_URL="${REQKEY_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}"
REDIS_URL="${REQKEY_REDIS_URL:-redis://127.0.0.1:6379/}"
SQLITE_FILE="reqkey-reports.sqlite"
declare -A TARGETS=(
  [memory]="memory"
  [sqlite]="sqlite:$SQLITE_FILE"
  [postgres]="$PG_URL"
  [redis]="$REDIS_URL"
  [reference-agent]="reference-agent"
)
ORDER=(memory sqlite postgres redis reference-agent)
rm -f "$SQLITE_FILE" "$SQLITE_FILE"-*
trap 'rm -f "$SQLITE_FILE" "$SQLITE_FILE"-*' EXIT

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
  "$bin" certify --target "$target" --out "reports/$name" --quiet || rc=$?
  if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then status=$rc; fi
done
exit "$status"
