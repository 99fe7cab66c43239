//! The agent corpus through the real loader, runner and HTTP: green on the
//! reference agent server, red on the keyed scenarios when the server does
//! not honour keys (`--no-request-keys`) or honours them wrongly (the
//! deliberately broken executors), and never red on the keyless and
//! validation scenarios — a scenario that fails a correct-on-that-point
//! server is as useless as one that passes a broken one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

use common::{assert_failures_are_verdicts, failing, load_corpus, run_corpus};
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::target::spec::open_target;
use reqkey_harness::target::TargetOptions;

/// Scenarios that need a server which records keys.
const KEYED: [&str; 18] = [
    "agent.already-completed",
    "agent.attach-running",
    "agent.attach-suspended",
    "agent.chat-never-shows-another-run",
    "agent.chat-retried-send-attaches",
    "agent.chat-tool-result-is-keyless",
    "agent.concurrent-duplicate-chats",
    "agent.concurrent-duplicate-resumes",
    "agent.concurrent-duplicates",
    "agent.delete-frees-keys",
    "agent.key-conflict",
    "agent.keyed-resume",
    "agent.keyed-retries-skip-refusals",
    "agent.keyed-retry",
    "agent.keys-are-case-sensitive",
    "agent.replay-finished-current",
    "agent.request-digest-is-canonical",
    "agent.valid-key-boundaries",
];

/// Scenarios every SPEC 7 server passes whatever it does with keys.
const KEYLESS: [&str; 6] = [
    "agent.bad-bodies",
    "agent.concurrent-keyless-starts",
    "agent.health",
    "agent.keyless-unchanged",
    "agent.malformed-keys",
    "agent.unknown-things",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_whole_agent_corpus_passes_on_the_reference_agent() {
    let summary = run_corpus("agent", "reference-agent", 11).await;
    assert_eq!(failing(&summary), BTreeSet::new(), "{summary:#?}");
    let ids: BTreeSet<&str> = summary.results.iter().map(|r| r.id.as_str()).collect();
    let all: BTreeSet<&str> = KEYED.iter().chain(&KEYLESS).copied().collect();
    assert_eq!(ids, all, "the corpus and this test disagree on the ids");
    for race in [
        "agent.concurrent-duplicates",
        "agent.concurrent-duplicate-chats",
    ] {
        let r = summary.results.iter().find(|r| r.id == race).unwrap();
        assert!(r.trials_run >= 30, "{race} ran {} trials", r.trials_run);
        assert_eq!(
            r.trials_overlapped, r.trials_run,
            "{race}: every trial must really race"
        );
    }
}

/// The executor works over any `SessionStateStore`: the whole corpus (one
/// trial per scenario, to stay short) over the reference server backed by
/// SQLite, PostgreSQL and Redis. Like the backend tests, this needs the
/// real services (`REQKEY_POSTGRES_URL`, `REQKEY_REDIS_URL`, defaults on
/// 127.0.0.1) and fails, never skips, when one does not answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_agent_corpus_passes_over_every_reference_store() {
    let db =
        std::env::temp_dir().join(format!("reqkey-agent-corpus-{}.sqlite", std::process::id()));
    let postgres = std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let redis =
        std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let stores = [format!("sqlite:{}", db.display()), postgres, redis];
    let scenarios = load_corpus("agent");
    let runs = stores.into_iter().map(|store| {
        let scenarios = scenarios.clone();
        async move {
            let spec = format!("reference-agent@{store}");
            let target = open_target(&spec, TargetOptions::default())
                .await
                .unwrap_or_else(|e| {
                    panic!("{spec}: {e} (start the service; this test never skips)")
                });
            let mut cfg = RunConfig::new(13);
            // One trial each: the point here is that the executor works
            // over every store; race statistics are the memory run's job
            // (and each store's own race is certified by the store corpus).
            cfg.repeat_override = Some(1);
            (spec, runner::run(target, &scenarios, &cfg, &mut []).await)
        }
    });
    let results = futures_join_all(runs).await;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
    for (spec, summary) in results {
        assert_eq!(failing(&summary), BTreeSet::new(), "{spec}: {summary:#?}");
    }
}

/// Runs futures concurrently (no `futures` dependency for one join).
async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futures: impl IntoIterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.expect("a corpus run panicked"));
    }
    out
}

/// Without key support every keyed scenario fails, and nothing else does.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_server_without_request_keys_fails_every_keyed_scenario_and_only_those() {
    let target = "reference-agent:no-request-keys";
    let summary = run_corpus("agent", target, 11).await;
    assert_eq!(failing(&summary), KEYED.into_iter().collect(), "{target}");
    assert_failures_are_verdicts(target, &summary);
}

