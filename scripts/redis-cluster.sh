#!/usr/bin/env bash
# A three-master Redis Cluster on loopback ports, for the tests and the
# certification of the Redis store on a cluster (docs/redis-cluster.md).
#
#   scripts/redis-cluster.sh start    start it (or leave a healthy one alone)
#   scripts/redis-cluster.sh status   print `cluster info` of every node
#   scripts/redis-cluster.sh stop     shut the nodes down and remove their files
#
# Ports: REQKEY_CLUSTER_PORTS (default "7101 7102 7103"; each node also uses
# PORT+10000 for the cluster bus). Files: REQKEY_CLUSTER_DIR (default
# /tmp/reqkey-redis-cluster), one folder per node. Every wait is bounded;
# any failure exits non-zero with the node's log tail.
set -euo pipefail

read -r -a PORTS <<<"${REQKEY_CLUSTER_PORTS:-7101 7102 7103}"
DIR="${REQKEY_CLUSTER_DIR:-/tmp/reqkey-redis-cluster}"
HOST=127.0.0.1

die() {
  echo "redis-cluster: FATAL: $*" >&2
  for p in "${PORTS[@]}"; do
    if [ -s "$DIR/$p/redis.log" ]; then
      echo "--- $DIR/$p/redis.log (last lines)" >&2
      tail -n 5 "$DIR/$p/redis.log" >&2
    fi
  done
  exit 1
}

need() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 ||
    die "redis-server and redis-cli are needed (Debian: apt-get install redis-server)"
}

cli() { redis-cli -h "$HOST" -p "$1" "${@:2}"; }
answers() { [ "$(cli "$1" ping 2>/dev/null)" = "PONG" ]; }
info_field() { cli "$1" cluster info 2>/dev/null | tr -d '\r' | sed -n "s/^$2://p"; }

# Every node answers, is in cluster mode, sees all the nodes and every slot.
healthy() {
  local p
  for p in "${PORTS[@]}"; do
    answers "$p" || return 1
    [ "$(info_field "$p" cluster_state)" = "ok" ] || return 1
    [ "$(info_field "$p" cluster_known_nodes)" = "${#PORTS[@]}" ] || return 1
    [ "$(info_field "$p" cluster_slots_assigned)" = "16384" ] || return 1
  done
}

stop_nodes() {
  local p i
  for p in "${PORTS[@]}"; do
    if answers "$p"; then
      [ -f "$DIR/$p/redis.pid" ] ||
        die "port $p answers, but not a node this script started (no $DIR/$p/redis.pid); choose other REQKEY_CLUSTER_PORTS"
      cli "$p" shutdown nosave >/dev/null 2>&1 || true
      for i in $(seq 1 50); do answers "$p" || break; sleep 0.1; done
      ! answers "$p" || die "the node on port $p does not shut down"
    fi
  done
  rm -rf "$DIR"
}

start() {
  need
  if healthy; then
    echo "redis-cluster: already up on ports ${PORTS[*]}"
    return 0
  fi
  # A half-made cluster (or one left from another run) is started anew.
  stop_nodes
  local p i nodes=()
  for p in "${PORTS[@]}"; do
    mkdir -p "$DIR/$p"
    redis-server --port "$p" --bind "$HOST" --protected-mode yes \
      --cluster-enabled yes --cluster-config-file "$DIR/$p/nodes.conf" \
      --cluster-node-timeout 5000 --dir "$DIR/$p" --save "" --appendonly no \
      --daemonize yes --pidfile "$DIR/$p/redis.pid" --logfile "$DIR/$p/redis.log" ||
      die "redis-server did not start on port $p"
    nodes+=("$HOST:$p")
  done
  for p in "${PORTS[@]}"; do
    for i in $(seq 1 100); do answers "$p" && break; sleep 0.1; done
    answers "$p" || die "the node on port $p does not answer PING within 10 s"
  done
  redis-cli --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes >"$DIR/create.log" 2>&1 ||
    { cat "$DIR/create.log" >&2; die "redis-cli --cluster create failed"; }
  for i in $(seq 1 300); do healthy && break; sleep 0.1; done
  healthy || { status >&2 || true; die "the cluster is not ok within 30 s"; }
  echo "redis-cluster: up, ${#PORTS[@]} masters on ports ${PORTS[*]} (files in $DIR)"
}

status() {
  local p
  for p in "${PORTS[@]}"; do
    echo "== $HOST:$p"
    cli "$p" cluster info 2>&1 | tr -d '\r' | grep -E '^cluster_(state|slots_assigned|known_nodes|size):' ||
      echo "(no answer)"
  done
  healthy
}

# One caller at a time (test processes run side by side): scripts/one-at-a-time.sh.
# shellcheck source=one-at-a-time.sh
. "$(dirname "${BASH_SOURCE[0]}")/one-at-a-time.sh"

case "${1:-}" in
  start) one_at_a_time "$@"; start ;;
  stop) one_at_a_time "$@"; stop_nodes; echo "redis-cluster: stopped" ;;
  status) status ;;
  *) echo "usage: $0 start|status|stop" >&2; exit 2 ;;
esac
