//! The reports a signal leaves: the run's files written as a run with no
//! verdict (reason `interrupted`), so that an interrupted certification
//! says why it has none (`cmd::interrupt` calls this after stopping the
//! started processes).

use crate::cmd::outputs::{write_reports, Outputs};
use crate::report::ReportContext;
use crate::run::event::{Indefinite, RunSummary};

/// After a signal, writes `outputs` as a run of `ctx` with no verdict,
/// saying which signal ended it.
pub fn write_reports_on_interrupt(ctx: &ReportContext, outputs: &Outputs, seed: u64) {
    let (ctx, outputs) = (ctx.clone(), outputs.clone());
    let hook: crate::cmd::interrupt::Hook = Box::new(move |signal: &str| {
        let summary = RunSummary::not_judged(
            ctx.target.clone(),
            seed,
            Indefinite {
                reason: "interrupted",
                message: format!(
                    "reqkey received {signal}: the run stopped before a verdict, and every process it started was stopped"
                ),
            },
        );
        if let Err(e) = write_reports(&ctx, &outputs, &[], &summary) {
            eprintln!("reqkey: error: {}", crate::report::inert::terminal(&e));
        }
    });
    crate::cmd::interrupt::on_interrupt(hook);
}
