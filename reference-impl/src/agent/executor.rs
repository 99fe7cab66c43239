//! The executor: keyed and keyless entries over any [`SessionStateStore`].
//!
//! An entry (start, resume, retry, chat send) is decided from store reads
//! and committed with one run-start commit; the store's CAS and key rule
//! make every race safe, so the executor holds no lock of its own across
//! an entry. The order of SPEC 5 is the heart of it:
//!
//! 1. the key was parsed at the edge (a [`RequestKey`] cannot be malformed);
//! 2. the key's holder is read with `get_run_by_request_key` **before** any
//!    concurrency policy decides (the current run is read just before the
//!    holder, so a refusal is never based on a read older than the lookup), and `reqkey_model::plan_keyed_entry` decides
//!    (attach, replay, or one of the two 409s) — never restated here;
//! 3. only a `New` plan meets the policy (`state_session_exists`,
//!    `state_already_running`, or `interrupt_previous`);
//! 4. the commit carries key and digest. A `request_key_taken` refusal means
//!    a duplicate won the race: re-plan ONCE with the holder it names, so
//!    the loser attaches to the winner. A `cas_mismatch` means a concurrent
//!    entry won: decide again from a fresh read, at most
//!    [`MAX_DECISIONS`] times.
//!
//! The transition of the previous run (a suspended run becomes `completed`,
//! a running one `interrupted` under `interrupt_previous`) happens *after*
//! the commit succeeds, so a refused entry writes nothing.
//!
//! **Orphaned runs and leases** (SPEC 5, `[[lease.*]]`): a run left
//! `running` by a process that died is executed by nobody. Every run this
//! executor starts is held under a lease in the store ([`LEASE_MS`] long,
//! taken *before* the commit so a run is never `running` without one, and
//! renewed every third of that while the run executes). Under
//! [`OrphanRule::Lease`] a `running` run this executor is not executing is
//! passed through the store's `expire_lease` before anything is answered
//! from it (an entry's current-run read or holder lookup, a wait, a
//! snapshot, a stream): if its lease is absent or expired, the store sets it
//! `interrupted` in one atomic step that compares the lease, so a keyed
//! retry replays the interrupted run instead of attaching to a run that
//! never ends, while a run whose replica is alive and renewing is never
//! taken. Any number of replicas may share one store this way.
//!
//! **Admission** (SPEC 7, `entryWaitMs`): the framework's Durable Object
//! holds a producer claim on a session while it admits an entry, and a
//! keyed request waits for that claim instead of answering busy. With
//! [`ExecutorConfig::entry_wait_ms`] this executor does the same with a
//! per-session claim held from an entry's first read to its commit (or
//! refusal): a keyed entry waits for it up to that long, then plans from
//! fresh reads (a duplicate attaches); a keyless one is answered busy at
//! once, as before keys existed. Without it (the default) there is no
//! claim, and the store's CAS and key rule arbitrate as above. Either way
//! the test agent's `[admit:N]` lengthens an entry's admission by N ms, so
//! the suite can send a second entry while the first is being admitted.
//!
//! [`ExecutorDefect`] builds deliberately broken executors (the way
//! `MemoryDefect` builds broken stores), to prove the agent corpus has teeth.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use reqkey_model::json_text::{request_digest_of_canonical, JsonText};
use reqkey_model::{
    parse_request_key, plan_keyed_entry, retry_request_digest, DigestKind, KeyedEntryPlan,
    RequestKey, RunMetadata, RunStartRejection, RunStatus, StartRun, StoreError,
};
use serde_json::Value;
use tokio::sync::watch;

use super::test_agent::{input_text_of, parse_script, RunLog};
pub use crate::agent::config::*;
pub use crate::agent::entry::*;
use crate::store::SessionStateStore;

/// How many times one entry decides from a fresh read before it gives up
/// with `state_contended` (each `cas_mismatch` costs one).
pub const MAX_DECISIONS: usize = 16;

/// The run logs kept in memory; beyond this, finished runs' logs are
/// dropped, oldest first (their streams are then rebuilt from the store,
/// which gives the same events). Live runs are never dropped: a `running`
/// run lasts at most [`MAX_SLEEP_MS`].
pub const MAX_TRACKED_RUNS: usize = 1_024;

/// The bytes of run-log text (the echo of each input) kept in memory;
/// beyond this, finished runs' logs are dropped as over
/// [`MAX_TRACKED_RUNS`]. With it, 1 MiB chat inputs keep at most about
/// 32 logs, not 1,024 MiB.
pub const MAX_TRACKED_LOG_BYTES: usize = 32 << 20;

/// Polls (`waitMs` > 0) that wait at once, per executor (per server);
/// beyond this a poll is answered at once, as if `waitMs` were 0 (SPEC 7,
/// `[[agent.run.wait-capped]]`), so long polls never hold every connection.
pub const MAX_WAITING_POLLS: usize = 64;

/// How often a wait or a log-less follower re-reads the store.
pub const STORE_POLL_MS: u64 = 25;

/// What the policy decided for a `New` entry.
#[derive(Debug)]
pub(super) struct Prepared {
    pub(super) expected_current_run_id: Option<String>,
    /// The previous run's transition, applied after a successful commit.
    pub(super) previous: Option<(String, RunStatus)>,
}

#[derive(Debug)]
pub(super) struct TrackedRun {
    pub(super) log: Arc<RunLog>,
    pub(super) stop: watch::Sender<bool>,
    /// The bytes of its log's text, counted in [`Registry::log_bytes`].
    pub(super) log_bytes: usize,
}

#[derive(Debug, Default)]
pub(super) struct Registry {
    /// session id -> run id -> run.
    pub(super) sessions: HashMap<String, HashMap<String, TrackedRun>>,
    pub(super) tracked: usize,
    /// The sum of the tracked runs' `log_bytes`.
    pub(super) log_bytes: usize,
    /// `(session, run)` in the order they were tracked, for eviction a few
    /// at a time; entries already untracked are skipped when met.
    pub(super) order: VecDeque<(String, String)>,
}

/// The reference executor: entries, the test agent's runs, streams, waits.
#[derive(Debug)]
pub struct Executor {
    pub(super) store: Arc<dyn SessionStateStore>,
    pub(super) config: ExecutorConfig,
    pub(super) registry: Mutex<Registry>,
    pub(super) warned_ignored_key: AtomicBool,
    pub(super) ignored_key_warnings: AtomicU64,
    pub(super) run_counter: AtomicU64,
    pub(super) run_id_prefix: String,
    pub(super) shutdown: watch::Sender<bool>,
    /// Per session, the claim an entry holds while it is being admitted
    /// (only with `entry_wait_ms`). An entry leaves the map when nobody
    /// holds or waits for its claim, so it holds at most one per session
    /// with an entry in flight.
    pub(super) admissions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Polls waiting right now (at most [`MAX_WAITING_POLLS`]).
    pub(super) waiting_polls: Arc<tokio::sync::Semaphore>,
}

/// An entry's admission claim on its session; released (and the session's
/// entry dropped once unused) when the entry has been decided.
pub(super) struct Admission<'a> {
    pub(super) executor: &'a Executor,
    pub(super) session: String,
    pub(super) claim: Option<tokio::sync::OwnedMutexGuard<()>>,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        let mut map = self.executor.admissions_map();
        self.claim = None;
        let unused = map
            .get(&self.session)
            .is_some_and(|claim| Arc::strong_count(claim) == 1);
        if unused {
            map.remove(&self.session);
        }
    }
}

