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

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;
use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::run::event::{
    Event, FailingSubset, Failure, HistoryView, Indefinite, Reporter, RunSummary, ScenarioResult,
    Span, TrialTimeline, Verdict, MAX_TIMELINE_TRIALS,
};
use crate::run::export::{HistorySink, TrialHistory};
use crate::run::record::Clock;
use crate::run::request::Request;
use crate::targets::{HttpRequest, Level, Target, TargetError};
use reqkey_check::lin::{self, CheckOptions};
use reqkey_scenario::pattern::matches;
use reqkey_scenario::vars::{lookup, Vars};
use reqkey_scenario::{Action, GroupCount, GroupRule, Scenario, Step};

/// How a run is configured.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The seed every random choice flows from.
    pub seed: u64,
    /// Prefix of every fresh value; unique per run so shared backends are
    /// never clobbered.
    pub namespace: String,
    /// Overrides every scenario's `repeat`.
    pub repeat_override: Option<u32>,
    /// Stop after the first scenario that does not pass.
    pub fail_fast: bool,
    /// The bound on every single call.
    pub call_timeout_ms: u64,
    /// The bound on each linearizability check (search steps).
    pub lin_budget_steps: u64,
    /// Overrides `copies:` of every parallel item that has one (the
    /// concurrency of the race scenarios).
    pub copies_override: Option<u32>,
    /// Scenario ids known to fail on this target (`--expected-failures`).
    pub expected_failures: BTreeSet<String>,
    /// Leave the sessions of passing trials in the target
    /// (`--keep-sessions`); by default they are deleted (see [`Trial::clean_up`]).
    pub keep_sessions: bool,
    /// How many scenarios run at once (see [`run_concurrently`]); 1 runs
    /// them one after the other. A fail-fast run is always sequential.
    pub concurrency: usize,
    /// Where the histories of race, `linearizable` and `mixed_histories`
    /// trials go (`--export-histories`); `None`: nowhere.
    pub export_histories: Option<Arc<HistorySink>>,
}

impl RunConfig {
    /// A config with a fresh namespace (from the seed and the clock: two runs
    /// with one seed against one backend must not collide).
    pub fn new(seed: u64) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let nonce = nanos ^ u64::from(std::process::id()).rotate_left(32);
        Self {
            seed,
            namespace: format!("rk{:08x}", (nonce ^ seed.rotate_left(17)) as u32),
            repeat_override: None,
            fail_fast: false,
            call_timeout_ms: 10_000,
            lin_budget_steps: lin::DEFAULT_BUDGET_STEPS,
            copies_override: None,
            expected_failures: BTreeSet::new(),
            keep_sessions: false,
            concurrency: DEFAULT_CONCURRENCY,
            export_histories: None,
        }
    }
}

/// One operation of a parallel group as it happened.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The answer's name (`as`, with `.i` for copies) or `#k`.
    pub name: String,
    /// The request as sent (`{"op", "args"}` for store steps).
    pub request: Value,
    pub invoke: Instant,
    pub ret: Instant,
    pub answer: Value,
}

/// Why a trial stopped.
#[derive(Debug)]
enum Stop {
    Fail(Box<Failure>),
    /// Not judged, with the typed reason.
    Harness(Box<Failure>, &'static str),
}

impl Stop {
    fn fail(f: Failure) -> Stop {
        Stop::Fail(Box::new(f))
    }
    fn harness(f: Failure) -> Stop {
        Stop::Harness(Box::new(f), "harness")
    }
}

fn fail(step: &str, message: impl Into<String>) -> Stop {
    Stop::fail(Failure {
        trial: 0,
        step: step.to_owned(),
        message: message.into(),
        expected: None,
        actual: None,
        detail: None,
    })
}

struct Trial<'a> {
    target: &'a Arc<dyn Target>,
    cfg: &'a RunConfig,
    vars: Vars,
    answers: HashMap<String, Value>,
    rng: SmallRng,
    overlapped: bool,
    had_group: bool,
    /// The trial's monotonic clock and every store operation so far.
    clock: Clock,
    history: Vec<lin::Operation>,
    /// Every parallel-group request of the trial: (name, invoke, return).
    spans: Vec<(String, Instant, Instant)>,
    /// Sessions this trial created fresh (under the run's namespace), to
    /// delete when it passes.
    sessions: BTreeSet<String>,
    /// This trial's seed (the run's, mixed with the scenario and trial).
    seed: u64,
    /// What a `mixed_histories` step did, for the report.
    note: Option<String>,
    /// The widest spread of send instants of any parallel group so far.
    max_send_spread_us: Option<u64>,
    /// How late, at most, an item of a parallel group left after the
    /// instant the group was to start together (a busy machine schedules
    /// a thread late; the scenario's timing premise then did not hold).
    max_late_us: u64,
    /// How far past the barrier this trial's groups start (see
    /// [`GROUP_START_SPIN_US`]).
    group_lead_us: u64,
    /// Indices into `history` of the operations sequential steps sent
    /// (the runner's own flow: one lane of the viewer).
    sequential: BTreeSet<usize>,
    /// The failing subset of a `linearizable` group's check, into `history`.
    judged: Option<FailingSubset>,
    /// What a `mixed_histories` step shows the viewer: one program's
    /// operations (the failing one, or the first), and its failing subset.
    mixed_view: Option<(Vec<lin::Operation>, Option<FailingSubset>, BTreeSet<usize>)>,
}

