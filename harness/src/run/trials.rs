//! One scenario's trials: `repeat` trials with fresh variables, more of
//! them where a race did not overlap or a late item spoilt it, and the
//! verdict (pass, fail, indefinite) they add up to.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::run::blame::{clause_verdicts, none_judged, Judged};
use crate::run::config::RunConfig;
use crate::run::event::{Failure, HistoryView, ScenarioResult, Verdict, MAX_TIMELINE_TRIALS};
use crate::run::export::TrialHistory;
use crate::run::group::timeline;
use crate::run::levels::{self, store};
use crate::run::record::Clock;
use crate::run::trial::{
    Stop, Trial, EXTRA_TRIALS_FACTOR, GROUP_START_SPIN_US, LATE_ITEM_US, MAX_GROUP_LEAD_US,
    MAX_LATE_RETRIES,
};
use crate::targets::Target;
use reqkey_scenario::vars::Vars;
use reqkey_scenario::{Action, Scenario};

/// A stable per-scenario seed: the run seed mixed with the scenario id.
fn scenario_seed(seed: u64, id: &str) -> u64 {
    id.bytes().fold(seed ^ 0x9e37_79b9_7f4a_7c15, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

pub(super) async fn run_scenario(
    target: &Arc<dyn Target>,
    scenario: &Scenario,
    index: usize,
    cfg: &RunConfig,
) -> ScenarioResult {
    // Cut before any reporter keeps it: a target's texts are bounded.
    crate::run::bound::scenario_result(run_scenario_unbounded(target, scenario, index, cfg).await)
}

async fn run_scenario_unbounded(
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
        later_failures: Vec::new(),
        clauses: Vec::new(),
        timelines: Vec::new(),
        history_view: None,
        reason: None,
        note: None,
    };
    let checks: Vec<String> = result.checks.clone();
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
            clauses: Vec::new(),
        });
        result.reason = Some("wrong_level");
        result.clauses = clause_verdicts(
            &checks,
            [],
            &Judged::default(),
            "not run: a scenario of another level",
        );
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
    // What every trial's checks said of the clauses (passes add up).
    let mut judged = Judged::default();
    while trial_index < most {
        let wanted_more = trial_index >= trials;
        if wanted_more && (!races || result.trials_with_groups == 0 || result.trials_overlapped > 0)
        {
            break;
        }
        // A trial run again (a late group) gets fresh ids: the failed
        // one keeps its sessions for inspection.
        let mut vars = Vars::new(match late_retries {
            0 => format!("{}.{index}.{trial_index}", cfg.namespace),
            n => format!("{}.{index}.{trial_index}r{n}", cfg.namespace),
        });
        vars.bind_profile(&cfg.profile_fields);
        vars.set_bare_keys(cfg.bare_keys);
        vars.set_client_ids(scenario.level == reqkey_model::vocab::Level::Idem);
        let mut trial = Trial {
            target,
            cfg,
            vars,
            answers: HashMap::new(),
            rng: SmallRng::seed_from_u64(base_seed.wrapping_add(u64::from(trial_index))),
            overlapped: false,
            had_group: false,
            clock: Clock::new(),
            history: Vec::new(),
            shown: Vec::new(),
            rules: levels::rules(scenario.level),
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
            verdicts: Judged::default(),
            failures: Vec::new(),
        };
        let mut outcome = trial.run_steps(&scenario.steps).await;
        // A trial that struck processes leaves the deployment whole again,
        // whatever its verdict: a failure before its own `cont` or
        // `restart` must not decide the next scenario's. (The loader lets
        // only a scenario that declares `faults: true` strike.)
        if scenario.requires.faults == Some(true) || scenario.requires.link.is_some() {
            if let Err(e) = target.heal().await {
                if outcome.is_ok() {
                    let failure = Failure {
                        trial: trial_index,
                        step: "after the trial: resuming and restarting what it struck".into(),
                        message: e.to_string(),
                        expected: None,
                        actual: None,
                        detail: None,
                        clauses: Vec::new(),
                    };
                    outcome = Err(Stop::Harness(Box::new(failure), e.reason()));
                }
            }
        }
        // What the link faults did, for the reports (the last trial's).
        if scenario.requires.link.is_some() {
            let log = target.link_log();
            if !log.is_empty() {
                trial.note = Some(format!("database link: {}", log.join("; ")));
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
        judged.absorb(std::mem::take(&mut trial.verdicts));
        // The history viewer of the HTML page: the failing trial's, or
        // the first trial's (not a trial the harness could not judge).
        if exported
            && !matches!(outcome, Err(Stop::Harness(..)))
            && (outcome.is_err() || result.history_view.is_none())
        {
            let failed = outcome.is_err();
            let view = match trial.mixed_view.take() {
                Some((ops, judged, sequential)) => {
                    let shown: Vec<_> = ops.iter().map(store::shown_operation).collect();
                    HistoryView::of(
                        trial_index,
                        failed,
                        &ops,
                        &shown,
                        judged.as_ref(),
                        &sequential,
                    )
                }
                None => HistoryView::of(
                    trial_index,
                    failed,
                    &trial.history,
                    &trial.shown,
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
        let store_level = levels::rules(scenario.level).store_histories();
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
            if verdict == Verdict::Fail {
                // The failures after the first, of `always` steps.
                result.later_failures = trial
                    .failures
                    .drain(..)
                    .skip(1)
                    .map(|mut f| {
                        f.trial = trial_index;
                        f
                    })
                    .collect();
            }
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
    let fallback = match result.reason {
        Some(reason) if result.verdict == Verdict::Error => {
            format!("the scenario could not be judged ({reason})")
        }
        _ => "no check of it ran".to_owned(),
    };
    let proofs = result
        .failure
        .iter()
        .filter(|_| result.verdict == Verdict::Fail)
        .chain(&result.later_failures);
    result.clauses = clause_verdicts(&checks, proofs, &judged, &fallback);
    if let Some(failure) = no_overlap(&result).filter(|_| races) {
        result.verdict = Verdict::Indefinite;
        result.reason = Some("no_overlap");
        result.failure = Some(failure);
        none_judged(
            &mut result.clauses,
            "no trial overlapped: the race was never exercised",
        );
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
            clauses: Vec::new(),
        })
}
