//! `reqkey certify`: the whole suite of the target's level, no filters;
//! writes the certificate, JUnit and JSON.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Subcommand};

use reqkey_model::vocab::Level;

use crate::cmd::coverage::suite_record;
use crate::cmd::exit::{fresh_seed, harness_error};
use crate::cmd::judging::{self, Identity, Judge, StartArgs};
use crate::cmd::outputs::{write_reports, Outputs};
use crate::cmd::runtime::with_runtime_interruptible;
use crate::report::{merge, ClauseCoverage};
use crate::run::partition::Partition;
use crate::run::runner::RunConfig;
use crate::run::suite;
use crate::targets::spec::TargetSpec;
use reqkey_check::coverage;
use reqkey_reference::store::legacy;

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct CertifyArgs {
    #[command(subcommand)]
    pub command: Option<CertifyCommand>,
    /// What to certify (see "Targets" below).
    #[arg(long, short, required = true)]
    pub target: Option<String>,
    #[command(flatten)]
    pub start: StartArgs,
    #[command(flatten)]
    pub link: crate::cmd::judging::AccessArgs,
    #[command(flatten)]
    pub api: crate::cmd::judging::ApiArgs,
    /// Where to write certificate.md, report.html, junit.xml and results.json (created if
    /// missing).
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// Judge by the suite under ROOT (ROOT/store, ROOT/agent or
    /// ROOT/idempotency-key, by the target's level; ROOT/VERSION names its
    /// version) instead of the suite
    /// embedded in this binary. The certificate says which it was.
    #[arg(long, value_name = "ROOT")]
    pub scenarios: Option<PathBuf>,
    /// The seed of every random choice (printed in the certificate).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Programs of the bounded fuzz pass run after the profile is read
    /// (`reqkey fuzz` at the target's level, with the certification's
    /// seed); its result is a line of every report. 0 skips it.
    #[arg(long, value_name = "N", default_value_t = crate::run::fuzz::pass::DEFAULT_CERTIFY_FUZZ_CASES,
          value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub fuzz_cases: u32,
    #[command(flatten)]
    pub scale: crate::cmd::fuzz_scale::ScaleArgs,
    /// Bound on every single call to the target, in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// Bound on every answer's body, in bytes: a larger answer is not read
    /// whole and its step cannot be judged (exit 2).
    #[arg(long, default_value_t = crate::targets::DEFAULT_MAX_RESPONSE_BYTES,
          value_parser = clap::value_parser!(u64).range(1024..=(1u64 << 32)))]
    pub max_response_bytes: u64,
    /// Print only failures and the closing count.
    #[arg(long, short)]
    pub quiet: bool,
    /// Certify against this profile instead of the one the target's
    /// `/health` declares (for a server whose `/health` cannot say): default,
    /// keys-ignored, interrupt-previous, or
    /// supportsRequestKey=BOOL,concurrentEntry=reject|interrupt_previous.
    /// The certificate says the profile was stated, not declared.
    #[arg(long, value_name = "PROFILE")]
    pub profile: Option<String>,
    /// Certify an upgraded store: before the suite, write N sessions of
    /// keyless runs through the store's FIRST schema version (the target
    /// must be a reference SQL store, sqlite:PATH or postgres://..., with no
    /// schema yet); opening the target migrates them, and after the suite
    /// they must still read as keyless runs, replay, and take new keyless
    /// and keyed runs (SPEC 4, `[S4-upgrade]`). Otherwise exit 1.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..=reqkey_reference::store::legacy::MAX_LEGACY_SESSIONS))]
    pub seed_legacy: Option<u64>,
    /// Also write the history each race, `linearizable` and
    /// `mixed_histories` trial judged into DIR, one file a trial:
    /// `<scenario-id>.trial-<n>.json`, in the form `reqkey check history`
    /// reads (at most 20 trials a scenario, the failing one always).
    #[arg(long, value_name = "DIR")]
    pub export_histories: Option<PathBuf>,
    /// Judge only shard K of N of the suite (1-based), for a certification
    /// split across CI jobs: the suite sorted by scenario id, the scenario
    /// at position i in shard i mod N + 1. Its reports are a shard's, not a
    /// certificate; `reqkey certify merge` makes the certificate. Pass the
    /// same --seed to every shard.
    #[arg(long, value_name = "K/N")]
    pub partition: Option<Partition>,
    /// The certification run this is (give every shard of one CI run the
    /// same, e.g. the CI's run id and attempt): written into results.json
    /// and its seal; `certify merge` refuses shards of different runs.
    /// Default: derived from the seed, the suite digest, the target and
    /// the shard count (shards of one run with one --seed share it).
    #[arg(long, value_name = "ID", value_parser = crate::report::seal::parse_run_id)]
    pub run_id: Option<String>,
}

