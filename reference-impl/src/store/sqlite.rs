//! The SQLite reference store (rusqlite, bundled SQLite).
//!
//! Storage mirrors the release notes' DO-SQLite row: a `runs` table with
//! `request_key` / `request_digest` columns and a unique partial index on
//! `(session_id, request_key) WHERE request_key IS NOT NULL`, plus an
//! `inputs` log. A session has no row of its own: it exists exactly while
//! it has runs, which is what SPEC 4 says (a refused commit creates nothing,
//! a delete leaves nothing).
//!
//! Reads by key use a second, covering index (migration 3) holding every
//! column a run answer needs: one B-tree descent instead of two, which is
//! what keeps `getRunByRequestKey` near its small-store latency with a
//! million runs (docs/benchmarks.md). The unique index stays the backstop.
//!
//! Why `BEGIN IMMEDIATE`: the run-start commit reads three things (the run
//! with this runId, the key's holder, the current run) and then writes. A
//! deferred transaction would take the write lock only at the first write,
//! so two commits could both read "no holder" and one would then fail with
//! `SQLITE_BUSY` mid-transaction. `IMMEDIATE` takes the write lock before
//! the first read, so commits serialize and the reads are the truth at
//! write time. The decision itself is `reqkey_model::apply_run_start_rules`.
//!
//! The unique index is a backstop: with the write lock held it cannot fire,
//! but if it ever does (a bug, a second writer that bypasses this code) the
//! commit re-reads the holder and answers `request_key_taken`, never a raw
//! constraint error.
//!
//! rusqlite is synchronous, so every call runs on `spawn_blocking` with a
//! connection from a small pool. WAL lets readers proceed while a commit
//! holds the write lock; `busy_timeout` makes a waiting writer block
//! instead of failing at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use reqkey_model::rules::{
    check_status_transition, validate_start_run, RunStartContext, RunStartDecision,
};
use reqkey_model::{
    apply_run_start_rules, CommitOutcome, CommitResult, InputEntry, RunMetadata, RunStartRejection,
    RunStatus, StartRun, StoreError,
};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::api::LegacyRun;
use super::api::{lease_over, OpenError, SessionStateStore};
use super::pool::Pool;
use super::rows::{input_entry, pending_migrations, seq_to_sql, RunRow};

/// How long a connection waits for another writer before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections kept open (and at most in use at once).
const POOL_SIZE: usize = 8;

/// The schema, one migration per version. Applied in order, each in its own
/// transaction together with its `reqkey_migrations` row, so a crash
/// between two leaves a consistent version and a re-open resumes.
/// Version 2 is the request-key migration of the release notes.
const MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "runs and inputs",
        "CREATE TABLE runs (
             session_id     TEXT    NOT NULL,
             run_id         TEXT    NOT NULL,
             status         TEXT    NOT NULL,
             start_sequence INTEGER NOT NULL,
             start_digest   TEXT    NOT NULL,
             PRIMARY KEY (session_id, run_id),
             UNIQUE (session_id, start_sequence)
         );
         CREATE TABLE inputs (
             session_id TEXT    NOT NULL,
             seq        INTEGER NOT NULL,
             run_id     TEXT    NOT NULL,
             input      TEXT    NOT NULL,
             PRIMARY KEY (session_id, seq)
         );",
    ),
    (
        2,
        "request keys",
        "ALTER TABLE runs ADD COLUMN request_key TEXT;
         ALTER TABLE runs ADD COLUMN request_digest TEXT;
         CREATE UNIQUE INDEX runs_session_request_key
             ON runs (session_id, request_key) WHERE request_key IS NOT NULL;",
    ),
    (
        3,
        "covering request-key lookup",
        "CREATE INDEX runs_request_key_lookup
             ON runs (session_id, request_key, run_id, status, start_sequence, request_digest)
             WHERE request_key IS NOT NULL;",
    ),
    (
        4,
        "run leases",
        "CREATE TABLE run_leases (
             session_id    TEXT    NOT NULL,
             run_id        TEXT    NOT NULL,
             owner         TEXT    NOT NULL,
             expires_at_ms INTEGER NOT NULL,
             PRIMARY KEY (session_id, run_id)
         );",
    ),
];

/// The name of the backstop index, as SQLite reports it in a violation.
const KEY_INDEX_COLUMNS: &str = "runs.session_id, runs.request_key";

const RUN_COLUMNS: &str = "session_id, run_id, status, start_sequence, request_key, request_digest";

