//! One verdict everywhere (issue 51): every artifact states the verdict
//! and the exit code the process exits with. A failing fuzz pass is never
//! CONFORMS in any format; a signal mid-run keeps the violations already
//! proven and the scenarios that ran, and every artifact says 130.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use reqkey_harness::report::{certificate, html, json, junit, ReportContext};
use reqkey_harness::run::event::{Indefinite, Reporter, RunSummary};
use reqkey_harness::run::fuzz::pass::FuzzPass;
use reqkey_harness::run::runner::{self, RunConfig};
use reqkey_harness::run::suite;
use reqkey_harness::targets::spec::open_target;
use reqkey_harness::targets::{Level, TargetOptions};

/// What every format says of one run.
#[derive(Debug)]
struct Stated {
    certificate: String,
    json: serde_json::Value,
    html: String,
    junit: String,
}

fn render(ctx: &ReportContext, summary: &RunSummary) -> Stated {
    Stated {
        certificate: certificate::render(ctx, summary),
        json: serde_json::from_str(&json::render(ctx, summary)).unwrap(),
        html: html::render(ctx, &[], summary),
        junit: junit::render(ctx, summary),
    }
}

/// The `failures` and `errors` counts of a JUnit document's root.
fn junit_counts(xml: &str) -> (u64, u64) {
    let root = xml
        .lines()
        .find(|l| l.contains("<testsuites"))
        .expect("a testsuites element");
    let attr = |name: &str| -> u64 {
        let at = root.find(&format!(" {name}=\"")).expect(name) + name.len() + 3;
        root[at..].split('"').next().unwrap().parse().unwrap()
    };
    (attr("failures"), attr("errors"))
}

/// The HTML page's `data-verdict` and `data-exit-code`.
fn html_verdict(page: &str) -> (String, u8) {
    let get = |name: &str| -> String {
        let at = page.find(&format!("{name}=\"")).expect(name) + name.len() + 2;
        page[at..].split('"').next().unwrap().to_owned()
    };
    (get("data-verdict"), get("data-exit-code").parse().unwrap())
}

/// One embedded store scenario, run against `target` (a real result, so
/// this test needs no knowledge of a result's fields).
async fn one_scenario(target: &str, id: &str) -> RunSummary {
    let (_, scenarios) = suite::embedded_suite(Level::Store).unwrap();
    let chosen: Vec<_> = scenarios.into_iter().filter(|s| s.id == id).collect();
    assert_eq!(chosen.len(), 1, "{id} is in the suite");
    let target = open_target(target, TargetOptions::default()).await.unwrap();
    let mut reporters: Vec<Box<dyn Reporter>> = Vec::new();
    runner::run(target, &chosen, &RunConfig::new(7), &mut reporters).await
}

fn certify_context() -> ReportContext {
    ReportContext::new("certify", "memory")
}

fn fuzz(verdict: &'static str) -> FuzzPass {
    FuzzPass {
        cases: 32,
        verdict,
        reason: Some("program 3: getRun answered **x** where the model says null".into()),
        scenario_yaml: Some("id: fuzz.shrunk\n".into()),
        ..FuzzPass::skipped(Level::Store, 7)
    }
}

