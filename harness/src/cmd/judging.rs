//! One judging: the path `run` and `certify` share, in order and each
//! stage once, one way down: [`Plan::parse`] reads the command line's
//! access, API map and target (nothing started); [`Plan::start`] starts
//! `--start`'s commands, parses the target once and names it in the
//! reports' context; [`Started::judge`] opens it (waiting for a started one), asks who it is,
//! reads its profile, keeps the scenarios that apply, runs them with the
//! reporters and writes the reports. A stage that cannot judge ends the
//! judging there with every report written, saying why (exit 2).

use reqkey_reference::scheme::{self, Scheme};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use crate::cmd::exit::harness_error;
use crate::cmd::interrupt_reports::{write_reports_on_interrupt, SoFar};
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
    /// (the first command's) or `{port0}`, `{port1}`... A command must
    /// name its port (`{port}` or `{portN}`): one that does not is
    /// refused before anything starts.
    #[arg(long = "start", value_name = "CMD")]
    pub start: Vec<String>,
    /// With --start: the database the started store uses (repeatable:
    /// `{db0}`, `{db1}`...). The harness puts a fault-injecting proxy of
    /// its own in front of it and gives the command the proxy's address
    /// in place of `{db}`, so that the `link` scenarios can reset, stall
    /// and silence the store's database link (PostgreSQL `postgres://`,
    /// Redis `redis://`, Redis Cluster `redis+cluster://`, each node).
    #[arg(long = "db", value_name = "URL", requires = "start")]
    pub db: Vec<String>,
    /// How long a started target may take to answer (`/health` for HTTP
    /// targets), in milliseconds.
    #[arg(long, default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..=crate::targets::owned::MAX_START_TIMEOUT_MS))]
    pub start_timeout_ms: u64,
}

impl StartArgs {
    /// Writes into the reports' context what a replay needs to start the
    /// target again: the target as written (`{port}` unfilled) and each
    /// command, redacted. Nothing without `--start`.
    fn note_in(&self, written_target: &str, ctx: &mut crate::report::context::ReportContext) {
        if self.start.is_empty() {
            return;
        }
        ctx.target_template = Some(reqkey_reference::store::redact_url(written_target));
        ctx.start_commands = self
            .start
            .iter()
            .map(|c| crate::secrets::redact_command(c))
            .collect();
        ctx.db_urls = self
            .db
            .iter()
            .map(|u| reqkey_reference::store::redact_url(u))
            .collect();
    }
}

/// How every request reaches the target: `--cacert`, `--header`,
/// `--max-rps` (shared by `run`, `certify`, `fuzz` and `proxy`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct AccessArgs {
    /// Trust the certificates of this PEM file (a private CA) for an
    /// `https://`, `store+https://` or `idem+https://` target, besides the
    /// system's roots; as curl does, a server presenting one of them itself
    /// (a self-signed certificate, CA:TRUE included) is trusted once its
    /// name and dates hold. A certificate refused is exit 2, naming it,
    /// the reason and the fix.
    #[arg(long, value_name = "PEM")]
    pub cacert: Option<std::path::PathBuf>,
    /// Send this header on every request to the target (repeatable; curl's
    /// spelling, `--header 'Authorization: Bearer TOKEN'`). A value written
    /// `env:VAR` is read from the environment variable VAR
    /// (`--header 'Authorization: env:API_TOKEN'`). Values are secrets:
    /// no output shows them.
    #[arg(long = "header", short = 'H', value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// At most N requests in any one-second window to the target (bursts
    /// of up to N at once), every request included: scenarios, the fuzz
    /// pass, health reads, clean-up. Races under a low rate may not
    /// overlap: indefinite, never a pass.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub max_rps: Option<u32>,
    /// Write one JSON line per request sent to the target to FILE
    /// (run, certify, fuzz): method, path, header names as spelt, the
    /// request key as sent, the `User-Agent`, the body's size; no other
    /// header value (docs/fuzz.md, "What reqkey's traffic looks like").
    #[arg(long, value_name = "FILE")]
    pub request_log: Option<std::path::PathBuf>,
}

impl AccessArgs {
    /// Parsed once, at the edge (credentials registered as secrets).
    pub fn link(&self) -> Result<crate::targets::access::Access, String> {
        let link = crate::targets::access::Access::new(
            self.cacert.as_deref(),
            &self.headers,
            self.max_rps,
        )?;
        match &self.request_log {
            Some(path) => {
                Ok(link.logging_to(crate::targets::request_log::RequestLog::create(path)?))
            }
            None => Ok(link),
        }
    }

