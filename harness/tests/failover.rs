//! The kill-one-replica fault test, short (issue 17): `reqkey bench
//! failover` with 90 keyed requests over three `reqkey serve agent`
//! processes, one killed with SIGKILL mid-load, on the real Postgres and
//! Redis (pinged first: a service that does not answer FAILS these tests,
//! they never skip); and over separate memory stores, where it must fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::{reqkey, text};

fn postgres_url() -> String {
    std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

fn redis_url() -> String {
    std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into())
}

async fn ping(url: &str) {
    let open = async {
        let store = reqkey_reference::store::open(url)
            .await
            .map_err(|e| e.to_string())?;
        store
            .get_current_run("failover-ping")
            .await
            .map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(10), open).await {
        Ok(Ok(_)) => {}
        other => panic!(
            "{} does not answer ({other:?}); these tests need the real services and never skip",
            reqkey_reference::store::redact_url(url)
        ),
    }
}

fn failover(store: &str, seed: &str) -> (Option<i32>, String) {
    let o = reqkey(&[
        "bench",
        "failover",
        "--store",
        store,
        "--requests",
        "90",
        "--concurrency",
        "12",
        "--seed",
        seed,
    ]);
    (o.status.code(), text(&o))
}

fn assert_clean(store: &str, seed: &str) {
    let (code, out) = failover(store, seed);
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("kills 1"), "{out}");
    assert!(
        out.contains("duplicates 0, lost 0, doubled inputs 0, answers naming another run 0"),
        "{out}"
    );
    assert!(out.contains("NO duplicate, NO loss"), "{out}");
    // The kill really hit runs in flight: some were retried elsewhere.
    assert!(
        !out.contains("failed and retried on another replica: 0,"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_three_replicas_over_postgres_loses_and_doubles_nothing() {
    let url = postgres_url();
    ping(&url).await;
    assert_clean(&url, "7");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_one_of_three_replicas_over_redis_loses_and_doubles_nothing() {
    let url = redis_url();
    ping(&url).await;
    assert_clean(&url, "8");
}

/// Replicas over separate memory stores: the killed replica's sessions are
/// gone, so the fault test must fail (exit 1), proving it can.
#[test]
fn over_separate_memory_stores_the_fault_test_fails() {
    let (code, out) = failover("memory", "9");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("FAILED"), "{out}");
}
