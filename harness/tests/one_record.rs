//! One record, every format (issue 54): the same run (a suite with a
//! failure and errors, beside a failed fuzz pass whose violations fall on
//! several clauses, one of them on a clause the suite passed, one whose
//! reproduction did not replay, one blamed on a set) rendered as the
//! Markdown certificate, HTML, JUnit, `results.json`, the terminal, and
//! the certificate `certify merge` makes from the results, agrees clause by
//! clause, on every violation, on the declared fields and on the exit
//! code. Pure: no target, no run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::{Arc, Mutex};

use reqkey_harness::report::merge::{merge, parse_shard};
use reqkey_harness::report::{
    certificate, html, json, junit, DeclaredField, ReportContext, TerminalReporter,
};
use reqkey_harness::run::event::{
    ClauseStanding, ClauseVerdict, Event, Failure, Reporter, RunSummary, ScenarioResult, Verdict,
};
use reqkey_harness::run::fuzz::idem_battery::JudgedField;
use reqkey_harness::run::fuzz::pass::{FuzzPass, FuzzViolation};
use reqkey_harness::run::partition::Partition;
use reqkey_harness::run::suite::SuiteInfo;
use reqkey_harness::targets::Level;

const AT_MOST_ONCE: &str = "idem.effect.at-most-once";
const LOCK: &str = "idem.lock.held";
const CONCURRENT: &str = "idem.concurrent.declared";
const HEADER: &str = "idem.replay.header";
const SCOPE: &str = "idem.scope.declared";
const SYNTAX: &str = "idem.key.syntax";
const REPLAY: &str = "idem.replay.completed";

fn result(id: &str, clauses: &[(&str, ClauseStanding)], verdict: Verdict) -> ScenarioResult {
    let failed: Vec<String> = clauses
        .iter()
        .filter(|(_, s)| *s == ClauseStanding::Fail)
        .map(|(c, _)| (*c).to_owned())
        .collect();
    ScenarioResult {
        id: id.into(),
        file: format!("idempotency-key/{id}.yaml").into(),
        level: Level::Idem,
        tags: Vec::new(),
        checks: clauses.iter().map(|(c, _)| (*c).to_owned()).collect(),
        summary: "s".into(),
        verdict,
        trials_run: 1,
        trials_overlapped: 0,
        trials_with_groups: 0,
        max_send_spread_us: None,
        duration_ms: 3,
        failure: (verdict != Verdict::Pass).then(|| Failure {
            step: "steps[1] http POST /orders".into(),
            message: match verdict {
                Verdict::Error => "no answer within 2000 ms".into(),
                _ => "answer does not match: at `status`: expected 201, found 409".into(),
            },
            clauses: failed,
            ..Failure::default()
        }),
        later_failures: Vec::new(),
        clauses: clauses
            .iter()
            .map(|(c, s)| ClauseVerdict {
                clause: (*c).to_owned(),
                standing: *s,
                why: (*s == ClauseStanding::NotJudged)
                    .then(|| "could not judge steps[0] http POST /orders: timeout".into()),
            })
            .collect(),
        timelines: Vec::new(),
        reason: (verdict == Verdict::Error).then_some("timeout"),
        note: None,
        history_view: None,
    }
}

fn violation(clauses: &[&str], reproduced: bool, message: &str) -> FuzzViolation {
    FuzzViolation {
        clause: clauses[0].into(),
        clauses: clauses.iter().map(|c| (*c).to_owned()).collect(),
        program: "case 9: burst of 4 on POST /orders/slow".into(),
        message: message.into(),
        scenario_yaml: format!("id: idem.fuzz.{}\nlevel: idem\n", clauses[0]),
        reproduced,
        not_reproduced: (!reproduced).then(|| "the race did not show in 20 trials".into()),
    }
}