    /// These flags as a replay line writes them: the CA file, each header
    /// by its name with its `env:VAR` source (a value given on the command
    /// line is written `***`: never a secret), the rate.
    pub fn replay_flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(ca) = &self.cacert {
            out.push("--cacert".to_owned());
            out.push(ca.display().to_string());
        }
        for header in &self.headers {
            let (name, value) = header.split_once(':').unwrap_or((header, ""));
            let value = value.trim();
            let source = match value.strip_prefix("env:") {
                Some(var) => format!("env:{var}"),
                None => crate::secrets::REDACTED.to_owned(),
            };
            out.push("-H".to_owned());
            out.push(format!("{}: {source}", name.trim()));
        }
        if let Some(rps) = self.max_rps {
            out.push("--max-rps".to_owned());
            out.push(rps.to_string());
        }
        out
    }
}

/// `--api FILE` and `--dry-run` (shared by `run` and `certify`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ApiArgs {
    /// Certify an app at its own routes, with its own authentication:
    /// the API map (YAML, at most 256 KiB) saying which route plays each
    /// role of the reqkey-idem/1 contract, the callers filling the
    /// scenarios' caller roles and their credentials, where an id is, the
    /// effect oracle and the delete route of the clean-up
    /// (docs/idempotency-key.md, "Certifying your own API"). Every path is
    /// relative to the target's origin. With --target
    /// idem+http[s]://HOST:PORT.
    #[arg(long, value_name = "FILE")]
    pub api: Option<std::path::PathBuf>,
    /// With --api: print how many requests the certification would send
    /// to each route of the app (paths as sent; the fuzz pass's battery and
    /// programs counted from --seed), and exit 0 without sending any. A
    /// run with the same --seed and --fuzz-cases ends by comparing what it
    /// sent with that plan.
    #[arg(long, requires = "api")]
    pub dry_run: bool,
}

impl ApiArgs {
    /// `--api FILE` as a replay line writes it.
    pub fn replay_flags(&self) -> Vec<String> {
        self.api
            .iter()
            .flat_map(|f| ["--api".to_owned(), f.display().to_string()])
            .collect()
    }

    /// The map, parsed once (caller credentials registered as secrets),
    /// checked to fit the target as written: `--api` plays an idem app
    /// over HTTP (`idem+http[s]://`, asked of the one scheme parser), so a
    /// map that cannot apply is refused before anything starts.
    fn load(&self, written: &str) -> Result<Option<Arc<crate::targets::api_map::ApiMap>>, String> {
        let Some(path) = &self.api else {
            return Ok(None);
        };
        if scheme::of_scheme(written, Scheme::IdemHttp).is_none() {
            return Err(format!(
                "--api maps an app at the idem level: --target idem+http[s]://HOST:PORT, not {}",
                reqkey_reference::store::redact_url(written)
            ));
        }
        crate::targets::api_map::ApiMap::load(path).map(|m| Some(Arc::new(m)))
    }
}

/// The first stage of a judging, before anything starts: what the command
/// line says of the target, each part parsed once, in order: the access
/// to it (`--cacert`, `--header`, `--max-rps`: credentials registered as
/// secrets), the `--api` map (checked to fit the target as written), and
/// the target as written with `--start`'s commands, kept for
/// [`Plan::start`]. `run` and `certify` go down the same stages: parse,
/// start ([`Plan::start`]), judge and report ([`Started::judge`]).
#[derive(Debug)]
pub struct Plan {
    written: String,
    start: StartArgs,
    opts: TargetOptions,
    /// How the target is reached, as a replay line writes it (`--api`,
    /// `--cacert`, `-H NAME: env:VAR`, `--max-rps`), never a secret.
    replay_flags: Vec<String>,
}

impl Plan {
    pub fn parse(
        written: &str,
        start: &StartArgs,
        access: &AccessArgs,
        api: &ApiArgs,
        call_timeout_ms: u64,
        max_response_bytes: u64,
    ) -> Result<Plan, String> {
        let link = access.link()?;
        let mut replay_flags = api.replay_flags();
        replay_flags.extend(access.replay_flags());
        let api = api.load(written)?;
        Ok(Plan {
            written: written.to_owned(),
            start: start.clone(),
            replay_flags,
            opts: TargetOptions {
                call_timeout_ms,
                max_response_bytes,
                link,
                api,
            },
        })
    }

