//! One backend test suite, run on every backend against the real engine.
//!
//! Every case in [`cases`] is a generic async fn over
//! `Arc<dyn SessionStateStore>`; the `suite!` macro instantiates each case
//! once per backend (`memory`, `sqlite`, `postgres`, `redis`,
//! `redis_cluster`), the sqlx way. Postgres and Redis tests talk to the
//! services named by `REQKEY_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `REQKEY_REDIS_URL` (default
//! `redis://127.0.0.1:6379`) and `REQKEY_REDIS_CLUSTER_URL` (default
//! `redis+cluster://127.0.0.1:7101`, the cluster `scripts/redis-cluster.sh
//! start` makes). If a service does not answer, the test FAILS with a
//! message saying so; it never skips.
//!
//! Tests share those services with other test runs, so every session id is
//! unique to one case run (`bt-<pid>-<nanos>-<n>-...`), and each case
//! deletes only the sessions it created.

#![cfg(all(feature = "sqlite", feature = "postgres", feature = "redis"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use reqkey_model::seq::{answer_to_wire, SeqStore, StoreOp};
use reqkey_model::{
    CommitOutcome, RunMetadata, RunStartRejection, RunStatus, StartRun, StoreError,
};
use reqkey_reference::store::{
    self, dispatch, PostgresStore, RedisStore, SessionStateStore, SqliteStore,
};
use serde_json::{json, Value};

