//! One trial of a scenario: its state (variables, answers, history, clock),
//! the sequential steps and the requests they send. Parallel groups are
//! `group.rs`, expectations `expectations.rs`: more `impl Trial` blocks.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use serde_json::{json, Value};

use crate::run::blame::Judged;
use crate::run::config::RunConfig;
use crate::run::event::OpShown;
use crate::run::event::{FailingSubset, Failure};
use crate::run::levels::{store, LevelRules};
use crate::run::record::Clock;
use crate::run::request;
use crate::run::request::Request;
use crate::targets::{Level, Target, TargetError};
use reqkey_check::lin::{self};
use reqkey_scenario::vars::Vars;
use reqkey_scenario::{Action, ClauseRef, Step};

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
pub(super) enum Stop {
    Fail(Box<Failure>),
    /// Not judged, with the typed reason.
    Harness(Box<Failure>, &'static str),
}

impl Stop {
    pub(super) fn fail(f: Failure) -> Stop {
        Stop::Fail(Box::new(f))
    }
    /// A failure that names no clause yet is evidence against `clauses`
    /// (the check's own: a step's `judges:`, an item's, a rule's). A
    /// failure that already names its clause (a built-in check) keeps it.
    pub(super) fn blaming<'c>(self, clauses: impl IntoIterator<Item = &'c ClauseRef>) -> Stop {
        match self {
            Stop::Fail(mut f) if f.clauses.is_empty() => {
                f.clauses = clauses.into_iter().map(|c| c.0.clone()).collect();
                Stop::Fail(f)
            }
            other => other,
        }
    }
    pub(super) fn harness(f: Failure) -> Stop {
        Stop::Harness(Box::new(f), "harness")
    }
}

/// The reason of a parallel group whose connections queued (a full
/// listen queue, `targets/connect_log.rs`): its answers are not
/// concurrent, so its checks are not judged; the trial's observations
/// (`always` steps) still run and judge theirs.
pub(super) const LISTEN_QUEUE: &str = "listen_queue";

pub(super) fn fail(step: &str, message: impl Into<String>) -> Stop {
    Stop::fail(Failure {
        trial: 0,
        step: step.to_owned(),
        message: message.into(),
        expected: None,
        actual: None,
        detail: None,
        clauses: Vec::new(),
    })
}

pub(super) struct Trial<'a> {
    pub(super) target: &'a Arc<dyn Target>,
    pub(super) cfg: &'a RunConfig,
    pub(super) vars: Vars,
    pub(super) answers: HashMap<String, Value>,
    pub(super) rng: SmallRng,
    pub(super) overlapped: bool,
    pub(super) had_group: bool,
    /// The trial's monotonic clock and every store operation so far.
    pub(super) clock: Clock,
    pub(super) history: Vec<lin::Operation>,
    /// How each operation of `history` is shown (its level's labels).
    pub(super) shown: Vec<OpShown>,
    /// The rules of the scenario's level.
    pub(super) rules: &'static dyn LevelRules,
    /// Every parallel-group request of the trial: (name, invoke, return).
    pub(super) spans: Vec<(String, Instant, Instant)>,
    /// Sessions this trial created fresh (under the run's namespace), to
    /// delete when it passes.
    pub(super) sessions: BTreeSet<String>,
    /// This trial's seed (the run's, mixed with the scenario and trial).
    pub(super) seed: u64,
    /// What a `mixed_histories` step did, for the report.
    pub(super) note: Option<String>,
    /// The widest spread of send instants of any parallel group so far.
    pub(super) max_send_spread_us: Option<u64>,
    /// How late, at most, an item of a parallel group left after the
    /// instant the group was to start together (a busy machine schedules
    /// a thread late; the scenario's timing premise then did not hold).
    pub(super) max_late_us: u64,
    /// How far past the barrier this trial's groups start (see
    /// [`GROUP_START_SPIN_US`]).
    pub(super) group_lead_us: u64,
    /// Indices into `history` of the operations sequential steps sent
    /// (the runner's own flow: one lane of the viewer).
    pub(super) sequential: BTreeSet<usize>,
    /// The failing subset of a `linearizable` group's check, into `history`.
    pub(super) judged: Option<FailingSubset>,
    /// What a `mixed_histories` step shows the viewer: one program's
    /// operations (the failing one, or the first), and its failing subset.
    pub(super) mixed_view: Option<(Vec<lin::Operation>, Option<FailingSubset>, BTreeSet<usize>)>,
    /// The clauses this trial's checks passed or did not reach.
    pub(super) verdicts: Judged,
    /// Every failed check of the trial, in order (the first stopped the
    /// steps that are not `always`).
    pub(super) failures: Vec<Failure>,
}

