//! What every command shares: exit codes, the runtime, the target's
//! `/health`, report files and running scenarios with the reporters.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::report::terminal::progress_wanted;
use crate::report::{
    CertificateReporter, JsonReporter, JunitReporter, ReportContext, TerminalReporter,
};
use crate::run::event::Reporter;
use crate::run::runner::{self, RunConfig};
use crate::scenario::Scenario;
use crate::target::spec::TARGET_HELP;
use crate::target::{Level, Target};

pub const EXIT_CODES: &str = "\
Exit codes:
  0  every scenario passed (scenarios in --expected-failures may fail)
  1  a scenario failed: the target does not conform; or a scenario listed in
     --expected-failures passed (take it off the list)
  2  the harness could not judge: bad YAML, bad arguments, target unreachable or
     timed out, an --expected-failures id not in the suite, a report not written";

pub fn target_help() -> String {
    format!("Targets (--target):\n{}\n\n{EXIT_CODES}", TARGET_HELP)
}

/// A harness error: printed, exit 2.
pub fn harness_error(message: impl std::fmt::Display) -> ExitCode {
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

/// Refuses a `--tag` or `--skip-tag` that no loaded scenario carries: a
/// mistyped `--skip-tag rcae` would otherwise skip nothing, silently.
pub fn check_tags_exist(
    scenarios: &[Scenario],
    tags: &[String],
    skip_tags: &[String],
) -> Result<(), String> {
    let known: std::collections::BTreeSet<&str> = scenarios
        .iter()
        .flat_map(|s| s.tags.iter().map(String::as_str))
        .collect();
    let unknown: Vec<String> = tags
        .iter()
        .map(|t| ("--tag", t))
        .chain(skip_tags.iter().map(|t| ("--skip-tag", t)))
        .filter(|(_, t)| !known.contains(t.as_str()))
        .map(|(flag, t)| format!("{flag} {t}"))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{} names a tag no loaded scenario has (known tags: {})",
        unknown.join(", "),
        known.into_iter().collect::<Vec<_>>().join(", ")
    ))
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

pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
}

pub fn with_runtime<F: std::future::Future<Output = ExitCode>>(f: impl FnOnce() -> F) -> ExitCode {
    match runtime() {
        Ok(rt) => rt.block_on(f()),
        Err(e) => harness_error(format!("cannot start the runtime: {e}")),
    }
}

/// Where the report files of a run go.
#[derive(Debug, Default)]
pub struct Outputs {
    pub junit: Option<PathBuf>,
    pub json: Option<PathBuf>,
    pub report: Option<PathBuf>,
}

/// Asks the target who it is, under the call timeout.
pub async fn health(target: &dyn Target, timeout_ms: u64) -> Result<serde_json::Value, String> {
    match tokio::time::timeout(Duration::from_millis(timeout_ms), target.health()).await {
        Ok(Ok(h)) => Ok(h),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no /health answer within {timeout_ms} ms")),
    }
}

pub fn create(path: &Path) -> Result<BufWriter<File>, String> {
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
pub async fn execute(
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
