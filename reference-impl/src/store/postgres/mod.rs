//! The PostgreSQL reference store (tokio-postgres).
//!
//! Storage mirrors the release notes' Postgres row, under this project's own
//! table names so that it can share a database: `reqkey_sessions` (one row
//! per existing session, the lock the commit takes), `reqkey_runs` with
//! `request_key` / `request_digest` and a unique partial index on
//! `(session_id, request_key) WHERE request_key IS NOT NULL`, and
//! `reqkey_inputs`.
//!
//! Why a session row lock: at READ COMMITTED two commits could both read
//! "no holder, current run r1" and both write. The commit therefore locks
//! the session row, creating it if missing (`INSERT ... ON CONFLICT DO
//! UPDATE`, the one statement that always ends holding a live row's lock;
//! `ON CONFLICT DO NOTHING` + `SELECT ... FOR UPDATE` can find the row
//! deleted in between), and only then reads the same-runId run, the
//! key's holder and the current run, decides with
//! `reqkey_model::apply_run_start_rules` and writes, all in one transaction.
//! Commits of one session serialize on that row; commits of different
//! sessions do not contend. A refused commit rolls back, so it does not
//! create the session row either.
//!
//! The unique index is a backstop. Under the lock it cannot fire, but if it
//! ever does (a writer that bypasses the lock), the store re-reads the
//! holder and answers `request_key_taken` naming it, never SQLSTATE 23505
//! (no holder left: the commit runs again).
//!
//! The database link (SPEC 4, "The database link"; issue 49). A write
//! PostgreSQL rolled back as a serialization failure or a deadlock
//! (40001, 40P01) is run again, a bounded number of times: nothing of it
//! was written. Every other failure answers `internal` at once and is
//! never run again: a link that broke (an error without a SQLSTATE) or
//! 40003 after the commit was sent leaves its outcome unknown, and a
//! commit run again would meet its own run and answer `replayed` to the
//! one client that sent it once. Every operation is bounded by
//! `OP_TIMEOUT` (the wait for a pooled connection and every statement);
//! past it the operation answers `internal` and its connection is
//! dropped, so an answer that arrives late can never be read as the
//! answer to a later statement. Neither a deadlock nor a serialization
//! failure arises from this store's own writes (every write transaction
//! takes the session row first, there are no foreign keys); the harness's
//! link faults make the database answer them (docs/link-faults.md).
//!
//! Migrations are versioned (`reqkey_migrations`) and run in one
//! transaction under a transaction-scoped advisory lock, so concurrent
//! openers apply each version exactly once. The unique index is created
//! with a plain `CREATE INDEX` because the migration creates the table it
//! indexes; a production migration onto a large existing table would build
//! it `CONCURRENTLY`, outside a transaction, as the release notes do.
//!
//! [`PostgresStore::connect_with_standby_reads`] builds a deliberately
//! broken variant for the tests of tests (`postgres+standby-reads://`,
//! docs/pg-replication.md): it writes to the primary, under the same lock,
//! but reads the key's holder and the current run from a hot standby,
//! both inside the commit and in `getRunByRequestKey` / `getCurrentRun`.
//! A standby shows a commit only once it has replayed it, so those reads
//! can name a past state: the common mistake of sending a replicated
//! store's reads to a replica, which the race and linearizability
//! scenarios must catch. [`PostgresStore::connect_with_link_defect`]
//! builds the broken variants only a fault on the database link shows
//! ([`PgLinkDefect`]).

mod bounded;
mod commit;
mod connect;
mod schema;
mod standby;

use std::sync::Arc;
use std::time::Duration;

use reqkey_model::rules::validate_start_run;
use reqkey_model::{
    CommitOutcome, CommitResult, InputEntry, RunMetadata, RunStartRejection, RunStatus, StartRun,
    StoreError,
};
use tokio_postgres::{Config, Statement};

use self::commit::*;
pub(crate) use self::connect::seed_first_schema;
use self::connect::*;
use self::schema::*;
use self::standby::*;
use crate::store::api::{lease_over, redact_url, OpenError};
use crate::store::link_defects::PgLinkDefect;
use crate::store::pool::{Lease, Pool};
use crate::store::rows::{input_entry, seq_to_sql};

