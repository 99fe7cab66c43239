//! Which clause each check judges (`judges:`), and `checks:` as their
//! union (SPEC 8; issue 45).
//!
//! A scenario's `checks:` used to be blamed whole for any failed step, so
//! a missing header was reported as a broken at-most-once. Now every check
//! names the clauses it judges: a step's `judges:` (its `expect`,
//! `expect_raw`, `expect_not_echoed`, `bind`, `wait_run`, `expect_one_of`,
//! `linearizable`, `mixed_histories`), a `parallel` item's own or its
//! group's, an `expect_group` rule's own or its step's. The loader holds a
//! scenario to three rules, each error placed at its node:
//!
//! - a step that checks something judges at least one clause, and one
//!   that checks nothing (`expect: any`, `sleep_ms`, `fault`) judges none;
//! - every clause a step judges is in `checks:`;
//! - every clause of `checks:` is judged by some check: a clause nothing
//!   judges would be reported without evidence.

use std::collections::BTreeSet;

use crate::clause::ClauseRef;
use crate::locate::Seg;
use crate::scenario::Scenario;
use crate::step::{Action, Step};

/// A failed check: where (a path into the document) and why (the form of
/// `validate::Invalid`).
type Invalid = (Vec<Seg>, String);

/// The union of every clause the scenario's checks judge.
pub fn judged_clauses(s: &Scenario) -> BTreeSet<&ClauseRef> {
    s.steps.iter().flat_map(Step::all_judges).collect()
}

/// A list of clauses with one named twice is a mistake.
fn no_repeat(at: Vec<Seg>, list: &[ClauseRef]) -> Result<(), Invalid> {
    let mut seen = BTreeSet::new();
    match list.iter().find(|c| !seen.insert(*c)) {
        Some(c) => Err((at, format!("judges: `{}` is listed twice", c.0))),
        None => Ok(()),
    }
}

