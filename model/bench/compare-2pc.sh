#!/usr/bin/env bash
# Unique states per second of `reqkey model check` next to stateright's own
# two-phase-commit example, built from the stateright crate's source (the
# version in Cargo.lock, copied out of the cargo registry at run time) and
# run on the same machine in the same run, with the same thread count.
#
#   model/bench/compare-2pc.sh [ROUNDS] [-- extra args for `reqkey model check`]
#
# Environment: RMS (resource managers of 2pc, default 8), THREADS (default:
# nproc, which is also what the 2pc example uses: num_cpus::get()).
# Both are release builds; each round runs 2pc, then reqkey, and times both
# processes the same way (wall clock). The ratio is ours over theirs.
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
rounds=${1:-3}
shift || true
[ "${1:-}" = "--" ] && shift
rms=${RMS:-8}
threads=${THREADS:-$(nproc)}
export CARGO_BUILD_JOBS=${CARGO_BUILD_JOBS:-1}

version=$(grep -A1 '^name = "stateright"$' "$root/Cargo.lock" | sed -n 's/^version = "\(.*\)"$/\1/p')
[ -n "$version" ] || { echo "compare-2pc: no stateright in Cargo.lock" >&2; exit 2; }
src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"stateright-$version" 2>/dev/null | head -1 || true)
if [ -z "$src" ]; then
  (cd "$root" && cargo fetch --quiet)
  src=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"stateright-$version" | head -1)
fi

# The copy lives in a temp dir; its build directory is kept under target/
# so that a second run does not rebuild stateright's dependencies.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp -rp "$src" "$tmp/stateright"
# A package of its own, not a member of any enclosing workspace.
printf '\n[workspace]\n' >>"$tmp/stateright/Cargo.toml"
# The example reports with `report`, which polls once a second and so ends
# the process up to a second after the search is done; `join_and_report`
# (same checker, same search) returns when it is done, so the wall clock
# of the process is the search's time. Nothing else is changed.
ex="$tmp/stateright/examples/2pc.rs"
sed -i 's/\.report(&mut WriteReporter/.join_and_report(\&mut WriteReporter/' "$ex"
[ "$(grep -c 'join_and_report(&mut WriteReporter' "$ex")" -ge 1 ] ||
  { echo "compare-2pc: could not switch 2pc to join_and_report" >&2; exit 2; }
export CARGO_TARGET_DIR="$root/target/compare-2pc"
build() {
  local log="$tmp/build.log"
  "$@" >"$log" 2>&1 || { cat "$log" >&2; echo "compare-2pc: build failed: $*" >&2; exit 2; }
}
echo "building stateright $version examples/2pc.rs (release) ..." >&2
(cd "$tmp/stateright" && build cargo build --release --example 2pc)
echo "building reqkey (release) ..." >&2
(cd "$root" && CARGO_TARGET_DIR="$root/target" build cargo build --release -p reqkey-harness)
twopc="$CARGO_TARGET_DIR/release/examples/2pc"
reqkey="$root/target/release/reqkey"

now() { date +%s.%N; }
# Runs a command and prints "<unique states> <seconds>", with the unique
# count read from the output by the sed expression $1.
measure() {
  local expr=$1; shift
  local t0 t1 out unique
  t0=$(now)
  out=$("$@" 2>&1 || true)
  t1=$(now)
  unique=$(printf '%s\n' "$out" | sed -n "$expr" | tail -1)
  [ -n "$unique" ] || { printf '%s\n' "$out" >&2; echo "compare-2pc: no unique count from $*" >&2; exit 1; }
  echo "$unique $(echo "$t1 - $t0" | bc -l)"
}

echo "machine: $(nproc) cpus, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "stateright $version 2pc check $rms (threads: num_cpus = $(nproc)); reqkey model check --threads $threads $*"
printf '%-6s %12s %8s %12s   %12s %8s %12s   %6s\n' round 2pc-unique sec unique/s reqkey-unique sec unique/s ratio
ratios=()
for r in $(seq 1 "$rounds"); do
  read -r tu ts < <(measure 's/^Done\. states=[0-9]*, unique=\([0-9]*\),.*/\1/p' "$twopc" check "$rms")
  read -r ou os < <(measure 's/^unique states: *\([0-9]*\)$/\1/p' "$reqkey" model check --quiet --threads "$threads" "$@")
  trate=$(echo "$tu / $ts" | bc -l)
  orate=$(echo "$ou / $os" | bc -l)
  ratio=$(echo "$orate / $trate" | bc -l)
  ratios+=("$ratio")
  printf '%-6s %12d %8.2f %12.0f   %12d %8.2f %12.0f   %6.2f\n' "$r" "$tu" "$ts" "$trate" "$ou" "$os" "$orate" "$ratio"
done
median=$(printf '%s\n' "${ratios[@]}" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}')
printf 'median ratio (reqkey unique states/s over 2pc unique states/s): %.2f\n' "$median"
