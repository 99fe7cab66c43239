//! JUnit XML, for CI dashboards (GitHub, GitLab, Jenkins all read it).
//!
//! One `<testsuite>` per scenario file and one `<testcase>` per scenario
//! (a file holds one scenario, so each suite holds one case): dashboards
//! group by suite, and the file is what a reader opens to fix a case.
//! A failure's text carries the step, expected against actual, and the
//! seed with the command that replays it. An expected failure is written
//! as `<skipped>` (JUnit has no "expected failure"), an unexpected pass as
//! a `<failure>`, a harness error as an `<error>`. Every suite carries the
//! target, the seed, the profile it was certified against and how many
//! scenarios of the suite that profile does not admit (as properties).

use std::io::Write;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};

use crate::report::context::{replay_path, Rendered, ReportContext};
use crate::report::inert::xml_text;
use crate::report::record::{self, RunRecord};
use crate::run::event::{Event, Reporter, RunSummary, ScenarioResult, Verdict};

/// Renders a run as JUnit XML.
pub fn render(ctx: &ReportContext, summary: &RunSummary) -> String {
    let rec = record::of(ctx, summary);
    let mut report = Report::new(format!("reqkey {} {}", ctx.command, ctx.target_label()));
    report.set_time(Duration::from_millis(summary.duration_ms));
    for r in &summary.results {
        let mut suite = TestSuite::new(r.file.display().to_string());
        suite.add_property(("target", ctx.target.as_str()));
        if ctx.target_defaulted {
            suite.add_property(("target_defaulted", "true"));
        }
        suite.add_property(("seed", summary.seed.to_string().as_str()));
        for w in &summary.warnings {
            suite.add_property(("warning", xml_text(&w.line()).as_str()));
        }
        if let Some(p) = &ctx.profile {
            suite.add_property(("profile", p.describe().as_str()));
            suite.add_property(("profile_source", p.source.name()));
            if let Some(link) = &rec.link {
                suite.add_property(("database_link", xml_text(link).as_str()));
            }
            suite.add_property((
                "not_applicable",
                ctx.not_applicable.len().to_string().as_str(),
            ));
        }
        suite.set_time(Duration::from_millis(r.duration_ms));
        let mut case = TestCase::new(r.id.as_str(), status(ctx, summary, r));
        case.set_classname(format!("reqkey.{}", r.level));
        // Each clause with its standing (issue 45): `fail`, `pass` or
        // `not_judged: why`.
        for c in &r.clauses {
            let value = match &c.why {
                Some(why) if c.standing == crate::run::event::ClauseStanding::NotJudged => {
                    format!("{}: not_judged: {}", c.clause, xml_text(why))
                }
                _ => format!("{}: {}", c.clause, c.standing.as_str()),
            };
            case.add_property(("clause", value.as_str()));
        }
        if let Some(note) = &r.note {
            case.add_property(("note", xml_text(note).as_str()));
        }
        case.set_time(Duration::from_millis(r.duration_ms));
        suite.add_test_case(case);
        report.add_test_suite(suite);
    }
    if let Some(pass) = &ctx.fuzz {
        // The fuzz pass is part of the verdict (report::verdict): a failing
        // program is a failure here as everywhere, one case per violation
        // it proved.
        let cases = fuzz_cases(pass, &rec);
        if !cases.is_empty() {
            let mut suite = TestSuite::new("reqkey.fuzz");
            suite.add_property(("target", ctx.target.as_str()));
            suite.add_property(("seed", summary.seed.to_string().as_str()));
            for case in cases {
                suite.add_test_case(case);
            }
            report.add_test_suite(suite);
        }
    }
    if !rec.clauses.is_empty() || !rec.unclaused.is_empty() || rec.fields.is_some() {
        report.add_test_suite(clauses_suite(ctx, &rec));
    }
    if let Some(i) = &summary.indefinite {
        // The run as a whole reached no verdict: one case says why, so a
        // dashboard shows red, not an empty green run.
        let mut suite = TestSuite::new("reqkey");
        suite.add_property(("target", ctx.target.as_str()));
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
        s.set_message(xml_text(&i.message));
        s.set_type(i.reason);
        let mut case = TestCase::new("reqkey.no-verdict", s);
        case.set_classname("reqkey.run");
        suite.add_test_case(case);
        report.add_test_suite(suite);
    }
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- reqkey: cannot serialize JUnit: {e} -->\n"))
}

