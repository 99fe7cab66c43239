//! Connecting to PostgreSQL (bounded), its errors described without
//! secrets, and rows read back as wire values.

use reqkey_model::{RunMetadata, StoreError};
use tokio_postgres::{Client, Config, NoTls, Row};

use super::schema::*;
use crate::store::api::LegacyRun;
use crate::store::rows::{seq_to_sql, RunRow};

/// One pooled connection with its prepared statements.
#[derive(Debug)]
pub(super) struct Conn {
    pub(super) client: Client,
    pub(super) stmts: Stmts,
}

/// The error with its server-side detail (tokio-postgres' own Display
/// says only "db error").
pub(super) fn describe(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!(
            "{} ({}): {}",
            db.message(),
            db.code().code(),
            db.detail().unwrap_or("")
        ),
        None => e.to_string(),
    }
}

pub(super) fn pg_err(e: tokio_postgres::Error) -> StoreError {
    StoreError::internal(format!("postgres: {}", describe(&e)))
}

pub(super) async fn connect_client(config: &Config) -> Result<Client, tokio_postgres::Error> {
    let (client, connection) = config.connect(NoTls).await?;
    // The connection future drives the socket; it ends when the client is
    // dropped or the socket fails (the client then reports `is_closed`).
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(client)
}

/// Writes `rows` through the FIRST schema version (migration 1 only) into
/// the database `url` names, which must hold no `reqkey_*` table yet: a
/// store of the release before request keys, for certifying the upgrade
/// ([`crate::store::legacy`]). The next [`PostgresStore::connect`]
/// migrates it.
pub(crate) async fn seed_first_schema(url: &str, rows: &[&LegacyRun]) -> Result<(), String> {
    let mut config: Config = url.parse().map_err(|e| format!("bad URL: {e}"))?;
    config.connect_timeout(CONNECT_TIMEOUT);
    let mut client = tokio::time::timeout(CONNECT_TIMEOUT, connect_client(&config))
        .await
        .map_err(|_| format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))?
        .map_err(|e| describe(&e))?;
    let e = |e: tokio_postgres::Error| describe(&e);
    let tx = client.transaction().await.map_err(e)?;
    tx.batch_execute(&format!(
        "SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY});"
    ))
    .await
    .map_err(e)?;
    let tables: i64 = tx
        .query_one(
            "SELECT COUNT(*) FROM information_schema.tables
             WHERE table_schema = current_schema() AND table_name LIKE 'reqkey\\_%'",
            &[],
        )
        .await
        .and_then(|r| r.try_get(0))
        .map_err(e)?;
    if tables > 0 {
        return Err(
            "the database already has reqkey_* tables; legacy runs are written into a database without them"
                .into(),
        );
    }
    let Some(&(version, name, sql)) = MIGRATIONS.first() else {
        return Err("no first schema version".into());
    };
    tx.batch_execute(MIGRATIONS_TABLE_SQL).await.map_err(e)?;
    tx.batch_execute(sql).await.map_err(e)?;
    tx.execute(
        "INSERT INTO reqkey_migrations (version, name) VALUES ($1, $2)",
        &[&version, &name],
    )
    .await
    .map_err(e)?;
    for run in rows {
        let seq = seq_to_sql(run.start_sequence).map_err(|e| e.to_string())?;
        tx.execute(
            "INSERT INTO reqkey_sessions (session_id) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&run.session_id],
        )
        .await
        .map_err(e)?;
        tx.execute(
            "INSERT INTO reqkey_runs (session_id, run_id, status, start_sequence, start_digest)
             VALUES ($1, $2, $3, $4, $5)",
            &[
                &run.session_id,
                &run.run_id,
                &run.status.as_str(),
                &seq,
                &run.start_digest,
            ],
        )
        .await
        .map_err(e)?;
        tx.execute(
            "INSERT INTO reqkey_inputs (session_id, seq, run_id, input) VALUES ($1, $2, $3, $4)",
            &[
                &run.session_id,
                &seq,
                &run.run_id,
                &reqkey_model::written_json(&run.input),
            ],
        )
        .await
        .map_err(e)?;
    }
    tx.commit().await.map_err(e)
}

pub(super) fn run_row(row: &Row) -> Result<RunMetadata, StoreError> {
    RunRow {
        session_id: row.try_get(0).map_err(pg_err)?,
        run_id: row.try_get(1).map_err(pg_err)?,
        status: row.try_get(2).map_err(pg_err)?,
        start_sequence: row.try_get(3).map_err(pg_err)?,
        request_key: row.try_get(4).map_err(pg_err)?,
        request_digest: row.try_get(5).map_err(pg_err)?,
    }
    .into_meta()
}

pub(super) fn opt_run(row: Option<Row>) -> Result<Option<RunMetadata>, StoreError> {
    row.as_ref().map(run_row).transpose()
}
