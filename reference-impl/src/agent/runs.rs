//! The runs an executor executes: tracked logs and stop signals (bounded,
//! evicted oldest first), spawning the test agent under a lease, waits and
//! streams (from the log, or from the store when the log is gone).

use std::sync::Arc;
use std::time::Duration;

use reqkey_model::{RunMetadata, RunStatus, StartRun, StoreError};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::test_agent::{input_text, parse_script, RunEvent, RunLog, MAX_SLEEP_MS};
use crate::agent::executor::*;
use crate::store::SessionStateStore;

impl Executor {
    pub(super) fn track(
        &self,
        session: &str,
        run_id: &str,
    ) -> (Arc<RunLog>, watch::Receiver<bool>) {
        let log = Arc::new(RunLog::new());
        let (stop, stop_rx) = watch::channel(false);
        let mut reg = self.registry();
        evict_some(&mut reg);
        reg.order.push_back((session.to_owned(), run_id.to_owned()));
        reg.sessions.entry(session.to_owned()).or_default().insert(
            run_id.to_owned(),
            TrackedRun {
                log: log.clone(),
                stop,
                log_bytes: 0,
            },
        );
        reg.tracked += 1;
        (log, stop_rx)
    }

    /// A delete that ran between `track` and the commit stopped and dropped
    /// the pending log, but the commit landed after it (in the session's new
    /// life): give the run a fresh log so it runs and reports normally.
    pub(super) fn still_tracked(
        &self,
        session: &str,
        run_id: &str,
        log: Arc<RunLog>,
        stop_rx: watch::Receiver<bool>,
    ) -> (Arc<RunLog>, watch::Receiver<bool>) {
        let tracked = self
            .registry()
            .sessions
            .get(session)
            .and_then(|runs| runs.get(run_id))
            .is_some_and(|r| Arc::ptr_eq(&r.log, &log));
        if tracked {
            (log, stop_rx)
        } else {
            self.track(session, run_id)
        }
    }

    pub(super) fn untrack(&self, session: &str, run_id: &str) {
        let mut reg = self.registry();
        let Some(runs) = reg.sessions.get_mut(session) else {
            return;
        };
        let removed = runs.remove(run_id);
        if runs.is_empty() {
            reg.sessions.remove(session);
        }
        if let Some(run) = removed {
            reg.tracked = reg.tracked.saturating_sub(1);
            reg.log_bytes = reg.log_bytes.saturating_sub(run.log_bytes);
        }
    }

    /// The session a tracked run belongs to. Only
    /// [`ExecutorDefect::RunLookupIgnoresSession`] asks: a correct server
    /// never resolves a run outside the session it was named in.
    pub(super) fn session_of_tracked_run(&self, run_id: &str) -> Option<String> {
        self.registry()
            .sessions
            .iter()
            .find(|(_, runs)| runs.contains_key(run_id))
            .map(|(s, _)| s.clone())
    }

    pub(super) fn log_of(&self, session: &str, run_id: &str) -> Option<Arc<RunLog>> {
        self.registry()
            .sessions
            .get(session)
            .and_then(|runs| runs.get(run_id))
            .map(|r| r.log.clone())
    }

    /// Signals the stop of one run, or of every run of the session.
    pub(super) fn signal_stop(&self, session: &str, run_id: Option<&str>) {
        let reg = self.registry();
        if let Some(runs) = reg.sessions.get(session) {
            for (id, run) in runs {
                if run_id.is_none_or(|want| want == id) {
                    run.stop.send_replace(true);
                }
            }
        }
    }

