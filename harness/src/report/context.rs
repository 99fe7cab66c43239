//! What every report says besides the events ([`ReportContext`]), and the
//! pieces every format shares: the closing line, verdict labels, UTC dates.

use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use crate::report::verdict::{Outcome, RunVerdict};
use crate::run::event::{Event, RunSummary, Verdict};
use crate::run::fuzz::pass::FuzzPass;
use crate::run::partition::Partition;
use crate::run::select::NotApplicable;
use crate::run::suite::SuiteInfo;
use crate::targets::profile::ProfileInfo;

/// What a report says besides the events.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportContext {
    /// `certify` or `run`: only `certify` makes a certificate.
    pub command: String,
    /// The version of reqkey that judged.
    pub reqkey_version: String,
    /// The `--target` specification as given (or the default).
    pub target: String,
    /// No `--target` was given: `target` is `run`'s built-in default, and
    /// every report says so.
    pub target_defaulted: bool,
    /// The target's `/health` answer (`None` if it did not give one).
    pub health: Option<Value>,
    /// The scenarios that ran.
    pub suite: Option<SuiteInfo>,
    /// What narrowed the run (`--tag race`, `--repeat 3`, ...); always empty
    /// for `certify`.
    pub selection: Vec<String>,
    /// Scenario ids listed in `--expected-failures`.
    pub expected_failures: Vec<String>,
    /// When the run started, UTC, RFC 3339 (`2026-12-02T13:24:20Z`).
    pub date: String,
    /// The profile the run certified (`None` when none was read).
    pub profile: Option<ProfileInfo>,
    /// Scenarios of the suite that do not apply to that profile (not run).
    pub not_applicable: Vec<NotApplicable>,
    /// How many clauses of the spec the suite can fail on (`certify` states
    /// it; `reqkey coverage` prints the matrix).
    pub clause_coverage: Option<ClauseCoverage>,
    /// The shard of the suite this run judged (`--partition k/n`); `None`
    /// for a whole suite, and for the certificate `certify merge` makes.
    pub partition: Option<Partition>,
    /// With `--start`: the `--target` as written, before the chosen ports
    /// were filled in (redacted): what shards of one started target have
    /// in common (`certify merge` compares it, not the ports).
    pub target_template: Option<String>,
    /// With `--start`: each command as written (`{port}` unfilled),
    /// redacted, so that a replay line can start the target again.
    pub start_commands: Vec<String>,
    /// With `--start --db`: each database as written, redacted, so that a
    /// replay puts the harness's proxy on the link again (issue 49).
    pub db_urls: Vec<String>,
    /// How the run reached the target and what it sent, as the flags that
    /// say it again (`--api FILE`, `--cacert PEM`, `-H 'NAME: env:VAR'`,
    /// `--max-rps N`, `--fuzz-cases N`), in order, each a flag or its
    /// value: every replay line carries them (issue 57). Never a secret: a
    /// header given as a value is written `NAME: ***`.
    pub access: Vec<String>,
    /// The certification's bounded fuzz pass (`None`: none ran, as in `run`).
    pub fuzz: Option<FuzzPass>,
    /// The certification run this is (or is a shard of): `certify
    /// --run-id`, or derived (`report::seal::derived_run_id`); `certify
    /// merge` refuses shards of different runs.
    pub run_id: Option<String>,
    /// An idem run: every field of the declared profile with its value
    /// class and the scenarios that applied and judge it
    /// (`cmd/fields.rs`); what the fuzz pass judged is added by the run's
    /// record (`report/record.rs`). `None` when not computed (another
    /// level, or no profile read).
    pub declared_fields: Option<Vec<DeclaredField>>,
}

/// A field of an idem target's declared profile (SPEC 10) as the suite
/// judges it: its value class, and the scenarios that applied and can
/// fail on it under that value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeclaredField {
    pub field: String,
    /// The value class (`sf-string`, `a duration`, `null`, `with caller`).
    pub value: String,
    /// The scenarios that applied and judge the field under that value.
    pub scenarios: Vec<String>,
    /// The value promises nothing a check could fail on (`durable:
    /// false`, `replayHeader: null`).
    pub promises_nothing: bool,
}

