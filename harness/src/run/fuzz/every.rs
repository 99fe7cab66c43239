//! Every violation a fuzz run proves, one per set of clauses blamed, each
//! with its reproduction replayed (issue 54), for the fuzzers of every
//! level: the store's and the agent's ([`every_violation`]) as well as the
//! idem pass (which adds its battery's findings before its programs').
//!
//! A run does not stop at its first failing program: [`run_cases_all`]
//! judges the whole budget, shrinks the first program failing on each new
//! set of clauses, and hands it to the level's `prove`, which writes the
//! reproduction and replays it against the target
//! (`run/fuzz/replay.rs`). A set whose reproduction did not replay red is
//! shrunk again from a later program failing on it, and the one that
//! reproduced is the one reported ([`one_per_set`]).

use std::fmt::Debug;

use proptest::strategy::Strategy;

use crate::run::fuzz::cases::{run_cases_all, same_set, AllOutcome, CaseFailure, Found};
use crate::run::fuzz::violation::FuzzViolation;

/// A violation proved: the program that showed it (shrunk) and the record
/// every report renders.
#[derive(Debug, Clone)]
pub struct Proven<P> {
    pub program: P,
    /// Which generated program (counted from 1) showed it, before
    /// shrinking (0: the idem battery's fixed programs).
    pub found_at: u64,
    pub violation: FuzzViolation,
}

/// What a run of every violation ended in.
#[derive(Debug, Clone)]
pub enum Every<P> {
    /// No program failed.
    Passed,
    /// At least one violation proved, the first found first. `stopped`:
    /// why the run stopped before its budget (a later program could not be
    /// judged); the violations stand.
    Failed {
        findings: Vec<Proven<P>>,
        stopped: Option<String>,
    },
    /// The target could not be judged, and nothing was proven before.
    Error(String),
}

/// Runs `cases` programs of `strategy` through `one`, proving each distinct
/// violation with `prove` (which replays its reproduction): see
/// [`run_cases_all`] for the budget and its bounds.
pub fn every_violation<S>(
    cases: u32,
    seed: u64,
    max_shrink_iters: u32,
    strategy: &S,
    one: impl Fn(u64, &S::Value) -> Result<(), CaseFailure>,
    mut prove: impl FnMut(&Found<S::Value>) -> Proven<S::Value>,
) -> Every<S::Value>
where
    S: Strategy,
    S::Value: Clone + Debug,
{
    let outcome = run_cases_all(cases, seed, max_shrink_iters, strategy, &[], one, |f| {
        let p = prove(f);
        (p.violation.reproduced, p)
    });
    let (found, stopped) = match outcome {
        AllOutcome::Done(found) => (found, None),
        AllOutcome::Stopped(found, e) => (found, Some(e)),
        AllOutcome::Error(e) => return Every::Error(e),
    };
    let findings = one_per_set(found.into_iter().map(|(_, p)| p).collect());
    if findings.is_empty() {
        // A stop with nothing proven is no verdict, never a pass.
        return match stopped {
            Some(e) => Every::Error(e),
            None => Every::Passed,
        };
    }
    Every::Failed { findings, stopped }
}

/// One finding per set of clauses, in the order the sets were met: the
/// first that reproduced, else the first tried.
pub fn one_per_set<P>(findings: Vec<Proven<P>>) -> Vec<Proven<P>> {
    let mut out: Vec<Proven<P>> = Vec::new();
    for f in findings {
        match out
            .iter_mut()
            .find(|o| same_set(&o.violation.clauses, &f.violation.clauses))
        {
            Some(o) if !o.violation.reproduced && f.violation.reproduced => *o = f,
            Some(_) => {}
            None => out.push(f),
        }
    }
    out
}