fn postgres_url() -> String {
    std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn redis_url() -> String {
    std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// The Redis Cluster the tests use: `REQKEY_REDIS_CLUSTER_URL`, or, when
/// none is given, the three-master cluster of `scripts/redis-cluster.sh`
/// on 127.0.0.1:7101-7103, started here once per test process (the
/// script leaves a healthy cluster alone), so that `cargo test
/// --workspace` is the one command. A cluster that cannot be started
/// fails the tests; they never skip.
fn redis_cluster_url() -> String {
    if let Ok(url) = std::env::var("REQKEY_REDIS_CLUSTER_URL") {
        return url;
    }
    static STARTED: std::sync::OnceLock<Result<(), String>> = std::sync::OnceLock::new();
    let started = STARTED.get_or_init(|| {
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/redis-cluster.sh");
        match std::process::Command::new("bash")
            .arg(&script)
            .arg("start")
            .output()
        {
            Ok(o) if o.status.success() => Ok(()),
            Ok(o) => Err(format!(
                "{} start failed: {}",
                script.display(),
                String::from_utf8_lossy(&o.stderr)
            )),
            Err(e) => Err(format!("cannot run {}: {e}", script.display())),
        }
    });
    if let Err(e) = started {
        panic!("no Redis Cluster for the tests: {e}");
    }
    "redis+cluster://127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103".into()
}

const CLUSTER_HINT: &str = "start one with `scripts/redis-cluster.sh start` or point \
     REQKEY_REDIS_CLUSTER_URL at one";

/// A fresh prefix no other test run uses.
fn unique(tag: &str) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "bt-{}-{nanos}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// A SQLite file removed (with its WAL) when the test ends.
struct TempDb(PathBuf);

impl TempDb {
    fn new() -> Self {
        TempDb(std::env::temp_dir().join(format!("{}.sqlite", unique("db"))))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.clone().into_os_string();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// Opens a backend by name; a service that does not answer fails the test.
async fn open_backend(name: &str) -> (Arc<dyn SessionStateStore>, Option<TempDb>) {
    let (spec, db) = match name {
        "memory" => ("memory".to_owned(), None),
        "sqlite" => {
            let db = TempDb::new();
            (format!("sqlite:{}", db.0.display()), Some(db))
        }
        "postgres" => (postgres_url(), None),
        "redis" => (redis_url(), None),
        "redis_cluster" => (redis_cluster_url(), None),
        other => panic!("no backend {other}"),
    };
    match store::open(&spec).await {
        Ok(s) => (s, db),
        Err(e) => panic!(
            "the {name} backend could not be opened ({e}). These tests need the real service: \
             start it (pg_isready -h 127.0.0.1 / redis-cli ping / scripts/redis-cluster.sh \
             start) or point REQKEY_POSTGRES_URL / REQKEY_REDIS_URL / REQKEY_REDIS_CLUSTER_URL \
             at one. They never skip."
        ),
    }
}

/// Session ids of one case; deleted at the end by [`Sessions::cleanup`].
struct Sessions {
    prefix: String,
    made: Vec<String>,
}

impl Sessions {
    fn new() -> Self {
        Sessions {
            prefix: unique("s"),
            made: Vec::new(),
        }
    }

    fn id(&mut self, name: &str) -> String {
        let id = format!("{}-{name}", self.prefix);
        self.made.push(id.clone());
        id
    }

    async fn cleanup(self, store: &dyn SessionStateStore) {
        for s in self.made {
            store.delete_session(&s).await.unwrap();
        }
    }
}

fn start(
    session: &str,
    run: &str,
    expected: Option<&str>,
    key: Option<&str>,
    text: &str,
) -> StartRun {
    StartRun {
        session_id: session.into(),
        run_id: run.into(),
        expected_current_run_id: expected.map(Into::into),
        input: json!({ "text": text }),
        request_key: key.map(Into::into),
        request_digest: key.map(|_| format!("digest-of-{text}")),
    }
}

async fn started(store: &dyn SessionStateStore, s: StartRun) -> RunMetadata {
    let r = store.commit_run_start(s).await.unwrap();
    assert_eq!(r.outcome, CommitOutcome::Started);
    r.run
}

fn refusal(r: Result<reqkey_model::CommitResult, StoreError>) -> RunStartRejection {
    match r {
        Err(StoreError::RunStartRejected(rej)) => rej,
        other => panic!("expected a run_start_rejected answer, got {other:?}"),
    }
}

/// Run r1 takes key `k` in `s` (through `store`); a second run with `k`,
/// committed through `committer`, is refused `request_key_taken` naming r1,
/// and nothing of it is written.
async fn key_k_is_refused_naming_r1(
    store: &dyn SessionStateStore,
    committer: &dyn SessionStateStore,
    s: &str,
) {
    started(store, start(s, "r1", None, Some("k"), "a")).await;
    let r = committer
        .commit_run_start(start(s, "r2", Some("r1"), Some("k"), "b"))
        .await;
    assert_eq!(
        refusal(r),
        RunStartRejection::RequestKeyTaken {
            existing_run_id: "r1".into()
        }
    );
    assert_eq!(store.list_runs(s).await.unwrap().len(), 1);
    assert_eq!(store.list_inputs(s).await.unwrap().len(), 1);
}

mod cases {
    use super::*;

    pub async fn keyed_commit_is_recorded_and_found_by_every_read(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let run = started(&*store, start(&s, "r1", None, Some("k1"), "hello")).await;
        assert_eq!(
            (
                run.start_sequence,
                run.status,
                run.request_key.as_deref(),
                run.request_digest.as_deref()
            ),
            (1, RunStatus::Running, Some("k1"), Some("digest-of-hello"))
        );
        assert_eq!(store.get_run(&s, "r1").await.unwrap().as_ref(), Some(&run));
        assert_eq!(
            store.get_current_run(&s).await.unwrap().as_ref(),
            Some(&run)
        );
        assert_eq!(store.list_runs(&s).await.unwrap(), vec![run.clone()]);
        assert_eq!(
            store.get_run_by_request_key(&s, "k1").await.unwrap(),
            Some(run)
        );
        assert_eq!(
            store.get_run_by_request_key(&s, "K1").await.unwrap(),
            None,
            "keys are case-sensitive"
        );
        ss.cleanup(&*store).await;
    }

    pub async fn keyless_runs_have_no_key_fields_in_any_read(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        started(&*store, start(&s, "r1", None, None, "x")).await;
        let reads = [
            serde_json::to_value(store.get_run(&s, "r1").await.unwrap()).unwrap(),
            serde_json::to_value(store.get_current_run(&s).await.unwrap()).unwrap(),
            serde_json::to_value(&store.list_runs(&s).await.unwrap()[0]).unwrap(),
        ];
        for read in reads {
            let obj = read.as_object().unwrap();
            assert!(
                !obj.contains_key("requestKey") && !obj.contains_key("requestDigest"),
                "{read}"
            );
        }
        ss.cleanup(&*store).await;
    }

    pub async fn a_taken_key_is_refused_naming_the_holder_and_nothing_is_written(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        key_k_is_refused_naming_r1(&*store, &*store, &s).await;
        assert_eq!(store.get_run(&s, "r2").await.unwrap(), None);
        ss.cleanup(&*store).await;
    }

    pub async fn the_same_start_run_again_replays_without_writing(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let first = start(&s, "r1", None, Some("k"), "a");
        started(&*store, first.clone()).await;
        store
            .set_run_status(&s, "r1", RunStatus::SuspendedInput)
            .await
            .unwrap();
        // Object key order does not matter: the start digest is canonical.
        let mut again = first.clone();
        again.input = serde_json::from_str(r#"{"text":"a"}"#).unwrap();
        let r = store.commit_run_start(again).await.unwrap();
        assert_eq!(r.outcome, CommitOutcome::Replayed);
        assert_eq!(
            r.run.status,
            RunStatus::SuspendedInput,
            "a replay answers the run as it is now"
        );
        assert_eq!(store.list_runs(&s).await.unwrap().len(), 1);
        assert_eq!(store.list_inputs(&s).await.unwrap().len(), 1);
        ss.cleanup(&*store).await;
    }

    pub async fn the_holders_own_replay_comes_before_the_key_rule(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let first = start(&s, "r1", None, Some("k"), "a");
        started(&*store, first.clone()).await;
        started(&*store, start(&s, "r2", Some("r1"), None, "b")).await;
        // Stale CAS and a held key, but it is r1's own StartRun: replayed.
        let r = store.commit_run_start(first).await.unwrap();
        assert_eq!(
            (r.outcome, r.run.run_id.as_str()),
            (CommitOutcome::Replayed, "r1")
        );
        ss.cleanup(&*store).await;
    }

    pub async fn the_key_rule_comes_before_cas(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        started(&*store, start(&s, "r1", None, Some("k"), "a")).await;
        let r = store
            .commit_run_start(start(&s, "r2", Some("stale"), Some("k"), "b"))
            .await;
        assert_eq!(
            refusal(r),
            RunStartRejection::RequestKeyTaken {
                existing_run_id: "r1".into()
            }
        );
        let r = store
            .commit_run_start(start(&s, "r2", Some("stale"), Some("k2"), "b"))
            .await;
        assert_eq!(
            refusal(r),
            RunStartRejection::CasMismatch {
                current_run_id: Some("r1".into())
            }
        );
        ss.cleanup(&*store).await;
    }

    pub async fn a_run_id_reused_with_other_fields_conflicts(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        started(&*store, start(&s, "r1", None, Some("k"), "a")).await;
        for other in [
            start(&s, "r1", None, Some("k"), "changed"),
            start(&s, "r1", None, None, "a"),
            start(&s, "r1", Some("r1"), Some("k"), "a"),
        ] {
            let r = store.commit_run_start(other).await;
            assert_eq!(
                refusal(r),
                RunStartRejection::RunIdConflict {
                    existing_run_id: "r1".into()
                }
            );
        }
        assert_eq!(store.list_inputs(&s).await.unwrap().len(), 1);
        ss.cleanup(&*store).await;
    }

    pub async fn keys_are_per_session(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let (a, b) = (ss.id("a"), ss.id("b"));
        let ra = started(&*store, start(&a, "ra", None, Some("k"), "x")).await;
        let rb = started(&*store, start(&b, "rb", None, Some("k"), "x")).await;
        assert_eq!(
            store.get_run_by_request_key(&a, "k").await.unwrap(),
            Some(ra)
        );
        assert_eq!(
            store.get_run_by_request_key(&b, "k").await.unwrap(),
            Some(rb)
        );
        let c = ss.id("c");
        assert_eq!(store.get_run_by_request_key(&c, "k").await.unwrap(), None);
        ss.cleanup(&*store).await;
    }

    pub async fn a_refused_start_leaves_the_key_free_and_creates_no_session(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let r = store
            .commit_run_start(start(&s, "r1", Some("nope"), Some("k"), "a"))
            .await;
        assert_eq!(
            refusal(r),
            RunStartRejection::CasMismatch {
                current_run_id: None
            }
        );
        assert_eq!(store.get_run_by_request_key(&s, "k").await.unwrap(), None);
        assert!(
            !store.delete_session(&s).await.unwrap(),
            "a refused commit created the session"
        );
        let run = started(&*store, start(&s, "r1", None, Some("k"), "a")).await;
        assert_eq!(run.start_sequence, 1);
        ss.cleanup(&*store).await;
    }

    pub async fn a_nul_in_an_id_or_digest_is_invalid_argument_and_writes_nothing(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let mut nul_digest = start(&s, "r1", None, Some("k"), "a");
        nul_digest.request_digest = Some("d\0".into());
        for bad in [
            start(&s, "r\0-1", None, Some("k"), "a"),
            start(&s, "r1", Some("r\0-0"), None, "a"),
            nul_digest,
        ] {
            let r = store.commit_run_start(bad).await;
            assert!(matches!(r, Err(StoreError::InvalidArgument(_))), "{r:?}");
        }
        // Reads over the wire are refused the same way, before the store.
        let op: StoreOp = serde_json::from_value(json!({
            "op": "getRun", "args": {"sessionId": s, "runId": "r\0"}
        }))
        .unwrap();
        let r = dispatch(&*store, op).await;
        assert!(matches!(r, Err(StoreError::InvalidArgument(_))), "{r:?}");
        assert!(store.list_runs(&s).await.unwrap().is_empty());
        assert!(
            !store.delete_session(&s).await.unwrap(),
            "a refused commit wrote"
        );
        ss.cleanup(&*store).await;
    }

    /// F6 of issue 15: a run id of a few kilobytes answered `internal` on
    /// Postgres (a btree row holds about 2.7 kB) and was accepted elsewhere.
    /// Every backend now refuses it, and 257 characters, with
    /// `invalid_argument` before touching storage; 256 characters of the
    /// alphabet are accepted everywhere.
    pub async fn run_ids_over_256_characters_are_invalid_argument_everywhere(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        // Incompressible (Postgres compresses index entries), from a fixed seed.
        let alphabet = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-";
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let id = |len: usize, x: &mut u64| -> String {
            (0..len)
                .map(|_| {
                    *x = x
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1_442_695_040_888_963_407);
                    char::from(alphabet[((*x >> 33) % alphabet.len() as u64) as usize])
                })
                .collect()
        };
        let huge = id(4096, &mut x);
        let over = id(257, &mut x);
        for bad in [
            start(&s, &huge, None, Some("k"), "a"),
            start(&s, &over, None, None, "a"),
            start(&s, "r1", Some(&huge), None, "a"),
        ] {
            let r = store.commit_run_start(bad).await;
            assert!(matches!(r, Err(StoreError::InvalidArgument(_))), "{r:?}");
        }
        for op in [
            json!({"op": "getRun", "args": {"sessionId": s, "runId": huge}}),
            json!({"op": "setRunStatus", "args": {"sessionId": s, "runId": over, "status": "failed"}}),
        ] {
            let op: StoreOp = serde_json::from_value(op).unwrap();
            let r = dispatch(&*store, op).await;
            assert!(matches!(r, Err(StoreError::InvalidArgument(_))), "{r:?}");
        }
        assert!(
            store.list_runs(&s).await.unwrap().is_empty(),
            "a refused commit wrote"
        );
        let longest = id(256, &mut x);
        let run = started(&*store, start(&s, &longest, None, Some("k"), "a")).await;
        assert_eq!(run.run_id, longest);
        let found = store.get_run_by_request_key(&s, "k").await.unwrap();
        assert_eq!(found.map(|r| r.run_id), Some(longest.clone()));
        started(&*store, start(&s, "r2", Some(&longest), None, "b")).await;
        ss.cleanup(&*store).await;
    }

    pub async fn delete_frees_keys_and_restarts_the_sequence(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        started(&*store, start(&s, "r1", None, Some("k"), "a")).await;
        started(&*store, start(&s, "r2", Some("r1"), Some("k2"), "b")).await;
        assert!(store.delete_session(&s).await.unwrap());
        assert!(!store.delete_session(&s).await.unwrap(), "deleted twice");
        assert_eq!(store.get_run(&s, "r1").await.unwrap(), None);
        assert_eq!(store.get_current_run(&s).await.unwrap(), None);
        assert_eq!(store.list_runs(&s).await.unwrap(), vec![]);
        assert_eq!(store.list_inputs(&s).await.unwrap(), vec![]);
        assert_eq!(store.get_run_by_request_key(&s, "k").await.unwrap(), None);
        let run = started(&*store, start(&s, "r9", None, Some("k"), "c")).await;
        assert_eq!(
            (run.start_sequence, run.request_key.as_deref()),
            (1, Some("k"))
        );
        ss.cleanup(&*store).await;
    }

    pub async fn finished_runs_refuse_every_status_change(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        started(&*store, start(&s, "r1", None, None, "a")).await;
        let run = store
            .set_run_status(&s, "r1", RunStatus::SuspendedTool)
            .await
            .unwrap();
        assert_eq!(run.status, RunStatus::SuspendedTool);
        store
            .set_run_status(&s, "r1", RunStatus::Failed)
            .await
            .unwrap();
        for to in RunStatus::ALL {
            let r = store.set_run_status(&s, "r1", to).await;
            assert!(
                matches!(r, Err(StoreError::InvalidTransition(_))),
                "{to:?}: {r:?}"
            );
        }
        assert_eq!(
            store.get_run(&s, "r1").await.unwrap().unwrap().status,
            RunStatus::Failed
        );
        assert!(matches!(
            store.set_run_status(&s, "nope", RunStatus::Completed).await,
            Err(StoreError::NotFound(_))
        ));
        let unknown = ss.id("unknown");
        assert!(matches!(
            store
                .set_run_status(&unknown, "r1", RunStatus::Completed)
                .await,
            Err(StoreError::NotFound(_))
        ));
        ss.cleanup(&*store).await;
    }

    /// SPEC 5 `[[lease.renew.owner-only]]`, `[[lease.expire.compare]]`:
    /// only the owner renews; expiry interrupts a `running` run whose lease
    /// is over (or was never taken) and nothing else; a renewal never brings
    /// a run back; deleting the session drops its leases.
    pub async fn leases_are_renewed_by_their_owner_and_expired_only_when_over(
        store: Arc<dyn SessionStateStore>,
    ) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let now = 1_000_000;
        assert!(store.renew_lease(&s, "r1", "A", now + 100).await.unwrap());
        started(&*store, start(&s, "r1", None, Some("k"), "a")).await;
        assert!(store.renew_lease(&s, "r1", "A", now + 200).await.unwrap());
        assert!(!store.renew_lease(&s, "r1", "B", now + 900).await.unwrap());
        // Alive (B's refused renewal wrote nothing): left running.
        let run = store
            .expire_lease(&s, "r1", now + 150)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Running);
        // Over: interrupted, key and digest kept.
        let run = store
            .expire_lease(&s, "r1", now + 200)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(run.status, RunStatus::Interrupted);
        assert_eq!(run.request_key.as_deref(), Some("k"));
        let read = store.get_run(&s, "r1").await.unwrap().unwrap();
        assert_eq!(read, run);
        // The owner coming back renews its lease but not the run.
        assert!(store.renew_lease(&s, "r1", "A", now + 5000).await.unwrap());
        let again = store.expire_lease(&s, "r1", now).await.unwrap().unwrap();
        assert_eq!(again.status, RunStatus::Interrupted);
        assert!(matches!(
            store.set_run_status(&s, "r1", RunStatus::Completed).await,
            Err(StoreError::InvalidTransition(_))
        ));
        // Never leased: over at once. Not running: left alone.
        started(&*store, start(&s, "r2", Some("r1"), None, "b")).await;
        store
            .set_run_status(&s, "r2", RunStatus::SuspendedInput)
            .await
            .unwrap();
        let run = store.expire_lease(&s, "r2", now).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::SuspendedInput);
        store
            .set_run_status(&s, "r2", RunStatus::Running)
            .await
            .unwrap();
        let run = store.expire_lease(&s, "r2", now).await.unwrap().unwrap();
        assert_eq!(run.status, RunStatus::Interrupted);
        assert_eq!(store.expire_lease(&s, "nope", now).await.unwrap(), None);
        let unknown = ss.id("unknown");
        assert_eq!(store.expire_lease(&unknown, "r1", now).await.unwrap(), None);
        // Deleting the session drops its leases: B may take r1's now.
        assert!(store.delete_session(&s).await.unwrap());
        assert!(store.renew_lease(&s, "r1", "B", now).await.unwrap());
        // A lease alone (its commit never came) is no session.
        assert!(!store.delete_session(&s).await.unwrap());
        assert_eq!(store.get_current_run(&s).await.unwrap(), None);
        ss.cleanup(&*store).await;
    }

    pub async fn inputs_are_logged_in_commit_order(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let mut first = start(&s, "r1", None, None, "a");
        first.input = json!({"b": [1, 2.5, {"z": "é", "y": null}], "a": true});
        started(&*store, first).await;
        started(&*store, start(&s, "r2", Some("r1"), None, "b")).await;
        let inputs = store.list_inputs(&s).await.unwrap();
        assert_eq!(
            serde_json::to_value(&inputs).unwrap(),
            json!([
                {"runId": "r1", "input": {"a": true, "b": [1, 2.5, {"y": null, "z": "é"}]}},
                {"runId": "r2", "input": {"text": "b"}}
            ])
        );
        let runs = store.list_runs(&s).await.unwrap();
        assert_eq!(
            runs.iter().map(|r| r.start_sequence).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(
            store.get_current_run(&s).await.unwrap().unwrap().run_id,
            "r2"
        );
        ss.cleanup(&*store).await;
    }

    /// SPEC 8 `request-key.race`, shortened: 10 trials of 8 commits.
    pub async fn concurrent_commits_with_one_key_start_one_run(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        for trial in 0..10 {
            let s = ss.id(&format!("t{trial}"));
            let tasks: Vec<_> = (0..8)
                .map(|i| {
                    let store = Arc::clone(&store);
                    let st = start(&s, &format!("r{i}"), None, Some("k"), "same");
                    tokio::spawn(async move { store.commit_run_start(st).await })
                })
                .collect();
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.unwrap());
            }
            let winners: Vec<_> = answers
                .iter()
                .filter_map(|a| a.as_ref().ok())
                .map(|r| r.run.run_id.clone())
                .collect();
            assert_eq!(winners.len(), 1, "trial {trial}: {answers:?}");
            for a in &answers {
                if let Err(e) = a {
                    assert_eq!(
                        e,
                        &StoreError::from(RunStartRejection::RequestKeyTaken {
                            existing_run_id: winners[0].clone()
                        }),
                        "trial {trial}"
                    );
                }
            }
            assert_eq!(store.list_runs(&s).await.unwrap().len(), 1);
            assert_eq!(store.list_inputs(&s).await.unwrap().len(), 1);
        }
        ss.cleanup(&*store).await;
    }

    /// Keyless commits that all expect an empty session: CAS lets one in.
    pub async fn concurrent_keyless_commits_pass_cas_once(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let tasks: Vec<_> = (0..8)
            .map(|i| {
                let store = Arc::clone(&store);
                let st = start(&s, &format!("r{i}"), None, None, "x");
                tokio::spawn(async move { store.commit_run_start(st).await })
            })
            .collect();
        let mut ok = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => ok += 1,
                Err(StoreError::RunStartRejected(RunStartRejection::CasMismatch {
                    current_run_id: Some(_),
                })) => {}
                Err(e) => panic!("unexpected {e:?}"),
            }
        }
        assert_eq!(ok, 1);
        assert_eq!(store.list_inputs(&s).await.unwrap().len(), 1);
        ss.cleanup(&*store).await;
    }

    /// Commits and deletes of one session interleave freely: every answer
    /// is a contract answer (never `internal`), and what remains is a
    /// well-formed session (sequences 1..n, one input per run).
    pub async fn commits_racing_deletes_stay_consistent(store: Arc<dyn SessionStateStore>) {
        let mut ss = Sessions::new();
        let s = ss.id("a");
        let mut tasks = Vec::new();
        for w in 0..6 {
            let (store, s) = (Arc::clone(&store), s.clone());
            tasks.push(tokio::spawn(async move {
                for i in 0..20 {
                    let current = store.get_current_run(&s).await?.map(|r| r.run_id);
                    let key = format!("k{}", i % 3);
                    let st = start(
                        &s,
                        &format!("w{w}-{i}"),
                        current.as_deref(),
                        Some(&key),
                        "x",
                    );
                    match store.commit_run_start(st).await {
                        Ok(_) | Err(StoreError::RunStartRejected(_)) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }));
        }
        {
            let (store, s) = (Arc::clone(&store), s.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..30 {
                    store.delete_session(&s).await?;
                    tokio::task::yield_now().await;
                }
                Ok(())
            }));
        }
        for t in tasks {
            t.await.unwrap().unwrap();
        }
        let runs = store.list_runs(&s).await.unwrap();
        let seqs: Vec<u64> = runs.iter().map(|r| r.start_sequence).collect();
        assert_eq!(seqs, (1..=runs.len() as u64).collect::<Vec<_>>());
        assert_eq!(store.list_inputs(&s).await.unwrap().len(), runs.len());
        let mut keys: Vec<_> = runs.iter().filter_map(|r| r.request_key.clone()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), runs.len(), "a key held twice: {runs:?}");
        ss.cleanup(&*store).await;
    }

    /// Model-based: random operation sequences answer exactly what
    /// `reqkey_model::seq::SeqStore` answers (errors compared by kind,
    /// cause and details; messages are free text).
    pub async fn random_histories_match_the_sequential_model(store: Arc<dyn SessionStateStore>) {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};

        let ops = prop::collection::vec(gen_op(), 1..40);
        let mut runner = TestRunner::new(Config {
            cases: 24,
            failure_persistence: None,
            ..Config::default()
        });
        let handle = tokio::runtime::Handle::current();
        let result = runner.run(&ops, |ops| {
            let store = Arc::clone(&store);
            let outcome = std::thread::scope(|scope| {
                scope
                    .spawn(|| handle.block_on(run_history(store, ops)))
                    .join()
                    .unwrap()
            });
            prop_assert!(outcome.is_ok(), "{}", outcome.err().unwrap_or_default());
            Ok(())
        });
        if let Err(e) = result {
            panic!("{} diverges from the model: {e}", store.backend());
        }
    }
}