/// How many times its trial count a race scenario may run more trials
/// looking for one in which its requests overlap.
pub const EXTRA_TRIALS_FACTOR: u32 = 5;
/// The most operations a trial records (a bound, not a limit in practice).
const MAX_HISTORY_OPS: usize = 100_000;
/// How far past the barrier the items of a parallel group start, together
/// (the lead), at first; on a busy machine, where items of a trial left
/// late and did not overlap, the next trial's lead grows to twice the
/// lateness seen, up to [`MAX_GROUP_LEAD_US`]: every item then has time
/// to be scheduled before the common start. Items sleep until
/// [`GROUP_SPIN_US`] before it and spin the rest.
const GROUP_START_SPIN_US: u64 = 200;
/// The longest lead a group's start may get.
pub const MAX_GROUP_LEAD_US: u64 = 50_000;
/// How long, at most, an item spins before the common start.
const GROUP_SPIN_US: u64 = 2_000;
/// An item that leaves this much after its group's start did not race as
/// the scenario meant: a trial that fails with such an item is run again.
pub const LATE_ITEM_US: u64 = 25_000;
/// How many failing trials with a late item a scenario runs again before
/// the failure stands (bounded, so a loaded machine still ends the run).
pub const MAX_LATE_RETRIES: u32 = 3;
/// The most sessions a trial cleans up after itself.
const MAX_CLEANUP_SESSIONS: usize = 1_000;
/// After this many scenarios in a row that could not be judged because
/// the target did not answer (timeout, unreachable, connection closed),
/// the run stops: the rest would only wait out the same silence.
pub const MAX_SILENT_SCENARIOS: usize = 3;

/// The reasons that say the target is not answering.
fn is_silence(reason: Option<&str>) -> bool {
    matches!(reason, Some("timeout" | "unreachable" | "closed"))
}

/// Scenarios run at once by default: they mostly wait (on an agent's
/// scripted runs, on long polls), so this is about latency, not cores.
pub const DEFAULT_CONCURRENCY: usize = 8;

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
    let count = |v: Verdict| results.iter().filter(|r| r.verdict == v).count();
    let summary = RunSummary {
        target: target.describe(),
        seed: cfg.seed,
        passed: count(Verdict::Pass),
        failed: count(Verdict::Fail),
        errored: count(Verdict::Error),
        indefinite_scenarios: count(Verdict::Indefinite),
        expected_failures: count(Verdict::ExpectedFail),
        unexpected_passes: count(Verdict::UnexpectedPass),
        duration_ms: started.elapsed().as_millis() as u64,
        results,
        indefinite,
    };
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
                    }),
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
            // A fault stops or restarts a process every trial shares.
            Action::Fault(_) => false,
            // Its programs use sessions of their own, but it loads the
            // target on purpose: it starts only once nothing else is in
            // flight, like a scenario that names a literal session.
            Action::MixedHistories { .. } => false,
        }
    }
    scenario.steps.iter().all(step_ok)
}

