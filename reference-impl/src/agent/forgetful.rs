//! Deliberately broken read caches in front of an executor's store: the sequence bugs of `ExecutorDefect`.
//!
//! A real executor often keeps a cache in front of its store (a key
//! index, the current-run pointer, an input log) and gets it right for
//! every single request while forgetting a transition of a session's
//! life: a delete, a second session using the same key. Each broken
//! variant here is one such cache, correct until a *sequence* of requests
//! meets the transition it forgets, which is what the agent fuzzer
//! (`reqkey fuzz` on agent targets) exists to find. Only
//! [`wrap`] builds one, and only for those defects; a correct executor
//! talks to its store directly.
//!
//! Bounds: every cache holds at most [`MAX_CACHED`] entries and is
//! emptied when it would hold more (a cache, not a store).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use reqkey_model::{CommitResult, InputEntry, RunMetadata, RunStatus, StartRun, StoreError};

use crate::agent::config::ExecutorDefect;
use crate::store::SessionStateStore;

/// The most entries one cache holds.
pub const MAX_CACHED: usize = 10_000;

/// `store`, or `store` behind the broken cache `defect` names.
pub fn wrap(
    store: Arc<dyn SessionStateStore>,
    defect: Option<ExecutorDefect>,
) -> Arc<dyn SessionStateStore> {
    match defect {
        Some(
            d @ (ExecutorDefect::KeyCacheKeptOnDelete
            | ExecutorDefect::DigestCachedPerKey
            | ExecutorDefect::InputsKeptOnDelete
            | ExecutorDefect::CurrentRunKeptOnDelete
            | ExecutorDefect::DeletedRunsStillRead),
        ) => Arc::new(Forgetful {
            inner: store,
            defect: d,
            caches: Mutex::default(),
        }),
        _ => store,
    }
}

#[derive(Debug, Default)]
struct Caches {
    /// (session, key) -> the run that took it.
    holders: HashMap<(String, String), RunMetadata>,
    /// key -> the digest first recorded with it, in any session.
    digests: HashMap<String, String>,
    /// session -> its input log.
    inputs: HashMap<String, Vec<InputEntry>>,
    /// session -> its current run.
    current: HashMap<String, RunMetadata>,
    /// (session, run) -> the run as last written.
    runs: HashMap<(String, String), RunMetadata>,
}

fn bounded<K: std::hash::Hash + Eq, V>(map: &mut HashMap<K, V>) {
    if map.len() >= MAX_CACHED {
        map.clear();
    }
}

#[derive(Debug)]
struct Forgetful {
    inner: Arc<dyn SessionStateStore>,
    defect: ExecutorDefect,
    caches: Mutex<Caches>,
}

impl Forgetful {
    fn caches(&self) -> MutexGuard<'_, Caches> {
        // Single inserts and reads; poison is benign.
        self.caches.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a committed run in every cache.
    fn remember(&self, start: &StartRun, run: &RunMetadata) {
        let mut c = self.caches();
        let session = run.session_id.clone();
        if let (Some(key), Some(digest)) = (&run.request_key, &run.request_digest) {
            bounded(&mut c.holders);
            c.holders
                .insert((session.clone(), key.clone()), run.clone());
            bounded(&mut c.digests);
            c.digests
                .entry(key.clone())
                .or_insert_with(|| digest.clone());
        }
        bounded(&mut c.inputs);
        c.inputs
            .entry(session.clone())
            .or_default()
            .push(InputEntry {
                run_id: run.run_id.clone(),
                input: start.input.clone(),
            });
        bounded(&mut c.current);
        c.current.insert(session.clone(), run.clone());
        bounded(&mut c.runs);
        c.runs.insert((session, run.run_id.clone()), run.clone());
    }
}

#[async_trait]
impl SessionStateStore for Forgetful {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    fn durable(&self) -> bool {
        self.inner.durable()
    }

    async fn commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError> {
        let kept = start.clone();
        let result = self.inner.commit_run_start(start).await?;
        if result.outcome == reqkey_model::CommitOutcome::Started {
            self.remember(&kept, &result.run);
        }
        Ok(result)
    }