#[derive(Debug, Clone)]
enum Expected {
    Current,
    Null,
    Run(u8),
}

#[derive(Debug, Clone)]
enum GenOp {
    Commit {
        session: u8,
        run: u8,
        expected: Expected,
        key: Option<u8>,
        text: u8,
    },
    GetRun {
        session: u8,
        run: u8,
    },
    GetCurrent {
        session: u8,
    },
    ListRuns {
        session: u8,
    },
    ByKey {
        session: u8,
        key: u8,
    },
    ListInputs {
        session: u8,
    },
    SetStatus {
        session: u8,
        run: u8,
        status: u8,
    },
    Delete {
        session: u8,
    },
}

fn gen_op() -> impl proptest::strategy::Strategy<Value = GenOp> {
    use proptest::prelude::*;
    let expected = prop_oneof![
        3 => Just(Expected::Current),
        1 => Just(Expected::Null),
        1 => (0..4u8).prop_map(Expected::Run),
    ];
    prop_oneof![
        6 => (0..2u8, 0..5u8, expected, proptest::option::of(0..3u8), 0..2u8).prop_map(
            |(session, run, expected, key, text)| GenOp::Commit { session, run, expected, key, text }
        ),
        1 => (0..2u8, 0..5u8).prop_map(|(session, run)| GenOp::GetRun { session, run }),
        1 => (0..2u8).prop_map(|session| GenOp::GetCurrent { session }),
        1 => (0..2u8).prop_map(|session| GenOp::ListRuns { session }),
        2 => (0..2u8, 0..3u8).prop_map(|(session, key)| GenOp::ByKey { session, key }),
        1 => (0..2u8).prop_map(|session| GenOp::ListInputs { session }),
        2 => (0..2u8, 0..5u8, 0..6u8).prop_map(|(session, run, status)| GenOp::SetStatus { session, run, status }),
        1 => (0..2u8).prop_map(|session| GenOp::Delete { session }),
    ]
}