#[tokio::test]
async fn a_failing_fuzz_pass_is_not_conforms_in_any_format() {
    let green = one_scenario("memory", "store.keys-are-case-sensitive").await;
    assert_eq!(green.exit_code(), 0, "the suite alone passes");
    let mut ctx = certify_context();
    ctx.fuzz = Some(fuzz("failed"));
    let s = render(&ctx, &green);
    assert!(
        !s.certificate.contains("CONFORMS**:") || s.certificate.contains("**DOES NOT CONFORM**"),
        "{}",
        s.certificate
    );
    assert!(
        s.certificate
            .contains("**DOES NOT CONFORM**: the fuzz pass failed"),
        "{}",
        s.certificate
    );
    assert!(s
        .certificate
        .trim_end()
        .ends_with("1 passed, 0 failed; the fuzz pass failed"));
    assert_eq!(s.json["exit_code"], 1);
    assert_eq!(s.json["verdict"], "fail");
    assert_eq!(html_verdict(&s.html), ("fail".into(), 1));
    assert_eq!(junit_counts(&s.junit), (1, 0), "{}", s.junit);
    assert!(s.junit.contains("fuzz_failed"));

    // A fuzz pass that could not judge is no verdict; a passing one leaves
    // the suite's verdict alone.
    ctx.fuzz = Some(fuzz("error"));
    let s = render(&ctx, &green);
    assert!(
        s.certificate.contains("**NOT JUDGED**"),
        "{}",
        s.certificate
    );
    assert_eq!(
        (s.json["exit_code"].as_u64(), s.json["verdict"].as_str()),
        (Some(2), Some("error"))
    );
    assert_eq!(html_verdict(&s.html), ("error".into(), 2));
    assert_eq!(junit_counts(&s.junit), (0, 1));
    ctx.fuzz = Some(FuzzPass {
        reason: None,
        scenario_yaml: None,
        ..fuzz("passed")
    });
    let s = render(&ctx, &green);
    assert!(s.certificate.contains("**CONFORMS**"), "{}", s.certificate);
    assert_eq!(s.json["exit_code"], 0);
    assert_eq!(html_verdict(&s.html), ("pass".into(), 0));
    assert_eq!(junit_counts(&s.junit), (0, 0));
}

#[tokio::test]
async fn an_interrupted_run_keeps_its_proofs_and_says_130() {
    let red = one_scenario("broken-memory:no-key-rule", "store.boundaries").await;
    assert_eq!(red.exit_code(), 1);
    let interrupted = |mut s: RunSummary| {
        s.indefinite = Some(Indefinite {
            reason: "interrupted",
            message: "reqkey received SIGTERM: 1 of 2 scenarios had finished".into(),
        });
        s
    };
    let ctx = certify_context();
    let s = render(&ctx, &interrupted(red));
    assert!(
        s.certificate.contains("**DOES NOT CONFORM**"),
        "{}",
        s.certificate
    );
    assert!(s.certificate.contains("exit 130"), "{}", s.certificate);
    assert_eq!(s.json["exit_code"], 130);
    assert_eq!(s.json["verdict"], "fail");
    assert_eq!(s.json["counts"]["failed"], 1);
    assert_eq!(html_verdict(&s.html), ("fail".into(), 130));
    assert_eq!(junit_counts(&s.junit).0, 1);

    let green = one_scenario("memory", "store.boundaries").await;
    let s = render(&ctx, &interrupted(green));
    assert!(
        s.certificate.contains("**NOT JUDGED** (`interrupted`)"),
        "{}",
        s.certificate
    );
    assert!(s.certificate.contains("(exit 130)"), "{}", s.certificate);
    assert!(!s.certificate.contains("exit 2"), "{}", s.certificate);
    assert!(s
        .certificate
        .trim_end()
        .ends_with("1 passed, 0 failed; interrupted"));
    assert_eq!(s.json["exit_code"], 130);
    assert_eq!(s.json["verdict"], "interrupted");
    assert_eq!(s.json["counts"]["passed"], 1);
    assert_eq!(html_verdict(&s.html), ("interrupted".into(), 130));
}

/// A scenarios directory: the embedded `store.boundaries` (which
/// `broken-memory:no-key-rule` fails at once) and a slow scenario that
/// sorts after it, so a signal comes while the run is still going.
fn slow_suite() -> tempfile_dir::Dir {
    let dir = tempfile_dir::Dir::new("one-verdict");
    let store = common::corpus("store");
    std::fs::copy(
        store.join("boundaries.yaml"),
        dir.path.join("boundaries.yaml"),
    )
    .unwrap();
    let text = std::fs::read_to_string(store.join("keys-are-case-sensitive.yaml")).unwrap();
    let mut slow = text.replace("store.keys-are-case-sensitive", "store.zz-slow");
    assert!(slow.ends_with('\n'));
    for _ in 0..6 {
        slow.push_str("  - sleep_ms: 10000\n");
    }
    std::fs::write(dir.path.join("zz-slow.yaml"), slow).unwrap();
    dir
}

