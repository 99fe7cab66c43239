#!/usr/bin/env bash
# A PostgreSQL primary and a hot standby streaming from it, on loopback,
# for the tests and certification of stores on a replicated database
# (docs/pg-replication.md).
#
#   scripts/pg-replica.sh start    start the pair (or leave a healthy one alone)
#   scripts/pg-replica.sh status   pg_stat_replication on the primary, the standby's replay state
#   scripts/pg-replica.sh stop     stop both servers and remove their files
#   scripts/pg-replica.sh failover crash the primary (SIGKILL) and promote the standby;
#                                  prints the new primary's URL
#
# Ports: REQKEY_PG_PRIMARY_PORT (default 5442), REQKEY_PG_STANDBY_PORT
# (default 5443). Files: REQKEY_PG_REPLICA_DIR (default /tmp/reqkey-pg-replica).
# Binaries: REQKEY_PG_BIN, or the newest /usr/lib/postgresql/*/bin (Debian's
# postgresql package). Trust auth on 127.0.0.1, user postgres, database test.
#
# The standby applies each commit REQKEY_PG_APPLY_DELAY after the primary
# (default 200ms, `recovery_min_apply_delay`): it models a lagging replica,
# so that a store reading from it reads stale rows deterministically and not
# only when loopback replication happens to be slow. WAL still streams at
# once; only replay waits. 0 turns the delay off.
#
# Replication is asynchronous unless REQKEY_PG_SYNC=1: then the primary
# answers a commit only once the standby has flushed it
# (synchronous_standby_names = '*'), so a failover keeps every
# acknowledged commit.
#
# initdb and the servers refuse to run as root: as root, they run as the
# `postgres` OS user. Every wait is bounded; a failure exits non-zero with
# the servers' log tails.
set -euo pipefail

PRIMARY_PORT="${REQKEY_PG_PRIMARY_PORT:-5442}"
STANDBY_PORT="${REQKEY_PG_STANDBY_PORT:-5443}"
DIR="${REQKEY_PG_REPLICA_DIR:-/tmp/reqkey-pg-replica}"
APPLY_DELAY="${REQKEY_PG_APPLY_DELAY:-200ms}"
SYNC="${REQKEY_PG_SYNC:-0}"
case "$SYNC" in
  0) SYNC_NAMES="" ;;
  1) SYNC_NAMES="*" ;;
  *) echo "pg-replica: REQKEY_PG_SYNC must be 0 or 1" >&2; exit 2 ;;
esac
HOST=127.0.0.1
DB=test

die() {
  echo "pg-replica: FATAL: $*" >&2
  for node in primary standby; do
    if [ -s "$DIR/$node.log" ]; then
      echo "--- $DIR/$node.log (last lines)" >&2
      tail -n 8 "$DIR/$node.log" >&2
    fi
  done
  exit 1
}

find_bin() {
  if [ -n "${REQKEY_PG_BIN:-}" ]; then
    echo "$REQKEY_PG_BIN"
    return
  fi
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  [ -n "$d" ] && echo "$d"
}

BIN="$(find_bin || true)"

need() {
  [ -n "$BIN" ] && [ -x "$BIN/initdb" ] && [ -x "$BIN/pg_ctl" ] && [ -x "$BIN/pg_basebackup" ] ||
    die "PostgreSQL server binaries not found (set REQKEY_PG_BIN; Debian: apt-get install postgresql)"
  command -v psql >/dev/null 2>&1 || [ -x "$BIN/psql" ] || die "psql is needed"
}

