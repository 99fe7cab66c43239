//! The PostgreSQL store's operations, each bounded by `OP_TIMEOUT`: the
//! wait for a pooled connection and every statement. Past the bound an
//! operation answers `internal` (its outcome unknown: a commit may have
//! reached the database) and its future is dropped with its connection,
//! so a late answer can never be read as the answer to a later statement
//! (SPEC 4 `[[store.link.unknown-outcome]]`).

use std::future::Future;

use async_trait::async_trait;
use reqkey_model::{CommitResult, InputEntry, RunMetadata, RunStatus, StartRun, StoreError};

use super::schema::OP_TIMEOUT;
use super::PostgresStore;
use crate::store::api::SessionStateStore;

impl PostgresStore {
    /// `op` within `OP_TIMEOUT` (in the half-written variant, holding the
    /// variant's lock).
    async fn bounded<T>(
        &self,
        op: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        match &self.inner.serial {
            Some(serial) => {
                bounded(async {
                    let _held = serial.lock().await;
                    op.await
                })
                .await
            }
            None => bounded(op).await,
        }
    }
}

async fn bounded<T>(op: impl Future<Output = Result<T, StoreError>>) -> Result<T, StoreError> {
    tokio::time::timeout(OP_TIMEOUT, op)
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::internal(format!(
                "postgres did not answer within {} ms: the outcome of the operation is unknown",
                OP_TIMEOUT.as_millis()
            )))
        })
}

#[async_trait]
impl SessionStateStore for PostgresStore {
    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn durable(&self) -> bool {
        true
    }

    async fn commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError> {
        self.bounded(self.op_commit_run_start(start)).await
    }

    async fn get_run(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        self.bounded(self.op_get_run(session_id, run_id)).await
    }

    async fn get_current_run(&self, session_id: &str) -> Result<Option<RunMetadata>, StoreError> {
        self.bounded(self.op_get_current_run(session_id)).await
    }

    async fn list_runs(&self, session_id: &str) -> Result<Vec<RunMetadata>, StoreError> {
        self.bounded(self.op_list_runs(session_id)).await
    }

    async fn get_run_by_request_key(
        &self,
        session_id: &str,
        request_key: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        self.bounded(self.op_get_run_by_request_key(session_id, request_key))
            .await
    }

    async fn list_inputs(&self, session_id: &str) -> Result<Vec<InputEntry>, StoreError> {
        self.bounded(self.op_list_inputs(session_id)).await
    }

    async fn set_run_status(
        &self,
        session_id: &str,
        run_id: &str,
        status: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        self.bounded(self.op_set_run_status(session_id, run_id, status))
            .await
    }

    async fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        self.bounded(self.op_delete_session(session_id)).await
    }

    async fn renew_lease(
        &self,
        session_id: &str,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        self.bounded(self.op_renew_lease(session_id, run_id, owner, expires_at_ms))
            .await
    }

    async fn expire_lease(
        &self,
        session_id: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        self.bounded(self.op_expire_lease(session_id, run_id, now_ms))
            .await
    }
}
