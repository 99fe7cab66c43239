//! `reqkey certify`: the whole suite of the target's level, no filters;
//! writes the certificate, JUnit and JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cmd::common::{execute, fresh_seed, harness_error, health, Outputs};
use reqkey_model::clauses::ClauseLevel;

use crate::check::coverage;
use crate::report::{ClauseCoverage, ReportContext};
use crate::run::runner::RunConfig;
use crate::scenario;
use crate::target::spec::open_target;
use crate::target::TargetOptions;

#[derive(Debug, Args)]
pub struct CertifyArgs {
    /// What to certify (see "Targets" below).
    #[arg(long, short)]
    pub target: String,
    /// Where to write certificate.md, junit.xml and results.json (created if
    /// missing).
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// The scenarios root: the suite is ROOT/store or ROOT/agent, by the
    /// target's level, and ROOT/VERSION names its version.
    #[arg(long, default_value = "scenarios", value_name = "ROOT")]
    pub scenarios: PathBuf,
    /// The seed of every random choice (printed in the certificate).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Bound on every single call to the target, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// Print only failures and the closing count.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The clause coverage of a level's whole suite, as a certificate states it.
pub fn suite_coverage(
    root: &std::path::Path,
    level: crate::target::Level,
    scenarios: &[scenario::Scenario],
) -> Result<ClauseCoverage, String> {
    let clause_level =
        ClauseLevel::parse(&level.to_string()).ok_or_else(|| format!("no clause level {level}"))?;
    let clauses = reqkey_model::clauses::clauses().map_err(|e| e.to_string())?;
    let record = coverage::read_record(root).map_err(|e| e.to_string())?;
    let cov =
        coverage::coverage(clause_level, clauses, scenarios, &record).map_err(|e| e.to_string())?;
    Ok(ClauseCoverage {
        level: level.to_string(),
        covered: cov.covered(),
        total: cov.total(),
    })
}

/// The file names `certify` writes into `--out`.
pub const CERTIFICATE_FILE: &str = "certificate.md";
pub const JUNIT_FILE: &str = "junit.xml";
pub const RESULTS_FILE: &str = "results.json";

pub async fn certify_command(args: CertifyArgs) -> ExitCode {
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
    };
    let target = match open_target(&args.target, opts).await {
        Ok(t) => t,
        Err(e) => return harness_error(e),
    };
    let (suite, files) = match crate::run::suite::whole_suite(&args.scenarios, target.level()) {
        Ok(s) => s,
        Err(e) => {
            return harness_error(format!(
                "cannot read the {} suite under {}: {e} (run from the repository root, or pass --scenarios ROOT)",
                target.level(),
                args.scenarios.display()
            ))
        }
    };
    let scenarios = match scenario::load_paths(&files) {
        Ok(s) => s,
        Err(e) => return harness_error(e),
    };
    if let Some(s) = scenarios.iter().find(|s| s.level != target.level()) {
        return harness_error(format!(
            "{}: a {} scenario in the {} suite",
            s.file.display(),
            s.level,
            target.level()
        ));
    }
    let identity = match health(target.as_ref(), args.timeout_ms).await {
        Ok(h) => h,
        Err(e) => {
            return harness_error(format!(
                "{} has no /health identity: {e}",
                target.describe()
            ))
        }
    };
    let mut cfg = RunConfig::new(args.seed.unwrap_or_else(fresh_seed));
    cfg.call_timeout_ms = args.timeout_ms;
    let mut ctx = ReportContext::new("certify", &args.target);
    ctx.health = Some(identity);
    ctx.suite = Some(suite);
    ctx.clause_coverage = match suite_coverage(&args.scenarios, target.level(), &scenarios) {
        Ok(c) => Some(c),
        Err(e) => return harness_error(format!("clause coverage: {e}")),
    };
    let outputs = Outputs {
        junit: Some(args.out.join(JUNIT_FILE)),
        json: Some(args.out.join(RESULTS_FILE)),
        report: Some(args.out.join(CERTIFICATE_FILE)),
    };
    let code = execute(target, &scenarios, &cfg, &ctx, &outputs, args.quiet).await;
    if !args.quiet {
        eprintln!(
            "reqkey: wrote {}",
            args.out.join(CERTIFICATE_FILE).display()
        );
    }
    code
}
