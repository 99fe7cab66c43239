//! The `reqkey` command line.
//!
//! Exit codes (the contract CI scripts against):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | every scenario passed |
//! | 1 | a scenario failed: the target does not conform |
//! | 2 | the harness could not judge: bad YAML, bad arguments, target unreachable, timeout |
//!
//! With `--expected-failures`, a listed scenario that fails keeps the run
//! at 0, and a listed scenario that passes makes it 1.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::event::Reporter;
use crate::report::{
    terminal::progress_wanted, CertificateReporter, JsonReporter, JunitReporter, ReportContext,
    TerminalReporter,
};
use crate::runner::{self, RunConfig};
use crate::scenario::{self, Scenario};
use crate::target::{self, Level, Target, TargetOptions};

pub const EXIT_CODES: &str = "\
Exit codes:
  0  every scenario passed (scenarios in --expected-failures may fail)
  1  a scenario failed: the target does not conform; or a scenario listed in
     --expected-failures passed (take it off the list)
  2  the harness could not judge: bad YAML, bad arguments, target unreachable or
     timed out, an --expected-failures id not in the suite, a report not written";

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
    /// Model-check the keyed-entry protocol (stateright).
    Model {
        #[command(subcommand)]
        cmd: crate::model_cmd::ModelCommand,
    },
    /// Serve a reference implementation over its wire protocol.
    #[command(subcommand)]
    Serve(crate::serve_cmd::ServeCommand),
    /// Certify a target: the whole suite of its level, nothing skipped;
    /// writes certificate.md, junit.xml and results.json.
    #[command(after_help = target_help())]
    Certify(CertifyArgs),
    /// Print the JSON Schema of the scenario format.
    Schema,
    /// Model-based fuzzing of a store: random programs of store operations
    /// (with concurrent batches) against the target and the sequential
    /// spec; a failure is shrunk and printed as a YAML scenario.
    #[command(after_help = target_help())]
    Fuzz(FuzzArgs),
    /// Benchmarks: the linearizability checker, race detection, and the
    /// key lookup of any store.
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
    /// The checker and race benchmarks (not lookup, which seeds a store).
    All,
    /// Time the linearizability check of a recorded 1,000-op history.
    Checker,
    /// Detection rate of the race scenarios against the racy store.
    Race,
    /// getRunByRequestKey latency with --small vs --large runs in the
    /// store (--target, default memory): an index read stays flat.
    Lookup,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[arg(value_enum, default_value_t = BenchKind::All)]
    pub kind: BenchKind,
    /// Independent runs of the race scenarios (race benchmark).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,
    /// The target: the racy store of the race benchmark (also a second
    /// checker workload; default broken-memory:holder-read-outside-commit),
    /// or the store of the lookup benchmark (default memory; any store
    /// target, store+http:// included).
    #[arg(long)]
    pub target: Option<String>,
    /// Runs in the small store of the lookup benchmark (the ratio's base).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub small: u64,
    /// Runs in the large store of the lookup benchmark. Seeding goes
    /// through commitRunStart, so over HTTP expect a few seconds per
    /// 10,000 runs.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub large: u64,
    /// Keyed runs per seeded session (lookup benchmark). A scan within one
    /// session only shows when this grows with --large.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub runs_per_session: u64,
    /// Measured lookups in each store (lookup benchmark).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub samples: u64,
    /// Exit 1 when the lookup ratio (large median / small median) is above
    /// this: a gate for CI.
    #[arg(long)]
    pub max_ratio: Option<f64>,
    /// Bound on every single call to the target in the lookup benchmark,
    /// in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
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
    /// Leave the sessions of passing trials in the target. By default each
    /// passing trial deletes the sessions it created (failing trials always
    /// keep theirs, for inspection).
    #[arg(long)]
    pub keep_sessions: bool,
    /// Print only failures and the closing count.
    #[arg(long, short)]
    pub quiet: bool,
    /// Scenario ids the target is known to fail, one a line, `#` comments.
    /// They are reported as expected failures; one that passes turns the run
    /// red (exit 1); an id not in the loaded scenarios is an error (exit 2).
    #[arg(long, value_name = "FILE")]
    pub expected_failures: Option<PathBuf>,
    /// Also write JUnit XML here.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Also write the `reqkey-results/1` JSON document here (docs/reports.md).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write a Markdown report here (a certificate only via `certify`).
    #[arg(long, value_name = "FILE.md")]
    pub report: Option<PathBuf>,
}

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
        Command::Model { cmd } => crate::model_cmd::run(cmd),
        Command::Certify(args) => with_runtime(|| certify_command(args)),
        Command::Schema => {
            println!("{}", crate::schema::scenario_schema_json());
            ExitCode::SUCCESS
        }
        Command::Fuzz(args) => fuzz_command(args),
        Command::Bench(args) => bench_command(args),
        Command::Serve(command) => crate::serve_cmd::run(command),
    }
}

