//! `reqkey run`: scenarios (the default suite of the target's level, or
//! the given paths) against one target, with optional filters and reports.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::cmd::common::{
    check_tags_exist, default_paths, execute, filter_by_tags, fresh_seed, harness_error, health,
    with_runtime, Outputs,
};
use crate::report::ReportContext;
use crate::run::runner::RunConfig;
use crate::scenario::{self, Scenario};
use crate::target::spec::open_target;
use crate::target::TargetOptions;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario files or directories (recursive). Default: scenarios/store or
    /// scenarios/agent, by the target's level.
    pub paths: Vec<PathBuf>,
    /// What to certify (see "Targets" below). Default: `memory`, the
    /// built-in reference store; the first line of output and every report
    /// say which target was judged, and that it was the default.
    #[arg(long, short)]
    pub target: Option<String>,
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

pub fn run_command(args: RunArgs) -> ExitCode {
    with_runtime(|| run_async(args))
}

/// `run`'s target when none is given.
pub const DEFAULT_TARGET: &str = "memory";

/// The first line `run` prints: which target it judges.
pub fn judging_line(spec: &str, defaulted: bool) -> String {
    if defaulted {
        format!(
            "reqkey: judging target {spec}, the built-in reference store (no --target was given)"
        )
    } else {
        format!("reqkey: judging target {spec}")
    }
}

async fn run_async(args: RunArgs) -> ExitCode {
    let opts = TargetOptions {
        call_timeout_ms: args.timeout_ms,
    };
    let defaulted = args.target.is_none();
    let spec = args
        .target
        .clone()
        .unwrap_or_else(|| DEFAULT_TARGET.to_owned());
    println!(
        "{}",
        judging_line(&reqkey_reference::store::redact_url(&spec), defaulted)
    );
    let target = match open_target(&spec, opts).await {
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
        Some(file) => {
            match crate::run::expected::load(file, scenarios.iter().map(|s| s.id.as_str())) {
                Ok(ids) => ids,
                Err(e) => return harness_error(e),
            }
        }
        None => Vec::new(),
    };
    if let Err(e) = check_tags_exist(&scenarios, &args.tag, &args.skip_tag) {
        return harness_error(e);
    }
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
    let mut ctx = ReportContext::new("run", &spec);
    ctx.target_defaulted = defaulted;
    if outputs.junit.is_some() || outputs.json.is_some() || outputs.report.is_some() {
        ctx.health = health(target.as_ref(), args.timeout_ms).await.ok();
        ctx.suite = if explicit_paths {
            crate::run::suite::selection(&paths).ok()
        } else {
            let root = Path::new("scenarios");
            crate::run::suite::whole_suite(root, target.level())
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
