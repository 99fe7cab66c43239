//! Events: what the runner tells reporters.
//!
//! The runner knows nothing of terminals, files or formats; it emits events
//! in order, and every reporter (terminal, JUnit, JSON, certificate)
//! subscribes to the same stream, the way cargo-nextest feeds its displays.

use std::path::PathBuf;

use serde::Serialize;
use serde_json::Value;

use crate::targets::Level;

/// A scenario's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every trial passed.
    Pass,
    /// The target does not conform: an expectation failed.
    Fail,
    /// The harness could not judge (target unreachable, timeout, bad step).
    Error,
    /// Every step passed, but the scenario's point was not exercised: its
    /// parallel groups never overlapped in time in any trial (a race that
    /// did not race). Not a pass: exit 2, like an error.
    Indefinite,
    /// Failed, and listed in `--expected-failures`: reported, not red.
    ExpectedFail,
    /// Passed, but listed in `--expected-failures`: the list is stale, so
    /// the run turns red (someone must take the id off the list).
    UnexpectedPass,
}

impl Verdict {
    /// The verdict's stable lower-case name (as in the JSON report).
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Fail => "fail",
            Verdict::Error => "error",
            Verdict::Indefinite => "indefinite",
            Verdict::ExpectedFail => "expected_fail",
            Verdict::UnexpectedPass => "unexpected_pass",
        }
    }

    /// Does this verdict leave the run green?
    pub fn is_green(self) -> bool {
        matches!(self, Verdict::Pass | Verdict::ExpectedFail)
    }

    /// Applies an `--expected-failures` listing to a raw verdict: an
    /// expected scenario that fails is `ExpectedFail`, one that passes is
    /// `UnexpectedPass`. An error stays an error: the harness could not
    /// judge, so it cannot say the failure is the expected one.
    pub fn expecting_failure(self) -> Verdict {
        match self {
            Verdict::Fail => Verdict::ExpectedFail,
            Verdict::Pass => Verdict::UnexpectedPass,
            other => other,
        }
    }
}

/// Where and how a scenario failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Failure {
    /// 0-based trial index.
    pub trial: u32,
    /// The step, as `steps[3] listInputs` or `steps[1].parallel[4] commitRunStart`.
    pub step: String,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expected: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actual: Option<Value>,
    /// Extra text (a timeline, a counterexample), printed as is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The clauses of spec/SPEC.md the failed check judges (its step's
    /// `judges:`, a group rule's, or a built-in check's own clause): what
    /// this failure, and only it, is evidence against.
    pub clauses: Vec<String>,
}

/// What one clause of a scenario came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ClauseStanding {
    /// A check of it passed and none failed.
    Pass,
    /// A check of it failed (the failure names it).
    Fail,
    /// No check of it ran to a verdict (`why` says what stopped it).
    NotJudged,
}

impl ClauseStanding {
    pub fn as_str(self) -> &'static str {
        match self {
            ClauseStanding::Pass => "pass",
            ClauseStanding::Fail => "fail",
            ClauseStanding::NotJudged => "not_judged",
        }
    }

    /// Parses [`Self::as_str`] back (`certify merge`).
    pub fn parse(s: &str) -> Option<Self> {
        [Self::Pass, Self::Fail, Self::NotJudged]
            .into_iter()
            .find(|c| c.as_str() == s)
    }
}

/// One clause of a scenario and what its checks came to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClauseVerdict {
    pub clause: String,
    pub standing: ClauseStanding,
    /// Not judged: why (`stopped at steps[2] http POST /orders`, `could not
    /// judge steps[0] ...: timeout`, `no trial overlapped`). Fail: the
    /// step of the failed check.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

/// One request of a parallel group drawn as a bar on a timeline: its
/// invoke and return, in microseconds after the trial's first group
/// invoke.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Span {
    /// The answer's name (`as`, `.i` for copies) or `#k`.
    pub name: String,
    pub start_us: u64,
    pub end_us: u64,
}

/// The parallel-group requests of one trial, for a race timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TrialTimeline {
    /// 0-based trial index.
    pub trial: u32,
    /// Did this trial fail (or could not be judged)?
    pub failed: bool,
    pub spans: Vec<Span>,
}

