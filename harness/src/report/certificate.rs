//! The Markdown certificate: what a person reads to decide whether a
//! backend conforms.
//!
//! It names what was judged (the target, its `/health` identity and the
//! profile it was certified against, with the scenarios that profile does
//! not admit), by
//! what (the suite version and digest, the reqkey version), how to replay
//! it (the seed), when (the date), the verdict of every scenario, the
//! details of every failure, and ends with the single line
//! `N passed, N failed` so a script can read the outcome from the last
//! line alone.
//!
//! Only `reqkey certify` writes a *certificate*; a narrowed `reqkey run
//! --report` writes the same document titled "run report" and lists what
//! narrowed it, so a partial run can never pass for a certification.

use std::fmt::Write as _;
use std::io::Write;

use serde_json::Value;

use crate::report::context::{replay_path, verdict_label, Rendered, ReportContext};
use crate::report::inert::{code_cell, code_span, fenced, markdown_text};
use crate::report::record::{self, RunRecord};
use crate::report::verdict::Outcome;
use crate::run::event::{Event, Reporter, RunSummary, Verdict};
use crate::targets::profile::ProfileSource;

/// Renders a run as a Markdown certificate; the last line is the count.
pub fn render(ctx: &ReportContext, summary: &RunSummary) -> String {
    let mut md = String::new();
    // Writing to a String cannot fail; the results are ignored on purpose.
    let certification = ctx.is_certification();
    let title = if certification {
        "reqkey certificate"
    } else {
        "reqkey run report (not a certification)"
    };
    let _ = writeln!(md, "# {title}: {}\n", code_span(&ctx.target));
    let rec = record::of(ctx, summary);
    let run = rec.verdict;
    let code = run.exit_code;
    let interrupted = if run.interrupted {
        " The run was interrupted by a signal: the scenarios after those listed were not run (exit 130)."
    } else {
        ""
    };
    let fuzz_failed = if run.fuzz_failed && rec.violations.is_empty() {
        " The fuzz pass found a failing program (see the fuzz row)."
    } else if run.fuzz_failed {
        " The fuzz pass proved violations (see Fuzz violations)."
    } else {
        ""
    };
    let verdict = if run.outcome == Outcome::Fail && certification {
        let unjudged = if run.also_unjudged {
            " Some scenarios could not be judged besides (see the notes at the end); \
             a proven violation outranks them."
        } else {
            ""
        };
        let what = if summary.failed > 0 {
            "some scenario failed"
        } else {
            "the fuzz pass failed"
        };
        format!("**DOES NOT CONFORM**: {what}.{fuzz_failed}{unjudged}{interrupted}")
    } else if let (Some(i), Outcome::NotJudged | Outcome::Interrupted) =
        (&summary.indefinite, run.outcome)
    {
        format!(
            "**NOT JUDGED** (`{}`): {}. No verdict was reached (exit {code}).",
            i.reason,
            code_span(&i.message)
        )
    } else if run.outcome == Outcome::NotJudged {
        "**NOT JUDGED**: the harness could not judge every scenario.".to_owned()
    } else if certification {
        if run.outcome == Outcome::Pass && !ctx.not_applicable.is_empty() {
            "**CONFORMS**: every scenario of the suite that applies to its profile passed."
                .to_owned()
        } else if run.outcome == Outcome::Pass {
            "**CONFORMS**: every scenario of the suite passed.".to_owned()
        } else {
            "**DOES NOT CONFORM**: some scenario failed.".to_owned()
        }
    } else {
        let narrowed = if ctx.selection.is_empty() {
            String::new()
        } else {
            " The run was narrowed: see the selection below.".to_owned()
        };
        let expected = match summary.expected_failures {
            0 => String::new(),
            n => format!(" ({n} failed as expected)"),
        };
        if run.outcome == Outcome::Pass && summary.expected_failures == 0 {
            format!("**GREEN**: every scenario that ran passed.{narrowed}")
        } else if run.outcome == Outcome::Pass {
            format!("**GREEN**: no unexpected failure{expected}.{narrowed}")
        } else {
            format!("**RED**: some scenario failed or passed unexpectedly{expected}.{fuzz_failed}{narrowed}{interrupted}")
        }
    };
    let _ = writeln!(md, "{verdict}\n");
    let _ = writeln!(md, "| | |\n|---|---|");
    if ctx.target_defaulted {
        let _ = writeln!(
            md,
            "| target | {}: the built-in default, no `--target` was given |",
            code_cell(&ctx.target)
        );
    } else {
        let _ = writeln!(md, "| target | {} |", code_cell(&ctx.target));
    }
    let _ = writeln!(
        md,
        "| identity (`/health`) | {} |",
        identity(ctx.health.as_ref())
    );
    if let Some(replicas) = replicas(ctx.health.as_ref()) {
        let _ = writeln!(
            md,
            "| replicas | {} endpoints, requests round-robin, every `/health` read and declaring one profile: {} |",
            replicas.len(),
            replicas.join(", ")
        );
    }
    if let Some(p) = &ctx.profile {
        // The profile quotes what the target declared: a code span, which
        // nothing declared can leave.
        let _ = writeln!(md, "| profile | {} |", code_cell(&p.describe()));
        if let Some(crash) = &rec.crash {
            // The harness's own sentence (declared booleans and numbers
            // only), escaped.
            let _ = writeln!(md, "| crash behaviour | {} |", cell(crash));
        }
        if let Some(link) = &rec.link {
            let _ = writeln!(md, "| database link | {} |", cell(link));
        }
    }
    if !ctx.not_applicable.is_empty() {
        let _ = writeln!(
            md,
            "| not applicable | {} scenarios of the suite ({}): not run, listed below |",
            ctx.not_applicable.len(),
            code_cell(&crate::run::select::reasons(&ctx.not_applicable).join("; "))
        );
    }
    if let Some(s) = &ctx.suite {
        let version = s.version.as_deref().map_or_else(
            || "an ad-hoc selection".to_owned(),
            |v| format!("version {v}"),
        );
        let origin = if s.embedded {
            " (built into this reqkey)"
        } else {
            ""
        };
        let _ = writeln!(
            md,
            "| suite | {}{origin}, {}, {} files |",
            code_cell(&s.source),
            cell(&version),
            s.files
        );
        let _ = writeln!(md, "| suite digest | {} |", code_cell(&s.digest));
    }
    if let Some(c) = &ctx.clause_coverage {
        let _ = writeln!(
            md,
            "| clause coverage | {}/{} clauses of spec/SPEC.md certified at the {} level have a scenario that can fail on them (`reqkey coverage`) |",
            c.covered, c.total, c.level
        );
    }
    if rec.fields.is_some() {
        let _ = writeln!(
            md,
            "| declared fields nothing judged | {} |",
            fields_cell(&rec)
        );
    }
    let _ = writeln!(md, "| reqkey | {} |", ctx.reqkey_version);
    let _ = writeln!(md, "| seed | `{}` |", summary.seed);
    if let Some(f) = &ctx.fuzz {
        let (line, reason) = f.line();
        let reason = reason
            .and_then(|r| r.lines().next())
            .map(|r| format!(": {}", crate::report::inert::code_span(r)))
            .unwrap_or_default();
        let _ = writeln!(md, "| fuzz | {}{reason} |", cell(&line));
        if let Some(scale) = &f.scale {
            // The harness's own words and numbers: escaped, nothing quoted.
            let mut rows: Vec<(&str, Vec<String>)> = Vec::new();
            for (what, line) in scale.lines() {
                match rows.iter_mut().find(|(w, _)| *w == what) {
                    Some((_, lines)) => lines.push(line),
                    None => rows.push((what, vec![line])),
                }
            }
            for (what, lines) in rows {
                let what = if what == "not judged" {
                    "not judged at scale"
                } else {
                    what
                };
                let joined: Vec<String> = lines.iter().map(|l| cell(l)).collect();
                let _ = writeln!(md, "| {what} | {} |", joined.join("; "));
            }
        }
        if !rec.violations.is_empty() {
            let _ = writeln!(
                md,
                "| fuzz violations | {} (each below, under Fuzz violations) |",
                rec.violations
                    .iter()
                    .map(|v| code_cell(&v.clause))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    if certification {
        let _ = writeln!(
            md,
            "| replay | {} |",
            code_cell(&format!(
                "reqkey certify {}{}{}{} --seed {}",
                ctx.replay_target(),
                profile_flag(ctx),
                ctx.fuzz
                    .as_ref()
                    .map(|f| format!(" --fuzz-cases {}", f.cases))
                    .unwrap_or_default(),
                patience_flag(ctx),
                summary.seed
            ))
        );
    }
    let _ = writeln!(md, "| date | {} |", ctx.date);
    if !ctx.selection.is_empty() {
        let _ = writeln!(
            md,
            "| selection | {} |",
            code_cell(&ctx.selection.join(" "))
        );
    }
    if !ctx.expected_failures.is_empty() {
        let _ = writeln!(
            md,
            "| expected failures | {} |",
            ctx.expected_failures
                .iter()
                .map(|id| code_cell(id))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let _ = writeln!(md, "\n## Verdicts\n");
    let _ = writeln!(
        md,
        "| scenario | verdict | trials | clauses (spec/SPEC.md) | what it checks |"
    );
    let _ = writeln!(md, "|---|---|---|---|---|");
    for r in &summary.results {
        let trials = if r.trials_with_groups > 0 {
            format!("{} ({} overlapped)", r.trials_run, r.trials_overlapped)
        } else {
            r.trials_run.to_string()
        };
        let checks = match &r.note {
            Some(note) => format!("{} ({note})", r.summary),
            None => r.summary.clone(),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {trials} | {} | {} |",
            code_cell(&r.id),
            verdict_label(r.verdict),
            standings(r),
            cell(&checks)
        );
    }
    by_clause_section(&mut md, &rec);
    if !ctx.not_applicable.is_empty() {
        let _ = writeln!(md, "\n## Not applicable to this profile\n");
        let _ = writeln!(md, "| scenario | requires |");
        let _ = writeln!(md, "|---|---|");
        for n in &ctx.not_applicable {
            let _ = writeln!(md, "| {} | {} |", code_cell(&n.id), code_cell(&n.requires));
        }
    }
    let failures: Vec<_> = summary
        .results
        .iter()
        .filter(|r| r.verdict != Verdict::Pass)
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(md, "\n## Failures\n");
        for r in failures {
            let _ = writeln!(
                md,
                "### {}: {}\n",
                code_span(&r.id),
                verdict_label(r.verdict)
            );
            let c = crate::report::clauses::of_scenario(r);
            if !c.failed.is_empty() {
                let failed: Vec<String> = c.failed.iter().map(|s| (*s).to_owned()).collect();
                let _ = writeln!(
                    md,
                    "- breaks: {} (spec/SPEC.md; `reqkey explain CLAUSE` prints one)",
                    clauses(&failed)
                );
            }
            if !c.passed.is_empty() {
                let passed: Vec<String> = c.passed.iter().map(|s| (*s).to_owned()).collect();
                let _ = writeln!(md, "- passes: {}", clauses(&passed));
            }
            for (clause, why) in &c.not_judged {
                let _ = writeln!(
                    md,
                    "- not judged: {} ({})",
                    code_span(clause),
                    code_span(why)
                );
            }
            let _ = writeln!(md, "- file: {}", code_span(&r.file.display().to_string()));
            if r.verdict == Verdict::UnexpectedPass {
                let _ = writeln!(
                    md,
                    "- passed, but listed in `--expected-failures`: take it off the list"
                );
            }
            if let Some(f) = &r.failure {
                let _ = writeln!(md, "- trial {}, step {}", f.trial + 1, code_span(&f.step));
                let _ = writeln!(md, "- why: {}", code_span(&f.message));
                for (name, value) in [("expected", &f.expected), ("actual", &f.actual)] {
                    if let Some(v) = value {
                        let _ = writeln!(md, "\n{name}:\n\n{}", fenced("json", &pretty(v)));
                    }
                }
                if let Some(d) = &f.detail {
                    let _ = writeln!(md, "\n{}", fenced("text", d));
                }
            }
            for later in &r.later_failures {
                let _ = writeln!(
                    md,
                    "- also failed: step {}, breaks {}: {}",
                    code_span(&later.step),
                    clauses(&later.clauses),
                    code_span(&later.message)
                );
            }
            let _ = writeln!(
                md,
                "\nReplay: {}\n",
                code_span(&format!(
                    "reqkey run {} {}{} --seed {}",
                    replay_path(ctx, r),
                    ctx.replay_target(),
                    profile_flag(ctx),
                    summary.seed
                ))
            );
        }
    }
    fuzz_section(&mut md, &rec);
    if !md.ends_with("\n\n") {
        md.push('\n');
    }
    for note in &rec.closing_notes {
        let _ = writeln!(md, "{note}\n");
    }
    for line in summary.warnings.iter().map(|w| {
        // The measure and the fix in code spans: a merged shard's warning
        // is read back from a file.
        format!(
            "**warning[{}]**: {} Fix: {}",
            w.code,
            code_span(&w.message),
            code_span(&w.fix)
        )
    }) {
        let _ = writeln!(md, "{line}\n");
    }
    let _ = writeln!(md, "{}", rec.closing_line);
    md
}

/// The declared-fields row: what nothing judged, then what the fuzz pass
/// judged only part way, or that every declared value was judged.
fn fields_cell(rec: &RunRecord<'_>) -> String {
    let unjudged = rec.unjudged_fields();
    let part = rec.part_judged_fields();
    let by_fuzz = rec.fuzz_judged_fields();
    let list = |names: &[String]| {
        names
            .iter()
            .map(|f| code_cell(f))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut said = if unjudged.is_empty() && part.is_empty() {
        "none: every declared value is judged by a scenario that applied or by the fuzz pass (`reqkey coverage` shows the scenarios' matrix)".to_owned()
    } else if unjudged.is_empty() {
        // Judged part way is not judged at the declared value (issue 55).
        "none entirely, but not each at its declared value".to_owned()
    } else {
        format!(
            "{}: no scenario that applied and no program of the fuzz pass can fail on them, so this certificate says nothing of them",
            list(&unjudged)
        )
    };
    if !by_fuzz.is_empty() {
        let _ = write!(said, "; judged by the fuzz pass alone: {}", list(&by_fuzz));
    }
    if !part.is_empty() {
        let _ = write!(
            said,
            "; judged by the fuzz pass only part way: {}",
            part.iter()
                .map(|(f, ms)| format!("{} (up to {ms} ms)", code_cell(f)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    said
}

/// Every violation the fuzz pass proved: its clause, what broke it, the
/// program, whether its reproduction replayed, and the reproduction.
fn fuzz_section(md: &mut String, rec: &RunRecord<'_>) {
    if rec.violations.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Fuzz violations\n");
    for v in rec.violations {
        let _ = writeln!(md, "### {}: FAIL\n", code_span(&v.clause));
        let with = record::blamed_with(v);
        if !with.is_empty() {
            let _ = writeln!(
                md,
                "- blamed with {}: no single clause's relaxation explains the answers",
                with.iter()
                    .map(|c| code_span(c))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        let _ = writeln!(md, "- why: {}", code_span(&v.message));
        let _ = writeln!(md, "- program: {}", code_span(&v.program));
        let _ = writeln!(md, "- {}", record::reproduction(v, code_span));
        // A probe at scale has no scenario: it is run again instead.
        if !v.scenario_yaml.is_empty() {
            let _ = writeln!(
                md,
                "\nreproduction:\n\n{}\n",
                fenced("yaml", &v.scenario_yaml)
            );
        }
    }
}

/// A scenario's clauses with their standing, failed ones first.
fn standings(r: &crate::run::event::ScenarioResult) -> String {
    let c = crate::report::clauses::of_scenario(r);
    let mut parts: Vec<String> = c
        .failed
        .iter()
        .map(|x| format!("{} **FAIL**", code_cell(x)))
        .collect();
    parts.extend(c.passed.iter().map(|x| format!("{} pass", code_cell(x))));
    parts.extend(
        c.not_judged
            .iter()
            .map(|(x, _)| format!("{} not judged", code_cell(x))),
    );
    if parts.is_empty() {
        "-".to_owned()
    } else {
        parts.join(", ")
    }
}

/// The run by clause: each clause's verdict on the evidence of the checks
/// that judge it and of the fuzz pass's violations, failures that read
/// the same given once as one finding.
fn by_clause_section(md: &mut String, rec: &RunRecord<'_>) {
    use crate::report::clauses::label;
    if rec.clauses.is_empty() && rec.unclaused.is_empty() {
        return;
    }
    let _ = writeln!(md, "\n## Clauses\n");
    let _ = writeln!(
        md,
        "Each clause on the evidence of the checks that judge it and of the fuzz pass: FAIL (a check of it failed, or the fuzz pass proved a violation of it), pass (a check of it passed, none failed), not judged (no check of it reached a verdict).\n"
    );
    for why in &rec.unclaused {
        let _ = writeln!(md, "Also red beyond its clauses: {why}.\n");
    }
    let _ = writeln!(md, "| clause | verdict | evidence |");
    let _ = writeln!(md, "|---|---|---|");
    for row in &rec.clauses {
        let evidence = match row.standing {
            crate::run::event::ClauseStanding::Fail => row
                .findings
                .iter()
                .map(|f| {
                    let ids: Vec<String> =
                        f.scenarios.iter().map(|(id, _)| code_cell(id)).collect();
                    format!(
                        "{}: {} (in {} scenario{}: {})",
                        code_cell(f.step),
                        code_cell(f.message),
                        ids.len(),
                        if ids.len() == 1 { "" } else { "s" },
                        ids.join(", ")
                    )
                })
                .chain(row.fuzz.iter().map(|v| {
                    format!(
                        "the fuzz pass: {} ({})",
                        code_cell(&v.message),
                        record::reproduction(v, code_cell)
                    )
                }))
                .collect::<Vec<_>>()
                .join("; "),
            crate::run::event::ClauseStanding::Pass => format!(
                "{} scenario{} passed a check of it",
                row.passed_in.len(),
                if row.passed_in.len() == 1 { "" } else { "s" }
            ),
            crate::run::event::ClauseStanding::NotJudged => match row.not_judged.first() {
                Some((id, why)) => {
                    let more = row.not_judged.len() - 1;
                    format!(
                        "{}: {}{}",
                        code_cell(id),
                        code_cell(why),
                        if more > 0 {
                            format!(" (and {more} more)")
                        } else {
                            String::new()
                        }
                    )
                }
                None => "no check of it reached a verdict".to_owned(),
            },
        };
        let verdict = match row.standing {
            crate::run::event::ClauseStanding::Fail => "**FAIL**".to_owned(),
            s => label(s).to_owned(),
        };
        let _ = writeln!(md, "| {} | {verdict} | {evidence} |", code_cell(row.clause));
    }
}

/// Clause ids as code spans, comma-separated (`-` for none).
fn clauses(checks: &[String]) -> String {
    if checks.is_empty() {
        return "-".to_owned();
    }
    checks
        .iter()
        .map(|c| code_cell(c))
        .collect::<Vec<_>>()
        .join(", ")
}

/// ` --profile ...` when the profile was stated, so a replay judges the same.
fn profile_flag(ctx: &ReportContext) -> String {
    match &ctx.profile {
        Some(p) if p.source == ProfileSource::Stated => format!(" --profile {}", p.profile.flag()),
        _ => String::new(),
    }
}

/// ` --patience D` and ` --capacity-keys N` where the fuzz pass's probes
/// at scale ran with other than the defaults, so a replay judges the same.
fn patience_flag(ctx: &ReportContext) -> String {
    let Some(s) = ctx.fuzz.as_ref().and_then(|f| f.scale.as_ref()) else {
        return String::new();
    };
    let mut out = String::new();
    if s.patience_ms != crate::run::fuzz::patience::DEFAULT_PATIENCE_MS {
        if let Ok(p) = crate::run::fuzz::patience::Patience::from_ms(s.patience_ms) {
            out.push_str(&format!(" --patience {}", p.flag()));
        }
    }
    if s.capacity_keys != crate::run::fuzz::scale::DEFAULT_CAPACITY_KEYS as u64 {
        out.push_str(&format!(" --capacity-keys {}", s.capacity_keys));
    }
    out
}

/// The endpoints of a replicated target (its `/health` carries them).
fn replicas(health: Option<&Value>) -> Option<Vec<String>> {
    let list = health?.get("replicas")?.as_array()?;
    Some(
        list.iter()
            .map(|r| code_cell(r.as_str().unwrap_or("?")))
            .collect(),
    )
}

fn identity(health: Option<&Value>) -> String {
    let Some(h) = health else {
        return "none (the target gave no `/health` answer)".into();
    };
    let field = |k: &str| h.get(k).and_then(Value::as_str);
    match (field("name"), field("version"), field("protocol")) {
        (Some(n), Some(v), Some(p)) => format!(
            "{} {}, protocol {}",
            code_cell(n),
            code_cell(v),
            code_cell(p)
        ),
        _ => code_cell(&h.to_string()),
    }
}

/// The harness's own text in a table cell: one line, every Markdown
/// punctuation escaped (a scenario's summary from `--scenarios ROOT`, a
/// merged shard's note), no active characters. (Text a target controls
/// goes in [`code_cell`].)
fn cell(text: &str) -> String {
    markdown_text(&text.replace('\n', " "))
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// Writes the certificate to `W` when the run finishes.
pub struct CertificateReporter<W: Write + Send> {
    ctx: ReportContext,
    inner: Rendered<W>,
}

impl<W: Write + Send> std::fmt::Debug for CertificateReporter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertificateReporter")
            .finish_non_exhaustive()
    }
}

impl<W: Write + Send> CertificateReporter<W> {
    pub fn new(ctx: ReportContext, out: W) -> Self {
        Self {
            ctx,
            inner: Rendered::new(out),
        }
    }
}

impl<W: Write + Send> Reporter for CertificateReporter<W> {
    fn on_event(&mut self, event: &Event) {
        let ctx = &self.ctx;
        self.inner.on_event(event, |s| render(ctx, s));
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.inner.finish()
    }
}