/// The wire answer with error messages removed (they are free text).
fn comparable(answer: Value) -> Value {
    let mut answer = answer;
    if let Some(err) = answer.get_mut("error").and_then(Value::as_object_mut) {
        err.remove("message");
    }
    answer
}

async fn run_history(store: Arc<dyn SessionStateStore>, ops: Vec<GenOp>) -> Result<(), String> {
    let prefix = unique("h");
    let sid = |i: u8| format!("{prefix}-s{i}");
    let mut model = SeqStore::new();
    let mut result = Ok(());
    for (step, g) in ops.iter().enumerate() {
        let wire = match g {
            GenOp::Commit {
                session,
                run,
                expected,
                key,
                text,
            } => {
                let s = sid(*session);
                let expected = match expected {
                    Expected::Current => model
                        .session(&s)
                        .and_then(|st| st.current_run())
                        .map(|r| r.run_id.clone()),
                    Expected::Null => None,
                    Expected::Run(i) => Some(format!("r{i}")),
                };
                let mut st = json!({"sessionId": s, "runId": format!("r{run}"),
                    "expectedCurrentRunId": expected, "input": {"text": format!("t{text}")}});
                if let Some(k) = key {
                    st["requestKey"] = json!(format!("k{k}"));
                    st["requestDigest"] = json!(format!("d{text}"));
                }
                json!({"op": "commitRunStart", "args": {"startRun": st}})
            }
            GenOp::GetRun { session, run } => {
                json!({"op": "getRun", "args": {"sessionId": sid(*session), "runId": format!("r{run}")}})
            }
            GenOp::GetCurrent { session } => {
                json!({"op": "getCurrentRun", "args": {"sessionId": sid(*session)}})
            }
            GenOp::ListRuns { session } => {
                json!({"op": "listRuns", "args": {"sessionId": sid(*session)}})
            }
            GenOp::ByKey { session, key } => json!({"op": "getRunByRequestKey",
                "args": {"sessionId": sid(*session), "requestKey": format!("k{key}")}}),
            GenOp::ListInputs { session } => {
                json!({"op": "listInputs", "args": {"sessionId": sid(*session)}})
            }
            GenOp::SetStatus {
                session,
                run,
                status,
            } => json!({"op": "setRunStatus", "args": {
                "sessionId": sid(*session), "runId": format!("r{run}"),
                "status": RunStatus::ALL[usize::from(*status)].as_str()}}),
            GenOp::Delete { session } => {
                json!({"op": "deleteSession", "args": {"sessionId": sid(*session)}})
            }
        };
        let op = StoreOp::from_wire(&wire).map_err(|e| format!("generator built a bad op: {e}"))?;
        let want = comparable(answer_to_wire(&model.apply(&op)));
        let got = comparable(answer_to_wire(&dispatch(&*store, op).await));
        if want != got {
            result = Err(format!(
                "step {step}: {wire}\n  model: {want}\n  store: {got}"
            ));
            break;
        }
    }
    for i in 0..2 {
        let _ = store.delete_session(&sid(i)).await;
    }
    result
}

