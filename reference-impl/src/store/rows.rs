//! Stored rows to wire values, shared by the SQL backends: a row becomes a
//! [`RunMetadata`], a stored input an [`InputEntry`], a sequence an SQL
//! integer; which migrations a database still lacks. Nothing here decides
//! anything: the rules stay in `reqkey-model`.

use std::fmt;

use reqkey_model::{InputEntry, RunMetadata, RunStatus, StoreError};
use serde_json::Value;

/// The migrations (`(version, name, sql)`, in order) a database at schema
/// version `applied` still lacks; an error when the database is newer than
/// this build knows, so an old binary never writes to a newer schema.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn pending_migrations<V>(
    migrations: &'static [(V, &'static str, &'static str)],
    applied: V,
) -> Result<impl Iterator<Item = &'static (V, &'static str, &'static str)>, String>
where
    V: Copy + Ord + fmt::Display + From<u8>,
{
    let known = migrations.last().map_or(V::from(0), |m| m.0);
    if applied > known {
        return Err(format!(
            "the database is at schema version {applied}, newer than this build knows ({known})"
        ));
    }
    Ok(migrations.iter().filter(move |m| m.0 > applied))
}

/// The columns every backend stores for one run.
#[derive(Debug, Clone)]
pub(crate) struct RunRow {
    pub session_id: String,
    pub run_id: String,
    pub status: String,
    pub start_sequence: i64,
    pub request_key: Option<String>,
    pub request_digest: Option<String>,
}

impl RunRow {
    /// The wire form; a status or sequence the store could not have
    /// written is `internal` (the data is corrupt, not the request).
    pub fn into_meta(self) -> Result<RunMetadata, StoreError> {
        let status = RunStatus::parse(&self.status).ok_or_else(|| {
            StoreError::internal(format!(
                "run {} has an unknown stored status `{}`",
                self.run_id, self.status
            ))
        })?;
        let start_sequence = u64::try_from(self.start_sequence).map_err(|_| {
            StoreError::internal(format!(
                "run {} has a negative stored startSequence",
                self.run_id
            ))
        })?;
        Ok(RunMetadata {
            session_id: self.session_id,
            run_id: self.run_id,
            status,
            start_sequence,
            request_key: self.request_key,
            request_digest: self.request_digest,
        })
    }
}

/// An input log entry from its stored (canonical JSON) text.
pub(crate) fn input_entry(run_id: String, stored: &str) -> Result<InputEntry, StoreError> {
    let input: Value = serde_json::from_str(stored).map_err(|e| {
        StoreError::internal(format!("stored input of run {run_id} is not JSON: {e}"))
    })?;
    Ok(InputEntry { run_id, input })
}

/// A `startSequence` as the `i64` SQL stores it.
pub(crate) fn seq_to_sql(seq: u64) -> Result<i64, StoreError> {
    i64::try_from(seq).map_err(|_| StoreError::internal("startSequence overflows i64"))
}
