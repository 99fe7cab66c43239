//! Race safety end to end: the race scenarios through the real loader and
//! runner, with recorded histories checked for linearizability.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::PathBuf;

use common::reqkey;
use reqkey_harness::run::event::Verdict;
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::scenario::{load_paths, Scenario};
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::TargetOptions;

fn race_scenarios() -> Vec<Scenario> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scenarios/store");
    load_paths(&[dir])
        .unwrap()
        .into_iter()
        .filter(|s| s.tags.iter().any(|t| t == "race"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_racy_store_fails_the_race_scenario_with_a_minimal_linearizability_counterexample() {
    let race: Vec<Scenario> = race_scenarios()
        .into_iter()
        .filter(|s| s.id == "request-key.race")
        .collect();
    assert_eq!(race.len(), 1);
    let target = open_target(
        "broken-memory:holder-read-outside-commit",
        TargetOptions::default(),
    )
    .await
    .unwrap();
    // Independent runs (fresh seed and namespace), default trial count.
    for seed in 0..10 {
        let summary = runner::run(target.clone(), &race, &RunConfig::new(seed), &mut []).await;
        let r = &summary.results[0];
        assert_eq!(r.verdict, Verdict::Fail, "seed {seed}: {r:#?}");
        let f = r.failure.as_ref().unwrap();
        assert!(
            f.message.contains("not linearizable"),
            "seed {seed}: {f:#?}"
        );
        let detail = f.detail.as_deref().unwrap_or_default();
        // The winner and one refusal with the wrong cause are enough.
        assert!(
            detail.contains("smallest non-linearizable subset found (2 of 8 operations)"),
            "seed {seed}: {detail}"
        );
        assert!(detail.contains("ok started"), "{detail}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_race_scenarios_pass_on_memory_and_count_trials_that_overlapped() {
    let scenarios = race_scenarios();
    assert!(scenarios.len() >= 3, "{} race scenarios", scenarios.len());
    let target = open_target("memory", TargetOptions::default())
        .await
        .unwrap();
    let summary = runner::run(target, &scenarios, &RunConfig::new(3), &mut []).await;
    for (r, s) in summary.results.iter().zip(&scenarios) {
        assert_eq!(r.verdict, Verdict::Pass, "{r:#?}");
        assert_trials(r, s.repeat);
    }
    let overlapped: u32 = summary.results.iter().map(|r| r.trials_overlapped).sum();
    assert!(overlapped > 0, "no trial overlapped: {summary:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trials_override_the_scenarios_repeat() {
    let scenarios = race_scenarios();
    let target = open_target("memory", TargetOptions::default())
        .await
        .unwrap();
    let mut cfg = RunConfig::new(5);
    cfg.repeat_override = Some(3);
    let summary = runner::run(target, &scenarios, &cfg, &mut []).await;
    for r in &summary.results {
        assert_trials(r, 3);
    }
}

/// `asked` trials ran, every one with its race; more only when none of
/// them overlapped, and then only until one did (at most
/// EXTRA_TRIALS_FACTOR times as many again).
fn assert_trials(r: &reqkey_harness::run::event::ScenarioResult, asked: u32) {
    assert_eq!(r.trials_with_groups, r.trials_run, "{}", r.id);
    assert!(r.trials_overlapped <= r.trials_run, "{}", r.id);
    if r.trials_run > asked {
        let most = asked * (runner::EXTRA_TRIALS_FACTOR + 1);
        assert!(r.trials_run <= most, "{r:#?}");
        assert!(r.trials_overlapped <= 1, "{r:#?}");
    } else {
        assert_eq!(r.trials_run, asked, "{}", r.id);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_linearizable_group_is_checked_against_the_state_left_by_earlier_steps() {
    // A sequential commit, then a group whose only answer is consistent
    // with it: passes. The same group against an empty store would not.
    let yaml = r#"
id: t.lin-after-sequential
level: store
summary: t
checks: [wire.store.concurrent]
steps:
  - commitRunStart: {sessionId: $s, runId: r0, expectedCurrentRunId: null, input: {text: a}, requestKey: k, requestDigest: d}
    expect: any
  - parallel:
      - copies: 2
        commitRunStart: {sessionId: $s, runId: "r-${i}", expectedCurrentRunId: null, input: {text: a}, requestKey: k, requestDigest: d}
    linearizable: true
    judges: [wire.store.concurrent]
"#;
    let s = reqkey_harness::scenario::parse_scenario(std::path::Path::new("t.yaml"), yaml).unwrap();
    let target = open_target("memory", TargetOptions::default())
        .await
        .unwrap();
    let summary = runner::run(target, &[s], &RunConfig::new(1), &mut []).await;
    // The history was linearizable: a pass, or indefinite when the two
    // commits never happened to overlap (the race was not exercised), but
    // never a failure.
    assert!(
        matches!(
            summary.results[0].verdict,
            Verdict::Pass | Verdict::Indefinite
        ),
        "{summary:#?}"
    );
}

fn scenario_block(o: &std::process::Output) -> String {
    let out = String::from_utf8_lossy(&o.stdout);
    out.split("\n---\n").nth(1).unwrap_or_default().to_owned()
}

#[test]
fn reqkey_fuzz_exits_0_on_memory() {
    let o = reqkey(&[
        "fuzz", "--target", "memory", "--cases", "100", "--seed", "9",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    assert!(out.contains("100 programs passed"), "{out}");
}

#[test]
fn reqkey_fuzz_exits_1_with_the_seed_and_a_scenario_that_reqkey_run_replays() {
    let file = std::env::temp_dir().join(format!("reqkey-fuzz-{}.yaml", std::process::id()));
    let file_arg = file.to_str().unwrap();
    let target = "broken-memory:delete-keeps-keys";
    let o = reqkey(&[
        "fuzz", "--target", target, "--cases", "500", "--seed", "4", "--out", file_arg,
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("reproduce with --seed 4"), "{out}");
    let yaml = scenario_block(&o);
    assert!(yaml.contains("id: fuzz.seed-4"), "{out}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{yaml}\n"));
    // A program with a concurrent batch may need a few interleavings.
    let broken = reqkey(&[
        "run", file_arg, "--target", target, "--repeat", "20", "--seed", "1",
    ]);
    assert_eq!(
        broken.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&broken.stdout)
    );
    let memory = reqkey(&[
        "run", file_arg, "--target", "memory", "--repeat", "20", "--seed", "1",
    ]);
    assert_eq!(
        memory.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&memory.stdout)
    );
    let _ = std::fs::remove_file(&file);
}

#[test]
fn reqkey_fuzz_refuses_an_unknown_target_with_exit_2() {
    let o = reqkey(&["fuzz", "--target", "nope"]);
    assert_eq!(o.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrency_overrides_the_copies_of_parallel_items() {
    let race: Vec<Scenario> = race_scenarios()
        .into_iter()
        .filter(|s| s.id == "request-key.race")
        .collect();
    let target = open_target(
        "broken-memory:holder-read-outside-commit",
        TargetOptions::default(),
    )
    .await
    .unwrap();
    let mut cfg = RunConfig::new(2);
    cfg.copies_override = Some(16);
    let summary = runner::run(target, &race, &cfg, &mut []).await;
    let detail = summary.results[0]
        .failure
        .as_ref()
        .unwrap()
        .detail
        .clone()
        .unwrap();
    assert!(detail.contains("of 16 operations"), "{detail}");
}