impl DeclaredField {
    /// `field = value`, as every report names it.
    pub fn name(&self) -> String {
        format!("{} = {}", self.field, self.value)
    }
}

/// The clause coverage of a suite: `covered` of the `total` clauses of
/// spec/SPEC.md certified at `level` have a scenario that can fail on them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClauseCoverage {
    pub level: String,
    pub covered: usize,
    pub total: usize,
}

impl ReportContext {
    /// A context for `command` against `target`, dated now.
    pub fn new(command: &str, target: &str) -> Self {
        Self::dated(command, target, utc_now())
    }

    /// A context for `command` against `target` dated `date` (a reporter
    /// given no context renders from one without reading the clock).
    pub fn dated(command: &str, target: &str, date: String) -> Self {
        Self {
            command: command.to_owned(),
            reqkey_version: env!("CARGO_PKG_VERSION").to_owned(),
            target: target.to_owned(),
            target_defaulted: false,
            health: None,
            suite: None,
            selection: Vec::new(),
            expected_failures: Vec::new(),
            date,
            profile: None,
            not_applicable: Vec::new(),
            clause_coverage: None,
            partition: None,
            target_template: None,
            start_commands: Vec::new(),
            db_urls: Vec::new(),
            access: Vec::new(),
            fuzz: None,
            run_id: None,
            declared_fields: None,
        }
    }

    /// The target part of a replay command line: `--target T`, and with
    /// `--start` the target as written with every `--start` command, so
    /// that the line starts the target again on fresh ports (issue 50:
    /// it named the run's temporary port and left `--start` out).
    ///
    /// Then the flags of how the target was reached and what was sent
    /// ([`ReportContext::access`]): a map, a CA, a header, a rate, a fuzz
    /// budget the line would otherwise lose (issue 57).
    pub fn replay_target(&self) -> String {
        let mut line = if self.start_commands.is_empty() {
            format!("--target {}", shell_quote(&self.target))
        } else {
            let target = self.target_template.as_deref().unwrap_or(&self.target);
            let mut line = format!("--target {}", shell_quote(target));
            for command in &self.start_commands {
                line.push_str(" --start ");
                line.push_str(&shell_quote(command));
            }
            for db in &self.db_urls {
                line.push_str(" --db ");
                line.push_str(&shell_quote(db));
            }
            line
        };
        for word in &self.access {
            line.push(' ');
            line.push_str(&shell_quote(word));
        }
        line
    }

    /// The target as a report names it: the spec, and when it was not
    /// asked for, that it is the built-in default.
    pub fn target_label(&self) -> String {
        if self.target_defaulted {
            format!(
                "{} (the built-in default: no --target was given)",
                self.target
            )
        } else {
            self.target.clone()
        }
    }

    /// The one verdict of `summary` with this context's fuzz pass: what
    /// every report states and the command exits with.
    pub fn verdict(&self, summary: &RunSummary) -> RunVerdict {
        RunVerdict::of(summary, self.fuzz.as_ref())
    }

    /// Is this a certification (the whole suite, nothing narrowed)?
    pub fn is_certification(&self) -> bool {
        self.command == "certify" && self.selection.is_empty()
    }
}