macro_rules! case {
    ($backend:ident, $name:ident) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            let (store, _db) = open_backend(stringify!($backend)).await;
            cases::$name(store).await;
        }
    };
}

macro_rules! suite {
    ($backend:ident) => {
        mod $backend {
            use super::*;
            case!($backend, keyed_commit_is_recorded_and_found_by_every_read);
            case!($backend, keyless_runs_have_no_key_fields_in_any_read);
            case!(
                $backend,
                a_taken_key_is_refused_naming_the_holder_and_nothing_is_written
            );
            case!($backend, the_same_start_run_again_replays_without_writing);
            case!($backend, the_holders_own_replay_comes_before_the_key_rule);
            case!($backend, the_key_rule_comes_before_cas);
            case!($backend, a_run_id_reused_with_other_fields_conflicts);
            case!($backend, keys_are_per_session);
            case!(
                $backend,
                a_refused_start_leaves_the_key_free_and_creates_no_session
            );
            case!(
                $backend,
                a_nul_in_an_id_or_digest_is_invalid_argument_and_writes_nothing
            );
            case!(
                $backend,
                run_ids_over_256_characters_are_invalid_argument_everywhere
            );
            case!($backend, delete_frees_keys_and_restarts_the_sequence);
            case!($backend, finished_runs_refuse_every_status_change);
            case!($backend, inputs_are_logged_in_commit_order);
            case!(
                $backend,
                leases_are_renewed_by_their_owner_and_expired_only_when_over
            );
            case!($backend, concurrent_commits_with_one_key_start_one_run);
            case!($backend, concurrent_keyless_commits_pass_cas_once);
            case!($backend, commits_racing_deletes_stay_consistent);
            case!($backend, random_histories_match_the_sequential_model);
        }
    };
}

