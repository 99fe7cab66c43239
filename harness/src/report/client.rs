//! The reports of `reqkey proxy`: the client verdict as terminal lines,
//! JUnit XML and the `reqkey-client-results/1` JSON document.
//!
//! Pure: each format is a function of a [`ClientRun`] (what the command
//! knew: target, plan, seed, the client command and how it ended) and the
//! [`ClientVerdict`] with the trace it judged. The JSON carries the whole
//! trace (every exchange, every snapshot), so a run can be read, and
//! judged again, after the fact. Its shape is in `docs/proxy.md`; fields
//! are added, never renamed, within one schema name.

use std::collections::BTreeMap;
use std::time::Duration;

use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
use serde::Serialize;

use reqkey_check::client::{ClientEnd, ClientVerdict};
use reqkey_check::trace::{Exchange, SessionSnapshot};

/// The schema name written into every document.
pub const SCHEMA: &str = "reqkey-client-results/1";

/// What the command knew of the run, beyond the verdict.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ClientRun {
    /// The upstream, as `--target` named it.
    pub target: String,
    /// Where the proxy listened (`http://127.0.0.1:PORT`).
    pub proxy: String,
    pub seed: u64,
    /// The fault plan, as `--plan` reads it.
    pub plan: String,
    pub delay_ms: u64,
    /// The client command, as given after `--` (none: the proxy ran until
    /// a signal or its request cap).
    pub client: Option<String>,
    pub client_end: Option<ClientEnd>,
    pub duration_ms: u64,
    /// The command line that replays this fault plan.
    pub replay: String,
}

/// The closing line every format shares.
pub fn closing_line(verdict: &ClientVerdict) -> String {
    format!("{} passed, {} failed", verdict.passed(), verdict.failed())
}

/// The share of entry requests whose answer the client did not get.
pub fn failed_share(verdict: &ClientVerdict) -> f64 {
    let s = &verdict.stats;
    if s.entry_requests == 0 {
        0.0
    } else {
        s.failed_answers as f64 / s.entry_requests as f64
    }
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

fn describe_end(end: &ClientEnd) -> String {
    match end {
        ClientEnd::Exited { code } => format!("exited {code}"),
        ClientEnd::KilledBySignal => "was killed by a signal".to_owned(),
        ClientEnd::TimedOut { after_ms } => format!("did not exit within {after_ms} ms"),
    }
}

/// The terminal lines (the seed and the replay command included).
pub fn render_terminal(run: &ClientRun, verdict: &ClientVerdict) -> String {
    let mut out = String::new();
    let s = &verdict.stats;
    if let (Some(cmd), Some(end)) = (&run.client, &run.client_end) {
        out.push_str(&format!("client `{cmd}` {}\n", describe_end(end)));
    }
    let faults: Vec<String> = s
        .faults
        .iter()
        .filter(|(name, _)| name.as_str() != "none")
        .map(|(name, n)| format!("{name} {n}"))
        .collect();
    out.push_str(&format!(
        "saw {}, {} in {} ({}); {} failed ({:.0}%){}\n",
        count(s.requests, "request"),
        count(s.entry_requests, "entry request"),
        count(s.sessions, "session"),
        count(s.actions, "user action"),
        count(s.failed_answers, "answer"),
        failed_share(verdict) * 100.0,
        if faults.is_empty() {
            String::new()
        } else {
            format!("; faults: {}", faults.join(", "))
        }
    ));
    for r in &verdict.rules {
        let word = if r.passed { "PASS" } else { "FAIL" };
        out.push_str(&format!("{word} {}  {}\n", r.id, r.title));
        for v in &r.violations {
            out.push_str(&format!("     {v}\n"));
        }
    }
    if let Some(i) = &verdict.indefinite {
        out.push_str(&format!("no verdict: {} (exit 2)\n", i.reason));
    }
    out.push_str(&format!(
        "seed: {} (replay the fault plan: {})\n",
        run.seed, run.replay
    ));
    out.push_str(&closing_line(verdict));
    out.push('\n');
    out
}

/// JUnit XML: one suite, one case per clause, one error case when no
/// verdict was reached. The seed and plan are suite properties.
pub fn render_junit(run: &ClientRun, verdict: &ClientVerdict) -> String {
    let mut report = Report::new(format!("reqkey proxy {}", run.target));
    report.set_time(Duration::from_millis(run.duration_ms));
    let mut suite = TestSuite::new("reqkey.client");
    suite.add_property(("target", run.target.as_str()));
    suite.add_property(("seed", run.seed.to_string().as_str()));
    suite.add_property(("plan", run.plan.as_str()));
    suite.add_property(("replay", run.replay.as_str()));
    if let Some(cmd) = &run.client {
        suite.add_property(("client", cmd.as_str()));
    }
    for r in &verdict.rules {
        let status = if r.passed {
            TestCaseStatus::success()
        } else {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(r.title);
            s.set_description(format!(
                "{}\nseed {} (replay: {})",
                r.violations.join("\n"),
                run.seed,
                run.replay
            ));
            s
        };
        let mut case = TestCase::new(r.id, status);
        case.set_classname("reqkey.client");
        suite.add_test_case(case);
    }
    if let Some(i) = &verdict.indefinite {
        let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
        s.set_message(i.reason.as_str());
        s.set_type("no-verdict");
        let mut case = TestCase::new("reqkey.no-verdict", s);
        case.set_classname("reqkey.client");
        suite.add_test_case(case);
    }
    report.add_test_suite(suite);
    report
        .to_string()
        .unwrap_or_else(|e| format!("<!-- reqkey: cannot serialize JUnit: {e} -->\n"))
}

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    reqkey_version: &'static str,
    #[serde(flatten)]
    run: &'a ClientRun,
    exit_code: u8,
    closing_line: String,
    failed_share: f64,
    #[serde(flatten)]
    verdict: &'a ClientVerdict,
    exchanges: &'a [Exchange],
    snapshots: &'a BTreeMap<String, SessionSnapshot>,
}

/// The `reqkey-client-results/1` document.
pub fn render_json(
    run: &ClientRun,
    verdict: &ClientVerdict,
    exchanges: &[Exchange],
    snapshots: &BTreeMap<String, SessionSnapshot>,
) -> String {
    let doc = Document {
        schema: SCHEMA,
        reqkey_version: env!("CARGO_PKG_VERSION"),
        run,
        exit_code: verdict.exit_code(),
        closing_line: closing_line(verdict),
        failed_share: failed_share(verdict),
        verdict,
        exchanges,
        snapshots,
    };
    serde_json::to_string_pretty(&doc)
        .map(|s| {
            let mut s = crate::report::inert::json_text(&s);
            s.push('\n');
            s
        })
        .unwrap_or_else(|e| format!("{{\"schema\":\"{SCHEMA}\",\"error\":\"{e}\"}}\n"))
}