impl Executor {
    pub fn new(store: Arc<dyn SessionStateStore>, config: ExecutorConfig) -> Arc<Self> {
        // A prefix unique to this executor keeps run ids distinct across
        // processes that share a store.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let prefix = format!("run-{:x}{:x}", nanos & 0xffff_ffff_ffff, std::process::id());
        // Only a sequence defect puts a (broken) cache in front of the
        // store; a defect at scale brings its own broken memory store.
        let store = match config.defect.and_then(ExecutorDefect::store_defect) {
            Some(d) => Arc::new(crate::store::MemoryStore::with_defect(d)),
            None => store,
        };
        let store = crate::agent::forgetful::wrap(store, config.defect);
        Arc::new(Self {
            store,
            config,
            registry: Mutex::default(),
            warned_ignored_key: AtomicBool::new(false),
            ignored_key_warnings: AtomicU64::new(0),
            run_counter: AtomicU64::new(0),
            run_id_prefix: prefix,
            shutdown: watch::Sender::new(false),
            admissions: Mutex::default(),
            waiting_polls: Arc::new(tokio::sync::Semaphore::new(MAX_WAITING_POLLS)),
        })
    }

    /// What `/health` declares: does this executor record request keys?
    pub fn supports_request_key(&self) -> bool {
        self.config.supports_request_key
    }

    /// What `/health` declares as `entryWaitMs` (SPEC 7), if anything.
    pub fn entry_wait_ms(&self) -> Option<u64> {
        self.config.entry_wait_ms
    }

    /// What `/health` declares as `durable` (SPEC 7, `[[agent.durable]]`):
    /// whether keys and runs survive a restart of this process.
    pub fn durable(&self) -> bool {
        self.store.durable() || self.has_defect(ExecutorDefect::ClaimsDurable)
    }

    /// What `/health` declares as `leaseMs` (SPEC 5, `[[lease.length]]`).
    pub fn lease_ms(&self) -> u64 {
        self.config.lease_ms
    }

