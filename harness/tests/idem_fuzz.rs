//! The idem fuzzer has teeth and no false alarms: the reference middleware
//! is never flagged under the profiles it declares, and the check-then-set
//! middleware is found, shrunk, and its scenario fails it under `reqkey
//! run` and passes the reference.
//!
//! CI runs these (in-process, memory storage, one seed);
//! `scripts/idem-fuzz-variants.sh` runs the `#[ignore]`d test: every
//! correct variant on memory and Redis and every racy variant on three
//! seeds.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use reqkey_harness::run::event::Verdict;
use reqkey_harness::run::fuzz::idem::{fuzz_idem, IdemFuzzOptions, IdemFuzzOutcome};
use reqkey_harness::run::fuzz::idem_program::MAX_STEPS;
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::targets::profile::resolve_profile;
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::{Target, TargetOptions};
use reqkey_scenario::parse_scenario;

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn open(rt: &tokio::runtime::Runtime, spec: &str) -> Arc<dyn Target> {
    rt.block_on(open_target(spec, TargetOptions::default()))
        .unwrap()
}

fn fuzz(rt: &tokio::runtime::Runtime, spec: &str, cases: u32, seed: u64) -> IdemFuzzOutcome {
    let target = open(rt, spec);
    let profile = rt
        .block_on(resolve_profile(target.as_ref(), None, 5_000))
        .unwrap()
        .idem
        .unwrap();
    let opts = IdemFuzzOptions {
        cases,
        seed,
        namespace: format!("ifz-test-{seed}-{}", std::process::id()),
        target_name: spec.to_owned(),
        profile,
        call_timeout_ms: 10_000,
        max_shrink_iters: 256,
        long_pauses: 0,
    };
    fuzz_idem(rt, target, &opts)
}

fn replay(rt: &tokio::runtime::Runtime, yaml: &str, spec: &str) -> Verdict {
    let scenario = parse_scenario(std::path::Path::new("fuzz.yaml"), yaml)
        .unwrap_or_else(|e| panic!("{e}\n{yaml}"));
    let summary = rt.block_on(runner::run(
        open(rt, spec),
        &[scenario],
        &RunConfig::new(1),
        &mut [],
    ));
    summary.results[0].verdict
}

pub fn assert_found(rt: &tokio::runtime::Runtime, spec: &str, seed: u64, clean: &str) {
    let outcome = fuzz(rt, spec, 64, seed);
    let IdemFuzzOutcome::Failed(f) = outcome else {
        panic!("fuzzing {spec} with seed {seed} found nothing: {outcome:?}");
    };
    assert!(f.program.len() <= MAX_STEPS, "{spec}: {:#?}", f.program);
    assert!(
        f.reason.contains("idem.effect.at-most-once"),
        "{}",
        f.reason
    );
    assert_eq!(
        replay(rt, &f.scenario_yaml, spec),
        Verdict::Fail,
        "{}",
        f.scenario_yaml
    );
    assert_eq!(
        replay(rt, &f.scenario_yaml, clean),
        Verdict::Pass,
        "{}",
        f.scenario_yaml
    );
}

fn assert_clean(rt: &tokio::runtime::Runtime, spec: &str, cases: u32, seed: u64) {
    match fuzz(rt, spec, cases, seed) {
        IdemFuzzOutcome::Passed { cases: n } => assert_eq!(n, cases),
        other => panic!("{spec} flagged with seed {seed}: {other:#?}"),
    }
}

#[test]
fn check_then_set_is_found_shrunk_and_its_scenario_replays() {
    let rt = rt();
    assert_found(&rt, "broken-idem:check-then-set", 1, "reference-idem");
}

#[test]
fn the_reference_is_never_flagged() {
    let rt = rt();
    for spec in [
        "reference-idem",
        "reference-idem:wait",
        "reference-idem:released",
        "reference-idem:optional",
    ] {
        assert_clean(&rt, spec, 16, 1);
    }
}
