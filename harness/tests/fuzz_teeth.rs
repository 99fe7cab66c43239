//! Every broken variant that only the fuzz pass finds (the suite passes
//! it: `FUZZ_ONLY` in agent_corpus.rs and store_corpus.rs) is red under
//! `reqkey certify` with the default fuzz budget on seeds 1, 2 and 3: the
//! fuzz pass fails, the exit code is 1. Each variant is
//! the tooth of one dimension of the alphabet (`reqkey coverage --fuzz`).
//!
//! CI runs two of them (one per level); the `#[ignore]`d test runs all
//! fifteen (minutes: `cargo test -p reqkey-harness --test fuzz_teeth --
//! --ignored`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use reqkey_harness::run::fuzz::alphabet;
use reqkey_harness::run::fuzz::pass::DEFAULT_CERTIFY_FUZZ_CASES;

/// The variants only the fuzzer finds, each with its dimension.
fn teeth() -> Vec<(&'static str, &'static str)> {
    alphabet::fuzzers()
        .into_iter()
        .flat_map(|f| f.dimensions)
        .flat_map(|d| d.teeth.iter().map(move |t| (*t, d.id)))
        .collect()
}

/// `reqkey certify` on `target` with certify's default fuzz budget: its
/// exit code and results.json.
fn certify(target: &str, seed: u64) -> (Option<i32>, serde_json::Value) {
    let budget = DEFAULT_CERTIFY_FUZZ_CASES.to_string();
    let run = common::certify(
        target,
        &["--seed", &seed.to_string(), "--fuzz-cases", &budget],
    );
    (run.output.status.code(), run.results)
}

/// Red by the fuzz pass: it fails on every seed and the certification
/// exits 1. That the suite alone passes the variant is checked where the
/// suite's timing is judged (agent_corpus.rs and store_corpus.rs, races
/// aside): on a loaded machine a timing variant (`sleep-cut-short`) may
/// also fail a scenario whose runs no longer overlap, which is red too.
fn assert_red_by_the_fuzz_pass_only(target: &str, dimension: &str) {
    for seed in 1..=3 {
        let (code, r) = certify(target, seed);
        let counts = &r["counts"];
        assert_eq!(
            counts["errored"].as_u64(),
            Some(0),
            "{target} (seed {seed}): {counts}"
        );
        assert_eq!(
            r["fuzz"]["verdict"], "failed",
            "{target} ({dimension}, seed {seed}): the fuzz pass found nothing: {}",
            r["fuzz"]
        );
        assert_eq!(code, Some(1), "{target} (seed {seed})");
    }
}

#[test]
fn two_variants_only_the_fuzzer_finds_are_red_under_certify_on_three_seeds() {
    let teeth = teeth();
    for target in [
        "reference-agent:body-limit-in-characters",
        "broken-memory:status-case-folded",
    ] {
        let (_, dimension) = teeth.iter().find(|(t, _)| *t == target).unwrap();
        assert_red_by_the_fuzz_pass_only(target, dimension);
    }
}

#[test]
#[ignore = "minutes: every variant, three certifications each"]
fn every_variant_only_the_fuzzer_finds_is_red_under_certify_on_three_seeds() {
    let teeth = teeth();
    assert_eq!(teeth.len(), 15, "{teeth:?}");
    for (target, dimension) in teeth {
        assert_red_by_the_fuzz_pass_only(target, dimension);
    }
}
