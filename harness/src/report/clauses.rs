//! The clauses of a run as every format shows them (issue 45): each
//! scenario's clauses by standing (FAIL, pass, not judged with why), and
//! the run by clause: a clause FAILs on the evidence of the failures that
//! name it (a scenario's failed check, or a violation the fuzz pass proved
//! and blamed on it, issue 54), passes where a check of it passed and
//! none failed, and is not judged (with why) where no check of it reached
//! a verdict.
//!
//! Failures that read the same (one refusal at the first keyed step of
//! many scenarios, say) are one finding: [`ClauseRow::findings`] groups
//! them by step position and message, so a certificate says "in 19
//! scenarios: steps[0] ... expected 201, found 400" once.

use std::collections::BTreeMap;

use crate::run::event::{ClauseStanding, Failure, RunSummary, ScenarioResult, Verdict};
use crate::run::fuzz::pass::FuzzViolation;

/// One scenario's clauses by standing.
#[derive(Debug, Default)]
pub struct ScenarioClauses<'a> {
    pub failed: Vec<&'a str>,
    pub passed: Vec<&'a str>,
    /// Clause and why.
    pub not_judged: Vec<(&'a str, &'a str)>,
}

/// `r`'s clauses by standing, in the scenario's order.
pub fn of_scenario(r: &ScenarioResult) -> ScenarioClauses<'_> {
    let mut out = ScenarioClauses::default();
    for c in &r.clauses {
        match c.standing {
            ClauseStanding::Fail => out.failed.push(&c.clause),
            ClauseStanding::Pass => out.passed.push(&c.clause),
            ClauseStanding::NotJudged => out
                .not_judged
                .push((&c.clause, c.why.as_deref().unwrap_or("no check of it ran"))),
        }
    }
    out
}

/// Every failure of a result that is evidence (a failed verdict's first
/// failure, and the later ones of its `always` steps).
pub fn proofs(r: &ScenarioResult) -> impl Iterator<Item = &Failure> {
    let failed = matches!(r.verdict, Verdict::Fail | Verdict::ExpectedFail);
    r.failure
        .iter()
        .filter(move |_| failed)
        .chain(&r.later_failures)
}

/// The step position of a failure without its label's variable parts
/// (`steps[0]`, `steps[2].parallel`), for grouping findings.
fn position(step: &str) -> &str {
    step.split(' ').next().unwrap_or(step)
}

/// One finding: failures that read the same, in several scenarios.
#[derive(Debug)]
pub struct Finding<'a> {
    /// The step position (`steps[0]`).
    pub step: &'a str,
    pub message: &'a str,
    /// The scenarios it happened in, and each one's failure.
    pub scenarios: Vec<(&'a str, &'a Failure)>,
}

/// One clause of the run.
#[derive(Debug)]
pub struct ClauseRow<'a> {
    pub clause: &'a str,
    pub standing: ClauseStanding,
    /// Scenarios whose checks passed on it.
    pub passed_in: Vec<&'a str>,
    /// The failures that name it, grouped into findings.
    pub findings: Vec<Finding<'a>>,
    /// The fuzz pass's violations blamed on it (where a set of clauses is
    /// blamed, on the set's first clause, [`FuzzViolation::clause`]).
    pub fuzz: Vec<&'a FuzzViolation>,
    /// Scenarios that did not judge it, and why.
    pub not_judged: Vec<(&'a str, &'a str)>,
}

fn empty_row(clause: &str) -> ClauseRow<'_> {
    ClauseRow {
        clause,
        standing: ClauseStanding::NotJudged,
        passed_in: Vec::new(),
        findings: Vec::new(),
        fuzz: Vec::new(),
        not_judged: Vec::new(),
    }
}

