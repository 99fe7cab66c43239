//! `reqkey coverage`: the clause x scenario matrix of each level, and exit
//! 1 when a clause certified at a level has no scenario that can fail on it
//! (the rule is in `check::coverage` and docs/scenario-format.md).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use reqkey_model::clauses::{self, Certified};
use reqkey_model::idem_profile::{
    Concurrent, Errors, Fingerprint, IdemProfile, KeySyntax, ScopeBy,
};

use crate::cmd::exit::harness_error;
use crate::run::suite;
use crate::targets::Level;
use reqkey_check::coverage::{self, parse_record, read_record, FalsificationRecord, RECORD_FILE};

/// The falsification record under `root`, or the embedded suite's.
pub fn suite_record(root: Option<&std::path::Path>) -> Result<FalsificationRecord, String> {
    match root {
        Some(root) => read_record(root).map_err(|e| e.to_string()),
        None => {
            let text = suite::embedded_file(RECORD_FILE)
                .ok_or_else(|| format!("the embedded suite has no {RECORD_FILE}"))?;
            let path = std::path::Path::new(suite::EMBEDDED_SOURCE).join(RECORD_FILE);
            parse_record(&path, text).map_err(|e| e.to_string())
        }
    }
}

#[derive(Debug, Args)]
pub struct CoverageArgs {
    /// One level only (default: every level); with it, every check of
    /// the level's suite is listed with the clauses it judges.
    #[arg(long, value_parser = ["store", "agent", "idem"])]
    pub level: Option<String>,
    /// Judge the suite under ROOT (ROOT/store, ROOT/agent,
    /// ROOT/idempotency-key and the
    /// falsification record ROOT/falsification.json) instead of the suite
    /// embedded in this binary.
    #[arg(long, value_name = "ROOT")]
    pub scenarios: Option<PathBuf>,
    /// Print the matrix as a grid (clause rows, numbered scenario columns).
    #[arg(long)]
    pub grid: bool,
    /// Only list the clauses of spec/SPEC.md and where each is certified.
    #[arg(long)]
    pub list: bool,
    /// List the fuzzers' alphabets instead: each dimension (a parameter
    /// the spec or a profile names) with the clauses it can break and the
    /// broken variants only it finds, then what is not generated and why.
    /// Exit 1 when a row names an unknown clause or variant.
    #[arg(long, conflicts_with_all = ["grid", "list", "scenarios"])]
    pub fuzz: bool,
}

