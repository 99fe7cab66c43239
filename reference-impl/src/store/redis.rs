//! The Redis reference store.
//!
//! Storage mirrors the release notes' Redis row: the hash
//! `session:request-keys:{sessionId}` maps a request key to the run id that
//! holds it. The rest of a session lives next to it, under the same hash
//! tag `{sessionId}` (so a cluster keeps a session in one slot):
//!
//! | key | type | content |
//! |---|---|---|
//! | `session:request-keys:{S}` | hash | request key -> run id |
//! | `reqkey:runs:{S}` | hash | run id -> run JSON (wire `RunMetadata`) |
//! | `reqkey:digests:{S}` | hash | run id -> start digest |
//! | `reqkey:order:{S}` | list | run ids by `startSequence` (the last is current) |
//! | `reqkey:inputs:{S}` | list | input log entries `{"runId","input"}` |
//! | `reqkey:leases:{S}` | hash | run id -> `EXPIRES_AT_MS|OWNER` (run leases, SPEC 5) |
//!
//! Why Lua: Redis has no multi-key read-decide-write transaction that a
//! shared multiplexed connection can use (`WATCH` needs a connection per
//! caller), so the whole run-start commit is ONE script, [`COMMIT_LUA`],
//! which Redis runs atomically. Everything that can happen outside it does:
//! the request is validated and its start digest computed in Rust with
//! `reqkey_model` (`validate_start_run`, `start_digest`), and the input is
//! stored in canonical JSON. The script itself has to apply SPEC 4's four
//! rules in SPEC 4's order (same-runId replay by start digest, key holder,
//! CAS, write); this is the one place in the workspace where the order is
//! restated, so it is kept tiny, and the backend tests drive random
//! operation sequences through it and through `reqkey_model::seq::SeqStore`
//! and require identical answers.
//!
//! `setRunStatus` keeps its rule in Rust: it reads the run, checks the
//! transition with `reqkey_model::check_status_transition`, and writes with
//! a compare-and-set script (retried, bounded, if the run changed between).
//! `deleteSession` is one script that `DEL`s all six keys, which Redis
//! applies atomically; it answers `true` when a data key existed (a lease
//! alone is no session).
//!
//! Redis Cluster (`redis+cluster://HOST:PORT[,HOST:PORT...]`, see
//! docs/redis-cluster.md): the six keys of a session carry the hash tag
//! `{sessionId}`, so they hash to one slot and every script above touches
//! only that slot; the store keeps no global key. A session id is checked
//! (`[A-Za-z0-9._:-]`, SPEC 1) before any key is built from it, so it cannot
//! contain a brace that would change the tag. The cluster client routes
//! each script and command to the master of the session's slot and follows
//! `MOVED`/`ASK` redirections.
//!
//! Writes are never sent twice (SPEC 4, "The database link"). A cluster
//! client left to itself resends a command whose connection dropped; a
//! resent commit would meet its own run and answer `replayed` to the one
//! client that sent it once, and a resent status change would meet its
//! own status and answer `invalid_transition` (issue 49's link faults
//! showed both). So the store's cluster client resends nothing, and the
//! store decides: a command the server refused without running it (a
//! redirection, a slot in migration, a cluster not ready) is sent again,
//! a bounded number of times, read or write; a read whose connection
//! dropped is sent again (a read sent twice answers the same); a write
//! whose connection dropped is not, and answers `internal`, its outcome
//! unknown. Every command is bounded by `RESPONSE_TIMEOUT`, the store's
//! own bound on its database.

use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::Script;
use reqkey_model::rules::{check_status_transition, validate_session_id, validate_start_run};
use reqkey_model::{
    start_digest, CommitOutcome, CommitResult, InputEntry, RunMetadata, RunStartRejection,
    RunStatus, StartRun, StoreError,
};

