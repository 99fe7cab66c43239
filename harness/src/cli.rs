//! The `reqkey` command line.
//!
//! Exit codes (the contract CI scripts against):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | every scenario passed |
//! | 1 | a scenario failed: the target does not conform |
//! | 2 | the harness could not judge: bad YAML, bad arguments, target unreachable, timeout |

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

use crate::event::Reporter;
use crate::report::TerminalReporter;
use crate::runner::{self, RunConfig};
use crate::scenario::{self, Scenario};
use crate::target::{self, Level, TargetOptions};

pub const EXIT_CODES: &str = "\
Exit codes:
  0  every scenario passed
  1  a scenario failed: the target does not conform
  2  the harness could not judge: bad YAML, bad arguments, target unreachable or timed out";

fn target_help() -> String {
    format!(
        "Targets (--target):\n{}\n\n{EXIT_CODES}",
        target::TARGET_HELP
    )
}

/// reqkey: certify request-key stores and agent servers against the spec.
#[derive(Debug, Parser)]
#[command(name = "reqkey", version, after_help = EXIT_CODES)]
#[command(
    long_about = "reqkey specifies, model-checks and certifies request keys: idempotency \
keys that make a retried agent-run request attach to, replay or be refused by the original run \
instead of running twice. `reqkey run` drives YAML scenarios against a store or an agent server \
and exits 0 only if every scenario passes."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run scenarios against a target.
    #[command(after_help = target_help())]
    Run(RunArgs),
    /// Model-based fuzzing of a store: random programs of store operations
    /// (with concurrent batches) against the target and the sequential
    /// spec; a failure is shrunk and printed as a YAML scenario.
    #[command(after_help = target_help())]
    Fuzz(FuzzArgs),
    /// Benchmarks: the linearizability checker and race detection.
    Bench(BenchArgs),
}

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// The store to fuzz (see "Targets" below).
    #[arg(long, short, default_value = "memory")]
    pub target: String,
    /// Programs to generate.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub cases: u32,
    /// The seed of the generated programs (printed on failure; reproduces them).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Also write the shrunk failing scenario to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Bound on every single call to the target, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
}

/// Which benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchKind {
    /// Both.
    All,
    /// Time the linearizability check of a recorded 1,000-op history.
    Checker,
    /// Detection rate of the race scenarios against the racy store.
    Race,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[arg(value_enum, default_value_t = BenchKind::All)]
    pub kind: BenchKind,
    /// Independent runs of the race scenarios (race benchmark).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,
    /// The racy target (race benchmark; also a second checker workload).
    #[arg(long, default_value = "broken-memory:holder-read-outside-commit")]
    pub target: String,
    /// Scenario files or directories of the race benchmark (those tagged `race`).
    #[arg(long, default_value = "scenarios/store")]
    pub scenarios: PathBuf,
    /// First seed (run k uses seed + k).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario files or directories (recursive). Default: scenarios/store or
    /// scenarios/agent, by the target's level.
    pub paths: Vec<PathBuf>,
    /// What to certify (see "Targets" below).
    #[arg(long, short, default_value = "memory")]
    pub target: String,
    /// Only scenarios with this tag (repeatable: any of them).
    #[arg(long)]
    pub tag: Vec<String>,
    /// Leave out scenarios with this tag (repeatable).
    #[arg(long)]
    pub skip_tag: Vec<String>,
    /// Stop after the first scenario that does not pass.
    #[arg(long)]
    pub fail_fast: bool,
    /// Trials per scenario, overriding each scenario's `repeat` (alias
    /// `--trials`).
    #[arg(long, visible_alias = "trials", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeat: Option<u32>,
    /// The seed of every random choice (printed on failure; replays a run).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Concurrent requests per parallel item: overrides every `copies:`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(crate::scenario::MAX_COPIES)))]
    pub concurrency: Option<u32>,
    /// Bound on every single call to the target, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// Print only failures and the closing count.
    #[arg(long, short)]
    pub quiet: bool,
}

/// A harness error: printed, exit 2.
fn harness_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("reqkey: error: {message}");
    ExitCode::from(2)
}

/// A seed from the clock, for runs that did not ask for one.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(40)
}

/// The default scenario directory for a level.
pub fn default_paths(level: Level) -> Vec<PathBuf> {
    vec![PathBuf::from(format!("scenarios/{level}"))]
}

/// Keeps the scenarios selected by `--tag` / `--skip-tag`.
pub fn filter_by_tags(
    scenarios: Vec<Scenario>,
    tags: &[String],
    skip_tags: &[String],
) -> Vec<Scenario> {
    scenarios
        .into_iter()
        .filter(|s| tags.is_empty() || s.tags.iter().any(|t| tags.contains(t)))
        .filter(|s| !s.tags.iter().any(|t| skip_tags.contains(t)))
        .collect()
}

fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

