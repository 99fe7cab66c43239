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

use crate::report::context::{Rendered, ReportContext};
use crate::report::record::{self, RunRecord};
use crate::run::event::{Event, Reporter, RunSummary};
use crate::run::partition::Partition;
use crate::targets::profile::ProfileSource;

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
    profile: Option<ProfileDoc>,
    not_applicable: Vec<NotApplicableDoc<'a>>,
    suite: Option<SuiteDoc<'a>>,
    clause_coverage: Option<CoverageDoc<'a>>,
    selection: &'a [String],
    expected_failures: &'a [String],
    seed: u64,
    duration_ms: u64,
    counts: Counts,
    exit_code: u8,
    /// The run's one verdict: `pass`, `fail`, `error` (not judged) or
    /// `interrupted` (a signal, nothing proven); `exit_code` says the same.
    verdict: &'static str,
    /// The lines that explain the closing count (the same as every
    /// human-readable format's).
    closing_notes: &'a [String],
    closing_line: &'a str,
    /// The run by clause (the run's record, `report/record.rs`): each
    /// clause's standing on the evidence of the suite's checks and the
    /// fuzz pass's violations, the same rows as every format's.
    clauses: Vec<ClauseDoc<'a>>,
    /// Why the run is red beyond its clauses (a failed fuzz pass that
    /// charges no clause, an unexpected pass); absent when nothing is.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    red_beyond_clauses: Vec<&'static str>,
    /// An idem run: each declared field, the scenarios that judge it, what
    /// the fuzz pass judged of it and its standing.
    #[serde(skip_serializing_if = "Option::is_none")]
    declared_fields: Option<Vec<FieldDoc<'a>>>,
    /// Why the run reached no verdict, when it did not.
    indefinite: Option<IndefiniteDoc<'a>>,
    /// The target's warnings (`{code, message, fix}`); absent when none.
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    warnings: &'a [crate::targets::latency::TargetWarning],
    scenarios: Vec<ScenarioDoc<'a>>,
    /// The shard this run judged (`--partition k/n`); absent for a whole
    /// suite.
    #[serde(skip_serializing_if = "Option::is_none")]
    partition: Option<Partition>,
    /// The certification's bounded fuzz pass (absent where none ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    fuzz: Option<&'a crate::run::fuzz::pass::FuzzPass>,
    /// The certification run (`certify --run-id`, or derived); absent
    /// for `run`. Shards of one run share it; merge refuses others.
    #[serde(skip_serializing_if = "Option::is_none")]
    run_id: Option<&'a str>,
}

/// One clause of the run.
#[derive(Debug, Serialize)]
struct ClauseDoc<'a> {
    clause: &'a str,
    /// `pass`, `fail` or `not_judged`.
    standing: &'static str,
    /// Scenarios whose failed checks name it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    failed_in: Vec<&'a str>,
    /// Indices into `fuzz.violations` of the violations blamed on it.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fuzz_violations: Vec<usize>,
    /// Scenarios whose checks of it passed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    passed_in: Vec<&'a str>,
}

/// One declared field of an idem profile.
#[derive(Debug, Serialize)]
struct FieldDoc<'a> {
    field: &'a str,
    value: &'a str,
    /// The scenarios that applied and judge it.
    scenarios: &'a [String],
    promises_nothing: bool,
    /// What the fuzz pass judged of it (`{"field", "upToMs"?}`), if it did.
    fuzz: Option<&'a crate::run::fuzz::idem_battery::JudgedField>,
    /// `scenarios`, `fuzz`, `fuzz_up_to`, `nothing` or `promises_nothing`.
    standing: &'static str,
}

#[derive(Debug, Serialize)]
struct IndefiniteDoc<'a> {
    reason: &'a str,
    message: &'a str,
}

