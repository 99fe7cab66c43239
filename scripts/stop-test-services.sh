#!/usr/bin/env bash
# Stops the services the test command (README) starts itself and leaves up:
# the Redis Cluster (127.0.0.1:7101-7103, files in /tmp/reqkey-redis-cluster)
# and the two PostgreSQL primary/standby pairs (127.0.0.1:5442-5443, files in
# /tmp/reqkey-pg-replica; 127.0.0.1:5444-5445, files in
# /tmp/reqkey-pg-failover), removing their files. The tests start them again
# when they need them (about 10 s).
#
#   scripts/stop-test-services.sh            stop them
#   scripts/stop-test-services.sh --dry-run  print what would be stopped
#
# Do not run it while tests run: they would lose their services mid-test.
# Services you started yourself on other ports or folders (REQKEY_* URLs)
# are yours and are left alone. Each stop is bounded (30 s per server).
set -euo pipefail
cd "$(dirname "$0")/.."

dry=0
case "${1-}" in
  "") ;;
  --dry-run) dry=1 ;;
  *) echo "usage: $0 [--dry-run]" >&2; exit 2 ;;
esac

# name | environment | script
services=(
  "Redis Cluster 127.0.0.1:7101-7103 (/tmp/reqkey-redis-cluster)|REQKEY_CLUSTER_PORTS=7101 7102 7103;REQKEY_CLUSTER_DIR=/tmp/reqkey-redis-cluster|scripts/redis-cluster.sh"
  "PostgreSQL pair 127.0.0.1:5442-5443 (/tmp/reqkey-pg-replica)|REQKEY_PG_PRIMARY_PORT=5442;REQKEY_PG_STANDBY_PORT=5443;REQKEY_PG_REPLICA_DIR=/tmp/reqkey-pg-replica|scripts/pg-replica.sh"
  "PostgreSQL failover pair 127.0.0.1:5444-5445 (/tmp/reqkey-pg-failover)|REQKEY_PG_PRIMARY_PORT=5444;REQKEY_PG_STANDBY_PORT=5445;REQKEY_PG_REPLICA_DIR=/tmp/reqkey-pg-failover|scripts/pg-replica.sh"
)

rc=0
for entry in "${services[@]}"; do
  IFS='|' read -r name env script <<<"$entry"
  if [ "$dry" = 1 ]; then
    echo "would stop: $name ($script stop)"
    continue
  fi
  # Nothing to stop when its folder is gone: it was never started here.
  dir="${env##*_DIR=}"
  if [ ! -d "$dir" ]; then
    echo "not running: $name"
    continue
  fi
  IFS=';' read -r -a vars <<<"$env"
  if env "${vars[@]}" bash "$script" stop; then
    echo "stopped: $name"
  else
    echo "could not stop: $name" >&2
    rc=1
  fi
done
exit "$rc"