suite!(memory);
suite!(sqlite);
suite!(postgres);
suite!(redis);
suite!(redis_cluster);

/// The unique index answers `request_key_taken` naming the holder when the
/// commit did not see the holder (here: a store told not to read it).
async fn backstop_answers_request_key_taken(
    store: Arc<dyn SessionStateStore>,
    blind: Arc<dyn SessionStateStore>,
) {
    let mut ss = Sessions::new();
    let s = ss.id("a");
    key_k_is_refused_naming_r1(&*store, &*blind, &s).await;
    // Without the key the blind store still works.
    started(&*blind, start(&s, "r2", Some("r1"), Some("k2"), "b")).await;
    ss.cleanup(&*store).await;
}

#[tokio::test]
async fn sqlite_unique_index_backstop_answers_request_key_taken() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let blind = store.without_holder_read_for_backstop_test();
    backstop_answers_request_key_taken(Arc::new(store), Arc::new(blind)).await;
}

#[tokio::test]
async fn postgres_unique_index_backstop_answers_request_key_taken() {
    let store = match PostgresStore::connect(&postgres_url()).await {
        Ok(s) => s,
        Err(e) => panic!("Postgres did not answer ({e}); start it or set REQKEY_POSTGRES_URL"),
    };
    let blind = store.without_holder_read_for_backstop_test();
    backstop_answers_request_key_taken(Arc::new(store), Arc::new(blind)).await;
}

#[tokio::test]
async fn migrations_are_idempotent_and_concurrent_openers_do_not_race() {
    let db = TempDb::new();
    let path = db.0.clone();
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let p = path.clone();
            tokio::spawn(async move { SqliteStore::open(p).await })
        })
        .collect();
    for o in opens {
        o.await.unwrap().unwrap();
    }
    let conn = rusqlite_versions(&path);
    assert_eq!(conn, vec![1, 2, 3, 4]);

    let url = postgres_url();
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let u = url.clone();
            tokio::spawn(async move { PostgresStore::connect(&u).await.map(drop) })
        })
        .collect();
    for o in opens {
        o.await
            .unwrap()
            .unwrap_or_else(|e| panic!("Postgres open failed: {e}"));
    }
    let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let versions: Vec<i32> = client
        .query(
            "SELECT version FROM reqkey_migrations ORDER BY version",
            &[],
        )
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(versions, vec![1, 2, 3]);
}