    /// `--dry-run`: the target parsed with placeholder ports (nothing
    /// started), the suite `load` gives for its level, and the requests
    /// the map would send, the fuzz pass's drawn from `seed`; nothing is
    /// sent.
    pub fn dry_run(
        &self,
        load: impl FnOnce(crate::targets::Level) -> Result<Vec<Scenario>, String>,
        fuzz_cases: u32,
        seed: u64,
    ) -> ExitCode {
        let planned = parse_without_starting(&self.written).and_then(|spec| {
            let map = self.opts.api.as_ref().ok_or("--dry-run needs --api")?;
            Ok((map, load(spec.level())?))
        });
        match planned {
            Ok((map, scenarios)) => dry_run(map, scenarios, fuzz_cases, seed),
            Err(e) => harness_error(e),
        }
    }

    /// The second stage: `--start`'s commands started, if any, their ports
    /// filled into the target, which is parsed here, once (its secrets
    /// registered); and the reports' context naming it, with what a
    /// replay needs to start it again (`command`: `run`, `certify`).
    pub fn start(self, command: &str) -> Result<(Started, ReportContext), String> {
        let (owned, text) = start_owned(&self.start, &self.written)?;
        let spec = TargetSpec::parse(&text).map_err(|e| e.to_string())?;
        let mut ctx = ReportContext::new(command, &spec.display_name());
        self.start.note_in(&self.written, &mut ctx);
        ctx.access = self.replay_flags;
        Ok((
            Started {
                spec,
                owned,
                opts: self.opts,
            },
            ctx,
        ))
    }
}

/// The target as `--dry-run` reads it: parsed with any `{port}` of
/// `--start` filled in by a placeholder port, nothing started.
fn parse_without_starting(target: &str) -> Result<TargetSpec, String> {
    let placeholder = vec![1u16; crate::targets::replicas::MAX_REPLICAS];
    TargetSpec::parse(&crate::targets::owned::fill(target, &placeholder, None))
        .map_err(|e| e.to_string())
}

