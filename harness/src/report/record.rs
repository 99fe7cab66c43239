//! The one record of a run (issue 54): its verdict, its clauses, its
//! declared fields, its crash and link claims and its closing lines,
//! derived once from the suite's results, the fuzz pass and a signal, and
//! read by every format (Markdown, HTML, JUnit, JSON, terminal, and the
//! certificate `certify merge` makes). No renderer decides any of them
//! again.
//!
//! Why one record: each format used to derive its own rows from the
//! suite alone, so the artifacts disagreed with the fuzz pass and with
//! each other. A certificate showed `idem.effect.at-most-once` pass beside
//! a fuzz row that proved it broken; "declared fields nothing judged"
//! listed `lockMs` in a run whose battery judged it (and failed); the crash
//! row said "does NOT conform" for failures that had nothing to do with a
//! crash; a run whose every scenario ended in an error closed "0 passed,
//! 22 failed". Now:
//!
//! - a clause is FAIL on the evidence of a failed check of it or of a
//!   violation the fuzz pass proved and blamed on it (a violation whose
//!   reproduction did not replay is still proven: the record says why it
//!   did not, never "no verdict"); a failed pass that charges no clause is
//!   said to be red beyond its clauses;
//! - a declared field is judged by the scenarios that applied and judge
//!   it, or else by the fuzz pass (at its declared value, or only up to
//!   so many ms, [`FieldStanding`]), or by nothing;
//! - the crash and link claims count against crashes only the failures
//!   that do not also show without one (`report/crash.rs`);
//! - the closing line counts errors as errors (`report/context.rs`).
//!
//! Pure: a function of the context and the summary.

use crate::report::clauses::{by_clause, ClauseRow};
use crate::report::context::{closing_line, closing_notes, DeclaredField, ReportContext};
use crate::report::verdict::{Outcome, RunVerdict};
use crate::run::event::{ClauseStanding, RunSummary};
use crate::run::fuzz::idem_battery::JudgedField;
use crate::run::fuzz::pass::FuzzViolation;

/// How far a declared field was judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldStanding {
    /// A scenario that applied judges it under its declared value.
    Scenarios,
    /// No scenario does; the fuzz pass judged its declared value.
    Fuzz,
    /// No scenario does; the fuzz pass judged it only this far (a lock
    /// held until completion, a key that never expires).
    FuzzUpToMs(u64),
    /// Nothing judged it: the run says nothing of it.
    Nothing,
    /// The value promises nothing a check could fail on.
    PromisesNothing,
}

impl FieldStanding {
    /// The word JSON and HTML write.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Scenarios => "scenarios",
            Self::Fuzz => "fuzz",
            Self::FuzzUpToMs(_) => "fuzz_up_to",
            Self::Nothing => "nothing",
            Self::PromisesNothing => "promises_nothing",
        }
    }
}

/// One declared field of an idem run: what the suite and the fuzz pass
/// judged of it.
#[derive(Debug, Clone)]
pub struct FieldRow<'a> {
    pub field: &'a DeclaredField,
    /// What the fuzz pass judged of it, when it did.
    pub fuzz: Option<&'a JudgedField>,
    pub standing: FieldStanding,
}

/// The record of a run every format renders.
#[derive(Debug)]
pub struct RunRecord<'a> {
    pub verdict: RunVerdict,
    /// The run by clause, sorted by id: every clause a scenario judged or
    /// a violation of the fuzz pass was blamed on.
    pub clauses: Vec<ClauseRow<'a>>,
    /// Why the run is red beyond its clause rows, when it is.
    pub unclaused: Vec<&'static str>,
    /// The violations the fuzz pass proved (a failed pass's; empty
    /// otherwise), each charged to its clause in [`Self::clauses`].
    pub violations: &'a [FuzzViolation],
    /// An idem run's declared fields (`None` at the other levels).
    pub fields: Option<Vec<FieldRow<'a>>>,
    /// The crash and database-link claims, when the profile makes one.
    pub crash: Option<String>,
    pub link: Option<String>,
    /// The lines that explain the closing count, then the count.
    pub closing_notes: Vec<String>,
    pub closing_line: String,
}

