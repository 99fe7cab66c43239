#!/usr/bin/env bash
# Summarises cargo-mutants output directories (mutants.out): caught, missed,
# unviable, timeout, and the score.
#
#   scripts/mutants-summary.sh [DIR...]     (default target/mutants/mutants.out)
#
# viable = caught + missed + timeout. A timeout counts as detected: against
# the bounded oracle a hang is never a pass (every call is bounded; a run
# that cannot finish cannot certify). Missed mutants listed in
# reports/mutants/equivalent.tsv (mutant TAB why) are equivalent: no
# conforming or non-conforming behaviour tells them apart from the
# original, so no scenario can kill them; they are reported, and taken out
# of the second score.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || set -- target/mutants/mutants.out
cat_all() { for d in "$@"; do [ -f "$d/$name.txt" ] && cat "$d/$name.txt"; done; true; }
lines() { name="$1"; shift; cat_all "$@" | grep -c . || true; }
caught=$(lines caught "$@"); missed=$(lines missed "$@")
unviable=$(lines unviable "$@"); timeout=$(lines timeout "$@")
viable=$((caught + missed + timeout))
equivalents=reports/mutants/equivalent.tsv
name=missed; missed_list="$(cat_all "$@")"
equivalent=0
if [ -n "$missed_list" ] && [ -f "$equivalents" ]; then
  equivalent=$(printf '%s\n' "$missed_list" | grep -cxFf <(cut -f1 "$equivalents" | grep .) || true)
fi
echo "mutants: caught $caught, missed $missed ($equivalent of them equivalent), unviable $unviable, timeout $timeout"
if [ "$viable" -gt 0 ]; then
  awk -v d="$((caught + timeout))" -v v="$viable" -v e="$equivalent" 'BEGIN {
    printf "score: %d of %d viable mutants detected (%.1f%%)\n", d, v, 100 * d / v
    if (v - e > 0) printf "score without equivalent mutants: %d of %d (%.1f%%)\n", d, v - e, 100 * d / (v - e)
  }'
fi
if [ -n "$missed_list" ]; then
  echo "missed:"
  printf '%s\n' "$missed_list" | while IFS= read -r m; do
    why="$( [ -f "$equivalents" ] && awk -F'\t' -v m="$m" '$1 == m { print $2 }' "$equivalents" || true)"
    if [ -n "$why" ]; then echo "  $m  [equivalent: $why]"; else echo "  $m  [NOT KILLED]"; fi
  done
fi
