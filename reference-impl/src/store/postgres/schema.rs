//! The PostgreSQL store's schema: versioned migrations applied under an
//! advisory lock, and the statements every pooled connection prepares.

use std::time::Duration;

use tokio_postgres::{Client, Statement};

use crate::store::rows::pending_migrations;

/// Connections kept open (and at most in use at once).
pub(super) const POOL_SIZE: usize = 8;
pub(super) const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How many times a write runs when PostgreSQL rolls it back as a
/// serialization failure or a deadlock (SPEC 4 `[[store.link.rolled-back-retried]]`).
pub(super) const MAX_COMMIT_ATTEMPTS: usize = 5;
/// The bound on one store operation, every statement and the wait for a
/// pooled connection included: past it the operation answers `internal`
/// (its outcome unknown, SPEC 4 `[[store.link.unknown-outcome]]`) and its
/// connection is dropped, never reused.
pub(super) const OP_TIMEOUT: Duration = Duration::from_secs(5);
/// The advisory lock key that serializes migrations ("reqkey" in ASCII).
pub(super) const MIGRATION_LOCK_KEY: i64 = 0x7265_716b_6579;

pub(super) const MIGRATIONS: &[(i32, &str, &str)] = &[
    (
        1,
        "sessions, runs and inputs",
        "CREATE TABLE reqkey_sessions (
             session_id text PRIMARY KEY
         );
         CREATE TABLE reqkey_runs (
             session_id     text   NOT NULL,
             run_id         text   NOT NULL,
             status         text   NOT NULL,
             start_sequence bigint NOT NULL,
             start_digest   text   NOT NULL,
             PRIMARY KEY (session_id, run_id),
             UNIQUE (session_id, start_sequence)
         );
         CREATE TABLE reqkey_inputs (
             session_id text   NOT NULL,
             seq        bigint NOT NULL,
             run_id     text   NOT NULL,
             input      text   NOT NULL,
             PRIMARY KEY (session_id, seq)
         );",
    ),
    (
        2,
        "request keys",
        "ALTER TABLE reqkey_runs ADD COLUMN request_key text, ADD COLUMN request_digest text;
         CREATE UNIQUE INDEX reqkey_runs_session_request_key
             ON reqkey_runs (session_id, request_key) WHERE request_key IS NOT NULL;",
    ),
    (
        3,
        "run leases",
        "CREATE TABLE reqkey_run_leases (
             session_id    text   NOT NULL,
             run_id        text   NOT NULL,
             owner         text   NOT NULL,
             expires_at_ms bigint NOT NULL,
             PRIMARY KEY (session_id, run_id)
         );",
    ),
];

pub(super) const RUN_COLUMNS: &str =
    "session_id, run_id, status, start_sequence, request_key, request_digest";

/// Statements prepared once per connection.
#[derive(Debug)]
pub(super) struct Stmts {
    pub(super) run_by_id: Statement,
    pub(super) run_by_key: Statement,
    pub(super) current_run: Statement,
    pub(super) list_runs: Statement,
    pub(super) list_inputs: Statement,
    pub(super) lock_session: Statement,
    pub(super) insert_run: Statement,
    pub(super) insert_input: Statement,
    pub(super) lock_run: Statement,
    pub(super) update_status: Statement,
    pub(super) delete_session: Statement,
    pub(super) delete_runs: Statement,
    pub(super) delete_inputs: Statement,
}

impl Stmts {
    pub(super) async fn prepare(c: &Client) -> Result<Stmts, tokio_postgres::Error> {
        Ok(Stmts {
            run_by_id: c
                .prepare(&format!(
                    "SELECT {RUN_COLUMNS}, start_digest FROM reqkey_runs WHERE session_id = $1 AND run_id = $2"
                ))
                .await?,
            run_by_key: c
                .prepare(&format!(
                    "SELECT {RUN_COLUMNS} FROM reqkey_runs WHERE session_id = $1 AND request_key = $2"
                ))
                .await?,
            current_run: c
                .prepare(&format!(
                    "SELECT {RUN_COLUMNS} FROM reqkey_runs WHERE session_id = $1 ORDER BY start_sequence DESC LIMIT 1"
                ))
                .await?,
            list_runs: c
                .prepare(&format!(
                    "SELECT {RUN_COLUMNS} FROM reqkey_runs WHERE session_id = $1 ORDER BY start_sequence"
                ))
                .await?,
            list_inputs: c
                .prepare("SELECT run_id, input FROM reqkey_inputs WHERE session_id = $1 ORDER BY seq")
                .await?,
            // Creates the row or, if it exists, updates it in place: either
            // way this transaction ends up holding the lock on a live row.
            // (`DO NOTHING` + `SELECT ... FOR UPDATE` can find the row gone,
            // deleted in between, and would have to retry.)
            lock_session: c
                .prepare(
                    "INSERT INTO reqkey_sessions (session_id) VALUES ($1)
                     ON CONFLICT (session_id) DO UPDATE SET session_id = EXCLUDED.session_id",
                )
                .await?,
            insert_run: c
                .prepare(
                    "INSERT INTO reqkey_runs (session_id, run_id, status, start_sequence, start_digest, request_key, request_digest)
                     VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .await?,
            insert_input: c
                .prepare("INSERT INTO reqkey_inputs (session_id, seq, run_id, input) VALUES ($1, $2, $3, $4)")
                .await?,
            lock_run: c
                .prepare(&format!(
                    "SELECT {RUN_COLUMNS} FROM reqkey_runs WHERE session_id = $1 AND run_id = $2 FOR UPDATE"
                ))
                .await?,
            update_status: c
                .prepare("UPDATE reqkey_runs SET status = $3 WHERE session_id = $1 AND run_id = $2")
                .await?,
            delete_session: c
                .prepare("DELETE FROM reqkey_sessions WHERE session_id = $1")
                .await?,
            delete_runs: c
                .prepare("DELETE FROM reqkey_runs WHERE session_id = $1")
                .await?,
            delete_inputs: c
                .prepare("DELETE FROM reqkey_inputs WHERE session_id = $1")
                .await?,
        })
    }
}

/// The table that records the applied migrations.
pub(super) const MIGRATIONS_TABLE_SQL: &str = "CREATE TABLE IF NOT EXISTS reqkey_migrations (
     version    integer PRIMARY KEY,
     name       text NOT NULL,
     applied_at timestamptz NOT NULL DEFAULT now()
 );";

/// Applies the missing [`MIGRATIONS`] in one transaction under an
/// advisory lock, so concurrent openers never race.
pub(super) async fn migrate(client: &mut Client) -> Result<(), String> {
    let tx = client.transaction().await.map_err(|e| e.to_string())?;
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY});
         CREATE TABLE IF NOT EXISTS reqkey_migrations (
             version    integer PRIMARY KEY,
             name       text NOT NULL,
             applied_at timestamptz NOT NULL DEFAULT now()
         );"
    ))
    .await
    .map_err(|e| e.to_string())?;
    let applied: i32 = tx
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM reqkey_migrations",
            &[],
        )
        .await
        .and_then(|r| r.try_get(0))
        .map_err(|e| e.to_string())?;
    for &(version, name, sql) in pending_migrations(MIGRATIONS, applied)? {
        tx.batch_execute(sql)
            .await
            .map_err(|e| format!("migration {version} ({name}): {e}"))?;
        tx.execute(
            "INSERT INTO reqkey_migrations (version, name) VALUES ($1, $2)",
            &[&version, &name],
        )
        .await
        .map_err(|e| format!("recording migration {version}: {e}"))?;
    }
    tx.commit().await.map_err(|e| e.to_string())
}
