//! The reports a signal leaves: the run's files written with the
//! scenarios that finished before it (their verdicts and counts, a proven
//! violation kept: DOES NOT CONFORM) and reason `interrupted`, exit 130 in
//! every file (`cmd::interrupt` calls this after stopping the started
//! processes). A shard's results are sealed as they would have been.

use std::sync::{Arc, Weak};

use crate::cmd::outputs::{write_reports, Outputs};
use crate::report::verdict::INTERRUPTED;
use crate::report::ReportContext;
use crate::run::event::{Finished, Indefinite, RunSummary};
use crate::targets::Target;

/// What ran before a signal: the results recorded as each scenario
/// finished, how many the run had, and the target (held weakly: the hook
/// must not keep the started processes alive) for its warnings.
#[derive(Debug, Clone)]
pub struct SoFar {
    pub finished: Arc<Finished>,
    pub scenarios: usize,
    pub target: Weak<dyn Target>,
}

/// After a signal, writes `outputs` as a run of `ctx` ended by it: the
/// scenarios of `so_far` that finished, and reason `interrupted`.
pub fn write_reports_on_interrupt(
    ctx: &ReportContext,
    outputs: &Outputs,
    seed: u64,
    so_far: Option<SoFar>,
) {
    let (ctx, outputs) = (ctx.clone(), outputs.clone());
    let hook: crate::cmd::interrupt::Hook = Box::new(move |signal: &str| {
        let summary = interrupted_summary(&ctx, seed, so_far.as_ref(), signal);
        if let Err(e) = write_reports(&ctx, &outputs, &[], &summary) {
            eprintln!("reqkey: error: {}", crate::report::inert::terminal(&e));
        }
        eprintln!(
            "reqkey: {}",
            crate::report::record::of(&ctx, &summary).closing_line
        );
        // A shard's results travel to `certify merge` sealed, whatever
        // ended the run.
        if let (Some(_), Some(json)) = (ctx.partition, &outputs.json) {
            let dir = json.parent().unwrap_or_else(|| std::path::Path::new("."));
            if let Err(e) =
                crate::report::seal::write_seal(dir, crate::report::seal::key_from_env().as_deref())
            {
                eprintln!("reqkey: error: {}", crate::report::inert::terminal(&e));
            }
        }
    });
    crate::cmd::interrupt::on_interrupt(hook);
}

/// The summary of a run ended by `signal`: the scenarios that finished
/// (none before the suite started), reason `interrupted`.
fn interrupted_summary(
    ctx: &ReportContext,
    seed: u64,
    so_far: Option<&SoFar>,
    signal: &str,
) -> RunSummary {
    let (results, total, warnings) = match so_far {
        Some(s) => (
            s.finished.results(),
            s.scenarios,
            s.target.upgrade().map(|t| t.warnings()).unwrap_or_default(),
        ),
        None => (Vec::new(), 0, Vec::new()),
    };
    let message = if so_far.is_some() {
        format!(
            "reqkey received {signal}: {} of {total} scenarios had finished, the rest were not run, and every process it started was stopped",
            results.len()
        )
    } else {
        format!(
            "reqkey received {signal} before the suite started, and every process it started was stopped"
        )
    };
    RunSummary::of_results(
        ctx.target.clone(),
        seed,
        0,
        results,
        Some(Indefinite {
            reason: INTERRUPTED,
            message,
        }),
        warnings,
    )
}