    async fn get_run(
        &self,
        session_id: &str,
        run_id: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let run = self.inner.get_run(session_id, run_id).await?;
        if run.is_none() && self.defect == ExecutorDefect::DeletedRunsStillRead {
            // The bug: a miss falls back to the cache, which a delete never cleared.
            let key = (session_id.to_owned(), run_id.to_owned());
            return Ok(self.caches().runs.get(&key).cloned());
        }
        Ok(run)
    }

    async fn get_current_run(&self, session_id: &str) -> Result<Option<RunMetadata>, StoreError> {
        if self.defect == ExecutorDefect::CurrentRunKeptOnDelete {
            // The bug: the cached pointer wins; a delete never cleared it.
            let cached = self.caches().current.get(session_id).cloned();
            if let Some(run) = cached {
                let now = self.inner.get_run(session_id, &run.run_id).await?;
                return Ok(Some(now.unwrap_or(run)));
            }
        }
        self.inner.get_current_run(session_id).await
    }

    async fn list_runs(&self, session_id: &str) -> Result<Vec<RunMetadata>, StoreError> {
        self.inner.list_runs(session_id).await
    }

    async fn get_run_by_request_key(
        &self,
        session_id: &str,
        request_key: &str,
    ) -> Result<Option<RunMetadata>, StoreError> {
        match self.defect {
            ExecutorDefect::KeyCacheKeptOnDelete => {
                let cached = self
                    .caches()
                    .holders
                    .get(&(session_id.to_owned(), request_key.to_owned()))
                    .cloned();
                if let Some(run) = cached {
                    // The bug: a holder the store no longer has is still one.
                    let now = self.inner.get_run(session_id, &run.run_id).await?;
                    return Ok(Some(now.unwrap_or(run)));
                }
                self.inner
                    .get_run_by_request_key(session_id, request_key)
                    .await
            }
            ExecutorDefect::DigestCachedPerKey => {
                let holder = self
                    .inner
                    .get_run_by_request_key(session_id, request_key)
                    .await?;
                // The bug: the digest is cached per key, not per (session, key).
                let digest = self.caches().digests.get(request_key).cloned();
                Ok(holder.map(|mut h| {
                    if h.request_digest.is_some() {
                        h.request_digest = digest.or(h.request_digest);
                    }
                    h
                }))
            }
            _ => {
                self.inner
                    .get_run_by_request_key(session_id, request_key)
                    .await
            }
        }
    }

    async fn list_inputs(&self, session_id: &str) -> Result<Vec<InputEntry>, StoreError> {
        if self.defect == ExecutorDefect::InputsKeptOnDelete {
            // The bug: the cached log, which a delete never cleared.
            if let Some(log) = self.caches().inputs.get(session_id).cloned() {
                return Ok(log);
            }
        }
        self.inner.list_inputs(session_id).await
    }

    async fn set_run_status(
        &self,
        session_id: &str,
        run_id: &str,
        status: RunStatus,
    ) -> Result<RunMetadata, StoreError> {
        let run = self
            .inner
            .set_run_status(session_id, run_id, status)
            .await?;
        let mut c = self.caches();
        c.runs
            .insert((session_id.to_owned(), run_id.to_owned()), run.clone());
        if c.current
            .get(session_id)
            .is_some_and(|r| r.run_id == run_id)
        {
            c.current.insert(session_id.to_owned(), run.clone());
        }
        Ok(run)
    }

    async fn delete_session(&self, session_id: &str) -> Result<bool, StoreError> {
        // Every broken cache here forgets this: nothing is dropped.
        self.inner.delete_session(session_id).await
    }

    async fn renew_lease(
        &self,
        session_id: &str,
        run_id: &str,
        owner: &str,
        expires_at_ms: u64,
    ) -> Result<bool, StoreError> {
        self.inner
            .renew_lease(session_id, run_id, owner, expires_at_ms)
            .await
    }

    async fn expire_lease(
        &self,
        session_id: &str,
        run_id: &str,
        now_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        self.inner.expire_lease(session_id, run_id, now_ms).await
    }
}
