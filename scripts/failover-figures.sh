#!/usr/bin/env bash
# The figures of docs/failover.md, in one command: the kill-one-replica
# fault test (`reqkey bench failover`) over the local Postgres and Redis.
# Exits non-zero if either run found a duplicate run, a lost or a doubled
# input. Override the stores with REQKEY_POSTGRES_URL / REQKEY_REDIS_URL,
# the size with REQUESTS (default 1000) and CONCURRENCY (default 32).
set -euo pipefail
cd "$(dirname "$0")/.."
requests="${REQUESTS:-1000}"
concurrency="${CONCURRENCY:-32}"
cargo build --locked -q -p reqkey-harness
for store in "${REQKEY_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test}" \
             "${REQKEY_REDIS_URL:-redis://127.0.0.1:6379/}"; do
  target/debug/reqkey bench failover --store "$store" --requests "$requests" \
    --concurrency "$concurrency" --seed 1
  echo
done