const RUN_BY_ID_SQL: &str =
    "SELECT session_id, run_id, status, start_sequence, request_key, request_digest
     FROM runs WHERE session_id = ?1 AND run_id = ?2";

/// `getRunByRequestKey` (and the commit's holder read), answered from the
/// covering index of migration 3 alone: one B-tree descent instead of an
/// index descent plus a table descent. `INDEXED BY` pins the plan, so a
/// schema without that index fails loudly instead of quietly scanning.
const RUN_BY_KEY_SQL: &str =
    "SELECT session_id, run_id, status, start_sequence, request_key, request_digest
     FROM runs INDEXED BY runs_request_key_lookup
     WHERE session_id = ?1 AND request_key = ?2";

/// The SQLite reference store. Cheap to clone (shares the pool).
#[derive(Debug, Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    pool: Pool<Connection>,
    /// Off only in the backstop test: the commit then skips reading the
    /// holder, so the unique index is what refuses the second key.
    read_holder: bool,
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path` and applies
    /// any missing migrations. Concurrent openers are safe: migrations run
    /// under SQLite's write lock and skip the versions already applied.
    pub async fn open(path: impl AsRef<Path>) -> Result<Self, OpenError> {
        let path = path.as_ref().to_path_buf();
        let describe = path.display().to_string();
        let opened = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || -> Result<Connection, OpenError> {
                let mut conn = open_connection(&path).map_err(|e| OpenError::Backend {
                    backend: "sqlite",
                    target: path.display().to_string(),
                    message: e.to_string(),
                })?;
                migrate(&mut conn).map_err(|message| OpenError::Migration {
                    backend: "sqlite",
                    message,
                })?;
                Ok(conn)
            })
            .await
            .map_err(|e| OpenError::Backend {
                backend: "sqlite",
                target: describe,
                message: format!("opening task failed: {e}"),
            })??
        };
        let store = Self {
            inner: Arc::new(Inner {
                path,
                pool: Pool::new(POOL_SIZE),
                read_holder: true,
            }),
        };
        let (lease, _) = store
            .inner
            .pool
            .take()
            .await
            .map_err(|e| OpenError::Backend {
                backend: "sqlite",
                target: store.inner.path.display().to_string(),
                message: e.to_string(),
            })?;
        store.inner.pool.put(lease, opened);
        Ok(store)
    }

    /// A store whose commit does NOT read the key's holder, so the unique
    /// index has to refuse a second run with a key. Only for proving the
    /// backstop answers `request_key_taken`; never use it otherwise.
    #[doc(hidden)]
    pub fn without_holder_read_for_backstop_test(&self) -> Self {
        Self {
            inner: Arc::new(Inner {
                path: self.inner.path.clone(),
                pool: Pool::new(POOL_SIZE),
                read_holder: false,
            }),
        }
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Runs `f` on a pooled connection on the blocking thread pool.
    async fn with_conn<T, F>(&self, f: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, bool) -> Result<T, StoreError> + Send + 'static,
    {
        let (lease, idle) = self.inner.pool.take().await?;
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let mut conn = match idle {
                Some(conn) => conn,
                None => open_connection(&inner.path).map_err(sql_err)?,
            };
            let result = f(&mut conn, inner.read_holder);
            // An `internal` answer may mean a broken connection: drop it
            // and let the next call open a fresh one.
            if !matches!(result, Err(StoreError::Internal(_))) {
                inner.pool.put(lease, conn);
            }
            result
        })
        .await
        .map_err(|e| StoreError::internal(format!("sqlite task failed: {e}")))?
    }

    /// SQLite's plan for the `getRunByRequestKey` statement, one line per
    /// step (`EXPLAIN QUERY PLAN`): lets tests show the lookup is a single
    /// covering-index search, whatever the store's size.
    pub async fn request_key_lookup_plan(&self) -> Result<Vec<String>, StoreError> {
        self.with_conn(|conn, _| {
            let mut st = conn
                .prepare(&format!("EXPLAIN QUERY PLAN {RUN_BY_KEY_SQL}"))
                .map_err(sql_err)?;
            let steps = st
                .query_map(params!["s", "k"], |r| r.get::<_, String>(3))
                .map_err(sql_err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err)?;
            Ok(steps)
        })
        .await
    }

    /// Writes `sessions` sessions of `runs_per_session` keyed runs each
    /// (session `{prefix}-{i}`, run `r{j}`, key `k{j}`, digest `d{j}`) in
    /// one transaction: the benchmark's fast seeding path. It writes the
    /// same rows a run-start commit would, minus the rule checks, so it
    /// must only target sessions that do not exist yet.
    pub async fn bulk_seed(
        &self,
        prefix: &str,
        sessions: u64,
        runs_per_session: u64,
    ) -> Result<(), StoreError> {
        let prefix = prefix.to_owned();
        self.with_conn(move |conn, _| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            {
                let mut run = tx
                    .prepare(
                        "INSERT INTO runs (session_id, run_id, status, start_sequence, start_digest, request_key, request_digest)
                         VALUES (?1, ?2, 'running', ?3, ?4, ?5, ?6)",
                    )
                    .map_err(sql_err)?;
                let mut input = tx
                    .prepare("INSERT INTO inputs (session_id, seq, run_id, input) VALUES (?1, ?2, ?3, ?4)")
                    .map_err(sql_err)?;
                for s in 0..sessions {
                    let session = format!("{prefix}-{s}");
                    for j in 1..=runs_per_session {
                        let seq = seq_to_sql(j)?;
                        let run_id = format!("r{j}");
                        run.execute(params![
                            session,
                            run_id,
                            seq,
                            format!("seed{j}"),
                            format!("k{j}"),
                            format!("d{j}")
                        ])
                        .map_err(sql_err)?;
                        input
                            .execute(params![session, seq, run_id, "null"])
                            .map_err(sql_err)?;
                    }
                }
            }
            tx.commit().map_err(sql_err)
        })
        .await
    }
}

fn sql_err(e: rusqlite::Error) -> StoreError {
    StoreError::internal(format!("sqlite: {e}"))
}

fn open_connection(path: &Path) -> rusqlite::Result<Connection> {
    let conn = Connection::open(path)?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    enable_wal(&conn)?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Reads of a large store come from memory-mapped pages (the first GiB
    // of the file) and a 64 MiB page cache instead of a read() per page.
    conn.pragma_update(None, "cache_size", -65_536)?;
    conn.pragma_update(None, "mmap_size", 1_073_741_824)?;
    Ok(conn)
}

/// Attempts at switching a new file to WAL while other openers race.
const WAL_SWITCH_ATTEMPTS: u64 = 50;

/// WAL is persistent in the file; setting it on every connection is a
/// cheap no-op after the first. The first switch of a new file needs an
/// exclusive lock, and SQLite answers `SQLITE_BUSY` at once rather than
/// wait for it (the busy handler is skipped where waiting could deadlock),
/// so openers racing on a new file retry, a bounded number of times.
fn enable_wal(conn: &Connection) -> rusqlite::Result<()> {
    let mut attempt = 0;
    loop {
        match conn.pragma_update(None, "journal_mode", "WAL") {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && attempt < WAL_SWITCH_ATTEMPTS =>
            {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            other => return other,
        }
    }
}

/// The table that records the applied migrations.
const MIGRATIONS_TABLE_SQL: &str = "CREATE TABLE IF NOT EXISTS reqkey_migrations (
     version    INTEGER PRIMARY KEY,
     name       TEXT NOT NULL,
     applied_at TEXT NOT NULL DEFAULT CURRENT_TIMESTAMP
 );";

/// Writes `rows` through the FIRST schema version (migration 1 only) into
/// the database at `path`, which must have no schema yet: a store of the
/// release before request keys, for certifying the upgrade
/// ([`crate::store::legacy`]). The next [`SqliteStore::open`] migrates it.
pub(crate) async fn seed_first_schema(path: &str, rows: &[&LegacyRun]) -> Result<(), String> {
    let path = PathBuf::from(path);
    let rows: Vec<LegacyRun> = rows.iter().map(|r| (*r).clone()).collect();
    tokio::task::spawn_blocking(move || -> Result<(), String> {
        let e = |e: rusqlite::Error| e.to_string();
        let mut conn = open_connection(&path).map_err(e)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(e)?;
        let tables: i64 = tx
            .query_row(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'",
                [],
                |r| r.get(0),
            )
            .map_err(e)?;
        if tables > 0 {
            return Err(format!(
                "{} already has tables; legacy runs are written into an empty database",
                path.display()
            ));
        }
        tx.execute_batch(MIGRATIONS_TABLE_SQL).map_err(e)?;
        let Some(&(version, name, sql)) = MIGRATIONS.first() else {
            return Err("no first schema version".into());
        };
        tx.execute_batch(sql).map_err(e)?;
        tx.execute(
            "INSERT INTO reqkey_migrations (version, name) VALUES (?1, ?2)",
            params![version, name],
        )
        .map_err(e)?;
        for run in &rows {
            let seq = seq_to_sql(run.start_sequence).map_err(|e| e.to_string())?;
            tx.execute(
                "INSERT INTO runs (session_id, run_id, status, start_sequence, start_digest)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                params![
                    run.session_id,
                    run.run_id,
                    run.status.as_str(),
                    seq,
                    run.start_digest
                ],
            )
            .map_err(e)?;
            tx.execute(
                "INSERT INTO inputs (session_id, seq, run_id, input) VALUES (?1, ?2, ?3, ?4)",
                params![
                    run.session_id,
                    seq,
                    run.run_id,
                    reqkey_model::written_json(&run.input)
                ],
            )
            .map_err(e)?;
        }
        tx.commit().map_err(e)
    })
    .await
    .map_err(|e| format!("seeding task failed: {e}"))?
}

/// Applies the missing [`MIGRATIONS`] under the write lock.
fn migrate(conn: &mut Connection) -> Result<(), String> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| e.to_string())?;
    tx.execute_batch(MIGRATIONS_TABLE_SQL)
        .map_err(|e| e.to_string())?;
    let applied: i64 = tx
        .query_row(
            "SELECT COALESCE(MAX(version), 0) FROM reqkey_migrations",
            [],
            |r| r.get(0),
        )
        .map_err(|e| e.to_string())?;
    for &(version, name, sql) in pending_migrations(MIGRATIONS, applied)? {
        tx.execute_batch(sql)
            .map_err(|e| format!("migration {version} ({name}): {e}"))?;
        tx.execute(
            "INSERT INTO reqkey_migrations (version, name) VALUES (?1, ?2)",
            params![version, name],
        )
        .map_err(|e| format!("recording migration {version}: {e}"))?;
    }
    tx.commit().map_err(|e| e.to_string())
}

fn row_to_run(row: &rusqlite::Row<'_>) -> rusqlite::Result<RunRow> {
    Ok(RunRow {
        session_id: row.get(0)?,
        run_id: row.get(1)?,
        status: row.get(2)?,
        start_sequence: row.get(3)?,
        request_key: row.get(4)?,
        request_digest: row.get(5)?,
    })
}

/// One run by a two-parameter statement (`sql` selects [`RUN_COLUMNS`]).
fn query_run(
    conn: &Connection,
    sql: &str,
    a: &str,
    b: &str,
) -> Result<Option<RunMetadata>, StoreError> {
    conn.prepare_cached(sql)
        .and_then(|mut st| st.query_row(params![a, b], row_to_run).optional())
        .map_err(sql_err)?
        .map(RunRow::into_meta)
        .transpose()
}

fn run_by_id(
    conn: &Connection,
    session_id: &str,
    run_id: &str,
) -> Result<Option<RunMetadata>, StoreError> {
    query_run(conn, RUN_BY_ID_SQL, session_id, run_id)
}

fn run_by_key(
    conn: &Connection,
    session_id: &str,
    key: &str,
) -> Result<Option<RunMetadata>, StoreError> {
    query_run(conn, RUN_BY_KEY_SQL, session_id, key)
}

fn current_run(conn: &Connection, session_id: &str) -> Result<Option<RunMetadata>, StoreError> {
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ?1 ORDER BY start_sequence DESC LIMIT 1"
    );
    conn.prepare_cached(&sql)
        .and_then(|mut st| st.query_row(params![session_id], row_to_run).optional())
        .map_err(sql_err)?
        .map(RunRow::into_meta)
        .transpose()
}

fn start_digest_of(
    conn: &Connection,
    session_id: &str,
    run_id: &str,
) -> Result<Option<String>, StoreError> {
    conn.prepare_cached("SELECT start_digest FROM runs WHERE session_id = ?1 AND run_id = ?2")
        .and_then(|mut st| {
            st.query_row(params![session_id, run_id], |r| r.get(0))
                .optional()
        })
        .map_err(sql_err)
}

fn is_key_index_violation(e: &rusqlite::Error) -> bool {
    match e {
        rusqlite::Error::SqliteFailure(f, msg) => {
            f.extended_code == rusqlite::ffi::SQLITE_CONSTRAINT_UNIQUE
                && msg
                    .as_deref()
                    .is_some_and(|m| m.contains(KEY_INDEX_COLUMNS))
        }
        _ => false,
    }
}

/// What one attempt of the commit transaction ended with.
enum Attempt {
    Done(Result<CommitResult, StoreError>),
    /// The unique key index refused the insert (the transaction is rolled
    /// back); the caller re-reads the holder.
    KeyIndexFired,
}

fn commit_attempt(
    conn: &mut Connection,
    start: &StartRun,
    read_holder: bool,
) -> Result<Attempt, StoreError> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(sql_err)?;
    let sid = start.session_id.as_str();
    let same = run_by_id(&tx, sid, &start.run_id)?;
    let same_digest = match &same {
        Some(_) => start_digest_of(&tx, sid, &start.run_id)?,
        None => None,
    };
    let holder = match (&start.request_key, read_holder) {
        (Some(key), true) => run_by_key(&tx, sid, key)?,
        _ => None,
    };
    let current = current_run(&tx, sid)?;
    let ctx = RunStartContext {
        same_run_id: same.as_ref().zip(same_digest.as_deref()),
        request_key_holder: holder.as_ref(),
        current_run_id: current.as_ref().map(|r| r.run_id.as_str()),
        next_start_sequence: current.as_ref().map_or(1, |r| r.start_sequence + 1),
    };
    let decision = match apply_run_start_rules(start, ctx) {
        Ok(d) => d,
        // Refused: the transaction rolls back on drop; nothing was written.
        Err(e) => return Ok(Attempt::Done(Err(e))),
    };
    match decision {
        RunStartDecision::Replay(run) => Ok(Attempt::Done(Ok(CommitResult {
            outcome: CommitOutcome::Replayed,
            run,
        }))),
        RunStartDecision::Start { run, start_digest } => {
            let seq = seq_to_sql(run.start_sequence)?;
            let inserted = tx.execute(
                "INSERT INTO runs (session_id, run_id, status, start_sequence, start_digest, request_key, request_digest)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![
                    run.session_id,
                    run.run_id,
                    run.status.as_str(),
                    seq,
                    start_digest,
                    run.request_key,
                    run.request_digest
                ],
            );
            match inserted {
                Ok(_) => {}
                Err(e) if is_key_index_violation(&e) => return Ok(Attempt::KeyIndexFired),
                Err(e) => return Err(sql_err(e)),
            }
            tx.execute(
                "INSERT INTO inputs (session_id, seq, run_id, input) VALUES (?1, ?2, ?3, ?4)",
                params![
                    run.session_id,
                    seq,
                    run.run_id,
                    reqkey_model::written_json(&start.input)
                ],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok(Attempt::Done(Ok(CommitResult {
                outcome: CommitOutcome::Started,
                run,
            })))
        }
    }
}

#[async_trait]
impl SessionStateStore for SqliteStore {
    fn backend(&self) -> &'static str {
        "sqlite"
    }

    fn durable(&self) -> bool {
        // A database file outlives the process; SQLite's `:memory:` does not.
        self.path().as_os_str() != ":memory:"
    }

    async fn commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError> {
        // Malformed fields are refused before the transaction begins.
        validate_start_run(&start)?;
        self.with_conn(move |conn, read_holder| {
            match commit_attempt(conn, &start, read_holder)? {
                Attempt::Done(result) => result,
                Attempt::KeyIndexFired => {
                    // The backstop fired: answer like the rule would have.
                    let key = start.request_key.as_deref().unwrap_or_default();
                    match run_by_key(conn, &start.session_id, key)? {
                        Some(holder) => Err(RunStartRejection::RequestKeyTaken {
                            existing_run_id: holder.run_id,
                        }
                        .into()),
                        None => Err(StoreError::internal(
                            "the request-key index refused the run but no holder is visible",
                        )),
                    }
                }
            }
        })
        .await
    }

    async fn get_run(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let (sid, rid) = (session_id.to_owned(), run_id.to_owned());
        self.with_conn(move |conn, _| run_by_id(conn, &sid, &rid))
            .await
    }

    async fn get_current_run(&self, session_id: &str) -> Result<Option<RunMetadata>, StoreError> {
        let sid = session_id.to_owned();
        self.with_conn(move |conn, _| current_run(conn, &sid)).await
    }

    async fn list_runs(&self, session_id: &str) -> Result<Vec<RunMetadata>, StoreError> {
        let sid = session_id.to_owned();
        self.with_conn(move |conn, _| {
            let sql = format!(
                "SELECT {RUN_COLUMNS} FROM runs WHERE session_id = ?1 ORDER BY start_sequence"
            );
            let mut st = conn.prepare_cached(&sql).map_err(sql_err)?;
            let rows = st
                .query_map(params![sid], row_to_run)
                .map_err(sql_err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err)?;
            rows.into_iter().map(RunRow::into_meta).collect()
        })
        .await
    }

    async fn get_run_by_request_key(
        &self,
        session_id: &str,
        request_key: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let (sid, key) = (session_id.to_owned(), request_key.to_owned());
        self.with_conn(move |conn, _| run_by_key(conn, &sid, &key))
            .await
    }

    async fn list_inputs(&self, session_id: &str) -> Result<Vec<InputEntry>, StoreError> {
        let sid = session_id.to_owned();
        self.with_conn(move |conn, _| {
            let mut st = conn
                .prepare_cached(
                    "SELECT run_id, input FROM inputs WHERE session_id = ?1 ORDER BY seq",
                )
                .map_err(sql_err)?;
            let rows = st
                .query_map(params![sid], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
                })
                .map_err(sql_err)?
                .collect::<rusqlite::Result<Vec<_>>>()
                .map_err(sql_err)?;
            rows.into_iter()
                .map(|(run_id, text)| input_entry(run_id, &text))
                .collect()
        })
        .await
    }

    async fn set_run_status(
        &self,
        session_id: &str,
        run_id: &str,
        status: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        let (sid, rid) = (session_id.to_owned(), run_id.to_owned());
        self.with_conn(move |conn, _| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let mut run = run_by_id(&tx, &sid, &rid)?
                .ok_or_else(|| StoreError::NotFound(format!("no run {rid} in session {sid}")))?;
            check_status_transition(&run, status)?;
            tx.execute(
                "UPDATE runs SET status = ?3 WHERE session_id = ?1 AND run_id = ?2",
                params![sid, rid, status.as_str()],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            run.status = status;
            Ok(run)
        })
        .await
    }

    async fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        let sid = session_id.to_owned();
        self.with_conn(move |conn, _| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            tx.execute("DELETE FROM inputs WHERE session_id = ?1", params![sid])
                .map_err(sql_err)?;
            tx.execute("DELETE FROM run_leases WHERE session_id = ?1", params![sid])
                .map_err(sql_err)?;
            let runs = tx
                .execute("DELETE FROM runs WHERE session_id = ?1", params![sid])
                .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            Ok(runs > 0)
        })
        .await
    }

    async fn renew_lease(
        &self,
        session_id: &str,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        let (sid, rid, who) = (session_id.to_owned(), run_id.to_owned(), owner.to_owned());
        let at = i64::try_from(expires_at_ms).unwrap_or(i64::MAX);
        self.with_conn(move |conn, _| {
            // One statement: insert, or extend only the owner's own lease.
            let changed = conn
                .execute(
                    "INSERT INTO run_leases (session_id, run_id, owner, expires_at_ms)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (session_id, run_id) DO UPDATE
                     SET expires_at_ms = excluded.expires_at_ms
                     WHERE run_leases.owner = excluded.owner",
                    params![sid, rid, who, at],
                )
                .map_err(sql_err)?;
            Ok(changed == 1)
        })
        .await
    }

    async fn expire_lease(
        &self,
        session_id: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let (sid, rid) = (session_id.to_owned(), run_id.to_owned());
        self.with_conn(move |conn, _| {
            let tx = conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(sql_err)?;
            let Some(mut run) = run_by_id(&tx, &sid, &rid)? else {
                return Ok(None);
            };
            let expires: Option<i64> = tx
                .query_row(
                    "SELECT expires_at_ms FROM run_leases WHERE session_id = ?1 AND run_id = ?2",
                    params![sid, rid],
                    |r| r.get(0),
                )
                .optional()
                .map_err(sql_err)?;
            let expires = expires.map(|e| u64::try_from(e).unwrap_or(0));
            if run.status != RunStatus::Running || !lease_over(expires, now_ms) {
                return Ok(Some(run));
            }
            tx.execute(
                "UPDATE runs SET status = 'interrupted' WHERE session_id = ?1 AND run_id = ?2",
                params![sid, rid],
            )
            .map_err(sql_err)?;
            tx.commit().map_err(sql_err)?;
            run.status = RunStatus::Interrupted;
            Ok(Some(run))
        })
        .await
    }
}
