#!/usr/bin/env bash
# Mutation testing with the conformance corpus as the only oracle.
#
#   scripts/mutants.sh            # the full run (docs/mutation.md): every mutant
#   scripts/mutants.sh --sample   # CI's fixed sample (one mutant, judged by the agent corpus on the reference agent)
#   scripts/mutants.sh --sample --baseline-only    # the sample in two halves, as CI runs it: the
#   scripts/mutants.sh --sample --after-baseline   #   baseline beside other steps, the mutant later, alone
#   scripts/mutants.sh -f model/src/contract/plan.rs   # any further cargo-mutants flags
#
# What is mutated (the --file list below): the model's rules and planning
# code, the reference stores and executor. What judges a mutant
# (.cargo/mutants.toml): only harness/tests/mutation_oracle.rs (the store corpus on memory,
# SQLite, PostgreSQL and Redis; the agent corpus on the reference agent) and
# harness/tests/link_faults.rs (the link scenarios through a faulted database
# link; issue 49).
# PostgreSQL, Redis and a Redis Cluster must answer (REQKEY_POSTGRES_URL,
# REQKEY_REDIS_URL, REQKEY_REDIS_CLUSTER_URL; scripts/redis-cluster.sh start).
#
# Results go to $REQKEY_MUTANTS_OUT (default target/mutants)/mutants.out:
# caught.txt, missed.txt, unviable.txt, timeout.txt; the last lines printed
# are the summary (caught / missed / unviable / timeout and the score).
# Exit code: cargo-mutants' (0 every viable mutant caught, 2 some missed,
# 3 some timed out, 4 the unmutated tree fails the oracle).
set -euo pipefail
cd "$(dirname "$0")/.."

out="${REQKEY_MUTANTS_OUT:-target/mutants}"
oracle_filter=()
mkdir -p "$out"
# The oracle's bound: the link scenarios stall their links for 7-8 s each,
# and the link tests run them on three databases and four broken variants
# (about 2.5 minutes on two loaded cores, 2026-12-06, beside the corpora's
# two); a hang past it counts as caught.
args=(--timeout 600 --build-timeout 1800 --output "$out"
  --test-workspace=true)
# The oracle's test targets (.cargo/mutants.toml says why these two).
oracle_tests=(mutation_oracle link_faults)
# --sample's halves: `all` (the baseline, then the mutant), `baseline`
# (only the baseline: exit 0 when the unmutated tree passes the oracle) or
# `mutant` (only the mutant: for a caller that has just run the baseline
# half on this same tree; CI runs it beside other steps, since the mutant
# rebuilds the tree in place and must run alone).
sample_half=all
if [ "${1:-}" = "--sample" ]; then
  shift
  case "${1:-}" in
    --baseline-only) sample_half=baseline; shift ;;
    --after-baseline) sample_half=mutant; shift ;;
  esac
  # A fixed sample: one mutant of the executor's keyed-entry table (SPEC 5),
  # the digest comparison turned around (a keyed retry with another input
  # attaches instead of conflicting). One, because each mutant costs a
  # rebuild and an oracle run (over a minute together on two cores). In place: CI
  # has just built this tree, so no copy and no rebuild from scratch.
  # The oracle scoped to the one test that judges the executor's table on
  # the reference agent (CI's `cargo test --workspace` has just run the
  # whole oracle on the unmutated tree, so the baseline below needs only it).
  oracle_filter=(-- --include-ignored --exact agent_corpus_on_the_reference_agent)
  # That test lives in mutation_oracle: no link test to build (--no-config:
  # the config names link_faults too; everything else it says is below).
  oracle_tests=(mutation_oracle)
  set -- --no-config --in-place --file model/src/contract/plan.rs --re 'replace != with == in plan_keyed_entry' \
    --cargo-test-arg=-- --cargo-test-arg=--include-ignored --cargo-test-arg=--exact --cargo-test-arg=agent_corpus_on_the_reference_agent "$@"
fi
# Without a --file of the caller's, the whole scope of issue 13.
case " $* " in
  *" -f "* | *" --file "* | *" --re "*) ;;
  *)
    for f in model/src/contract/rules.rs model/src/contract/plan.rs model/src/contract/seq.rs model/src/contract/key.rs \
      model/src/contract/digest.rs 'reference-impl/src/store/*.rs' 'reference-impl/src/store/postgres/*.rs' \
      reference-impl/src/agent/executor.rs reference-impl/src/agent/runs.rs reference-impl/src/agent/config.rs; do
      args+=(--file "$f")
    done
    ;;
esac
for t in "${oracle_tests[@]}"; do args+=(--cargo-arg=--test "--cargo-arg=$t"); done
# The oracle's tests are #[ignore]d in the suite (the suite runs the same
# corpora elsewhere; harness/tests/mutation_oracle.rs says why): here they run.
if [ ${#oracle_filter[@]} -eq 0 ]; then
  oracle_filter=(-- --include-ignored)
  args+=(--cargo-test-arg=-- --cargo-test-arg=--include-ignored)
fi
# One mutant at a time (the suite's race trials want the cores); --in-place
# is one at a time already and refuses --jobs.
case " $* " in *" --in-place "*) ;; *) args+=(--jobs 1) ;; esac

command -v cargo-mutants >/dev/null 2>&1 || {
  echo "cargo-mutants is missing: cargo install cargo-mutants --locked" >&2
  exit 2
}

# The baseline: the unmutated tree must pass the oracle, or every mutant
# would look caught. Run here rather than by cargo-mutants, whose baseline
# (v27) tests the mutated packages and ignores --test-workspace.
case " $* " in
  *" --list "* | *" --list-files "*) ;;
  *)
    tests=()
    for t in "${oracle_tests[@]}"; do tests+=(--test "$t"); done
    if [ "$sample_half" = mutant ]; then
      echo "baseline: run before by the caller (scripts/mutants.sh --sample --baseline-only)"
    else
      echo "baseline: cargo test --workspace ${tests[*]} ${oracle_filter[*]} (unmutated)"
      if ! cargo test --workspace "${tests[@]}" "${oracle_filter[@]}"; then
        echo "the unmutated tree fails the oracle: no mutant can be judged" >&2
        exit 4
      fi
      if [ "$sample_half" = baseline ]; then
        echo "baseline: the unmutated tree passes the oracle"
        exit 0
      fi
    fi
    args+=(--baseline skip)
    ;;
esac

status=0
cargo mutants "${args[@]}" "$@" || status=$?

scripts/mutants-summary.sh "$out/mutants.out"
exit "$status"
