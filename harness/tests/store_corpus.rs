//! The store corpus through the real loader and runner: green on the
//! reference memory store, red — on the right scenarios — on each
//! deliberately broken one. A scenario that no broken store fails is a
//! scenario without teeth; these tests are where that shows.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeSet;

use common::{assert_failures_are_verdicts, failing, run_corpus};

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
    let summary = run_corpus("store", "memory", 7).await;
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
                "model.counterexample.holder-read-outside-commit",
                "model.counterexample.key-rule-after-cas",
                "model.counterexample.no-key-rule",
                "model.counterexample.no-replan",
                "model.witness.lost-race-attaches",
                "store.race-after-a-history",
            ],
        ),
        (
            "broken-memory:key-rule-after-cas",
            &[
                "request-key.key-rule-before-cas",
                "request-key.race",
                "model.counterexample.holder-read-outside-commit",
                "model.counterexample.key-rule-after-cas",
                "model.counterexample.no-key-rule",
                "model.counterexample.no-replan",
                "model.witness.lost-race-attaches",
                "store.race-after-a-history",
            ],
        ),
        (
            "broken-memory:no-replay-first",
            &[
                "request-key.replay-before-key-rule",
                "request-key.run-id-conflict",
                "request-key.same-run-id-replay",
                "store.replay-race",
                "store.start-digest-is-canonical",
            ],
        ),
        (
            "broken-memory:delete-keeps-keys",
            &[
                "request-key.delete-frees-keys",
                "model.counterexample.delete-keeps-keys",
                "model.witness.key-reused-after-delete",
            ],
        ),
    ];
    for (target, want) in cases {
        let summary = run_corpus("store", target, 7).await;
        assert_eq!(
            failing(&summary),
            want.iter().copied().collect(),
            "{target}"
        );
        assert_failures_are_verdicts(target, &summary);
    }
}

/// The racy store (holder read outside the commit) is caught by the race
/// trials at their default count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_default_race_trials_catch_a_holder_read_outside_the_commit() {
    let summary = run_corpus("store", "broken-memory:holder-read-outside-commit", 7).await;
    assert!(
        failing(&summary).contains("request-key.race"),
        "{:?}",
        failing(&summary)
    );
}
