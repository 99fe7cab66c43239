//! One judging: the path `run` and `certify` share, in order and each
//! stage once. [`start`] starts `--start`'s commands and parses the target;
//! [`Started::judge`] opens it (waiting for a started one), asks who it is,
//! reads its profile, keeps the scenarios that apply, runs them with the
//! reporters and writes the reports. A stage that cannot judge ends the
//! judging there with every report written, saying why (exit 2).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::cmd::exit::harness_error;
use crate::cmd::interrupt_reports::write_reports_on_interrupt;
use crate::cmd::outputs::{
    file_reporters, not_judged, not_judged_because, write_histories, Outputs,
};
use crate::report::terminal::progress_wanted;
use crate::report::{ReportContext, TerminalReporter};
use crate::run::bound;
use crate::run::event::Reporter;
use crate::run::runner::{self, RunConfig};
use crate::run::select::{by_profile, reasons, NotApplicable};
use crate::targets::owned::Owned;
use crate::targets::profile::{resolve_profile, ProfileInfo};
use crate::targets::spec::TargetSpec;
use crate::targets::{Target, TargetError, TargetOptions};
use reqkey_scenario::Scenario;

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
    let (apply, mut not) = by_profile(scenarios, &info.profile, &faults);
    let (apply, not_idem) = crate::run::select::by_idem_profile(apply, info.idem.as_ref());
    not.extend(not_idem);
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
    ExitCode::from(crate::run::fuzz::pass::FuzzPass::with_suite_exit(
        summary.exit_code(),
        ctx.fuzz.as_ref(),
    ))
}

/// The first stage: `--start`'s processes (if any) and the target parsed,
/// their ports filled in. From here on only the typed spec and its
/// redacted display name exist (a secret in the string reaches no output).
#[derive(Debug)]
pub struct Started {
    pub spec: TargetSpec,
    owned: Option<Owned>,
}

/// Starts `--start`'s commands, if any, and parses `--target`.
pub fn start(args: &StartArgs, target: &str) -> Result<Started, String> {
    let (owned, text) = start_owned(args, target)?;
    let spec = TargetSpec::parse(&text).map_err(|e| e.to_string())?;
    Ok(Started { spec, owned })
}

/// When a judging reads the target's identity (`/health`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// A certificate names it: a target that cannot say is no verdict.
    Required,
    /// For the reports, when some are written; a failure leaves it out.
    ForReports,
}

/// How a started target is judged.
#[derive(Debug)]
pub struct Judge<'a> {
    pub opts: TargetOptions,
    pub start_timeout_ms: u64,
    /// `--profile`, when stated.
    pub stated_profile: Option<&'a str>,
    pub identity: Identity,
    pub quiet: bool,
    pub seed: u64,
    pub outputs: &'a Outputs,
    /// Programs of the certification's fuzz pass (`None`: no pass, as in
    /// `run`; `Some(0)`: skipped, and the reports say so).
    pub fuzz_cases: Option<u32>,
}

impl Started {
    /// The rest of the judging, in order: open, identity, profile and the
    /// scenarios it admits, `narrow` (the command's own filters, after the
    /// profile), run, reports.
    pub async fn judge(
        self,
        how: Judge<'_>,
        mut ctx: ReportContext,
        scenarios: Vec<Scenario>,
        narrow: impl FnOnce(Vec<Scenario>) -> Result<Vec<Scenario>, String>,
        cfg: &RunConfig,
    ) -> ExitCode {
        let timeout_ms = how.opts.call_timeout_ms;
        // A signal from here on still writes the reports, with the reason.
        write_reports_on_interrupt(&ctx, how.outputs, how.seed);
        let target =
            match open_started(&self.spec, how.opts, self.owned, how.start_timeout_ms).await {
                Ok(t) => t,
                Err(e) => return not_judged(&ctx, how.outputs, how.seed, &e),
            };
        let identity = match how.identity {
            Identity::Required => match health(target.as_ref(), timeout_ms).await {
                Ok(h) => Some(bound::value(&h)),
                Err(e) => return not_judged(&ctx, how.outputs, how.seed, &e),
            },
            Identity::ForReports => None,
        };
        let selected = select_by_profile(
            target.as_ref(),
            how.stated_profile,
            scenarios,
            timeout_ms,
            how.quiet,
        )
        .await;
        let (profile, applicable, not_applicable) = match selected {
            Ok(selected) => selected,
            Err(e) => {
                ctx.health = match identity {
                    Some(h) => Some(h),
                    None => health(target.as_ref(), timeout_ms)
                        .await
                        .ok()
                        .map(|h| bound::value(&h)),
                };
                return not_judged_because(&ctx, how.outputs, how.seed, "no_profile", e);
            }
        };
        let scenarios = match narrow(applicable) {
            Ok(s) => s,
            Err(e) => return harness_error(e),
        };
        ctx.health = match identity {
            Some(h) => Some(h),
            None if how.outputs.wants_reports() => health(target.as_ref(), timeout_ms)
                .await
                .ok()
                .map(|h| bound::value(&h)),
            None => None,
        };
        if let Some(cases) = how.fuzz_cases {
            let pass = crate::run::fuzz::pass::fuzz_pass(
                Arc::clone(&target),
                profile.profile,
                profile.idem.clone(),
                cases,
                how.seed,
                timeout_ms,
            )
            .await;
            let (line, reason) = pass.line();
            let reason = reason.and_then(|r| r.lines().next()).unwrap_or("");
            println!("{line} {}", crate::report::inert::terminal(reason));
            ctx.fuzz = Some(pass);
        }
        let cfg = cfg.declaring(&profile);
        ctx.profile = Some(profile);
        ctx.not_applicable = not_applicable;
        write_reports_on_interrupt(&ctx, how.outputs, how.seed);
        execute(target, &scenarios, &cfg, &ctx, how.outputs, how.quiet).await
    }
}