/// A stable per-scenario seed: the run seed mixed with the scenario id.
fn scenario_seed(seed: u64, id: &str) -> u64 {
    id.bytes().fold(seed ^ 0x9e37_79b9_7f4a_7c15, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

async fn run_scenario(
    target: &Arc<dyn Target>,
    scenario: &Scenario,
    index: usize,
    cfg: &RunConfig,
) -> ScenarioResult {
    let started = Instant::now();
    let trials = cfg.repeat_override.unwrap_or(scenario.repeat).max(1);
    let mut result = ScenarioResult {
        id: scenario.id.clone(),
        file: scenario.file.clone(),
        level: scenario.level,
        tags: scenario.tags.clone(),
        checks: scenario.checks.iter().map(|c| c.0.clone()).collect(),
        summary: scenario.summary.clone(),
        verdict: Verdict::Pass,
        trials_run: 0,
        trials_overlapped: 0,
        trials_with_groups: 0,
        max_send_spread_us: None,
        duration_ms: 0,
        failure: None,
        timelines: Vec::new(),
        history_view: None,
        reason: None,
        note: None,
    };
    if scenario.level != target.level() {
        result.verdict = Verdict::Error;
        result.failure = Some(Failure {
            trial: 0,
            step: "scenario".into(),
            message: format!(
                "a {} scenario cannot run on {} (a {} target)",
                scenario.level,
                target.describe(),
                target.level()
            ),
            expected: None,
            actual: None,
            detail: None,
        });
        result.reason = Some("wrong_level");
        return result;
    }
    let base_seed = scenario_seed(cfg.seed, &scenario.id);
    // A race must race: when the scenario's trials all pass without any
    // overlap, more trials are run (up to EXTRA_TRIALS_FACTOR times as many,
    // within MAX_REPEAT) until one overlaps; if none does, the verdict is
    // indefinite. On a busy machine an in-process store answers in
    // microseconds and the threads of a group rarely meet; extra trials
    // look for a meeting rather than call the race untested too soon.
    // The rule is for `parallel` groups: a `mixed_histories` stage reports
    // how many of its batches overlapped but is not held to it (an
    // in-process store that answers without yielding runs its batches one
    // after another, and its programs are still checked).
    let races = has_race_group(scenario);
    let exported = races || judges_histories(scenario);
    let most = trials
        .saturating_mul(EXTRA_TRIALS_FACTOR + 1)
        .min(reqkey_scenario::MAX_REPEAT.max(trials));
    let mut trial_index = 0;
    let mut late_retries = 0u32;
    let mut worst_late_us = 0u64;
    let mut lead_us = GROUP_START_SPIN_US;
    while trial_index < most {
        let wanted_more = trial_index >= trials;
        if wanted_more && (!races || result.trials_with_groups == 0 || result.trials_overlapped > 0)
        {
            break;
        }
        let mut trial = Trial {
            target,
            cfg,
            // A trial run again (a late group) gets fresh ids: the failed
            // one keeps its sessions for inspection.
            vars: Vars::new(match late_retries {
                0 => format!("{}.{index}.{trial_index}", cfg.namespace),
                n => format!("{}.{index}.{trial_index}r{n}", cfg.namespace),
            }),
            answers: HashMap::new(),
            rng: SmallRng::seed_from_u64(base_seed.wrapping_add(u64::from(trial_index))),
            overlapped: false,
            had_group: false,
            clock: Clock::new(),
            history: Vec::new(),
            spans: Vec::new(),
            sessions: BTreeSet::new(),
            seed: base_seed.wrapping_add(u64::from(trial_index)),
            note: None,
            max_send_spread_us: None,
            max_late_us: 0,
            group_lead_us: lead_us,
            judged: None,
            mixed_view: None,
            sequential: BTreeSet::new(),
        };
        let mut outcome = trial.run_steps(&scenario.steps).await;
        // A trial that struck processes leaves the deployment whole again,
        // whatever its verdict: a failure before its own `cont` or
        // `restart` must not decide the next scenario's. (The loader lets
        // only a scenario that declares `faults: true` strike.)
        if scenario.requires.faults == Some(true) {
            if let Err(e) = target.heal().await {
                if outcome.is_ok() {
                    let failure = Failure {
                        trial: trial_index,
                        step: "after the trial: resuming and restarting what it struck".into(),
                        message: e.to_string(),
                        expected: None,
                        actual: None,
                        detail: None,
                    };
                    outcome = Err(Stop::Harness(Box::new(failure), e.reason()));
                }
            }
        }
        // A group that did not overlap because its items left late: give
        // the next trial's groups a longer lead (bounded).
        if trial.had_group && !trial.overlapped && trial.max_late_us > lead_us / 2 {
            lead_us = trial
                .max_late_us
                .saturating_mul(2)
                .clamp(GROUP_START_SPIN_US, MAX_GROUP_LEAD_US);
        }
        if !trial.spans.is_empty()
            && (result.timelines.len() + 1 < MAX_TIMELINE_TRIALS || outcome.is_err())
        {
            result
                .timelines
                .push(timeline(trial_index, outcome.is_err(), &trial.spans));
        }
        if outcome.is_ok() && !cfg.keep_sessions {
            trial.clean_up().await;
        }
        result.trials_run += 1;
        result.trials_overlapped += u32::from(trial.overlapped);
        result.trials_with_groups += u32::from(trial.had_group);
        if trial.note.is_some() {
            result.note = trial.note.take();
        }
        if let Some(spread) = trial.max_send_spread_us {
            result.max_send_spread_us = Some(result.max_send_spread_us.unwrap_or(0).max(spread));
        }
        // A failure in a trial whose group did not start together (an item
        // left late, the machine was busy) may be the lateness's, not the
        // target's: run the trial again, a bounded number of times. A
        // target that is wrong fails the runs that start on time too.
        if matches!(outcome, Err(Stop::Fail(_)))
            && trial.max_late_us > LATE_ITEM_US
            && late_retries < MAX_LATE_RETRIES
        {
            late_retries += 1;
            worst_late_us = worst_late_us.max(trial.max_late_us);
            result.trials_run -= 1;
            result.trials_overlapped -= u32::from(trial.overlapped);
            result.trials_with_groups -= u32::from(trial.had_group);
            result
                .timelines
                .retain(|t| t.trial != trial_index || !t.failed);
            continue;
        }
        // The history viewer of the HTML page: the failing trial's, or
        // the first trial's (not a trial the harness could not judge).
        if exported
            && !matches!(outcome, Err(Stop::Harness(..)))
            && (outcome.is_err() || result.history_view.is_none())
        {
            let failed = outcome.is_err();
            let view = match trial.mixed_view.take() {
                Some((ops, judged, sequential)) => {
                    HistoryView::of(trial_index, failed, &ops, judged.as_ref(), &sequential)
                }
                None => HistoryView::of(
                    trial_index,
                    failed,
                    &trial.history,
                    trial.judged.as_ref(),
                    &trial.sequential,
                ),
            };
            if !view.ops.is_empty() {
                result.history_view = Some(view);
            }
        }
        // The trial's history, as judged, for --export-histories (not a
        // trial the harness could not judge).
        // (Store histories only: an agent's HTTP exchanges are not store
        // operations a store history's checker could judge.)
        let store_level = scenario.level == Level::Store;
        if let Some(sink) = cfg
            .export_histories
            .as_ref()
            .filter(|_| exported && store_level)
        {
            if !matches!(outcome, Err(Stop::Harness(..))) && !trial.history.is_empty() {
                sink.offer(TrialHistory {
                    scenario: scenario.id.clone(),
                    trial: trial_index,
                    failed: outcome.is_err(),
                    operations: std::mem::take(&mut trial.history),
                });
            }
        }
        if let Err(stop) = outcome {
            let (verdict, mut failure, reason) = match stop {
                Stop::Fail(f) => (Verdict::Fail, *f, None),
                Stop::Harness(f, reason) => (Verdict::Error, *f, Some(reason)),
            };
            failure.trial = trial_index;
            result.verdict = verdict;
            result.reason = reason;
            result.failure = Some(failure);
            break;
        }
        trial_index += 1;
    }
    if lead_us > GROUP_START_SPIN_US {
        let said = format!(
            "items of parallel groups left late (a busy machine): later trials gave their groups a {:.1} ms lead to start together",
            lead_us as f64 / 1_000.0
        );
        result.note = Some(match result.note.take() {
            Some(note) => format!("{note}; {said}"),
            None => said,
        });
    }
    if late_retries > 0 {
        let said = format!(
            "{late_retries} failing trial(s) run again: an item of a parallel group left up to {} ms after the group's start (a busy machine), so the race did not run as meant",
            worst_late_us / 1_000
        );
        result.note = Some(match result.note.take() {
            Some(note) => format!("{note}; {said}"),
            None => said,
        });
    }
    if let Some(failure) = no_overlap(&result).filter(|_| races) {
        result.verdict = Verdict::Indefinite;
        result.reason = Some("no_overlap");
        result.failure = Some(failure);
    }
    result.duration_ms = started.elapsed().as_millis() as u64;
    result
}

/// Does the scenario have a `parallel` group of two or more requests (a
/// race the overlap rule holds it to)?
fn has_race_group(scenario: &Scenario) -> bool {
    scenario.steps.iter().any(|step| match &step.action {
        Action::Parallel(items) => {
            items
                .iter()
                .map(|i| i.copies.unwrap_or(1) as usize)
                .sum::<usize>()
                >= 2
        }
        _ => false,
    })
}

/// What the viewer shows of a `mixed_histories` stage: the failing
/// program's operations (checked again, alone, for its failing subset),
/// or the first program's.
fn mixed_view(
    outcome: &crate::run::mixed::MixedOutcome,
    history: &[lin::Operation],
) -> (Vec<lin::Operation>, Option<FailingSubset>, BTreeSet<usize>) {
    let program = match outcome {
        crate::run::mixed::MixedOutcome::Failed { program, .. } => *program,
        _ => 0,
    };
    let prefix = format!("p{program}.");
    let ops: Vec<lin::Operation> = history
        .iter()
        .filter(|o| o.client.starts_with(&prefix))
        .cloned()
        .collect();
    // A program's single steps (`p<n>.step<k>`) are its own sequential
    // flow; a batch's operations (`p<n>.step<k>.<j>`) each a client.
    let sequential: BTreeSet<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, o)| !o.client[prefix.len()..].contains('.'))
        .map(|(i, _)| i)
        .collect();
    if !matches!(outcome, crate::run::mixed::MixedOutcome::Failed { .. }) {
        return (ops, None, sequential);
    }
    let judged = match lin::check(&ops).verdict {
        lin::Verdict::NotLinearizable(c) => Some(FailingSubset {
            partition: c.partition,
            minimal: c.minimal,
            session: c.session,
        }),
        _ => None,
    };
    (ops, judged, sequential)
}

