//! The runner: scenarios in, events out.
//!
//! Each scenario runs `repeat` trials; each trial gets fresh variables and
//! runs its steps in order. A `parallel` group's requests are prepared
//! first (so every variable is bound before any request leaves), then each
//! is spawned on the multi-threaded runtime, waits at a barrier, and is
//! released together with the others; invoke and return instants are
//! recorded on a monotonic clock. Spawn order is shuffled by the seeded RNG.
//!
//! Every store operation of a trial, sequential or grouped, is appended to
//! the trial's history ([`reqkey_check::lin::Operation`]: request, invoke and return
//! instants, wire answer). A group marked `linearizable: true` has the
//! history so far checked against the sequential spec ([`reqkey_check::lin`])
//! before its expectations: the sequential steps before it fix the state the
//! group started from, and a race bug is reported as a counterexample
//! (timeline and smallest failing subset) rather than as whichever
//! expectation it happened to break first.
//!
//! Every call is bounded by the call timeout, every sleep by
//! `MAX_SLEEP_MS`, every trial count by `MAX_REPEAT`: a run always ends.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

pub use crate::run::config::{RunConfig, DEFAULT_CONCURRENCY};
use crate::run::event::{
    Event, Failure, Indefinite, Reporter, RunSummary, ScenarioResult, Verdict,
};
pub use crate::run::group::overlapped;
pub use crate::run::trial::Recorded;
pub use crate::run::trial::{
    EXTRA_TRIALS_FACTOR, LATE_ITEM_US, MAX_GROUP_LEAD_US, MAX_LATE_RETRIES,
};
pub use crate::run::trials::no_overlap;
use crate::run::trials::run_scenario;
use crate::targets::Target;
use reqkey_scenario::{Action, Scenario, Step};

/// After this many scenarios in a row that could not be judged because
/// the target did not answer (timeout, unreachable, connection closed),
/// the run stops: the rest would only wait out the same silence.
pub const MAX_SILENT_SCENARIOS: usize = 3;

/// The reasons that say the target is not answering.
fn is_silence(reason: Option<&str>) -> bool {
    matches!(reason, Some("timeout" | "unreachable" | "closed"))
}

/// Runs `scenarios` against `target`, emitting events to `reporters`.
pub async fn run(
    target: Arc<dyn Target>,
    scenarios: &[Scenario],
    cfg: &RunConfig,
    reporters: &mut [Box<dyn Reporter>],
) -> RunSummary {
    let started = Instant::now();
    let emit = |reporters: &mut [Box<dyn Reporter>], e: Event| {
        for r in reporters.iter_mut() {
            r.on_event(&e);
        }
    };
    emit(
        reporters,
        Event::RunStarted {
            target: target.describe(),
            seed: cfg.seed,
            scenarios: scenarios.len(),
        },
    );
    if cfg.concurrency > 1 && !cfg.fail_fast {
        let (results, indefinite) =
            run_concurrently(&target, scenarios, cfg, &mut |e| emit(reporters, e)).await;
        return finish(&target, cfg, started, results, indefinite, &mut |e| {
            emit(reporters, e)
        });
    }
    let mut results = Vec::with_capacity(scenarios.len());
    let mut silent_in_a_row = 0;
    let mut indefinite = None;
    for (index, scenario) in scenarios.iter().enumerate() {
        emit(
            reporters,
            Event::ScenarioStarted {
                index,
                id: scenario.id.clone(),
            },
        );
        let mut result = run_scenario(&target, scenario, index, cfg).await;
        if cfg.expected_failures.contains(&scenario.id) {
            result.verdict = result.verdict.expecting_failure();
        }
        if let Some(finished) = &cfg.finished {
            finished.record(index, &result);
        }
        let stop = cfg.fail_fast && !result.verdict.is_green();
        emit(
            reporters,
            Event::ScenarioFinished {
                index,
                result: Box::new(result.clone()),
            },
        );
        if result.verdict == Verdict::Error && is_silence(result.reason) {
            silent_in_a_row += 1;
        } else {
            silent_in_a_row = 0;
        }
        results.push(result);
        if stop {
            break;
        }
        let left = scenarios.len() - index - 1;
        if silent_in_a_row >= MAX_SILENT_SCENARIOS && left > 0 {
            indefinite = Some(Indefinite {
                reason: "stopped_early",
                message: format!(
                    "the target did not answer in {silent_in_a_row} scenarios in a row; \
                     the run stopped early and {left} scenarios were not run"
                ),
            });
            break;
        }
    }
    finish(&target, cfg, started, results, indefinite, &mut |e| {
        emit(reporters, e)
    })
}

