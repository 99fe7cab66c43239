//! Blame exactly (issue 45): a clause fails only on the evidence of a
//! check that judges it. A failed check fails its own clauses; the steps
//! after it are skipped and their clauses `not judged (stopped at ...)`,
//! unless a step is `always: true`, which still judges its own; a built-in
//! check (an answer invariant) names its own clause.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;

use reqkey_harness::run::event::{ClauseStanding, ScenarioResult, Verdict};
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::scenario::parse_scenario;
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::TargetOptions;

/// Runs one scenario (YAML text) on `spec`.
async fn run_one(spec: &str, yaml: &str) -> ScenarioResult {
    let scenario = parse_scenario(Path::new("inline.yaml"), yaml).expect("the scenario loads");
    let target = open_target(spec, TargetOptions::default())
        .await
        .expect("target opens");
    let summary = runner::run(target, &[scenario], &RunConfig::new(3), &mut []).await;
    summary.results.into_iter().next().expect("one result")
}

/// (clause, standing, why) of each clause of a result.
fn standings(r: &ScenarioResult) -> Vec<(String, &'static str, String)> {
    r.clauses
        .iter()
        .map(|c| {
            (
                c.clause.clone(),
                c.standing.as_str(),
                c.why.clone().unwrap_or_default(),
            )
        })
        .collect()
}

const STORE: &str = "id: t.blame\nlevel: store\nsummary: s
checks: [store.commit.started-answer, store.reads.get-run, store.reads.list-inputs, store.reads.list-runs-order]
steps:
  - commitRunStart: {sessionId: $s, runId: $r, expectedCurrentRunId: null, input: {text: a}}
    expect: {ok: {outcome: started}}
    judges: [store.commit.started-answer]
  - getRun: {sessionId: $s, runId: $r}
    expect: {ok: {status: completed}}
    judges: [store.reads.get-run]
  - listInputs: {sessionId: $s}
    expect: {ok: {$length: 1}}
    judges: [store.reads.list-inputs]
  - listRuns: {sessionId: $s}
    always: true
    expect: {ok: [{runId: $r}]}
    judges: [store.reads.list-runs-order]\n";

#[tokio::test]
async fn a_failed_check_fails_its_own_clauses_and_an_always_step_still_judges_its_own() {
    let r = run_one("memory", STORE).await;
    assert_eq!(r.verdict, Verdict::Fail);
    let failure = r.failure.as_ref().unwrap();
    assert_eq!(failure.clauses, ["store.reads.get-run"]);
    assert!(r.later_failures.is_empty());
    assert_eq!(
        standings(&r),
        [
            ("store.commit.started-answer".into(), "pass", String::new()),
            (
                "store.reads.get-run".into(),
                "fail",
                "steps[1] getRun".into()
            ),
            (
                "store.reads.list-inputs".into(),
                "not_judged",
                "stopped at steps[1] getRun".into()
            ),
            ("store.reads.list-runs-order".into(), "pass", String::new()),
        ]
    );
}

#[tokio::test]
async fn an_always_step_that_fails_too_is_a_second_failure_with_its_own_clauses() {
    let yaml = STORE.replace("{ok: [{runId: $r}]}", "{ok: []}");
    let r = run_one("memory", &yaml).await;
    assert_eq!(r.verdict, Verdict::Fail);
    assert_eq!(r.failure.as_ref().unwrap().clauses, ["store.reads.get-run"]);
    assert_eq!(r.later_failures.len(), 1);
    assert_eq!(r.later_failures[0].clauses, ["store.reads.list-runs-order"]);
    let fail: Vec<&str> = r
        .clauses
        .iter()
        .filter(|c| c.standing == ClauseStanding::Fail)
        .map(|c| c.clause.as_str())
        .collect();
    assert_eq!(fail, ["store.reads.get-run", "store.reads.list-runs-order"]);
}

#[tokio::test]
async fn an_always_step_that_needs_a_variable_its_binder_never_bound_is_not_judged() {
    // steps[1] fails before its bind; the always step uses $seq.
    let yaml = STORE
        .replace(
            "    expect: {ok: {status: completed}}\n",
            "    expect: {ok: {status: completed}}\n    bind: {seq: ok.startSequence}\n",
        )
        .replace("{ok: [{runId: $r}]}", "{ok: [{startSequence: $seq}]}");
    let r = run_one("memory", &yaml).await;
    assert_eq!(r.verdict, Verdict::Fail);
    assert!(r.later_failures.is_empty(), "{:?}", r.later_failures);
    let last = standings(&r).pop().unwrap();
    assert_eq!(last.1, "not_judged");
    assert!(last.2.contains("needs $seq, never bound"), "{last:?}");
}

#[tokio::test]
async fn a_passing_scenario_passes_every_clause_it_judged() {
    let yaml = STORE.replace("{ok: {status: completed}}", "{ok: {status: running}}");
    let r = run_one("memory", &yaml).await;
    assert_eq!(r.verdict, Verdict::Pass, "{:?}", r.failure);
    assert!(r.clauses.iter().all(|c| c.standing == ClauseStanding::Pass));
    assert_eq!(r.clauses.len(), 4);
}

#[tokio::test]
async fn a_built_in_check_names_its_own_clause_not_the_steps() {
    // An agent answer whose key header is malformed must echo nothing of
    // it (SPEC 8): the broken server that echoes it fails that clause,
    // whatever the step judges.
    let yaml = "id: t.echo\nlevel: agent\nsummary: s
checks: [agent.keys.malformed-400]
steps:
  - http: {method: POST, path: '/sessions/${s}/start', headers: [[X-Helix-Request-Key, 'bad key with blanks']], json: {input: {text: hi}}}
    expect: {status: 400}
    judges: [agent.keys.malformed-400]\n";
    let r = run_one("reference-agent:echo-malformed-key", yaml).await;
    assert_eq!(r.verdict, Verdict::Fail, "{:?}", r.clauses);
    assert_eq!(
        r.failure.as_ref().unwrap().clauses,
        ["key.parse.not-echoed"]
    );
    let s = standings(&r);
    assert_eq!(s[0].0, "agent.keys.malformed-400");
    assert_eq!(s[0].1, "not_judged", "{s:?}");
    assert_eq!(s[1].0, "key.parse.not-echoed");
    assert_eq!(s[1].1, "fail");
}