/// `reqkey coverage --fuzz` (module docs of `run::fuzz::alphabet`).
fn fuzz_coverage(all: &[reqkey_model::clauses::Clause], level: Option<&str>) -> ExitCode {
    use crate::run::fuzz::alphabet;
    let fuzzers: Vec<alphabet::Fuzzer> = alphabet::fuzzers()
        .into_iter()
        .filter(|f| level.is_none_or(|want| want == f.level.name()))
        .collect();
    print!("{}", alphabet::render(&fuzzers));
    let is_clause = |id: &str| all.iter().any(|c| c.id == id);
    let is_variant = |level: Level, name: &str| {
        crate::targets::spec::builtin_variants(level)
            .iter()
            .any(|v| v == name)
    };
    let problems = alphabet::problems(&fuzzers, &is_clause, &is_variant);
    for p in &problems {
        eprintln!("reqkey: fuzz alphabet: {p}");
    }
    if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

pub fn coverage_command(args: CoverageArgs) -> ExitCode {
    let all = match clauses::clauses() {
        Ok(c) => c,
        Err(e) => return harness_error(format!("spec/SPEC.md: {e}")),
    };
    if args.list {
        for c in all {
            let at = match &c.certified {
                Certified::At(levels) => levels
                    .iter()
                    .map(|l| l.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                Certified::Elsewhere(why) => format!("none: {why}"),
            };
            println!("{}\tSPEC.md:{}\t{at}", c.id, c.line);
        }
        return ExitCode::SUCCESS;
    }
    if args.fuzz {
        return fuzz_coverage(all, args.level.as_deref());
    }
    let record = match suite_record(args.scenarios.as_deref()) {
        Ok(r) => r,
        Err(e) => return harness_error(e),
    };
    let levels: Vec<Level> = Level::ALL
        .into_iter()
        .filter(|l| args.level.as_deref().is_none_or(|want| want == l.name()))
        .collect();
    let mut gaps = 0;
    for level in levels {
        let cov = match level_coverage(level, args.scenarios.as_deref(), all, &record) {
            Ok(c) => c,
            Err(e) => return harness_error(e),
        };
        if args.grid {
            print!("{}", coverage::render_grid(&cov));
        }
        print!("{}", coverage::render(&cov));
        gaps += cov.total() - cov.covered();
        // One level asked for: every check of its suite with the clauses
        // it judges (issue 54).
        if args.level.is_some() {
            match level_scenarios(level, args.scenarios.as_deref()) {
                Ok(scenarios) => print!("{}", coverage::render_checks(level, &scenarios)),
                Err(e) => return harness_error(e),
            }
        }
        if level == Level::Idem {
            match profile_space(args.scenarios.as_deref()) {
                Ok(text) => print!("{text}"),
                Err(e) => return harness_error(e),
            }
        }
    }
    // Every value of every declared field of the idem profile (issue 45).
    let mut field_gaps = 0;
    if args.level.as_deref().is_none_or(|want| want == "idem") {
        let suite = match crate::cmd::fields::idem_suite_texts(args.scenarios.as_deref()) {
            Ok(s) => s,
            Err(e) => return harness_error(e),
        };
        let pairs: Vec<(&reqkey_scenario::Scenario, &str)> =
            suite.iter().map(|(s, t)| (s, t.as_str())).collect();
        let (text, n) =
            crate::cmd::fields::render_matrix(&crate::cmd::fields::idem_field_matrix(&pairs));
        print!("{text}");
        field_gaps = n;
    }
    if gaps > 0 || field_gaps > 0 {
        if gaps > 0 {
            eprintln!("reqkey: {gaps} clause(s) without a scenario that can fail on them");
        }
        if field_gaps > 0 {
            eprintln!("reqkey: {field_gaps} profile field value(s) no scenario judges");
        }
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The scenarios of one level's suite (under `root`, or the embedded one).
fn level_scenarios(
    level: Level,
    root: Option<&std::path::Path>,
) -> Result<Vec<reqkey_scenario::Scenario>, String> {
    match root {
        Some(root) => suite::disk_suite(root, level),
        None => suite::embedded_suite(level),
    }
    .map(|(_, scenarios)| scenarios)
    .map_err(|e| e.to_string())
}

/// The coverage of one level by its suite (the one under `root`, or the
/// embedded one), the record's variants checked by the targets' parser.
pub fn level_coverage(
    level: Level,
    root: Option<&std::path::Path>,
    all: &[reqkey_model::clauses::Clause],
    record: &coverage::FalsificationRecord,
) -> Result<coverage::Coverage, String> {
    let loaded = match root {
        Some(root) => suite::disk_suite(root, level),
        None => suite::embedded_suite(level),
    };
    let (_, scenarios) = loaded.map_err(|e| e.to_string())?;
    coverage::coverage(
        level,
        all,
        &scenarios,
        record,
        &crate::targets::spec::is_builtin_variant,
    )
    .map_err(|e| e.to_string())
}

/// Every value of every field of SPEC 10's profile table, as a profile:
/// the reference's defaults (`expiryMs` 2000) with that one value set (and
/// the status it implies).
fn profile_values() -> Vec<(&'static str, &'static str, IdemProfile)> {
    let base = {
        let mut p = IdemProfile::draft_default();
        p.expiry_ms = Some(2_000);
        p
    };
    let with = |f: &dyn Fn(&mut IdemProfile)| {
        let mut p = base.clone();
        f(&mut p);
        p
    };
    let scope_without = |by: ScopeBy| with(&|p| p.scope.retain(|s| *s != by));
    vec![
        ("keyRequired", "true", base.clone()),
        ("keyRequired", "false", with(&|p| p.key_required = false)),
        ("keySyntax", "sf-string", base.clone()),
        ("keySyntax", "any", with(&|p| p.key_syntax = KeySyntax::Any)),
        ("invalidKeyStatus", "a status", base.clone()),
        (
            "invalidKeyStatus",
            "null",
            with(&|p| p.invalid_key_status = None),
        ),
        ("fingerprint", "json", base.clone()),
        (
            "fingerprint",
            "bytes",
            with(&|p| p.fingerprint = Fingerprint::Bytes),
        ),
        (
            "fingerprint",
            "none",
            with(&|p| {
                p.fingerprint = Fingerprint::None;
                p.mismatch_status = None;
            }),
        ),
        ("mismatchStatus", "422", base.clone()),
        (
            "mismatchStatus",
            "another status",
            with(&|p| p.mismatch_status = Some(409)),
        ),
        (
            "mismatchStatus",
            "null",
            with(&|p| {
                p.fingerprint = Fingerprint::None;
                p.mismatch_status = None;
            }),
        ),
        ("concurrent", "conflict", base.clone()),
        (
            "concurrent",
            "wait",
            with(&|p| {
                p.concurrent = Concurrent::Wait;
                p.concurrent_status = None;
            }),
        ),
        ("concurrentStatus", "409", base.clone()),
        (
            "concurrentStatus",
            "another status",
            with(&|p| p.concurrent_status = Some(429)),
        ),
        (
            "concurrentStatus",
            "null",
            with(&|p| {
                p.concurrent = Concurrent::Wait;
                p.concurrent_status = None;
            }),
        ),
        ("errors", "stored", base.clone()),
        ("errors", "released", with(&|p| p.errors = Errors::Released)),
        ("scope", "holds caller", base.clone()),
        ("scope", "lacks caller", scope_without(ScopeBy::Caller)),
        ("scope", "holds method", base.clone()),
        ("scope", "lacks method", scope_without(ScopeBy::Method)),
        ("scope", "holds path", base.clone()),
        ("scope", "lacks path", scope_without(ScopeBy::Path)),
        ("expiryMs", "short (2000)", base.clone()),
        (
            "expiryMs",
            "long (86400000)",
            with(&|p| p.expiry_ms = Some(86_400_000)),
        ),
        ("expiryMs", "null", with(&|p| p.expiry_ms = None)),
        ("lockMs", "null", base.clone()),
        ("lockMs", "short (500)", with(&|p| p.lock_ms = Some(500))),
        (
            "lockMs",
            "long (60000)",
            with(&|p| p.lock_ms = Some(60_000)),
        ),
        ("replayHeader", "a name", base.clone()),
        ("replayHeader", "null", with(&|p| p.replay_header = None)),
        ("durable", "false", base.clone()),
        ("durable", "true", with(&|p| p.durable = true)),
    ]
}

/// Which idem scenarios judge each value of each profile field (those a
/// profile with that value admits), and the fuzz pass that runs under
/// every value (`run/fuzz/idem_battery.rs`: its bursts and timing probes).
fn profile_space(root: Option<&std::path::Path>) -> Result<String, String> {
    use std::fmt::Write as _;
    let loaded = match root {
        Some(root) => suite::disk_suite(root, Level::Idem),
        None => suite::embedded_suite(Level::Idem),
    };
    let (_, scenarios) = loaded.map_err(|e| e.to_string())?;
    let values = profile_values();
    let admits = |profile: &IdemProfile| -> Vec<&str> {
        scenarios
            .iter()
            .filter(|s| s.requires.idem.is_none_or(|r| r.unmet(profile).is_none()))
            .map(|s| s.id.as_str())
            .collect()
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "profile space, idem level: each value of each field, the scenarios a profile with it admits, and those aimed at it (admitted under it, not under every value of the field); every value also meets the fuzz pass ({})",
        crate::run::fuzz::idem_battery::power_line()
    );
    for (field, value, profile) in &values {
        let mine = admits(profile);
        let everywhere: Vec<Vec<&str>> = values
            .iter()
            .filter(|(f, _, _)| f == field)
            .map(|(_, _, p)| admits(p))
            .collect();
        let aimed: Vec<&str> = mine
            .iter()
            .copied()
            .filter(|id| everywhere.iter().any(|ids| !ids.contains(id)))
            .collect();
        let mut probes: Vec<&str> = crate::run::fuzz::idem_battery::battery(profile)
            .iter()
            .map(|p| p.kind.name())
            .collect();
        probes.dedup();
        let _ = writeln!(
            out,
            "  {field:<17} {value:<16} battery: {}; {:>2} scenarios apply; aimed at it: {}",
            probes.join(", "),
            mine.len(),
            if aimed.is_empty() {
                "none (judged by those that apply under every value)".to_owned()
            } else {
                aimed.join(", ")
            }
        );
    }
    Ok(out)
}