#[derive(Debug, Serialize)]
struct TargetDoc<'a> {
    spec: &'a str,
    /// No `--target` was given: the spec is `run`'s built-in default.
    defaulted: bool,
    health: Option<&'a Value>,
    /// With `--start`: the target as written, before its ports were chosen.
    #[serde(skip_serializing_if = "Option::is_none")]
    template: Option<&'a str>,
    /// With `--start`: each command as written, redacted.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    start: &'a [String],
    /// With `--start --db`: each database whose link the harness owned,
    /// redacted.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    db: &'a [String],
    /// The flags of how the target was reached (`--api`, `--cacert`,
    /// `-H NAME: env:VAR`, `--max-rps`, `--fuzz-cases`), no secret.
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    access: &'a [String],
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct ProfileDoc {
    supports_request_key: bool,
    /// `None` for a store (its profile is fixed).
    concurrent_entry: Option<&'static str>,
    /// `fixed` (a store), `declared` (by `/health`) or `stated` (`--profile`).
    source: &'static str,
    /// What `/health` declared when `--profile` stated another profile.
    declared: Option<String>,
    /// Whether crash behaviour was certified: only when the harness started
    /// the target and every crash scenario that applied (at least one)
    /// passed (`report::crash::claim`); otherwise why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    crash: Option<String>,
    /// The run's setup the claim starts from (whether the harness started
    /// the target), for `certify merge` to make the claim again.
    #[serde(skip_serializing_if = "Option::is_none")]
    crash_setup: Option<String>,
    /// With `--start`: the crash scenarios that applied, and why the
    /// others did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    crash_scenarios: Option<crate::report::crash::CrashScenarios>,
    /// Whether the database link was faulted (`--db`, the link
    /// scenarios; `report::crash::link_claim`), its setup, and the link
    /// scenarios that applied and why the others did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    link: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    link_setup: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    link_scenarios: Option<crate::report::crash::CrashScenarios>,
    /// An idem target's declared `Idempotency-Key` profile (SPEC 10), every
    /// field; `supportsRequestKey` and `concurrentEntry` then mean nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    idem: Option<reqkey_model::idem_profile::IdemProfile>,
    /// `--api`: the map that declared it and the effect oracle judged by.
    #[serde(skip_serializing_if = "Option::is_none")]
    api_map: Option<String>,
}

#[derive(Debug, Serialize)]
struct NotApplicableDoc<'a> {
    id: &'a str,
    file: String,
    requires: &'a str,
}

#[derive(Debug, Serialize)]
struct SuiteDoc<'a> {
    source: &'a str,
    version: Option<&'a str>,
    digest: &'a str,
    files: usize,
    /// The suite built into the binary, not files read from disk.
    embedded: bool,
}

#[derive(Debug, Serialize)]
struct CoverageDoc<'a> {
    level: &'a str,
    covered: usize,
    total: usize,
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
    /// The clauses of spec/SPEC.md the scenario checks.
    checks: &'a [String],
    summary: &'a str,
    verdict: &'static str,
    trials_run: u32,
    trials_with_groups: u32,
    trials_overlapped: u32,
    /// The widest spread between the first and the last send of one
    /// parallel group, over every trial (only with parallel groups).
    #[serde(skip_serializing_if = "Option::is_none")]
    max_send_spread_us: Option<u64>,
    duration_ms: u64,
    failure: Option<FailureDoc<'a>>,
    /// Failures of `always` steps after the first, each with its clauses.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    later_failures: Vec<FailureDoc<'a>>,
    /// Each clause of the scenario: pass, fail or not judged, and why.
    clauses: &'a [crate::run::event::ClauseVerdict],
    /// What a stage measured (mixed histories: seed, operations, overlap).
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct FailureDoc<'a> {
    trial: u32,
    step: &'a str,
    message: &'a str,
    expected: Option<&'a Value>,
    actual: Option<&'a Value>,
    detail: Option<&'a str>,
    /// The typed reason a scenario could not be judged (errors and
    /// indefinite races only).
    reason: Option<&'a str>,
    /// The clauses of spec/SPEC.md the failed check judges: what this
    /// failure is evidence against, and nothing else.
    clauses: &'a [String],
}

fn clause_docs<'a>(rec: &RunRecord<'a>) -> Vec<ClauseDoc<'a>> {
    rec.clauses
        .iter()
        .map(|row| {
            let mut failed_in: Vec<&str> = Vec::new();
            for f in &row.findings {
                for (id, _) in &f.scenarios {
                    if !failed_in.contains(id) {
                        failed_in.push(id);
                    }
                }
            }
            ClauseDoc {
                clause: row.clause,
                standing: row.standing.as_str(),
                failed_in,
                fuzz_violations: row
                    .fuzz
                    .iter()
                    .filter_map(|v| rec.violations.iter().position(|w| std::ptr::eq(w, *v)))
                    .collect(),
                passed_in: row.passed_in.clone(),
            }
        })
        .collect()
}