/// The checks of `judges:` on a loaded scenario (see the module doc).
pub fn validate_judges(s: &Scenario) -> Result<(), Invalid> {
    let step_at = |i: usize, rest: &[Seg]| {
        let mut at = vec![Seg::Key("steps"), Seg::Index(i)];
        at.extend_from_slice(rest);
        at
    };
    let declared: BTreeSet<&ClauseRef> = s.checks.iter().collect();
    for (i, step) in s.steps.iter().enumerate() {
        let judges_at = step_at(i, &[Seg::Key("judges")]);
        no_repeat(judges_at.clone(), &step.judges)?;
        if step.expect_any && !step.judges.is_empty() {
            return Err((
                judges_at,
                format!("steps[{i}]: `expect: any` checks nothing, so it judges no clause: drop `judges:` (or say what the answer must be)"),
            ));
        }
        if !step.checks_something() && !step.judges.is_empty() {
            return Err((
                judges_at,
                format!(
                    "steps[{i}]: `{}` checks nothing, so it judges no clause: drop `judges:`",
                    step.action.label()
                ),
            ));
        }
        let own_needs = step.checks_own_answer()
            || step.linearizable
            || matches!(
                step.action,
                Action::ExpectOneOf(_) | Action::MixedHistories { .. }
            );
        if own_needs && step.judges.is_empty() {
            return Err((
                step_at(i, &[]),
                format!(
                    "steps[{i}]: `{}` checks its answer but judges no clause: add `judges: [...]` naming the clauses of checks: its checks judge (or `expect: any` on purpose)",
                    step.action.label()
                ),
            ));
        }
        for (r, rule) in step.expect_group.iter().enumerate() {
            let at = step_at(
                i,
                &[Seg::Key("expect_group"), Seg::Index(r), Seg::Key("judges")],
            );
            if let Some(own) = &rule.judges {
                no_repeat(at.clone(), own)?;
                if own.is_empty() {
                    return Err((at, format!("steps[{i}].expect_group[{r}]: `judges: []` judges nothing; leave it out to judge the step's clauses")));
                }
            } else if step.judges.is_empty() {
                return Err((
                    step_at(i, &[Seg::Key("expect_group"), Seg::Index(r)]),
                    format!("steps[{i}].expect_group[{r}]: the rule judges no clause: give it `judges:`, or give its step one"),
                ));
            }
        }
        if let Action::Parallel(items) = &step.action {
            for (k, item) in items.iter().enumerate() {
                let at = step_at(i, &[Seg::Key("parallel"), Seg::Index(k)]);
                let mut judges_at = at.clone();
                judges_at.push(Seg::Key("judges"));
                no_repeat(judges_at.clone(), &item.judges)?;
                if item.always {
                    return Err((at, format!("steps[{i}].parallel[{k}]: `always` belongs on a step, not on an item of a group (the group runs whole or not at all)")));
                }
                if !item.checks_own_answer() && !item.judges.is_empty() {
                    return Err((judges_at, format!("steps[{i}].parallel[{k}]: the item checks nothing of its answer, so it judges no clause: drop `judges:`")));
                }
                if item.checks_own_answer() && step.item_judges(item).is_empty() {
                    return Err((at, format!("steps[{i}].parallel[{k}]: the item checks its answer but judges no clause: give it (or its group) `judges:`")));
                }
            }
        }
    }
    // Every judged clause is declared, every declared clause judged.
    for (i, step) in s.steps.iter().enumerate() {
        let mut places: Vec<(Vec<Seg>, &[ClauseRef])> =
            vec![(step_at(i, &[Seg::Key("judges")]), &step.judges)];
        if let Action::Parallel(items) = &step.action {
            for (k, item) in items.iter().enumerate() {
                places.push((
                    step_at(
                        i,
                        &[Seg::Key("parallel"), Seg::Index(k), Seg::Key("judges")],
                    ),
                    &item.judges,
                ));
            }
        }
        for (r, rule) in step.expect_group.iter().enumerate() {
            if let Some(own) = &rule.judges {
                places.push((
                    step_at(
                        i,
                        &[Seg::Key("expect_group"), Seg::Index(r), Seg::Key("judges")],
                    ),
                    own,
                ));
            }
        }
        for (at, list) in places {
            if let Some(c) = list.iter().find(|c| !declared.contains(c)) {
                return Err((
                    at,
                    format!(
                        "judges: `{}` is not in the scenario's checks: (checks: is the union of every judges:)",
                        c.0
                    ),
                ));
            }
        }
    }
    let judged = judged_clauses(s);
    if let Some(c) = s.checks.iter().find(|c| !judged.contains(c)) {
        return Err((
            vec![Seg::Key("checks")],
            format!(
                "checks: `{}` is judged by no check: name it in the `judges:` of the step whose check judges it, or drop it",
                c.0
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::parse_scenario;
    use std::path::Path;

    fn load(text: &str) -> Result<crate::Scenario, String> {
        parse_scenario(Path::new("x.yaml"), text).map_err(|e| e.to_string())
    }

    const HEAD: &str = "id: t\nlevel: store\nsummary: s\n";

    #[test]
    fn a_scenario_whose_checks_are_the_union_of_its_judges_loads() {
        let s = load(&format!(
            "{HEAD}checks: [store.reads.get-run, store.reads.list-inputs]\nsteps:\n  - getRun: {{sessionId: $s, runId: r}}\n    expect: {{ok: null}}\n    judges: [store.reads.get-run]\n  - listInputs: {{sessionId: $s}}\n    always: true\n    expect: {{ok: []}}\n    judges: [store.reads.list-inputs]\n"
        ))
        .unwrap();
        assert_eq!(s.steps[0].judges[0].0, "store.reads.get-run");
        assert!(!s.steps[0].always && s.steps[1].always);
    }

    #[test]
    fn a_clause_no_check_judges_is_refused_at_checks() {
        let e = load(&format!(
            "{HEAD}checks: [store.reads.get-run, store.reads.list-inputs]\nsteps:\n  - getRun: {{sessionId: $s, runId: r}}\n    expect: {{ok: null}}\n    judges: [store.reads.get-run]\n"
        ))
        .unwrap_err();
        assert!(e.starts_with("x.yaml:4:"), "{e}");
        assert!(
            e.contains("`store.reads.list-inputs` is judged by no check"),
            "{e}"
        );
    }

    #[test]
    fn an_unknown_clause_in_judges_names_file_line_and_column() {
        let e = load(&format!(
            "{HEAD}checks: [store.reads.get-run]\nsteps:\n  - getRun: {{sessionId: $s, runId: r}}\n    expect: {{ok: null}}\n    judges: [store.reads.get-run, store.no.such]\n"
        ))
        .unwrap_err();
        assert!(e.starts_with("x.yaml:8:"), "{e}");
        assert!(e.contains("`store.no.such` is not a clause id"), "{e}");
    }

    #[test]
    fn a_judged_clause_outside_checks_is_refused_at_its_judges() {
        let e = load(&format!(
            "{HEAD}checks: [store.reads.get-run]\nsteps:\n  - getRun: {{sessionId: $s, runId: r}}\n    expect: {{ok: null}}\n    judges: [store.reads.get-run]\n  - listInputs: {{sessionId: $s}}\n    expect: {{ok: []}}\n    judges: [store.reads.list-inputs]\n"
        ))
        .unwrap_err();
        assert!(e.starts_with("x.yaml:11:"), "{e}");
        assert!(e.contains("not in the scenario's checks"), "{e}");
    }

    #[test]
    fn a_check_without_judges_and_judges_without_a_check_are_refused() {
        // Once a scenario names judges, every check names its clauses.
        let e = load(&format!(
            "{HEAD}checks: [store.reads.get-run]\nsteps:\n  - getRun: {{sessionId: $s, runId: r}}\n    expect: {{ok: null}}\n    judges: [store.reads.get-run]\n  - listInputs: {{sessionId: $s}}\n    expect: {{ok: []}}\n"
        ))
        .unwrap_err();
        assert!(e.starts_with("x.yaml:9:"), "{e}");
        assert!(e.contains("judges no clause"), "{e}");
        let e = load(&format!(
            "{HEAD}checks: [store.reads.get-run]\nsteps:\n  - getRun: {{sessionId: $s, runId: r}}\n    expect: any\n    judges: [store.reads.get-run]\n"
        ))
        .unwrap_err();
        assert!(e.contains("`expect: any` checks nothing"), "{e}");
        let e = load(&format!(
            "{HEAD}checks: [store.reads.get-run]\nsteps:\n  - sleep_ms: 1\n    judges: [store.reads.get-run]\n"
        ))
        .unwrap_err();
        assert!(e.contains("checks nothing, so it judges no clause"), "{e}");
    }

    #[test]
    fn group_rules_and_items_judge_their_own_or_their_steps() {
        let ok = format!(
            "{HEAD}checks: [store.key.one-run-per-key, store.commit.key-holder]\nsteps:\n  - parallel:\n      - copies: 2\n        commitRunStart: {{sessionId: $s, runId: \"r${{i}}\", expectedCurrentRunId: null, input: {{}}, requestKey: k, requestDigest: d}}\n    expect_group:\n      - count: 1\n        match: {{ok: {{outcome: started}}}}\n        judges: [store.key.one-run-per-key]\n      - count: rest\n        match: {{error: {{cause: request_key_taken}}}}\n    judges: [store.commit.key-holder]\n"
        );
        let s = load(&ok).unwrap();
        let step = &s.steps[0];
        assert_eq!(
            step.rule_judges(&step.expect_group[0])[0].0,
            "store.key.one-run-per-key"
        );
        assert_eq!(
            step.rule_judges(&step.expect_group[1])[0].0,
            "store.commit.key-holder"
        );
        // A rule with no clause of its own and a step with none: refused.
        let e = load(&ok.replace("    judges: [store.commit.key-holder]\n", "")).unwrap_err();
        assert!(
            e.contains("expect_group[1]: the rule judges no clause"),
            "{e}"
        );
        // `always` on an item is refused.
        let e = load(&ok.replace(
            "      - copies: 2\n",
            "      - copies: 2\n        always: true\n",
        ))
        .unwrap_err();
        assert!(e.contains("`always` belongs on a step"), "{e}");
    }
}
