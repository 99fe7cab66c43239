//! `reqkey explain CLAUSE`: a clause of spec/SPEC.md in full — its
//! statement, where it stands, where it is certified, and which scenarios
//! of the suite built into this binary check it, each with the built-in
//! broken variants it fails on. What a store author reads after a report
//! names a clause.
//!
//! `reqkey explain SCENARIO_ID`: a scenario's clauses, and for each the
//! checks that judge it (issue 45). A report blames a clause only on the
//! evidence of a check that judges it, so this is how a reader finds which
//! step's failure a clause's FAIL rests on, and which clauses a scenario
//! leaves `not judged` when it stops early.

use std::process::ExitCode;

use clap::Args;
use reqkey_model::clauses::{self, Certified};
use reqkey_model::vocab::Level;

use crate::cmd::coverage::{level_coverage, suite_record};
use crate::cmd::exit::harness_error;
use reqkey_check::coverage::checks_of;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A clause id (`store.commit.cas`), as reports name it, or a
    /// scenario id of the built-in suite (`idem.replay-after-completion`).
    pub clause: String,
}

pub fn explain_command(args: ExplainArgs) -> ExitCode {
    let all = match clauses::clauses() {
        Ok(c) => c,
        Err(e) => return harness_error(format!("spec/SPEC.md: {e}")),
    };
    let Some(clause) = all.iter().find(|c| c.id == args.clause) else {
        if let Some(scenario) = built_in_scenario(&args.clause) {
            print!("{}", scenario_checks_text(&scenario));
            return ExitCode::SUCCESS;
        }
        let near: Vec<&str> = all
            .iter()
            .filter(|c| {
                let head = args.clause.split('.').next().unwrap_or_default();
                !head.is_empty() && c.id.starts_with(head)
            })
            .map(|c| c.id.as_str())
            .take(12)
            .collect();
        let hint = if near.is_empty() {
            "`reqkey coverage --list` lists every clause".to_owned()
        } else {
            format!("clauses of that area: {}", near.join(", "))
        };
        return harness_error(format!(
            "no clause `{}` in spec/SPEC.md and no scenario of that id in the built-in suite; {hint}",
            crate::report::inert::terminal(&args.clause)
        ));
    };
    println!("{}", clause.id);
    println!(
        "  spec/SPEC.md line {}, section {}",
        clause.line, clause.section
    );
    let list = clauses::introduced_list(clause);
    let colon = if list.is_empty() { "" } else { ":" };
    println!("  {}{colon}", clauses::statement(clause));
    for item in list {
        println!("    {item}");
    }
    let levels: Vec<Level> = match &clause.certified {
        Certified::At(levels) => {
            println!(
                "  certified at: {}",
                levels
                    .iter()
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            levels.iter().copied().collect()
        }
        Certified::Elsewhere(why) => {
            println!("  certified by no scenario: {why}");
            Vec::new()
        }
    };
    if levels.is_empty() {
        return ExitCode::SUCCESS;
    }
    let record = match suite_record(None) {
        Ok(r) => r,
        Err(e) => return harness_error(e),
    };
    for level in levels {
        let cov = match level_coverage(level, None, all, &record) {
            Ok(c) => c,
            Err(e) => return harness_error(e),
        };
        let Some(row) = cov.rows.iter().find(|r| r.clause.id == clause.id) else {
            continue;
        };
        println!("  {level} scenarios that check it:");
        if row.checkers.is_empty() {
            println!("    (none)");
        }
        for checker in &row.checkers {
            let by = if checker.falsified_by.is_empty() {
                "not shown to fail on a built-in broken variant".to_owned()
            } else {
                format!("fails on {}", checker.falsified_by.join(", "))
            };
            println!(
                "    {}  ({by}; `reqkey run --scenario {} --target ...`)",
                checker.scenario, checker.scenario
            );
        }
    }
    ExitCode::SUCCESS
}

/// The scenario of the built-in suite with id `id`, at any level.
fn built_in_scenario(id: &str) -> Option<reqkey_scenario::Scenario> {
    Level::ALL.into_iter().find_map(|level| {
        crate::run::suite::embedded_suite(level)
            .ok()
            .and_then(|(_, scenarios)| scenarios.into_iter().find(|s| s.id == id))
    })
}

/// What `reqkey explain SCENARIO_ID` prints: the scenario, then each of
/// its clauses with the checks that judge it.
fn scenario_checks_text(s: &reqkey_scenario::Scenario) -> String {
    use std::fmt::Write as _;
    let mut text = String::new();
    let _ = writeln!(text, "{} ({} level)", s.id, s.level);
    let _ = writeln!(text, "  {}", s.summary);
    let _ = writeln!(text, "  file: {}", s.file.display());
    let _ = writeln!(
        text,
        "  A failed check fails the clauses it judges and no other; the steps after it are skipped (unless `always`), and the clauses only they judge are not judged."
    );
    let checks = checks_of(s);
    for clause in &s.checks {
        let _ = writeln!(text, "  {}:", clause.0);
        let mut any = false;
        for c in checks
            .iter()
            .filter(|c| c.judges.contains(&clause.0.as_str()))
        {
            any = true;
            let also: Vec<&str> = c
                .judges
                .iter()
                .copied()
                .filter(|j| *j != clause.0)
                .collect();
            let _ = writeln!(
                text,
                "    {}: {}{}{}",
                c.place,
                c.what,
                if c.always { " (always runs)" } else { "" },
                if also.is_empty() {
                    String::new()
                } else {
                    format!(" (also judges {})", also.join(", "))
                }
            );
        }
        if !any {
            let _ = writeln!(text, "    (no check: the loader refuses this)");
        }
    }
    text
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_scenario_id_lists_each_clause_with_the_checks_that_judge_it() {
        let s = built_in_scenario("idem.replay-marks-itself").unwrap();
        let text = scenario_checks_text(&s);
        assert!(
            text.contains("  idem.replay.header:\n    steps[1] http POST /payments: expect\n    steps[2] http POST /payments: expect\n"),
            "{text}"
        );
        assert!(
            text.contains("  idem.effect.at-most-once:\n    steps[4] http GET /.reqkey/effects: expect (always runs)\n"),
            "{text}"
        );
        assert!(!text.contains("no check"), "{text}");
    }

    #[test]
    fn an_unknown_id_is_neither_clause_nor_scenario() {
        assert!(built_in_scenario("idem.no-such-scenario").is_none());
    }
}
