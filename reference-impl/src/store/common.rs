//! Pieces the real backends share: how a stored row becomes a
//! [`RunMetadata`], how a stored input becomes an [`InputEntry`], and the
//! small connection pool the SQL backends use.
//!
//! Nothing here decides anything: the run-start rules and the status rule
//! stay in `reqkey-model`. This module only converts and pools.

use std::fmt;
use std::sync::{Arc, Mutex};

use reqkey_model::{InputEntry, RunMetadata, RunStatus, StoreError};
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

/// A bounded pool of connections of any kind.
///
/// At most `size` connections are out at once (a semaphore); idle ones wait
/// in a stack and are reused, newest first. A connection that failed is not
/// given back (the caller drops it), so a broken socket is replaced by a new
/// one on the next call instead of poisoning the pool.
pub(crate) struct Pool<C> {
    idle: Arc<Mutex<Vec<C>>>,
    permits: Arc<Semaphore>,
}

impl<C> fmt::Debug for Pool<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pool")
            .field("available_permits", &self.permits.available_permits())
            .finish()
    }
}

/// A permit to hold one connection; give the connection back with
/// [`Pool::put`] when it is still healthy.
#[derive(Debug)]
pub(crate) struct Lease {
    _permit: OwnedSemaphorePermit,
}

impl<C> Pool<C> {
    pub fn new(size: usize) -> Self {
        Self {
            idle: Arc::new(Mutex::new(Vec::with_capacity(size))),
            permits: Arc::new(Semaphore::new(size.max(1))),
        }
    }

    /// Waits for a permit and takes an idle connection if there is one
    /// (`None`: the caller opens a new connection under the lease).
    pub async fn take(&self) -> Result<(Lease, Option<C>), StoreError> {
        let permit = Arc::clone(&self.permits)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::internal("connection pool closed"))?;
        let conn = self.lock().pop();
        Ok((Lease { _permit: permit }, conn))
    }

    /// Gives a healthy connection back (the lease is released by drop).
    pub fn put(&self, _lease: Lease, conn: C) {
        self.lock().push(conn);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<C>> {
        // The stack is never left half-updated (push/pop only), so a
        // poisoned lock is still consistent.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }
}
