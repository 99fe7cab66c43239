#!/usr/bin/env bash
# Certifies a target with reqkey and leaves four reports and a log in OUT:
# certificate.md, report.html, junit.xml, results.json and reqkey.log (the
# run's output, with the started target's own output in it). The action's "Certify" step (action.yml); CI runs it
# against a store too, so what the action does is tested here.
#
#   action/certify.sh --target TARGET [--out DIR] [--start COMMAND]
#                     [--wait-seconds N] [--scenarios ROOT]
#                     [--partition K/N] [--seed N]
#   action/certify.sh --merge-shards DIR [--out DIR] [--scenarios ROOT]
#
# --target        what to certify: store+http://HOST:PORT, http://HOST:PORT
#                 (an agent), memory, postgres://..., ... (`reqkey certify --help`)
# --out           where the reports go (default reqkey-certification)
# --start         a shell command that starts the target, given to
#                 `reqkey certify --start`: reqkey starts it, waits for it
#                 (GET /health of an http target, at most --wait-seconds,
#                 default 60), may kill, pause and restart it (so crash
#                 behaviour is certified) and stops it afterwards. Its
#                 output goes to OUT/reqkey.log.
# --scenarios     a scenarios root to judge by (default: the suite built into reqkey)
# --partition     judge only shard K of N (one job of a CI matrix); OUT then
#                 holds a shard's reports, and a later --merge-shards makes
#                 the certificate
# --seed          the seed of every random choice; every shard of one
#                 certification needs the same one (default with
#                 --partition: $GITHUB_RUN_ID, so a re-run shard keeps it)
# --merge-shards  a directory whose subdirectories are the shards' OUT
#                 directories (e.g. downloaded artifacts): runs
#                 `reqkey certify merge` into OUT instead of certifying
#
# reqkey is $REQKEY if set, else `reqkey` on the PATH. Exit codes are
# reqkey's: 0 conforms, 1 does not, 2 not judged, which includes: no reqkey
# binary, a bad argument, a start command that exits or never answers.
# With $GITHUB_OUTPUT set it writes exit-code, verdict and out there; with
# $GITHUB_STEP_SUMMARY set it appends the certificate to the job summary.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

die2() { echo "action/certify.sh: $*" >&2; exit 2; }

target="" out="reqkey-certification" start="" wait_seconds=60 scenarios=""
partition="" seed="" merge_shards=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) target="${2-}"; shift 2 || die2 "--target needs a value" ;;
    --out) out="${2-}"; shift 2 || die2 "--out needs a value" ;;
    --start) start="${2-}"; shift 2 || die2 "--start needs a value" ;;
    --wait-seconds) wait_seconds="${2-}"; shift 2 || die2 "--wait-seconds needs a value" ;;
    --scenarios) scenarios="${2-}"; shift 2 || die2 "--scenarios needs a value" ;;
    --partition) partition="${2-}"; shift 2 || die2 "--partition needs a value" ;;
    --seed) seed="${2-}"; shift 2 || die2 "--seed needs a value" ;;
    --merge-shards) merge_shards="${2-}"; shift 2 || die2 "--merge-shards needs a value" ;;
    *) die2 "unknown argument: $1" ;;
  esac
done
[ -n "$target" ] || [ -n "$merge_shards" ] || die2 "--target is required (for example store+http://127.0.0.1:7001)"
[ -z "$target" ] || [ -z "$merge_shards" ] || die2 "--merge-shards merges shards already judged: give it no --target"
case "$partition" in ''|[0-9]*/[0-9]*) ;; *) die2 "--partition must be K/N, not $partition" ;; esac
if [ -n "$partition" ] && [ -z "$seed" ]; then
  seed="${GITHUB_RUN_ID:-}"
  [ -n "$seed" ] || die2 "--partition needs --seed (the same for every shard)"
fi
case "$seed" in ''|*[!0-9]*) [ -z "$seed" ] || die2 "--seed must be a whole number, not $seed" ;; esac
[ -z "$merge_shards" ] || [ -d "$merge_shards" ] || die2 "no shards directory at $merge_shards"
[ -n "$out" ] || die2 "--out must not be empty"
case "$wait_seconds" in ''|*[!0-9]*) die2 "--wait-seconds must be a whole number, not $wait_seconds" ;; esac
[ -z "$scenarios" ] || [ -d "$scenarios" ] || die2 "no scenarios root at $scenarios"

reqkey="${REQKEY:-reqkey}"
case "$reqkey" in
  */*) [ -f "$reqkey" ] && [ -x "$reqkey" ] ;;
  *) command -v "$reqkey" >/dev/null 2>&1 ;;
esac || die2 "the reqkey binary is missing: $reqkey is not an executable (install it with \`cargo install --path harness --locked\`, or set REQKEY)"

mkdir -p "$out"
out="$(cd "$out" && pwd)"

start_args=()
[ -z "$start" ] || start_args=(--start "$start" --start-timeout-ms "$((wait_seconds * 1000))")

rc=0
suite_args=()
[ -z "$scenarios" ] || suite_args=(--scenarios "$scenarios")
# In a workflow, the shards and the merge name one run (its id, the same
# across re-run attempts, so re-run shards merge with the others): the
# merge refuses a shard of another run (yesterday's, for one).
run_args=()
[ -z "${GITHUB_RUN_ID:-}" ] || run_args=(--run-id "gh-$GITHUB_RUN_ID")
if [ -n "$merge_shards" ]; then
  shards=()
  for dir in "$merge_shards"/*/; do
    [ -f "$dir/results.json" ] && shards+=("${dir%/}")
  done
  [ "${#shards[@]}" -gt 0 ] || die2 "no shard (a directory with results.json) under $merge_shards"
  target="the merged shards of $merge_shards"
  set +e
  "$reqkey" certify merge --out "$out" "${suite_args[@]}" "${run_args[@]}" --quiet "${shards[@]}" 2>&1 | tee "$out/reqkey.log"
  rc="${PIPESTATUS[0]}"
  set -e
else
  [ -z "$partition" ] || suite_args+=(--partition "$partition" "${run_args[@]}")
  [ -z "$seed" ] || suite_args+=(--seed "$seed")
  set +e
  "$reqkey" certify --target "$target" --out "$out" "${start_args[@]}" "${suite_args[@]}" --quiet 2>&1 \
    | tee "$out/reqkey.log"
  rc="${PIPESTATUS[0]}"
  set -e
fi

case "$rc" in
  0) verdict="conforms" ;;
  1) verdict="does not conform" ;;
  *) verdict="not judged" ;;
esac
summary="$(tail -n 1 "$out/certificate.md" 2>/dev/null || true)"
echo "action/certify.sh: $target $verdict (exit $rc)${summary:+: $summary}; reports in $out"
if [ -n "${GITHUB_OUTPUT:-}" ]; then
  { echo "exit-code=$rc"; echo "verdict=$verdict"; echo "out=$out"; } >>"$GITHUB_OUTPUT"
fi
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/certificate.md" ]; then
  cat "$out/certificate.md" >>"$GITHUB_STEP_SUMMARY"
fi
exit "$rc"
