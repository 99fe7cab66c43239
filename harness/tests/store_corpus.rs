//! The store corpus through the real loader and runner: green on the
//! reference memory store, red — on the right scenarios — on each
//! deliberately broken one. A scenario that no broken store fails is a
//! scenario without teeth; these tests are where that shows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::path::PathBuf;

use reqkey_harness::event::{RunSummary, Verdict};
use reqkey_harness::runner::{self, RunConfig};
use reqkey_harness::scenario::load_paths;
use reqkey_harness::target::{open_target, TargetOptions};

fn corpus() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/store")
}

async fn run_corpus(target: &str) -> RunSummary {
    let scenarios = load_paths(&[corpus()]).expect("the corpus loads");
    let target = open_target(target, TargetOptions::default())
        .await
        .expect("target opens");
    runner::run(target, &scenarios, &RunConfig::new(7), &mut []).await
}

fn failing(summary: &RunSummary) -> BTreeSet<&str> {
    summary
        .results
        .iter()
        .filter(|r| r.verdict != Verdict::Pass)
        .map(|r| r.id.as_str())
        .collect()
}

const CONTRACT_IDS: [&str; 11] = [
    "request-key.recorded-and-found",
    "request-key.keyless-has-no-key-fields",
    "request-key.taken-names-holder",
    "request-key.same-run-id-replay",
    "request-key.replay-before-key-rule",
    "request-key.key-rule-before-cas",
    "request-key.run-id-conflict",
    "request-key.per-session",
    "request-key.refused-start-leaves-key-free",
    "request-key.race",
    "request-key.delete-frees-keys",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_whole_corpus_passes_on_the_memory_store() {
    let summary = run_corpus("memory").await;
    assert_eq!(failing(&summary), BTreeSet::new(), "{summary:#?}");
    assert!(summary.passed >= 12, "only {} scenarios", summary.passed);
    let ids: BTreeSet<&str> = summary.results.iter().map(|r| r.id.as_str()).collect();
    for id in CONTRACT_IDS {
        assert!(ids.contains(id), "the corpus lacks {id}");
    }
    let race = summary
        .results
        .iter()
        .find(|r| r.id == "request-key.race")
        .unwrap();
    assert!(race.trials_run >= 50, "race ran {} trials", race.trials_run);
}

/// Each broken store fails exactly the scenarios that test its bug.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_broken_store_fails_the_scenarios_that_test_its_bug() {
    let cases: [(&str, &[&str]); 4] = [
        (
            "broken-memory:no-key-rule",
            &[
                "request-key.key-rule-before-cas",
                "request-key.race",
                "request-key.taken-names-holder",
                "model.mutant.holder-read-outside-commit",
                "model.mutant.key-rule-after-cas",
                "model.mutant.no-key-rule",
                "model.mutant.no-replan",
                "model.sometimes.lost-race-attaches",
            ],
        ),
        (
            "broken-memory:key-rule-after-cas",
            &[
                "request-key.key-rule-before-cas",
                "request-key.race",
                "model.mutant.holder-read-outside-commit",
                "model.mutant.key-rule-after-cas",
                "model.mutant.no-key-rule",
                "model.mutant.no-replan",
                "model.sometimes.lost-race-attaches",
            ],
        ),
        (
            "broken-memory:no-replay-first",
            &[
                "request-key.replay-before-key-rule",
                "request-key.run-id-conflict",
                "request-key.same-run-id-replay",
                "store.replay-race",
            ],
        ),
        (
            "broken-memory:delete-keeps-keys",
            &[
                "request-key.delete-frees-keys",
                "model.mutant.delete-keeps-keys",
                "model.sometimes.key-reused-after-delete",
            ],
        ),
    ];
    for (target, want) in cases {
        let summary = run_corpus(target).await;
        assert_eq!(
            failing(&summary),
            want.iter().copied().collect(),
            "{target}"
        );
        assert_eq!(summary.exit_code(), 1, "{target}");
        for r in summary
            .results
            .iter()
            .filter(|r| r.verdict != Verdict::Pass)
        {
            assert_eq!(
                r.verdict,
                Verdict::Fail,
                "{target}: {} must fail, not error",
                r.id
            );
            assert!(r.failure.is_some());
        }
    }
}

/// The racy store (holder read outside the commit) is caught by the race
/// trials at their default count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_race_trials_catch_a_holder_read_outside_the_commit() {
    let summary = run_corpus("broken-memory:holder-read-outside-commit").await;
    assert!(
        failing(&summary).contains("request-key.race"),
        "{:?}",
        failing(&summary)
    );
}