#[tokio::test]
async fn sqlite_request_key_lookup_is_one_covering_index_search() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let plan = store.request_key_lookup_plan().await.unwrap();
    assert_eq!(
        plan,
        vec!["SEARCH runs USING COVERING INDEX runs_request_key_lookup (session_id=? AND request_key=?)"],
    );
}

#[tokio::test]
async fn a_version_2_sqlite_database_is_upgraded_on_open_and_keeps_its_runs() {
    let db = TempDb::new();
    let store = SqliteStore::open(&db.0).await.unwrap();
    let s = unique("upgrade");
    store
        .commit_run_start(start(&s, "r1", None, Some("key-1"), "a"))
        .await
        .unwrap();
    drop(store);
    // Back to the version-2 schema: the covering index of migration 3 and
    // the lease table of migration 4 gone.
    let conn = rusqlite::Connection::open(&db.0).unwrap();
    conn.execute_batch(
        "DROP INDEX runs_request_key_lookup; DROP TABLE run_leases;
         DELETE FROM reqkey_migrations WHERE version >= 3;",
    )
    .unwrap();
    drop(conn);
    assert_eq!(rusqlite_versions(&db.0), vec![1, 2]);

    let store = SqliteStore::open(&db.0).await.unwrap();
    assert_eq!(rusqlite_versions(&db.0), vec![1, 2, 3, 4]);
    let found = store.get_run_by_request_key(&s, "key-1").await.unwrap();
    assert_eq!(found.map(|r| r.run_id), Some("r1".to_owned()));
}

#[tokio::test]
async fn a_database_newer_than_this_build_is_refused_and_left_alone() {
    let db = TempDb::new();
    drop(SqliteStore::open(&db.0).await.unwrap());
    let conn = rusqlite::Connection::open(&db.0).unwrap();
    conn.execute(
        "INSERT INTO reqkey_migrations (version, name) VALUES (99, 'from the future')",
        [],
    )
    .unwrap();
    drop(conn);
    let e = SqliteStore::open(&db.0).await.unwrap_err();
    assert!(
        matches!(e, store::OpenError::Migration { .. }) && e.to_string().contains("version 99"),
        "{e}"
    );
    assert_eq!(rusqlite_versions(&db.0), vec![1, 2, 3, 4, 99]);
}