impl RunRecord<'_> {
    /// The declared fields nothing judged, as `field = value`.
    pub fn unjudged_fields(&self) -> Vec<String> {
        self.fields_where(|s| s == FieldStanding::Nothing)
    }

    /// The declared fields only the fuzz pass judged, and only so far:
    /// `field = value` with its reach in ms.
    pub fn part_judged_fields(&self) -> Vec<(String, u64)> {
        self.fields
            .iter()
            .flatten()
            .filter_map(|f| match f.standing {
                FieldStanding::FuzzUpToMs(ms) => Some((f.field.name(), ms)),
                _ => None,
            })
            .collect()
    }

    /// The declared fields no scenario judges and the fuzz pass judged at
    /// their declared value.
    pub fn fuzz_judged_fields(&self) -> Vec<String> {
        self.fields_where(|s| s == FieldStanding::Fuzz)
    }

    fn fields_where(&self, keep: impl Fn(FieldStanding) -> bool) -> Vec<String> {
        self.fields
            .iter()
            .flatten()
            .filter(|f| keep(f.standing))
            .map(|f| f.field.name())
            .collect()
    }

    /// The clauses of a standing, in id order.
    pub fn clauses_with(&self, standing: ClauseStanding) -> Vec<&str> {
        self.clauses
            .iter()
            .filter(|r| r.standing == standing)
            .map(|r| r.clause)
            .collect()
    }
}

/// The record of `summary` (the suite, the scenarios that ran before a
/// signal, or the merged shards) under `ctx` (its fuzz pass, its profile
/// and declared fields).
pub fn of<'a>(ctx: &'a ReportContext, summary: &'a RunSummary) -> RunRecord<'a> {
    let verdict = RunVerdict::of(summary, ctx.fuzz.as_ref());
    // Only a failed pass's violations are evidence: the verdict says the
    // pass failed exactly when they are (`certify merge` refuses a results
    // file that lists violations beside another verdict).
    let violations: &[FuzzViolation] = match &ctx.fuzz {
        Some(f) if verdict.fuzz_failed => &f.violations,
        _ => &[],
    };
    let clauses = by_clause(summary, violations);
    debug_assert!(
        verdict.outcome == Outcome::Fail
            || summary.expected_failures > 0
            || clauses.iter().all(|r| r.standing != ClauseStanding::Fail),
        "a clause FAIL in a run that proved nothing"
    );
    let mut unclaused = Vec::new();
    if verdict.fuzz_failed && violations.is_empty() {
        unclaused.push("the fuzz pass found a failing program (shown whole in its section; it is charged to no clause here)");
    }
    if summary.unexpected_passes > 0 {
        unclaused.push("a scenario listed in --expected-failures passed (take it off the list)");
    }
    let fuzz_failed: Vec<&str> = violations.iter().map(|v| v.clause.as_str()).collect();
    let judged: &[JudgedField] = ctx
        .fuzz
        .as_ref()
        .map_or(&[], |f| f.judged_fields.as_slice());
    let fields = ctx.declared_fields.as_ref().map(|declared| {
        declared
            .iter()
            .map(|field| {
                let fuzz = judged.iter().find(|j| j.field == field.field);
                // A timing field declared `null` (never, until completion)
                // is reached by no wait: where the fuzz pass timed it, its
                // reach is what the run says of it, scenarios or not
                // (issue 55: "every declared value is judged" only when
                // true).
                let never = matches!(field.field.as_str(), "expiryMs" | "lockMs")
                    && field.value == "null"
                    && fuzz.is_some_and(|j| j.up_to_ms.is_some());
                let standing = if field.promises_nothing {
                    FieldStanding::PromisesNothing
                } else if !field.scenarios.is_empty() && !never {
                    FieldStanding::Scenarios
                } else {
                    match fuzz {
                        Some(JudgedField {
                            up_to_ms: Some(ms), ..
                        }) => FieldStanding::FuzzUpToMs(*ms),
                        Some(_) => FieldStanding::Fuzz,
                        None => FieldStanding::Nothing,
                    }
                };
                FieldRow {
                    field,
                    fuzz,
                    standing,
                }
            })
            .collect()
    });
    let crash = ctx
        .profile
        .as_ref()
        .and_then(|p| crate::report::crash::claim(p, &summary.results, &fuzz_failed));
    let link = ctx
        .profile
        .as_ref()
        .and_then(|p| crate::report::crash::link_claim(p, &summary.results, &fuzz_failed));
    RunRecord {
        closing_notes: closing_notes(summary, &verdict, violations),
        closing_line: closing_line(summary, &verdict),
        verdict,
        clauses,
        unclaused,
        violations,
        fields,
        crash,
        link,
    }
}