/// Does the scenario check a history for linearizability (a group marked
/// `linearizable: true`, a `mixed_histories` step)?
fn judges_histories(scenario: &Scenario) -> bool {
    scenario.steps.iter().any(|step| match &step.action {
        Action::Parallel(_) => step.linearizable,
        Action::MixedHistories { .. } => true,
        _ => false,
    })
}

/// A passing scenario with parallel groups in which no trial's requests
/// ever overlapped did not test a race: it is indefinite, not a pass.
pub fn no_overlap(result: &ScenarioResult) -> Option<Failure> {
    (result.verdict == Verdict::Pass
        && result.trials_with_groups > 0
        && result.trials_overlapped == 0)
        .then(|| Failure {
            trial: 0,
            step: "parallel".into(),
            message: format!(
                "no trial overlapped (0 of {} trials with a parallel group, extra trials \
                 included): the requests of each group ran one after another at the target, \
                 so the race was never exercised; this is not a pass (raise --trials or \
                 --concurrency, run on a less busy machine, or look at what serializes the \
                 calls)",
                result.trials_with_groups
            ),
            expected: None,
            actual: None,
            detail: None,
        })
}

/// Builds the wire request of a store step from its (substituted) args.
fn store_request(op: &str, args: Value) -> Value {
    let args = if op == "commitRunStart" {
        object([("startRun", args)])
    } else {
        args
    };
    object([("op", Value::from(op)), ("args", args)])
}

