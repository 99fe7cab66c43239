//! `reqkey run`: scenarios (the default suite of the target's level, or
//! the given paths) against one target, with optional filters and reports.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::cmd::exit::{fresh_seed, harness_error};
use crate::cmd::judging::{self, Identity, Judge, StartArgs};
use crate::cmd::outputs::Outputs;
use crate::cmd::runtime::with_runtime_interruptible;
use crate::run::partition::Partition;
use crate::run::runner::RunConfig;
use crate::run::select::{check_tags_exist, filter_by_tags};
use crate::run::suite;
use reqkey_scenario::{self as scenario, Scenario};

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Scenario files or directories (recursive). Default: the suite
    /// embedded in this binary, of the target's level (`reqkey suite export
    /// DIR` writes it out).
    pub paths: Vec<PathBuf>,
    /// What to certify (see "Targets" below). Default: `memory`, the
    /// built-in reference store; the first line of output and every report
    /// say which target was judged, and that it was the default.
    #[arg(long, short)]
    pub target: Option<String>,
    #[command(flatten)]
    pub start: StartArgs,
    #[command(flatten)]
    pub link: crate::cmd::judging::AccessArgs,
    #[command(flatten)]
    pub api: crate::cmd::judging::ApiArgs,
    /// Only the scenario with this id (repeatable), from the given paths
    /// or the embedded suite: how a report's replay line names a scenario
    /// built into this binary. An id that names no scenario is exit 2.
    #[arg(long = "scenario", value_name = "ID")]
    pub scenario_ids: Vec<String>,
    /// Only scenarios with this tag (repeatable: any of them).
    #[arg(long)]
    pub tag: Vec<String>,
    /// Leave out scenarios with this tag (repeatable).
    #[arg(long)]
    pub skip_tag: Vec<String>,
    /// Stop after the first scenario that does not pass (runs scenarios
    /// one after another).
    #[arg(long)]
    pub fail_fast: bool,
    /// Scenarios run at once (those whose sessions are all fresh
    /// `$variables`; one naming a literal session runs alone); results are
    /// reported in file order either way. 1: one after another.
    #[arg(long, default_value_t = crate::run::runner::DEFAULT_CONCURRENCY as u32,
          value_parser = clap::value_parser!(u32).range(1..=64))]
    pub jobs: u32,
    /// Trials per scenario, overriding each scenario's `repeat` (alias
    /// `--trials`).
    #[arg(long, visible_alias = "trials", value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub repeat: Option<u32>,
    /// The seed of every random choice (printed on failure; replays a run).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Concurrent requests per parallel item: overrides every `copies:`.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=i64::from(reqkey_scenario::MAX_COPIES)))]
    pub concurrency: Option<u32>,
    /// Bound on every single call to the target, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// Bound on every answer's body, in bytes: a larger answer is not read
    /// whole and its step cannot be judged (exit 2).
    #[arg(long, default_value_t = crate::targets::DEFAULT_MAX_RESPONSE_BYTES,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 32)))]
    pub max_response_bytes: u64,
    /// Leave the sessions of passing trials in the target. By default each
    /// passing trial deletes the sessions it created (failing trials always
    /// keep theirs, for inspection).
    #[arg(long)]
    pub keep_sessions: bool,
    /// Print only failures and the closing count.
    #[arg(long, short)]
    pub quiet: bool,
    /// Certify against this profile instead of the one the target's
    /// `/health` declares: default, keys-ignored, interrupt-previous, or
    /// supportsRequestKey=BOOL,concurrentEntry=reject|interrupt_previous.
    /// Reports say it was stated. Agent targets only.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
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
    /// Also write a report here: Markdown, or one self-contained HTML page
    /// when FILE ends in `.html` (a certificate only via `certify`).
    #[arg(long, value_name = "FILE.md|FILE.html")]
    pub report: Option<PathBuf>,
    /// Also write the self-contained HTML page here (race timelines,
    /// failures, steps).
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,
    /// Write the history each race, `linearizable` and `mixed_histories`
    /// trial judged into DIR (created if missing), one file a trial:
    /// `<scenario-id>.trial-<n>.json`, in the form `reqkey check history`
    /// reads (at most 20 trials a scenario, the failing one always).
    #[arg(long, value_name = "DIR")]
    pub export_histories: Option<PathBuf>,
    /// Run only shard K of N of the loaded scenarios (1-based), for a suite
    /// split across CI jobs: the scenarios sorted by id, the one at
    /// position i in shard i mod N + 1, so every scenario is in exactly one
    /// shard. Taken before the level, profile and tag filters; an empty
    /// shard is not an error.
    #[arg(long, value_name = "K/N")]
    pub partition: Option<Partition>,
}