#[derive(Debug, Subcommand)]
pub enum CertifyCommand {
    /// Merge the shards of one certification (`certify --partition K/N`,
    /// each shard's --out directory) into one certificate: certificate.md,
    /// report.html, junit.xml and results.json. Refused (exit 2) when a
    /// shard is missing or given twice, its results.json.seal does not hold
    /// (keyed by REQKEY_SEAL_KEY when set), its scenarios are not its share
    /// of the suite the shards claim, or the shards differ in suite digest,
    /// target, server identity, seed, profile or reqkey version. Exit 0, 1
    /// or 2 by the merged verdict otherwise. Bounds: each results.json at
    /// most 16 MiB (refused before it is read), and the process under
    /// --max-memory-bytes, checked at each shard (a shard's parsed form can
    /// be several times its text; 1024 shards at most).
    Merge(MergeArgs),
}

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// Each shard's output directory (holding its results.json).
    #[arg(required = true, value_name = "DIR")]
    pub shards: Vec<PathBuf>,
    /// Where to write the merged certificate (created if missing).
    #[arg(long, default_value = ".")]
    pub out: PathBuf,
    /// The scenarios root the shards judged by, when it was not the suite
    /// embedded in this binary (for the steps the HTML page shows).
    #[arg(long, value_name = "ROOT")]
    pub scenarios: Option<PathBuf>,
    /// Merge only shards of this run (`certify --run-id`, or the derived
    /// id every shard's results.json names): yesterday's shards are
    /// refused even when all of them agree.
    #[arg(long, value_name = "ID", value_parser = crate::report::seal::parse_run_id)]
    pub run_id: Option<String>,
    /// Print only the closing count.
    #[arg(long, short)]
    pub quiet: bool,
}

/// The clause coverage of a level's whole suite, as a certificate states it.
pub fn suite_coverage(
    root: Option<&std::path::Path>,
    level: crate::targets::Level,
    scenarios: &[reqkey_scenario::Scenario],
) -> Result<ClauseCoverage, String> {
    let clause_level =
        Level::parse(&level.to_string()).ok_or_else(|| format!("no clause level {level}"))?;
    let clauses = reqkey_model::clauses::clauses().map_err(|e| e.to_string())?;
    let record = suite_record(root)?;
    let cov = coverage::coverage(
        clause_level,
        clauses,
        scenarios,
        &record,
        &crate::targets::spec::is_builtin_variant,
    )
    .map_err(|e| e.to_string())?;
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
pub const HTML_FILE: &str = "report.html";

/// Opens the upgraded store again and checks its legacy runs (after the
/// suite, so they lived through it).
async fn check_upgraded(
    spec: &reqkey_reference::store::StoreSpec,
    seed: &legacy::LegacySeed,
) -> Result<(), Vec<String>> {
    let store = spec
        .open()
        .await
        .map_err(|e| vec![format!("reopening the store: {e}")])?;
    let problems = legacy::check_legacy(store.as_ref(), seed).await;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems)
    }
}