/// An object of `pairs`, the values moved in as they are. Not `json!`,
/// which re-serialises a `Value` it is given: with serde_json's
/// `arbitrary_precision` that respells a number's exponent (`2E+3` becomes
/// `2e+3`), and a body must reach the target as the scenario wrote it.
fn object<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Object(pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

/// The invariants every agent answer keeps, whatever its step expects
/// ([`reqkey_check::answer`]): a violation fails the step, naming its clause.
fn universal(
    path: &str,
    step: &Step,
    sent: &Request,
    request: &Value,
    answer: &Value,
) -> Result<(), Stop> {
    let http = match sent {
        Request::Http { request, .. } => Some(request),
        Request::WaitRun { .. } => None,
        _ => return Ok(()),
    };
    match reqkey_check::answer::check_answer(http, answer, step.may_be_cut) {
        None => Ok(()),
        Some(v) => Err(Stop::fail(Failure {
            trial: 0,
            step: path.to_owned(),
            message: format!("[[{}]] (checked on every answer): {}", v.clause, v.message),
            expected: None,
            actual: Some(json!({"request": request, "answer": answer})),
            detail: None,
        })),
    }
}

fn target_stop(step: &str, request: &Request, e: TargetError) -> Stop {
    let failure = Failure {
        trial: 0,
        step: step.to_owned(),
        message: e.to_string(),
        expected: None,
        actual: Some(json!({"request": request.shown()})),
        detail: None,
    };
    if e.is_harness_error() {
        Stop::Harness(Box::new(failure), e.reason())
    } else {
        Stop::fail(failure)
    }
}

impl Trial<'_> {
    async fn run_steps(&mut self, steps: &[Step]) -> Result<(), Stop> {
        for (i, step) in steps.iter().enumerate() {
            let path = format!("steps[{i}] {}", step.action.label());
            match &step.action {
                Action::Parallel(items) => self.run_group(&path, step, items).await?,
                Action::ExpectOneOf(alternatives) => self.expect_one_of(&path, alternatives)?,
                Action::SleepMs(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
                Action::Fault(fault) => {
                    let request = Request::Fault(fault.clone());
                    request
                        .send(self.target.as_ref(), self.cfg.call_timeout_ms)
                        .await
                        .map_err(|e| target_stop(&path, &request, e))?;
                }
                Action::MixedHistories {
                    programs,
                    in_flight,
                } => self.mixed_histories(&path, *programs, *in_flight).await?,
                Action::Store { .. }
                | Action::Rpc(_)
                | Action::Raw(_)
                | Action::Http(_)
                | Action::WaitRun(_) => {
                    let request = self.request(&path, step)?;
                    let invoke_ns = self.clock.now_ns();
                    let answer = match request
                        .send(self.target.as_ref(), self.cfg.call_timeout_ms)
                        .await
                    {
                        Ok(answer) => answer,
                        // A fault cut it, as the scenario allows: nothing
                        // was answered to judge.
                        Err(e) if step.may_be_cut && e.is_silence() => continue,
                        Err(e) => return Err(target_stop(&path, &request, e)),
                    };
                    let return_ns = self.clock.now_ns();
                    let client = step.name.clone().unwrap_or_else(|| format!("steps[{i}]"));
                    if self.history.len() < MAX_HISTORY_OPS {
                        self.sequential.insert(self.history.len());
                    }
                    self.record(client, request.shown(), invoke_ns, return_ns, &answer);
                    self.check_answer(&path, step, &request, answer)?;
                }
            }
        }
        Ok(())
    }

    /// A `mixed_histories` step: random concurrent programs, each history
    /// checked for linearizability ([`crate::run::mixed`]), seeded by the
    /// trial (so by the run's `--seed`), on sessions under the run's
    /// namespace.
    async fn mixed_histories(
        &mut self,
        path: &str,
        programs: u32,
        in_flight: u32,
    ) -> Result<(), Stop> {
        use crate::run::mixed::{run_mixed_recorded, MixedOptions, MixedOutcome};
        if self.target.level() != Level::Store {
            return Err(fail(
                path,
                "mixed_histories runs store operations; this is not a store target",
            ));
        }
        let opts = MixedOptions {
            seed: self.seed,
            programs,
            in_flight,
            namespace: self
                .vars
                .resolve("mixed")
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            lin_budget_steps: self.cfg.lin_budget_steps,
            call_timeout_ms: self.cfg.call_timeout_ms,
            clock: self.clock,
        };
        let (outcome, history) = run_mixed_recorded(self.target, &opts).await;
        self.mixed_view = Some(mixed_view(&outcome, &history));
        // The programs' histories join the trial's, for --export-histories
        // (on sessions of their own, they change no other check's verdict).
        // Whole or not at all: a cut history could be judged otherwise.
        if self.cfg.export_histories.is_some()
            && self.history.len() + history.len() <= MAX_HISTORY_OPS
        {
            self.history.extend(history);
        }
        let stats = match &outcome {
            MixedOutcome::Passed(stats) | MixedOutcome::Failed { stats, .. } => *stats,
            MixedOutcome::Error(reason) => {
                return Err(Stop::harness(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("mixed histories (seed {}): {reason}", self.seed),
                    expected: None,
                    actual: None,
                    detail: None,
                }))
            }
        };
        self.had_group = true;
        self.overlapped |= stats.totals.batches_overlapped > 0;
        self.note = Some(stats.describe());
        for index in 0..programs as usize {
            for session in crate::run::mixed::program_sessions(&opts.namespace, index) {
                if self.sessions.len() < MAX_CLEANUP_SESSIONS {
                    self.sessions.insert(session);
                }
            }
        }
        if let MixedOutcome::Failed {
            program,
            steps,
            sessions,
            reason,
            ..
        } = outcome
        {
            return Err(Stop::fail(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!(
                    "program {program} of seed {} is not linearizable (SPEC 4: every operation is one atomic step, under any concurrency)",
                    self.seed
                ),
                expected: None,
                actual: Some(json!({"sessions": sessions, "program": format!("{steps:?}")})),
                detail: Some(reason),
            }));
        }
        Ok(())
    }

    /// The request of a sending step, its variables filled in. Only what
    /// a variable brings can fail here (the step's shape was checked when
    /// the scenario loaded): a harness error, not a verdict.
    fn request(&mut self, path: &str, step: &Step) -> Result<Request, Stop> {
        let vars = &mut self.vars;
        let mut fill = |v: &Value| vars.substitute(v);
        let request = match &step.action {
            Action::Store { op, args } => Request::Store(store_request(op, fill(args))),
            Action::Rpc(raw) => Request::Store(fill(raw)),
            Action::Raw(text) => Request::Raw(match fill(&Value::String(text.clone())) {
                Value::String(t) => t,
                other => other.to_string(),
            }),
            Action::Http(http) => {
                let request = http.instantiate(&mut fill).map_err(|message| {
                    Stop::harness(Failure {
                        trial: 0,
                        step: path.to_owned(),
                        message,
                        expected: None,
                        actual: None,
                        detail: None,
                    })
                })?;
                Request::Http {
                    request,
                    delay_ms: http.delay_ms,
                    shown: object([("http", fill(&http.source))]),
                }
            }
            Action::WaitRun(wait) => Request::wait_run(wait, &mut fill),
            Action::Fault(fault) => Request::Fault(fault.clone()),
            other => {
                return Err(Stop::harness(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("`{}` sends no request", other.label()),
                    expected: None,
                    actual: None,
                    detail: None,
                }))
            }
        };
        self.note_session(&request);
        Ok(request)
    }

    /// Remembers the session a request names, if the run made it fresh:
    /// only ids under the run's namespace are ever cleaned up, so a
    /// scenario that names a literal session never deletes someone's data.
    fn note_session(&mut self, request: &Request) {
        let Some(session) = request.session() else {
            return;
        };
        let fresh = session
            .strip_prefix(self.cfg.namespace.as_str())
            .is_some_and(|rest| rest.starts_with('.'));
        if fresh && self.sessions.len() < MAX_CLEANUP_SESSIONS {
            self.sessions.insert(session);
        }
    }

    /// Deletes the sessions a passing trial created, so that certifying a
    /// shared database leaves nothing behind (`deleteSession` on a store,
    /// `DELETE /sessions/{id}` on an agent server). Best effort: these
    /// calls are not part of the verdict, and the first one the target
    /// does not answer ends the cleanup (a target that went away is not
    /// waited on once per session). A failing trial keeps its sessions for
    /// inspection; its failure names them.
    async fn clean_up(&mut self) {
        let sessions = std::mem::take(&mut self.sessions);
        for session in sessions {
            let request = match self.target.level() {
                Level::Store => Request::Store(store_request(
                    "deleteSession",
                    json!({ "sessionId": session }),
                )),
                Level::Agent => Request::Http {
                    request: HttpRequest {
                        method: "DELETE".into(),
                        path: format!("/sessions/{session}"),
                        ..HttpRequest::default()
                    },
                    delay_ms: 0,
                    shown: Value::Null,
                },
                // An idem app has no sessions to delete (SPEC 10).
                Level::Idem => continue,
            };
            let answered = request
                .send(self.target.as_ref(), self.cfg.call_timeout_ms)
                .await;
            if answered.is_err() {
                break;
            }
        }
    }

    /// `expect` and `bind` of one answered step; records the named answer.
    fn check_answer(
        &mut self,
        path: &str,
        step: &Step,
        sent: &Request,
        answer: Value,
    ) -> Result<(), Stop> {
        let request = &sent.shown();
        // SPEC 8's invariants are the agent API's; an idem app's answers
        // are judged by their scenarios alone (SPEC 10).
        if self.target.level() != Level::Idem {
            universal(path, step, sent, request, &answer)?;
        }
        if let Action::WaitRun(wait) = &step.action {
            if answer.get("reached") == Some(&json!(true)) {
                return self.check_expectations(path, step, sent, request, answer);
            }
            return Err(Stop::fail(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!(
                    "the run did not reach {} in time",
                    Value::from(wait.statuses.clone())
                ),
                expected: None,
                actual: Some(json!({"request": request, "answer": answer})),
                detail: None,
            }));
        }
        self.check_expectations(path, step, sent, request, answer)
    }

    /// `expect_not_echoed`, `expect`, `expect_raw` and `bind` of one
    /// answered step; records the named answer.
    fn check_expectations(
        &mut self,
        path: &str,
        step: &Step,
        sent: &Request,
        request: &Value,
        answer: Value,
    ) -> Result<(), Stop> {
        for needle in &step.expect_not_echoed {
            let needle = self.vars.substitute(needle);
            let Some(needle) = needle.as_str() else {
                continue;
            };
            if let Some(place) = reqkey_check::answer::echoed_in(&answer, needle) {
                return Err(Stop::fail(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("a value that must appear nowhere was echoed in {place}"),
                    expected: Some(json!({"notEchoed": needle})),
                    actual: Some(json!({"request": request, "answer": answer})),
                    detail: None,
                }));
            }
        }
        if let Some(pattern) = &step.expect {
            let pattern = self.vars.substitute(pattern);
            if let Err(m) = matches(&pattern, &answer) {
                return Err(Stop::fail(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("answer does not match: {m}"),
                    expected: Some(pattern),
                    actual: Some(json!({"request": request, "answer": answer})),
                    detail: None,
                }));
            }
        }
        if let Some(text) = &step.expect_raw {
            self.check_raw(path, text, sent, request, &answer)?;
        }
        self.bind(path, &step.bind, &answer)?;
        if let Some(name) = &step.name {
            self.answers.insert(name.clone(), answer);
        }
        Ok(())
    }

    /// `expect_raw`: the answer is exactly the JSON of `text` (after
    /// `${var}` interpolation). An `http` step's answer is its body.
    fn check_raw(
        &mut self,
        path: &str,
        text: &str,
        sent: &Request,
        request: &Value,
        answer: &Value,
    ) -> Result<(), Stop> {
        let failure = |message: String, expected: Option<Value>| {
            Stop::fail(Failure {
                trial: 0,
                step: path.to_owned(),
                message,
                expected,
                actual: Some(json!({"request": request, "answer": answer})),
                detail: None,
            })
        };
        let text = match self.vars.substitute(&Value::String(text.to_owned())) {
            Value::String(t) => t,
            other => other.to_string(),
        };
        let expected: Value = serde_json::from_str(&text).map_err(|e| {
            Stop::harness(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!("expect_raw is not JSON once its variables are filled in: {e}"),
                expected: None,
                actual: None,
                detail: None,
            })
        })?;
        let actual = if sent.is_http() {
            match answer.get("json") {
                Some(body) => body,
                None => {
                    return Err(failure(
                        "expect_raw: the body is not JSON".into(),
                        Some(expected),
                    ))
                }
            }
        } else {
            answer
        };
        reqkey_scenario::raw::json_equal(&expected, actual).map_err(|m| {
            failure(
                format!("answer is not the expected JSON: {m}"),
                Some(expected),
            )
        })
    }

    fn bind(
        &mut self,
        path: &str,
        bind: &std::collections::BTreeMap<String, String>,
        answer: &Value,
    ) -> Result<(), Stop> {
        for (var, at) in bind {
            let value = lookup(answer, at).ok_or_else(|| {
                Stop::fail(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!("cannot bind ${var}: the answer has nothing at `{at}`"),
                    expected: None,
                    actual: Some(answer.clone()),
                    detail: None,
                })
            })?;
            self.vars.bind(var, value.clone());
        }
        Ok(())
    }

    fn expect_one_of(
        &mut self,
        path: &str,
        alternatives: &[std::collections::BTreeMap<String, Value>],
    ) -> Result<(), Stop> {
        let mut reasons = Vec::new();
        for (k, alternative) in alternatives.iter().enumerate() {
            let mut failed = None;
            for (name, pattern) in alternative {
                let pattern = self.vars.substitute(pattern);
                let answer = self.answers.get(name).cloned().unwrap_or(Value::Null);
                if let Err(m) = matches(&pattern, &answer) {
                    failed = Some(format!("alternative {k}: {name} {m}"));
                    break;
                }
            }
            match failed {
                None => return Ok(()),
                Some(reason) => reasons.push(reason),
            }
        }
        let names: std::collections::BTreeSet<&String> =
            alternatives.iter().flat_map(|a| a.keys()).collect();
        let actual: serde_json::Map<String, Value> = names
            .into_iter()
            .map(|n| {
                (
                    n.clone(),
                    self.answers.get(n).cloned().unwrap_or(Value::Null),
                )
            })
            .collect();
        Err(Stop::fail(Failure {
            trial: 0,
            step: path.to_owned(),
            message: format!("no alternative matched ({})", reasons.join("; ")),
            expected: Some(serde_json::to_value(alternatives).unwrap_or(Value::Null)),
            actual: Some(Value::Object(actual)),
            detail: None,
        }))
    }

    async fn run_group(&mut self, path: &str, group: &Step, items: &[Step]) -> Result<(), Stop> {
        // Expand copies and prepare every request before anything is sent.
        let mut prepared: Vec<(String, &Step, Request, Option<u32>)> = Vec::new();
        for (k, item) in items.iter().enumerate() {
            let copies = item.copies.map(|c| self.cfg.copies_override.unwrap_or(c));
            for copy in 0..copies.unwrap_or(1) {
                let index = copies.map(|_| copy);
                if let Some(i) = index {
                    self.vars.bind("i", json!(i));
                }
                let name = match (&item.name, index) {
                    (Some(n), Some(i)) => format!("{n}.{i}"),
                    (Some(n), None) => n.clone(),
                    (None, Some(i)) => format!("#{k}.{i}"),
                    (None, None) => format!("#{k}"),
                };
                let item_path = format!("{path}[{k}] {}", item.action.label());
                let request = self.request(&item_path, item)?;
                prepared.push((name, item, request, index));
            }
        }
        // A group of two or more requests is a race: whether they overlapped
        // is measured and reported (a group of one overlaps nothing by
        // construction, and claims nothing about races).
        // (A fault is not a request: a group of one request and a fault
        // races nothing.)
        self.had_group |= prepared
            .iter()
            .filter(|(_, _, request, _)| !matches!(request, Request::Fault(_)))
            .count()
            >= 2;
        let mut order: Vec<usize> = (0..prepared.len()).collect();
        order.shuffle(&mut self.rng);
        let barrier = Arc::new(Barrier::new(prepared.len()));
        // Each item runs on an OS thread of its own, driving its call with
        // the runtime's handle, so items really run at once: as tasks, the
        // ones a barrier wakes tend to queue behind each other on one
        // worker, and an in-process store answers faster than a task is
        // woken. All start together at the instant fixed by the first one
        // past the barrier. (Threads, not the blocking pool: a group may
        // hold more items than that pool has threads, and the stores'
        // own blocking calls need it.)
        let start_at = Arc::new(std::sync::OnceLock::<Instant>::new());
        let abort = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let runtime = tokio::runtime::Handle::current();
        type ItemOutcome = Option<(Instant, Instant, u64, Result<Value, TargetError>)>;
        let mut receivers: Vec<(usize, tokio::sync::oneshot::Receiver<ItemOutcome>)> =
            Vec::with_capacity(prepared.len());
        let mut spawn_error = None;
        for &k in &order {
            let target = Arc::clone(self.target);
            let barrier = Arc::clone(&barrier);
            let start_at = Arc::clone(&start_at);
            let abort = Arc::clone(&abort);
            let request = prepared[k].2.clone();
            let timeout_ms = self.cfg.call_timeout_ms;
            let lead_us = self.group_lead_us;
            let runtime = runtime.clone();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("reqkey-parallel-item".into())
                .spawn(move || {
                    let outcome = runtime.block_on(async move {
                        barrier.wait().await;
                        if abort.load(std::sync::atomic::Ordering::SeqCst) {
                            return None;
                        }
                        let go = *start_at
                            .get_or_init(|| Instant::now() + Duration::from_micros(lead_us));
                        // Sleep most of the lead, then spin: bounded by the
                        // lead (at most MAX_GROUP_LEAD_US), spinning at most
                        // GROUP_SPIN_US.
                        let spin_from = go.checked_sub(Duration::from_micros(GROUP_SPIN_US));
                        if let Some(wake) = spin_from {
                            let now = Instant::now();
                            if wake > now {
                                std::thread::sleep(wake - now);
                            }
                        }
                        while Instant::now() < go {
                            std::hint::spin_loop();
                        }
                        // How late this item left (a busy machine schedules a
                        // thread late); then its lifetime at the target starts
                        // when it is sent: after its `delay_ms`, if any.
                        let left = Instant::now();
                        let late_us = u64::try_from(left.saturating_duration_since(go).as_micros())
                            .unwrap_or(u64::MAX);
                        let invoke = left + request.delay();
                        let answer = request.send(target.as_ref(), timeout_ms).await;
                        Some((invoke, Instant::now(), late_us, answer))
                    });
                    let _ = tx.send(outcome);
                });
            match spawned {
                Ok(_) => receivers.push((k, rx)),
                Err(e) => {
                    spawn_error = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = spawn_error {
            // Release the threads already waiting: fill the barrier, and
            // tell them not to call.
            abort.store(true, std::sync::atomic::Ordering::SeqCst);
            for _ in receivers.len()..prepared.len() {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                });
            }
            for (_, rx) in receivers {
                let _ = rx.await;
            }
            return Err(Stop::harness(Failure {
                trial: 0,
                step: path.to_owned(),
                message: format!("could not start a thread for a parallel item: {e}"),
                expected: None,
                actual: None,
                detail: None,
            }));
        }
        let mut outcomes: Vec<Option<(Instant, Instant, Value)>> = vec![None; prepared.len()];
        let mut first_stop = None;
        for (k, rx) in receivers {
            let item_path = format!("{path}[{k}] {}", prepared[k].1.action.label());
            match rx.await {
                Ok(Some((invoke, ret, late_us, Ok(answer)))) => {
                    self.max_late_us = self.max_late_us.max(late_us);
                    outcomes[k] = Some((invoke, ret, answer));
                }
                // A fault cut it, as the scenario allows: nothing was
                // answered to judge.
                Ok(Some((_, _, _, Err(e)))) if prepared[k].1.may_be_cut && e.is_silence() => {}
                Ok(Some((_, _, _, Err(e)))) => {
                    first_stop.get_or_insert(target_stop(&item_path, &prepared[k].2, e));
                }
                Ok(None) | Err(_) => {
                    first_stop.get_or_insert(Stop::harness(Failure {
                        trial: 0,
                        step: item_path,
                        message: "the request's thread ended without an answer (it panicked)"
                            .into(),
                        expected: None,
                        actual: None,
                        detail: None,
                    }));
                }
            }
        }
        if let Some(stop) = first_stop {
            return Err(stop);
        }
        let invokes = outcomes.iter().flatten().map(|(invoke, _, _)| *invoke);
        if let (Some(first), Some(last)) = (invokes.clone().min(), invokes.max()) {
            let spread = u64::try_from(last.duration_since(first).as_micros()).unwrap_or(u64::MAX);
            self.max_send_spread_us = Some(self.max_send_spread_us.unwrap_or(0).max(spread));
        }
        // Faults are not operations of the history.
        let recorded: Vec<Recorded> = prepared
            .iter()
            .zip(outcomes)
            .filter(|((_, _, request, _), _)| !matches!(request, Request::Fault(_)))
            .filter_map(|((name, _, request, _), o)| {
                o.map(|(invoke, ret, answer)| Recorded {
                    name: name.clone(),
                    request: request.shown(),
                    invoke,
                    ret,
                    answer,
                })
            })
            .collect();
        self.overlapped |= overlapped(&recorded);
        self.spans
            .extend(recorded.iter().map(|r| (r.name.clone(), r.invoke, r.ret)));
        for r in &recorded {
            let (invoke_ns, return_ns) = (self.clock.ns_at(r.invoke), self.clock.ns_at(r.ret));
            self.record(
                r.name.clone(),
                r.request.clone(),
                invoke_ns,
                return_ns,
                &r.answer,
            );
        }
        if group.linearizable {
            self.check_linearizable(path)?;
        }
        // Per-item expectations, in declaration order.
        // (Cut items and faults were not recorded: each item finds its own.)
        for (k, (name, item, request, index)) in prepared.iter().enumerate() {
            let Some(rec) = recorded.iter().find(|r| &r.name == name) else {
                continue;
            };
            if let Some(i) = index {
                self.vars.bind("i", json!(i));
            }
            let item_path = format!("{path}[{k}] {}", item.action.label());
            let mut named = (*item).clone();
            named.name = Some(rec.name.clone());
            self.check_answer(&item_path, &named, request, rec.answer.clone())?;
        }
        self.check_group_rules(path, &group.expect_group, &recorded)?;
        Ok(())
    }

    /// Appends one answered request to the trial's history (a raw request
    /// as what it says, when it is JSON: see [`Request::shown`]).
    fn record(
        &mut self,
        client: String,
        request: Value,
        invoke_ns: u64,
        return_ns: u64,
        answer: &Value,
    ) {
        if self.history.len() < MAX_HISTORY_OPS {
            self.history.push(lin::Operation {
                client,
                request,
                invoke_ns,
                return_ns,
                answer: Some(answer.clone()),
            });
        }
    }

    /// Checks the trial's history so far against the sequential spec.
    fn check_linearizable(&mut self, path: &str) -> Result<(), Stop> {
        let opts = CheckOptions {
            budget_steps: self.cfg.lin_budget_steps,
            minimize: true,
            ..CheckOptions::default()
        };
        let report = lin::check_with(&self.history, opts);
        let failure = |message: String, detail: Option<String>| Failure {
            trial: 0,
            step: path.to_owned(),
            message,
            expected: None,
            actual: None,
            detail,
        };
        match report.verdict {
            lin::Verdict::Linearizable => Ok(()),
            lin::Verdict::NotLinearizable(c) => {
                self.judged = Some(FailingSubset {
                    partition: c.partition.clone(),
                    minimal: c.minimal.clone(),
                    session: c.session.clone(),
                });
                Err(Stop::fail(failure(
                    format!(
                        "the history ({} operations) is not linearizable: {}",
                        self.history.len(),
                        c.reason
                    ),
                    Some(c.to_string()),
                )))
            }
            lin::Verdict::Unknown { reason } => Err(Stop::harness(failure(
                format!("linearizability could not be decided: {reason}"),
                None,
            ))),
        }
    }

    fn check_group_rules(
        &mut self,
        path: &str,
        rules: &[GroupRule],
        recorded: &[Recorded],
    ) -> Result<(), Stop> {
        let mut remaining: Vec<&Recorded> = recorded.iter().collect();
        let all: Value = Value::Object(
            recorded
                .iter()
                .map(|r| (r.name.clone(), r.answer.clone()))
                .collect(),
        );
        for (k, rule) in rules.iter().enumerate() {
            let pattern = self.vars.substitute(&rule.pattern);
            let (hit, miss): (Vec<&Recorded>, Vec<&Recorded>) = remaining
                .iter()
                .partition(|r| matches(&pattern, &r.answer).is_ok());
            let ok = match rule.count {
                GroupCount::Exactly(n) => hit.len() == n as usize,
                GroupCount::Rest => miss.is_empty(),
            };
            if !ok {
                let want = match rule.count {
                    GroupCount::Exactly(n) => format!("exactly {n}"),
                    GroupCount::Rest => format!("all {} remaining", remaining.len()),
                };
                return Err(Stop::fail(Failure {
                    trial: 0,
                    step: path.to_owned(),
                    message: format!(
                        "expect_group rule {k}: wanted {want} answers to match, {} did ({})",
                        hit.len(),
                        hit.iter()
                            .map(|r| r.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    expected: Some(pattern),
                    actual: Some(all),
                    detail: None,
                }));
            }
            if let Some(first) = hit.first() {
                self.bind(path, &rule.bind, &first.answer)?;
            } else if !rule.bind.is_empty() {
                return Err(fail(
                    path,
                    format!("expect_group rule {k} matched nothing to bind from"),
                ));
            }
            remaining = miss;
        }
        Ok(())
    }
}

/// A trial's group requests as bars, relative to its first invoke.
fn timeline(trial: u32, failed: bool, spans: &[(String, Instant, Instant)]) -> TrialTimeline {
    let origin = spans.iter().map(|s| s.1).min();
    let us = |t: Instant| {
        origin.map_or(0, |o| {
            u64::try_from(t.saturating_duration_since(o).as_micros()).unwrap_or(u64::MAX)
        })
    };
    TrialTimeline {
        trial,
        failed,
        spans: spans
            .iter()
            .map(|(name, invoke, ret)| Span {
                name: name.clone(),
                start_us: us(*invoke),
                end_us: us(*ret),
            })
            .collect(),
    }
}

/// Did some two operations of the group overlap in time (one invoked
/// before the other returned)?
pub fn overlapped(recorded: &[Recorded]) -> bool {
    let mut spans: Vec<(Instant, Instant)> = recorded.iter().map(|r| (r.invoke, r.ret)).collect();
    spans.sort_unstable();
    let mut latest_return: Option<Instant> = None;
    for (invoke, ret) in spans {
        if latest_return.is_some_and(|r| invoke < r) {
            return true;
        }
        latest_return = Some(latest_return.map_or(ret, |r| r.max(ret)));
    }
    false
}