/// The run by clause and its declared fields, as the run's record has
/// them (the same rows as every format): a suite of properties only, one
/// `clause` property each (`ID: fail`, `ID: pass`, `ID: not_judged`) and
/// one `declared_field` each (`lockMs = a duration: fuzz`), so that the
/// test counts stay those of the scenarios and the fuzz pass.
fn clauses_suite(ctx: &ReportContext, rec: &RunRecord<'_>) -> TestSuite {
    let mut suite = TestSuite::new("reqkey.clauses");
    suite.add_property(("target", ctx.target.as_str()));
    for row in &rec.clauses {
        let mut value = format!("{}: {}", row.clause, row.standing.as_str());
        if !row.fuzz.is_empty() {
            value.push_str(&format!(
                " (the fuzz pass: {} violation(s))",
                row.fuzz.len()
            ));
        }
        suite.add_property(("clause", xml_text(&value).as_str()));
    }
    for why in &rec.unclaused {
        suite.add_property(("red_beyond_clauses", *why));
    }
    for f in rec.fields.iter().flatten() {
        let reach = match f.standing {
            record::FieldStanding::FuzzUpToMs(ms) => format!("fuzz up to {ms} ms"),
            s => s.as_str().to_owned(),
        };
        suite.add_property((
            "declared_field",
            xml_text(&format!("{}: {reach}", f.field.name())).as_str(),
        ));
    }
    suite
}

/// The fuzz pass as test cases, when it ran (none: skipped, or the level
/// has no fuzzer): one failure per violation it proved, or one case.
fn fuzz_cases(pass: &crate::run::fuzz::pass::FuzzPass, rec: &RunRecord<'_>) -> Vec<TestCase> {
    let (line, reason) = pass.line();
    if pass.verdict == "failed" && !rec.violations.is_empty() {
        return rec
            .violations
            .iter()
            .map(|v| {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(xml_text(&format!("breaks {}: {}", v.clause, v.message)));
                s.set_type("fuzz_violation");
                let with = record::blamed_with(v);
                let mut text = format!("clause: {}\n", v.clause);
                if !with.is_empty() {
                    text.push_str(&format!(
                        "blamed with: {} (no single clause's relaxation explains the answers)\n",
                        with.join(", ")
                    ));
                }
                text.push_str(&format!(
                    "why: {}\nprogram: {}\n{}",
                    v.message,
                    v.program,
                    record::reproduction(v, str::to_owned),
                ));
                // A probe at scale has no scenario: it is run again instead.
                if !v.scenario_yaml.is_empty() {
                    text.push_str(&format!(
                        "\nthe reproduction as a scenario:\n{}",
                        v.scenario_yaml
                    ));
                }
                s.set_description(xml_text(text.trim_end()));
                let mut case = TestCase::new(format!("fuzz.{}.{}", pass.level, v.clause), s);
                case.set_classname(format!("reqkey.{}", pass.level));
                case
            })
            .collect();
    }
    let status = match pass.verdict {
        "passed" => TestCaseStatus::success(),
        "failed" | "error" => {
            let kind = if pass.verdict == "failed" {
                NonSuccessKind::Failure
            } else {
                NonSuccessKind::Error
            };
            let mut s = TestCaseStatus::non_success(kind);
            s.set_message(xml_text(&line));
            s.set_type(if pass.verdict == "failed" {
                "fuzz_failed"
            } else {
                "fuzz_error"
            });
            let mut text = reason.unwrap_or_default().to_owned();
            if let Some(yaml) = &pass.scenario_yaml {
                text.push_str("\nthe shrunk program as a scenario:\n");
                text.push_str(yaml);
            }
            s.set_description(xml_text(text.trim_end()));
            s
        }
        _ => return Vec::new(),
    };
    let mut case = TestCase::new(format!("fuzz.{}", pass.level), status);
    case.set_classname(format!("reqkey.{}", pass.level));
    vec![case]
}

