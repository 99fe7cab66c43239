# Sourced by scripts/redis-cluster.sh and scripts/pg-replica.sh:
# `one_at_a_time "$@"` makes the caller's command (start, stop, failover)
# the only one running on $DIR.
#
# Why: test processes run side by side (cargo-nextest, a process a test)
# and each may ask for the services; a second caller waits for the first's
# start and then finds them healthy. The lock is held by flock(1) around a
# second run of the calling script, never by a server it starts (-o: the
# servers outlive the script and must not keep the lock). Bounded like
# every wait: 300 s, then `die` (the caller's) says who held it.
# The lock file ($DIR.lock, empty) is never removed, not even by `stop`:
# a caller waiting on a removed file would lock another one than the next.
# Needs: $DIR and die() of the caller; without flock(1) it does nothing.
one_at_a_time() {
  if [ -n "${REQKEY_SERVICES_LOCK_HELD:-}" ] || ! command -v flock >/dev/null 2>&1; then
    return 0
  fi
  mkdir -p "$(dirname "$DIR")"
  local rc=0
  REQKEY_SERVICES_LOCK_HELD=1 flock -o -w 300 -E 75 "$DIR.lock" bash "$0" "$@" || rc=$?
  [ "$rc" != 75 ] || die "another caller held $DIR.lock for 300 s"
  exit "$rc"
}
