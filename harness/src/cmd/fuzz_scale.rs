//! `reqkey fuzz`'s probes at scale (issue 55, `run/fuzz/scale.rs`) around
//! its programs at every level: seeded before them, waited for and read
//! again after them, printed, and their part of the exit code.

use std::process::ExitCode;

use crate::run::fuzz::scale::{self, ScaleOutcome, ScaleProbes};

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
        let mut outcome = scale::finish(seeded, probes.patience).await;
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
            if r.iter().any(|(c, _)| *c == f.clause) {
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