/// Each broken executor fails the scenarios that test its bug (at least
/// `must`, never outside `may`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_broken_executor_fails_the_scenarios_that_test_its_bug() {
    let races = [
        "agent.concurrent-duplicate-chats",
        "agent.concurrent-duplicate-resumes",
        "agent.concurrent-duplicates",
    ];
    let cases: [(&str, &[&str], &[&str]); 4] = [
        (
            "reference-agent:policy-before-key",
            &[
                "agent.already-completed",
                "agent.attach-running",
                "agent.attach-suspended",
                "agent.chat-retried-send-attaches",
                "agent.key-conflict",
                "agent.keyed-resume",
                "agent.keyed-retries-skip-refusals",
                "agent.keyed-retry",
                "agent.replay-finished-current",
                "agent.delete-frees-keys",
                "agent.request-digest-is-canonical",
            ],
            &KEYED,
        ),
        ("reference-agent:no-replan-after-key-taken", &[], &races),
        (
            "reference-agent:ignore-digest",
            &["agent.key-conflict", "agent.request-digest-is-canonical"],
            &["agent.key-conflict", "agent.request-digest-is-canonical"],
        ),
        (
            "reference-agent:attach-streams-from-now",
            &[
                "agent.chat-retried-send-attaches",
                "agent.chat-never-shows-another-run",
            ],
            &[
                "agent.chat-retried-send-attaches",
                "agent.chat-never-shows-another-run",
                "agent.concurrent-duplicate-chats",
            ],
        ),
    ];
    for (target, must, may) in cases {
        let summary = run_corpus("agent", target, 11).await;
        let failed = failing(&summary);
        assert!(!failed.is_empty(), "{target} passed the corpus");
        for id in must {
            assert!(
                failed.contains(id),
                "{target} passed {id}; failed {failed:?}"
            );
        }
        for id in &failed {
            assert!(
                may.contains(id),
                "{target} failed {id}, which does not test its bug"
            );
        }
        assert_failures_are_verdicts(target, &summary);
    }
}

/// `reqkey serve agent` on an ephemeral port, the corpus over a real
/// socket with `reqkey run --target http://...`, then SIGTERM: exit 0.
#[test]
fn serve_agent_then_run_over_http_exits_0_and_sigterm_stops_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut server = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "serve",
            "agent",
            "--store",
            "memory",
            "--listen",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("reqkey serve starts");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .expect("a listening line")
        .to_owned();
    let run = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "run",
            "scenarios/agent",
            "--target",
            &url,
            "--quiet",
            "--seed",
            "3",
        ])
        .current_dir(&root)
        .output()
        .expect("reqkey run runs");
    let kill = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status();
    let status = server.wait().unwrap();
    assert_eq!(
        run.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&run.stdout)
    );
    assert!(kill.unwrap().success());
    assert_eq!(status.code(), Some(0), "graceful shutdown exits 0");
}

/// A server that is not there is a harness error (exit 2), not a verdict.
#[test]
fn an_unreachable_agent_target_exits_2() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    let out = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args([
            "run",
            "scenarios/agent/health.yaml",
            "--target",
            &format!("http://127.0.0.1:{port}"),
        ])
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// An agent target that remembers every session route it was sent.
#[derive(Debug)]
struct Watching {
    inner: std::sync::Arc<dyn reqkey_harness::target::Target>,
    seen: std::sync::Mutex<BTreeSet<String>>,
}

#[async_trait::async_trait]
impl reqkey_harness::target::Target for Watching {
    fn level(&self) -> reqkey_harness::target::Level {
        self.inner.level()
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    async fn health(&self) -> Result<serde_json::Value, reqkey_harness::target::TargetError> {
        self.inner.health().await
    }
    async fn http(
        &self,
        request: reqkey_harness::target::HttpRequest,
    ) -> Result<reqkey_harness::target::HttpResponse, reqkey_harness::target::TargetError> {
        if let Some(rest) = request.path.strip_prefix("/sessions/") {
            let id = rest.split(['/', '?']).next().unwrap_or_default();
            self.seen.lock().unwrap().insert(id.to_owned());
        }
        self.inner.http(request).await
    }
}

/// After a green run every session the run created fresh is gone from the
/// server (`DELETE /sessions/{id}` by the runner); none is left running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_green_agent_run_leaves_no_session_behind() {
    let scenarios = load_corpus("agent");
    let inner = open_target("reference-agent", TargetOptions::default())
        .await
        .expect("target opens");
    let target = std::sync::Arc::new(Watching {
        inner,
        seen: std::sync::Mutex::default(),
    });
    let cfg = RunConfig::new(5);
    let summary = runner::run(target.clone(), &scenarios, &cfg, &mut []).await;
    assert_eq!(failing(&summary), BTreeSet::new(), "{summary:#?}");
    let seen = target.seen.lock().unwrap().clone();
    let fresh: Vec<&String> = seen
        .iter()
        .filter(|s| s.starts_with(&format!("{}.", cfg.namespace)))
        .collect();
    assert!(
        fresh.len() >= 20,
        "only {} fresh sessions: {seen:?}",
        fresh.len()
    );
    for s in fresh {
        let answer = target
            .inner
            .http(reqkey_harness::target::HttpRequest {
                method: "GET".into(),
                path: format!("/sessions/{s}"),
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(answer.status, 404, "{s} was left behind");
    }
}
