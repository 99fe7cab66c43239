//! `reqkey coverage`: the clause x scenario matrix of each level, and exit
//! 1 when a clause certified at a level has no scenario that can fail on it
//! (the rule is in `check::coverage` and docs/scenario-format.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use reqkey_model::clauses::{self, Certified, ClauseLevel};

use crate::check::coverage::{self, read_record};
use crate::cmd::common::harness_error;
use crate::run::suite::whole_suite;
use crate::scenario;
use crate::target::Level;

#[derive(Debug, Args)]
pub struct CoverageArgs {
    /// One level only (default: both).
    #[arg(long, value_parser = ["store", "agent"])]
    pub level: Option<String>,
    /// The scenarios root: suites ROOT/store and ROOT/agent, and the
    /// falsification record ROOT/falsification.json.
    #[arg(long, default_value = "scenarios", value_name = "ROOT")]
    pub scenarios: PathBuf,
    /// Print the matrix as a grid (clause rows, numbered scenario columns).
    #[arg(long)]
    pub grid: bool,
    /// Only list the clauses of spec/SPEC.md and where each is certified.
    #[arg(long)]
    pub list: bool,
}

pub fn coverage_command(args: CoverageArgs) -> ExitCode {
    let all = match clauses::clauses() {
        Ok(c) => c,
        Err(e) => return harness_error(format!("spec/SPEC.md: {e}")),
    };
    if args.list {
        for c in all {
            let at = match &c.certified {
                Certified::At(levels) => levels
                    .iter()
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                Certified::Elsewhere(why) => format!("none: {why}"),
            };
            println!("{}\tSPEC.md:{}\t{at}", c.id, c.line);
        }
        return ExitCode::SUCCESS;
    }
    let record = match read_record(&args.scenarios) {
        Ok(r) => r,
        Err(e) => return harness_error(e),
    };
    let levels: Vec<(Level, ClauseLevel)> = [
        (Level::Store, ClauseLevel::Store),
        (Level::Agent, ClauseLevel::Agent),
    ]
    .into_iter()
    .filter(|(l, _)| {
        args.level
            .as_deref()
            .is_none_or(|want| want == l.to_string())
    })
    .collect();
    let mut gaps = 0;
    for (level, clause_level) in levels {
        let files = match whole_suite(&args.scenarios, level) {
            Ok((_, files)) => files,
            Err(e) => return harness_error(e),
        };
        let scenarios = match scenario::load_paths(&files) {
            Ok(s) => s,
            Err(e) => return harness_error(e),
        };
        let cov = match coverage::coverage(clause_level, all, &scenarios, &record) {
            Ok(c) => c,
            Err(e) => return harness_error(e),
        };
        if args.grid {
            print!("{}", coverage::render_grid(&cov));
        }
        print!("{}", coverage::render(&cov));
        gaps += cov.total() - cov.covered();
    }
    if gaps > 0 {
        eprintln!("reqkey: {gaps} clause(s) without a scenario that can fail on them");
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