/// The PostgreSQL reference store. Cheap to clone (shares the pool).
#[derive(Debug, Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: Config,
    /// The URL with its password redacted, for messages.
    target: String,
    pool: Pool<Conn>,
    /// Off only in the backstop test (see [`PostgresStore::without_holder_read_for_backstop_test`]).
    read_holder: bool,
    /// Only in the broken standby-reads variant: where the key's holder
    /// and the current run are read.
    standby: Option<Standby>,
    /// Only in a broken link variant (tests of tests).
    defect: Option<PgLinkDefect>,
    /// Only in the half-written variant: every operation holds it, so that
    /// no client of this store ever sees the window between its two
    /// transactions; only a link that breaks inside it shows the half.
    serial: Option<tokio::sync::Mutex<()>>,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://USER@HOST:PORT/DB`), applies any
    /// missing migrations and keeps the first connection for the pool.
    pub async fn connect(url: &str) -> Result<Self, OpenError> {
        let target = redact_url(url);
        let backend_err = |message: String| OpenError::Backend {
            backend: "postgres",
            target: target.clone(),
            message,
        };
        let mut config: Config = url
            .parse()
            .map_err(|e: tokio_postgres::Error| backend_err(format!("bad URL: {e}")))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        let mut client = tokio::time::timeout(CONNECT_TIMEOUT, connect_client(&config))
            .await
            .map_err(|_| backend_err(format!("no answer within {} s", CONNECT_TIMEOUT.as_secs())))?
            .map_err(|e| backend_err(super::api::with_causes(&e)))?;
        migrate(&mut client)
            .await
            .map_err(|message| OpenError::Migration {
                backend: "postgres",
                message,
            })?;
        let stmts = Stmts::prepare(&client)
            .await
            .map_err(|e| backend_err(format!("preparing statements: {e}")))?;
        let store = Self {
            inner: Arc::new(Inner {
                config,
                target: target.clone(),
                pool: Pool::new(POOL_SIZE),
                read_holder: true,
                standby: None,
                defect: None,
                serial: None,
            }),
        };
        let (lease, _) = store
            .inner
            .pool
            .take()
            .await
            .map_err(|e| backend_err(e.to_string()))?;
        store.inner.pool.put(lease, Conn { client, stmts });
        Ok(store)
    }

    /// A store on the same database whose commit does NOT read the key's
    /// holder, so only the unique index refuses a second run with a key.
    /// Only for proving the backstop answers `request_key_taken`.
    #[doc(hidden)]
    pub fn without_holder_read_for_backstop_test(&self) -> Self {
        Self {
            inner: Arc::new(Inner {
                config: self.inner.config.clone(),
                target: self.inner.target.clone(),
                pool: Pool::new(POOL_SIZE),
                read_holder: false,
                standby: None,
                defect: None,
                serial: None,
            }),
        }
    }

    /// The deliberately broken variant (see the module docs): connects to
    /// the primary `url` (migrating it) and to its hot standby
    /// `standby_url`, waits (at most [`STANDBY_SCHEMA_WAIT`]) until the
    /// standby has replayed this build's schema, and from then on reads
    /// the key's holder and the current run from the standby. For the
    /// tests of tests only: it is NOT a correct store.
    pub async fn connect_with_standby_reads(
        url: &str,
        standby_url: &str,
    ) -> Result<Self, OpenError> {
        let primary = Self::connect(url).await?;
        let target = redact_url(standby_url);
        let backend_err = |message: String| OpenError::Backend {
            backend: "postgres",
            target: target.clone(),
            message,
        };
        let mut config: Config = standby_url
            .parse()
            .map_err(|e: tokio_postgres::Error| backend_err(format!("bad URL: {e}")))?;
        config.connect_timeout(CONNECT_TIMEOUT);
        let wanted = MIGRATIONS.last().map_or(0, |m| m.0);
        let deadline = tokio::time::Instant::now() + STANDBY_SCHEMA_WAIT;
        loop {
            let replayed = replayed_schema_version(&config)
                .await
                .map_err(&backend_err)?;
            if replayed >= wanted {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(backend_err(format!(
                    "the standby replayed schema version {replayed}, not {wanted}, within {} s: is it a standby of the primary?",
                    STANDBY_SCHEMA_WAIT.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let first = StandbyConn::open(&config).await.map_err(&backend_err)?;
        let pool = Pool::new(POOL_SIZE);
        let (lease, _) = pool.take().await.map_err(|e| backend_err(e.to_string()))?;
        pool.put(lease, first);
        Ok(Self {
            inner: Arc::new(Inner {
                config: primary.inner.config.clone(),
                target: primary.inner.target.clone(),
                pool: Pool::new(POOL_SIZE),
                read_holder: true,
                standby: Some(Standby {
                    config,
                    target,
                    pool,
                }),
                defect: None,
                serial: None,
            }),
        })
    }

    /// A deliberately broken variant only a fault on the database link
    /// shows (see [`PgLinkDefect`]): the reference store on `url`, with
    /// the defect's commit. For the tests of tests only.
    pub async fn connect_with_link_defect(
        url: &str,
        defect: PgLinkDefect,
    ) -> Result<Self, OpenError> {
        let store = Self::connect(url).await?;
        let pool = Pool::new(POOL_SIZE);
        if let Some(conn) = store.inner.pool.take().await.ok().and_then(|(_, c)| c) {
            let (lease, _) = pool.take().await.map_err(|e| OpenError::Backend {
                backend: "postgres",
                target: store.inner.target.clone(),
                message: e.to_string(),
            })?;
            pool.put(lease, conn);
        }
        Ok(Self {
            inner: Arc::new(Inner {
                config: store.inner.config.clone(),
                target: store.inner.target.clone(),
                pool,
                read_holder: true,
                standby: None,
                defect: Some(defect),
                serial: (defect == PgLinkDefect::HalfWritten).then(|| tokio::sync::Mutex::new(())),
            }),
        })
    }

    /// Is a write that failed with `e` run again? Only when PostgreSQL
    /// rolled it back as one that may succeed if run again (not in the
    /// broken `no-retry` variant).
    fn runs_again(&self, e: &tokio_postgres::Error) -> bool {
        rolled_back(e) && self.inner.defect != Some(PgLinkDefect::NoRetry)
    }

    /// A connection to the standby, when this is the standby-reads variant.
    async fn standby_conn(&self) -> Result<Option<(Lease, StandbyConn)>, StoreError> {
        let Some(standby) = &self.inner.standby else {
            return Ok(None);
        };
        let (lease, idle) = standby.pool.take().await?;
        if let Some(conn) = idle.filter(|c| !c.client.is_closed()) {
            return Ok(Some((lease, conn)));
        }
        let conn = StandbyConn::open(&standby.config).await.map_err(|e| {
            StoreError::internal(format!("postgres standby at {}: {e}", standby.target))
        })?;
        Ok(Some((lease, conn)))
    }

    /// Gives a standby connection back unless the call failed at the backend level.
    fn give_back_standby<T>(
        &self,
        taken: Option<(Lease, StandbyConn)>,
        result: &Result<T, StoreError>,
    ) {
        if let (Some(standby), Some((lease, conn))) = (&self.inner.standby, taken) {
            if !matches!(result, Err(StoreError::Internal(_))) && !conn.client.is_closed() {
                standby.pool.put(lease, conn);
            }
        }
    }

    /// One of the variant's reads on the standby; `None` when this store
    /// reads the primary.
    async fn standby_read(
        &self,
        read: StandbyRead<'_>,
    ) -> Option<Result<Option<RunMetadata>, StoreError>> {
        let taken = match self.standby_conn().await {
            Ok(Some(taken)) => taken,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
        };
        let rows = match read {
            StandbyRead::Holder { session_id, key } => taken.1.holder(session_id, key).await,
            StandbyRead::Current { session_id } => taken.1.current(session_id).await,
        };
        let result = match rows {
            Ok(row) => opt_run(row),
            Err(e) => Err(pg_err(e)),
        };
        self.give_back_standby(Some(taken), &result);
        Some(result)
    }

    async fn conn(&self) -> Result<(Lease, Conn), StoreError> {
        let (lease, idle) = self.inner.pool.take().await?;
        if let Some(conn) = idle.filter(|c| !c.client.is_closed()) {
            return Ok((lease, conn));
        }
        Ok((lease, self.open_conn().await?))
    }

    /// A new connection with its prepared statements.
    async fn open_conn(&self) -> Result<Conn, StoreError> {
        let client = tokio::time::timeout(CONNECT_TIMEOUT, connect_client(&self.inner.config))
            .await
            .map_err(|_| {
                StoreError::internal(format!("postgres at {} did not answer", self.inner.target))
            })?
            .map_err(pg_err)?;
        let stmts = Stmts::prepare(&client).await.map_err(pg_err)?;
        Ok(Conn { client, stmts })
    }

    /// Gives a connection back unless the call failed at the backend level.
    fn give_back<T>(&self, lease: Lease, conn: Conn, result: &Result<T, StoreError>) {
        if !matches!(result, Err(StoreError::Internal(_))) && !conn.client.is_closed() {
            self.inner.pool.put(lease, conn);
        }
    }

    /// Runs a read-only statement with two text parameters.
    async fn query_runs(
        &self,
        pick: fn(&Stmts) -> &Statement,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> Result<Vec<RunMetadata>, StoreError> {
        let (lease, conn) = self.conn().await?;
        let result = match conn.client.query(pick(&conn.stmts), params).await {
            Ok(rows) => rows.iter().map(run_row).collect(),
            Err(e) => Err(pg_err(e)),
        };
        self.give_back(lease, conn, &result);
        result
    }

    /// Writes `sessions` sessions of `runs_per_session` keyed runs each
    /// (session `{prefix}-{i}`, run `r{j}`, key `k{j}`, digest `d{j}`) with
    /// `generate_series`, in one transaction: the benchmark's fast seeding
    /// path. It writes the rows a commit would, minus the rule checks, so it
    /// must only target sessions that do not exist yet.
    pub async fn bulk_seed(
        &self,
        prefix: &str,
        sessions: u64,
        runs_per_session: u64,
    ) -> Result<(), StoreError> {
        let (lease, mut conn) = self.conn().await?;
        let result = async {
            let sessions = seq_to_sql(sessions)?;
            let runs = seq_to_sql(runs_per_session)?;
            let tx = conn.client.transaction().await.map_err(pg_err)?;
            tx.execute(
                "INSERT INTO reqkey_sessions (session_id)
                 SELECT $1::text || '-' || s FROM generate_series(0, $2::bigint - 1) s",
                &[&prefix, &sessions],
            )
            .await
            .map_err(pg_err)?;
            tx.execute(
                "INSERT INTO reqkey_runs (session_id, run_id, status, start_sequence, start_digest, request_key, request_digest)
                 SELECT $1::text || '-' || s, 'r' || j, 'running', j, 'seed' || j, 'k' || j, 'd' || j
                 FROM generate_series(0, $2::bigint - 1) s, generate_series(1, $3::bigint) j",
                &[&prefix, &sessions, &runs],
            )
            .await
            .map_err(pg_err)?;
            tx.execute(
                "INSERT INTO reqkey_inputs (session_id, seq, run_id, input)
                 SELECT $1::text || '-' || s, j, 'r' || j, 'null'
                 FROM generate_series(0, $2::bigint - 1) s, generate_series(1, $3::bigint) j",
                &[&prefix, &sessions, &runs],
            )
            .await
            .map_err(pg_err)?;
            tx.commit().await.map_err(pg_err)?;
            conn.client
                .batch_execute("ANALYZE reqkey_runs")
                .await
                .map_err(pg_err)
        }
        .await;
        self.give_back(lease, conn, &result);
        result
    }

    /// Removes every session whose id starts with `prefix` (benchmark and
    /// test cleanup), with range scans on the primary keys.
    pub async fn delete_sessions_with_prefix(&self, prefix: &str) -> Result<u64, StoreError> {
        let high = format!("{prefix}~");
        let (lease, mut conn) = self.conn().await?;
        let result = async {
            let tx = conn.client.transaction().await.map_err(pg_err)?;
            let mut runs = 0;
            for table in ["reqkey_inputs", "reqkey_runs", "reqkey_sessions"] {
                let n = tx
                    .execute(
                        &format!("DELETE FROM {table} WHERE session_id >= $1 AND session_id < $2"),
                        &[&prefix, &high],
                    )
                    .await
                    .map_err(pg_err)?;
                if table == "reqkey_runs" {
                    runs = n;
                }
            }
            tx.commit().await.map_err(pg_err)?;
            Ok(runs)
        }
        .await;
        self.give_back(lease, conn, &result);
        result
    }
}

/// The operations, each unbounded: `bounded.rs` bounds them by
/// `OP_TIMEOUT` and implements the trait with them.
impl PostgresStore {
    async fn op_commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError> {
        // Malformed fields are refused before a query can trip on them.
        validate_start_run(&start)?;
        let (lease, mut conn) = self.conn().await?;
        let standby = self.standby_conn().await?;
        let mut last_retry = String::new();
        let mut result = None;
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let how = AttemptHow {
                read_holder: self.inner.read_holder,
                standby: standby.as_ref().map(|(_, c)| c),
                defect: self.inner.defect,
            };
            match commit_attempt(&mut conn, &start, how).await {
                // The broken variant: the link broke, so it connects again
                // and runs the commit again, blind to whether it landed.
                Attempt::Done(Err(StoreError::Internal(why)))
                    if self.inner.defect == Some(PgLinkDefect::BlindRetry)
                        && conn.client.is_closed() =>
                {
                    last_retry = why;
                    conn = self.open_conn().await?;
                }
                // The broken variant: a write whose link broke counted as
                // done, the run it meant to write answered.
                Attempt::Done(Err(StoreError::Internal(_)))
                    if self.inner.defect == Some(PgLinkDefect::EarlySuccess)
                        && conn.client.is_closed() =>
                {
                    result = Some(Ok(CommitResult {
                        outcome: CommitOutcome::Started,
                        run: RunMetadata {
                            session_id: start.session_id.clone(),
                            run_id: start.run_id.clone(),
                            status: RunStatus::Running,
                            start_sequence: 1,
                            request_key: start.request_key.clone(),
                            request_digest: start.request_digest.clone(),
                        },
                    }));
                    break;
                }
                Attempt::Done(r) => {
                    result = Some(r);
                    break;
                }
                // The broken variant: a rolled-back commit answered as failed.
                Attempt::Retry(why) if self.inner.defect == Some(PgLinkDefect::NoRetry) => {
                    result = Some(Err(StoreError::internal(why)));
                    break;
                }
                Attempt::Retry(why) => last_retry = why,
                Attempt::KeyIndexFired => {
                    // The backstop fired: name the holder, like the rule.
                    let key = start.request_key.as_deref().unwrap_or_default();
                    match conn
                        .client
                        .query_opt(&conn.stmts.run_by_key, &[&start.session_id, &key])
                        .await
                    {
                        Ok(Some(row)) => {
                            result = Some(run_row(&row).and_then(|holder| {
                                Err(RunStartRejection::RequestKeyTaken {
                                    existing_run_id: holder.run_id,
                                }
                                .into())
                            }));
                            break;
                        }
                        // The holder was deleted meanwhile: the key is free again.
                        Ok(None) => last_retry = "key holder vanished".into(),
                        Err(e) => {
                            result = Some(Err(pg_err(e)));
                            break;
                        }
                    }
                }
            }
        }
        let result = result.unwrap_or_else(|| {
            Err(StoreError::internal(format!(
                "the commit did not settle in {MAX_COMMIT_ATTEMPTS} attempts (last: {last_retry})"
            )))
        });
        self.give_back(lease, conn, &result);
        self.give_back_standby(standby, &result);
        result
    }

    async fn op_get_run(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        Ok(self
            .query_runs(|s| &s.run_by_id, &[&session_id, &run_id])
            .await?
            .pop())
    }

    async fn op_get_current_run(
        &self,
        session_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        if let Some(read) = self.standby_read(StandbyRead::Current { session_id }).await {
            return read;
        }
        Ok(self
            .query_runs(|s| &s.current_run, &[&session_id])
            .await?
            .pop())
    }

    async fn op_list_runs(&self, session_id: &str) -> Result<Vec<RunMetadata>, StoreError> {
        self.query_runs(|s| &s.list_runs, &[&session_id]).await
    }

    async fn op_get_run_by_request_key(
        &self,
        session_id: &str,
        request_key: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        if let Some(read) = self
            .standby_read(StandbyRead::Holder {
                session_id,
                key: request_key,
            })
            .await
        {
            return read;
        }
        Ok(self
            .query_runs(|s| &s.run_by_key, &[&session_id, &request_key])
            .await?
            .pop())
    }

    async fn op_list_inputs(&self, session_id: &str) -> Result<Vec<InputEntry>, StoreError> {
        let (lease, conn) = self.conn().await?;
        let result = match conn
            .client
            .query(&conn.stmts.list_inputs, &[&session_id])
            .await
        {
            Ok(rows) => rows
                .iter()
                .map(|row| {
                    let run_id: String = row.try_get(0).map_err(pg_err)?;
                    let text: String = row.try_get(1).map_err(pg_err)?;
                    input_entry(run_id, &text)
                })
                .collect(),
            Err(e) => Err(pg_err(e)),
        };
        self.give_back(lease, conn, &result);
        result
    }

    async fn op_set_run_status(
        &self,
        session_id: &str,
        run_id: &str,
        status: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        let (lease, mut conn) = self.conn().await?;
        let mut result = Err(StoreError::internal(format!(
            "setRunStatus was rolled back {MAX_COMMIT_ATTEMPTS} times in a row"
        )));
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            match status_attempt(&mut conn, session_id, run_id, status).await {
                Ok(answer) => {
                    result = answer;
                    break;
                }
                Err(e) if self.runs_again(&e) => continue,
                Err(e) => {
                    result = Err(pg_err(e));
                    break;
                }
            }
        }
        self.give_back(lease, conn, &result);
        result
    }

    async fn op_delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let (lease, mut conn) = self.conn().await?;
        let mut result = Err(StoreError::internal(format!(
            "deleteSession was rolled back {MAX_COMMIT_ATTEMPTS} times in a row"
        )));
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            match delete_attempt(&mut conn, session_id).await {
                Ok(existed) => {
                    result = Ok(existed);
                    break;
                }
                Err(e) if self.runs_again(&e) => continue,
                Err(e) => {
                    result = Err(pg_err(e));
                    break;
                }
            }
        }
        self.give_back(lease, conn, &result);
        result
    }

    async fn op_renew_lease(
        &self,
        session_id: &str,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let at = i64::try_from(expires_at_ms).unwrap_or(i64::MAX);
        let (lease, conn) = self.conn().await?;
        // One statement: insert, or extend only the owner's own lease.
        let result = conn
            .client
            .execute(
                "INSERT INTO reqkey_run_leases (session_id, run_id, owner, expires_at_ms)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (session_id, run_id) DO UPDATE
                 SET expires_at_ms = EXCLUDED.expires_at_ms
                 WHERE reqkey_run_leases.owner = EXCLUDED.owner",
                &[&session_id, &run_id, &owner, &at],
            )
            .await
            .map(|n| n == 1)
            .map_err(pg_err);
        self.give_back(lease, conn, &result);
        result
    }

    async fn op_expire_lease(
        &self,
        session_id: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let (lease, mut conn) = self.conn().await?;
        let result = async {
            let st = &conn.stmts;
            let tx = conn.client.transaction().await.map_err(pg_err)?;
            // The run row locked: a concurrent finish waits for this step.
            let row = tx
                .query_opt(&st.lock_run, &[&session_id, &run_id])
                .await
                .map_err(pg_err)?;
            let Some(mut run) = opt_run(row)? else {
                return Ok(None);
            };
            let expires: Option<i64> = tx
                .query_opt(
                    "SELECT expires_at_ms FROM reqkey_run_leases
                     WHERE session_id = $1 AND run_id = $2",
                    &[&session_id, &run_id],
                )
                .await
                .map_err(pg_err)?
                .map(|r| r.try_get(0))
                .transpose()
                .map_err(pg_err)?;
            let expires = expires.map(|e| u64::try_from(e).unwrap_or(0));
            if run.status != RunStatus::Running || !lease_over(expires, now_ms) {
                return Ok(Some(run));
            }
            tx.execute(
                &st.update_status,
                &[&session_id, &run_id, &RunStatus::Interrupted.as_str()],
            )
            .await
            .map_err(pg_err)?;
            tx.commit().await.map_err(pg_err)?;
            run.status = RunStatus::Interrupted;
            Ok(Some(run))
        }
        .await;
        self.give_back(lease, conn, &result);
        result
    }
}
