//! The report files a run writes: created before the run (a bad path fails
//! at once), written from the events or, when nothing was judged, from
//! the reason.

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cmd::exit::harness_error;
use crate::report::{
    CertificateReporter, HtmlReporter, JsonReporter, JunitReporter, ReportContext,
};
use crate::run::event::{Event, Indefinite, Reporter, RunSummary};
use crate::targets::TargetError;
use reqkey_scenario::Scenario;

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
    /// Is any report file asked for?
    pub fn wants_reports(&self) -> bool {
        self.paths().next().is_some()
    }

    /// The files asked for, in a fixed order.
    pub fn paths(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.report, &self.html, &self.junit, &self.json]
            .into_iter()
            .flatten()
    }
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
pub(crate) fn file_reporters(
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