/// `reqkey certify ...`: a certification, or `merge`.
pub fn certify_entry(args: CertifyArgs) -> ExitCode {
    match args.command {
        Some(CertifyCommand::Merge(merge)) => merge_command(&merge),
        None => {
            let (shard, out) = (args.partition.is_some(), args.out.clone());
            let code = with_runtime_interruptible(|| certify_command(args));
            // A shard's results travel to `certify merge`: sealed, keyed
            // when REQKEY_SEAL_KEY is set.
            if shard && out.join(RESULTS_FILE).is_file() {
                let key = crate::report::seal::key_from_env();
                if let Err(e) = crate::report::seal::write_seal(&out, key.as_deref()) {
                    return harness_error(e);
                }
            }
            code
        }
    }
}

pub async fn certify_command(args: CertifyArgs) -> ExitCode {
    // One way down: parse, start, judge and report (cmd/judging.rs).
    let Some(target_spec) = args.target.clone() else {
        return harness_error("--target is required");
    };
    // Drawn before anything is sent: every request of the run says it.
    let seed = args.seed.unwrap_or_else(fresh_seed);
    crate::targets::user_agent::choose(seed);
    let plan = match judging::Plan::parse(
        &target_spec,
        &args.start,
        &args.link,
        &args.api,
        args.timeout_ms,
        args.max_response_bytes,
    ) {
        Ok(plan) => plan,
        Err(e) => return harness_error(e),
    };
    if args.api.dry_run {
        return plan.dry_run(
            |level| {
                let loaded = match &args.scenarios {
                    Some(root) => suite::disk_suite(root, level),
                    None => suite::embedded_suite(level),
                };
                loaded.map(|(_, s)| s).map_err(|e| e.to_string())
            },
            args.fuzz_cases,
            seed,
        );
    }
    let (started, mut ctx) = match plan.start("certify") {
        Ok(started) => started,
        Err(e) => return harness_error(e),
    };
    let spec = &started.spec;
    let outputs = Outputs {
        junit: Some(args.out.join(JUNIT_FILE)),
        json: Some(args.out.join(RESULTS_FILE)),
        report: Some(args.out.join(CERTIFICATE_FILE)),
        html: Some(args.out.join(HTML_FILE)),
        histories: args.export_histories.clone(),
    };
    let loaded = match &args.scenarios {
        Some(root) => suite::disk_suite(root, spec.level()).map_err(|e| {
            format!(
                "cannot read the {} suite under {}: {e}",
                spec.level(),
                root.display()
            )
        }),
        None => suite::embedded_suite(spec.level())
            .map_err(|e| format!("the embedded {} suite: {e}", spec.level())),
    };
    let (suite, scenarios) = match loaded {
        Ok(s) => s,
        Err(e) => return harness_error(e),
    };
    ctx.run_id = Some(args.run_id.clone().unwrap_or_else(|| {
        crate::report::seal::derived_run_id(
            seed,
            &suite.digest,
            ctx.target_template.as_deref().unwrap_or(&ctx.target),
            args.partition.map_or(1, |p| p.count),
        )
    }));
    ctx.suite = Some(suite);
    // Coverage is the whole suite's (not narrowed by the profile).
    ctx.clause_coverage = match suite_coverage(args.scenarios.as_deref(), spec.level(), &scenarios)
    {
        Ok(c) => Some(c),
        Err(e) => return harness_error(format!("clause coverage: {e}")),
    };
    // Coverage and the level check above are the whole suite's; a shard
    // judges its share only.
    let scenarios = match args.partition {
        Some(p) => {
            ctx.partition = Some(p);
            ctx.selection = vec![p.flag()];
            let mine = p.select(scenarios);
            if !args.quiet {
                eprintln!(
                    "reqkey: shard {p}: {} scenarios of the suite (merge the shards with `reqkey certify merge`)",
                    mine.len()
                );
            }
            mine
        }
        None => scenarios,
    };
    if let Some(s) = scenarios.iter().find(|s| s.level != spec.level()) {
        return harness_error(format!(
            "{}: a {} scenario in the {} suite",
            s.file.display(),
            s.level,
            spec.level()
        ));
    }
    let legacy = match (args.seed_legacy, spec) {
        (None, _) => None,
        (Some(n), TargetSpec::Store(store)) => match legacy::seed_legacy(store, n).await {
            Ok(seed) => {
                if !args.quiet {
                    eprintln!(
                        "reqkey: wrote {n} sessions of keyless runs through the store's first schema version"
                    );
                }
                Some((store.clone(), seed))
            }
            Err(e) => return harness_error(format!("--seed-legacy: {e}")),
        },
        (Some(_), _) => {
            return harness_error(
                "--seed-legacy certifies a reference SQL store in process (sqlite:PATH, postgres://...)",
            )
        }
    };
    let mut cfg = RunConfig::new(seed);
    cfg.call_timeout_ms = args.timeout_ms;
    cfg.export_histories = args
        .export_histories
        .as_ref()
        .map(|_| std::sync::Arc::new(crate::run::export::HistorySink::new()));
    let how = Judge {
        start_timeout_ms: args.start.start_timeout_ms,
        stated_profile: args.profile.as_deref(),
        // A certificate names the target's identity: without one, no verdict.
        identity: Identity::Required,
        quiet: args.quiet,
        seed,
        outputs: &outputs,
        fuzz_cases: Some(args.fuzz_cases),
        scale: args.scale,
    };
    let mut code = started.judge(how, ctx, scenarios, Ok, &cfg).await;
    if let Some((store, seed)) = &legacy {
        match check_upgraded(store, seed).await {
            Ok(()) => eprintln!(
                "reqkey: upgrade: the {} legacy sessions read and behave as before",
                seed.sessions.len()
            ),
            Err(problems) => {
                for p in &problems {
                    eprintln!(
                        "reqkey: upgrade: FAIL {}",
                        crate::report::inert::terminal(p)
                    );
                }
                if code == ExitCode::SUCCESS {
                    code = ExitCode::from(1);
                }
            }
        }
    }
    code
}