/// Does `path` name an HTML file (`--report report.html`)?
fn is_html(path: &std::path::Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("html") || e.eq_ignore_ascii_case("htm"))
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

pub fn run_command(args: RunArgs) -> ExitCode {
    with_runtime_interruptible(|| run_async(args))
}

async fn run_async(args: RunArgs) -> ExitCode {
    // One way down: parse, start, judge and report (cmd/judging.rs).
    if args.api.dry_run {
        return harness_error(
            "--dry-run plans a certification: `reqkey certify --api FILE --dry-run`",
        );
    }
    let defaulted = args.target.is_none();
    // Drawn before anything is sent: every request of the run says it.
    let seed = args.seed.unwrap_or_else(fresh_seed);
    crate::targets::user_agent::choose(seed);
    let plan = match judging::Plan::parse(
        args.target.as_deref().unwrap_or(DEFAULT_TARGET),
        &args.start,
        &args.link,
        &args.api,
        args.timeout_ms,
        args.max_response_bytes,
    ) {
        Ok(plan) => plan,
        Err(e) => return harness_error(e),
    };
    // Parsed once, there; from now on only the typed spec and its
    // redacted display name exist (a secret in the string reaches no
    // output).
    let (started, mut ctx) = match plan.start("run") {
        Ok(started) => started,
        Err(e) => return harness_error(e),
    };
    let spec = &started.spec;
    let target_name = spec.display_name();
    println!("{}", judging_line(&target_name, defaulted));
    let outputs = Outputs {
        junit: args.junit.clone(),
        json: args.json.clone(),
        report: args.report.clone().filter(|p| !is_html(p)),
        html: args
            .html
            .clone()
            .or_else(|| args.report.clone().filter(|p| is_html(p))),
        histories: args.export_histories.clone(),
    };
    let explicit_paths = !args.paths.is_empty();
    let paths = args.paths.clone();
    // The scenarios, and what a report says they were: the given paths, or
    // the embedded suite of the target's level.
    let loaded_suite = if explicit_paths {
        scenario::load_paths(&paths)
            .map_err(|e| with_missing_suite_hint(e.to_string(), &paths))
            .and_then(|s| Ok((suite::selection(&paths).map_err(|e| e.to_string())?, s)))
    } else {
        suite::embedded_suite(spec.level()).map_err(|e| e.to_string())
    };
    let (suite_info, scenarios) = match loaded_suite {
        Ok(s) => s,
        Err(e) => return harness_error(e),
    };
    if let Err(e) = check_tags_exist(&scenarios, &args.tag, &args.skip_tag) {
        return harness_error(e);
    }
    let scenarios = match select_ids(scenarios, &args.scenario_ids) {
        Ok(s) => s,
        Err(e) => return harness_error(e),
    };
    if !args.quiet {
        eprintln!(
            "reqkey: suite: {} ({} files, {}{})",
            suite_info.source,
            suite_info.files,
            suite_info.digest,
            suite_info
                .version
                .as_deref()
                .map_or_else(String::new, |v| format!(", version {v}"))
        );
    }
    ctx.target_defaulted = defaulted;
    ctx.selection = selection_flags(&args, explicit_paths);
    ctx.suite = Some(suite_info);
    ctx.partition = args.partition;
    let expected = match &args.expected_failures {
        Some(file) => {
            match crate::run::expected::load(file, scenarios.iter().map(|s| s.id.as_str())) {
                Ok(ids) => ids,
                Err(e) => return harness_error(e),
            }
        }
        None => Vec::new(),
    };
    // The shard is taken over everything loaded, before any filter, so the
    // shards of one command line partition the same list whatever the
    // target; after the expected failures are read, so that one list
    // serves every shard (an id in another shard is not an unknown id).
    let scenarios = match args.partition {
        Some(p) => p.select(scenarios),
        None => scenarios,
    };
    let loaded = scenarios.len();
    let (applicable, other): (Vec<Scenario>, Vec<Scenario>) =
        scenarios.into_iter().partition(|s| s.level == spec.level());
    if !other.is_empty() {
        eprintln!(
            "reqkey: note: {} of {loaded} scenarios are of another level than {} ({}) and were not run",
            other.len(),
            target_name,
            spec.level()
        );
    }
    let mut cfg = RunConfig::new(seed);
    cfg.repeat_override = args.repeat;
    cfg.copies_override = args.concurrency;
    cfg.fail_fast = args.fail_fast;
    cfg.concurrency = args.jobs as usize;
    cfg.call_timeout_ms = args.timeout_ms;
    cfg.keep_sessions = args.keep_sessions;
    cfg.expected_failures = expected.iter().cloned().collect();
    cfg.export_histories = args
        .export_histories
        .as_ref()
        .map(|_| std::sync::Arc::new(crate::run::export::HistorySink::new()));
    ctx.expected_failures = expected;
    let how = Judge {
        start_timeout_ms: args.start.start_timeout_ms,
        stated_profile: args.profile.as_deref(),
        identity: Identity::ForReports,
        quiet: args.quiet,
        seed,
        outputs: &outputs,
        fuzz_cases: None,
        scale: crate::cmd::fuzz_scale::ScaleArgs {
            patience: crate::run::fuzz::patience::Patience::default(),
            capacity_keys: crate::run::fuzz::scale::DEFAULT_CAPACITY_KEYS,
        },
    };
    // Tags narrow what the profile admits; an empty selection is a mistake
    // (a shard may be empty).
    let narrow = |applicable: Vec<Scenario>| {
        let selected = filter_by_tags(applicable, &args.tag, &args.skip_tag);
        if selected.is_empty() && args.partition.is_none() {
            return Err("no scenario to run after filtering by level, profile and tags".to_owned());
        }
        Ok(selected)
    };
    started.judge(how, ctx, applicable, narrow, &cfg).await
}

