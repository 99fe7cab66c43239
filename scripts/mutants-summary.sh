#!/usr/bin/env bash
# Summarises cargo-mutants output directories (mutants.out): caught, missed,
# unviable, timeout, and the score.
#
#   scripts/mutants-summary.sh [DIR...]     (default target/mutants/mutants.out)
#
# viable = caught + missed + timeout. A timeout counts as detected: against
# the bounded oracle a hang is never a pass (every call is bounded; a run
# that cannot finish cannot certify).
#
# Every missed mutant should be explained in reports/mutants/survivors.tsv
# (mutant TAB fate TAB why), fate being one of
#   killed      a scenario added since catches it (the why names it);
#   equivalent  no behaviour tells it from the original (one line on why);
#   deleted     the mutated code was deleted: no reference code used it;
#   unreachable the corpus cannot reach or see it: the behaviour differs
#               only after a server dies mid-run (its lease runs out), or
#               only in how a server or store is started or opened (its
#               flags, its connection string) or what it writes to its own
#               log, which the spec's table certifies by no scenario
#               (a suite judges the answers of the server it is given); the
#               why names the test of the reference that catches it;
#   superseded  the mutated code was rewritten since, and the mutants of
#               its successor were run again in a later re-run (the why
#               names it): judged there, so left out here, never counted
#               twice (give that re-run's directory too);
#   open        not killed yet (the why says what would kill it).
# The score counts killed survivors as detected and leaves equivalent,
# deleted, superseded and unreachable ones out; the strict score counts
# unreachable ones as missed. An unexplained survivor counts as missed.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$#" -gt 0 ] || set -- target/mutants/mutants.out
survivors=reports/mutants/survivors.tsv
all() { for d in "$@"; do [ -f "$d/$name.txt" ] && cat "$d/$name.txt"; done; true; }
count() { name="$1"; shift; all "$@" | grep -c . || true; }
caught=$(count caught "$@"); missed=$(count missed "$@")
unviable=$(count unviable "$@"); timeout=$(count timeout "$@")
name=missed; missed_list="$(all "$@")"
fate() { [ -f "$survivors" ] && awk -F'\t' -v m="$1" '$1 == m { print $2; exit }' "$survivors" || true; }
why() { [ -f "$survivors" ] && awk -F'\t' -v m="$1" '$1 == m { print $3; exit }' "$survivors" || true; }
killed=0; equivalent=0; deleted=0; superseded=0; unreachable=0; open=0
if [ -n "$missed_list" ]; then
  while IFS= read -r m; do
    case "$(fate "$m")" in
      killed) killed=$((killed + 1)) ;;
      equivalent) equivalent=$((equivalent + 1)) ;;
      deleted) deleted=$((deleted + 1)) ;;
      superseded) superseded=$((superseded + 1)) ;;
      unreachable) unreachable=$((unreachable + 1)) ;;
      *) open=$((open + 1)) ;;
    esac
  done <<<"$missed_list"
fi
viable=$((caught + missed + timeout))
echo "mutants: caught $caught, missed $missed, unviable $unviable, timeout $timeout"
echo "missed: $killed killed since, $equivalent equivalent, $deleted of deleted code, $superseded superseded by a re-run, $unreachable unreachable by a scenario, $open still alive"
if [ "$viable" -gt 0 ]; then
  awk -v c="$((caught + timeout))" -v v="$viable" -v k="$killed" -v x="$((equivalent + deleted + superseded))" -v u="$unreachable" 'BEGIN {
    printf "raw score (as run): %d of %d viable mutants detected (%.2f%%)\n", c, v, 100 * c / v
    if (v - x - u > 0) printf "score (killed survivors detected; equivalent, deleted, superseded and unreachable out): %d of %d (%.2f%%)\n", c + k, v - x - u, 100 * (c + k) / (v - x - u)
    if (v - x > 0) printf "strict score (unreachable counted as missed): %d of %d (%.2f%%)\n", c + k, v - x, 100 * (c + k) / (v - x)
  }'
fi
if [ -n "$missed_list" ]; then
  echo "survivors:"
  while IFS= read -r m; do
    f="$(fate "$m")"
    echo "  $m  [${f:-open: unexplained}${f:+: $(why "$m")}]"
  done <<<"$missed_list"
fi
