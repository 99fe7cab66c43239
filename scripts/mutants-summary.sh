#!/usr/bin/env bash
# Summarises a cargo-mutants output directory (mutants.out): caught, missed,
# unviable, timeout, and the score = (caught + timeout) / viable, where
# viable = caught + missed + timeout. A timeout counts as detected: against
# the bounded oracle a hang is never a pass (every call is bounded; a run
# that cannot finish cannot certify).
set -euo pipefail
dir="${1:-target/mutants/mutants.out}"
count() { if [ -f "$dir/$1.txt" ]; then grep -c . "$dir/$1.txt" || true; else echo 0; fi; }
caught=$(count caught); missed=$(count missed); unviable=$(count unviable); timeout=$(count timeout)
viable=$((caught + missed + timeout))
echo "mutants: caught $caught, missed $missed, unviable $unviable, timeout $timeout"
if [ "$viable" -gt 0 ]; then
  awk -v d="$((caught + timeout))" -v v="$viable" \
    'BEGIN { printf "score: %d of %d viable mutants detected (%.1f%%)\n", d, v, 100 * d / v }'
fi
if [ "$missed" -gt 0 ]; then
  echo "missed:"
  sed 's/^/  /' "$dir/missed.txt"
fi