/// `--dry-run`: the scenarios the map plays under its declared profile
/// (without `--start`, no crash scenario), and the requests they and the
/// fuzz pass (its battery and `fuzz_cases` programs drawn from `seed`)
/// would send, route by route as sent; nothing is sent. A run with the
/// same `--seed` and `--fuzz-cases` sends exactly these when no race earns
/// more trials and nothing fails (it says so route by route at its end).
fn dry_run(
    map: &crate::targets::api_map::ApiMap,
    scenarios: Vec<Scenario>,
    fuzz_cases: u32,
    seed: u64,
) -> ExitCode {
    let profile = match reqkey_model::idem_profile::parse_health(map.health()) {
        Ok(parsed) => parsed.profile,
        Err(e) => return harness_error(format!("{}: {e}", map.file)),
    };
    let (apply, mut not) = by_profile(
        scenarios,
        &Default::default(),
        &reqkey_scenario::fault::FaultSupport::default(),
    );
    let (apply, not_idem) = crate::run::select::by_idem_profile(apply, Some(&profile));
    not.extend(not_idem);
    let roles = std::sync::Mutex::new(crate::targets::api_map::CallerRoles::default());
    let (apply, not_played) = crate::run::select::by_target(apply, |s| {
        map.plays(
            s,
            &mut roles
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    });
    not.extend(not_played);
    println!(
        "{}",
        map_plan(map, &profile, &apply, Some(fuzz_cases), seed)
    );
    if !not.is_empty() {
        println!(
            "reqkey: {} scenarios are not applicable: {}",
            not.len(),
            reasons(&not).join("; ")
        );
    }
    println!("reqkey: dry run: nothing was sent");
    ExitCode::SUCCESS
}

/// The fuzz pass's requests through `map` under `profile`: its battery
/// and `cases` programs drawn from `seed`, fitted to the map (nothing
/// without a pass, or with `--fuzz-cases 0`).
fn fuzz_requests(
    map: &crate::targets::api_map::ApiMap,
    profile: &reqkey_model::idem_profile::IdemProfile,
    cases: Option<u32>,
    seed: u64,
) -> crate::targets::api_plan::ContractRequests {
    use crate::run::fuzz::{idem_map, pass};
    match cases {
        None | Some(0) => Default::default(),
        Some(cases) => idem_map::planned_requests(
            profile,
            cases,
            seed,
            pass::CERTIFY_IDEM_LONG_PAUSES,
            pass::CERTIFY_IDEM_SHRINK_ITERS,
            true,
            &idem_map::Fit::of(Some(map), profile),
        ),
    }
}

/// The plan of a run through `map` as its lines: `scenarios` at their
/// least and most trials, and the fuzz pass.
fn map_plan(
    map: &crate::targets::api_map::ApiMap,
    profile: &reqkey_model::idem_profile::IdemProfile,
    scenarios: &[Scenario],
    fuzz_cases: Option<u32>,
    seed: u64,
) -> String {
    let trials: Vec<(&Scenario, u64, u64)> = scenarios
        .iter()
        .map(|s| {
            let (least, most) =
                crate::targets::api_map::ApiMap::trials(s, crate::run::trial::EXTRA_TRIALS_FACTOR);
            (s, least, most)
        })
        .collect();
    let fuzz = fuzz_requests(map, profile, fuzz_cases, seed);
    let what = match fuzz_cases {
        Some(cases) if cases > 0 => format!(
            "{} scenarios and the fuzz pass (seed {seed}: the battery and {cases} programs, \
             {})",
            scenarios.len(),
            crate::run::fuzz::idem_map::describe(&fuzz)
        ),
        _ => format!("{} scenarios", scenarios.len()),
    };
    map.plan_lines(&map.plan(&trials, &fuzz), &what)
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
    let links = if args.db.is_empty() {
        None
    } else {
        Some(crate::targets::link::links::Links::start(&args.db)?)
    };
    let mut owned = crate::targets::owned::Owned::start_linked(&args.start, links)?;
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
        match spec.open(opts.clone()).await {
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
    let linked: std::collections::BTreeSet<String> = scenarios
        .iter()
        .filter(|s| s.requires.link.is_some())
        .map(|s| s.id.clone())
        .collect();
    let links = target.link_summary();
    // The database-link line: every run whose suite has link scenarios
    // says whether its link was faulted (issue 49).
    info.link = match &links {
        Some(l) => Some(l.setup.clone()),
        None if !linked.is_empty() => Some(
            "the harness owned no database link of the target (no --db): the database link was NOT faulted"
                .into(),
        ),
        None => None,
    };
    let (apply, mut not) = by_profile(scenarios, &info.profile, &faults);
    let (apply, not_idem) = crate::run::select::by_idem_profile(apply, info.idem.as_ref());
    not.extend(not_idem);
    let (apply, not_played) = crate::run::select::by_target(apply, |s| target.plays(s));
    not.extend(not_played);
    info.crash_scenarios = faults.started.then(|| {
        crate::report::crash::crash_scenarios(
            &faulty,
            apply.iter().map(|s| s.id.as_str()),
            not.iter().map(|n| (n.id.as_str(), n.requires.as_str())),
        )
    });
    info.link_scenarios = links.is_some().then(|| {
        let mut link = crate::report::crash::crash_scenarios(
            &linked,
            apply.iter().map(|s| s.id.as_str()),
            not.iter().map(|n| (n.id.as_str(), n.requires.as_str())),
        );
        link.faults = armed_link_faults(apply.iter().filter(|s| linked.contains(&s.id)));
        link
    });
    if !quiet {
        println!("reqkey: profile: {}", info.describe());
        println!("reqkey: crash: {}", faults.describe());
        if let Some(link) = &info.link {
            println!("reqkey: link: {}", crate::report::inert::terminal(link));
        }
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

/// The faults `scenarios` arm on the database link, each once, in the
/// order they are first armed: what a certified link claim names (a link
/// scenario that passed struck every fault it armed: one that never
/// struck leaves its scenario not judged).
fn armed_link_faults<'a>(scenarios: impl Iterator<Item = &'a Scenario>) -> Vec<String> {
    fn walk(steps: &[reqkey_scenario::step::Step], out: &mut Vec<String>) {
        for step in steps {
            match &step.action {
                reqkey_scenario::step::Action::Link(reqkey_scenario::link::LinkStep::Fault(f)) => {
                    let fault = f.to_string();
                    if !out.contains(&fault) {
                        out.push(fault);
                    }
                }
                reqkey_scenario::step::Action::Parallel(items) => walk(items, out),
                _ => {}
            }
        }
    }
    let mut out = Vec::new();
    for s in scenarios {
        walk(&s.steps, &mut out);
    }
    out
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
) -> (ExitCode, Option<crate::run::event::RunSummary>) {
    let mut reporters: Vec<Box<dyn Reporter>> = vec![Box::new(
        TerminalReporter::new(std::io::stdout(), quiet)
            .with_progress(progress_wanted(quiet))
            .with_context(ctx.clone()),
    )];
    // Files are created before the run, so a bad path fails in a second,
    // not after a long run.
    match file_reporters(ctx, outputs, scenarios) {
        Ok(files) => reporters.extend(files),
        Err(e) => return (harness_error(e), None),
    }
    if let Some(dir) = &outputs.histories {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return (
                harness_error(format!("cannot create {}: {e}", dir.display())),
                None,
            );
        }
    }
    let summary = runner::run(target, scenarios, cfg, &mut reporters).await;
    // The crash claim is made from what ran (report::crash, through the
    // run's record), so said after.
    let record = crate::report::record::of(ctx, &summary);
    if let Some(claim) = record.crash.as_ref().filter(|_| !quiet) {
        println!("reqkey: crash: {}", crate::report::inert::terminal(claim));
    }
    if let Some(claim) = record.link.as_ref().filter(|_| !quiet) {
        println!("reqkey: link: {}", crate::report::inert::terminal(claim));
    }
    let exit_code = record.verdict.exit_code;
    drop(record);
    if let Some(i) = &summary.indefinite {
        eprintln!(
            "reqkey: error: no verdict ({}): {}",
            i.reason,
            crate::report::inert::terminal(&i.message)
        );
    }
    for r in &mut reporters {
        if let Err(e) = r.finish() {
            return (
                harness_error(format!("cannot write a report: {e}")),
                Some(summary),
            );
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
            Err(e) => return (harness_error(e), Some(summary)),
        }
    }
    // The one verdict every report above stated (the fuzz pass included).
    (ExitCode::from(exit_code), Some(summary))
}

/// The first stage: `--start`'s processes (if any) and the target parsed,
/// their ports filled in. From here on only the typed spec and its
/// redacted display name exist (a secret in the string reaches no output).
#[derive(Debug)]
pub struct Started {
    pub spec: TargetSpec,
    owned: Option<Owned>,
    opts: TargetOptions,
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
    /// The pass's probes at scale (`--patience`, `--capacity-keys`).
    pub scale: crate::cmd::fuzz_scale::ScaleArgs,
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
        let timeout_ms = self.opts.call_timeout_ms;
        // A signal from here on still writes the reports, with the reason.
        write_reports_on_interrupt(&ctx, how.outputs, how.seed, None);
        let target =
            match open_started(&self.spec, self.opts, self.owned, how.start_timeout_ms).await {
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
        // A live app played through a map: say what will be sent before
        // anything is (the fuzz pass included).
        let mapped = target.api_map().zip(profile.idem.as_ref());
        if let Some((map, declared)) = mapped {
            println!(
                "{}",
                map_plan(map, declared, &scenarios, how.fuzz_cases, how.seed)
            );
        }
        if let Some(cases) = how.fuzz_cases {
            // The probes at scale (issue 55) around the programs: state
            // seeded before them, read again after them.
            let scale = (cases > 0).then(|| crate::run::fuzz::scale::ScaleProbes {
                target: Arc::clone(&target),
                profile: profile.profile,
                idem: profile.idem.clone(),
                patience: how.scale.patience,
                call_timeout_ms: timeout_ms,
                namespace: format!("{}.certify", cfg.namespace),
                keys: how.scale.capacity_keys,
            });
            let seeding = std::time::Instant::now();
            let seeded = match &scale {
                Some(p) => Some(crate::run::fuzz::scale::seed(p).await),
                None => None,
            };
            let seed_ms = seeding.elapsed().as_millis() as u64;
            let mut pass = crate::run::fuzz::pass::fuzz_pass(
                Arc::clone(&target),
                profile.profile,
                profile.idem.clone(),
                cases,
                how.seed,
                timeout_ms,
            )
            .await;
            if let (Some(seeded), Some(probes)) = (seeded, &scale) {
                let finishing = std::time::Instant::now();
                let mut outcome = crate::run::fuzz::scale::finish(seeded, probes).await;
                crate::run::fuzz::scale::confirm(probes, &mut outcome).await;
                outcome.record.added_ms = Some(seed_ms + finishing.elapsed().as_millis() as u64);
                crate::run::fuzz::scale::apply(outcome, &mut pass);
            }
            let (line, reason) = pass.line();
            let reason = reason.and_then(|r| r.lines().next()).unwrap_or("");
            println!("{line} {}", crate::report::inert::terminal(reason));
            if let Some(scale) = &pass.scale {
                println!("probes at scale: {}", scale.patience_line());
            }
            ctx.fuzz = Some(pass);
        }
        let cfg = cfg.declaring(&profile);
        if let Some(declared) = &profile.idem {
            ctx.declared_fields = Some(declared_fields(declared, &scenarios));
        }
        ctx.profile = Some(profile);
        ctx.not_applicable = not_applicable;
        // From here a signal keeps every scenario that finished: a proven
        // violation is never lost to it.
        let finished = Arc::new(crate::run::event::Finished::default());
        write_reports_on_interrupt(
            &ctx,
            how.outputs,
            how.seed,
            Some(SoFar {
                finished: Arc::clone(&finished),
                scenarios: scenarios.len(),
                target: Arc::downgrade(&target),
            }),
        );
        let mut cfg = cfg.clone();
        cfg.finished = Some(finished);
        if target.sequential() {
            cfg.concurrency = 1;
        }
        let finishing = Arc::clone(&target);
        let (code, summary) = execute(target, &scenarios, &cfg, &ctx, how.outputs, how.quiet).await;
        if let Some(line) = finishing.finish().await {
            eprintln!("reqkey: {}", crate::report::inert::terminal(&line));
        }
        if let (Some(summary), Some(map), Some(declared), Some(sent)) = (
            &summary,
            finishing.api_map(),
            ctx.profile.as_ref().and_then(|p| p.idem.as_ref()),
            finishing.sent_requests(),
        ) {
            if !how.quiet {
                let fuzz = (how.fuzz_cases, how.seed);
                for line in sent_against_plan(map, declared, &scenarios, summary, &ctx, fuzz, &sent)
                {
                    println!("{line}");
                }
            }
        }
        code
    }
}

/// After a run through a map: what was sent, route by route, beside the
/// plan for the trials that ran (each scenario at its `trials_run`, the
/// fuzz pass from its seed): `--dry-run` and the run agree request for
/// request when no race earned more trials. Where something failed (steps
/// skipped, a failing program shrunk), the plan cannot hold: said first.
fn sent_against_plan(
    map: &crate::targets::api_map::ApiMap,
    declared: &reqkey_model::idem_profile::IdemProfile,
    scenarios: &[Scenario],
    summary: &crate::run::event::RunSummary,
    ctx: &ReportContext,
    (fuzz_cases, seed): (Option<u32>, u64),
    sent: &std::collections::BTreeMap<String, u64>,
) -> Vec<String> {
    let trials_run: std::collections::BTreeMap<&str, u64> = summary
        .results
        .iter()
        .map(|r| (r.id.as_str(), u64::from(r.trials_run)))
        .collect();
    let ran: Vec<(&Scenario, u64, u64)> = scenarios
        .iter()
        .map(|s| {
            let n = trials_run.get(s.id.as_str()).copied().unwrap_or(0);
            (s, n, n)
        })
        .collect();
    let fuzz_passed = ctx
        .fuzz
        .as_ref()
        .is_none_or(|f| matches!(f.verdict, "passed" | "skipped"));
    let fuzz = fuzz_requests(map, declared, fuzz_cases, seed);
    let mut lines = Vec::new();
    if summary.failed > 0 || !fuzz_passed {
        lines.push(
            "reqkey: sent beside the plan (something failed: skipped steps and a shrunk \
             program make it differ):"
                .to_owned(),
        );
    }
    lines.extend(map.compare(&map.plan(&ran, &fuzz), sent));
    lines
}

/// The declared idem fields with the scenarios of `scenarios` (those
/// that apply) that judge each (`cmd/fields.rs`). A scenario whose text
/// cannot be read counts as judging nothing: the certificate then names
/// more fields unjudged, never fewer.
fn declared_fields(
    declared: &reqkey_model::idem_profile::IdemProfile,
    scenarios: &[reqkey_scenario::Scenario],
) -> Vec<crate::report::DeclaredField> {
    let texts: Vec<String> = scenarios
        .iter()
        .map(|s| match crate::run::suite::embedded_text(&s.file) {
            Some(t) => t.to_owned(),
            None => std::fs::read_to_string(&s.file).unwrap_or_default(),
        })
        .collect();
    let pairs: Vec<(&reqkey_scenario::Scenario, &str)> = scenarios
        .iter()
        .zip(&texts)
        .map(|(s, t)| (s, t.as_str()))
        .collect();
    crate::cmd::fields::declared_fields(declared, &pairs)
}
