//! `reqkey certify`: the whole suite of the target's level, no filters;
//! writes the certificate, JUnit and JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cmd::common::{execute, fresh_seed, harness_error, health, not_judged, Outputs};
use crate::report::ReportContext;
use crate::run::runner::RunConfig;
use crate::scenario;
use crate::target::spec::TargetSpec;
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
    /// Bound on every answer's body, in bytes: a larger answer is not read
    /// whole and its step cannot be judged (exit 2).
    #[arg(long, default_value_t = crate::target::DEFAULT_MAX_RESPONSE_BYTES,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 32)))]
    pub max_response_bytes: u64,
    /// Print only failures and the closing count.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The file names `certify` writes into `--out`.
pub const CERTIFICATE_FILE: &str = "certificate.md";
pub const JUNIT_FILE: &str = "junit.xml";
pub const RESULTS_FILE: &str = "results.json";

pub async fn certify_command(args: CertifyArgs) -> ExitCode {
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
        max_response_bytes: args.max_response_bytes,
    };
    let spec = match TargetSpec::parse(&args.target) {
        Ok(s) => s,
        Err(e) => return harness_error(e),
    };
    let seed = args.seed.unwrap_or_else(fresh_seed);
    let outputs = Outputs {
        junit: Some(args.out.join(JUNIT_FILE)),
        json: Some(args.out.join(RESULTS_FILE)),
        report: Some(args.out.join(CERTIFICATE_FILE)),
    };
    let (suite, files) = match crate::run::suite::whole_suite(&args.scenarios, spec.level()) {
        Ok(s) => s,
        Err(e) => {
            return harness_error(format!(
                "cannot read the {} suite under {}: {e} (run from the repository root, or pass --scenarios ROOT)",
                spec.level(),
                args.scenarios.display()
            ))
        }
    };
    let mut ctx = ReportContext::new("certify", &args.target);
    ctx.suite = Some(suite);
    let target = match spec.open(&args.target, opts).await {
        Ok(t) => t,
        Err(e) => return not_judged(&ctx, &outputs, seed, &e),
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
    // A certificate names the target's identity: without one, no verdict.
    let identity = match health(target.as_ref(), args.timeout_ms).await {
        Ok(h) => h,
        Err(e) => return not_judged(&ctx, &outputs, seed, &e),
    };
    let mut cfg = RunConfig::new(seed);
    cfg.call_timeout_ms = args.timeout_ms;
    ctx.health = Some(identity);
    let code = execute(target, &scenarios, &cfg, &ctx, &outputs, args.quiet).await;
    if !args.quiet {
        eprintln!(
            "reqkey: wrote {}",
            args.out.join(CERTIFICATE_FILE).display()
        );
    }
    code
}