/// A temporary directory removed on drop (no crate needed for one).
mod tempfile_dir {
    pub struct Dir {
        pub path: std::path::PathBuf,
    }
    impl Dir {
        pub fn new(what: &str) -> Dir {
            let path = std::env::temp_dir().join(super::common::processes::marker(what));
            std::fs::create_dir_all(&path).unwrap();
            Dir { path }
        }
    }
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Runs `reqkey run` on the slow suite against `target` with every
/// report, waits for `line` on its stdout, sends `signal`, and returns its
/// exit code and the reports' directory.
fn interrupt_after(target: &str, line: &str, signal: &str) -> (Option<i32>, tempfile_dir::Dir) {
    let suite = slow_suite();
    let out = tempfile_dir::Dir::new("one-verdict-out");
    let arg = |name: &str| out.path.join(name).display().to_string();
    let mut child: Child = Command::new(env!("CARGO_BIN_EXE_reqkey"))
        .args(["run", &suite.path.display().to_string(), "--target", target])
        .args([
            "--report",
            &arg("report.md"),
            "--json",
            &arg("results.json"),
        ])
        .args(["--junit", &arg("junit.xml"), "--html", &arg("report.html")])
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = line.to_owned();
    std::thread::spawn(move || {
        for l in BufReader::new(stdout).lines().map_while(Result::ok) {
            if l.starts_with(&wanted) {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("`{line}` was printed"));
    Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "reqkey did not stop on {signal}");
        std::thread::sleep(Duration::from_millis(20));
    };
    drop(suite);
    (status.code(), out)
}

#[test]
fn sigterm_after_a_failure_keeps_it_in_every_report_and_exits_130() {
    let (code, out) = interrupt_after(
        "broken-memory:no-key-rule",
        "FAIL  store.boundaries",
        "TERM",
    );
    assert_eq!(code, Some(130));
    let read = |name: &str| std::fs::read_to_string(out.path.join(name)).unwrap();
    let results: serde_json::Value = serde_json::from_str(&read("results.json")).unwrap();
    assert_eq!(results["exit_code"], 130, "{results:#}");
    assert_eq!(results["verdict"], "fail");
    assert_eq!(results["counts"]["failed"], 1);
    assert_eq!(results["indefinite"]["reason"], "interrupted");
    assert_eq!(results["scenarios"][0]["id"], "store.boundaries");
    let report = read("report.md");
    assert!(report.contains("**RED**"), "{report}");
    assert!(
        report.contains("exit 130") && !report.contains("exit 2"),
        "{report}"
    );
    assert_eq!(junit_counts(&read("junit.xml")).0, 1);
    assert_eq!(html_verdict(&read("report.html")), ("fail".into(), 130));
}

#[test]
fn sigint_before_a_failure_is_interrupted_with_the_scenarios_that_ran() {
    let (code, out) = interrupt_after("memory", "PASS  store.boundaries", "INT");
    assert_eq!(code, Some(130));
    let read = |name: &str| std::fs::read_to_string(out.path.join(name)).unwrap();
    let results: serde_json::Value = serde_json::from_str(&read("results.json")).unwrap();
    assert_eq!(results["exit_code"], 130, "{results:#}");
    assert_eq!(results["verdict"], "interrupted");
    assert_eq!(results["counts"]["passed"], 1);
    assert!(results["closing_line"]
        .as_str()
        .unwrap()
        .starts_with("1 passed, 0 failed"));
    let report = read("report.md");
    assert!(
        report.contains("(exit 130)") && !report.contains("exit 2"),
        "{report}"
    );
    assert_eq!(
        html_verdict(&read("report.html")),
        ("interrupted".into(), 130)
    );
}