fn with_runtime<F: std::future::Future<Output = ExitCode>>(f: impl FnOnce() -> F) -> ExitCode {
    match runtime() {
        Ok(rt) => rt.block_on(f()),
        Err(e) => harness_error(format!("cannot start the runtime: {e}")),
    }
}

/// Where the report files of a run go.
#[derive(Debug, Default)]
struct Outputs {
    junit: Option<PathBuf>,
    json: Option<PathBuf>,
    report: Option<PathBuf>,
}

/// Asks the target who it is, under the call timeout.
async fn health(target: &dyn Target, timeout_ms: u64) -> Result<serde_json::Value, String> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), target.health()).await {
        Ok(Ok(h)) => Ok(h),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no /health answer within {timeout_ms} ms")),
    }
}

fn create(path: &Path) -> Result<BufWriter<File>, String> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    File::create(path)
        .map(BufWriter::new)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Runs `scenarios` with the terminal reporter and the requested file
/// reporters; a report that cannot be written is exit 2.
async fn execute(
    target: Arc<dyn Target>,
    scenarios: &[Scenario],
    cfg: &RunConfig,
    ctx: &ReportContext,
    outputs: &Outputs,
    quiet: bool,
) -> ExitCode {
    let mut reporters: Vec<Box<dyn Reporter>> = vec![Box::new(
        TerminalReporter::new(std::io::stdout(), quiet).with_progress(progress_wanted(quiet)),
    )];
    // Files are created before the run, so a bad path fails in a second,
    // not after a long run.
    if let Some(p) = &outputs.junit {
        match create(p) {
            Ok(f) => reporters.push(Box::new(JunitReporter::new(ctx.clone(), f))),
            Err(e) => return harness_error(e),
        }
    }
    if let Some(p) = &outputs.json {
        match create(p) {
            Ok(f) => reporters.push(Box::new(JsonReporter::new(ctx.clone(), f))),
            Err(e) => return harness_error(e),
        }
    }
    if let Some(p) = &outputs.report {
        match create(p) {
            Ok(f) => reporters.push(Box::new(CertificateReporter::new(ctx.clone(), f))),
            Err(e) => return harness_error(e),
        }
    }
    let summary = runner::run(target, scenarios, cfg, &mut reporters).await;
    for r in &mut reporters {
        if let Err(e) = r.finish() {
            return harness_error(format!("cannot write a report: {e}"));
        }
    }
    ExitCode::from(summary.exit_code())
}

fn run_command(args: RunArgs) -> ExitCode {
    with_runtime(|| run_async(args))
}