/// The summary of a run, emitted and returned.
fn finish(
    target: &Arc<dyn Target>,
    cfg: &RunConfig,
    started: Instant,
    results: Vec<ScenarioResult>,
    indefinite: Option<Indefinite>,
    emit: &mut (dyn FnMut(Event) + Send),
) -> RunSummary {
    let summary = RunSummary::of_results(
        target.describe(),
        cfg.seed,
        started.elapsed().as_millis() as u64,
        results,
        indefinite,
        target.warnings(),
    );
    emit(Event::RunFinished {
        summary: summary.clone(),
    });
    summary
}

/// Runs scenarios up to `cfg.concurrency` at once, and reports them in
/// their order (each `ScenarioStarted` right before its `ScenarioFinished`,
/// once every earlier one is reported), so the output does not depend on
/// which finished first. Only scenarios whose every session id is a fresh
/// `$variable` ([`shares_no_session`]) run beside others; one that names
/// a literal session runs alone. Each scenario keeps its own seed, so a
/// failure replays with `--seed` alone. After [`MAX_SILENT_SCENARIOS`]
/// in a row (in file order) that the target left unanswered, nothing new
/// starts, what is in flight is cancelled and not reported, and the run
/// is indefinite, as a sequential run would be.
pub async fn run_concurrently(
    target: &Arc<dyn Target>,
    scenarios: &[Scenario],
    cfg: &RunConfig,
    emit: &mut (dyn FnMut(Event) + Send),
) -> (Vec<ScenarioResult>, Option<Indefinite>) {
    let mut done: Vec<Option<ScenarioResult>> = vec![None; scenarios.len()];
    let mut reported = 0usize;
    let mut silent_in_a_row = 0usize;
    let mut tasks = tokio::task::JoinSet::new();
    // Reports finished results in order; after MAX_SILENT_SCENARIOS
    // silent ones in a row it reports nothing more, as a sequential run
    // would not have run the rest.
    let mut report = |done: &mut Vec<Option<ScenarioResult>>,
                      reported: &mut usize,
                      silent_in_a_row: &mut usize| {
        while *silent_in_a_row < MAX_SILENT_SCENARIOS {
            let Some(Some(result)) = done.get(*reported) else {
                break;
            };
            if result.verdict == Verdict::Error && is_silence(result.reason) {
                *silent_in_a_row += 1;
            } else {
                *silent_in_a_row = 0;
            }
            emit(Event::ScenarioStarted {
                index: *reported,
                id: result.id.clone(),
            });
            emit(Event::ScenarioFinished {
                index: *reported,
                result: Box::new(result.clone()),
            });
            *reported += 1;
        }
    };
    let launch = |tasks: &mut tokio::task::JoinSet<(usize, ScenarioResult)>, index: usize| {
        let (target, scenario, cfg) = (Arc::clone(target), scenarios[index].clone(), cfg.clone());
        tasks.spawn(async move {
            let mut result = run_scenario(&target, &scenario, index, &cfg).await;
            if cfg.expected_failures.contains(&scenario.id) {
                result.verdict = result.verdict.expecting_failure();
            }
            if let Some(finished) = &cfg.finished {
                finished.record(index, &result);
            }
            (index, result)
        });
    };
    for (index, scenario) in scenarios.iter().enumerate() {
        let alone = !shares_no_session(scenario);
        while silent_in_a_row < MAX_SILENT_SCENARIOS
            && (tasks.len() >= cfg.concurrency.max(1) || (alone && !tasks.is_empty()))
        {
            if let Some(joined) = tasks.join_next().await {
                collect(joined, scenarios, &mut done);
                report(&mut done, &mut reported, &mut silent_in_a_row);
            }
        }
        if silent_in_a_row >= MAX_SILENT_SCENARIOS {
            break;
        }
        launch(&mut tasks, index);
        if alone {
            if let Some(joined) = tasks.join_next().await {
                collect(joined, scenarios, &mut done);
                report(&mut done, &mut reported, &mut silent_in_a_row);
            }
        }
    }
    while silent_in_a_row < MAX_SILENT_SCENARIOS {
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        collect(joined, scenarios, &mut done);
        report(&mut done, &mut reported, &mut silent_in_a_row);
    }
    // Stopped early: what is still in flight is cancelled, not waited on.
    tasks.abort_all();
    while tasks.join_next().await.is_some() {}
    let left = scenarios.len() - reported;
    let indefinite = (silent_in_a_row >= MAX_SILENT_SCENARIOS && left > 0).then(|| Indefinite {
        reason: "stopped_early",
        message: format!(
            "the target did not answer in {MAX_SILENT_SCENARIOS} scenarios in a row; \
             the run stopped early and {left} scenarios were not run"
        ),
    });
    done.truncate(reported);
    (done.into_iter().flatten().collect(), indefinite)
}