/// The scenarios `--scenario` names (all of them when it names none); an
/// id that is not among them is an error, never an empty run.
fn select_ids(scenarios: Vec<Scenario>, ids: &[String]) -> Result<Vec<Scenario>, String> {
    if ids.is_empty() {
        return Ok(scenarios);
    }
    if let Some(missing) = ids
        .iter()
        .find(|id| !scenarios.iter().any(|s| &s.id == *id))
    {
        return Err(format!(
            "--scenario {missing}: no scenario of that id in the suite (`reqkey suite info` lists them)"
        ));
    }
    Ok(scenarios
        .into_iter()
        .filter(|s| ids.contains(&s.id))
        .collect())
}

/// What narrowed a `run`, as the flags that did it.
fn selection_flags(args: &RunArgs, explicit_paths: bool) -> Vec<String> {
    let mut flags = Vec::new();
    if explicit_paths {
        flags.extend(args.paths.iter().map(|p| p.display().to_string()));
    }
    flags.extend(
        args.scenario_ids
            .iter()
            .map(|id| format!("--scenario {id}")),
    );
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
    if let Some(p) = &args.profile {
        flags.push(format!("--profile {p}"));
    }
    if let Some(p) = &args.partition {
        flags.push(p.flag());
    }
    flags
}

/// A path that does not exist outside a checkout (`reqkey run
/// scenarios/store` as an old guide wrote it) gets a pointer to the suite
/// built into the binary (issue 41).
fn with_missing_suite_hint(error: String, paths: &[std::path::PathBuf]) -> String {
    match paths.iter().find(|p| !p.exists()) {
        Some(missing) => format!(
            "{error}\n  `{}` does not exist here; the scenario suite is built into reqkey: `reqkey run --target T` runs the target's level (`--scenario ID` or `--tag TAG` picks some), `reqkey suite export DIR` writes the suite out",
            crate::report::inert::terminal(&missing.display().to_string())
        ),
        None => error,
    }
}