use super::api::{redact_url, OpenError, SessionStateStore};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The store's bound on one command (a benchmark's seeding pipeline
/// included): past it the command answers `internal`, its outcome unknown.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(5);
/// Attempts per (re)connection, backing off from 100 ms up to the delay
/// below; the first connection is bounded by `CONNECT_TIMEOUT` as a whole.
const RECONNECT_RETRIES: usize = 3;
const RECONNECT_MAX_DELAY: Duration = Duration::from_secs(1);
/// Bound on `setRunStatus`'s compare-and-set retries.
const MAX_STATUS_ATTEMPTS: usize = 16;
/// A command the server did not run, or a read whose connection dropped,
/// is sent again at most this often, `RESEND_WAIT_MS` times the try
/// number apart (see [`RedisStore::read`]).
const CLUSTER_RETRIES: u32 = 5;
const RESEND_WAIT_MS: u64 = 50;

/// The scheme of a Redis Cluster store specification.
pub const CLUSTER_SCHEME: &str = "redis+cluster://";

/// The run-start commit. KEYS: runs, digests, request-keys, order, inputs.
/// ARGV: sessionId, runId, startDigest, hasExpected ("1"/"0"),
/// expectedCurrentRunId, requestKey ("" when keyless), requestDigest,
/// input entry JSON. Answers `{outcome, payload}`.
pub const COMMIT_LUA: &str = r#"
local run_id = ARGV[2]
-- 1. same-runId replay (by start digest)
local digest = redis.call('HGET', KEYS[2], run_id)
if digest then
  if digest == ARGV[3] then return {'replayed', redis.call('HGET', KEYS[1], run_id)} end
  return {'run_id_conflict', run_id}
end
-- 2. key holder
local key = ARGV[6]
if key ~= '' then
  local holder = redis.call('HGET', KEYS[3], key)
  if holder and holder ~= run_id then return {'request_key_taken', holder} end
end
-- 3. CAS on the current run
local current = redis.call('LINDEX', KEYS[4], -1)
local expected = false
if ARGV[4] == '1' then expected = ARGV[5] end
if current ~= expected then
  if current then return {'cas_mismatch', current} end
  return {'cas_mismatch'}
end
-- 4. write
local run = {sessionId = ARGV[1], runId = run_id, status = 'running',
             startSequence = redis.call('LLEN', KEYS[4]) + 1}
if key ~= '' then
  run.requestKey = key
  run.requestDigest = ARGV[7]
  redis.call('HSET', KEYS[3], key, run_id)
end
local json = cjson.encode(run)
redis.call('HSET', KEYS[1], run_id, json)
redis.call('HSET', KEYS[2], run_id, ARGV[3])
redis.call('RPUSH', KEYS[4], run_id)
redis.call('RPUSH', KEYS[5], ARGV[8])
return {'started', json}
"#;

/// KEYS: request-keys, runs. ARGV: key. The holder's run JSON or nil.
const BY_KEY_LUA: &str = r#"
local id = redis.call('HGET', KEYS[1], ARGV[1])
if not id then return false end
return redis.call('HGET', KEYS[2], id)
"#;

/// KEYS: order, runs. The current run's JSON or nil.
const CURRENT_LUA: &str = r#"
local id = redis.call('LINDEX', KEYS[1], -1)
if not id then return false end
return redis.call('HGET', KEYS[2], id)
"#;

/// KEYS: runs. ARGV: runId, old JSON, new JSON. 1 if swapped.
const SET_STATUS_LUA: &str = r#"
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
  return 1
end
return 0
"#;

/// KEYS: leases. ARGV: runId, owner, expiresAtMs. 1 if the owner now
/// holds the lease until then; 0 (nothing written) if another owner does.
const RENEW_LEASE_LUA: &str = r#"
local v = redis.call('HGET', KEYS[1], ARGV[1])
if v then
  local bar = string.find(v, '|', 1, true)
  if not bar or string.sub(v, bar + 1) ~= ARGV[2] then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3] .. '|' .. ARGV[2])
return 1
"#;