/// How many times its trial count a race scenario may run more trials
/// looking for one in which its requests overlap.
pub const EXTRA_TRIALS_FACTOR: u32 = 5;
/// The most operations a trial records (a bound, not a limit in practice).
pub(super) const MAX_HISTORY_OPS: usize = 100_000;
/// How far past the barrier the items of a parallel group start, together
/// (the lead), at first; on a busy machine, where items of a trial left
/// late and did not overlap, the next trial's lead grows to twice the
/// lateness seen, up to [`MAX_GROUP_LEAD_US`]: every item then has time
/// to be scheduled before the common start. Items sleep until
/// [`GROUP_SPIN_US`] before it and spin the rest.
pub(super) const GROUP_START_SPIN_US: u64 = 200;
/// The longest lead a group's start may get.
pub const MAX_GROUP_LEAD_US: u64 = 50_000;
/// How long, at most, an item spins before the common start.
pub(super) const GROUP_SPIN_US: u64 = 2_000;
/// An item that leaves this much after its group's start did not race as
/// the scenario meant: a trial that fails with such an item is run again.
pub const LATE_ITEM_US: u64 = 25_000;
/// How many failing trials with a late item a scenario runs again before
/// the failure stands (bounded, so a loaded machine still ends the run).
pub const MAX_LATE_RETRIES: u32 = 3;
/// The most sessions a trial cleans up after itself.
pub(super) const MAX_CLEANUP_SESSIONS: usize = 1_000;
/// The invariants every answer of the trial's level keeps, whatever its
/// step expects ([`LevelRules::check_answer`]): a violation fails the
/// step, naming its clause.
pub(super) fn universal(
    rules: &dyn LevelRules,
    path: &str,
    step: &Step,
    sent: &Request,
    request: &Value,
    answer: &Value,
) -> Result<(), Stop> {
    match rules.check_answer(sent, answer, step.may_be_cut) {
        None => Ok(()),
        Some(v) => Err(Stop::fail(Failure {
            trial: 0,
            step: path.to_owned(),
            message: format!("[[{}]] (checked on every answer): {}", v.clause, v.message),
            expected: None,
            actual: Some(json!({"request": request, "answer": answer})),
            detail: None,
            clauses: vec![v.clause.to_owned()],
        })),
    }
}

pub(super) fn target_stop(step: &str, request: &Request, e: TargetError) -> Stop {
    // A protocol violation is the store wire's own check (SPEC 6).
    let clauses = match &e {
        TargetError::Protocol(m) => vec![store::protocol_clause(m).to_owned()],
        _ => Vec::new(),
    };
    let failure = Failure {
        trial: 0,
        step: step.to_owned(),
        message: e.to_string(),
        expected: None,
        actual: Some(json!({"request": request.shown()})),
        detail: None,
        clauses,
    };
    if e.is_harness_error() {
        Stop::Harness(Box::new(failure), e.reason())
    } else {
        Stop::fail(failure)
    }
}

