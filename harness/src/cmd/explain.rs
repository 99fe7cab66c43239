//! `reqkey explain CLAUSE`: a clause of spec/SPEC.md in full — its
//! statement, where it stands, where it is certified, and which scenarios
//! of the suite built into this binary check it, each with the built-in
//! broken variants it fails on. What a store author reads after a report
//! names a clause.

use std::process::ExitCode;

use clap::Args;
use reqkey_model::clauses::{self, Certified};
use reqkey_model::vocab::Level;

use crate::cmd::coverage::{level_coverage, suite_record};
use crate::cmd::exit::harness_error;

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// A clause id (`store.commit.cas`), as reports name it.
    pub clause: String,
}

pub fn explain_command(args: ExplainArgs) -> ExitCode {
    let all = match clauses::clauses() {
        Ok(c) => c,
        Err(e) => return harness_error(format!("spec/SPEC.md: {e}")),
    };
    let Some(clause) = all.iter().find(|c| c.id == args.clause) else {
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
            "no clause `{}` in spec/SPEC.md; {hint}",
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