/// At most this many trials of a scenario keep their timeline (the
/// failing trial always does).
pub const MAX_TIMELINE_TRIALS: usize = 100;

/// At most this many operations of a trial are drawn by the history
/// viewer (the smallest failing subset always among them).
pub const MAX_VIEW_OPS: usize = 60;

/// One recorded operation as its level shows it (the level's rules make
/// it from the typed request and its answer: `run::levels`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpShown {
    /// The request, briefly (`commitRunStart r2 exp=null key=k`,
    /// `POST /sessions/s/runs`).
    pub request: String,
    /// The answer, briefly (`ok started r2#1 running key=k`, `201 started
    /// r1`), or `(no answer)`.
    pub answer: String,
    /// The session it names, if any.
    pub session: Option<String>,
}

/// The viewer's lane of a scenario's sequential steps.
pub const SEQUENTIAL_LANE: &str = "(sequential steps)";

/// One operation as the history viewer draws it: a bar from its call to
/// its return in its client's lane, labelled with the call and answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ViewOp {
    /// The client (a lane).
    pub client: String,
    /// Nanoseconds after the view's first call.
    pub call_ns: u64,
    /// `None`: never answered (it may or may not have taken effect).
    pub return_ns: Option<u64>,
    /// The request, briefly (`commitRunStart r2 exp=null key=k`).
    pub request: String,
    /// The answer, briefly (`ok started r2#1 running key=k`).
    pub answer: String,
    /// In the smallest non-linearizable subset found.
    pub failing: bool,
}

/// The smallest failing subset of a linearizability check, as indices
/// into the history it checked.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FailingSubset {
    /// The failing session's operations.
    pub partition: Vec<usize>,
    /// The smallest non-linearizable subset found.
    pub minimal: Vec<usize>,
    pub session: Option<String>,
}

/// One trial's history for the viewer of the HTML page: the failing
/// trial's (its failing session's operations, the subset marked), or the
/// first trial's of a passing scenario.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HistoryView {
    /// 0-based trial index.
    pub trial: u32,
    pub failed: bool,
    /// The session of the failing subset, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// In call order.
    pub ops: Vec<ViewOp>,
    /// Operations of the trial not drawn (other sessions, or past
    /// [`MAX_VIEW_OPS`]).
    pub omitted: usize,
    /// The prefix every id of the run shares (its namespace and trial,
    /// `rk754f148e.2.0.`), left out of the labels so that they show what
    /// differs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id_prefix: Option<String>,
}

/// The session operation `i` names, as its level showed it.
fn session_of(shown_as: &[OpShown], i: usize) -> Option<&str> {
    shown_as.get(i).and_then(|s| s.session.as_deref())
}

/// How operation `i` is shown; an operation recorded without a label
/// (never: the runner records one with each) shows as unknown.
fn label_of(shown_as: &[OpShown], i: usize) -> std::borrow::Cow<'_, OpShown> {
    match shown_as.get(i) {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(OpShown {
            request: "?".to_owned(),
            answer: "?".to_owned(),
            session: None,
        }),
    }
}

