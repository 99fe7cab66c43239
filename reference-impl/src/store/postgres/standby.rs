//! The hot standby the deliberately broken `postgres+standby-reads://`
//! variant reads key holders and current runs from.

use std::time::Duration;

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Config, Row, Statement};

use super::connect::*;
use super::schema::*;
use crate::store::pool::Pool;

/// The hot standby the broken variant reads from.
#[derive(Debug)]
pub(super) struct Standby {
    pub(super) config: Config,
    /// The URL with its password redacted, for messages.
    pub(super) target: String,
    pub(super) pool: Pool<StandbyConn>,
}

/// One connection to the standby with the two reads it serves.
#[derive(Debug)]
pub(super) struct StandbyConn {
    pub(super) client: Client,
    pub(super) run_by_key: Statement,
    pub(super) current_run: Statement,
}

/// The two reads the broken variant sends to the standby.
pub(super) enum StandbyRead<'a> {
    Holder { session_id: &'a str, key: &'a str },
    Current { session_id: &'a str },
}

/// How long the variant's open waits for the standby to replay the
/// primary's schema (a lag on the schema is not the defect it models).
pub(super) const STANDBY_SCHEMA_WAIT: Duration = Duration::from_secs(10);

impl StandbyConn {
    pub(super) async fn open(config: &Config) -> Result<StandbyConn, String> {
        let client = tokio::time::timeout(CONNECT_TIMEOUT, connect_client(config))
            .await
            .map_err(|_| format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))?
            .map_err(|e| describe(&e))?;
        let prepare = |sql: String| {
            let client = &client;
            async move { client.prepare(&sql).await.map_err(|e| describe(&e)) }
        };
        let run_by_key = prepare(format!(
            "SELECT {RUN_COLUMNS} FROM reqkey_runs WHERE session_id = $1 AND request_key = $2"
        ))
        .await?;
        let current_run = prepare(format!(
            "SELECT {RUN_COLUMNS} FROM reqkey_runs WHERE session_id = $1 ORDER BY start_sequence DESC LIMIT 1"
        ))
        .await?;
        Ok(StandbyConn {
            client,
            run_by_key,
            current_run,
        })
    }

    /// The key's holder, as the standby has it.
    pub(super) async fn holder(
        &self,
        session_id: &str,
        key: &str,
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        self.client
            .query_opt(&self.run_by_key, &[&session_id, &key])
            .await
    }

    /// The current run, as the standby has it.
    pub(super) async fn current(
        &self,
        session_id: &str,
    ) -> Result<Option<Row>, tokio_postgres::Error> {
        self.client
            .query_opt(&self.current_run, &[&session_id])
            .await
    }
}

/// The schema version the database at `config` has replayed (0 before
/// the migrations table exists there).
pub(super) async fn replayed_schema_version(config: &Config) -> Result<i32, String> {
    let client = tokio::time::timeout(CONNECT_TIMEOUT, connect_client(config))
        .await
        .map_err(|_| format!("no answer within {} s", CONNECT_TIMEOUT.as_secs()))?
        .map_err(|e| describe(&e))?;
    let row = match client
        .query_one(
            "SELECT COALESCE(MAX(version), 0) FROM reqkey_migrations",
            &[],
        )
        .await
    {
        Ok(row) => row,
        // The standby has not replayed the table's creation yet.
        Err(e) if e.code() == Some(&SqlState::UNDEFINED_TABLE) => return Ok(0),
        Err(e) => return Err(describe(&e)),
    };
    row.try_get(0).map_err(|e| describe(&e))
}
