//! Certifying a store upgraded with runs already in it (SPEC 4,
//! `[S4-upgrade]`).
//!
//! The release tells operators to run the store migrations before the new
//! runtimes, and promises that a keyless request behaves exactly as before.
//! On the day of the release every production store holds runs written
//! before the key columns existed, so a store that passes the suite on a
//! fresh schema proves little about an upgraded one: a migration that
//! fills the new columns with `''` instead of `NULL`, or a read that trips
//! over rows without a digest, only shows on old rows.
//!
//! [`seed_legacy`] therefore writes keyless runs through the store's FIRST
//! schema version (the tables of migration 1 only, the way a store of the
//! previous release held them), in a database that has no schema yet; the
//! store's own `open` then migrates it to this build's version, the suite
//! runs on it, and [`check_legacy`] reads the old runs back through the
//! store's API and checks that they read as keyless runs, replay, and take
//! new runs (keyless and keyed) as before.
//!
//! Only the SQL reference stores have schema versions; memory and Redis
//! stores have none to upgrade from.

use reqkey_model::{start_digest, CommitOutcome, RunMetadata, RunStatus, StartRun, StoreError};
use serde_json::{json, Value};

use super::api::{LegacyRun, OpenError, SessionStateStore};
use super::spec::StoreSpec;

/// The session ids the legacy runs are written under (the suite never
/// names a session so: its sessions are namespaced per run).
pub const LEGACY_SESSION_PREFIX: &str = "reqkey-legacy-";

/// The most legacy sessions one seeding writes.
pub const MAX_LEGACY_SESSIONS: u64 = 10_000;

/// What [`seed_legacy`] wrote: per session, its runs in start order.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LegacySeed {
    pub sessions: Vec<Vec<LegacyRun>>,
}

impl LegacySeed {
    /// `sessions` sessions of two keyless runs each: the first `completed`,
    /// the second `suspended_input` (so a new run may follow it, as it
    /// could before the upgrade). No run is `running`: the first schema
    /// has no leases, and a running run without one is an orphan.
    pub fn plan(sessions: u64) -> Self {
        let sessions = (0..sessions.min(MAX_LEGACY_SESSIONS))
            .map(|i| {
                let session_id = format!("{LEGACY_SESSION_PREFIX}{i}");
                let mut runs: Vec<LegacyRun> = Vec::new();
                for (seq, status) in [(1, RunStatus::Completed), (2, RunStatus::SuspendedInput)] {
                    let mut run = LegacyRun {
                        session_id: session_id.clone(),
                        run_id: format!("legacy-run-{seq}"),
                        status,
                        start_sequence: seq,
                        start_digest: String::new(),
                        expected_current_run_id: runs.last().map(|r| r.run_id.clone()),
                        input: json!({"text": format!("legacy {i} run {seq}")}),
                    };
                    run.start_digest = start_digest(&run.start_run());
                    runs.push(run);
                }
                runs
            })
            .collect();
        Self { sessions }
    }

    fn runs(&self) -> impl Iterator<Item = &LegacyRun> {
        self.sessions.iter().flatten()
    }
}

/// Writes [`LegacySeed::plan`]`(sessions)` through the first schema version
/// of the SQL store `spec` names (`sqlite:PATH`, `postgres://...`), which
/// must hold no schema yet. The store's `open` migrates it afterwards.
pub async fn seed_legacy(spec: &StoreSpec, sessions: u64) -> Result<LegacySeed, OpenError> {
    if sessions == 0 || sessions > MAX_LEGACY_SESSIONS {
        return Err(legacy_error(
            spec,
            format!("the number of legacy sessions must be 1 to {MAX_LEGACY_SESSIONS}"),
        ));
    }
    let seed = LegacySeed::plan(sessions);
    let rows: Vec<&LegacyRun> = seed.runs().collect();
    match spec {
        #[cfg(feature = "sqlite")]
        StoreSpec::Sqlite { path } => {
            super::sqlite::seed_first_schema(path, &rows)
                .await
                .map_err(|m| legacy_error(spec, m))?;
            Ok(seed)
        }
        #[cfg(feature = "postgres")]
        StoreSpec::Postgres { url } => {
            super::postgres::seed_first_schema(url.expose(), &rows)
                .await
                .map_err(|m| legacy_error(spec, m))?;
            Ok(seed)
        }
        #[cfg(not(feature = "sqlite"))]
        StoreSpec::Sqlite { .. } => Err(OpenError::NotBuilt("sqlite")),
        #[cfg(not(feature = "postgres"))]
        StoreSpec::Postgres { .. } => Err(OpenError::NotBuilt("postgres")),
        _ => Err(legacy_error(
            spec,
            "legacy runs need a reference SQL store (sqlite:PATH or postgres://...): \
             memory and Redis stores have no schema versions to upgrade from"
                .into(),
        )),
    }
}