/// Files a finished scenario task's result (a task that panicked is an
/// error of the harness, reported on a scenario it cannot name: the
/// first unfinished one).
fn collect(
    joined: Result<(usize, ScenarioResult), tokio::task::JoinError>,
    scenarios: &[Scenario],
    done: &mut [Option<ScenarioResult>],
) {
    match joined {
        Ok((index, result)) => done[index] = Some(result),
        Err(e) => {
            if let Some(index) = done.iter().position(Option::is_none) {
                let s = &scenarios[index];
                done[index] = Some(ScenarioResult {
                    id: s.id.clone(),
                    file: s.file.clone(),
                    level: s.level,
                    tags: s.tags.clone(),
                    checks: s.checks.iter().map(|c| c.0.clone()).collect(),
                    summary: s.summary.clone(),
                    verdict: Verdict::Error,
                    trials_run: 0,
                    trials_overlapped: 0,
                    trials_with_groups: 0,
                    max_send_spread_us: None,
                    duration_ms: 0,
                    timelines: Vec::new(),
                    history_view: None,
                    reason: Some("harness"),
                    note: None,
                    failure: Some(Failure {
                        trial: 0,
                        step: "scenario".into(),
                        message: format!("a scenario task failed: {e}"),
                        expected: None,
                        actual: None,
                        detail: None,
                        clauses: Vec::new(),
                    }),
                    later_failures: Vec::new(),
                    clauses: crate::run::blame::clause_verdicts(
                        &s.checks.iter().map(|c| c.0.clone()).collect::<Vec<_>>(),
                        [],
                        &crate::run::blame::Judged::default(),
                        "the scenario's task failed",
                    ),
                });
            }
        }
    }
}

/// Does every session the scenario names come from a `$variable` (fresh
/// per trial, so no other scenario can touch it)? Looks at `sessionId`
/// fields anywhere in a step and at `/sessions/{id}` in paths.
pub fn shares_no_session(scenario: &Scenario) -> bool {
    fn value_ok(v: &Value) -> bool {
        match v {
            Value::Object(m) => m.iter().all(|(k, v)| {
                let own = match (k.as_str(), v) {
                    ("sessionId", Value::String(s)) => s.starts_with('$'),
                    ("path", Value::String(p)) => p
                        .split("/sessions/")
                        .skip(1)
                        .all(|rest| rest.starts_with('$')),
                    _ => true,
                };
                own && value_ok(v)
            }),
            Value::Array(items) => items.iter().all(value_ok),
            _ => true,
        }
    }
    fn step_ok(step: &Step) -> bool {
        match &step.action {
            Action::Store { args, .. } => value_ok(args),
            Action::Rpc(v) => value_ok(v),
            Action::Http(http) => value_ok(&http.source),
            Action::WaitRun(wait) => value_ok(&wait.source),
            // Raw text names its sessions inside its JSON (`"${s}"`); text
            // that is not JSON is taken to name a literal one.
            Action::Raw(text) => serde_json::from_str::<Value>(text).is_ok_and(|v| value_ok(&v)),
            Action::Parallel(items) => items.iter().all(step_ok),
            Action::ExpectOneOf(_) | Action::SleepMs(_) => true,
            // A fault stops or restarts a process every trial shares; a
            // link fault strikes whichever commit comes first.
            Action::Fault(_) | Action::Link(_) => false,
            // Its programs use sessions of their own, but it loads the
            // target on purpose: it starts only once nothing else is in
            // flight, like a scenario that names a literal session.
            Action::MixedHistories { .. } => false,
        }
    }
    scenario.steps.iter().all(step_ok)
}
