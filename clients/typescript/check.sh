#!/usr/bin/env bash
# Everything CI asks of the TypeScript reference client (run by .ci/run):
#
#   1. `npm ci`, `tsc --noEmit --strict -p .`, the build;
#   2. the reference client (tool results included) certified green through
#      `reqkey proxy` in front of the in-process reference agent, under the
#      CI fault plan, on the CI seed and three more, with
#      --min-failed-share 0.34: a run where fewer than a third of the
#      answers failed is no verdict (exit 2), never a pass; over those
#      seeds some tool-result answer was lost and settled by a snapshot read;
#   3. each broken twin caught (exit 1) by the clause it breaks:
#        new-key-per-retry           client.retry.same-key
#        same-key-for-two-messages   client.action.fresh-key
#        no-key-on-retry             client.entry.keyed
#        resend-tool-without-reread  client.tool-result.reread-before-resend
#   4. a failure replayed from its seed: the same seed gives the same faults
#      and the same failed clauses.
#
#   REQKEY=target/debug/reqkey clients/typescript/check.sh [OUT_DIR]
#
# Exits non-zero if any of that does not hold (2 if node, npm or reqkey is
# missing).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$(mktemp -d)}"
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
mkdir -p "$out"
reqkey="${REQKEY:-reqkey}"

command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || { echo "check.sh: node and npm are needed" >&2; exit 2; }
command -v "$reqkey" >/dev/null 2>&1 || [ -x "$reqkey" ] || { echo "check.sh: the reqkey binary is missing ($reqkey); set REQKEY" >&2; exit 2; }
(
  cd "$here"
  npm ci --no-audit --no-fund --loglevel=error
  echo "type-check (tsc --strict): $(npx tsc --version)"
  npx tsc --noEmit --strict -p .
  npm run build --silent
)

plan="drop-after-commit=0.35,delay=0.05,502=0.05,503=0.05,duplicate=0.1"
seed="${REQKEY_PROXY_SEED:-20251203}"

# proxy WANT NAME SEED MODE: the client in MODE through the proxy; insist on the exit code.
proxy() {
  local want="$1" name="$2" s="$3" mode="$4" got=0
  "$reqkey" proxy --target reference-agent --plan "$plan" --seed "$s" --delay-ms 1500 \
    --min-failed-share 0.34 --client-timeout-ms 120000 \
    --json "$out/$name.json" --junit "$out/$name.xml" \
    -- node "$here/dist/src/cli.js" --mode "$mode" --timeout-ms 1000 >"$out/$name.log" 2>&1 || got=$?
  if [ "$got" != "$want" ]; then
    cat "$out/$name.log" >&2
    echo "FAIL: reqkey proxy with the $mode client exited $got, expected $want" >&2
    exit 1
  fi
  grep -E '^saw ' "$out/$name.log"
  tail -n 1 "$out/$name.log"
}
# failed NAME CLAUSE: the clause failed in NAME's JSON report.
failed() {
  node -e '
    const doc = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"));
    const rule = doc.rules.find((r) => r.id === process.argv[2]);
    if (!rule || rule.passed) { console.error(`FAIL: ${process.argv[1]}: ${process.argv[2]} did not fail`); process.exit(1); }
    console.log(`caught by ${rule.id}: ${rule.violations[0]}`);
  ' "$out/$1.json" "$2"
}
# faults NAME: the fault of every entry request, in order.
faults() {
  node -e '
    const doc = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"));
    console.log(doc.exchanges.filter((e) => e.entry).map((e) => e.fault).join(","));
  ' "$out/$1.json"
}

proxy 0 correct "$seed" correct
node -e '
  const doc = JSON.parse(require("node:fs").readFileSync(process.argv[1], "utf8"));
  const s = doc.stats;
  if (s.failed_answers * 3 < s.entry_requests) { console.error(`FAIL: only ${s.failed_answers} of ${s.entry_requests} answers failed`); process.exit(1); }
  console.log(`the reference client: green with ${s.failed_answers} of ${s.entry_requests} answers failed (${Math.round(100 * doc.failed_share)}%)`);
' "$out/correct.json"
# More seeds: the tool-result path (a lost answer, a snapshot read, a
# re-send only when the result is not recorded) must be green on each.
for extra in 1 2 3; do
  proxy 0 "correct-seed-$extra" "$extra" correct
done
node -e '
  const fs = require("node:fs");
  let lost = 0;
  for (const f of process.argv.slice(1)) {
    const doc = JSON.parse(fs.readFileSync(f, "utf8"));
    lost += doc.exchanges.filter((e) => e.tool_result && e.fault !== "none" && e.fault !== "duplicate").length;
  }
  if (lost === 0) { console.error("FAIL: no tool-result answer was lost over the seeds"); process.exit(1); }
  console.log(`tool results: ${lost} answers lost over the seeds, each settled as SPEC 9 asks`);
' "$out/correct.json" "$out"/correct-seed-*.json

proxy 1 new-key-per-retry "$seed" new-key-per-retry
failed new-key-per-retry client.retry.same-key
proxy 1 same-key-for-two-messages "$seed" same-key-for-two-messages
failed same-key-for-two-messages client.action.fresh-key
proxy 1 no-key-on-retry "$seed" no-key-on-retry
failed no-key-on-retry client.entry.keyed
proxy 1 resend-tool-without-reread "$seed" resend-tool-without-reread
failed resend-tool-without-reread client.tool-result.reread-before-resend

# Replay: the seed printed with the failure gives the same faults again.
printed="$(sed -n 's/^seed: \([0-9]*\) .*/\1/p' "$out/new-key-per-retry.log")"
[ "$printed" = "$seed" ] || { echo "FAIL: the report printed seed '$printed', not $seed" >&2; exit 1; }
proxy 1 new-key-per-retry-replay "$printed" new-key-per-retry
failed new-key-per-retry-replay client.retry.same-key
[ "$(faults new-key-per-retry)" = "$(faults new-key-per-retry-replay)" ] || {
  echo "FAIL: seed $printed did not replay the same faults" >&2
  faults new-key-per-retry >&2; faults new-key-per-retry-replay >&2; exit 1
}
echo "replayed from seed $printed: the same faults ($(faults new-key-per-retry))"
echo "check.sh: the reference client is green through reqkey proxy, each broken twin is caught by its clause, and a failure replays from its seed (reports in $out)"