    /// Runs the test agent for one committed run, as a task.
    pub(super) fn spawn_run(
        &self,
        session: &str,
        run_id: &str,
        text: String,
        log: Arc<RunLog>,
        mut stop: watch::Receiver<bool>,
    ) {
        {
            let mut reg = self.registry();
            let counted = reg
                .sessions
                .get_mut(session)
                .and_then(|runs| runs.get_mut(run_id))
                .filter(|r| Arc::ptr_eq(&r.log, &log))
                .map(|r| {
                    r.log_bytes = text.len();
                    text.len()
                });
            reg.log_bytes = reg.log_bytes.saturating_add(counted.unwrap_or(0));
        }
        let store = self.store.clone();
        let session = session.to_owned();
        let run_id = run_id.to_owned();
        let owner = self.run_id_prefix.clone();
        let lease_ms = self.config.lease_ms.max(3);
        let renews = !self.has_defect(ExecutorDefect::NeverRenews);
        let writes_back = self.has_defect(ExecutorDefect::DeleteLeavesRunsExecuting);
        let resumes_later = self.has_defect(ExecutorDefect::SuspendedResumedByTimer);
        let echo = if self.has_defect(ExecutorDefect::StreamTextDropsNonBmp) {
            // The bug: text cut in UTF-16 units, each surrogate lost.
            text.chars()
                .map(|c| if u32::from(c) > 0xFFFF { '\u{FFFD}' } else { c })
                .collect()
        } else {
            text.clone()
        };
        let sleep_share = if self.has_defect(ExecutorDefect::SleepCutShort) {
            2
        } else {
            1
        };
        tokio::spawn(async move {
            let script = parse_script(&text);
            log.push_text(format!("echo: {echo}"));
            let sleep = tokio::time::sleep(Duration::from_millis(script.sleep_ms / sleep_share));
            // Renewed every third of the lease while the run executes
            // ([[lease.renew.owner-only]]); a refused or failed renewal is not
            // fatal here: if the lease is lost the run was interrupted, and
            // its finish below reports what the store holds.
            let renew = async {
                let mut tick = tokio::time::interval(Duration::from_millis(lease_ms / 3));
                tick.tick().await;
                if !renews {
                    std::future::pending::<()>().await;
                }
                loop {
                    tick.tick().await;
                    let _ = store
                        .renew_lease(&session, &run_id, &owner, now_ms().saturating_add(lease_ms))
                        .await;
                }
            };
            let stopped = tokio::select! {
                () = sleep => false,
                r = stop.wait_for(|s| *s) => r.is_ok(),
                () = renew => false,
            };
            if stopped {
                // Whoever stopped us wrote the status (or deleted the session).
                log.finish(RunStatus::Interrupted);
                return;
            }
            if writes_back
                && store
                    .get_run(&session, &run_id)
                    .await
                    .ok()
                    .flatten()
                    .is_none()
            {
                // The bug: the run's end is an upsert of its row.
                let current = store.get_current_run(&session).await.ok().flatten();
                let _ = store
                    .commit_run_start(StartRun {
                        session_id: session.clone(),
                        run_id: run_id.clone(),
                        expected_current_run_id: current.map(|r| r.run_id),
                        input: serde_json::json!({ "text": text }),
                        request_key: None,
                        request_digest: None,
                    })
                    .await;
            }
            let status = match store.set_run_status(&session, &run_id, script.end).await {
                Ok(run) => run.status,
                // Interrupted or deleted meanwhile: report what the store holds.
                Err(_) => match store.get_run(&session, &run_id).await {
                    Ok(Some(run)) if run.status.is_finished() => run.status,
                    _ => RunStatus::Interrupted,
                },
            };
            log.finish(status);
            if resumes_later && status == RunStatus::SuspendedInput {
                // The bug: a scheduler resumes it later, whatever happened
                // to its session meanwhile.
                tokio::time::sleep(Duration::from_millis(
                    crate::agent::config::SUSPENDED_RESUMED_AFTER_MS,
                ))
                .await;
                let current = store.get_current_run(&session).await.ok().flatten();
                let resumed = format!("{run_id}-resumed");
                if let Some(c) = &current {
                    let _ = store
                        .set_run_status(&session, &c.run_id, RunStatus::Completed)
                        .await;
                }
                if store
                    .commit_run_start(StartRun {
                        session_id: session.clone(),
                        run_id: resumed.clone(),
                        expected_current_run_id: current.map(|r| r.run_id),
                        input: serde_json::json!({ "text": "resumed by the scheduler" }),
                        request_key: None,
                        request_digest: None,
                    })
                    .await
                    .is_ok()
                {
                    let _ = store
                        .set_run_status(&session, &resumed, RunStatus::Completed)
                        .await;
                }
            }
        });
    }