/// A generated program's violation proved: `yaml` (its reproduction)
/// replayed against `target` on `clauses`, and the record made. `steps`:
/// how many steps it was shrunk to.
#[allow(clippy::too_many_arguments)]
pub fn replayed_violation(
    runtime: &tokio::runtime::Runtime,
    target: &std::sync::Arc<dyn crate::targets::Target>,
    (seed, call_timeout_ms): (u64, u64),
    (found_at, cases, steps): (u64, u32, usize),
    clauses: Vec<String>,
    reason: String,
    yaml: String,
) -> FuzzViolation {
    let replayed =
        crate::run::fuzz::replay::replay(runtime, target, &yaml, &clauses, seed, call_timeout_ms);
    let found = format!("program {found_at} of {cases} (shrunk to {steps} steps)");
    violation(&found, clauses, reason, yaml, replayed)
}

/// The violation record of a finding whose reproduction was replayed.
pub fn violation(
    found: &str,
    clauses: Vec<String>,
    message: String,
    scenario_yaml: String,
    replayed: crate::run::fuzz::replay::Replayed,
) -> FuzzViolation {
    FuzzViolation {
        clause: clauses.first().cloned().unwrap_or_default(),
        clauses,
        program: found.to_owned(),
        message,
        scenario_yaml,
        reproduced: replayed.reproduced,
        not_reproduced: replayed.not_reproduced,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::run::fuzz::replay::Replayed;

    fn proven(clauses: &[&str], reproduced: bool, tag: &str) -> Proven<String> {
        Proven {
            program: tag.to_owned(),
            found_at: 1,
            violation: violation(
                tag,
                clauses.iter().map(|c| (*c).to_owned()).collect(),
                String::new(),
                String::new(),
                Replayed {
                    reproduced,
                    not_reproduced: (!reproduced).then(|| "timing".to_owned()),
                },
            ),
        }
    }

    #[test]
    fn one_finding_per_set_keeps_the_first_that_reproduced() {
        let kept = one_per_set(vec![
            proven(&["a", "b"], false, "first"),
            proven(&["c"], true, "other"),
            proven(&["b", "a"], true, "second"),
            proven(&["a", "b"], true, "third"),
        ]);
        let tags: Vec<&str> = kept.iter().map(|p| p.program.as_str()).collect();
        assert_eq!(tags, ["second", "other"]);
    }

    #[test]
    fn every_violation_of_a_run_is_proved_once_per_set_and_a_pass_is_a_pass() {
        use proptest::prelude::*;
        let strategy = 0u32..100;
        // Odd programs break clause "odd", multiples of ten "ten".
        let one = |_: u64, v: &u32| -> Result<(), CaseFailure> {
            if v % 10 == 0 {
                Err(CaseFailure::Nonconforming(format!(
                    "[wire.store.op.get-run] {v}"
                )))
            } else if v % 2 == 1 {
                Err(CaseFailure::Nonconforming(format!(
                    "[wire.store.op.list-runs] {v}"
                )))
            } else {
                Ok(())
            }
        };
        let mut proved = 0;
        let Every::Failed { findings, stopped } = every_violation(64, 3, 64, &strategy, one, |f| {
            proved += 1;
            Proven {
                program: f.program,
                found_at: f.found_at,
                violation: violation(
                    "p",
                    f.clauses.clone(),
                    f.reason.clone(),
                    String::new(),
                    Replayed {
                        reproduced: true,
                        not_reproduced: None,
                    },
                ),
            }
        }) else {
            panic!("nothing found");
        };
        assert!(stopped.is_none());
        let mut sets: Vec<String> = findings
            .iter()
            .map(|f| f.violation.clause.clone())
            .collect();
        sets.sort();
        assert_eq!(sets, ["wire.store.op.get-run", "wire.store.op.list-runs"]);
        assert_eq!(proved, 2, "each set is proved once");
        // Each kept program fails on its own clause (shrinking kept it so).
        for f in &findings {
            let ten = f.violation.clause.ends_with("get-run");
            assert_eq!(f.program % 10 == 0, ten, "{f:?}");
            assert_eq!(f.program % 2 == 1, !ten, "{f:?}");
        }
        let never = |_: u64, _: &u32| -> Result<(), CaseFailure> { Ok(()) };
        assert!(matches!(
            every_violation(
                16,
                3,
                64,
                &(0u32..100).prop_map(|v| v),
                never,
                |_| unreachable!()
            ),
            Every::Passed
        ));
    }
}
