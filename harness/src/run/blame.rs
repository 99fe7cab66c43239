//! What each clause of a scenario came to, on the evidence of the checks
//! that judge it (issue 45): `pass` (a check of it passed, none failed),
//! `fail` (a check of it failed: that failure is the evidence), `not
//! judged` (no check of it ran to a verdict, and why).
//!
//! A failed check fails its own clauses only ([`Failure::clauses`]); a
//! clause whose checks were skipped after another check failed, or could
//! not be judged, is never reported as broken.

use std::collections::{BTreeMap, BTreeSet};

use crate::run::event::{ClauseStanding, ClauseVerdict, Failure};

/// What the checks of a scenario's trials said about clauses.
#[derive(Debug, Default, Clone)]
pub struct Judged {
    /// Clauses a check passed on (in any trial).
    pub passed: BTreeSet<String>,
    /// Clauses no check reached a verdict on, and why (the first reason).
    pub unjudged: BTreeMap<String, String>,
}

impl Judged {
    /// Records that a check of each of `clauses` passed.
    pub fn pass<'a>(&mut self, clauses: impl IntoIterator<Item = &'a str>) {
        self.passed.extend(clauses.into_iter().map(str::to_owned));
    }

    /// Records why `clauses` were not judged (the first reason stays).
    pub fn not_judged<'a>(&mut self, clauses: impl IntoIterator<Item = &'a str>, why: &str) {
        for c in clauses {
            self.unjudged
                .entry(c.to_owned())
                .or_insert_with(|| why.to_owned());
        }
    }

    /// Adds another trial's judgement (passes add up; the first reason
    /// a clause was not judged stays).
    pub fn absorb(&mut self, other: Judged) {
        self.passed.extend(other.passed);
        for (c, why) in other.unjudged {
            self.unjudged.entry(c).or_insert(why);
        }
    }
}

/// Each clause of `checks` (then each other clause a failure names), as
/// its checks came to: failed by a failure that names it, passed by a
/// check, or not judged with the reason `judged` kept (`fallback` when
/// none was kept).
pub fn clause_verdicts<'a>(
    checks: &[String],
    failures: impl IntoIterator<Item = &'a Failure>,
    judged: &Judged,
    fallback: &str,
) -> Vec<ClauseVerdict> {
    let failures: Vec<&Failure> = failures.into_iter().collect();
    let mut order: Vec<&str> = checks.iter().map(String::as_str).collect();
    for f in &failures {
        for c in &f.clauses {
            if !order.contains(&c.as_str()) {
                order.push(c);
            }
        }
    }
    order
        .into_iter()
        .map(|clause| {
            let failed = failures
                .iter()
                .find(|f| f.clauses.iter().any(|c| c == clause));
            let (standing, why) = match failed {
                Some(f) => (ClauseStanding::Fail, Some(f.step.clone())),
                None if judged.passed.contains(clause) => (ClauseStanding::Pass, None),
                None => (
                    ClauseStanding::NotJudged,
                    Some(
                        judged
                            .unjudged
                            .get(clause)
                            .cloned()
                            .unwrap_or_else(|| fallback.to_owned()),
                    ),
                ),
            };
            ClauseVerdict {
                clause: clause.to_owned(),
                standing,
                why,
            }
        })
        .collect()
}

/// Every clause `not judged` for `why` (a race that never raced, a
/// scenario that could not run): no clause is claimed either way.
pub fn none_judged(verdicts: &mut [ClauseVerdict], why: &str) {
    for v in verdicts.iter_mut() {
        if v.standing == ClauseStanding::Pass {
            v.standing = ClauseStanding::NotJudged;
            v.why = Some(why.to_owned());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(step: &str, clauses: &[&str]) -> Failure {
        Failure {
            step: step.into(),
            clauses: clauses.iter().map(|c| (*c).to_owned()).collect(),
            ..Failure::default()
        }
    }

    #[test]
    fn a_failure_fails_its_own_clauses_and_the_rest_stand_on_their_checks() {
        let checks: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        let mut judged = Judged::default();
        judged.pass(["b", "c"]);
        judged.not_judged(["d", "c"], "stopped at steps[1]");
        judged.not_judged(["d"], "later reason");
        let f = failure("steps[1] http POST /orders", &["c", "agent.error.shape"]);
        let v = clause_verdicts(&checks, [&f], &judged, "no check ran");
        let shown: Vec<(&str, &str, Option<&str>)> = v
            .iter()
            .map(|v| (v.clause.as_str(), v.standing.as_str(), v.why.as_deref()))
            .collect();
        assert_eq!(
            shown,
            [
                ("a", "not_judged", Some("no check ran")),
                ("b", "pass", None),
                ("c", "fail", Some("steps[1] http POST /orders")),
                ("d", "not_judged", Some("stopped at steps[1]")),
                (
                    "agent.error.shape",
                    "fail",
                    Some("steps[1] http POST /orders")
                ),
            ]
        );
        let mut v = v;
        none_judged(&mut v, "no trial overlapped");
        assert_eq!(v[1].standing, ClauseStanding::NotJudged);
        assert_eq!(v[2].standing, ClauseStanding::Fail, "a proof stays a proof");
    }
}