    /// Deletes a session: keys freed at once (the store), live runs stopped.
    pub async fn delete_session(&self, session: &str) -> Result<bool, StoreError> {
        let deleted = self.store.delete_session(session).await?;
        if !self.has_defect(ExecutorDefect::DeleteLeavesRunsExecuting) {
            self.signal_stop(session, None);
        }
        let removed = self.registry().sessions.remove(session);
        if let Some(runs) = removed {
            for run in runs.values() {
                // A suspended run's log already finished; a running one's task
                // finishes it on the stop signal. Finish here too, in case the
                // task has not been scheduled yet.
                if !run.log.is_finished() {
                    run.log.finish(RunStatus::Interrupted);
                }
            }
            let mut reg = self.registry();
            reg.tracked = reg.tracked.saturating_sub(runs.len());
            let bytes: usize = runs.values().map(|r| r.log_bytes).sum();
            reg.log_bytes = reg.log_bytes.saturating_sub(bytes);
        }
        Ok(deleted)
    }

    /// Reads a run, waiting up to `wait_ms` while it is `running`.
    pub async fn wait_run(
        &self,
        session: &str,
        run_id: &str,
        wait_ms: u64,
    ) -> Result<Option<RunMetadata>, StoreError> {
        let owner;
        let session = match self.has_defect(ExecutorDefect::RunLookupIgnoresSession) {
            true => {
                owner = self.session_of_tracked_run(run_id);
                owner.as_deref().unwrap_or(session)
            }
            false => session,
        };
        // Over MAX_WAITING_POLLS waiting at once, answer as it is now.
        let _slot;
        let wait_ms = match self.waiting_polls.clone().try_acquire_owned() {
            Ok(slot) if wait_ms > 0 => {
                _slot = slot;
                wait_ms
            }
            _ => 0,
        };
        let deadline = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        let mut changes = self.log_of(session, run_id).map(|l| l.subscribe());
        let shutdown = self.shutdown.subscribe();
        // Bounded: every round waits at least until the next poll tick or
        // the deadline, and the deadline is finite. A shutdown answers at
        // once, so a graceful shutdown never waits out a long `waitMs`.
        loop {
            let run = self.store.get_run(session, run_id).await?;
            let Some(run) = self.reclaim_opt(run).await? else {
                return Ok(None);
            };
            let now = tokio::time::Instant::now();
            let waiting = if self.has_defect(ExecutorDefect::WaitWhileLive) {
                run.status.is_live()
            } else {
                run.status == RunStatus::Running
            };
            if !waiting || now >= deadline || *shutdown.borrow() {
                return Ok(Some(run));
            }
            let tick = (now + Duration::from_millis(STORE_POLL_MS)).min(deadline);
            match changes.as_mut() {
                Some(rx) => {
                    let _ = tokio::time::timeout_at(tick, rx.changed()).await;
                }
                None => tokio::time::sleep_until(tick).await,
            }
        }
    }

    /// The events of one run for a chat stream: from its start (or, with
    /// [`ExecutorDefect::AttachStreamsFromNow`] on an attach, from now),
    /// then live, ending after `finish` or at shutdown. The channel is
    /// bounded; the feeding task ends when the receiver is dropped.
    pub fn follow_run(&self, run: &RunMetadata, attached: bool) -> mpsc::Receiver<RunEvent> {
        self.follow_run_from(run, attached, false)
    }

    /// [`Self::follow_run`], from now when `from_now` (only
    /// [`ExecutorDefect::LastEventIdResumesLive`] asks for it).
    pub fn follow_run_from(
        &self,
        run: &RunMetadata,
        attached: bool,
        from_now: bool,
    ) -> mpsc::Receiver<RunEvent> {
        let (tx, rx) = mpsc::channel(8);
        let log = self.log_of(&run.session_id, &run.run_id);
        let mut shutdown = self.shutdown.subscribe();
        let from_now =
            from_now || (attached && self.has_defect(ExecutorDefect::AttachStreamsFromNow));
        let store = self.store.clone();
        let run = run.clone();
        // Without a log (and not started here) nobody here executes it.
        let reclaim = self.config.orphans == OrphanRule::Lease
            && !self.executing(&run.session_id, &run.run_id);
        let store_waits = !self.has_defect(ExecutorDefect::StoreStreamDoesNotWait);
        tokio::spawn(async move {
            let fed = async {
                match log {
                    Some(log) => follow_log(&log, from_now, &tx).await,
                    None => {
                        if reclaim && run.status == RunStatus::Running {
                            let _ = reclaim_orphan(store.as_ref(), run.clone()).await;
                        }
                        follow_store(store.as_ref(), &run, store_waits, &tx).await;
                    }
                }
            };
            tokio::select! {
                () = fed => {}
                _ = shutdown.wait_for(|s| *s) => {}
            }
        });
        rx
    }