# Runs a server-side command as the postgres OS user when we are root.
as_pg() {
  if [ "$(id -u)" = 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

psql_at() {
  local port="$1"
  shift
  # Bounded: a statement that waits (for a synchronous standby that is
  # gone, say) is ended after 30 s.
  timeout 30 "${BIN:+$BIN/}psql" -X -q -A -t -h "$HOST" -p "$port" -U postgres -d "$DB" -v ON_ERROR_STOP=1 "$@"
}

answers() { psql_at "$1" -c 'SELECT 1' >/dev/null 2>&1; }

# The primary answers, is not in recovery and replicates as asked (sync or
# not); the standby answers, is in recovery with the apply delay asked for,
# and streams from the primary.
healthy() {
  answers "$PRIMARY_PORT" && answers "$STANDBY_PORT" || return 1
  [ "$(psql_at "$PRIMARY_PORT" -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = "f" ] || return 1
  [ "$(psql_at "$PRIMARY_PORT" -c "SELECT current_setting('synchronous_standby_names') = '$SYNC_NAMES'" 2>/dev/null)" = "t" ] || return 1
  [ "$(psql_at "$STANDBY_PORT" -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = "t" ] || return 1
  [ "$(psql_at "$STANDBY_PORT" -c "SELECT current_setting('recovery_min_apply_delay')::interval = '$APPLY_DELAY'::interval" 2>/dev/null)" = "t" ] || return 1
  [ "$(psql_at "$PRIMARY_PORT" -c "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'" 2>/dev/null)" -ge 1 ] || return 1
}

ours() { [ -f "$DIR/$1/postmaster.pid" ]; }
# pg_ctl status: 0 while the server of that data directory runs (a
# postmaster.pid left by a killed server does not count).
running() { as_pg "$BIN/pg_ctl" -D "$DIR/$1" status >/dev/null 2>&1; }

stop_nodes() {
  local node port
  for node in standby primary; do
    [ "$node" = primary ] && port="$PRIMARY_PORT" || port="$STANDBY_PORT"
    if ours "$node"; then
      if running "$node"; then
        as_pg "$BIN/pg_ctl" -D "$DIR/$node" -m fast -t 30 -w stop >/dev/null 2>&1 || true
        ! running "$node" || die "the $node on port $port does not stop within 30 s"
      fi
    elif answers "$port"; then
      die "port $port answers, but not a server this script started (no $DIR/$node/postmaster.pid); choose other REQKEY_PG_*_PORT"
    fi
  done
  rm -rf "$DIR"
}

start_node() {
  local node="$1"
  as_pg "$BIN/pg_ctl" -D "$DIR/$node" -l "$DIR/$node.log" -t 30 -w start >/dev/null ||
    die "the $node did not start within 30 s"
}

start() {
  need
  if healthy; then
    echo "pg-replica: already up"
    urls
    return 0
  fi
  # A half-made pair (or one left from another run) is made anew.
  stop_nodes
  mkdir -p "$DIR"
  [ "$(id -u)" = 0 ] && chown postgres: "$DIR"
  as_pg "$BIN/initdb" -D "$DIR/primary" -U postgres --auth=trust --no-sync -E UTF8 >"$DIR/initdb.log" 2>&1 ||
    { cat "$DIR/initdb.log" >&2; die "initdb failed"; }
  # initdb --auth=trust already admits replication connections from
  # 127.0.0.1; the settings below are the ones a streaming pair needs.
  cat >>"$DIR/primary/postgresql.conf" <<EOF
listen_addresses = '$HOST'
port = $PRIMARY_PORT
unix_socket_directories = '$DIR'
wal_level = replica
max_wal_senders = 4
hot_standby = on
EOF
  start_node primary
  psql_at "$PRIMARY_PORT" -d postgres -c "CREATE DATABASE $DB" || die "CREATE DATABASE $DB failed"
  as_pg "$BIN/pg_basebackup" -h "$HOST" -p "$PRIMARY_PORT" -U postgres -D "$DIR/standby" \
    -R -X stream --checkpoint=fast >"$DIR/basebackup.log" 2>&1 ||
    { cat "$DIR/basebackup.log" >&2; die "pg_basebackup failed"; }
  # postgresql.auto.conf (written by -R) holds primary_conninfo; the
  # standby's own settings follow the copied primary's, so they win.
  cat >>"$DIR/standby/postgresql.conf" <<EOF
port = $STANDBY_PORT
hot_standby = on
recovery_min_apply_delay = '$APPLY_DELAY'
synchronous_standby_names = ''
EOF
  start_node standby
  # Synchronous only now: before the standby streams, a synchronous
  # primary would wait for it on every commit (CREATE DATABASE above).
  psql_at "$PRIMARY_PORT" -c "ALTER SYSTEM SET synchronous_standby_names = '$SYNC_NAMES'" \
    -c "SELECT pg_reload_conf()" >/dev/null || die "setting synchronous_standby_names failed"
  local i
  for i in $(seq 1 150); do healthy && break; sleep 0.2; done
  healthy || { status >&2 || true; die "the standby is not streaming within 30 s"; }
  local mode=asynchronous
  [ "$SYNC" = 1 ] && mode=synchronous
  echo "pg-replica: up (files in $DIR; $mode; standby apply delay $APPLY_DELAY)"
  urls
}

urls() {
  echo "REQKEY_PG_PRIMARY_URL=postgres://postgres@$HOST:$PRIMARY_PORT/$DB"
  echo "REQKEY_PG_STANDBY_URL=postgres://postgres@$HOST:$STANDBY_PORT/$DB"
}

status() {
  echo "== primary $HOST:$PRIMARY_PORT: pg_stat_replication"
  psql_at "$PRIMARY_PORT" -P footer=off -c \
    "SELECT application_name, client_addr, state, sync_state, sent_lsn, replay_lsn, replay_lag FROM pg_stat_replication" \
    -t -A -F ' | ' 2>&1 || echo "(no answer)"
  echo "== standby $HOST:$STANDBY_PORT"
  psql_at "$STANDBY_PORT" -F ' | ' -c \
    "SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn(), current_setting('recovery_min_apply_delay')" \
    2>&1 || echo "(no answer)"
  healthy
}

# The primary crashes (SIGKILL to its postmaster: no shutdown checkpoint,
# nothing more sent to the standby) and the standby is promoted. What the
# standby had received is applied at promotion (the apply delay does not
# hold it back); what it had not received is gone.
failover() {
  need
  ours primary && running primary || die "no primary of this script runs"
  ours standby && running standby || die "no standby of this script runs"
  local pid i
  pid="$(head -n 1 "$DIR/primary/postmaster.pid")"
  kill -9 "$pid" || die "cannot kill the primary's postmaster ($pid)"
  for i in $(seq 1 100); do answers "$PRIMARY_PORT" || break; sleep 0.1; done
  ! answers "$PRIMARY_PORT" || die "the primary still answers 10 s after SIGKILL"
  as_pg "$BIN/pg_ctl" -D "$DIR/standby" -t 30 -w promote >/dev/null ||
    die "the standby was not promoted within 30 s"
  for i in $(seq 1 300); do
    [ "$(psql_at "$STANDBY_PORT" -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = "f" ] && break
    sleep 0.1
  done
  [ "$(psql_at "$STANDBY_PORT" -c 'SELECT pg_is_in_recovery()' 2>/dev/null)" = "f" ] ||
    die "the promoted standby is still in recovery after 30 s"
  echo "pg-replica: the primary was killed; the standby on $STANDBY_PORT is the primary now"
  echo "REQKEY_PG_PRIMARY_URL=postgres://postgres@$HOST:$STANDBY_PORT/$DB"
}

# One caller at a time (test processes run side by side): scripts/one-at-a-time.sh.
# shellcheck source=one-at-a-time.sh
. "$(dirname "${BASH_SOURCE[0]}")/one-at-a-time.sh"

case "${1:-}" in
  start) one_at_a_time "$@"; start ;;
  failover) one_at_a_time "$@"; failover ;;
  stop) one_at_a_time "$@"; stop_nodes; echo "pg-replica: stopped" ;;
  status) status ;;
  *) echo "usage: $0 start|status|stop|failover" >&2; exit 2 ;;
esac