    pub(super) fn admissions_map(
        &self,
    ) -> MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        // Single inserts/removes; poison is benign.
        self.admissions.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the session's admission claim for one entry (SPEC 7,
    /// `[[agent.admission.*]]`): a keyed entry waits for another entry's
    /// admission up to `entryWaitMs`, a keyless one does not wait. Either
    /// is answered busy when the claim stays held: the refusal it would get
    /// once the admitted run runs. Without `entry_wait_ms`, no claim.
    pub(super) async fn admit(
        &self,
        session: &str,
        kind: EntryKind,
        keyed: bool,
    ) -> Result<Option<Admission<'_>>, EntryError> {
        let Some(wait_ms) = self.config.entry_wait_ms else {
            return Ok(None);
        };
        let claim = self
            .admissions_map()
            .entry(session.to_owned())
            .or_default()
            .clone();
        let mut admission = Admission {
            executor: self,
            session: session.to_owned(),
            claim: None,
        };
        let waits = if keyed {
            !self.has_defect(ExecutorDefect::BusyAtOnce)
        } else {
            self.has_defect(ExecutorDefect::KeylessWaits)
        };
        let got = if waits {
            tokio::time::timeout(Duration::from_millis(wait_ms), claim.lock_owned())
                .await
                .ok()
        } else {
            claim.try_lock_owned().ok()
        };
        match got {
            Some(guard) => {
                admission.claim = Some(guard);
                Ok(Some(admission))
            }
            None => Err(match kind {
                EntryKind::Start => EntryError::SessionExists,
                _ => EntryError::AlreadyRunning,
            }),
        }
    }

    /// What `/health` declares as `concurrentEntry` (SPEC 7).
    pub fn concurrent_entry(&self) -> &'static str {
        self.config.policy.name()
    }

    pub fn store(&self) -> &Arc<dyn SessionStateStore> {
        &self.store
    }

    /// Whether this executor was built with the deliberate bug `d` (the
    /// server asks too, for the defects that live in its HTTP layer).
    pub fn has_defect(&self, d: ExecutorDefect) -> bool {
        self.config.defect == Some(d)
    }

    pub(super) fn registry(&self) -> MutexGuard<'_, Registry> {
        // Registry updates are single inserts/removes; poison is benign.
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The key this executor honours: all of them, or none (warning once).
    pub(super) fn effective_key(&self, key: Option<RequestKey>) -> Option<RequestKey> {
        if self.has_defect(ExecutorDefect::KeyTruncatedAt64) {
            // The bug: a column as wide as common keys, not as the spec's.
            return key.map(|k| match k.as_str().get(..64) {
                Some(head) if k.as_str().len() > 64 => parse_request_key(head).unwrap_or(k),
                _ => k,
            });
        }
        if self.config.supports_request_key
            || self.has_defect(ExecutorDefect::DedupesWhileIgnoringKeys)
        {
            return key;
        }
        if key.is_some() && !self.warned_ignored_key.swap(true, Ordering::Relaxed) {
            self.ignored_key_warnings.fetch_add(1, Ordering::Relaxed);
            // Never the key itself: only that one was ignored.
            eprintln!(
                "warn request_key.ignored: this executor does not record request keys \
                 (supportsRequestKey: false); keyed requests run as keyless"
            );
        }
        None
    }

    /// How many `request_key.ignored` warnings this executor has written
    /// (SPEC 5: one per executor instance, however many keyed requests).
    pub fn ignored_key_warnings(&self) -> u64 {
        self.ignored_key_warnings.load(Ordering::Relaxed)
    }

    /// The entry's request digest, from its input's canonical text (the
    /// same digest as its value's, without the value: issue 39).
    pub(super) fn request_digest(kind: EntryKind, input: &JsonText) -> String {
        let kind = match kind {
            EntryKind::Start | EntryKind::Chat => DigestKind::Execute,
            EntryKind::Resume => DigestKind::Resume,
            EntryKind::Retry => return retry_request_digest(),
        };
        request_digest_of_canonical(kind, input.canonical())
    }

    /// Runs one entry (SPEC 5 and 7).
    pub async fn enter(&self, req: EntryRequest) -> Result<EntryOutcome, EntryError> {
        let mut key = self.effective_key(req.request_key.clone());
        let mut digest = key
            .as_ref()
            .map(|_| Self::request_digest(req.kind, &req.input));
        if self.has_defect(ExecutorDefect::DigestKeepsStringEscapes)
            && !req.written_escapes.is_empty()
        {
            // The bug: the escapes as written are part of the digest.
            digest = digest.map(|d| {
                reqkey_model::json_text::request_digest_of_canonical(
                    DigestKind::Execute,
                    &format!("{d}{}", req.written_escapes),
                )
            });
        }
        // The entry's input is text (issue 39: never a `Value` of it, which
        // costs tens of bytes a node); every decision commits that same
        // text, every number spelled as sent.
        let session = req.session_id.as_str();
        // Held until this entry is decided (committed or refused).
        let _admission = self.admit(session, req.kind, key.is_some()).await?;
        let mut replanned = false;
        let mut look_up_key = true;
        // `[admit:N]` lengthens the admission once, not once per decision.
        let mut admission_lengthened = false;
        let mut drop_key = false;
        for _ in 0..MAX_DECISIONS {
            if drop_key {
                key = None;
                digest = None;
            }
            // The current run is read BEFORE the holder: if the policy then
            // refuses, no holder existed when this current run was read, so
            // the refusal is honest. (Read after the holder, a duplicate that
            // committed in between would make us refuse a request we should
            // attach.) The policy still *decides* only after the lookup.
            let current = self.store.get_current_run(session).await?;
            let current =
                if key.is_none() && self.has_defect(ExecutorDefect::KeylessRefusedByOrphan) {
                    current
                } else {
                    self.reclaim_opt(current).await?
                };
            if self.has_defect(ExecutorDefect::PolicyBeforeKey) {
                self.policy(req.kind, key.is_some(), current.as_ref())?;
            }
            let stale = self.has_defect(ExecutorDefect::StaleCurrentAfterDelete);
            if stale {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            if let (Some(key), Some(digest), true) = (&key, &digest, look_up_key) {
                if let Some(holder) = self
                    .store
                    .get_run_by_request_key(session, key.as_str())
                    .await?
                {
                    let holder = self.reclaim(holder).await?;
                    if holder.status == RunStatus::Interrupted
                        && self.has_defect(ExecutorDefect::OrphanRetryReexecutes)
                    {
                        // The bug: run it again, without the key.
                        drop_key = true;
                        continue;
                    }
                    return self.answer_holder(session, &holder, digest).await;
                }
                // No holder now. If the session changed since `current` was
                // read (a DELETE in between freed the key and dropped the
                // runs, or a commit came), that read is stale: the policy
                // would refuse on runs that are gone. Decide again from
                // fresh reads (bounded by MAX_DECISIONS).
                let now = self.store.get_current_run(session).await?;
                if !stale && now.as_ref().map(|r| &r.run_id) != current.as_ref().map(|r| &r.run_id)
                {
                    continue;
                }
            }
            let prepared = match self.policy(req.kind, key.is_some(), current.as_ref()) {
                Err(EntryError::SessionExists | EntryError::AlreadyRunning)
                    if key.is_some() && self.has_defect(ExecutorDefect::KeyedSkipsPolicy) =>
                {
                    Prepared {
                        expected_current_run_id: current.as_ref().map(|r| r.run_id.clone()),
                        previous: current
                            .as_ref()
                            .filter(|r| r.status.is_live())
                            .map(|r| (r.run_id.clone(), RunStatus::Interrupted)),
                    }
                }
                other => other?,
            };
            let retried;
            let input = match req.kind {
                EntryKind::Retry => {
                    let mut inputs = self.store.list_inputs(session).await?;
                    let picked = if self.has_defect(ExecutorDefect::RetryRerunsFirstInput) {
                        (!inputs.is_empty()).then(|| inputs.remove(0))
                    } else {
                        inputs.pop()
                    };
                    let picked = picked.ok_or(EntryError::SessionNotFound)?;
                    retried = JsonText::from_value(&picked.input);
                    &retried
                }
                _ => &req.input,
            };
            // The test agent's `[admit:N]`: a slow admission (SPEC 7,
            // `[[agent.test-agent.admit]]`), before the lease is taken so a
            // long one never leaves a lease to run out before the commit.
            let admit_ms = parse_script(&input_text_of(input)).admit_ms;
            if admit_ms > 0 && !admission_lengthened {
                admission_lengthened = true;
                tokio::time::sleep(Duration::from_millis(admit_ms)).await;
            }
            // The run needs only the input's text.
            let text = input_text_of(input);
            let run_id = self.next_run_id();
            // Registered before the commit, so whoever finds the run in the
            // store also finds its log.
            let (log, stop_rx) = self.track(session, &run_id);
            let start = StartRun {
                session_id: session.to_owned(),
                run_id: run_id.clone(),
                expected_current_run_id: prepared.expected_current_run_id.clone(),
                // Given as text to the commit below.
                input: Value::Null,
                request_key: key.as_ref().map(|k| k.as_str().to_owned()),
                request_digest: digest.clone(),
            };
            // The lease first: a run is never `running` without one, so a
            // replica that dies right after its commit leaves a run that
            // expires like any other ([[lease.taken-before-commit]]).
            let taken = if self.has_defect(ExecutorDefect::LeaseAfterCommit) {
                Ok(true)
            } else {
                self.store
                    .renew_lease(session, &run_id, &self.run_id_prefix, self.lease_deadline())
                    .await
            };
            if let Err(e) = taken {
                self.untrack(session, &run_id);
                return Err(e.into());
            }
            // Let concurrent entries interleave here, as they would over a
            // networked store: the races the rules exist for do happen.
            if self.config.commit_delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(self.config.commit_delay_ms)).await;
            } else {
                tokio::task::yield_now().await;
            }
            match self.store.commit_run_start_text(start, input).await {
                Ok(committed) => {
                    if let Some((previous, status)) = prepared.previous {
                        self.end_previous(session, &previous, status).await;
                    }
                    let (log, stop_rx) = self.still_tracked(session, &run_id, log, stop_rx);
                    self.spawn_run(session, &run_id, text, log, stop_rx);
                    return Ok(EntryOutcome::Started(committed.run));
                }
                Err(StoreError::RunStartRejected(RunStartRejection::RequestKeyTaken {
                    existing_run_id,
                })) => {
                    self.untrack(session, &run_id);
                    if self.has_defect(ExecutorDefect::NoReplanAfterKeyTaken) {
                        look_up_key = false;
                        continue;
                    }
                    if replanned {
                        return Err(EntryError::Contended);
                    }
                    replanned = true;
                    let Some(digest) = &digest else {
                        return Err(EntryError::Contended);
                    };
                    if let Some(holder) = self.store.get_run(session, &existing_run_id).await? {
                        let holder = self.reclaim(holder).await?;
                        return self.answer_holder(session, &holder, digest).await;
                    }
                    // The holder vanished (a delete): decide afresh.
                }
                Err(StoreError::RunStartRejected(RunStartRejection::CasMismatch { .. })) => {
                    self.untrack(session, &run_id);
                    if self.has_defect(ExecutorDefect::NoCasRedecide) {
                        return Err(EntryError::Contended);
                    }
                }
                Err(e) => {
                    self.untrack(session, &run_id);
                    return Err(e.into());
                }
            }
        }
        Err(EntryError::Contended)
    }

    /// Is this executor executing the run? Its log is open, or this
    /// executor started it (its run ids carry the instance prefix): a run
    /// committed while a concurrent delete dropped its pending log has no
    /// log for a moment, and must not be taken for an orphan meanwhile.
    pub(super) fn executing(&self, session: &str, run_id: &str) -> bool {
        let started_here = run_id
            .strip_prefix(self.run_id_prefix.as_str())
            .is_some_and(|rest| rest.starts_with('-'));
        started_here
            || self
                .log_of(session, run_id)
                .is_some_and(|log| !log.is_finished())
    }

    /// The run as it must be answered from (SPEC 5, `[S5-orphaned]`): a
    /// `running` run nobody executes is set `interrupted` first. A run that
    /// finished meanwhile is read again; one deleted meanwhile is returned
    /// as read (the caller's next read finds the session gone).
    pub async fn reclaim(&self, run: RunMetadata) -> Result<RunMetadata, StoreError> {
        if run.status != RunStatus::Running
            || self.config.orphans != OrphanRule::Lease
            || self.executing(&run.session_id, &run.run_id)
        {
            return Ok(run);
        }
        if self.has_defect(ExecutorDefect::ReaderRenewsLease) {
            // The bug: renewed in the owner's name (its run ids' prefix).
            let owner = run
                .run_id
                .rsplit_once('-')
                .map_or(run.run_id.as_str(), |(prefix, _)| prefix)
                .to_owned();
            let _ = self
                .store
                .renew_lease(&run.session_id, &run.run_id, &owner, self.lease_deadline())
                .await;
            return Ok(run);
        }
        if self.has_defect(ExecutorDefect::ExpiryWithoutLeaseCompare) {
            // The bug: interrupted without a look at the lease.
            return match self
                .store
                .set_run_status(&run.session_id, &run.run_id, RunStatus::Interrupted)
                .await
            {
                Ok(now) => Ok(now),
                Err(_) => Ok(self
                    .store
                    .get_run(&run.session_id, &run.run_id)
                    .await?
                    .unwrap_or(run)),
            };
        }
        reclaim_orphan(self.store.as_ref(), run).await
    }

    /// When a lease taken or renewed now expires.
    pub(super) fn lease_deadline(&self) -> u64 {
        now_ms().saturating_add(self.config.lease_ms)
    }

    pub(super) async fn reclaim_opt(
        &self,
        run: Option<RunMetadata>,
    ) -> Result<Option<RunMetadata>, StoreError> {
        match run {
            Some(run) => Ok(Some(self.reclaim(run).await?)),
            None => Ok(None),
        }
    }

    /// `listRuns` with orphaned runs reclaimed (the snapshot of SPEC 7).
    pub async fn list_runs(&self, session: &str) -> Result<Vec<RunMetadata>, StoreError> {
        let mut runs = Vec::new();
        for run in self.store.list_runs(session).await? {
            runs.push(self.reclaim(run).await?);
        }
        Ok(runs)
    }

    /// Plans against a holder and answers: attach / replay, or a 409.
    pub(super) async fn answer_holder(
        &self,
        session: &str,
        holder: &RunMetadata,
        digest: &str,
    ) -> Result<EntryOutcome, EntryError> {
        let current = self.store.get_current_run(session).await?;
        let digest = if self.has_defect(ExecutorDefect::IgnoreDigest) {
            holder.request_digest.as_deref().unwrap_or(digest)
        } else {
            digest
        };
        match plan_keyed_entry(
            Some(holder),
            current.as_ref().map(|r| r.run_id.as_str()),
            digest,
        ) {
            KeyedEntryPlan::Attach(run) | KeyedEntryPlan::Replay(run) => {
                Ok(EntryOutcome::Attached(run))
            }
            KeyedEntryPlan::Conflict { holder_run_id } => Err(EntryError::KeyConflict {
                run_id: match &current {
                    Some(c) if self.has_defect(ExecutorDefect::ConflictNamesCurrentRun) => {
                        c.run_id.clone()
                    }
                    _ => holder_run_id,
                },
            }),
            KeyedEntryPlan::AlreadyCompleted { .. }
                if self.has_defect(ExecutorDefect::FinishedHolderReplays) =>
            {
                Ok(EntryOutcome::Attached(holder.clone()))
            }
            KeyedEntryPlan::AlreadyCompleted { holder_run_id } => {
                Err(EntryError::AlreadyCompleted {
                    run_id: holder_run_id,
                })
            }
            // Unreachable with a holder; deciding afresh would be wrong, so
            // answer a retryable refusal instead of guessing.
            KeyedEntryPlan::New => Err(EntryError::Contended),
        }
    }

    /// The concurrency policy and session rules of SPEC 7 for a new run.
    ///
    /// `interrupt_previous` never applies to a keyless chat send: as in the
    /// framework the release notes describe, a keyless send is refused 409
    /// under either policy (a retried keyless send must not kill its own
    /// original run). Resume and retry are native entries and follow the
    /// policy keyed or not (SPEC 7, `agent.interrupt-previous.entry-interrupts`).
    pub(super) fn policy(
        &self,
        kind: EntryKind,
        keyed: bool,
        current: Option<&RunMetadata>,
    ) -> Result<Prepared, EntryError> {
        let interrupt = self.config.policy == ConcurrentEntry::InterruptPrevious
            && (keyed
                || kind != EntryKind::Chat
                || self.has_defect(ExecutorDefect::InterruptsKeylessChat));
        let expected = current.map(|r| r.run_id.clone());
        let previous = match (kind, current) {
            (EntryKind::Start, Some(_)) => return Err(EntryError::SessionExists),
            (EntryKind::Start | EntryKind::Chat, None) => None,
            (EntryKind::Resume | EntryKind::Retry, None) => {
                return Err(EntryError::SessionNotFound)
            }
            (EntryKind::Resume, Some(run))
                if run.status == RunStatus::Running
                    && self.has_defect(ExecutorDefect::ResumeWhileRunning) =>
            {
                Some((run.run_id.clone(), RunStatus::Completed))
            }
            (EntryKind::Resume | EntryKind::Chat | EntryKind::Retry, Some(run))
                if run.status == RunStatus::Running =>
            {
                if !interrupt {
                    return Err(EntryError::AlreadyRunning);
                }
                Some((run.run_id.clone(), RunStatus::Interrupted))
            }
            (EntryKind::Retry, Some(run)) if run.status.is_live() => {
                if !interrupt {
                    return Err(EntryError::AlreadyRunning);
                }
                Some((run.run_id.clone(), RunStatus::Interrupted))
            }
            (EntryKind::Chat, Some(run))
                if run.status.is_live()
                    && self.has_defect(ExecutorDefect::ChatLeavesSuspendedRun) =>
            {
                None
            }
            (EntryKind::Resume | EntryKind::Chat, Some(run)) if run.status.is_live() => {
                Some((run.run_id.clone(), RunStatus::Completed))
            }
            (_, Some(_)) => None,
        };
        Ok(Prepared {
            expected_current_run_id: expected,
            previous,
        })
    }

    /// Ends the run a new run replaced. A refusal means it ended by itself
    /// meanwhile, which is fine.
    pub(super) async fn end_previous(&self, session: &str, run_id: &str, status: RunStatus) {
        let _ = self.store.set_run_status(session, run_id, status).await;
        if status == RunStatus::Interrupted {
            self.signal_stop(session, Some(run_id));
        }
    }

    pub(super) fn next_run_id(&self) -> String {
        let n = self.run_counter.fetch_add(1, Ordering::Relaxed);
        format!("{}-{n}", self.run_id_prefix)
    }
}