/// The closing line every format ends with: `N passed, N failed`, where
/// "failed" is every scenario that proved a violation (failed, or passed
/// while listed as an expected failure); then the scenarios that could
/// not be judged, as what they are (`, N errors`, `, N indefinite`: issue
/// 54, a run whose every scenario ended in an error closed "0 passed, 22
/// failed"); then, when they bear on the verdict, the fuzz pass, a run
/// that reached no verdict and a signal, so that the last line alone never
/// reads green for a red run, nor red for one that proved nothing.
pub fn closing_line(summary: &RunSummary, verdict: &RunVerdict) -> String {
    let mut line = format!(
        "{} passed, {} failed",
        summary.passed,
        summary.failed + summary.unexpected_passes
    );
    match summary.errored {
        0 => {}
        1 => line.push_str(", 1 error"),
        n => line.push_str(&format!(", {n} errors")),
    }
    if summary.indefinite_scenarios > 0 {
        line.push_str(&format!(", {} indefinite", summary.indefinite_scenarios));
    }
    if verdict.fuzz_failed {
        line.push_str("; the fuzz pass failed");
    } else if verdict.fuzz_unjudged {
        line.push_str("; the fuzz pass could not judge");
    }
    if verdict.interrupted {
        line.push_str("; interrupted");
    } else if let Some(i) = &summary.indefinite {
        line.push_str(&format!("; no verdict ({})", i.reason));
    }
    line
}

/// The lines that explain the closing count, printed just before it;
/// `violations` are the failed fuzz pass's, each charged to its clause.
pub fn closing_notes(
    summary: &RunSummary,
    verdict: &RunVerdict,
    violations: &[crate::run::fuzz::pass::FuzzViolation],
) -> Vec<String> {
    let mut notes = Vec::new();
    // A proven violation outranks what could not be judged (exit 1 either
    // way, or 130 after a signal); the notes still list both.
    let exit = match (verdict.exit_code, verdict.outcome) {
        (1, _) => "a violation was proven all the same: exit 1".to_owned(),
        (code, Outcome::Fail) => format!("a violation was proven all the same; exit {code}"),
        (code, _) => format!("exit {code}"),
    };
    if let Some(i) = &summary.indefinite {
        notes.push(format!(
            "no verdict for the whole run ({}): {} ({exit})",
            i.reason,
            crate::report::inert::code_span(&i.message)
        ));
    }
    if verdict.fuzz_failed && violations.is_empty() {
        notes.push(
            "the fuzz pass found a failing program: the target does not conform (exit 1 unless interrupted)"
                .to_owned(),
        );
    } else if verdict.fuzz_failed {
        let mut clauses: Vec<&str> = violations.iter().map(|v| v.clause.as_str()).collect();
        clauses.dedup();
        notes.push(format!(
            "the fuzz pass proved {} violation{} ({}): the target does not conform (exit 1 unless interrupted)",
            violations.len(),
            if violations.len() == 1 { "" } else { "s" },
            clauses.join(", ")
        ));
    } else if verdict.fuzz_unjudged {
        notes.push(format!("the fuzz pass could not judge the target ({exit})"));
    }
    if summary.errored > 0 {
        notes.push(format!(
            "{} could not be judged (harness error; {exit})",
            summary.errored
        ));
    }
    if summary.indefinite_scenarios > 0 {
        notes.push(format!(
            "{} indefinite: a race scenario whose trials never overlapped (not a pass; {exit})",
            summary.indefinite_scenarios
        ));
    }
    if summary.unexpected_passes > 0 {
        notes.push(format!(
            "{} passed although listed in --expected-failures: take them off the list (exit 1)",
            summary.unexpected_passes
        ));
    }
    if summary.expected_failures > 0 {
        notes.push(format!(
            "{} failed as listed in --expected-failures (not counted as failed)",
            summary.expected_failures
        ));
    }
    notes
}

/// The target's warnings, one line each (`warning[nagle_stall]: ...`):
/// printed on stderr by the terminal reporter and written into every
/// report; they never change a verdict.
pub fn warning_lines(summary: &RunSummary) -> Vec<String> {
    summary.warnings.iter().map(|w| w.line()).collect()
}

/// How a verdict reads in a table.
pub fn verdict_label(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "pass",
        Verdict::Fail => "FAIL",
        Verdict::Error => "ERROR",
        Verdict::Indefinite => "INDEFINITE",
        Verdict::ExpectedFail => "expected failure",
        Verdict::UnexpectedPass => "UNEXPECTED PASS",
    }
}