/// Renders a run as a `reqkey-results/1` document (pretty, newline-ended).
pub fn render(ctx: &ReportContext, summary: &RunSummary) -> String {
    let rec = record::of(ctx, summary);
    let run = rec.verdict;
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
            template: ctx.target_template.as_deref(),
            start: &ctx.start_commands,
            db: &ctx.db_urls,
            access: &ctx.access,
        },
        profile: ctx.profile.as_ref().map(|p| ProfileDoc {
            supports_request_key: p.profile.supports_request_key,
            concurrent_entry: (p.source != ProfileSource::Fixed)
                .then(|| p.profile.concurrent_entry.name()),
            source: p.source.name(),
            declared: p.declared.map(|d| d.to_string()),
            crash: rec.crash.clone(),
            crash_setup: p.crash_scenarios.as_ref().and(p.crash.clone()),
            crash_scenarios: p.crash_scenarios.clone(),
            link: rec.link.clone(),
            link_setup: p.link_scenarios.as_ref().and(p.link.clone()),
            link_scenarios: p.link_scenarios.clone(),
            idem: p.idem.clone(),
            api_map: p.api_map.clone(),
        }),
        not_applicable: ctx
            .not_applicable
            .iter()
            .map(|n| NotApplicableDoc {
                id: &n.id,
                file: n.file.display().to_string(),
                requires: &n.requires,
            })
            .collect(),
        suite: ctx.suite.as_ref().map(|s| SuiteDoc {
            source: &s.source,
            version: s.version.as_deref(),
            digest: &s.digest,
            files: s.files,
            embedded: s.embedded,
        }),
        clause_coverage: ctx.clause_coverage.as_ref().map(|c| CoverageDoc {
            level: &c.level,
            covered: c.covered,
            total: c.total,
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
            indefinite: summary.indefinite_scenarios,
            expected_failures: summary.expected_failures,
            unexpected_passes: summary.unexpected_passes,
        },
        exit_code: run.exit_code,
        verdict: run.outcome.class(),
        closing_notes: &rec.closing_notes,
        closing_line: &rec.closing_line,
        clauses: clause_docs(&rec),
        red_beyond_clauses: rec.unclaused.clone(),
        declared_fields: rec.fields.as_ref().map(|fields| {
            fields
                .iter()
                .map(|f| FieldDoc {
                    field: &f.field.field,
                    value: &f.field.value,
                    scenarios: &f.field.scenarios,
                    promises_nothing: f.field.promises_nothing,
                    fuzz: f.fuzz,
                    standing: f.standing.as_str(),
                })
                .collect()
        }),
        warnings: &summary.warnings,
        indefinite: summary.indefinite.as_ref().map(|i| IndefiniteDoc {
            reason: i.reason,
            message: &i.message,
        }),
        scenarios: summary
            .results
            .iter()
            .map(|r| ScenarioDoc {
                id: &r.id,
                file: r.file.display().to_string(),
                level: r.level.to_string(),
                tags: &r.tags,
                checks: &r.checks,
                summary: &r.summary,
                verdict: r.verdict.as_str(),
                trials_run: r.trials_run,
                trials_with_groups: r.trials_with_groups,
                trials_overlapped: r.trials_overlapped,
                max_send_spread_us: r.max_send_spread_us,
                duration_ms: r.duration_ms,
                failure: r.failure.as_ref().map(|f| failure_doc(f, r.reason)),
                later_failures: r
                    .later_failures
                    .iter()
                    .map(|f| failure_doc(f, None))
                    .collect(),
                clauses: &r.clauses,
                note: r.note.as_deref(),
            })
            .collect(),
        partition: ctx.partition,
        fuzz: ctx.fuzz.as_ref(),
        run_id: ctx.run_id.as_deref(),
    };
    match serde_json::to_string_pretty(&doc) {
        Ok(text) => {
            let mut text = crate::report::inert::json_text(&text);
            text.push('\n');
            text
        }
        Err(e) => format!("{{\"schema\": \"{SCHEMA}\", \"error\": \"{e}\"}}\n"),
    }
}

/// A failure as the document writes it (trials counted from 1).
fn failure_doc<'a>(f: &'a crate::run::event::Failure, reason: Option<&'a str>) -> FailureDoc<'a> {
    FailureDoc {
        trial: f.trial + 1,
        step: &f.step,
        message: &f.message,
        expected: f.expected.as_ref(),
        actual: f.actual.as_ref(),
        detail: f.detail.as_deref(),
        reason,
        clauses: &f.clauses,
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