/// The shard directories' `results.json` files, each read only once its
/// size is under [`crate::report::seal::MAX_RESULTS_BYTES`] and its seal
/// (`results.json.seal`) holds over the file read in pieces: keyed by
/// `REQKEY_SEAL_KEY` when set. Each must name the run its seal names, and
/// `run_id` when given. The process's memory is held under
/// `--max-memory-bytes`, checked before each shard is read and after it is
/// parsed (past it: refused, exit 2, naming the shard and the bound).
fn read_shards(dirs: &[PathBuf], run_id: Option<&str>) -> Result<Vec<merge::Shard>, String> {
    use crate::report::seal;
    use std::io::Read;
    let key = seal::key_from_env();
    dirs.iter()
        .map(|dir| {
            let origin = dir.display().to_string();
            let file = dir.join(RESULTS_FILE);
            std::fs::metadata(&file).map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let seal_file = dir.join(seal::SEAL_FILE);
            let seal_text = match std::fs::metadata(&seal_file) {
                Ok(m) if m.len() <= seal::MAX_SEAL_BYTES => std::fs::read_to_string(&seal_file)
                    .map_err(|e| format!("cannot read {}: {e}", seal_file.display()))?,
                Ok(_) => return Err(format!("{}: larger than a seal", seal_file.display())),
                Err(_) => {
                    return Err(format!(
                        "{origin} has no {} (results of `reqkey certify --partition` are sealed): \
                         its results cannot be trusted",
                        seal::SEAL_FILE
                    ))
                }
            };
            // Bounded and sealed before a byte of it is kept or parsed.
            seal::verify_file(&origin, &file, &seal_text, key.as_deref())?;
            if let Some(why) = crate::memory::over() {
                return Err(format!("{origin}: not read: {why}"));
            }
            let mut bytes = Vec::new();
            std::fs::File::open(&file)
                .and_then(|f| f.take(seal::MAX_RESULTS_BYTES).read_to_end(&mut bytes))
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            // The bytes parsed are the bytes sealed (the file may have
            // changed since it was checked).
            let sealed_run = seal::verify(&origin, &bytes, &seal_text, key.as_deref())?;
            let text = String::from_utf8(bytes)
                .map_err(|e| format!("{}: not UTF-8: {e}", file.display()))?;
            let shard = merge::parse_shard(&origin, &text)?;
            drop(text);
            // Each shard is at most MAX_RESULTS_BYTES of text, but its
            // parsed form can be several times that (small values), and
            // there may be 1024 shards: the memory ceiling is checked
            // after each.
            if let Some(why) = crate::memory::over() {
                return Err(format!("{origin}: {why}"));
            }
            if shard.doc.run_id != sealed_run {
                return Err(format!(
                    "{origin}: results.json names run {:?} but its seal names {:?}",
                    shard.doc.run_id, sealed_run
                ));
            }
            if let (Some(want), Some(got)) = (run_id, shard.doc.run_id.as_deref()) {
                if want != got {
                    return Err(format!(
                        "{origin} is a shard of run `{}`, not of --run-id `{want}`: \
                         only shards of the run named are merged",
                        crate::report::inert::terminal(got)
                    ));
                }
            }
            Ok(shard)
        })
        .collect()
}