/// The current time, UTC, as RFC 3339 with seconds (`YYYY-MM-DDTHH:MM:SSZ`).
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as RFC 3339 UTC. Days to a civil
/// date by Howard Hinnant's `civil_from_days` (proleptic Gregorian), so no
/// date crate is needed for one line of a report.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (h, m, s) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}Z")
}

/// The shared shape of the file reporters: collect the summary from the
/// event stream, render it into the writer when the run finishes, and hand
/// back any write error from [`Reporter::finish`].
pub(crate) struct Rendered<W: Write + Send> {
    pub(crate) out: W,
    pub(crate) result: std::io::Result<()>,
}

impl<W: Write + Send> Rendered<W> {
    pub(crate) fn new(out: W) -> Self {
        Self {
            out,
            result: Ok(()),
        }
    }

    pub(crate) fn on_event(&mut self, event: &Event, render: impl FnOnce(&RunSummary) -> String) {
        if let Event::RunFinished { summary } = event {
            let text = render(summary);
            self.result = self
                .out
                .write_all(text.as_bytes())
                .and_then(|()| self.out.flush());
        }
    }

    pub(crate) fn finish(&mut self) -> std::io::Result<()> {
        std::mem::replace(&mut self.result, Ok(()))
    }
}

/// How a replay line names the scenario of `result`: `--scenario ID` when
/// it came from the suite built into this binary (its file path exists
/// only inside the binary), else its file, as given.
pub fn replay_path(ctx: &ReportContext, result: &crate::run::event::ScenarioResult) -> String {
    if ctx.suite.as_ref().is_some_and(|s| s.embedded) {
        format!("--scenario {}", result.id)
    } else {
        result.file.display().to_string()
    }
}

/// `arg` as one POSIX shell word: as it is when it holds only characters
/// no shell treats specially, else single-quoted.
pub fn shell_quote(arg: &str) -> String {
    let plain = !arg.is_empty()
        && arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./:=@,+%".contains(c));
    if plain {
        arg.to_owned()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_dates_format_as_rfc3339() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_796_217_860), "2026-12-02T13:24:20Z");
        assert_eq!(format_utc(4_107_542_399), "2100-02-28T23:59:59Z");
    }

    /// Issue 50: after a `--start` run the replay line named the run's
    /// temporary port and left `--start` out, so it could not be run.
    #[test]
    fn a_replay_after_start_starts_the_target_again_on_fresh_ports() {
        let mut ctx = ReportContext::new("certify", "store+http://127.0.0.1:41234");
        assert_eq!(ctx.replay_target(), "--target store+http://127.0.0.1:41234");
        ctx.target_template = Some("store+http://127.0.0.1:{port}".into());
        ctx.start_commands = vec!["node cli.js --store 'pg' --port {port}".into()];
        assert_eq!(
            ctx.replay_target(),
            "--target 'store+http://127.0.0.1:{port}' \
             --start 'node cli.js --store '\\''pg'\\'' --port {port}'"
        );
    }

    /// Issue 57: the replay line dropped `--api`, `--cacert` and `-H`.
    #[test]
    fn a_replay_carries_how_the_target_was_reached_and_no_secret() {
        let mut ctx = ReportContext::new("certify", "idem+https://localhost:8443");
        ctx.access = [
            "--api",
            "docs/examples/orders_api.map.yaml",
            "--cacert",
            "ca.pem",
            "-H",
            "Authorization: env:API_TOKEN",
            "-H",
            "X-Tenant: ***",
            "--max-rps",
            "20",
        ]
        .map(String::from)
        .to_vec();
        assert_eq!(
            ctx.replay_target(),
            "--target idem+https://localhost:8443 --api docs/examples/orders_api.map.yaml \
             --cacert ca.pem -H 'Authorization: env:API_TOKEN' -H 'X-Tenant: ***' --max-rps 20"
        );
    }
}
