//! Replicas of one agent deployment certified as one target (issue 17):
//! three `reqkey serve agent` processes (children of the built binary)
//! over one Postgres, one Redis and one SQLite file pass the whole agent
//! suite, races included, through `http://A,http://B,http://C`; three over
//! their own memory stores fail it, the cross-replica race among the
//! failures; replicas that declare different profiles are not judged.
//!
//! Postgres and Redis are the services named by `REQKEY_POSTGRES_URL` and
//! `REQKEY_REDIS_URL` (defaults: the local ones `.ci/run` starts). They are
//! pinged first: a service that does not answer FAILS these tests; they
//! never skip.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::{assert_failures_are_verdicts, failing, ran, reqkey, run_agent_profile, text};
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::{TargetError, TargetOptions};

fn postgres_url() -> String {
    std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn redis_url() -> String {
    std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

/// The races of the suite that a replicated target sends across replicas
/// (round-robin); `agent.cross-replica-keyed-retry` picks its replicas.
const RACES: [&str; 3] = [
    "agent.concurrent-duplicates",
    "agent.concurrent-duplicate-chats",
    "agent.concurrent-duplicate-resumes",
];

/// One `reqkey serve agent` process started with `args`; killed when
/// dropped.
type Replica = common::Served;

fn replica(args: &[&str]) -> Replica {
    let mut all = vec!["serve", "agent"];
    all.extend_from_slice(args);
    common::Served::start(&all)
}

/// Three replicas started with `args`, and the target naming them all.
fn three(args: &[&str]) -> (Vec<Replica>, String) {
    let replicas: Vec<Replica> = (0..3).map(|_| replica(args)).collect();
    let spec = replicas
        .iter()
        .map(|r| r.base.as_str())
        .collect::<Vec<_>>()
        .join(",");
    (replicas, spec)
}

/// Does the service answer? The reference store opened on it (bounded)
/// and read once, so a missing service fails loudly here, not as a red
/// suite.
async fn ping(url: &str) {
    let open = async {
        let store = reqkey_reference::store::open(url)
            .await
            .map_err(|e| e.to_string())?;
        store
            .get_current_run("replicas-ping")
            .await
            .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(10), open).await {
        Ok(Ok(_)) => {}
        other => panic!(
            "{} does not answer ({other:?}); these tests need the real services \
             (pg_isready -h 127.0.0.1; redis-cli ping) and never skip",
            reqkey_reference::store::redact_url(url)
        ),
    }
}

/// The whole agent suite on `spec` passes, and the races ran.
async fn assert_green(spec: &str) {
    let run = run_agent_profile(spec, None, 17).await;
    assert_eq!(
        failing(&run.summary),
        BTreeSet::new(),
        "{spec}: {:#?}",
        run.summary
    );
    assert_eq!(run.summary.exit_code(), 0);
    let ran = ran(&run.summary);
    for race in RACES {
        assert!(ran.contains(race), "{race} did not run on {spec}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_over_one_postgres_certify_green() {
    let url = postgres_url();
    ping(&url).await;
    let (replicas, spec) = three(&["--store", &url]);
    assert_green(&spec).await;

    // The certificate names every endpoint.
    let out = std::env::temp_dir().join(format!("reqkey-replicas-{}", std::process::id()));
    let o = reqkey(&[
        "certify",
        "--target",
        &spec,
        "--out",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let cert = std::fs::read_to_string(out.join("certificate.md")).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    assert!(cert.contains("**CONFORMS**"), "{cert}");
    let row = cert
        .lines()
        .find(|l| l.starts_with("| replicas |"))
        .unwrap_or_else(|| panic!("no replicas row: {cert}"));
    assert!(row.contains("3 endpoints"), "{row}");
    for r in &replicas {
        assert!(row.contains(&r.base), "{} missing from {row}", r.base);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_over_one_redis_certify_green() {
    let url = redis_url();
    ping(&url).await;
    let (_replicas, spec) = three(&["--store", &url]);
    assert_green(&spec).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_over_one_sqlite_file_certify_green() {
    let path = std::env::temp_dir().join(format!("reqkey-replicas-{}.sqlite", std::process::id()));
    let store = format!("sqlite:{}", path.display());
    // The first replica creates and migrates the file before the others open it.
    let first = replica(&["--store", &store]);
    let rest: Vec<Replica> = (0..2).map(|_| replica(&["--store", &store])).collect();
    let spec = format!("{},{},{}", first.base, rest[0].base, rest[1].base);
    assert_green(&spec).await;
    drop((first, rest));
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
}

/// Three replicas each over its own memory store are not one deployment:
/// the suite fails them, the cross-replica races among the failures (a
/// keyed duplicate on another replica starts a second run).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_over_separate_memory_stores_are_caught() {
    let (_replicas, spec) = three(&[]);
    let run = run_agent_profile(&spec, None, 17).await;
    assert_failures_are_verdicts(&spec, &run.summary);
    let failing = failing(&run.summary);
    for race in RACES {
        assert!(failing.contains(race), "{race} passed on {spec}");
    }
    // The scenario that picks its replicas fails on its first retry.
    assert!(
        failing.contains("agent.cross-replica-keyed-retry"),
        "{failing:?}"
    );
}

/// The same in process: `reference-agents:3` (each over its own memory
/// store) fails, `reference-agents:3@postgres://...` passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reference_agents_in_process_over_separate_and_shared_stores() {
    let run = run_agent_profile("reference-agents:3", None, 5).await;
    assert_failures_are_verdicts("reference-agents:3", &run.summary);
    assert!(failing(&run.summary).contains("agent.concurrent-duplicates"));

    let url = postgres_url();
    ping(&url).await;
    assert_green(&format!("reference-agents:3@{url}")).await;
}

/// Replicas whose `/health` declares different profiles cannot be judged
/// as one deployment: the target does not open (exit 2, no verdict).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_that_disagree_on_the_profile_are_not_judged() {
    let a = replica(&[]);
    let b = replica(&["--no-request-keys"]);
    let spec = format!("{},{}", a.base, b.base);
    match open_target(&spec, TargetOptions::default()).await {
        Err(TargetError::BadSpec(m)) => assert!(m.contains("one profile"), "{m}"),
        other => panic!("expected a refusal, got {:?}", other.map(|t| t.describe())),
    }
    let o = reqkey(&["run", "--target", &spec, "-q"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

#[test]
fn a_replica_list_is_parsed_once_at_the_edge() {
    use reqkey_harness::targets::reference_agent::AgentVariant;
    use reqkey_harness::targets::spec::TargetSpec;
    use reqkey_harness::targets::transport::HttpBase;
    use reqkey_reference::store::StoreSpec;
    assert_eq!(
        TargetSpec::parse("http://a:1,http://b:2").unwrap(),
        TargetSpec::AgentReplicas {
            bases: vec![
                HttpBase::parse("http://a:1").unwrap(),
                HttpBase::parse("http://b:2").unwrap()
            ]
        }
    );
    assert!(TargetSpec::parse("http://a:1,store+http://b:2").is_err());
    assert!(TargetSpec::parse("reference-agents:1").is_err());
    assert!(TargetSpec::parse("reference-agents:17").is_err());
    assert_eq!(
        TargetSpec::parse("reference-agents:3:no-request-keys@redis://h:1").unwrap(),
        TargetSpec::ReferenceAgents {
            count: 3,
            variant: Some(AgentVariant::NoRequestKeys),
            store: Some(StoreSpec::parse("redis://h:1").unwrap())
        }
    );
}