/// The run by clause, sorted by clause id: the suite's checks in
/// `summary` and `violations`, the fuzz pass's (a failed pass's only:
/// `report/record.rs` decides which count).
pub fn by_clause<'a>(
    summary: &'a RunSummary,
    violations: &'a [FuzzViolation],
) -> Vec<ClauseRow<'a>> {
    let mut rows: BTreeMap<&str, ClauseRow<'_>> = BTreeMap::new();
    for v in violations {
        rows.entry(&v.clause)
            .or_insert_with(|| empty_row(&v.clause))
            .fuzz
            .push(v);
    }
    for r in &summary.results {
        for c in &r.clauses {
            let row = rows
                .entry(&c.clause)
                .or_insert_with(|| empty_row(&c.clause));
            match c.standing {
                ClauseStanding::Pass => row.passed_in.push(&r.id),
                ClauseStanding::NotJudged => row
                    .not_judged
                    .push((&r.id, c.why.as_deref().unwrap_or("no check of it ran"))),
                ClauseStanding::Fail => {
                    for f in proofs(r).filter(|f| f.clauses.iter().any(|x| x == &c.clause)) {
                        let (step, message) = (position(&f.step), f.message.as_str());
                        match row
                            .findings
                            .iter_mut()
                            .find(|g| g.step == step && g.message == message)
                        {
                            Some(g) => g.scenarios.push((&r.id, f)),
                            None => row.findings.push(Finding {
                                step,
                                message,
                                scenarios: vec![(&r.id, f)],
                            }),
                        }
                    }
                }
            }
        }
    }
    let mut rows: Vec<ClauseRow<'_>> = rows.into_values().collect();
    for row in &mut rows {
        row.standing = if !row.findings.is_empty() || !row.fuzz.is_empty() {
            ClauseStanding::Fail
        } else if !row.passed_in.is_empty() {
            ClauseStanding::Pass
        } else {
            ClauseStanding::NotJudged
        };
    }
    rows
}

/// A standing as reports spell it.
pub fn label(s: ClauseStanding) -> &'static str {
    match s {
        ClauseStanding::Pass => "pass",
        ClauseStanding::Fail => "FAIL",
        ClauseStanding::NotJudged => "not judged",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::event::ClauseVerdict;

    fn result(
        id: &str,
        clauses: &[(&str, ClauseStanding)],
        failure: Option<Failure>,
    ) -> ScenarioResult {
        let verdict = if failure.is_some() {
            Verdict::Fail
        } else {
            Verdict::Pass
        };
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
            failure,
            later_failures: Vec::new(),
            clauses: clauses
                .iter()
                .map(|(c, s)| ClauseVerdict {
                    clause: (*c).to_owned(),
                    standing: *s,
                    why: (*s == ClauseStanding::NotJudged)
                        .then(|| "stopped at steps[0] http".into()),
                })
                .collect(),
            timelines: Vec::new(),
            reason: None,
            note: None,
            history_view: None,
        }
    }

    #[test]
    fn one_refusal_in_many_scenarios_is_one_finding_on_its_clause() {
        use ClauseStanding::*;
        let refused = |id: &str| {
            result(
                id,
                &[
                    ("idem.key.syntax", Fail),
                    ("idem.replay.completed", NotJudged),
                ],
                Some(Failure {
                    step: "steps[0] http POST /orders".into(),
                    message: "answer does not match: at `status`: expected 201, found 400".into(),
                    clauses: vec!["idem.key.syntax".into()],
                    ..Failure::default()
                }),
            )
        };
        let mut summary = crate::run::event::RunSummary::not_judged(
            "t".into(),
            1,
            crate::run::event::Indefinite {
                reason: "x",
                message: "m".into(),
            },
        );
        summary.results = vec![
            refused("a"),
            refused("b"),
            result("c", &[("idem.replay.completed", Pass)], None),
        ];
        let rows = by_clause(&summary, &[]);
        let syntax = rows.iter().find(|r| r.clause == "idem.key.syntax").unwrap();
        assert_eq!(syntax.standing, Fail);
        assert_eq!(syntax.findings.len(), 1, "one finding, not two");
        assert_eq!(syntax.findings[0].scenarios.len(), 2);
        let replay = rows
            .iter()
            .find(|r| r.clause == "idem.replay.completed")
            .unwrap();
        assert_eq!(replay.standing, Pass, "judged pass in c, never failed");
        assert_eq!(replay.not_judged.len(), 2);
        // A violation the fuzz pass proved makes its clause FAIL, passed
        // checks or not, and a clause no scenario judged gets its row.
        let v = |clause: &str| crate::run::fuzz::pass::FuzzViolation {
            clause: clause.into(),
            clauses: vec![clause.into()],
            program: "p".into(),
            message: "m".into(),
            scenario_yaml: "y".into(),
            reproduced: true,
            not_reproduced: None,
        };
        let violations = [v("idem.replay.completed"), v("idem.lock.held")];
        let rows = by_clause(&summary, &violations);
        let standing = |id: &str| rows.iter().find(|r| r.clause == id).map(|r| r.standing);
        assert_eq!(standing("idem.replay.completed"), Some(Fail));
        assert_eq!(standing("idem.lock.held"), Some(Fail));
        assert_eq!(rows.len(), 3);
        let s = of_scenario(&summary.results[0]);
        assert_eq!(s.failed, ["idem.key.syntax"]);
        assert_eq!(s.not_judged[0].0, "idem.replay.completed");
    }
}
