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
    CertificateReporter, HtmlReporter, JsonReporter, JunitReporter, ReportContext, TerminalReporter,
};
use crate::run::event::{Event, Indefinite, Reporter, RunSummary};
use crate::run::runner::{self, RunConfig};
use crate::run::select::{by_profile, reasons, NotApplicable};
use crate::targets::profile::{resolve_profile, ProfileInfo};
use crate::targets::spec::TARGET_HELP;
use crate::targets::{Target, TargetError};
use reqkey_scenario::Scenario;

pub const EXIT_CODES: &str = "\
Exit codes:
  0  every scenario passed (scenarios in --expected-failures may fail)
  1  a scenario failed: the target does not conform; or a scenario listed in
     --expected-failures passed (take it off the list)
  2  the harness could not judge: bad YAML, a scenario file over 1 MiB or 64
     levels deep, bad arguments, a target unreachable, hung, closing
     connections, answering over --max-response-bytes, not HTTP or speaking
     the other protocol, 3 silent scenarios in a row (the run stops early), an
     --expected-failures id not in the suite, a report not written, a --start
     whose faults would not reach the target (reason `wiring`)
130  interrupted (SIGINT, SIGTERM): what --start started is stopped and the
     reports say `interrupted`";

pub fn target_help() -> String {
    format!("Targets (--target):\n{}\n\n{EXIT_CODES}", TARGET_HELP)
}

/// A harness error: printed, exit 2.
/// The message is shown as one inert line: it may quote what a target sent.
pub fn harness_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!(
        "reqkey: error: {}",
        crate::report::inert::terminal(&message.to_string())
    );
    ExitCode::from(2)
}

/// A seed from the clock, for runs that did not ask for one.
pub fn fresh_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(40)
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

/// [`with_runtime`] for a command that may own processes (`--start`):
/// Ctrl-C or SIGTERM drops the command's future, so whatever it started is
/// stopped before the process exits (exit 130).
pub fn with_runtime_interruptible<F: std::future::Future<Output = ExitCode>>(
    f: impl FnOnce() -> F,
) -> ExitCode {
    use tokio::signal::unix::{signal, SignalKind};
    match runtime() {
        Ok(rt) => rt.block_on(async {
            // Registered before the command starts anything, so that a
            // signal can never kill the harness and leave a process behind.
            let (Ok(mut interrupt), Ok(mut terminate)) = (
                signal(SignalKind::interrupt()),
                signal(SignalKind::terminate()),
            ) else {
                return harness_error("cannot install the signal handlers");
            };
            tokio::select! {
                code = f() => code,
                _ = interrupt.recv() => crate::cmd::interrupt::interrupted("SIGINT"),
                _ = terminate.recv() => crate::cmd::interrupt::interrupted("SIGTERM"),
            }
        }),
        Err(e) => harness_error(format!("cannot start the runtime: {e}")),
    }
}

/// `--start CMD` and its bound, shared by `run` and `certify`.
#[derive(Debug, Clone, clap::Args)]
pub struct StartArgs {
    /// Start the target first (repeatable: one command per replica), in a
    /// shell, and stop it afterwards on every way out (a verdict, an error,
    /// Ctrl-C). `{port}` is a free port chosen for the command and
    /// `{replica}` its index; `--target` may name the ports as `{port}`
    /// (the first command's) or `{port0}`, `{port1}`...
    #[arg(long = "start", value_name = "CMD")]
    pub start: Vec<String>,
    /// How long a started target may take to answer (`/health` for HTTP
    /// targets), in milliseconds.
    #[arg(long, default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=crate::targets::owned::MAX_START_TIMEOUT_MS))]
    pub start_timeout_ms: u64,
}

/// Starts `--start`'s commands, if any, and fills their ports into the
/// `--target` text. The returned guard stops them when dropped.
pub fn start_owned(
    args: &StartArgs,
    target: &str,
) -> Result<(Option<crate::targets::owned::Owned>, String), String> {
    if args.start.is_empty() {
        return Ok((None, target.to_owned()));
    }
    let mut owned = crate::targets::owned::Owned::start(&args.start)?;
    let filled = crate::targets::owned::fill(target, &owned.ports, None);
    owned.wire_to(&filled)?;
    Ok((Some(owned), filled))
}

/// How long a started target's processes must stay up after it first
/// answered, before the run trusts that the answer was theirs.
const START_SETTLE_MS: u64 = 500;