fn status(ctx: &ReportContext, summary: &RunSummary, r: &ScenarioResult) -> TestCaseStatus {
    let replay = format!(
        "seed: {seed} (replay: reqkey run {file} {target} --seed {seed})",
        seed = summary.seed,
        file = replay_path(ctx, r),
        target = ctx.replay_target(),
    );
    match r.verdict {
        Verdict::Pass => TestCaseStatus::success(),
        Verdict::UnexpectedPass => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message("passed, but listed in --expected-failures: take it off the list");
            s.set_type("unexpected_pass");
            s.set_description(replay);
            s
        }
        Verdict::ExpectedFail => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(format!(
                "expected failure (--expected-failures): {}",
                xml_text(r.failure.as_ref().map_or("", |f| f.message.as_str()))
            ));
            s.set_type("expected_failure");
            s.set_description(format!("{}\n{replay}", failure_text(r)));
            s
        }
        Verdict::Fail | Verdict::Error | Verdict::Indefinite => {
            let kind = if r.verdict == Verdict::Fail {
                NonSuccessKind::Failure
            } else {
                NonSuccessKind::Error
            };
            let mut s = TestCaseStatus::non_success(kind);
            let failed = crate::report::clauses::of_scenario(r).failed;
            s.set_message(xml_text(&format!(
                "{} [{}]",
                r.failure.as_ref().map_or("failed", |f| f.message.as_str()),
                if failed.is_empty() {
                    "no clause failed".to_owned()
                } else {
                    format!("breaks {}", failed.join(", "))
                }
            )));
            s.set_type(r.verdict.as_str());
            s.set_description(format!("{}\n{replay}", failure_text(r)));
            s
        }
    }
}

/// Clauses for a line (`none` when there are none).
fn clause_list(checks: &[String]) -> String {
    if checks.is_empty() {
        "none".to_owned()
    } else {
        checks.join(", ")
    }
}

/// The failure as plain lines: step, why, expected, actual, detail.
fn failure_text(r: &ScenarioResult) -> String {
    let Some(f) = &r.failure else {
        return String::new();
    };
    let c = crate::report::clauses::of_scenario(r);
    let mut text = format!(
        "scenario: {}\nclauses (spec/SPEC.md): {}\nbreaks: {}\nfile: {}\ntrial: {}\nstep: {}\nwhy: {}\n",
        r.id,
        clause_list(&r.checks),
        clause_list(&c.failed.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()),
        r.file.display(),
        f.trial + 1,
        f.step,
        f.message
    );
    for (clause, why) in &c.not_judged {
        text.push_str(&format!("not judged: {clause} ({why})\n"));
    }
    for later in &r.later_failures {
        text.push_str(&format!(
            "also: {} breaks {}: {}\n",
            later.step,
            later.clauses.join(", "),
            later.message
        ));
    }
    if let Some(e) = &f.expected {
        text.push_str(&format!("expected: {e}\n"));
    }
    if let Some(a) = &f.actual {
        text.push_str(&format!("actual: {a}\n"));
    }
    if let Some(d) = &f.detail {
        text.push_str(d);
        text.push('\n');
    }
    xml_text(text.trim_end())
}

/// Writes JUnit XML to `W` when the run finishes.
pub struct JunitReporter<W: Write + Send> {
    ctx: ReportContext,
    inner: Rendered<W>,
}

impl<W: Write + Send> std::fmt::Debug for JunitReporter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JunitReporter").finish_non_exhaustive()
    }
}

impl<W: Write + Send> JunitReporter<W> {
    pub fn new(ctx: ReportContext, out: W) -> Self {
        Self {
            ctx,
            inner: Rendered::new(out),
        }
    }
}

impl<W: Write + Send> Reporter for JunitReporter<W> {
    fn on_event(&mut self, event: &Event) {
        let ctx = &self.ctx;
        self.inner.on_event(event, |s| render(ctx, s));
    }

    fn finish(&mut self) -> std::io::Result<()> {
        self.inner.finish()
    }
}