/// KEYS: runs, leases. ARGV: runId, old JSON, new JSON, nowMs. Swaps the
/// run to the new (interrupted) JSON only if it is still the old one and its
/// lease is absent or expired at nowMs: 1 swapped, 0 the lease is alive,
/// -1 the run changed (read again).
const EXPIRE_LEASE_LUA: &str = r#"
if redis.call('HGET', KEYS[1], ARGV[1]) ~= ARGV[2] then return -1 end
local v = redis.call('HGET', KEYS[2], ARGV[1])
if v then
  local at = tonumber(string.match(v, '^(%d+)|'))
  if at and at > tonumber(ARGV[4]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
return 1
"#;

/// KEYS: the five data keys, then leases. Deletes all six at once; answers
/// how many of the five data keys existed.
const DELETE_LUA: &str = r#"
local n = redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
redis.call('DEL', KEYS[6])
return n
"#;

/// The keys of one session. All six carry the hash tag `{sessionId}`.
struct Keys {
    request_keys: String,
    runs: String,
    digests: String,
    order: String,
    inputs: String,
    leases: String,
}

impl Keys {
    /// The keys of a session whose id has been checked (SPEC 1's alphabet
    /// has no brace, so the tag is the whole id).
    fn of(session_id: &str) -> Keys {
        Keys {
            request_keys: format!("session:request-keys:{{{session_id}}}"),
            runs: format!("reqkey:runs:{{{session_id}}}"),
            digests: format!("reqkey:digests:{{{session_id}}}"),
            order: format!("reqkey:order:{{{session_id}}}"),
            inputs: format!("reqkey:inputs:{{{session_id}}}"),
            leases: format!("reqkey:leases:{{{session_id}}}"),
        }
    }

    /// The keys of `session_id`, or `invalid_argument` for an id outside
    /// SPEC 1 (which could break the hash tag); nothing is touched then.
    fn checked(session_id: &str) -> Result<Keys, StoreError> {
        validate_session_id(session_id)?;
        Ok(Keys::of(session_id))
    }

    fn all(&self) -> [&str; 6] {
        [
            &self.request_keys,
            &self.runs,
            &self.digests,
            &self.order,
            &self.inputs,
            &self.leases,
        ]
    }
}

/// The connection of a store: to one Redis, or to a Redis Cluster.
#[derive(Clone)]
enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// `redis+cluster://[USER[:PASSWORD]@]HOST:PORT[,HOST:PORT...][/]` as the
/// `redis://` URLs of its seed nodes (the credentials go to every node).
/// The error names the bad part, never the password.
pub fn cluster_node_urls(spec: &str) -> Result<Vec<String>, String> {
    let rest = spec
        .strip_prefix(CLUSTER_SCHEME)
        .ok_or_else(|| format!("a cluster URL starts with {CLUSTER_SCHEME}"))?;
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    let (userinfo, hosts) = match rest.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, rest),
    };
    if hosts.contains(['/', '?', '#']) {
        return Err(
            "a cluster URL names only its nodes (HOST:PORT,...): a cluster has one database \
             and takes no options"
                .into(),
        );
    }
    hosts
        .split(',')
        .map(|node| {
            let port = node.rsplit_once(':').and_then(|(host, port)| {
                (!host.is_empty() && !host.contains('@'))
                    .then(|| port.parse::<u16>().ok())
                    .flatten()
            });
            match (port, userinfo) {
                (Some(_), Some(userinfo)) => Ok(format!("redis://{userinfo}@{node}")),
                (Some(_), None) => Ok(format!("redis://{node}")),
                (None, _) => Err(format!("node `{node}` is not HOST:PORT")),
            }
        })
        .collect()
}

/// The Redis reference store, on one Redis or on a Redis Cluster. Cheap to
/// clone. On one Redis it holds one multiplexed connection, re-established
/// in the background when Redis drops it: a write that meets the broken
/// connection answers `internal` (its outcome unknown), a read is sent
/// again, on the new connection; no write is sent twice. On a cluster it
/// holds the cluster client's connection (one per master), which resends
/// nothing itself (see the module notes).
#[derive(Clone)]
pub struct RedisStore {
    conn: Conn,
    target: String,
    commit: Script,
    by_key: Script,
    current: Script,
    set_status: Script,
    renew_lease: Script,
    expire_lease: Script,
    delete: Script,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

fn redis_err(e: redis::RedisError) -> StoreError {
    StoreError::internal(format!("redis: {e}"))
}

/// Did the server refuse a command without running it (a cluster's
/// redirection, a slot in migration, a cluster or master not ready, a
/// server loading), or did the cluster client have no connection to send
/// it on (a link down, not yet back: SPEC 4
/// `[[store.link.down-answers-internal]]` wants the store to answer again
/// once it is)? Then sending it again is safe.
fn not_run(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::ClusterConnectionNotFound
            | ErrorKind::Server(
                ServerErrorKind::Moved
                    | ServerErrorKind::Ask
                    | ServerErrorKind::TryAgain
                    | ServerErrorKind::ClusterDown
                    | ServerErrorKind::MasterDown
                    | ServerErrorKind::BusyLoading
            )
    )
}

