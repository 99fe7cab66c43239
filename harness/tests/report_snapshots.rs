//! Snapshots of every report format (terminal, JUnit, JSON, Markdown) for a
//! passing and a failing run of a small fixed scenario set
//! (`tests/fixtures/reports/`), taken through the real runner and the real
//! reporters. What varies between runs — durations, the seed, the date,
//! the run namespace in fresh ids, ports — is redacted, so a snapshot only
//! changes when the output's shape does. Review changes with
//! `cargo insta review` (or `INSTA_UPDATE=always cargo test` and git diff).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use reqkey_harness::report::{
    CertificateReporter, JsonReporter, JunitReporter, ReportContext, TerminalReporter,
};
use reqkey_harness::run::event::{Reporter, RunSummary};
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::run::suite;
use reqkey_harness::scenario::load_paths;
use reqkey_harness::targets::profile::resolve_profile;
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::TargetOptions;

/// A seed distinctive enough to be redacted by plain replacement.
const SEED: u64 = 31_415_926_535;

/// A writer the test keeps a handle on after giving it to a reporter.
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

impl Shared {
    fn text(&self) -> String {
        String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
    }
}

struct Outputs {
    terminal: String,
    junit: String,
    json: String,
    markdown: String,
    /// Unredacted, for the tests that parse them.
    raw_junit: String,
    raw_json: String,
    summary: RunSummary,
}

/// Runs the fixtures against `target` with all four reporters.
async fn run_fixtures(target: &str, command: &str) -> Outputs {
    run_fixtures_expecting(target, command, &[]).await
}

/// Runs the fixtures with `expected` as the `--expected-failures` ids.
async fn run_fixtures_expecting(target: &str, command: &str, expected: &[&str]) -> Outputs {
    // Relative, so the paths in reports are the same on every machine
    // (cargo runs tests from the package directory).
    let dir = PathBuf::from("tests/fixtures/reports");
    let scenarios = load_paths(std::slice::from_ref(&dir)).unwrap();
    let t = open_target(target, TargetOptions::default()).await.unwrap();
    let mut ctx = ReportContext::new(command, target);
    ctx.expected_failures = expected.iter().map(|s| s.to_string()).collect();
    ctx.health = Some(t.health().await.unwrap());
    ctx.profile = Some(resolve_profile(t.as_ref(), None, 10_000).await.unwrap());
    ctx.suite = Some(suite::selection(std::slice::from_ref(&dir)).unwrap());
    if command == "certify" {
        // A fixed figure: these snapshots pin how coverage is rendered
        // (`reqkey coverage` and the certify test compute the real one).
        ctx.clause_coverage = Some(reqkey_harness::report::ClauseCoverage {
            level: "store".into(),
            covered: 57,
            total: 59,
        });
    }
    let (terminal, junit, json, markdown) = (
        Shared::default(),
        Shared::default(),
        Shared::default(),
        Shared::default(),
    );
    let mut reporters: Vec<Box<dyn Reporter>> = vec![
        Box::new(TerminalReporter::new(terminal.clone(), false)),
        Box::new(JunitReporter::new(ctx.clone(), junit.clone())),
        Box::new(JsonReporter::new(ctx.clone(), json.clone())),
        Box::new(CertificateReporter::new(ctx.clone(), markdown.clone())),
    ];
    let mut cfg = RunConfig::new(SEED);
    cfg.expected_failures = ctx.expected_failures.iter().cloned().collect();
    let summary = runner::run(t, &scenarios, &cfg, &mut reporters).await;
    for r in &mut reporters {
        r.finish().unwrap();
    }
    let date = ctx.date.clone();
    let redact = |s: String| redact(&s.replace(&date, "[date]"));
    Outputs {
        raw_junit: junit.text(),
        raw_json: json.text(),
        terminal: redact(terminal.text()),
        junit: redact(junit.text()),
        json: redact(json.text()),
        markdown: redact(markdown.text()),
        summary,
    }
}

