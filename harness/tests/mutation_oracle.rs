//! The conformance corpus as the only oracle of a mutation run
//! (`scripts/mutants.sh`, docs/mutation.md).
//!
//! cargo-mutants mutates the model's rules and planning code and the
//! reference stores and executor, then runs exactly this test binary: the
//! store corpus on every reference store and the agent corpus on the
//! reference agent server. No unit test takes part, so a mutant survives
//! exactly when the published suite would certify the mutated reference.
//! The tests here are also ordinary tests (green on the unmutated tree).
//!
//! PostgreSQL and Redis are needed as for the other corpus tests
//! (`REQKEY_POSTGRES_URL`, `REQKEY_REDIS_URL`, defaults on 127.0.0.1); a
//! service that does not answer fails, never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::{failing, run_corpus};

/// A fixed seed: a mutant is caught or missed reproducibly.
const SEED: u64 = 20_261_203;

async fn green(level: &str, spec: &str) {
    let summary = run_corpus(level, spec, SEED).await;
    assert!(summary.passed > 0, "{spec}: nothing ran");
    assert_eq!(
        failing(&summary),
        BTreeSet::new(),
        "{spec} (seed {SEED}): {summary:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_corpus_on_memory() {
    green("store", "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_corpus_on_sqlite() {
    let db = std::env::temp_dir().join(format!(
        "reqkey-mutation-oracle-{}.sqlite",
        std::process::id()
    ));
    green("store", &format!("sqlite:{}", db.display())).await;
    for suffix in ["", "-wal", "-shm"] {
        let mut p = db.clone().into_os_string();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_corpus_on_postgres() {
    let url = std::env::var("REQKEY_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    green("store", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn store_corpus_on_redis() {
    let url = std::env::var("REQKEY_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    green("store", &url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn agent_corpus_on_the_reference_agent() {
    green("agent", "reference-agent").await;
}