/// A read or a write, sent by [`RedisStore::read`] / [`RedisStore::write`].
enum Command<'a> {
    Cmd(&'a redis::Cmd),
    Script(&'a redis::ScriptInvocation<'a>),
}

impl Command<'_> {
    async fn send<T: redis::FromRedisValue>(&self, mut conn: Conn) -> redis::RedisResult<T> {
        match self {
            Command::Cmd(cmd) => cmd.query_async(&mut conn).await,
            Command::Script(script) => script.invoke_async(&mut conn).await,
        }
    }
}

fn parse_run(json: &str) -> Result<RunMetadata, StoreError> {
    serde_json::from_str(json)
        .map_err(|e| StoreError::internal(format!("stored run is not a RunMetadata: {e}")))
}

impl RedisStore {
    /// Connects to `url` and checks it answers: `redis://HOST:PORT[/DB]`
    /// for one Redis, `redis+cluster://HOST:PORT[,HOST:PORT...]` for a
    /// Redis Cluster (its seed nodes; the client learns the rest).
    pub async fn connect(url: &str) -> Result<Self, OpenError> {
        if url.starts_with(CLUSTER_SCHEME) {
            return Self::connect_cluster(url).await;
        }
        let target = redact_url(url);
        let backend_err = |message: String| OpenError::Backend {
            backend: "redis",
            target: target.clone(),
            message,
        };
        let client = redis::Client::open(url).map_err(|e| backend_err(format!("bad URL: {e}")))?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(RECONNECT_RETRIES)
            .set_max_delay(RECONNECT_MAX_DELAY);
        let mut conn = tokio::time::timeout(
            CONNECT_TIMEOUT,
            ConnectionManager::new_with_config(client, config),
        )
        .await
        .map_err(|_| backend_err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
        .map_err(|e| backend_err(e.to_string()))?;
        let pong: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| backend_err(e.to_string()))?;
        if pong != "PONG" {
            return Err(backend_err(format!("PING answered {pong:?}")));
        }
        Ok(Self::with(Conn::Single(conn), target))
    }