/// Replaces the varying parts of a report with placeholders.
fn redact(text: &str) -> String {
    let text = text
        .replace(&format!("\"seed\": {SEED}"), "\"seed\": \"[seed]\"")
        .replace(&SEED.to_string(), "[seed]");
    let text = replace_run_after(
        &text,
        "time=\"",
        |c| c.is_ascii_digit() || c == '.',
        "[duration]",
    );
    let text = replace_run_after(
        &text,
        "\"duration_ms\": ",
        |c| c.is_ascii_digit(),
        "\"[ms]\"",
    );
    let text = replace_run_after(&text, "127.0.0.1:", |c| c.is_ascii_digit(), "[port]");
    let text = replace_ms_suffix(&text);
    replace_namespaces(&text)
}

/// Replaces the run of `keep` characters right after every `prefix`.
fn replace_run_after(text: &str, prefix: &str, keep: impl Fn(char) -> bool, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(prefix) {
        out.push_str(&rest[..at + prefix.len()]);
        rest = &rest[at + prefix.len()..];
        let end = rest.find(|c: char| !keep(c)).unwrap_or(rest.len());
        if end > 0 {
            out.push_str(with);
        }
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// `, 12 ms)` -> `, [ms])` (the terminal's durations).
fn replace_ms_suffix(text: &str) -> String {
    let mut out = String::new();
    for (i, part) in text.split(" ms)").enumerate() {
        if i > 0 {
            out.push_str(" ms)");
        }
        let digits = part.len() - part.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        if digits > 0 && i + 1 < text.split(" ms)").count() {
            out.push_str(&part[..part.len() - digits]);
            out.push_str("[ms]");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// `rk1a2b3c4d.` (a run namespace in fresh ids) -> `[ns].`
fn replace_namespaces(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let is_ns = bytes[i..].starts_with(b"rk")
            && bytes.len() >= i + 11
            && bytes[i + 2..i + 10].iter().all(u8::is_ascii_hexdigit)
            && bytes[i + 10] == b'.';
        if is_ns {
            out.push_str("[ns]");
            i += 10;
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

#[test]
fn redaction_hides_what_varies() {
    let text = format!(
        "seed {SEED} (1 trials, 12 ms) time=\"0.013\" \"duration_ms\": 7, rk0a1b2c3d.0.1.s 127.0.0.1:4312"
    );
    assert_eq!(
        redact(&text),
        "seed [seed] (1 trials, [ms] ms) time=\"[duration]\" \"duration_ms\": \"[ms]\", [ns].0.1.s 127.0.0.1:[port]"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_passing_run_in_every_format() {
    let out = run_fixtures("memory", "certify").await;
    assert_eq!(out.summary.exit_code(), 0);
    insta::assert_snapshot!("passing_terminal", out.terminal);
    insta::assert_snapshot!("passing_junit", out.junit);
    insta::assert_snapshot!("passing_json", out.json);
    insta::assert_snapshot!("passing_markdown", out.markdown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_run_in_every_format() {
    let out = run_fixtures("broken-memory:delete-keeps-keys", "certify").await;
    assert_eq!(out.summary.exit_code(), 1);
    insta::assert_snapshot!("failing_terminal", out.terminal);
    insta::assert_snapshot!("failing_junit", out.junit);
    insta::assert_snapshot!("failing_json", out.json);
    insta::assert_snapshot!("failing_markdown", out.markdown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expected_failures_and_unexpected_passes_in_every_format() {
    // The broken store fails the delete fixture (expected) and passes the
    // other one, which is also listed: an unexpected pass, exit 1.
    let out = run_fixtures_expecting(
        "broken-memory:delete-keeps-keys",
        "run",
        &["fixture.delete-frees-the-key", "fixture.key-is-found"],
    )
    .await;
    assert_eq!(out.summary.exit_code(), 1);
    assert_eq!(out.summary.expected_failures, 1);
    assert_eq!(out.summary.unexpected_passes, 1);
    insta::assert_snapshot!("expected_failures_terminal", out.terminal);
    insta::assert_snapshot!("expected_failures_junit", out.junit);
    insta::assert_snapshot!("expected_failures_json", out.json);
    insta::assert_snapshot!("expected_failures_markdown", out.markdown);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_junit_report_parses_and_counts_the_failure() {
    let out = run_fixtures("broken-memory:delete-keeps-keys", "run").await;
    let report = quick_junit::Report::deserialize_from_str(&out.raw_junit).unwrap();
    assert_eq!(report.tests, 2);
    assert_eq!(report.failures, 1);
    assert_eq!(
        report
            .test_suites
            .iter()
            .filter(|s| s.name.as_str() != "reqkey.clauses")
            .count(),
        2,
        "one testsuite per scenario file"
    );
    // And the run by clause, as properties (no test of its own).
    let clauses = report
        .test_suites
        .iter()
        .find(|s| s.name.as_str() == "reqkey.clauses")
        .unwrap();
    assert_eq!(clauses.tests, 0);
    assert!(clauses
        .properties
        .iter()
        .any(|p| p.value.as_str() == "store.delete.removes-all: fail"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_human_readable_format_ends_with_the_count() {
    let out = run_fixtures("broken-memory:delete-keeps-keys", "certify").await;
    for text in [&out.terminal, &out.markdown] {
        assert_eq!(text.lines().last(), Some("1 passed, 1 failed"), "{text}");
    }
    let json: serde_json::Value = serde_json::from_str(&out.raw_json).unwrap();
    assert_eq!(json["closing_line"], "1 passed, 1 failed");
    assert_eq!(json["schema"], "reqkey-results/1");
    let redacted: serde_json::Value = serde_json::from_str(&out.json).unwrap();
    assert_eq!(
        redacted["seed"], "[seed]",
        "the redacted JSON is still JSON"
    );
}

#[test]
fn a_run_that_reached_no_verdict_says_why_in_every_format() {
    use reqkey_harness::run::event::{Event, Indefinite};
    let mut ctx = ReportContext::new("certify", "store+http://127.0.0.1:9");
    ctx.date = "[date]".into();
    let summary = RunSummary::not_judged(
        ctx.target.clone(),
        SEED,
        Indefinite {
            reason: "unreachable",
            message: "target unreachable: http://127.0.0.1:9: cannot connect".into(),
        },
    );
    assert_eq!(summary.exit_code(), 2);
    let (terminal, junit, json, markdown) = (
        Shared::default(),
        Shared::default(),
        Shared::default(),
        Shared::default(),
    );
    let mut reporters: Vec<Box<dyn Reporter>> = vec![
        Box::new(TerminalReporter::new(terminal.clone(), false)),
        Box::new(JunitReporter::new(ctx.clone(), junit.clone())),
        Box::new(JsonReporter::new(ctx.clone(), json.clone())),
        Box::new(CertificateReporter::new(ctx.clone(), markdown.clone())),
    ];
    for r in &mut reporters {
        r.on_event(&Event::RunFinished {
            summary: summary.clone(),
        });
        r.finish().unwrap();
    }
    insta::assert_snapshot!("no_verdict_terminal", redact(&terminal.text()));
    insta::assert_snapshot!("no_verdict_junit", redact(&junit.text()));
    insta::assert_snapshot!("no_verdict_json", redact(&json.text()));
    insta::assert_snapshot!("no_verdict_markdown", redact(&markdown.text()));
}

/// Issue 41: trials were numbered from 0 in the terminal, JUnit and JSON
/// and from 1 in the HTML. Every format names the failing (first) trial
/// `1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_format_numbers_trials_from_1() {
    let out = run_fixtures("broken-memory:delete-keeps-keys", "certify").await;
    assert!(
        out.terminal.contains("      trial: 1\n"),
        "{}",
        out.terminal
    );
    assert!(out.raw_junit.contains("trial: 1\n"), "{}", out.raw_junit);
    assert!(out.markdown.contains("- trial 1, step"), "{}", out.markdown);
    let json: serde_json::Value = serde_json::from_str(&out.raw_json).unwrap();
    let failed = json["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["verdict"] == "fail")
        .unwrap();
    assert_eq!(failed["failure"]["trial"], 1, "{failed}");
}