/// The run: one scenario passes (at-most-once among its clauses), one
/// fails on scope, one ends in an error; the fuzz pass proved three
/// violations, and judged `lockMs`, which no scenario judges.
fn the_run() -> (ReportContext, RunSummary) {
    use ClauseStanding::*;
    let results = vec![
        result(
            "idem.replay-after-completion",
            &[(SYNTAX, Pass), (REPLAY, Pass), (AT_MOST_ONCE, Pass)],
            Verdict::Pass,
        ),
        result(
            "idem.another-path-same-key",
            &[(SYNTAX, Pass), (SCOPE, Fail)],
            Verdict::Fail,
        ),
        result(
            "idem.slow-handler-outlives-timeouts",
            &[(SYNTAX, NotJudged), (LOCK, NotJudged)],
            Verdict::Error,
        ),
    ];
    let summary = RunSummary::of_results("idem+http://app".into(), 7, 9, results, None, Vec::new());
    let mut ctx = ReportContext::new("certify", "idem+http://app");
    ctx.date = "2026-12-07T00:00:00Z".into();
    ctx.suite = Some(SuiteInfo {
        source: "scenarios/idempotency-key".into(),
        version: Some("9".into()),
        digest: "sha256:00".into(),
        files: 3,
        embedded: false,
    });
    ctx.run_id = Some("run-54".into());
    ctx.partition = Partition::new(1, 1);
    ctx.fuzz = Some(FuzzPass {
        cases: 32,
        verdict: "failed",
        reason: Some("the battery's program 3: two of 8 duplicates ran".into()),
        scenario_yaml: Some("id: idem.fuzz.seed-7\n".into()),
        violations: vec![
            violation(&[AT_MOST_ONCE], true, "two of 8 duplicates ran <b>`x`</b>"),
            violation(
                &[LOCK],
                false,
                "a duplicate sent 150 ms past the lock ran beside the first",
            ),
            violation(
                &[CONCURRENT, HEADER],
                true,
                "a duplicate in flight answered 500",
            ),
        ],
        judged_fields: vec![JudgedField {
            field: "lockMs".into(),
            up_to_ms: None,
        }],
        ..FuzzPass::skipped(Level::Idem, 7)
    });
    let field = |name: &str, value: &str, scenarios: &[&str]| DeclaredField {
        field: name.into(),
        value: value.into(),
        scenarios: scenarios.iter().map(|s| (*s).to_owned()).collect(),
        promises_nothing: false,
    };
    ctx.declared_fields = Some(vec![
        field("keySyntax", "sf-string", &["idem.replay-after-completion"]),
        field("lockMs", "a duration", &[]),
        field("durable", "true", &[]),
    ]);
    (ctx, summary)
}

/// What every format must say: the clauses by standing.
fn expected() -> BTreeMap<String, &'static str> {
    [
        (AT_MOST_ONCE, "fail"),
        (CONCURRENT, "fail"),
        (LOCK, "fail"),
        (SCOPE, "fail"),
        (SYNTAX, "pass"),
        (REPLAY, "pass"),
    ]
    .into_iter()
    .map(|(c, s)| (c.to_owned(), s))
    .collect()
}

/// The certificate's "## Clauses" table.
fn markdown_clauses(md: &str) -> BTreeMap<String, &'static str> {
    let table = md
        .split("## Clauses")
        .nth(1)
        .expect("a Clauses section")
        .split("\n## ")
        .next()
        .unwrap();
    table
        .lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split(" | ").collect();
            let standing = match cells[1] {
                "**FAIL**" => "fail",
                "pass" => "pass",
                "not judged" => "not_judged",
                other => panic!("standing {other}"),
            };
            (
                cells[0]
                    .trim_start_matches("| ")
                    .trim_matches('`')
                    .to_owned(),
                standing,
            )
        })
        .collect()
}

fn json_clauses(doc: &serde_json::Value) -> BTreeMap<String, &'static str> {
    doc["clauses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let standing = match c["standing"].as_str().unwrap() {
                "fail" => "fail",
                "pass" => "pass",
                _ => "not_judged",
            };
            (c["clause"].as_str().unwrap().to_owned(), standing)
        })
        .collect()
}

fn html_clauses(page: &str) -> BTreeMap<String, &'static str> {
    page.split("<tr class=\"clause ")
        .skip(1)
        .map(|row| {
            let attr = |name: &str| {
                let at = row.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                row[at..].split('"').next().unwrap().to_owned()
            };
            let standing = match attr("data-standing").as_str() {
                "fail" => "fail",
                "pass" => "pass",
                _ => "not_judged",
            };
            (attr("data-clause"), standing)
        })
        .collect()
}

fn junit_clauses(xml: &str) -> BTreeMap<String, &'static str> {
    let report = quick_junit::Report::deserialize_from_str(xml).unwrap();
    let suite = report
        .test_suites
        .iter()
        .find(|s| s.name.as_str() == "reqkey.clauses")
        .expect("a reqkey.clauses suite");
    suite
        .properties
        .iter()
        .filter(|p| p.name.as_str() == "clause")
        .map(|p| {
            let (clause, rest) = p.value.as_str().split_once(": ").unwrap();
            let standing = match rest.split(' ').next().unwrap() {
                "fail" => "fail",
                "pass" => "pass",
                _ => "not_judged",
            };
            (clause.to_owned(), standing)
        })
        .collect()
}