    /// Connects to a Redis Cluster and checks that it serves every slot.
    async fn connect_cluster(url: &str) -> Result<Self, OpenError> {
        let target = redact_url(url);
        let backend_err = |message: String| OpenError::Backend {
            backend: "redis-cluster",
            target: target.clone(),
            message,
        };
        let nodes = cluster_node_urls(url).map_err(|e| backend_err(format!("bad URL: {e}")))?;
        // The client resends nothing: the store decides what is sent again
        // (`RedisStore::read`, `RedisStore::write`).
        let client = ClusterClient::builder(nodes)
            .connection_timeout(CONNECT_TIMEOUT)
            .response_timeout(RESPONSE_TIMEOUT)
            .overall_response_timeout(Some(RESPONSE_TIMEOUT))
            .retries(0)
            .build()
            .map_err(|e| backend_err(format!("bad URL: {e}")))?;
        let mut conn = tokio::time::timeout(CONNECT_TIMEOUT, client.get_async_connection())
            .await
            .map_err(|_| backend_err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
            .map_err(|e| backend_err(e.to_string()))?;
        // A cluster that is not `ok` (a slot without a master) would answer
        // some sessions and not others; refuse it whole, up front.
        let info: String = tokio::time::timeout(
            CONNECT_TIMEOUT,
            redis::cmd("CLUSTER").arg("INFO").query_async(&mut conn),
        )
        .await
        .map_err(|_| backend_err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
        .map_err(|e| backend_err(e.to_string()))?;
        if !info.lines().any(|l| l.trim() == "cluster_state:ok") {
            return Err(backend_err(format!(
                "the cluster is not ok: {}",
                info.lines()
                    .find(|l| l.starts_with("cluster_state:"))
                    .unwrap_or("no cluster_state in CLUSTER INFO")
                    .trim()
            )));
        }
        Ok(Self::with(Conn::Cluster(conn), target))
    }

    fn with(conn: Conn, target: String) -> Self {
        Self {
            conn,
            target,
            commit: Script::new(COMMIT_LUA),
            by_key: Script::new(BY_KEY_LUA),
            current: Script::new(CURRENT_LUA),
            set_status: Script::new(SET_STATUS_LUA),
            renew_lease: Script::new(RENEW_LEASE_LUA),
            expire_lease: Script::new(EXPIRE_LEASE_LUA),
            delete: Script::new(DELETE_LUA),
        }
    }

    /// A read: sent again when the server did not run it ([`not_run`]) or
    /// its connection dropped (a read sent twice answers the same), a
    /// bounded number of times, while the client learns the slot's owner
    /// or connects again.
    async fn read<T: redis::FromRedisValue>(&self, command: Command<'_>) -> Result<T, StoreError> {
        self.send(command, true).await
    }

    /// A write: sent again only when the server refused it without
    /// running it ([`not_run`]), a bounded number of times; a write whose
    /// connection broke is never sent again (its outcome is unknown:
    /// `internal`, SPEC 4 `[[store.link.unknown-outcome]]`).
    async fn write<T: redis::FromRedisValue>(&self, command: Command<'_>) -> Result<T, StoreError> {
        self.send(command, false).await
    }

    async fn send<T: redis::FromRedisValue>(
        &self,
        command: Command<'_>,
        read: bool,
    ) -> Result<T, StoreError> {
        let mut tries: u64 = 0;
        loop {
            match command.send(self.conn.clone()).await {
                Err(e)
                    if tries < u64::from(CLUSTER_RETRIES)
                        && (not_run(&e) || (read && e.is_connection_dropped())) =>
                {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(RESEND_WAIT_MS * tries)).await;
                }
                answer => return answer.map_err(redis_err),
            }
        }
    }

    /// Whether this store is on a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    /// The names of the keys that hold `session_id` (the module's table),
    /// for tests and operators that inspect a session by hand.
    pub fn session_keys(session_id: &str) -> Result<[String; 6], StoreError> {
        let k = Keys::checked(session_id)?;
        Ok(k.all().map(str::to_owned))
    }

    /// The server's id for this store's connection (`CLIENT ID`), so that
    /// a test can cut exactly this connection with `CLIENT KILL ID`. One
    /// Redis only: a cluster store has a connection per master.
    pub async fn connection_id(&self) -> Result<i64, StoreError> {
        if self.is_cluster() {
            return Err(StoreError::internal(
                "a cluster store has one connection per master, not one CLIENT ID",
            ));
        }
        redis::cmd("CLIENT")
            .arg("ID")
            .query_async(&mut self.conn.clone())
            .await
            .map_err(redis_err)
    }

    /// Writes `sessions` sessions of `runs_per_session` keyed runs each
    /// (session `{prefix}-{i}`, run `r{j}`, key `k{j}`, digest `d{j}`) with
    /// pipelined multi-field writes: the benchmark's fast seeding path. It
    /// writes the layout a commit would, minus the rule checks, so it must
    /// only target sessions that do not exist yet. On a cluster a pipeline
    /// must stay in one slot, so each holds one session.
    pub async fn bulk_seed(
        &self,
        prefix: &str,
        sessions: u64,
        runs_per_session: u64,
    ) -> Result<(), StoreError> {
        let per_pipeline: u64 = if self.is_cluster() { 1 } else { 20 };
        let mut conn = self.conn.clone();
        let mut s = 0;
        while s < sessions {
            let mut pipe = redis::pipe();
            for i in s..(s + per_pipeline).min(sessions) {
                let session_id = format!("{prefix}-{i}");
                let k = Keys::checked(&session_id)?;
                let (mut runs, mut digests, mut keys) =
                    (redis::cmd("HSET"), redis::cmd("HSET"), redis::cmd("HSET"));
                let (mut order, mut inputs) = (redis::cmd("RPUSH"), redis::cmd("RPUSH"));
                runs.arg(&k.runs);
                digests.arg(&k.digests);
                keys.arg(&k.request_keys);
                order.arg(&k.order);
                inputs.arg(&k.inputs);
                for j in 1..=runs_per_session {
                    let run = RunMetadata {
                        session_id: session_id.clone(),
                        run_id: format!("r{j}"),
                        status: RunStatus::Running,
                        start_sequence: j,
                        request_key: Some(format!("k{j}")),
                        request_digest: Some(format!("d{j}")),
                    };
                    let json = serde_json::to_string(&run)
                        .map_err(|e| StoreError::internal(e.to_string()))?;
                    runs.arg(&run.run_id).arg(json);
                    digests.arg(&run.run_id).arg(format!("seed{j}"));
                    keys.arg(format!("k{j}")).arg(&run.run_id);
                    order.arg(&run.run_id);
                    inputs.arg(format!(r#"{{"runId":"r{j}","input":null}}"#));
                }
                for c in [runs, digests, keys, order, inputs] {
                    pipe.add_command(c).ignore();
                }
            }
            pipe.query_async::<()>(&mut conn).await.map_err(redis_err)?;
            s += per_pipeline;
        }
        Ok(())
    }

    /// Deletes the sessions `{prefix}-0 .. {prefix}-{sessions-1}` that
    /// [`RedisStore::bulk_seed`] wrote.
    pub async fn delete_seeded(&self, prefix: &str, sessions: u64) -> Result<(), StoreError> {
        let per_pipeline: u64 = if self.is_cluster() { 1 } else { 100 };
        let mut conn = self.conn.clone();
        let mut s = 0;
        while s < sessions {
            let mut pipe = redis::pipe();
            for i in s..(s + per_pipeline).min(sessions) {
                pipe.cmd("DEL")
                    .arg(&Keys::checked(&format!("{prefix}-{i}"))?.all()[..])
                    .ignore();
            }
            pipe.query_async::<()>(&mut conn).await.map_err(redis_err)?;
            s += per_pipeline;
        }
        Ok(())
    }
}

#[async_trait]
impl SessionStateStore for RedisStore {
    fn durable(&self) -> bool {
        // The data lives in the Redis server, which outlives this process
        // (whether Redis itself persists is its own configuration).
        true
    }

    fn backend(&self) -> &'static str {
        match self.conn {
            Conn::Single(_) => "redis",
            Conn::Cluster(_) => "redis-cluster",
        }
    }

    async fn commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError> {
        validate_start_run(&start)?;
        let k = Keys::of(&start.session_id);
        let digest = start_digest(&start);
        let entry = format!(
            r#"{{"runId":{},"input":{}}}"#,
            serde_json::to_string(&start.run_id)
                .map_err(|e| StoreError::internal(e.to_string()))?,
            reqkey_model::written_json(&start.input)
        );
        let mut invocation = self.commit.prepare_invoke();
        invocation
            .key(&k.runs)
            .key(&k.digests)
            .key(&k.request_keys)
            .key(&k.order)
            .key(&k.inputs)
            .arg(&start.session_id)
            .arg(&start.run_id)
            .arg(&digest)
            .arg(if start.expected_current_run_id.is_some() {
                "1"
            } else {
                "0"
            })
            .arg(start.expected_current_run_id.as_deref().unwrap_or_default())
            .arg(start.request_key.as_deref().unwrap_or_default())
            .arg(start.request_digest.as_deref().unwrap_or_default())
            .arg(entry);
        let answer: Vec<String> = self.write(Command::Script(&invocation)).await?;
        let tag = answer.first().map(String::as_str);
        let payload = answer.get(1).cloned();
        match (tag, payload) {
            (Some("started"), Some(json)) => Ok(CommitResult {
                outcome: CommitOutcome::Started,
                run: parse_run(&json)?,
            }),
            (Some("replayed"), Some(json)) => Ok(CommitResult {
                outcome: CommitOutcome::Replayed,
                run: parse_run(&json)?,
            }),
            (Some("run_id_conflict"), Some(id)) => Err(RunStartRejection::RunIdConflict {
                existing_run_id: id,
            }
            .into()),
            (Some("request_key_taken"), Some(id)) => Err(RunStartRejection::RequestKeyTaken {
                existing_run_id: id,
            }
            .into()),
            (Some("cas_mismatch"), current) => Err(RunStartRejection::CasMismatch {
                current_run_id: current,
            }
            .into()),
            _ => Err(StoreError::internal(format!(
                "the commit script answered {answer:?}"
            ))),
        }
    }

    async fn get_run(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let mut cmd = redis::cmd("HGET");
        cmd.arg(Keys::checked(session_id)?.runs).arg(run_id);
        let json: Option<String> = self.read(Command::Cmd(&cmd)).await?;
        json.as_deref().map(parse_run).transpose()
    }

    async fn get_current_run(&self, session_id: &str) -> Result<Option<RunMetadata>, StoreError> {
        let k = Keys::checked(session_id)?;
        let mut invocation = self.current.prepare_invoke();
        invocation.key(&k.order).key(&k.runs);
        let json: Option<String> = self.read(Command::Script(&invocation)).await?;
        json.as_deref().map(parse_run).transpose()
    }

    async fn list_runs(&self, session_id: &str) -> Result<Vec<RunMetadata>, StoreError> {
        let mut cmd = redis::cmd("HVALS");
        cmd.arg(Keys::checked(session_id)?.runs);
        let values: Vec<String> = self.read(Command::Cmd(&cmd)).await?;
        let mut runs = values
            .iter()
            .map(|json| parse_run(json))
            .collect::<Result<Vec<_>, _>>()?;
        runs.sort_by_key(|r| r.start_sequence);
        Ok(runs)
    }

    async fn get_run_by_request_key(
        &self,
        session_id: &str,
        request_key: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let k = Keys::checked(session_id)?;
        let mut invocation = self.by_key.prepare_invoke();
        invocation
            .key(&k.request_keys)
            .key(&k.runs)
            .arg(request_key);
        let json: Option<String> = self.read(Command::Script(&invocation)).await?;
        json.as_deref().map(parse_run).transpose()
    }

    async fn list_inputs(&self, session_id: &str) -> Result<Vec<InputEntry>, StoreError> {
        let mut cmd = redis::cmd("LRANGE");
        cmd.arg(Keys::checked(session_id)?.inputs).arg(0).arg(-1);
        let entries: Vec<String> = self.read(Command::Cmd(&cmd)).await?;
        entries
            .iter()
            .map(|e| {
                serde_json::from_str(e)
                    .map_err(|e| StoreError::internal(format!("stored input entry: {e}")))
            })
            .collect()
    }

    async fn set_run_status(
        &self,
        session_id: &str,
        run_id: &str,
        status: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        let k = Keys::checked(session_id)?;
        for _ in 0..MAX_STATUS_ATTEMPTS {
            let mut cmd = redis::cmd("HGET");
            cmd.arg(&k.runs).arg(run_id);
            let old: Option<String> = self.read(Command::Cmd(&cmd)).await?;
            let old = old.ok_or_else(|| {
                StoreError::NotFound(format!("no run {run_id} in session {session_id}"))
            })?;
            let mut run = parse_run(&old)?;
            check_status_transition(&run, status)?;
            run.status = status;
            let new =
                serde_json::to_string(&run).map_err(|e| StoreError::internal(e.to_string()))?;
            let mut invocation = self.set_status.prepare_invoke();
            invocation.key(&k.runs).arg(run_id).arg(&old).arg(&new);
            let swapped: i64 = self.write(Command::Script(&invocation)).await?;
            if swapped == 1 {
                return Ok(run);
            }
        }
        Err(StoreError::internal(format!(
            "run {run_id} kept changing; setRunStatus gave up after {MAX_STATUS_ATTEMPTS} attempts"
        )))
    }

    async fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let k = Keys::checked(session_id)?;
        let [request_keys, runs, digests, order, inputs, leases] = k.all();
        // The session existed if any of its data keys did; a lease alone
        // (taken before a commit that was then refused) does not make one.
        let mut invocation = self.delete.prepare_invoke();
        invocation
            .key(request_keys)
            .key(runs)
            .key(digests)
            .key(order)
            .key(inputs)
            .key(leases);
        let removed: i64 = self.write(Command::Script(&invocation)).await?;
        Ok(removed > 0)
    }

    async fn renew_lease(
        &self,
        session_id: &str,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let k = Keys::checked(session_id)?;
        let mut invocation = self.renew_lease.prepare_invoke();
        invocation
            .key(&k.leases)
            .arg(run_id)
            .arg(owner)
            .arg(expires_at_ms);
        let renewed: i64 = self.write(Command::Script(&invocation)).await?;
        Ok(renewed == 1)
    }

    async fn expire_lease(
        &self,
        session_id: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let k = Keys::checked(session_id)?;
        for _ in 0..MAX_STATUS_ATTEMPTS {
            let mut cmd = redis::cmd("HGET");
            cmd.arg(&k.runs).arg(run_id);
            let old: Option<String> = self.read(Command::Cmd(&cmd)).await?;
            let Some(old) = old else {
                return Ok(None);
            };
            let mut run = parse_run(&old)?;
            if run.status != RunStatus::Running {
                return Ok(Some(run));
            }
            let mut after = run.clone();
            after.status = RunStatus::Interrupted;
            let new =
                serde_json::to_string(&after).map_err(|e| StoreError::internal(e.to_string()))?;
            let mut invocation = self.expire_lease.prepare_invoke();
            invocation
                .key(&k.runs)
                .key(&k.leases)
                .arg(run_id)
                .arg(&old)
                .arg(&new)
                .arg(now_ms);
            let swapped: i64 = self.write(Command::Script(&invocation)).await?;
            match swapped {
                1 => return Ok(Some(after)),
                0 => {
                    run.status = RunStatus::Running;
                    return Ok(Some(run));
                }
                _ => {}
            }
        }
        Err(StoreError::internal(format!(
            "run {run_id} kept changing; expiring its lease gave up after {MAX_STATUS_ATTEMPTS} attempts"
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_cluster_url_becomes_one_redis_url_per_seed_node() {
        assert_eq!(
            cluster_node_urls("redis+cluster://127.0.0.1:7101,127.0.0.1:7102/").unwrap(),
            ["redis://127.0.0.1:7101", "redis://127.0.0.1:7102"]
        );
        assert_eq!(
            cluster_node_urls("redis+cluster://u:pw@a:1,[::1]:2").unwrap(),
            ["redis://u:pw@a:1", "redis://u:pw@[::1]:2"]
        );
    }

    #[test]
    fn a_bad_cluster_url_is_refused_without_its_password() {
        for bad in [
            "redis+cluster://",
            "redis+cluster://a:1,",
            "redis+cluster://a",
            "redis+cluster://:1",
            "redis+cluster://a:99999",
            "redis+cluster://a:1/0",
            "redis+cluster://a:1?x=y",
            "redis+cluster://u:secret@a:1,b",
            "redis://a:1",
        ] {
            let e = cluster_node_urls(bad).unwrap_err();
            assert!(!e.contains("secret"), "{bad}: {e}");
        }
    }

    /// Redis hashes the part between the first `{` and the next `}`; every
    /// key of a session must give the same part, and it must be the id.
    #[test]
    fn every_key_of_a_session_carries_the_session_id_as_its_hash_tag() {
        fn tag(key: &str) -> Option<&str> {
            let open = key.find('{')?;
            let close = key[open + 1..].find('}')? + open + 1;
            (close > open + 1).then(|| &key[open + 1..close])
        }
        for id in ["s", "a.b:c-d_9", &"x".repeat(256)] {
            for key in RedisStore::session_keys(id).unwrap() {
                assert_eq!(tag(&key), Some(id), "{key}");
            }
        }
        for bad in ["}x", "a{b", "a}b", "", "a b"] {
            assert!(
                matches!(
                    RedisStore::session_keys(bad),
                    Err(StoreError::InvalidArgument(_))
                ),
                "{bad:?}"
            );
        }
    }
}
