//! `reqkey fuzz` on an idem target: its declared profile read from
//! `/.reqkey/health`, the idem fuzzer run (`run::fuzz::idem`), the result
//! printed.

use std::process::ExitCode;
use std::sync::Arc;

use crate::cmd::exit::harness_error;
use crate::run::fuzz::cases::MAX_DISTINCT_VIOLATIONS;
use crate::run::fuzz::idem::{fuzz_idem, IdemFuzzOptions, IdemFuzzOutcome};
use crate::run::runner::RunConfig;
use crate::targets::profile::resolve_profile;
use crate::targets::Target;

/// Pauses past `expiryMs` among the steps (each lasts seconds).
const LONG_PAUSES: u32 = 1;

pub fn fuzz_idem_command(
    rt: &tokio::runtime::Runtime,
    target: Arc<dyn Target>,
    cases: u32,
    timeout_ms: u64,
    out: Option<&std::path::Path>,
    seed: u64,
    scale: crate::cmd::fuzz_scale::ScaleArgs,
) -> ExitCode {
    let info = match rt.block_on(resolve_profile(target.as_ref(), None, timeout_ms)) {
        Ok(info) => info,
        Err(e) => return harness_error(e.to_string()),
    };
    let Some(profile) = info.idem else {
        return harness_error("the idem target declared no profile at /.reqkey/health");
    };
    let cfg = RunConfig::new(seed);
    let opts = IdemFuzzOptions {
        cases,
        seed,
        namespace: format!("{}.ifz", cfg.namespace),
        target_name: target.describe(),
        profile: profile.clone(),
        call_timeout_ms: timeout_ms,
        max_shrink_iters: 512,
        long_pauses: LONG_PAUSES,
        battery: true,
    };
    println!(
        "reqkey fuzz: {} then {cases} idem programs against {} ({profile}; seed {seed})",
        crate::run::fuzz::idem_battery::power_line(),
        target.describe()
    );
    let probes = crate::run::fuzz::scale::ScaleProbes {
        target: Arc::clone(&target),
        profile: info.profile,
        idem: Some(profile.clone()),
        patience: scale.patience,
        call_timeout_ms: timeout_ms,
        namespace: format!("{}.ifz", cfg.namespace),
        keys: scale.capacity_keys,
    };
    let (outcome, scale) =
        crate::cmd::fuzz_scale::around(rt, &probes, || fuzz_idem(rt, target, &opts));
    let code = match outcome {
        IdemFuzzOutcome::Passed { cases, .. } => {
            println!("the bursts and {cases} programs passed");
            ExitCode::SUCCESS
        }
        IdemFuzzOutcome::Failed(f) => failed_exit(f.seed, &f.violations, f.stopped.as_deref(), out),
        IdemFuzzOutcome::Error(e) => harness_error(e),
    };
    crate::cmd::fuzz_scale::combined(code, crate::cmd::fuzz_scale::report(&scale))
}

/// A failed fuzz run's exit: its violations printed (and written under
/// `out`), 1; 2 when a file could not be written.
pub(crate) fn failed_exit(
    seed: u64,
    violations: &[crate::run::fuzz::violation::FuzzViolation],
    stopped: Option<&str>,
    out: Option<&std::path::Path>,
) -> ExitCode {
    match print_violations(seed, violations, stopped, out) {
        Ok(()) => ExitCode::from(1),
        Err(e) => harness_error(e),
    }
}

/// Prints every violation of a fuzz run (any level), each with whether
/// its reproduction replayed red, and writes each reproduction under
/// `out` ([`numbered`]). `Err`: a file could not be written.
fn print_violations(
    seed: u64,
    violations: &[crate::run::fuzz::violation::FuzzViolation],
    stopped: Option<&str>,
    out: Option<&std::path::Path>,
) -> Result<(), String> {
    let n = violations.len();
    println!(
        "FAIL: {n} distinct violation{} (at most {MAX_DISTINCT_VIOLATIONS} are shrunk and reported)",
        if n == 1 { "" } else { "s" }
    );
    println!("\nseed: {0} (reproduce with --seed {0})", seed);
    for (i, v) in violations.iter().enumerate() {
        println!(
            "\nviolation {} of {n}: [{}]",
            i + 1,
            inert_lines(&v.clauses.join(", "))
        );
        println!("{}", inert_lines(&v.program));
        println!("{}", inert_lines(&v.message));
        match &v.not_reproduced {
            None => println!("its reproduction, replayed against the target: failed on the same clause (reproduced)"),
            Some(why) => println!(
                "its reproduction, replayed against the target: NOT reproduced: {}",
                inert_lines(why)
            ),
        }
        println!(
            "the reproduction as a scenario:\n---\n{}\n---",
            inert_lines(&v.scenario_yaml)
        );
        if let Some(out) = out {
            let path = numbered(out, i);
            std::fs::write(&path, &v.scenario_yaml)
                .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
            println!("written to {}", path.display());
        }
    }
    if let Some(why) = stopped {
        println!(
            "\nthe pass then stopped before its budget (the violations above stand): {}",
            inert_lines(why)
        );
    }
    Ok(())
}

/// Where violation `i` (from 0) is written: `--out` itself for the first,
/// `STEM.2.yaml`, `STEM.3.yaml`, ... beside it for the others.
fn numbered(out: &std::path::Path, i: usize) -> std::path::PathBuf {
    if i == 0 {
        return out.to_owned();
    }
    let stem = out
        .file_stem()
        .map_or_else(|| "fuzz".into(), |s| s.to_string_lossy().into_owned());
    let ext = out
        .extension()
        .map_or_else(|| "yaml".into(), |s| s.to_string_lossy().into_owned());
    out.with_file_name(format!("{stem}.{}.{ext}", i + 1))
}

/// Each line made inert for the terminal (what the target answered is
/// quoted in the reason).
fn inert_lines(text: &str) -> String {
    text.lines()
        .map(crate::report::inert::terminal)
        .collect::<Vec<_>>()
        .join("\n")
}