    /// Ends every open stream and wait (graceful shutdown).
    pub fn shutdown(&self) {
        self.shutdown.send_replace(true);
    }

    /// A future that resolves once [`Executor::shutdown`] was called.
    pub async fn until_shutdown(&self) {
        let mut rx = self.shutdown.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }
}

/// The most queue entries one `track` looks at for eviction.
pub(super) const EVICT_PER_TRACK: usize = 4;

/// Over [`MAX_TRACKED_RUNS`], forgets the oldest finished runs, a few per
/// newly tracked run (amortized O(1); evicting all finished runs at once
/// held the registry's lock for hundreds of ms at 100k runs and stalled
/// every request behind it). Live runs go to the back of the queue;
/// entries of runs already untracked are dropped, which also keeps the
/// queue itself bounded.
pub(super) fn evict_some(reg: &mut Registry) {
    for _ in 0..EVICT_PER_TRACK {
        let over = reg.tracked >= MAX_TRACKED_RUNS || reg.log_bytes > MAX_TRACKED_LOG_BYTES;
        if !over && reg.order.len() <= 2 * MAX_TRACKED_RUNS {
            return;
        }
        let Some((session, run_id)) = reg.order.pop_front() else {
            return;
        };
        let Some(runs) = reg.sessions.get_mut(&session) else {
            continue;
        };
        match runs.get(&run_id) {
            None => {}
            Some(run) if over && run.log.is_finished() => {
                let bytes = run.log_bytes;
                runs.remove(&run_id);
                if runs.is_empty() {
                    reg.sessions.remove(&session);
                }
                reg.tracked = reg.tracked.saturating_sub(1);
                reg.log_bytes = reg.log_bytes.saturating_sub(bytes);
            }
            Some(_) => reg.order.push_back((session, run_id)),
        }
    }
}

pub(super) async fn follow_log(log: &RunLog, from_now: bool, tx: &mpsc::Sender<RunEvent>) {
    let mut changes = log.subscribe();
    let mut next = if from_now { log.len() } else { 0 };
    // Bounded: a log holds at most MAX_EVENTS_PER_RUN events and ends with
    // `finish`; every round consumes at least one change.
    loop {
        let (events, finished) = log.events_from(next);
        next += events.len();
        for event in events {
            if tx.send(event).await.is_err() {
                return;
            }
        }
        if finished {
            return;
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}

/// A stream for a run this executor has no log of (another process
/// started it, or its log was evicted): rebuilt from the store.
pub(super) async fn follow_store(
    store: &dyn SessionStateStore,
    run: &RunMetadata,
    waits: bool,
    tx: &mpsc::Sender<RunEvent>,
) {
    let input = store
        .list_inputs(&run.session_id)
        .await
        .ok()
        .and_then(|inputs| inputs.into_iter().find(|e| e.run_id == run.run_id))
        .map(|e| e.input)
        .unwrap_or(Value::Null);
    if tx
        .send(RunEvent::Text(format!("echo: {}", input_text(&input))))
        .await
        .is_err()
    {
        return;
    }
    let max_rounds = (MAX_SLEEP_MS / STORE_POLL_MS) + 200;
    let mut status = RunStatus::Interrupted;
    for _ in 0..max_rounds {
        match store.get_run(&run.session_id, &run.run_id).await {
            Ok(Some(r)) if waits && r.status == RunStatus::Running => {
                tokio::time::sleep(Duration::from_millis(STORE_POLL_MS)).await;
            }
            Ok(Some(r)) => {
                status = r.status;
                break;
            }
            _ => break,
        }
    }
    let _ = tx.send(RunEvent::Finish(status)).await;
}