impl HistoryView {
    /// The view of `history`: with a failing subset, its session's
    /// operations, the subset marked; else every operation. At most
    /// [`MAX_VIEW_OPS`], the subset first, then the earliest calls. The
    /// operations at the indices in `sequential` were sent one after
    /// another by one flow (a scenario's sequential steps): they share
    /// the lane [`SEQUENTIAL_LANE`], each labelled with its own name.
    pub fn of(
        trial: u32,
        failed: bool,
        history: &[reqkey_check::lin::Operation],
        shown_as: &[OpShown],
        failing: Option<&FailingSubset>,
        sequential: &std::collections::BTreeSet<usize>,
    ) -> HistoryView {
        let candidates: Vec<usize> = match failing {
            Some(f) if !f.partition.is_empty() => f.partition.clone(),
            _ => (0..history.len()).collect(),
        };
        let minimal: &[usize] = failing.map_or(&[], |f| f.minimal.as_slice());
        let mut shown: Vec<usize> = minimal
            .iter()
            .copied()
            .filter(|&i| i < history.len())
            .take(MAX_VIEW_OPS)
            .collect();
        let mut rest: Vec<usize> = candidates
            .into_iter()
            .filter(|i| *i < history.len() && !shown.contains(i))
            .collect();
        rest.sort_by_key(|&i| (history[i].invoke_ns, i));
        let room = MAX_VIEW_OPS.saturating_sub(shown.len());
        shown.extend(rest.into_iter().take(room));
        shown.sort_by_key(|&i| (history[i].invoke_ns, i));
        let t0 = shown
            .iter()
            .map(|&i| history[i].invoke_ns)
            .min()
            .unwrap_or(0);
        // The ids' shared prefix: the session's up to its last dot, when
        // every drawn operation's session starts with it.
        let id_prefix = shown
            .first()
            .and_then(|&i| session_of(shown_as, i))
            .and_then(|s| s.rfind('.').map(|dot| s[..=dot].to_owned()))
            .filter(|p| p.len() >= 6)
            .filter(|p| {
                shown
                    .iter()
                    .all(|&i| session_of(shown_as, i).is_none_or(|s| s.starts_with(p.as_str())))
            });
        let short = |text: String| match &id_prefix {
            Some(p) => text.replace(p.as_str(), ""),
            None => text,
        };
        let ops = shown
            .iter()
            .map(|&i| {
                let o = &history[i];
                let label = label_of(shown_as, i);
                let (client, request) = if sequential.contains(&i) {
                    (
                        SEQUENTIAL_LANE.to_owned(),
                        format!("{}: {}", o.client, label.request),
                    )
                } else {
                    (o.client.clone(), label.request.clone())
                };
                ViewOp {
                    client: short(client),
                    call_ns: o.invoke_ns - t0,
                    return_ns: o.answer.as_ref().map(|_| o.return_ns.max(o.invoke_ns) - t0),
                    request: short(request),
                    answer: short(if o.answer.is_some() {
                        label.answer.clone()
                    } else {
                        "(no answer)".to_owned()
                    }),
                    failing: minimal.contains(&i),
                }
            })
            .collect::<Vec<_>>();
        HistoryView {
            trial,
            failed,
            session: failing.and_then(|f| f.session.clone()),
            omitted: history.len() - ops.len(),
            ops,
            id_prefix,
        }
    }
}

/// The result of one scenario.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScenarioResult {
    pub id: String,
    pub file: PathBuf,
    pub level: Level,
    pub tags: Vec<String>,
    /// The clauses of spec/SPEC.md the scenario checks (its `checks:`):
    /// what a failure breaks, named in every report.
    pub checks: Vec<String>,
    pub summary: String,
    pub verdict: Verdict,
    /// Trials that ran (a failing scenario stops at its first failing trial).
    pub trials_run: u32,
    /// Trials in which the lifetimes of two operations of a parallel group
    /// intersected (one was invoked before the other returned), measured
    /// around each call to the target.
    pub trials_overlapped: u32,
    /// Trials that had a parallel group of two or more requests (a race).
    pub trials_with_groups: u32,
    /// The widest spread, over every parallel group of every trial, between
    /// the first and the last send instant of the group, in µs (`None`
    /// without groups): how tight a race's window really was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_send_spread_us: Option<u64>,
    pub duration_ms: u64,
    /// The first failed check (or what could not be judged).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<Failure>,
    /// Checks of `always` steps that failed after the first, in the same
    /// trial: each evidence against its own clauses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub later_failures: Vec<Failure>,
    /// Each clause of `checks:` (and any other clause a failed built-in
    /// check names): pass, fail or not judged, and why.
    pub clauses: Vec<ClauseVerdict>,
    /// The parallel groups of each trial as timelines (trials with a
    /// group only; at most [`MAX_TIMELINE_TRIALS`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timelines: Vec<TrialTimeline>,
    /// Why a scenario could not be judged, typed (`timeout`, `closed`,
    /// `unreachable`, `too_large`, ...; `docs/reports.md`); `None` unless
    /// the verdict is an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<&'static str>,
    /// What a stage of the scenario measured (a `mixed_histories` step:
    /// seed, programs, operations, overlap), for the reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// One trial's history for the HTML page's viewer (race,
    /// `linearizable` and `mixed_histories` scenarios; not kept by
    /// `certify merge`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub history_view: Option<HistoryView>,
}