/// The suite the shards claim (by the first shard's level and digest),
/// loaded from this binary or `--scenarios ROOT`; refused when the suite
/// at hand is another, since the shards' scenarios could not be checked.
fn claimed_suite(
    shards: &[merge::Shard],
    root: Option<&std::path::Path>,
) -> Result<Vec<reqkey_scenario::Scenario>, String> {
    let first = shards.first().ok_or("no shard to merge")?;
    let digest = first
        .doc
        .suite
        .as_ref()
        .map(|s| s.digest.clone())
        .ok_or("a shard names no suite: cannot tell the shards ran the same one")?;
    let level = first
        .doc
        .clause_coverage
        .as_ref()
        .and_then(|c| crate::targets::Level::parse(&c.level))
        .or_else(|| {
            first
                .doc
                .scenarios
                .first()
                .and_then(|r| crate::targets::Level::parse(&r.level))
        })
        .ok_or("a shard names no level")?;
    let loaded = match root {
        Some(root) => suite::disk_suite(root, level).map_err(|e| e.to_string())?,
        None => suite::embedded_suite(level).map_err(|e| e.to_string())?,
    };
    if loaded.0.digest != digest {
        return Err(format!(
            "the shards claim the {level} suite {digest}, but the suite at hand is {} ({}): \
             pass --scenarios ROOT holding the shards' suite, so that their scenarios can be checked",
            loaded.0.digest,
            root.map_or_else(|| "embedded in this binary".to_owned(), |r| r.display().to_string())
        ));
    }
    Ok(loaded.1)
}

/// `reqkey certify merge DIR...`.
pub fn merge_command(args: &MergeArgs) -> ExitCode {
    let checked = read_shards(&args.shards, args.run_id.as_deref()).and_then(|shards| {
        let scenarios = claimed_suite(&shards, args.scenarios.as_deref())?;
        crate::report::merge_check::check_against_suite(&shards, &scenarios)?;
        crate::report::merge_check::check_identity(&shards)?;
        Ok((merge::merge(shards)?, scenarios))
    });
    let (merged, scenarios) = match checked {
        Ok(m) => m,
        Err(e) => return harness_error(format!("certify merge: {e}")),
    };
    let outputs = Outputs {
        junit: Some(args.out.join(JUNIT_FILE)),
        json: Some(args.out.join(RESULTS_FILE)),
        report: Some(args.out.join(CERTIFICATE_FILE)),
        html: Some(args.out.join(HTML_FILE)),
        histories: None,
    };
    if let Err(e) = write_reports(&merged.ctx, &outputs, &scenarios, &merged.summary) {
        return harness_error(e);
    }
    let record = crate::report::record::of(&merged.ctx, &merged.summary);
    println!("{}", record.closing_line);
    let exit_code = record.verdict.exit_code;
    if !args.quiet {
        eprintln!(
            "reqkey: merged {} shards into {}",
            args.shards.len(),
            args.out.join(CERTIFICATE_FILE).display()
        );
    }
    // A fuzz program that failed in any shard counts as in one run: the
    // one verdict every merged report states.
    ExitCode::from(exit_code)
}