fn legacy_error(spec: &StoreSpec, message: String) -> OpenError {
    OpenError::Backend {
        backend: "legacy seed",
        target: spec.display_name(),
        message,
    }
}

/// Reads the legacy runs back through `store` after the upgrade and checks
/// that they behave as before (SPEC 4, `[[store.upgrade.*]]`); answers what
/// went wrong, empty when nothing did. It writes: new runs on each legacy
/// session, and then deletes it.
pub async fn check_legacy(store: &dyn SessionStateStore, seed: &LegacySeed) -> Vec<String> {
    let mut problems = Vec::new();
    for runs in &seed.sessions {
        if let Err(e) = check_session(store, runs).await {
            problems.push(e);
        }
    }
    problems
}

async fn check_session(store: &dyn SessionStateStore, runs: &[LegacyRun]) -> Result<(), String> {
    let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
        return Ok(());
    };
    let session = first.session_id.as_str();
    let err = |what: &str, e: StoreError| format!("{session}: {what}: {e}");
    let want: Vec<RunMetadata> = runs.iter().map(LegacyRun::metadata).collect();
    // [[store.upgrade.legacy-runs-read]]: every read answers them as
    // keyless runs, key fields absent.
    let listed = store
        .list_runs(session)
        .await
        .map_err(|e| err("listRuns", e))?;
    if listed != want {
        return Err(format!(
            "{session}: listRuns answers {listed:?}, not {want:?}"
        ));
    }
    for run in runs {
        let got = store
            .get_run(session, &run.run_id)
            .await
            .map_err(|e| err("getRun", e))?;
        if got.as_ref() != Some(&run.metadata()) {
            return Err(format!("{session}: getRun({}) answers {got:?}", run.run_id));
        }
    }
    let current = store
        .get_current_run(session)
        .await
        .map_err(|e| err("getCurrentRun", e))?;
    if current.as_ref() != Some(&last.metadata()) {
        return Err(format!("{session}: getCurrentRun answers {current:?}"));
    }
    let inputs: Vec<(String, Value)> = store
        .list_inputs(session)
        .await
        .map_err(|e| err("listInputs", e))?
        .into_iter()
        .map(|e| (e.run_id, e.input))
        .collect();
    let want_inputs: Vec<(String, Value)> = runs
        .iter()
        .map(|r| (r.run_id.clone(), r.input.clone()))
        .collect();
    if inputs != want_inputs {
        return Err(format!("{session}: listInputs answers {inputs:?}"));
    }
    let by_key = store
        .get_run_by_request_key(session, "legacy-key")
        .await
        .map_err(|e| err("getRunByRequestKey", e))?;
    if by_key.is_some() {
        return Err(format!(
            "{session}: getRunByRequestKey finds {by_key:?} in a session of keyless runs"
        ));
    }
    // [[store.upgrade.legacy-runs-behave]]: the identical commit replays,
    // a keyless and a keyed run follow them, and the key rule holds.
    let replay = store
        .commit_run_start(last.start_run())
        .await
        .map_err(|e| err("the legacy commit replayed", e))?;
    if replay.outcome != CommitOutcome::Replayed || replay.run != last.metadata() {
        return Err(format!(
            "{session}: the legacy run's own commit again answers {replay:?}, not replayed"
        ));
    }
    let next = |run_id: &str, after: &str, key: Option<&str>| StartRun {
        session_id: session.to_owned(),
        run_id: run_id.to_owned(),
        expected_current_run_id: Some(after.to_owned()),
        input: json!({"text": format!("after the upgrade: {run_id}")}),
        request_key: key.map(str::to_owned),
        request_digest: key.map(|_| "upgrade-digest".to_owned()),
    };
    let keyless = store
        .commit_run_start(next("upgrade-run-3", &last.run_id, None))
        .await
        .map_err(|e| err("a keyless commit after the legacy runs", e))?;
    let seq = last.start_sequence + 1;
    if keyless.outcome != CommitOutcome::Started
        || keyless.run.start_sequence != seq
        || keyless.run.request_key.is_some()
    {
        return Err(format!(
            "{session}: a keyless commit after the legacy runs answers {keyless:?}"
        ));
    }
    let keyed = store
        .commit_run_start(next("upgrade-run-4", "upgrade-run-3", Some("upgrade-key")))
        .await
        .map_err(|e| err("a keyed commit after the legacy runs", e))?;
    if keyed.outcome != CommitOutcome::Started
        || keyed.run.start_sequence != seq + 1
        || keyed.run.request_key.as_deref() != Some("upgrade-key")
    {
        return Err(format!(
            "{session}: a keyed commit after the legacy runs answers {keyed:?}"
        ));
    }
    let holder = store
        .get_run_by_request_key(session, "upgrade-key")
        .await
        .map_err(|e| err("getRunByRequestKey", e))?;
    if holder.map(|r| r.run_id).as_deref() != Some("upgrade-run-4") {
        return Err(format!(
            "{session}: the new key is not found on its run after the upgrade"
        ));
    }
    match store
        .commit_run_start(next("upgrade-run-5", "upgrade-run-4", Some("upgrade-key")))
        .await
    {
        Err(StoreError::RunStartRejected(reqkey_model::RunStartRejection::RequestKeyTaken {
            existing_run_id,
        })) if existing_run_id == "upgrade-run-4" => {}
        other => {
            return Err(format!(
                "{session}: a second run with a taken key answers {other:?}, not request_key_taken"
            ))
        }
    }
    let deleted = store
        .delete_session(session)
        .await
        .map_err(|e| err("deleteSession", e))?;
    let left = store
        .list_runs(session)
        .await
        .map_err(|e| err("listRuns", e))?;
    if !deleted || !left.is_empty() {
        return Err(format!(
            "{session}: deleteSession answers {deleted} and leaves {left:?}"
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::store::MemoryStore;

    #[test]
    fn the_plan_is_keyless_and_in_start_order() {
        let seed = LegacySeed::plan(3);
        assert_eq!(seed.sessions.len(), 3);
        for runs in &seed.sessions {
            assert_eq!(runs[0].expected_current_run_id, None);
            assert_eq!(
                runs[1].expected_current_run_id.as_deref(),
                Some("legacy-run-1")
            );
            assert!(runs
                .iter()
                .all(|r| !r.status.is_finished() || r.start_sequence == 1));
        }
        assert_eq!(
            LegacySeed::plan(MAX_LEGACY_SESSIONS + 5).sessions.len() as u64,
            MAX_LEGACY_SESSIONS
        );
    }

    #[tokio::test]
    async fn the_check_finds_runs_that_are_missing() {
        let problems = check_legacy(&MemoryStore::new(), &LegacySeed::plan(1)).await;
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("listRuns"), "{problems:?}");
    }

    #[tokio::test]
    async fn memory_and_redis_have_no_first_schema() {
        for spec in ["memory", "redis://127.0.0.1:6379/"] {
            let spec = StoreSpec::parse(spec).unwrap();
            assert!(seed_legacy(&spec, 1).await.is_err(), "{spec}");
        }
    }
}