async fn run_async(args: RunArgs) -> ExitCode {
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
    };
    let target = match target::open_target(&args.target, opts).await {
        Ok(t) => t,
        Err(e) => return harness_error(e),
    };
    let explicit_paths = !args.paths.is_empty();
    let paths = if explicit_paths {
        args.paths.clone()
    } else {
        default_paths(target.level())
    };
    let scenarios = match scenario::load_paths(&paths) {
        Ok(s) => s,
        Err(e) => return harness_error(e),
    };
    let expected = match &args.expected_failures {
        Some(file) => match crate::expected::load(file, scenarios.iter().map(|s| s.id.as_str())) {
            Ok(ids) => ids,
            Err(e) => return harness_error(e),
        },
        None => Vec::new(),
    };
    let loaded = scenarios.len();
    let (applicable, other): (Vec<Scenario>, Vec<Scenario>) = scenarios
        .into_iter()
        .partition(|s| s.level == target.level());
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
    cfg.keep_sessions = args.keep_sessions;
    cfg.expected_failures = expected.iter().cloned().collect();

    let outputs = Outputs {
        junit: args.junit.clone(),
        json: args.json.clone(),
        report: args.report.clone(),
    };
    let mut ctx = ReportContext::new("run", &args.target);
    if outputs.junit.is_some() || outputs.json.is_some() || outputs.report.is_some() {
        ctx.health = health(target.as_ref(), args.timeout_ms).await.ok();
        ctx.suite = if explicit_paths {
            crate::suite::selection(&paths).ok()
        } else {
            let root = Path::new("scenarios");
            crate::suite::whole_suite(root, target.level())
                .ok()
                .map(|(info, _)| info)
        };
    }
    ctx.selection = selection_flags(&args, explicit_paths);
    ctx.expected_failures = expected;
    execute(target, &selected, &cfg, &ctx, &outputs, args.quiet).await
}

/// What narrowed a `run`, as the flags that did it.
fn selection_flags(args: &RunArgs, explicit_paths: bool) -> Vec<String> {
    let mut flags = Vec::new();
    if explicit_paths {
        flags.extend(args.paths.iter().map(|p| p.display().to_string()));
    }
    flags.extend(args.tag.iter().map(|t| format!("--tag {t}")));
    flags.extend(args.skip_tag.iter().map(|t| format!("--skip-tag {t}")));
    if let Some(n) = args.repeat {
        flags.push(format!("--repeat {n}"));
    }
    if args.fail_fast {
        flags.push("--fail-fast".into());
    }
    if let Some(f) = &args.expected_failures {
        flags.push(format!("--expected-failures {}", f.display()));
    }
    flags
}

/// The file names `certify` writes into `--out`.
pub const CERTIFICATE_FILE: &str = "certificate.md";
pub const JUNIT_FILE: &str = "junit.xml";
pub const RESULTS_FILE: &str = "results.json";

async fn certify_command(args: CertifyArgs) -> ExitCode {
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
    };
    let target = match target::open_target(&args.target, opts).await {
        Ok(t) => t,
        Err(e) => return harness_error(e),
    };
    let (suite, files) = match crate::suite::whole_suite(&args.scenarios, target.level()) {
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

/// `reqkey bench lookup`: prints the figures; exit 1 only when
/// `--max-ratio` is given and exceeded.
async fn lookup_bench(args: &BenchArgs) -> ExitCode {
    let Ok(samples) = usize::try_from(args.samples) else {
        return harness_error("--samples does not fit this machine");
    };
    if args.max_ratio.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return harness_error("--max-ratio must be a positive number");
    }
    let cfg = crate::bench::LookupConfig {
        small_runs: args.small,
        large_runs: args.large,
        runs_per_session: args.runs_per_session,
        samples,
        seed: args.seed,
        call_timeout_ms: args.timeout_ms,
    };
    let target = args.target.as_deref().unwrap_or("memory");
    match crate::bench::lookup_benchmark(target, &cfg).await {
        Ok(f) => {
            println!("{f}");
            match args.max_ratio {
                Some(max) if f.ratio() > max => {
                    println!(
                        "the lookup grows with the store: ratio {:.2}x is above --max-ratio {max}",
                        f.ratio()
                    );
                    ExitCode::from(1)
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(e) => harness_error(e),
    }
}

fn bench_command(args: BenchArgs) -> ExitCode {
    use crate::bench;
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return harness_error(format!("cannot start the runtime: {e}")),
    };
    rt.block_on(async move {
        if args.kind == BenchKind::Lookup {
            return lookup_bench(&args).await;
        }
        let racy = args
            .target
            .as_deref()
            .unwrap_or("broken-memory:holder-read-outside-commit");
        if matches!(args.kind, BenchKind::All | BenchKind::Checker) {
            // A linearizable history (memory), then one that is not.
            for target in ["memory", racy] {
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
            match bench::detection_benchmark(racy, &scenarios, args.runs, args.seed).await {
                Ok(f) => println!("{f}"),
                Err(e) => return harness_error(e),
            }
        }
        ExitCode::SUCCESS
    })
}