/// Milliseconds since the Unix epoch: the clock leases are written in
/// (replicas must share it within a small fraction of the lease).
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Expires the lease of a `running` run this executor is not executing,
/// and answers the run as it is now (SPEC 5, `[[lease.expire.compare]]`).
///
/// `run` may be stale (read before its task wrote its end): the store's
/// `expire_lease` reads it again in its atomic step and only a run still
/// `running` whose lease is absent or expired becomes `interrupted`; a run
/// whose replica is renewing is answered `running`. Deleted meanwhile: the
/// run as read.
pub(super) async fn reclaim_orphan(
    store: &dyn SessionStateStore,
    run: RunMetadata,
) -> Result<RunMetadata, StoreError> {
    match store
        .expire_lease(&run.session_id, &run.run_id, now_ms())
        .await?
    {
        Some(now) => {
            if now.status == RunStatus::Interrupted && run.status == RunStatus::Running {
                // Names the run, never a key.
                eprintln!(
                    "warn run.orphaned: run {} of session {} was running under an expired lease; now interrupted",
                    now.run_id, now.session_id
                );
            }
            Ok(now)
        }
        None => Ok(run),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::super::test_agent::RunEvent;
    use super::*;
    use crate::store::MemoryStore;
    use reqkey_model::parse_request_key;
    use reqkey_model::{CommitResult, InputEntry};
    use serde_json::json;

    fn executor(config: ExecutorConfig) -> Arc<Executor> {
        Executor::new(Arc::new(MemoryStore::new()), config)
    }

    fn entry(kind: EntryKind, text: &str, key: Option<&str>) -> EntryRequest {
        EntryRequest {
            session_id: "s".into(),
            kind,
            input: JsonText::from_value(&json!({ "text": text })),
            request_key: key.map(|k| parse_request_key(k).unwrap()),
            written_escapes: String::new(),
        }
    }

    async fn wait_finished(ex: &Executor, run_id: &str) -> RunMetadata {
        ex.wait_run("s", run_id, 2_000).await.unwrap().unwrap()
    }

    /// Issue 29: run logs kept in memory are bounded in bytes, not only in
    /// count (100,000 runs of 1 MiB inputs once kept 100 GB reachable);
    /// the streams of dropped logs are rebuilt from the store.
    #[tokio::test]
    async fn run_logs_kept_in_memory_stay_within_the_byte_bound() {
        let ex = executor(ExecutorConfig::default());
        let text = "x".repeat(1 << 20);
        for i in 0..48 {
            let req = EntryRequest {
                session_id: format!("big-{i}"),
                kind: EntryKind::Start,
                input: JsonText::from_value(&json!({ "text": text })),
                request_key: None,
                written_escapes: String::new(),
            };
            let run = ex.enter(req).await.unwrap().run().clone();
            // Finished before the next one, so each may be dropped.
            let done = ex
                .wait_run(&run.session_id, &run.run_id, 2_000)
                .await
                .unwrap()
                .unwrap();
            assert_eq!(done.status, RunStatus::Completed);
        }
        let (tracked, bytes) = {
            let reg = ex.registry();
            (reg.tracked, reg.log_bytes)
        };
        // Each new run drops up to EVICT_PER_TRACK finished ones, so the
        // bound holds to within one run's log.
        assert!(
            bytes <= MAX_TRACKED_LOG_BYTES + (1 << 20),
            "{bytes} bytes of run logs kept for {tracked} runs"
        );
        assert!(tracked < 48, "{tracked} runs still tracked");
        // A dropped run's stream is rebuilt from the store: same events.
        let first = ex.store().list_runs("big-0").await.unwrap().remove(0);
        let mut rx = ex.follow_run(&first, false);
        let mut events = Vec::new();
        while let Some(e) = rx.recv().await {
            events.push(e);
        }
        assert_eq!(events.len(), 2, "{:?}", events.len());
        assert!(matches!(events[1], RunEvent::Finish(RunStatus::Completed)));
    }

    #[tokio::test]
    async fn a_keyed_duplicate_of_a_running_start_attaches_instead_of_session_exists() {
        let ex = executor(ExecutorConfig::default());
        let first = ex
            .enter(entry(EntryKind::Start, "[sleep:200]", Some("k")))
            .await
            .unwrap();
        let again = ex
            .enter(entry(EntryKind::Start, "[sleep:200]", Some("k")))
            .await
            .unwrap();
        assert!(!first.attached() && again.attached());
        assert_eq!(first.run().run_id, again.run().run_id);
        let keyless = ex.enter(entry(EntryKind::Start, "[sleep:200]", None)).await;
        assert_eq!(keyless, Err(EntryError::SessionExists));
        assert_eq!(ex.store().list_inputs("s").await.unwrap().len(), 1);
    }

    /// A store on which a DELETE lands between an entry's read of the
    /// current run and its holder lookup (once, when armed), and which
    /// refuses a commit as a lost CAS race (once, when `lose_commit` is
    /// set), counting the commits it is asked for.
    #[derive(Debug, Default)]
    struct DeleteBeforeLookup {
        inner: MemoryStore,
        armed: std::sync::atomic::AtomicBool,
        lose_commit: std::sync::atomic::AtomicBool,
        commits: AtomicU64,
    }

    #[async_trait::async_trait]
    impl SessionStateStore for DeleteBeforeLookup {
        fn backend(&self) -> &'static str {
            "memory"
        }
        async fn commit_run_start(&self, start: StartRun) -> Result<CommitResult, StoreError> {
            self.commits.fetch_add(1, Ordering::SeqCst);
            if self.lose_commit.swap(false, Ordering::SeqCst) {
                return Err(RunStartRejection::CasMismatch {
                    current_run_id: None,
                }
                .into());
            }
            self.inner.commit_run_start(start).await
        }
        async fn get_run(&self, s: &str, r: &str) -> Result<Option<RunMetadata>, StoreError> {
            self.inner.get_run(s, r).await
        }
        async fn get_current_run(&self, s: &str) -> Result<Option<RunMetadata>, StoreError> {
            self.inner.get_current_run(s).await
        }
        async fn list_runs(&self, s: &str) -> Result<Vec<RunMetadata>, StoreError> {
            self.inner.list_runs(s).await
        }
        async fn get_run_by_request_key(
            &self,
            s: &str,
            k: &str,
        ) -> Result<Option<RunMetadata>, StoreError> {
            if self.armed.swap(false, Ordering::SeqCst) {
                self.inner.delete_session(s).await?;
            }
            self.inner.get_run_by_request_key(s, k).await
        }
        async fn list_inputs(&self, s: &str) -> Result<Vec<InputEntry>, StoreError> {
            self.inner.list_inputs(s).await
        }
        async fn set_run_status(
            &self,
            s: &str,
            r: &str,
            status: RunStatus,
        ) -> Result<RunMetadata, StoreError> {
            self.inner.set_run_status(s, r, status).await
        }
        async fn delete_session(&self, s: &str) -> Result<bool, StoreError> {
            self.inner.delete_session(s).await
        }
        async fn renew_lease(
            &self,
            s: &str,
            r: &str,
            o: &str,
            at: u64,
        ) -> Result<bool, StoreError> {
            self.inner.renew_lease(s, r, o, at).await
        }
        async fn expire_lease(
            &self,
            s: &str,
            r: &str,
            now: u64,
        ) -> Result<Option<RunMetadata>, StoreError> {
            self.inner.expire_lease(s, r, now).await
        }
    }

    /// Issue 29: an entry's input moves into its first commit; when that
    /// commit loses a CAS race the entry decides again and commits the
    /// same input, every number spelled as sent.
    #[tokio::test]
    async fn an_entry_deciding_again_after_a_lost_cas_commits_the_same_input() {
        // Keys in serde_json's order (sorted), so the text compares whole.
        let written = r#"{"n":[18446744073709551616,-9223372036854775809,1e+400,-0,1e-400,1.50],"text":"big"}"#;
        for key in [None, Some("k")] {
            let store = Arc::new(DeleteBeforeLookup::default());
            let ex = Executor::new(store.clone(), ExecutorConfig::default());
            let input: Value = serde_json::from_str(written).unwrap();
            store.lose_commit.store(true, Ordering::SeqCst);
            let started = ex
                .enter(EntryRequest {
                    session_id: "s".into(),
                    kind: EntryKind::Start,
                    input: JsonText::from_value(&input),
                    request_key: key.map(|k| parse_request_key(k).unwrap()),
                    written_escapes: String::new(),
                })
                .await
                .unwrap();
            assert!(!started.attached());
            assert_eq!(store.commits.load(Ordering::SeqCst), 2, "key {key:?}");
            let inputs = ex.store().list_inputs("s").await.unwrap();
            assert_eq!(inputs.len(), 1);
            assert_eq!(inputs[0].run_id, started.run().run_id);
            assert_eq!(inputs[0].input, input);
            assert_eq!(reqkey_model::written_json(&inputs[0].input), written);
        }
    }

    /// A keyed duplicate whose holder vanished between its two reads (a
    /// DELETE in between) starts run 1 afresh: the runs its stale read saw
    /// are gone, so `state_session_exists` would be a refusal on nothing.
    #[tokio::test]
    async fn a_keyed_duplicate_racing_a_delete_starts_afresh_not_session_exists() {
        for (defect, want_started) in [
            (None, true),
            (Some(ExecutorDefect::StaleCurrentAfterDelete), false),
        ] {
            let store = Arc::new(DeleteBeforeLookup::default());
            let config = ExecutorConfig {
                defect,
                ..ExecutorConfig::default()
            };
            let ex = Executor::new(store.clone(), config);
            let first = ex
                .enter(entry(EntryKind::Start, "[sleep:300]", Some("k")))
                .await
                .unwrap();
            store.armed.store(true, Ordering::SeqCst);
            let again = ex
                .enter(entry(EntryKind::Start, "[sleep:300]", Some("k")))
                .await;
            if want_started {
                let again = again.unwrap();
                assert!(!again.attached(), "{again:?}");
                assert_ne!(again.run().run_id, first.run().run_id);
                assert_eq!(again.run().start_sequence, 1);
                assert_eq!(again.run().request_key.as_deref(), Some("k"));
            } else {
                assert_eq!(again, Err(EntryError::SessionExists));
            }
        }
    }

    #[tokio::test]
    async fn a_finished_current_holder_replays_and_a_later_run_makes_it_already_completed() {
        let ex = executor(ExecutorConfig::default());
        let first = ex
            .enter(entry(EntryKind::Start, "a", Some("k1")))
            .await
            .unwrap();
        let run_id = first.run().run_id.clone();
        assert_eq!(
            wait_finished(&ex, &run_id).await.status,
            RunStatus::Completed
        );
        let replay = ex
            .enter(entry(EntryKind::Start, "a", Some("k1")))
            .await
            .unwrap();
        assert!(replay.attached());
        ex.enter(entry(EntryKind::Resume, "b", Some("k2")))
            .await
            .unwrap();
        let late = ex.enter(entry(EntryKind::Start, "a", Some("k1"))).await;
        assert_eq!(late, Err(EntryError::AlreadyCompleted { run_id }));
    }

    #[tokio::test]
    async fn a_different_input_under_a_taken_key_is_a_conflict_naming_the_holder() {
        let ex = executor(ExecutorConfig::default());
        let first = ex
            .enter(entry(EntryKind::Start, "a", Some("k")))
            .await
            .unwrap();
        let other = ex.enter(entry(EntryKind::Start, "b", Some("k"))).await;
        assert_eq!(
            other,
            Err(EntryError::KeyConflict {
                run_id: first.run().run_id.clone()
            })
        );
        assert_eq!(ex.store().list_runs("s").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn ignore_digest_defect_attaches_where_a_conflict_is_due() {
        let ex = executor(ExecutorConfig {
            defect: Some(ExecutorDefect::IgnoreDigest),
            ..ExecutorConfig::default()
        });
        ex.enter(entry(EntryKind::Start, "a", Some("k")))
            .await
            .unwrap();
        let other = ex
            .enter(entry(EntryKind::Start, "b", Some("k")))
            .await
            .unwrap();
        assert!(other.attached());
    }

    async fn race(ex: &Arc<Executor>, copies: usize) -> Vec<Result<EntryOutcome, EntryError>> {
        let barrier = Arc::new(tokio::sync::Barrier::new(copies));
        let tasks: Vec<_> = (0..copies)
            .map(|_| {
                let ex = ex.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    ex.enter(entry(EntryKind::Chat, "[sleep:50]", Some("dup")))
                        .await
                })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap());
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_keyed_duplicates_produce_one_run_and_all_name_it() {
        for _ in 0..10 {
            let ex = executor(ExecutorConfig::default());
            let answers = race(&ex, 8).await;
            let ids: Vec<_> = answers
                .iter()
                .map(|a| a.as_ref().unwrap().run().run_id.clone())
                .collect();
            assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
            assert_eq!(
                answers
                    .iter()
                    .filter(|a| !a.as_ref().unwrap().attached())
                    .count(),
                1
            );
            assert_eq!(ex.store().list_inputs("s").await.unwrap().len(), 1);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_keyless_entries_lose_the_cas_and_are_refused_typed() {
        for _ in 0..10 {
            let ex = executor(ExecutorConfig::default());
            let barrier = Arc::new(tokio::sync::Barrier::new(8));
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let (ex, barrier) = (ex.clone(), barrier.clone());
                    tokio::spawn(async move {
                        barrier.wait().await;
                        ex.enter(entry(EntryKind::Chat, &format!("[sleep:50] {i}"), None))
                            .await
                    })
                })
                .collect();
            let mut started = 0;
            for t in tasks {
                match t.await.unwrap() {
                    Ok(EntryOutcome::Started(_)) => started += 1,
                    other => assert_eq!(other, Err(EntryError::AlreadyRunning)),
                }
            }
            assert_eq!(started, 1);
            assert_eq!(ex.store().list_inputs("s").await.unwrap().len(), 1);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn without_the_replan_a_lost_race_is_refused() {
        let mut refused = 0;
        for _ in 0..10 {
            let ex = executor(ExecutorConfig {
                defect: Some(ExecutorDefect::NoReplanAfterKeyTaken),
                ..ExecutorConfig::default()
            });
            refused += race(&ex, 8).await.iter().filter(|a| a.is_err()).count();
        }
        assert!(refused > 0, "the defect never showed");
    }

    #[tokio::test]
    async fn policy_before_key_defect_refuses_a_keyed_retry_of_start() {
        let ex = executor(ExecutorConfig {
            defect: Some(ExecutorDefect::PolicyBeforeKey),
            ..ExecutorConfig::default()
        });
        ex.enter(entry(EntryKind::Start, "a", Some("k")))
            .await
            .unwrap();
        let again = ex.enter(entry(EntryKind::Start, "a", Some("k"))).await;
        assert_eq!(again, Err(EntryError::SessionExists));
    }

    #[tokio::test]
    async fn without_key_support_keys_are_ignored_with_one_warning() {
        let ex = executor(ExecutorConfig {
            supports_request_key: false,
            ..ExecutorConfig::default()
        });
        assert_eq!(ex.ignored_key_warnings(), 0);
        let first = ex
            .enter(entry(EntryKind::Start, "[sleep:100]", Some("k")))
            .await
            .unwrap();
        assert_eq!(ex.ignored_key_warnings(), 1);
        assert_eq!(first.run().request_key, None);
        let again = ex
            .enter(entry(EntryKind::Start, "[sleep:100]", Some("k")))
            .await;
        assert_eq!(again, Err(EntryError::SessionExists));
    }

    #[tokio::test]
    async fn the_ignored_key_warning_is_written_once_per_executor_not_per_request() {
        let ex = executor(ExecutorConfig {
            supports_request_key: false,
            ..ExecutorConfig::default()
        });
        ex.enter(entry(EntryKind::Start, "keyless", None))
            .await
            .unwrap();
        assert_eq!(
            ex.ignored_key_warnings(),
            0,
            "a keyless request warns nothing"
        );
        for i in 0..20 {
            let key = format!("k{i}");
            let _ = ex
                .enter(entry(EntryKind::Chat, "x", Some(key.as_str())))
                .await;
            let _ = ex.enter(entry(EntryKind::Retry, "", Some(&key))).await;
        }
        assert_eq!(ex.ignored_key_warnings(), 1);
        // Another executor instance warns once more, on its own.
        let other = executor(ExecutorConfig {
            supports_request_key: false,
            ..ExecutorConfig::default()
        });
        other
            .enter(entry(EntryKind::Start, "a", Some("k")))
            .await
            .unwrap();
        assert_eq!(
            (ex.ignored_key_warnings(), other.ignored_key_warnings()),
            (1, 1)
        );
    }

    #[tokio::test]
    async fn dedupes_while_ignoring_keys_declares_false_but_attaches() {
        let ex = executor(ExecutorDefect::DedupesWhileIgnoringKeys.config());
        assert!(!ex.supports_request_key());
        ex.enter(entry(EntryKind::Start, "[sleep:200]", Some("k")))
            .await
            .unwrap();
        let again = ex
            .enter(entry(EntryKind::Start, "[sleep:200]", Some("k")))
            .await
            .unwrap();
        assert!(again.attached());
        assert_eq!(ex.ignored_key_warnings(), 0);
    }

    #[tokio::test]
    async fn interrupts_keyless_chat_defect_interrupts_where_a_409_is_due() {
        let ex = executor(ExecutorDefect::InterruptsKeylessChat.config());
        assert_eq!(ex.concurrent_entry(), "interrupt_previous");
        let first = ex
            .enter(entry(EntryKind::Chat, "[sleep:5000]", None))
            .await
            .unwrap();
        let second = ex.enter(entry(EntryKind::Chat, "b", None)).await.unwrap();
        assert!(!second.attached());
        let prev = ex
            .store()
            .get_run("s", &first.run().run_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(prev.status, RunStatus::Interrupted);
    }

    #[tokio::test]
    async fn resume_completes_a_suspended_run_and_refuses_a_running_one() {
        let ex = executor(ExecutorConfig::default());
        let first = ex
            .enter(entry(EntryKind::Start, "[suspend]", None))
            .await
            .unwrap();
        let first_id = first.run().run_id.clone();
        assert_eq!(
            wait_finished(&ex, &first_id).await.status,
            RunStatus::SuspendedInput
        );
        let second = ex
            .enter(entry(EntryKind::Resume, "[sleep:300]", None))
            .await
            .unwrap();
        let prev = ex.store().get_run("s", &first_id).await.unwrap().unwrap();
        assert_eq!(prev.status, RunStatus::Completed);
        assert_eq!(second.run().start_sequence, 2);
        let third = ex.enter(entry(EntryKind::Resume, "x", None)).await;
        assert_eq!(third, Err(EntryError::AlreadyRunning));
    }

    #[tokio::test]
    async fn interrupt_previous_stops_the_running_run_and_starts_the_new_one() {
        let ex = executor(ExecutorConfig {
            policy: ConcurrentEntry::InterruptPrevious,
            ..ExecutorConfig::default()
        });
        let first = ex
            .enter(entry(EntryKind::Chat, "[sleep:5000]", None))
            .await
            .unwrap();
        let mut events = ex.follow_run(first.run(), false);
        let keyless = ex.enter(entry(EntryKind::Chat, "b", None)).await;
        assert_eq!(
            keyless,
            Err(EntryError::AlreadyRunning),
            "keyless sends never interrupt"
        );
        let second = ex
            .enter(entry(EntryKind::Chat, "b", Some("kb")))
            .await
            .unwrap();
        assert!(!second.attached());
        let prev = ex
            .store()
            .get_run("s", &first.run().run_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(prev.status, RunStatus::Interrupted);
        let mut last = None;
        while let Some(e) = events.recv().await {
            last = Some(e);
        }
        assert_eq!(last, Some(RunEvent::Finish(RunStatus::Interrupted)));
    }

    #[tokio::test]
    async fn retry_reruns_the_last_input_and_delete_frees_the_key() {
        let ex = executor(ExecutorConfig::default());
        let first = ex
            .enter(entry(EntryKind::Start, "[fail]", Some("k")))
            .await
            .unwrap();
        assert_eq!(
            wait_finished(&ex, &first.run().run_id).await.status,
            RunStatus::Failed
        );
        let retried = ex
            .enter(entry(EntryKind::Retry, "ignored", Some("r")))
            .await
            .unwrap();
        let inputs = ex.store().list_inputs("s").await.unwrap();
        assert_eq!(inputs[1].input, json!({"text": "[fail]"}));
        assert_eq!(inputs[1].run_id, retried.run().run_id);
        assert!(ex.delete_session("s").await.unwrap());
        let fresh = ex
            .enter(entry(EntryKind::Start, "[fail]", Some("k")))
            .await
            .unwrap();
        assert!(!fresh.attached());
        assert_eq!(fresh.run().start_sequence, 1);
    }

    #[tokio::test]
    async fn a_run_committed_after_a_concurrent_delete_still_runs_to_its_end() {
        let ex = executor(ExecutorConfig::default());
        // What a delete racing an entry leaves: the pending log stopped and
        // dropped before the commit lands.
        let (log, stop_rx) = ex.track("s", "r-late");
        ex.signal_stop("s", None);
        ex.registry().sessions.remove("s");
        let (fresh, stop_rx) = ex.still_tracked("s", "r-late", log.clone(), stop_rx);
        assert!(!Arc::ptr_eq(&fresh, &log));
        assert!(!*stop_rx.borrow());
    }

    #[tokio::test]
    async fn a_run_without_a_log_is_streamed_from_the_store() {
        // Another live process started it: not an orphan.
        let ex = executor(ExecutorConfig {
            orphans: OrphanRule::Never,
            ..ExecutorConfig::default()
        });
        // Started by someone else (another process on a shared store).
        let start = StartRun {
            session_id: "s".into(),
            run_id: "foreign".into(),
            expected_current_run_id: None,
            input: json!({"text": "from elsewhere"}),
            request_key: None,
            request_digest: None,
        };
        let run = ex.store().commit_run_start(start).await.unwrap().run;
        let mut events = ex.follow_run(&run, true);
        assert_eq!(
            events.recv().await,
            Some(RunEvent::Text("echo: from elsewhere".into()))
        );
        ex.store()
            .set_run_status("s", "foreign", RunStatus::Failed)
            .await
            .unwrap();
        assert_eq!(
            events.recv().await,
            Some(RunEvent::Finish(RunStatus::Failed))
        );
        assert_eq!(events.recv().await, None);
    }

    /// What a killed server leaves: a keyed run `running` in the store,
    /// with no process executing it.
    async fn orphan(ex: &Executor, text: &str, key: &str) -> RunMetadata {
        let input = json!({ "text": text });
        let start = StartRun {
            session_id: "s".into(),
            run_id: "run-of-a-dead-process".into(),
            expected_current_run_id: None,
            request_digest: Some(reqkey_model::execute_request_digest(&input)),
            input,
            request_key: Some(key.into()),
        };
        ex.store().commit_run_start(start).await.unwrap().run
    }

    #[tokio::test]
    async fn a_keyed_retry_of_an_orphaned_run_replays_it_interrupted() {
        let ex = executor(ExecutorConfig::default());
        let dead = orphan(&ex, "[sleep:60000]", "k").await;
        let retry = tokio::time::timeout(
            Duration::from_secs(2),
            ex.enter(entry(EntryKind::Start, "[sleep:60000]", Some("k"))),
        )
        .await
        .unwrap()
        .unwrap();
        assert!(retry.attached());
        assert_eq!(retry.run().run_id, dead.run_id);
        assert_eq!(retry.run().status, RunStatus::Interrupted);
        let stored = ex
            .store()
            .get_run("s", &dead.run_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.status, RunStatus::Interrupted);
        assert_eq!(ex.store().list_runs("s").await.unwrap().len(), 1);
    }

    #[tokio::test]
    async fn an_orphaned_current_run_neither_blocks_a_resume_nor_a_wait() {
        let ex = executor(ExecutorConfig::default());
        let dead = orphan(&ex, "[sleep:60000]", "k").await;
        let started = std::time::Instant::now();
        let read = ex
            .wait_run("s", &dead.run_id, 5_000)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.status, RunStatus::Interrupted);
        assert!(started.elapsed() < Duration::from_secs(1));
        let resumed = ex
            .enter(entry(EntryKind::Resume, "go on", None))
            .await
            .unwrap();
        assert!(!resumed.attached());
        assert_eq!(resumed.run().start_sequence, 2);
        // A run this executor IS executing is never taken for an orphan.
        let live = ex.list_runs("s").await.unwrap();
        assert_eq!(live[1].run_id, resumed.run().run_id);
        assert_ne!(live[1].status, RunStatus::Interrupted);
    }

    #[tokio::test]
    async fn a_chat_attach_to_an_orphan_ends_at_once_interrupted() {
        let ex = executor(ExecutorConfig::default());
        let dead = orphan(&ex, "[sleep:60000]", "k").await;
        let mut events = ex.follow_run(&dead, true);
        let drain = async {
            let mut last = None;
            while let Some(e) = events.recv().await {
                last = Some(e);
            }
            last
        };
        let last = tokio::time::timeout(Duration::from_secs(2), drain)
            .await
            .unwrap();
        assert_eq!(last, Some(RunEvent::Finish(RunStatus::Interrupted)));
    }

    #[tokio::test]
    async fn a_stale_running_read_is_judged_by_a_fresh_one() {
        let ex = executor(ExecutorConfig::default());
        let stale = orphan(&ex, "[suspend]", "k").await;
        // Its end landed after the read the caller holds.
        ex.store()
            .set_run_status("s", &stale.run_id, RunStatus::SuspendedInput)
            .await
            .unwrap();
        let now = ex.reclaim(stale.clone()).await.unwrap();
        assert_eq!(now.status, RunStatus::SuspendedInput);
        let stored = ex
            .store()
            .get_run("s", &stale.run_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.status, RunStatus::SuspendedInput);
    }

    #[tokio::test]
    async fn a_run_started_here_is_never_an_orphan_even_without_its_log() {
        let ex = executor(ExecutorConfig::default());
        // What a delete racing an entry leaves for a moment: the run
        // committed under this executor's id, its pending log dropped and
        // not yet replaced (see `still_tracked`).
        let start = StartRun {
            session_id: "s".into(),
            run_id: ex.next_run_id(),
            expected_current_run_id: None,
            input: json!({"text": "mine"}),
            request_key: None,
            request_digest: None,
        };
        let run = ex.store().commit_run_start(start).await.unwrap().run;
        let now = ex.reclaim(run.clone()).await.unwrap();
        assert_eq!(now.status, RunStatus::Running);
        // A stream of it (rebuilt from the store) does not reclaim it either.
        let mut events = ex.follow_run(&run, true);
        assert_eq!(
            events.recv().await,
            Some(RunEvent::Text("echo: mine".into()))
        );
        tokio::time::sleep(Duration::from_millis(3 * STORE_POLL_MS)).await;
        let stored = ex.store().get_run("s", &run.run_id).await.unwrap().unwrap();
        assert_eq!(stored.status, RunStatus::Running);
    }

    #[tokio::test]
    async fn without_the_sole_executor_rule_an_orphan_stays_running() {
        let ex = executor(ExecutorConfig {
            orphans: OrphanRule::Never,
            ..ExecutorConfig::default()
        });
        let dead = orphan(&ex, "[sleep:60000]", "k").await;
        let retry = ex
            .enter(entry(EntryKind::Start, "[sleep:60000]", Some("k")))
            .await
            .unwrap();
        assert!(retry.attached());
        assert_eq!(retry.run().status, RunStatus::Running);
        let resumed = ex.enter(entry(EntryKind::Resume, "go on", None)).await;
        assert_eq!(resumed, Err(EntryError::AlreadyRunning));
        let stored = ex
            .store()
            .get_run("s", &dead.run_id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(stored.status, RunStatus::Running);
    }

    #[tokio::test]
    async fn waits_answer_at_once_after_shutdown() {
        let ex = executor(ExecutorConfig::default());
        let run = ex
            .enter(entry(EntryKind::Start, "[sleep:5000]", None))
            .await
            .unwrap();
        ex.shutdown();
        let started = std::time::Instant::now();
        let read = ex
            .wait_run("s", &run.run().run_id, 5_000)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(read.status, RunStatus::Running);
        assert!(started.elapsed() < Duration::from_millis(1_000));
    }

    #[tokio::test]
    async fn delete_stops_a_live_run_and_ends_its_stream() {
        let ex = executor(ExecutorConfig::default());
        let first = ex
            .enter(entry(EntryKind::Chat, "[sleep:5000]", None))
            .await
            .unwrap();
        let mut events = ex.follow_run(first.run(), false);
        assert!(ex.delete_session("s").await.unwrap());
        let mut last = None;
        let drain = async {
            while let Some(e) = events.recv().await {
                last = Some(e);
            }
        };
        tokio::time::timeout(Duration::from_secs(2), drain)
            .await
            .unwrap();
        assert_eq!(last, Some(RunEvent::Finish(RunStatus::Interrupted)));
    }
}
