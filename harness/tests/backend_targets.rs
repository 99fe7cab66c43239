//! The store corpus on every real backend, in process and through
//! `store+http`, and how the `store+http` target classifies a broken or
//! absent adapter.
//!
//! Postgres and Redis are the services named by `REQKEY_POSTGRES_URL`,
//! `REQKEY_REDIS_URL` and `REQKEY_REDIS_CLUSTER_URL` (defaults: the local
//! ones `.ci/run` starts; the cluster is `scripts/redis-cluster.sh start`).
//! A service that does not answer FAILS these tests; they never skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::sync::Arc;

use common::{failing, redis_cluster_url, run_on};
use reqkey_harness::run::event::RunSummary;
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::scenario::load_paths;
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::store::InProcessStore;
use reqkey_harness::targets::{Target, TargetError, TargetOptions};
use reqkey_reference::store::{MemoryDefect, MemoryStore, SessionStateStore};
use reqkey_reference::store_server;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn postgres_url() -> String {
    std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn redis_url() -> String {
    std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

async fn open(spec: &str) -> Arc<dyn Target> {
    match open_target(spec, TargetOptions::default()).await {
        Ok(t) => t,
        Err(e) => panic!(
            "the target {spec} could not be opened: {e}. The backend tests need the real \
             services (pg_isready -h 127.0.0.1; redis-cli ping; scripts/redis-cluster.sh \
             start); they never skip."
        ),
    }
}

/// The store corpus on an open target.
async fn run_on_store(target: Arc<dyn Target>) -> RunSummary {
    run_on(target, "store", 11).await
}

fn assert_all_pass(summary: &RunSummary) {
    assert_eq!(failing(summary), BTreeSet::new(), "{summary:#?}");
    assert!(
        summary.passed >= 12,
        "only {} scenarios ran",
        summary.passed
    );
    assert_eq!(summary.exit_code(), 0);
}

/// Serves `store` over reqkey-store/1 on an ephemeral port.
async fn serve(store: Arc<dyn SessionStateStore>) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(store_server::serve(store, listener, async {
        let _ = stopped.await;
    }));
    (format!("store+http://{addr}"), stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_corpus_passes_on_sqlite() {
    let path = std::env::temp_dir().join(format!("reqkey-corpus-{}.sqlite", std::process::id()));
    let summary = run_on_store(open(&format!("sqlite:{}", path.display())).await).await;
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    assert_all_pass(&summary);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_corpus_passes_on_postgres() {
    assert_all_pass(&run_on_store(open(&postgres_url()).await).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_corpus_passes_on_redis() {
    assert_all_pass(&run_on_store(open(&redis_url()).await).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_corpus_passes_on_a_redis_cluster() {
    assert_all_pass(&run_on_store(open(&redis_cluster_url()).await).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_corpus_passes_on_memory_through_store_http() {
    let (spec, _stop) = serve(Arc::new(MemoryStore::new())).await;
    let target = open(&spec).await;
    assert_eq!(target.health().await.unwrap()["protocol"], "reqkey-store/1");
    assert_all_pass(&run_on_store(target).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_broken_store_behind_store_http_fails_the_corpus() {
    let (spec, _stop) = serve(Arc::new(MemoryStore::with_defect(MemoryDefect::NoKeyRule))).await;
    let summary = run_on_store(open(&spec).await).await;
    assert_eq!(summary.exit_code(), 1, "{summary:#?}");
    assert!(
        failing(&summary).contains("request-key.taken-names-holder"),
        "{summary:#?}"
    );
}

#[tokio::test]
async fn an_adapter_that_does_not_listen_is_unreachable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let e = open_target(&format!("store+http://{addr}"), TargetOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, TargetError::Unreachable(_)), "{e}");
    assert!(e.is_harness_error());
}

/// A one-connection-at-a-time HTTP server that answers every request
/// with `response` (or, with `None`, reads and never answers).
async fn canned(response: Option<&'static str>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = sock.read(&mut buf).await;
                match response {
                    Some(body) => {
                        let (status, body) = body.split_once('\n').unwrap();
                        let reply = format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                            body.len()
                        );
                        let _ = sock.write_all(reply.as_bytes()).await;
                    }
                    None => tokio::time::sleep(std::time::Duration::from_secs(30)).await,
                }
            });
        }
    });
    format!("store+http://{addr}")
}

#[tokio::test]
async fn non_conforming_answers_are_protocol_violations() {
    let request = json!({"op": "listRuns", "args": {"sessionId": "s"}});
    for (canned_answer, why) in [
        (
            "500 Internal Server Error\n{\"error\":{\"kind\":\"internal\",\"message\":\"x\"}}",
            "a non-200 status",
        ),
        ("200 OK\nnot json", "a body that is not JSON"),
        ("200 OK\n{\"ok\":[],\"error\":null}", "both ok and error"),
        ("200 OK\n{\"result\":[]}", "neither ok nor error"),
        (
            "200 OK\n{\"error\":\"boom\"}",
            "an error that is not an error object",
        ),
    ] {
        let spec = canned(Some(canned_answer)).await;
        let target = open_target(&spec, TargetOptions::default()).await.unwrap();
        let e = target.store_call(&request).await.unwrap_err();
        assert!(matches!(e, TargetError::Protocol(_)), "{why}: {e}");
        assert!(!e.is_harness_error(), "{why}");
    }
    let spec = canned(Some("200 OK\n{\"ok\":[]}")).await;
    let target = open_target(&spec, TargetOptions::default()).await.unwrap();
    assert_eq!(
        target.store_call(&request).await.unwrap(),
        json!({"ok": []})
    );
}

#[tokio::test]
async fn an_adapter_that_never_answers_times_out() {
    let spec = canned(None).await;
    let e = open_target(
        &spec,
        TargetOptions {
            call_timeout_ms: 300,
            ..TargetOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(e, TargetError::Timeout { timeout_ms: 300 });
}

/// A store target that remembers every session a request names.
#[derive(Debug)]
struct Watching {
    inner: InProcessStore,
    seen: std::sync::Mutex<BTreeSet<String>>,
}

#[async_trait::async_trait]
impl Target for Watching {
    fn level(&self) -> reqkey_harness::targets::Level {
        self.inner.level()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn health(&self) -> Result<serde_json::Value, TargetError> {
        self.inner.health().await
    }
    async fn store_call(
        &self,
        request: &serde_json::Value,
    ) -> Result<serde_json::Value, TargetError> {
        let args = &request["args"];
        if let Some(s) = args
            .get("sessionId")
            .or_else(|| args.get("startRun").and_then(|s| s.get("sessionId")))
            .and_then(serde_json::Value::as_str)
        {
            self.seen.lock().unwrap().insert(s.to_owned());
        }
        self.inner.store_call(request).await
    }
}

/// Runs `yaml` on a fresh memory store; answers the store, every session
/// the run named, and the summary.
async fn run_watched(
    yaml: &str,
    keep_sessions: bool,
) -> (Arc<MemoryStore>, BTreeSet<String>, RunSummary) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("reqkey-cleanup-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cleanup.yaml");
    std::fs::write(&file, yaml).unwrap();
    let scenarios = load_paths(&[file]).unwrap();
    let store = Arc::new(MemoryStore::new());
    let target = Arc::new(Watching {
        inner: InProcessStore::new("memory", store.clone()),
        seen: std::sync::Mutex::default(),
    });
    let mut cfg = RunConfig::new(3);
    cfg.keep_sessions = keep_sessions;
    let summary = runner::run(target.clone(), &scenarios, &cfg, &mut []).await;
    let seen = target.seen.lock().unwrap().clone();
    (store, seen, summary)
}

const CLEANUP_SCENARIO: &str = "\
id: cleanup.fresh-and-literal
level: store
summary: Two fresh sessions and one literal session id.
checks: [store.commit.started-answer]
steps:
  - commitRunStart: {sessionId: $s1, runId: r1, expectedCurrentRunId: null, input: null}
    expect: {ok: {outcome: started}}
    judges: [store.commit.started-answer]
  - commitRunStart: {sessionId: '${s2}-x', runId: r1, expectedCurrentRunId: null, input: null, requestKey: k, requestDigest: d}
    expect: {ok: {outcome: started}}
    judges: [store.commit.started-answer]
  - commitRunStart: {sessionId: someone-elses-session, runId: r1, expectedCurrentRunId: null, input: null}
    expect: {ok: {outcome: started}}
    judges: [store.commit.started-answer]
";

#[tokio::test]
async fn a_passing_trial_deletes_the_sessions_it_created_and_no_other() {
    let (store, seen, summary) = run_watched(CLEANUP_SCENARIO, false).await;
    assert_eq!(summary.passed, 1, "{summary:#?}");
    assert_eq!(seen.len(), 3, "{seen:?}");
    for s in &seen {
        let runs = store.list_runs(s).await.unwrap();
        if s == "someone-elses-session" {
            assert_eq!(runs.len(), 1, "a literal session id was deleted");
        } else {
            assert!(runs.is_empty(), "{s} was left behind: {runs:?}");
        }
    }
}

#[tokio::test]
async fn keep_sessions_and_failing_trials_leave_them_in_place() {
    let (store, seen, summary) = run_watched(CLEANUP_SCENARIO, true).await;
    assert_eq!(summary.passed, 1, "{summary:#?}");
    for s in &seen {
        assert_eq!(
            store.list_runs(s).await.unwrap().len(),
            1,
            "{s} was deleted"
        );
    }
    let failing = format!(
        "{CLEANUP_SCENARIO}  - getRun: {{sessionId: $s1, runId: r1}}\n    expect: {{ok: null}}\n    judges: [store.commit.started-answer]\n"
    );
    let (store, seen, summary) = run_watched(&failing, false).await;
    assert_eq!(summary.failed, 1, "{summary:#?}");
    for s in &seen {
        assert_eq!(
            store.list_runs(s).await.unwrap().len(),
            1,
            "{s} was deleted after a failure"
        );
    }
}
