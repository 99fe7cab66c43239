#!/usr/bin/env bash
# Judges a set of correct and broken targets N times while the machine is
# loaded (every target of a round runs at once, beside CPU hogs) and prints
# the verdict table: the same target must get the same verdict every time,
# 0 for the correct ones and 1 for the broken ones (issue 25, SPEC 8.1).
#
#   scripts/verdict-stability.sh [ROUNDS] [HOGS]
#
# ROUNDS (default 3) rounds; HOGS (default 2) busy loops beside each round.
# Bounded: each run has a 20-minute cap (`timeout`), the hogs end with the
# round. Exit 0 when every target got its expected verdict in every round,
# 1 otherwise, 2 when reqkey cannot be built. Figures: docs/reports.md.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds="${1:-3}"
hogs="${2:-2}"
reqkey="${REQKEY:-}"
if [ -z "$reqkey" ]; then
  cargo build -q -p reqkey-harness --bin reqkey || exit 2
  reqkey="${CARGO_TARGET_DIR:-target}/debug/reqkey"
fi

# target, expected exit code
targets=(
  "memory 0"
  "broken-memory:no-key-rule 1"
  "broken-memory:holder-read-outside-commit 1"
  "broken-memory:delete-keeps-keys 1"
  "reference-agent 0"
  "reference-agent:ignore-digest 1"
  "reference-agent:policy-before-key 1"
)

out="$(mktemp -d)"
declare -A seen
for round in $(seq 1 "$rounds"); do
  pids=()
  for _ in $(seq 1 "$hogs"); do
    (end=$((SECONDS + 1200)); while [ $SECONDS -lt $end ]; do :; done) &
    pids+=($!)
  done
  runs=()
  for row in "${targets[@]}"; do
    set -- $row
    name="$1"
    log="$out/$round-${name//[^A-Za-z0-9]/_}"
    (rc=0; timeout 1200 "$reqkey" run --target "$name" --quiet >"$log.out" 2>&1 || rc=$?; echo "$rc" >"$log.rc") &
    runs+=($!)
  done
  wait "${runs[@]}"
  kill "${pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  for row in "${targets[@]}"; do
    set -- $row
    log="$out/$round-${1//[^A-Za-z0-9]/_}"
    seen["$1"]="${seen[$1]:-}$(cat "$log.rc") "
  done
  echo "round $round of $rounds done (load: $(cut -d' ' -f1-3 /proc/loadavg))" >&2
done

status=0
printf '%-45s %-9s %s\n' "target" "expected" "verdicts (exit codes, one per round)"
for row in "${targets[@]}"; do
  set -- $row
  verdicts="${seen[$1]}"
  mark="stable"
  for v in $verdicts; do
    [ "$v" = "$2" ] || { mark="DIFFERS"; status=1; }
  done
  printf '%-45s %-9s %s %s\n' "$1" "$2" "$verdicts" "$mark"
done
echo "logs: $out"
exit "$status"