/// One violation's reproduction as every format says it: replayed red
/// against the target, or why it did not replay (still a proven
/// violation: the program's answers broke the clause). `inert` makes the
/// reason (harness text, read back from a file by `certify merge`) inert
/// in the format's own way.
pub fn reproduction(v: &FuzzViolation, inert: impl Fn(&str) -> String) -> String {
    if v.reproduced && v.scenario_yaml.is_empty() {
        // A probe at scale: its reproduction is the probes run again.
        "reproduction replayed: the probes at scale, run again on fresh keys, failed the target on the same clause".to_owned()
    } else if v.reproduced {
        "reproduction replayed: it failed the target on the same clause".to_owned()
    } else {
        format!(
            "reproduction did not replay: {} (the violation stands: the program's answers broke the clause)",
            inert(v.not_reproduced.as_deref().unwrap_or("no reason given"))
        )
    }
}

/// The clauses blamed together with a violation's first, when no single
/// clause explained its answers.
pub fn blamed_with(v: &FuzzViolation) -> Vec<&str> {
    v.clauses
        .iter()
        .map(String::as_str)
        .filter(|c| *c != v.clause)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::run::event::{ClauseVerdict, Failure, Indefinite, ScenarioResult, Verdict};
    use crate::run::fuzz::pass::FuzzPass;

    fn result(id: &str, clauses: &[(&str, ClauseStanding)], verdict: Verdict) -> ScenarioResult {
        let failed: Vec<String> = clauses
            .iter()
            .filter(|(_, s)| *s == ClauseStanding::Fail)
            .map(|(c, _)| (*c).to_owned())
            .collect();
        ScenarioResult {
            id: id.into(),
            file: "f.yaml".into(),
            level: crate::targets::Level::Idem,
            tags: Vec::new(),
            checks: clauses.iter().map(|(c, _)| (*c).to_owned()).collect(),
            summary: "s".into(),
            verdict,
            trials_run: 1,
            trials_overlapped: 0,
            trials_with_groups: 0,
            max_send_spread_us: None,
            duration_ms: 0,
            failure: (verdict != Verdict::Pass).then(|| Failure {
                step: "steps[0] http POST /orders".into(),
                message: "answer does not match".into(),
                clauses: failed,
                ..Failure::default()
            }),
            later_failures: Vec::new(),
            clauses: clauses
                .iter()
                .map(|(c, s)| ClauseVerdict {
                    clause: (*c).to_owned(),
                    standing: *s,
                    why: (*s == ClauseStanding::NotJudged).then(|| "stopped".into()),
                })
                .collect(),
            timelines: Vec::new(),
            reason: (verdict == Verdict::Error).then_some("timeout"),
            note: None,
            history_view: None,
        }
    }

    fn violation(clause: &str, reproduced: bool) -> FuzzViolation {
        FuzzViolation {
            clause: clause.into(),
            clauses: vec![clause.into()],
            program: "case 3: burst of 8".into(),
            message: "two of 8 duplicates ran".into(),
            scenario_yaml: "id: idem.fuzz.seed-7\n".into(),
            reproduced,
            not_reproduced: (!reproduced).then(|| "the race did not show in 20 trials".into()),
        }
    }

    fn summary(results: Vec<ScenarioResult>) -> RunSummary {
        RunSummary::of_results("t".into(), 7, 1, results, None, Vec::new())
    }

    fn failed_fuzz(violations: Vec<FuzzViolation>) -> FuzzPass {
        FuzzPass {
            cases: 32,
            verdict: "failed",
            reason: Some("the battery's program 3".into()),
            violations,
            ..FuzzPass::skipped(crate::targets::Level::Idem, 7)
        }
    }

    /// Issue 54: the clause table showed `idem.effect.at-most-once` pass
    /// beside a fuzz row that proved it broken.
    #[test]
    fn a_clause_the_fuzz_pass_broke_is_fail_whatever_the_scenarios_said() {
        use ClauseStanding::*;
        let mut ctx = ReportContext::new("certify", "t");
        ctx.fuzz = Some(failed_fuzz(vec![
            violation("idem.effect.at-most-once", true),
            violation("idem.lock.held", false),
        ]));
        let s = summary(vec![result(
            "burst",
            &[("idem.effect.at-most-once", Pass)],
            Verdict::Pass,
        )]);
        let rec = of(&ctx, &s);
        assert_eq!(rec.verdict.exit_code, 1);
        assert_eq!(
            rec.clauses_with(Fail),
            ["idem.effect.at-most-once", "idem.lock.held"],
            "a clause no scenario judged gets a row of its own"
        );
        assert!(rec.unclaused.is_empty(), "{:?}", rec.unclaused);
        let lock = rec
            .clauses
            .iter()
            .find(|r| r.clause == "idem.lock.held")
            .unwrap();
        // Not reproduced, and still a proven violation, saying why.
        assert_eq!(lock.fuzz.len(), 1);
        let said = reproduction(lock.fuzz[0], str::to_owned);
        assert!(
            said.contains("did not replay: the race did not show in 20 trials")
                && said.contains("the violation stands"),
            "{said}"
        );
        assert!(rec.closing_notes.iter().any(|n| n.contains(
            "the fuzz pass proved 2 violations (idem.effect.at-most-once, idem.lock.held)"
        )));
        // A failed pass that blames nothing is red beyond its clauses.
        ctx.fuzz = Some(failed_fuzz(Vec::new()));
        let rec = of(&ctx, &s);
        assert_eq!(rec.clauses_with(Fail), Vec::<&str>::new());
        assert_eq!(rec.unclaused.len(), 1);
        // A pass that could not judge proves nothing of any clause.
        ctx.fuzz = Some(FuzzPass {
            verdict: "error",
            ..failed_fuzz(vec![violation("idem.lock.held", true)])
        });
        let rec = of(&ctx, &s);
        assert_eq!(rec.clauses_with(Fail), Vec::<&str>::new());
        assert_eq!(rec.verdict.exit_code, 2);
    }

    fn field(name: &str, value: &str, scenarios: &[&str]) -> DeclaredField {
        DeclaredField {
            field: name.into(),
            value: value.into(),
            scenarios: scenarios.iter().map(|s| (*s).to_owned()).collect(),
            promises_nothing: false,
        }
    }

    /// Issue 54: "declared fields nothing judged" listed `lockMs` in a run
    /// whose battery judged it and failed.
    #[test]
    fn a_declared_field_the_fuzz_pass_judged_is_not_unjudged() {
        let mut ctx = ReportContext::new("certify", "t");
        ctx.declared_fields = Some(vec![
            field("keySyntax", "sf-string", &["idem.replay-after-completion"]),
            field("lockMs", "a duration", &[]),
            field("expiryMs", "null", &[]),
            field("durable", "true", &[]),
        ]);
        let s = summary(Vec::new());
        assert_eq!(
            of(&ctx, &s).unjudged_fields(),
            ["lockMs = a duration", "expiryMs = null", "durable = true"]
        );
        let mut pass = failed_fuzz(vec![violation("idem.lock.held", true)]);
        pass.judged_fields = vec![
            JudgedField {
                field: "lockMs".into(),
                up_to_ms: None,
            },
            JudgedField {
                field: "expiryMs".into(),
                up_to_ms: Some(3_000),
            },
        ];
        ctx.fuzz = Some(pass);
        let rec = of(&ctx, &s);
        assert_eq!(rec.unjudged_fields(), ["durable = true"]);
        assert_eq!(rec.fuzz_judged_fields(), ["lockMs = a duration"]);
        assert_eq!(
            rec.part_judged_fields(),
            [("expiryMs = null".to_owned(), 3_000)]
        );
    }

    /// Issue 54: a run whose 22 scenarios all ended in errors (exit 2)
    /// closed "0 passed, 22 failed".
    #[test]
    fn a_run_of_errors_closes_saying_errors() {
        use ClauseStanding::*;
        let ctx = ReportContext::new("certify", "t");
        let errors: Vec<ScenarioResult> = (0..22)
            .map(|i| {
                result(
                    &format!("s{i}"),
                    &[("idem.key.syntax", NotJudged)],
                    Verdict::Error,
                )
            })
            .collect();
        let s = summary(errors);
        let rec = of(&ctx, &s);
        assert_eq!(rec.verdict.exit_code, 2);
        assert_eq!(rec.closing_line, "0 passed, 0 failed, 22 errors");
        let mut s = summary(vec![result("a", &[], Verdict::Pass)]);
        s.indefinite = Some(Indefinite {
            reason: "unreachable",
            message: "m".into(),
        });
        assert_eq!(
            of(&ctx, &s).closing_line,
            "1 passed, 0 failed; no verdict (unreachable)"
        );
    }
}