/// The terminal's clause lines: the FAIL rows and the count line.
fn terminal_fails_and_counts(text: &str) -> (Vec<String>, String) {
    let fails = text
        .lines()
        .filter_map(|l| l.strip_prefix("  FAIL "))
        .map(|l| l.split("  ").next().unwrap().to_owned())
        .collect();
    let counts = text
        .lines()
        .find(|l| l.starts_with("clauses: "))
        .unwrap()
        .to_owned();
    (fails, counts)
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn terminal(ctx: &ReportContext, summary: &RunSummary) -> String {
    let out = Shared::default();
    let mut t = TerminalReporter::new(out.clone(), false).with_context(ctx.clone());
    t.on_event(&Event::RunFinished {
        summary: summary.clone(),
    });
    let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
    text
}

#[test]
fn every_format_states_the_same_clauses_violations_fields_and_exit_code() {
    let (ctx, summary) = the_run();
    let md = certificate::render(&ctx, &summary);
    let results = json::render(&ctx, &summary);
    let doc: serde_json::Value = serde_json::from_str(&results).unwrap();
    let page = html::render(&ctx, &[], &summary);
    let xml = junit::render(&ctx, &summary);
    let term = terminal(&ctx, &summary);
    // `certify merge` reads the results back into one certificate.
    let merged = merge(vec![parse_shard("shard-1", &results).unwrap()]).unwrap();
    let merged_md = certificate::render(&merged.ctx, &merged.summary);
    let merged_doc: serde_json::Value =
        serde_json::from_str(&json::render(&merged.ctx, &merged.summary)).unwrap();

    let want = expected();
    assert_eq!(markdown_clauses(&md), want, "{md}");
    assert_eq!(json_clauses(&doc), want, "{doc:#}");
    assert_eq!(html_clauses(&page), want, "{page}");
    assert_eq!(junit_clauses(&xml), want, "{xml}");
    assert_eq!(markdown_clauses(&merged_md), want, "{merged_md}");
    assert_eq!(json_clauses(&merged_doc), want);
    let fails: Vec<String> = want
        .iter()
        .filter(|(_, s)| **s == "fail")
        .map(|(c, _)| c.clone())
        .collect();
    let (term_fails, counts) = terminal_fails_and_counts(&term);
    assert_eq!(term_fails, fails, "{term}");
    assert_eq!(counts, "clauses: 4 FAIL, 2 pass, 0 not judged", "{term}");

    // One exit code, one closing line: a proven violation outranks the
    // error, which the closing line still counts as an error.
    let closing = "1 passed, 1 failed, 1 error; the fuzz pass failed";
    for (name, text) in [("md", &md), ("terminal", &term), ("merged", &merged_md)] {
        assert_eq!(text.lines().last(), Some(closing), "{name}");
    }
    assert_eq!(doc["closing_line"], closing);
    assert_eq!(merged_doc["closing_line"], closing);
    assert!(page.contains(&format!("<p id=\"closing-line\">{closing}</p>")));
    assert_eq!(doc["exit_code"], 1);
    assert_eq!(merged_doc["exit_code"], 1);
    assert!(page.contains("data-exit-code=\"1\""));
    assert!(md.contains("**DOES NOT CONFORM**"));
    assert!(merged_md.contains("**DOES NOT CONFORM**"));
    let report = quick_junit::Report::deserialize_from_str(&xml).unwrap();
    // The failed scenario and the three violations; the error apart.
    assert_eq!((report.failures, report.errors), (4, 1), "{xml}");

    // Every violation, in every format: its clause, its message made
    // inert, and the fate of its reproduction.
    for v in &ctx.fuzz.as_ref().unwrap().violations {
        assert!(md.contains(&format!("### `{}`: FAIL", v.clause)), "{md}");
        assert!(merged_md.contains(&format!("### `{}`: FAIL", v.clause)));
        assert!(
            page.contains(&format!(
                "class=\"violation failure\" data-clause=\"{}\" data-reproduced=\"{}\"",
                v.clause, v.reproduced
            )),
            "{page}"
        );
        assert!(
            xml.contains(&format!("name=\"fuzz.idem.{}\"", v.clause)),
            "{xml}"
        );
        assert!(term.contains(&format!("  {}: ", v.clause)), "{term}");
    }
    for text in [&md, &merged_md, &page, &xml, &term] {
        assert!(
            text.contains("reproduction did not replay: ")
                && text.contains("the race did not show in 20 trials"),
            "{text}"
        );
        // Beside each: the violation stands, never "no verdict".
        for (at, _) in text.match_indices("did not replay") {
            let beside: String = text[at..].chars().take(120).collect();
            assert!(
                beside.contains("the violation stands") && !beside.contains("no verdict"),
                "{beside}"
            );
        }
    }
    assert!(!page.contains("<b>`x`</b>"), "the message is inert in HTML");
    assert!(md.contains("blamed with `idem.replay.header`"), "{md}");
    assert_eq!(doc["fuzz"]["violations"].as_array().unwrap().len(), 3);
    assert_eq!(doc["fuzz"]["violations"][1]["reproduced"], false);
    assert_eq!(
        merged_doc["fuzz"]["violations"], doc["fuzz"]["violations"],
        "merge keeps every violation"
    );
    let lock = doc["clauses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["clause"] == LOCK)
        .unwrap();
    assert_eq!(lock["fuzz_violations"], serde_json::json!([1]));

    // `lockMs` was judged by the fuzz pass: no format calls it unjudged;
    // `durable` was judged by nothing, and every format says so.
    let row = |md: &str| {
        md.lines()
            .find(|l| l.starts_with("| declared fields nothing judged |"))
            .unwrap()
            .to_owned()
    };
    for m in [&md, &merged_md] {
        let r = row(m);
        assert!(r.contains("`durable = true`: no scenario"), "{r}");
        assert!(
            r.contains("judged by the fuzz pass alone: `lockMs = a duration`"),
            "{r}"
        );
    }
    assert!(
        term.contains("declared fields nothing judged: durable = true\n"),
        "{term}"
    );
    assert!(
        page.contains("<code>durable = true</code>: no scenario"),
        "{page}"
    );
    assert!(xml.contains("lockMs = a duration: fuzz"), "{xml}");
    let fields = |d: &serde_json::Value| -> Vec<(String, String)> {
        d["declared_fields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                (
                    f["field"].as_str().unwrap().to_owned(),
                    f["standing"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let want_fields: Vec<(String, String)> = [
        ("keySyntax", "scenarios"),
        ("lockMs", "fuzz"),
        ("durable", "nothing"),
    ]
    .into_iter()
    .map(|(f, s)| (f.to_owned(), s.to_owned()))
    .collect();
    assert_eq!(fields(&doc), want_fields);
    assert_eq!(fields(&merged_doc), want_fields);
    insta::assert_snapshot!("one_record_certificate", md);
}

/// Issue 54: "declared fields nothing judged" listed `lockMs` in a run
/// whose battery judged it and failed. A lock that lapses (declared 500
/// ms, never renewed): no scenario applies under a 500 ms lock (the
/// suite's lock scenario needs 1500 ms or more), so the suite alone names
/// `lockMs` unjudged; the battery's duplicate past the lock judges it (and
/// finds the lapse), so the run's record does not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_field_the_battery_judged_and_failed_is_not_unjudged() {
    use reqkey_harness::run::fuzz::pass::fuzz_pass;
    let spec = "broken-idem:lock-lapses";
    let target = reqkey_harness::targets::spec::open_target(spec, Default::default())
        .await
        .unwrap();
    let info = reqkey_harness::targets::profile::resolve_profile(target.as_ref(), None, 5_000)
        .await
        .unwrap();
    let declared = info.idem.clone().unwrap();
    assert_eq!(declared.lock_ms, Some(500));
    let suite = reqkey_harness::cmd::fields::idem_suite_texts(None).unwrap();
    let pairs: Vec<(&reqkey_harness::scenario::Scenario, &str)> = suite
        .iter()
        .filter(|(s, _)| {
            s.requires
                .idem
                .as_ref()
                .is_none_or(|r| r.unmet(&declared).is_none())
        })
        .map(|(s, t)| (s, t.as_str()))
        .collect();
    let mut ctx = ReportContext::new("certify", spec);
    ctx.declared_fields = Some(reqkey_harness::cmd::fields::declared_fields(
        &declared, &pairs,
    ));
    let summary = RunSummary::of_results(spec.into(), 3, 1, Vec::new(), None, Vec::new());
    let suite_alone = reqkey_harness::report::record::of(&ctx, &summary).unjudged_fields();
    assert!(
        suite_alone.contains(&"lockMs = a duration".to_owned()),
        "{suite_alone:?}"
    );
    let pass = fuzz_pass(target, info.profile, Some(declared), 1, 3, 10_000).await;
    assert_eq!(pass.verdict, "failed", "{pass:?}");
    assert!(
        pass.reason
            .as_deref()
            .is_some_and(|r| r.contains("PastLock")),
        "{pass:?}"
    );
    assert!(
        pass.judged_fields.contains(&JudgedField {
            field: "lockMs".into(),
            up_to_ms: None
        }),
        "{:?}",
        pass.judged_fields
    );
    ctx.fuzz = Some(pass);
    let record = reqkey_harness::report::record::of(&ctx, &summary);
    assert!(
        !record
            .unjudged_fields()
            .iter()
            .any(|f| f.starts_with("lockMs")),
        "{:?}",
        record.unjudged_fields()
    );
    assert_eq!(record.fuzz_judged_fields(), ["lockMs = a duration"]);
    let md = certificate::render(&ctx, &summary);
    assert!(
        md.contains("judged by the fuzz pass alone: `lockMs = a duration`"),
        "{md}"
    );
}
