//! `reqkey fuzz`'s probes at scale (issue 55, `run/fuzz/scale.rs`) around
//! its programs at every level: seeded before them, waited for and read
//! again after them, printed, and their part of the exit code.

use std::process::ExitCode;

use clap::Args;

use crate::run::fuzz::patience::Patience;
use crate::run::fuzz::scale::{self, ScaleOutcome, ScaleProbes};

/// The probes at scale's flags, on `certify` and `fuzz` alike.
#[derive(Debug, Clone, Copy, Args)]
pub struct ScaleArgs {
    /// The longest single wait the probes at scale spend on one promise
    /// (DURATION: 500ms, 10s, 2m): a declared expiryMs or lockMs is timed
    /// up to it, and state is read again at least this long after it was
    /// written. Every report states it, and per timing field whether it
    /// was judged at its declared value or only up to it.
    #[arg(long, value_name = "DURATION", default_value = crate::run::fuzz::patience::DEFAULT_PATIENCE)]
    pub patience: Patience,
    /// Keys the probes at scale write before asking the first ones again
    /// (in one session and across sessions; per caller and route at the
    /// idem level). Every report states the count. 0 writes none.
    #[arg(long, value_name = "N", default_value_t = scale::DEFAULT_CAPACITY_KEYS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=scale::MAX_CAPACITY_KEYS as u64))]
    pub capacity_keys: usize,
}

/// Runs `programs` between the two halves of the probes; their outcome
/// beside the programs'.
pub fn around<R>(
    rt: &tokio::runtime::Runtime,
    probes: &ScaleProbes,
    programs: impl FnOnce() -> R,
) -> (R, ScaleOutcome) {
    println!(
        "reqkey fuzz: probes at scale around the programs (patience {}: the longest single wait on one promise)",
        probes.patience
    );
    let seeding = std::time::Instant::now();
    let seeded = rt.block_on(scale::seed(probes));
    let seed_ms = seeding.elapsed().as_millis() as u64;
    let ran = programs();
    let finishing = std::time::Instant::now();
    let outcome = rt.block_on(async {
        let mut outcome = scale::finish(seeded, probes).await;
        scale::confirm(probes, &mut outcome).await;
        outcome.record.added_ms = Some(seed_ms + finishing.elapsed().as_millis() as u64);
        outcome
    });
    (ran, outcome)
}

/// Prints what the probes reached and proved; the exit code they ask for
/// (`None`: nothing beyond the programs').
pub fn report(outcome: &ScaleOutcome) -> Option<ExitCode> {
    for (what, line) in outcome.record.lines() {
        println!("  {what}: {}", crate::report::inert::terminal(&line));
    }
    if outcome.replayed.is_some() {
        println!("the probes ran again on fresh keys to reproduce what they found:");
    }
    for f in &crate::run::fuzz::scale::distinct(outcome.findings.clone()) {
        let again = outcome.replayed.as_ref().map(|r| {
            if r.contains(&f.clause) {
                " (reproduced)"
            } else {
                " (not shown again: timing or load; the first run proved it)"
            }
        });
        println!(
            "FAIL: a probe at scale does not conform [{}]{}",
            f.clause,
            again.unwrap_or("")
        );
        for line in f.message.lines() {
            println!("  {}", crate::report::inert::terminal(line));
        }
    }
    if !outcome.findings.is_empty() {
        return Some(ExitCode::from(1));
    }
    if let Some(e) = &outcome.error {
        println!(
            "the probes at scale could not judge: {}",
            crate::report::inert::terminal(e)
        );
        return Some(ExitCode::from(2));
    }
    println!(
        "the probes at scale passed ({} added)",
        crate::run::fuzz::patience::duration(outcome.record.added_ms.unwrap_or(0))
    );
    None
}

/// The run's exit: a proven violation (1) outranks no verdict (2).
pub fn combined(programs: ExitCode, scale: Option<ExitCode>) -> ExitCode {
    match scale {
        Some(code) if code == ExitCode::from(1) => code,
        Some(code) if programs == ExitCode::SUCCESS => code,
        _ => programs,
    }
}