/// The run holding `key` in `session`, once the store answers again after
/// losing its connection: `internal` until then, 100 tries 50 ms apart.
async fn run_id_once_it_answers(store: &dyn SessionStateStore, session: &str, key: &str) -> String {
    for _ in 0..100 {
        match store.get_run_by_request_key(session, key).await {
            Ok(found) => return found.map(|r| r.run_id).unwrap_or_default(),
            Err(e) => {
                assert!(matches!(e, StoreError::Internal(_)), "{e:?}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
        }
    }
    panic!("the store never answered again after it lost its connection");
}

/// Redis closes the store's connection (a restart, a failover, an idle
/// timeout): the store answers `internal` while it is gone, then connects
/// again by itself, without a new `RedisStore`.
#[tokio::test]
async fn redis_store_reconnects_after_its_connection_is_killed() {
    let store = RedisStore::connect(&redis_url())
        .await
        .unwrap_or_else(|e| panic!("Redis did not answer ({e}); start it or set REQKEY_REDIS_URL"));
    let s = unique("reconnect");
    started(&store, start(&s, "r1", None, Some("k"), "a")).await;
    let id = store.connection_id().await.unwrap();

    let client = ::redis::Client::open(redis_url()).unwrap();
    let mut admin = client.get_multiplexed_async_connection().await.unwrap();
    let killed: i64 = ::redis::cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(id)
        .query_async(&mut admin)
        .await
        .unwrap();
    assert_eq!(killed, 1);

    assert_eq!(run_id_once_it_answers(&store, &s, "k").await, "r1");
    assert_ne!(store.connection_id().await.unwrap(), id);
    assert!(store.delete_session(&s).await.unwrap());
}

/// Postgres ends the store's connections (a restart, a failover,
/// `pg_terminate_backend`): the store answers `internal` at most until it
/// notices, then opens fresh connections by itself.
#[tokio::test]
async fn postgres_store_reconnects_after_its_connections_are_terminated() {
    let app = unique("pgapp").replace('-', "_");
    let url = postgres_url();
    let sep = if url.contains('?') { '&' } else { '?' };
    let store = PostgresStore::connect(&format!("{url}{sep}application_name={app}"))
        .await
        .unwrap_or_else(|e| {
            panic!("Postgres did not answer ({e}); start it or set REQKEY_POSTGRES_URL")
        });
    let s = unique("pg-reconnect");
    started(&store, start(&s, "r1", None, Some("k"), "a")).await;

    let (admin, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    let ended: i64 = admin
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1",
            &[&app],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ended >= 1, "no connection of the store was found");

    assert_eq!(run_id_once_it_answers(&store, &s, "k").await, "r1");
    started(&store, start(&s, "r2", Some("r1"), Some("k2"), "b")).await;
    assert!(store.delete_session(&s).await.unwrap());
}

fn rusqlite_versions(path: &std::path::Path) -> Vec<i64> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut st = conn
        .prepare("SELECT version FROM reqkey_migrations ORDER BY version")
        .unwrap();
    st.query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn open_refuses_an_unknown_spec_and_redacts_passwords() {
    let e = store::open("mongodb://x").await.unwrap_err();
    assert!(matches!(e, store::OpenError::UnknownSpec(_)), "{e}");
    let e = store::open("postgres://u:secret@127.0.0.1:1/db")
        .await
        .unwrap_err();
    let msg = e.to_string();
    assert!(
        !msg.contains("secret") && msg.contains("127.0.0.1"),
        "{msg}"
    );
}

/// One master of a Redis Cluster, as `CLUSTER NODES` lists it.
#[derive(Debug)]
struct Master {
    addr: String,
    slots: Vec<(u16, u16)>,
}

/// The masters of the cluster (`CLUSTER NODES` asked of `conn`).
async fn cluster_masters(conn: &mut ::redis::aio::MultiplexedConnection) -> Vec<Master> {
    let nodes: String = ::redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(conn)
        .await
        .unwrap();
    let mut masters = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() < 8 || !fields[2].split(',').any(|f| f == "master") {
            continue;
        }
        let addr = fields[1].split('@').next().unwrap().to_owned();
        // Slot ranges `A-B` or single slots `A`; `[...]` are migrations.
        let slots = fields[8..]
            .iter()
            .filter(|r| !r.starts_with('['))
            .map(|r| match r.split_once('-') {
                Some((a, b)) => (a.parse().unwrap(), b.parse().unwrap()),
                None => (r.parse().unwrap(), r.parse().unwrap()),
            })
            .collect();
        masters.push(Master { addr, slots });
    }
    masters
}

async fn node(addr: &str) -> ::redis::aio::MultiplexedConnection {
    ::redis::Client::open(format!("redis://{addr}"))
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap_or_else(|e| panic!("cluster node {addr} does not answer ({e}); {CLUSTER_HINT}"))
}

async fn keyslot(conn: &mut ::redis::aio::MultiplexedConnection, key: &str) -> u16 {
    ::redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(conn)
        .await
        .unwrap()
}

/// Every key on the node `conn` whose name contains `needle` (SCAN, at
/// most 10,000 rounds).
async fn keys_on(conn: &mut ::redis::aio::MultiplexedConnection, needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut cursor: u64 = 0;
    for _ in 0..10_000 {
        let (next, keys): (u64, Vec<String>) = ::redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("*{needle}*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .unwrap();
        found.extend(keys);
        if next == 0 {
            found.sort();
            return found;
        }
        cursor = next;
    }
    panic!("SCAN did not finish in 10,000 rounds");
}

/// On a Redis Cluster every key a session's operations write sits in ONE
/// slot, on the master that serves that slot and on no other node: so the
/// commit script, which writes all of them in one call, ran there (Redis
/// refuses a script a key of another slot). Checked for a session on every
/// master, by looking at what is really stored (SCAN on each master,
/// `CLUSTER KEYSLOT` on each key), not only at the names the store builds.
#[tokio::test]
async fn redis_cluster_keeps_each_session_in_one_slot_on_its_master() {
    let url = redis_cluster_url();
    let store = RedisStore::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("the Redis Cluster did not answer ({e}); {CLUSTER_HINT}"));
    assert!(store.is_cluster());
    assert_eq!(store.backend(), "redis-cluster");
    let seed = reqkey_reference::store::cluster_node_urls(&url).unwrap()[0]
        .trim_start_matches("redis://")
        .to_owned();
    let mut admin = node(&seed).await;
    let masters = cluster_masters(&mut admin).await;
    assert!(
        masters.len() >= 2,
        "a cluster of {} master(s) cannot show that sessions are kept apart: {masters:?}",
        masters.len()
    );
    let master_of = |slot: u16| -> usize {
        let owners: Vec<usize> = (0..masters.len())
            .filter(|&i| {
                masters[i]
                    .slots
                    .iter()
                    .any(|&(a, b)| a <= slot && slot <= b)
            })
            .collect();
        assert_eq!(owners.len(), 1, "slot {slot} is served by {owners:?}");
        owners[0]
    };

    // One session per master: candidate ids until each master has one
    // (the ids are unique per run, so their slots vary; bounded).
    let prefix = unique("slot");
    let mut sessions: Vec<Option<String>> = vec![None; masters.len()];
    for i in 0..10_000 {
        let id = format!("{prefix}-{i}");
        let slot = keyslot(&mut admin, &RedisStore::session_keys(&id).unwrap()[0]).await;
        let m = master_of(slot);
        if sessions[m].is_none() {
            sessions[m] = Some(id);
        }
        if sessions.iter().all(Option::is_some) {
            break;
        }
    }
    let sessions: Vec<String> = sessions
        .into_iter()
        .map(|s| {
            s.expect(
                "after 10,000 candidate ids no session hashed to some master: the hash tag \
                 does not vary with the session id",
            )
        })
        .collect();

    let mut conns = Vec::new();
    for m in &masters {
        conns.push(node(&m.addr).await);
    }
    for (owner, s) in sessions.iter().enumerate() {
        assert!(store.renew_lease(s, "r1", "owner", 1).await.unwrap());
        started(&store, start(s, "r1", None, Some("k1"), "a")).await;
        started(&store, start(s, "r2", Some("r1"), None, "b")).await;
        store
            .set_run_status(s, "r2", RunStatus::Completed)
            .await
            .unwrap();
        let mut written = RedisStore::session_keys(s).unwrap().to_vec();
        written.sort();
        for (i, conn) in conns.iter_mut().enumerate() {
            let found = keys_on(conn, s).await;
            if i == owner {
                assert_eq!(found, written, "the keys of {s} on its master");
            } else {
                assert_eq!(found, Vec::<String>::new(), "keys of {s} on another master");
            }
        }
        let mut slots = Vec::new();
        for key in &written {
            slots.push(keyslot(&mut conns[owner], key).await);
        }
        slots.dedup();
        assert_eq!(slots.len(), 1, "the keys of {s} hash to slots {slots:?}");
        assert_eq!(master_of(slots[0]), owner);

        assert!(store.delete_session(s).await.unwrap());
        assert_eq!(keys_on(&mut conns[owner], s).await, Vec::<String>::new());
    }

    // An id that could break the hash tag never reaches Redis.
    for bad in ["}x", "a{b}"] {
        assert!(
            matches!(
                store.get_current_run(bad).await,
                Err(StoreError::InvalidArgument(_))
            ),
            "{bad}"
        );
    }
}