/// Opens the target; when the harness started it, tries again until it
/// answers, the command exits, or `start_timeout_ms` passes (bounded), and
/// hands the processes to the target ([`OwnedTarget`]: fault steps reach
/// them, and they stop when the target is dropped).
pub async fn open_started(
    spec: &crate::targets::spec::TargetSpec,
    opts: crate::targets::TargetOptions,
    owned: Option<crate::targets::owned::Owned>,
    start_timeout_ms: u64,
) -> Result<Arc<dyn Target>, TargetError> {
    let Some(mut owned) = owned else {
        return spec.open(opts).await;
    };
    let deadline = tokio::time::Instant::now() + Duration::from_millis(start_timeout_ms);
    loop {
        match spec.open(opts).await {
            Ok(target) => {
                // Something answered on the chosen ports; it may not be
                // what was started: another process can take a port
                // between its choice and the command's bind, and the
                // command then exits at once. A target that is not the
                // one started is no verdict (exit 2), never a failure.
                tokio::time::sleep(Duration::from_millis(START_SETTLE_MS)).await;
                if let Some(exited) = owned.exited() {
                    return Err(TargetError::Wiring(format!(
                        "the started target stopped while another process answered on its port: {exited}"
                    )));
                }
                owned.verify_answering().map_err(TargetError::Wiring)?;
                return Ok(Arc::new(crate::targets::owned::OwnedTarget::new(
                    target,
                    owned,
                    start_timeout_ms,
                )));
            }
            Err(e) if !e.is_silence() => return Err(e),
            Err(e) => {
                if let Some(exited) = owned.exited() {
                    return Err(TargetError::Unreachable(format!(
                        "the started target stopped before it answered: {exited}"
                    )));
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(TargetError::Unreachable(format!(
                        "the started target did not answer within --start-timeout-ms {start_timeout_ms}: {e}"
                    )));
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Where the report files of a run go.
#[derive(Debug, Default, Clone)]
pub struct Outputs {
    pub junit: Option<PathBuf>,
    pub json: Option<PathBuf>,
    /// The Markdown report (a certificate under `certify`).
    pub report: Option<PathBuf>,
    /// The self-contained HTML page.
    pub html: Option<PathBuf>,
    /// The directory the judged histories go to (`--export-histories`).
    pub histories: Option<PathBuf>,
}

impl Outputs {
    /// The files asked for, in a fixed order.
    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.report, &self.html, &self.junit, &self.json]
            .into_iter()
            .flatten()
    }
}

/// Reads the profile to certify (`--profile` or the target's `/health`),
/// keeps the scenarios it admits and says so in the run's first lines:
/// which profile, and how many scenarios did not apply and why. A profile
/// that cannot be read is `Err` (exit 2).
pub async fn select_by_profile(
    target: &dyn Target,
    stated: Option<&str>,
    scenarios: Vec<Scenario>,
    timeout_ms: u64,
    quiet: bool,
) -> Result<(ProfileInfo, Vec<Scenario>, Vec<NotApplicable>), String> {
    let stated = stated
        .map(crate::targets::profile::parse_profile_flag)
        .transpose()
        .map_err(|e| e.to_string())?;
    let mut info = resolve_profile(target, stated, timeout_ms)
        .await
        .map_err(|e| format!("{e} (`run` and `certify` take --profile to state one)"))?;
    let faults = crate::targets::profile::fault_support(target, timeout_ms).await;
    info.crash = Some(faults.describe());
    let faulty: std::collections::BTreeSet<String> = scenarios
        .iter()
        .filter(|s| s.requires.faults == Some(true))
        .map(|s| s.id.clone())
        .collect();
    let (apply, not) = by_profile(scenarios, &info.profile, &faults);
    info.crash_scenarios = faults.started.then(|| {
        crate::report::crash::crash_scenarios(
            &faulty,
            apply.iter().map(|s| s.id.as_str()),
            not.iter().map(|n| (n.id.as_str(), n.requires.as_str())),
        )
    });
    if !quiet {
        println!("reqkey: profile: {}", info.describe());
        println!("reqkey: crash: {}", faults.describe());
        if !not.is_empty() {
            println!(
                "reqkey: {} scenarios do not apply to this profile and are not run: {}",
                not.len(),
                reasons(&not).join("; ")
            );
        }
    }
    Ok((info, apply, not))
}

/// Asks the target who it is, under the call timeout.
pub async fn health(
    target: &dyn Target,
    timeout_ms: u64,
) -> Result<serde_json::Value, TargetError> {
    tokio::time::timeout(Duration::from_millis(timeout_ms), target.health())
        .await
        .unwrap_or(Err(TargetError::Timeout { timeout_ms }))
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
/// reporters; a report that cannot be written is exit 2. Says which files
/// it wrote (only those it managed to write) unless `quiet`.
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
    match file_reporters(ctx, outputs, scenarios) {
        Ok(files) => reporters.extend(files),
        Err(e) => return harness_error(e),
    }
    if let Some(dir) = &outputs.histories {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return harness_error(format!("cannot create {}: {e}", dir.display()));
        }
    }
    let summary = runner::run(target, scenarios, cfg, &mut reporters).await;
    // The crash claim is made from what ran (report::crash), so said after.
    if let Some(claim) = ctx
        .profile
        .as_ref()
        .and_then(|p| crate::report::crash::claim(p, &summary.results))
        .filter(|_| !quiet)
    {
        println!("reqkey: crash: {claim}");
    }
    if let Some(i) = &summary.indefinite {
        eprintln!(
            "reqkey: error: no verdict ({}): {}",
            i.reason,
            crate::report::inert::terminal(&i.message)
        );
    }
    for r in &mut reporters {
        if let Err(e) = r.finish() {
            return harness_error(format!("cannot write a report: {e}"));
        }
    }
    if !quiet {
        for path in outputs.paths() {
            eprintln!("reqkey: wrote {}", path.display());
        }
    }
    if let (Some(dir), Some(sink)) = (&outputs.histories, &cfg.export_histories) {
        match write_histories(dir, &sink.take()) {
            Ok(n) if !quiet => eprintln!("reqkey: wrote {n} histories to {}", dir.display()),
            Ok(_) => {}
            Err(e) => return harness_error(e),
        }
    }
    ExitCode::from(summary.exit_code())
}

/// Writes each history as `DIR/<scenario-id>.trial-<n>.json` in reqkey's
/// JSON form (`reqkey check history` reads it); how many it wrote.
pub fn write_histories(
    dir: &Path,
    histories: &[crate::run::export::TrialHistory],
) -> Result<usize, String> {
    for h in histories {
        let path = dir.join(h.file_name());
        let text = crate::secrets::scrub_json(&reqkey_check::history::write_json(&h.operations));
        std::fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(histories.len())
}

/// Writes every report `outputs` asks for from a finished run (`certify
/// merge`, and a run that judged nothing).
pub fn write_reports(
    ctx: &ReportContext,
    outputs: &Outputs,
    scenarios: &[Scenario],
    summary: &RunSummary,
) -> Result<(), String> {
    let mut reporters = file_reporters(ctx, outputs, scenarios)?;
    for r in &mut reporters {
        r.on_event(&Event::RunFinished {
            summary: summary.clone(),
        });
        r.finish()
            .map_err(|e| format!("cannot write a report: {e}"))?;
    }
    Ok(())
}

/// The file reporters `outputs` asks for, their files created.
fn file_reporters(
    ctx: &ReportContext,
    outputs: &Outputs,
    scenarios: &[Scenario],
) -> Result<Vec<Box<dyn Reporter>>, String> {
    let mut reporters: Vec<Box<dyn Reporter>> = Vec::new();
    if let Some(p) = &outputs.junit {
        reporters.push(Box::new(JunitReporter::new(ctx.clone(), create(p)?)));
    }
    if let Some(p) = &outputs.json {
        reporters.push(Box::new(JsonReporter::new(ctx.clone(), create(p)?)));
    }
    if let Some(p) = &outputs.report {
        reporters.push(Box::new(CertificateReporter::new(ctx.clone(), create(p)?)));
    }
    if let Some(p) = &outputs.html {
        reporters.push(Box::new(HtmlReporter::new(
            ctx.clone(),
            scenarios.to_vec(),
            create(p)?,
        )));
    }
    Ok(reporters)
}

/// The target could not be opened (down, hung, closing, not HTTP, the
/// other protocol): exit 2, and every requested report is still written,
/// saying why no verdict was reached.
pub fn not_judged(ctx: &ReportContext, outputs: &Outputs, seed: u64, e: &TargetError) -> ExitCode {
    not_judged_because(ctx, outputs, seed, e.reason(), e.to_string())
}

/// No verdict for a reason that is not a target error (a profile that
/// cannot be read, for example): exit 2, every requested report written
/// with the reason.
pub fn not_judged_because(
    ctx: &ReportContext,
    outputs: &Outputs,
    seed: u64,
    reason: &'static str,
    message: String,
) -> ExitCode {
    let message = crate::run::bound::text(&message);
    let code = harness_error(format_args!("no verdict ({reason}): {message}"));
    let summary = RunSummary::not_judged(ctx.target.clone(), seed, Indefinite { reason, message });
    match write_reports(ctx, outputs, &[], &summary) {
        Ok(()) => code,
        Err(e) => harness_error(e),
    }
}