/// The result of a whole run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunSummary {
    pub target: String,
    pub seed: u64,
    pub passed: usize,
    pub failed: usize,
    pub errored: usize,
    /// Scenarios that passed every step without exercising their race (no
    /// trial overlapped): verdict `indefinite`.
    pub indefinite_scenarios: usize,
    /// Failed as `--expected-failures` said they would (not in `failed`).
    pub expected_failures: usize,
    /// Passed although listed in `--expected-failures` (not in `passed`).
    pub unexpected_passes: usize,
    pub duration_ms: u64,
    pub results: Vec<ScenarioResult>,
    /// Set when the run as a whole reached no verdict: the target could not
    /// be opened, or the run stopped early because the target stopped
    /// answering. Exit 2.
    pub indefinite: Option<Indefinite>,
    /// What the target's answers showed that every report names without
    /// changing a verdict (the Nagle stall, `targets::latency`).
    pub warnings: Vec<crate::targets::latency::TargetWarning>,
}

/// The results of the scenarios that finished so far, by their index in
/// the run, recorded as soon as each is known (a concurrent run reports
/// them in order later): what a signal keeps, so that a violation proven
/// before it is never lost (`cmd::interrupt_reports`).
#[derive(Debug, Default)]
pub struct Finished {
    results: std::sync::Mutex<std::collections::BTreeMap<usize, ScenarioResult>>,
}

impl Finished {
    /// Records scenario `index`'s result.
    pub fn record(&self, index: usize, result: &ScenarioResult) {
        self.results
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(index, result.clone());
    }

    /// The results recorded so far, in the run's order.
    pub fn results(&self) -> Vec<ScenarioResult> {
        self.results
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }
}

/// Why a run reached no verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Indefinite {
    /// Typed: a target error's reason (`unreachable`, `timeout`, `closed`,
    /// `not_http`, `wrong_protocol`, `too_large`, ...) or `stopped_early`.
    pub reason: &'static str,
    pub message: String,
}

impl RunSummary {
    /// The summary of `results` (in the order they ran), each verdict
    /// counted once: the runner's at the end of a run, a signal's for the
    /// scenarios that ran before it, `certify merge`'s for its shards.
    pub fn of_results(
        target: String,
        seed: u64,
        duration_ms: u64,
        results: Vec<ScenarioResult>,
        indefinite: Option<Indefinite>,
        warnings: Vec<crate::targets::latency::TargetWarning>,
    ) -> RunSummary {
        let count = |v: Verdict| results.iter().filter(|r| r.verdict == v).count();
        RunSummary {
            target,
            seed,
            passed: count(Verdict::Pass),
            failed: count(Verdict::Fail),
            errored: count(Verdict::Error),
            indefinite_scenarios: count(Verdict::Indefinite),
            expected_failures: count(Verdict::ExpectedFail),
            unexpected_passes: count(Verdict::UnexpectedPass),
            duration_ms,
            results,
            indefinite,
            warnings,
        }
    }

    /// A run that judged nothing: the target could not be opened.
    pub fn not_judged(target: String, seed: u64, indefinite: Indefinite) -> RunSummary {
        RunSummary {
            target,
            seed,
            passed: 0,
            failed: 0,
            errored: 0,
            indefinite_scenarios: 0,
            expected_failures: 0,
            unexpected_passes: 0,
            duration_ms: 0,
            results: Vec::new(),
            indefinite: Some(indefinite),
            warnings: Vec::new(),
        }
    }
}

impl RunSummary {
    /// The suite's own exit code (a report's, with the fuzz pass and a
    /// signal, is `report::verdict::RunVerdict`'s), by precedence: 1 a scenario failed (a
    /// proven violation is never hidden behind "no verdict", whatever else
    /// could not be judged) or an expected failure passed; else 2 the
    /// harness could not judge some scenario, or the run; else 0 all
    /// passed (or failed as expected).
    pub fn exit_code(&self) -> u8 {
        if self.failed > 0 || self.unexpected_passes > 0 {
            1
        } else if self.errored > 0 || self.indefinite_scenarios > 0 || self.indefinite.is_some() {
            2
        } else {
            0
        }
    }

    /// Did the run prove a violation and also leave something unjudged?
    /// Reports then say both.
    pub fn also_unjudged(&self) -> bool {
        self.exit_code() == 1
            && (self.errored > 0 || self.indefinite_scenarios > 0 || self.indefinite.is_some())
    }
}

