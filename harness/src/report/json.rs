//! The JSON report: `reqkey-results/1`, a stable document for scripts.
//!
//! Its shape is documented field by field in `docs/reports.md`, and it is
//! built from structs of its own, not from the runner's types, so that a
//! refactoring inside the harness cannot silently change what a script
//! reads. Fields are added, never renamed or removed, within one schema
//! name; a breaking change gets `reqkey-results/2`.

use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use crate::report::context::{closing_line, Rendered, ReportContext};
use crate::run::event::{Event, Reporter, RunSummary};

/// The schema name written into every document.
pub const SCHEMA: &str = "reqkey-results/1";

#[derive(Debug, Serialize)]
struct Document<'a> {
    schema: &'static str,
    command: &'a str,
    certification: bool,
    reqkey_version: &'a str,
    date: &'a str,
    target: TargetDoc<'a>,
    suite: Option<SuiteDoc<'a>>,
    selection: &'a [String],
    expected_failures: &'a [String],
    seed: u64,
    duration_ms: u64,
    counts: Counts,
    exit_code: u8,
    closing_line: String,
    scenarios: Vec<ScenarioDoc<'a>>,
}

#[derive(Debug, Serialize)]
struct TargetDoc<'a> {
    spec: &'a str,
    /// No `--target` was given: the spec is `run`'s built-in default.
    defaulted: bool,
    health: Option<&'a Value>,
}

#[derive(Debug, Serialize)]
struct SuiteDoc<'a> {
    source: &'a str,
    version: Option<&'a str>,
    digest: &'a str,
    files: usize,
}

#[derive(Debug, Serialize)]
struct Counts {
    total: usize,
    passed: usize,
    failed: usize,
    errored: usize,
    indefinite: usize,
    expected_failures: usize,
    unexpected_passes: usize,
}

#[derive(Debug, Serialize)]
struct ScenarioDoc<'a> {
    id: &'a str,
    file: String,
    level: String,
    tags: &'a [String],
    summary: &'a str,
    verdict: &'static str,
    trials_run: u32,
    trials_with_groups: u32,
    trials_overlapped: u32,
    duration_ms: u64,
    failure: Option<FailureDoc<'a>>,
}

#[derive(Debug, Serialize)]
struct FailureDoc<'a> {
    trial: u32,
    step: &'a str,
    message: &'a str,
    expected: Option<&'a Value>,
    actual: Option<&'a Value>,
    detail: Option<&'a str>,
}

/// Renders a run as a `reqkey-results/1` document (pretty, newline-ended).
pub fn render(ctx: &ReportContext, summary: &RunSummary) -> String {
    let doc = Document {
        schema: SCHEMA,
        command: &ctx.command,
        certification: ctx.is_certification(),
        reqkey_version: &ctx.reqkey_version,
        date: &ctx.date,
        target: TargetDoc {
            spec: &ctx.target,
            defaulted: ctx.target_defaulted,
            health: ctx.health.as_ref(),
        },
        suite: ctx.suite.as_ref().map(|s| SuiteDoc {
            source: &s.source,
            version: s.version.as_deref(),
            digest: &s.digest,
            files: s.files,
        }),
        selection: &ctx.selection,
        expected_failures: &ctx.expected_failures,
        seed: summary.seed,
        duration_ms: summary.duration_ms,
        counts: Counts {
            total: summary.results.len(),
            passed: summary.passed,
            failed: summary.failed,
            errored: summary.errored,
            indefinite: summary.indefinite,
            expected_failures: summary.expected_failures,
            unexpected_passes: summary.unexpected_passes,
        },
        exit_code: summary.exit_code(),
        closing_line: closing_line(summary),
        scenarios: summary
            .results
            .iter()
            .map(|r| ScenarioDoc {
                id: &r.id,
                file: r.file.display().to_string(),
                level: r.level.to_string(),
                tags: &r.tags,
                summary: &r.summary,
                verdict: r.verdict.as_str(),
                trials_run: r.trials_run,
                trials_with_groups: r.trials_with_groups,
                trials_overlapped: r.trials_overlapped,
                duration_ms: r.duration_ms,
                failure: r.failure.as_ref().map(|f| FailureDoc {
                    trial: f.trial,
                    step: &f.step,
                    message: &f.message,
                    expected: f.expected.as_ref(),
                    actual: f.actual.as_ref(),
                    detail: f.detail.as_deref(),
                }),
            })
            .collect(),
    };
    match serde_json::to_string_pretty(&doc) {
        Ok(mut text) => {
            text.push('\n');
            text
        }
        Err(e) => format!("{{\"schema\": \"{SCHEMA}\", \"error\": \"{e}\"}}\n"),
    }
}

/// Writes the JSON document to `W` when the run finishes.
pub struct JsonReporter<W: Write + Send> {
    ctx: ReportContext,
    inner: Rendered<W>,
}

impl<W: Write + Send> std::fmt::Debug for JsonReporter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonReporter").finish_non_exhaustive()
    }
}

impl<W: Write + Send> JsonReporter<W> {
    pub fn new(ctx: ReportContext, out: W) -> Self {
        Self {
            ctx,
            inner: Rendered::new(out),
        }
    }
}

impl<W: Write + Send> Reporter for JsonReporter<W> {
    fn on_event(&mut self, event: &Event) {
        let ctx = &self.ctx;
        self.inner.on_event(event, |s| render(ctx, s));
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.inner.finish()
    }
}