/// Runs the CLI; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match cli.command {
        Command::Run(args) => run_command(args),
        Command::Fuzz(args) => fuzz_command(args),
        Command::Bench(args) => bench_command(args),
    }
}

fn run_command(args: RunArgs) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return harness_error(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async move {
        let opts = TargetOptions { call_timeout_ms: args.timeout_ms };
        let target = match target::open_target(&args.target, opts).await {
            Ok(t) => t,
            Err(e) => return harness_error(e),
        };
        let paths = if args.paths.is_empty() { default_paths(target.level()) } else { args.paths.clone() };
        let scenarios = match scenario::load_paths(&paths) {
            Ok(s) => s,
            Err(e) => return harness_error(e),
        };
        let loaded = scenarios.len();
        let (applicable, other): (Vec<Scenario>, Vec<Scenario>) =
            scenarios.into_iter().partition(|s| s.level == target.level());
        if !other.is_empty() {
            eprintln!(
                "reqkey: note: {} of {loaded} scenarios are of another level than {} ({}) and were not run",
                other.len(),
                target.describe(),
                target.level()
            );
        }
        let selected = filter_by_tags(applicable, &args.tag, &args.skip_tag);
        if selected.is_empty() {
            return harness_error("no scenario to run after filtering by level and tags");
        }
        let mut cfg = RunConfig::new(args.seed.unwrap_or_else(fresh_seed));
        cfg.repeat_override = args.repeat;
        cfg.copies_override = args.concurrency;
        cfg.fail_fast = args.fail_fast;
        cfg.call_timeout_ms = args.timeout_ms;
        let mut reporters: Vec<Box<dyn Reporter>> =
            vec![Box::new(TerminalReporter::new(std::io::stdout(), args.quiet))];
        let summary = runner::run(target, &selected, &cfg, &mut reporters).await;
        ExitCode::from(summary.exit_code())
    })
}

fn fuzz_command(args: FuzzArgs) -> ExitCode {
    use crate::fuzz::{self, FuzzOptions, FuzzOutcome};
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return harness_error(format!("cannot start the runtime: {e}")),
    };
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
    };
    let target = match rt.block_on(target::open_target(&args.target, opts)) {
        Ok(t) => t,
        Err(e) => return harness_error(e),
    };
    if target.level() != Level::Store {
        return harness_error(format!("{} is not a store target", target.describe()));
    }
    let seed = args.seed.unwrap_or_else(fresh_seed);
    let cfg = RunConfig::new(seed);
    let opts = FuzzOptions {
        cases: args.cases,
        seed,
        namespace: format!("{}.fuzz", cfg.namespace),
        target_name: args.target.clone(),
        lin_budget_steps: crate::lin::DEFAULT_BUDGET_STEPS,
        call_timeout_ms: args.timeout_ms,
        max_shrink_iters: 4_096,
    };
    println!(
        "reqkey fuzz: {} programs against {} (seed {seed})",
        args.cases,
        target.describe()
    );
    match fuzz::fuzz(&rt, target, &opts) {
        FuzzOutcome::Passed { cases } => {
            println!("{cases} programs passed");
            ExitCode::SUCCESS
        }
        FuzzOutcome::Failed(f) => {
            println!(
                "FAIL: a program does not conform; shrunk to {} steps",
                f.program.len()
            );
            println!("{}", f.reason);
            println!("\nseed: {0} (reproduce with --seed {0})", f.seed);
            println!(
                "\nthe minimal program as a scenario:\n---\n{}---",
                f.scenario_yaml
            );
            if let Some(out) = &args.out {
                if let Err(e) = std::fs::write(out, &f.scenario_yaml) {
                    return harness_error(format!("cannot write {}: {e}", out.display()));
                }
                println!("written to {}", out.display());
            }
            ExitCode::from(1)
        }
        FuzzOutcome::Error(e) => harness_error(e),
    }
}

fn bench_command(args: BenchArgs) -> ExitCode {
    use crate::bench;
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return harness_error(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async move {
        if matches!(args.kind, BenchKind::All | BenchKind::Checker) {
            // A linearizable history (memory), then one that is not.
            for target in ["memory", args.target.as_str()] {
                match bench::checker_benchmark(target, bench::default_workload(args.seed)).await {
                    Ok(f) => println!("{f}"),
                    Err(e) => return harness_error(e),
                }
            }
        }
        if matches!(args.kind, BenchKind::All | BenchKind::Race) {
            let scenarios = match scenario::load_paths(std::slice::from_ref(&args.scenarios)) {
                Ok(s) => filter_by_tags(s, &["race".to_owned()], &[]),
                Err(e) => return harness_error(e),
            };
            if scenarios.is_empty() {
                return harness_error("no scenario tagged `race` to run");
            }
            match bench::detection_benchmark(&args.target, &scenarios, args.runs, args.seed).await {
                Ok(f) => println!("{f}"),
                Err(e) => return harness_error(e),
            }
        }
        ExitCode::SUCCESS
    })
}