/// What the runner emits, in order.
#[derive(Debug, Clone)]
pub enum Event {
    RunStarted {
        target: String,
        seed: u64,
        scenarios: usize,
    },
    ScenarioStarted {
        index: usize,
        id: String,
    },
    ScenarioFinished {
        index: usize,
        result: Box<ScenarioResult>,
    },
    RunFinished {
        summary: RunSummary,
    },
}

/// A subscriber to the runner's events.
pub trait Reporter: Send {
    fn on_event(&mut self, event: &Event);

    /// Called once after the run: a reporter that writes a file says here
    /// whether it managed to (a report that could not be written is a
    /// harness error, exit 2, not a silently missing file).
    fn finish(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get_run(client: &str, session: &str, at: u64) -> reqkey_check::lin::Operation {
        reqkey_check::lin::Operation {
            client: client.into(),
            request: serde_json::json!({"op": "getRun", "args": {"sessionId": session, "runId": format!("{session}.r")}}),
            invoke_ns: at,
            return_ns: at + 5,
            answer: Some(serde_json::json!({"ok": null})),
        }
    }

    #[test]
    fn a_history_view_keeps_the_failing_subset_within_its_bound() {
        // 100 operations; the subset is two late ones of the partition.
        let history: Vec<_> = (0..100u64)
            .map(|i| get_run(&format!("c.{i}"), "rk1.0.0.s", 1_000 + i * 10))
            .collect();
        let failing = FailingSubset {
            partition: (0..100).collect(),
            minimal: vec![97, 98],
            session: Some("rk1.0.0.s".into()),
        };
        let shown: Vec<OpShown> = history
            .iter()
            .map(|_| OpShown {
                request: "getRun rk1.0.0.s.r".into(),
                answer: "ok null".into(),
                session: Some("rk1.0.0.s".into()),
            })
            .collect();
        let sequential: std::collections::BTreeSet<usize> = [0, 1].into();
        let v = HistoryView::of(2, true, &history, &shown, Some(&failing), &sequential);
        assert_eq!(v.ops.len(), MAX_VIEW_OPS);
        assert_eq!(v.omitted, 100 - MAX_VIEW_OPS);
        assert_eq!(v.ops.iter().filter(|o| o.failing).count(), 2);
        assert_eq!(v.ops[0].call_ns, 0, "times from the first drawn call");
        assert_eq!(v.ops[0].client, SEQUENTIAL_LANE);
        assert_eq!(v.ops[0].request, "c.0: getRun s.r");
        assert_eq!(v.ops[2].client, "c.2");
        assert_eq!(v.id_prefix.as_deref(), Some("rk1.0.0."));
        // Without a failure, every operation (up to the bound), none red.
        let v = HistoryView::of(
            0,
            false,
            &history[..10],
            &shown[..10],
            None,
            &Default::default(),
        );
        assert_eq!((v.ops.len(), v.omitted), (10, 0));
        assert!(v
            .ops
            .iter()
            .all(|o| !o.failing && o.return_ns == Some(o.call_ns + 5)));
    }

    fn summary(failed: usize, errored: usize, indefinite: usize, run: bool) -> RunSummary {
        let mut s = RunSummary::not_judged(
            "t".into(),
            1,
            Indefinite {
                reason: "stopped_early",
                message: "m".into(),
            },
        );
        s.indefinite = run.then_some(s.indefinite.clone()).flatten();
        s.failed = failed;
        s.errored = errored;
        s.indefinite_scenarios = indefinite;
        s
    }

    #[test]
    fn a_proven_violation_outranks_what_could_not_be_judged() {
        for (errored, indefinite, run) in [(1, 0, false), (0, 1, false), (0, 0, true), (2, 3, true)]
        {
            let s = summary(1, errored, indefinite, run);
            assert_eq!(s.exit_code(), 1, "{s:?}");
            assert!(s.also_unjudged());
            assert_eq!(summary(0, errored, indefinite, run).exit_code(), 2);
        }
        assert_eq!(summary(0, 0, 0, false).exit_code(), 0);
        assert!(!summary(1, 0, 0, false).also_unjudged());
    }
}