impl Trial<'_> {
    /// Runs the steps in order. A failed check is recorded (against its
    /// own clauses) and the steps after it are skipped, their clauses not
    /// judged, except those marked `always` (observations), which still
    /// judge theirs. A step that could not be judged ends the trial. The
    /// first failure, if any, is the trial's `Err`.
    pub(super) async fn run_steps(&mut self, steps: &[Step]) -> Result<(), Stop> {
        // Names some step binds: an `always` step that needs one its
        // binder never bound (it failed or was skipped) is skipped too.
        let bound_by_steps: BTreeSet<String> =
            steps.iter().flat_map(Step::names_bound).cloned().collect();
        let mut stopped: Option<String> = None;
        // A group whose answers were not concurrent (a full listen queue):
        // not judged, but the observations after it still run.
        let mut unjudged_group: Option<Stop> = None;
        for (i, step) in steps.iter().enumerate() {
            let path = format!("steps[{i}] {}", step.action.label());
            let clauses: Vec<&str> = step.all_judges().iter().map(|c| c.0.as_str()).collect();
            if let Some(why) = &stopped {
                if !step.always {
                    self.verdicts.not_judged(clauses, why);
                    continue;
                }
                let unbound: Vec<String> = step
                    .names_used()
                    .into_iter()
                    .filter(|n| bound_by_steps.contains(n) && self.vars.get(n).is_none())
                    .collect();
                if !unbound.is_empty() {
                    let why = format!("{why}; {path} needs ${}, never bound", unbound.join(", $"));
                    self.verdicts.not_judged(clauses, &why);
                    continue;
                }
            }
            match self.run_step(i, &path, step).await {
                Ok(true) => self.verdicts.pass(clauses),
                Ok(false) => self
                    .verdicts
                    .not_judged(clauses, &format!("{path}: its answer was cut by a fault")),
                Err(stop @ Stop::Fail(_)) => {
                    if let Stop::Fail(f) = stop.blaming(&step.judges) {
                        let why = format!("stopped at {path}");
                        self.verdicts.not_judged(
                            clauses
                                .iter()
                                .copied()
                                .filter(|c| !f.clauses.iter().any(|x| x == c)),
                            &why,
                        );
                        self.failures.push(*f);
                        stopped.get_or_insert(why);
                    }
                }
                Err(Stop::Harness(f, reason)) if reason == LISTEN_QUEUE => {
                    let why = format!("could not judge {path} ({reason})");
                    self.verdicts.not_judged(clauses, &why);
                    stopped.get_or_insert(why);
                    unjudged_group.get_or_insert(Stop::Harness(f, reason));
                }
                Err(Stop::Harness(f, reason)) => {
                    let why = format!("could not judge {path} ({reason})");
                    for rest in &steps[i..] {
                        self.verdicts
                            .not_judged(rest.all_judges().iter().map(|c| c.0.as_str()), &why);
                    }
                    // A proven violation outranks what could not be judged.
                    return match self.failures.first() {
                        Some(first) => Err(Stop::fail(first.clone())),
                        None => Err(Stop::Harness(f, reason)),
                    };
                }
            }
        }
        match (self.failures.first(), unjudged_group) {
            (Some(first), _) => Err(Stop::fail(first.clone())),
            (None, Some(stop)) => Err(stop),
            (None, None) => Ok(()),
        }
    }

    /// One step. `Ok(false)`: it ran, but a fault cut its answer, so
    /// nothing was judged.
    async fn run_step(&mut self, i: usize, path: &str, step: &Step) -> Result<bool, Stop> {
        match &step.action {
            Action::Parallel(items) => self.run_group(path, step, items).await?,
            Action::ExpectOneOf(alternatives) => self.expect_one_of(path, alternatives)?,
            Action::SleepMs(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
            Action::Fault(fault) => {
                let request = Request::Fault(fault.clone());
                request
                    .send(self.target.as_ref(), self.cfg.call_timeout_ms)
                    .await
                    .map_err(|e| target_stop(path, &request, e))?;
            }
            Action::Link(link) => {
                let request = Request::Link(*link);
                request
                    .send(self.target.as_ref(), self.cfg.call_timeout_ms)
                    .await
                    .map_err(|e| target_stop(path, &request, e))?;
            }
            Action::MixedHistories {
                programs,
                in_flight,
            } => self.mixed_histories(path, *programs, *in_flight).await?,
            Action::Store { .. }
            | Action::Rpc(_)
            | Action::Raw(_)
            | Action::Http(_)
            | Action::WaitRun(_) => {
                let request = self.request(path, step)?;
                let invoke_ns = self.clock.now_ns();
                let answer = match request
                    .send(self.target.as_ref(), self.cfg.call_timeout_ms)
                    .await
                {
                    Ok(answer) => answer,
                    // A fault cut it, as the scenario allows: nothing
                    // was answered to judge.
                    Err(e) if step.may_be_cut && e.is_silence() => return Ok(false),
                    Err(e) => return Err(target_stop(path, &request, e)),
                };
                let return_ns = self.clock.now_ns();
                let client = step.name.clone().unwrap_or_else(|| format!("steps[{i}]"));
                if self.history.len() < MAX_HISTORY_OPS {
                    self.sequential.insert(self.history.len());
                }
                self.record(client, &request, invoke_ns, return_ns, &answer);
                self.check_answer(path, step, &request, answer)?;
            }
        }
        Ok(true)
    }

    /// A `mixed_histories` step: random concurrent programs, each history
    /// checked for linearizability ([`crate::run::mixed`]), seeded by the
    /// trial (so by the run's `--seed`), on sessions under the run's
    /// namespace.
    pub(super) async fn mixed_histories(
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
            self.shown
                .extend(history.iter().map(store::shown_operation));
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
                    clauses: Vec::new(),
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
                clauses: Vec::new(),
            }));
        }
        Ok(())
    }

    /// The request of a sending step, its variables filled in. Only what
    /// a variable brings can fail here (the step's shape was checked when
    /// the scenario loaded): a harness error, not a verdict.
    pub(super) fn request(&mut self, path: &str, step: &Step) -> Result<Request, Stop> {
        let vars = &mut self.vars;
        let mut fill = |v: &Value| vars.substitute(v);
        let request = match &step.action {
            Action::Store { op, args } => Request::store(op, fill(args)),
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
                        clauses: Vec::new(),
                    })
                })?;
                Request::Http {
                    request,
                    delay_ms: http.delay_ms,
                    shown: request::object([("http", fill(&http.source))]),
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
                    clauses: Vec::new(),
                }))
            }
        };
        self.note_session(&request);
        Ok(request)
    }

    /// Remembers the session a request names, if the run made it fresh:
    /// only ids under the run's namespace are ever cleaned up, so a
    /// scenario that names a literal session never deletes someone's data.
    pub(super) fn note_session(&mut self, request: &Request) {
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
    pub(super) async fn clean_up(&mut self) {
        let sessions = std::mem::take(&mut self.sessions);
        for session in sessions {
            let Some(request) = self.rules.delete_session(&session) else {
                continue;
            };
            let answered = request
                .send(self.target.as_ref(), self.cfg.call_timeout_ms)
                .await;
            if answered.is_err() {
                break;
            }
        }
    }
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
