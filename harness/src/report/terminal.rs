//! The terminal reporter: one line per scenario, details on failure, and a
//! closing `N passed, N failed` line.
//!
//! A failure names the scenario, its file, the trial, the step, expected
//! against actual, and the seed that reproduces the run.
//!
//! On an interactive terminal a progress bar (indicatif) shows which
//! scenario is running and how many are left: a 50-trial race scenario
//! takes seconds, and a silent terminal looks hung. The bar is only for
//! people: it is off when stdout is not a TTY (CI logs, pipes), when
//! `NO_COLOR` is set, and with `--quiet` ([`progress_wanted`]). The lines
//! themselves never depend on it, so snapshot tests see exactly what a CI
//! log sees.

use std::io::{IsTerminal, Write};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::report::context::{warning_lines, ReportContext};
use crate::report::inert::terminal;
use crate::report::record::{self, RunRecord};
use crate::run::event::{Event, Reporter, ScenarioResult, Verdict};

/// Should the CLI draw a progress bar? Only for a person watching stdout.
pub fn progress_wanted(quiet: bool) -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !quiet && !no_color && std::io::stdout().is_terminal()
}

/// Writes human-readable progress to any writer (stdout in the CLI, a
/// buffer in snapshot tests).
pub struct TerminalReporter<W: Write + Send> {
    out: W,
    seed: u64,
    /// Print only failures and the closing line.
    quiet: bool,
    /// Draw a progress bar on stdout (the CLI decides, see [`progress_wanted`]).
    progress: bool,
    bar: Option<ProgressBar>,
    /// What the run's record is made from besides the events (the fuzz
    /// pass, the declared fields, the profile): `None` renders the suite
    /// alone.
    ctx: Option<ReportContext>,
}

impl<W: Write + Send> std::fmt::Debug for TerminalReporter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalReporter")
            .field("quiet", &self.quiet)
            .field("progress", &self.progress)
            .finish()
    }
}

impl<W: Write + Send> TerminalReporter<W> {
    pub fn new(out: W, quiet: bool) -> Self {
        Self {
            out,
            seed: 0,
            quiet,
            progress: false,
            bar: None,
            ctx: None,
        }
    }

    /// The run's context (its fuzz pass, profile and declared fields): the
    /// closing lines state the run's one record ([`crate::report::record`]).
    pub fn with_context(mut self, ctx: ReportContext) -> Self {
        self.ctx = Some(ctx);
        self
    }

    /// Also draw a progress bar on stdout while the run lasts.
    pub fn with_progress(mut self, progress: bool) -> Self {
        self.progress = progress;
        self
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    /// Writes with the bar (if any) lifted, so lines and bar never mix.
    fn write_lines(&mut self, text: &str) {
        // A reporter that cannot write (a closed pipe) must not stop the run.
        let out = &mut self.out;
        let mut write = || {
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
        };
        match &self.bar {
            Some(bar) => bar.suspend(write),
            None => write(),
        }
    }

    fn scenario(&self, r: &ScenarioResult) -> String {
        let tag = match r.verdict {
            Verdict::Pass => "PASS ",
            Verdict::Fail => "FAIL ",
            Verdict::Error => "ERROR",
            Verdict::Indefinite => "INDEF",
            Verdict::ExpectedFail => "XFAIL",
            Verdict::UnexpectedPass => "XPASS",
        };
        let mut text = String::new();
        if self.quiet && r.verdict.is_green() {
            return text;
        }
        let trials = if r.trials_with_groups > 0 {
            let spread = r
                .max_send_spread_us
                .map_or(String::new(), |us| format!(", sends within {us} µs"));
            format!(
                "{} trials, {} overlapped{spread}",
                r.trials_run, r.trials_overlapped
            )
        } else {
            format!("{} trials", r.trials_run)
        };
        text.push_str(&format!(
            "{tag} {}  ({trials}, {} ms)\n",
            r.id, r.duration_ms
        ));
        if let Some(note) = &r.note {
            text.push_str(&format!("      {note}\n"));
        }
        if r.verdict == Verdict::UnexpectedPass {
            text.push_str(&format!("      file:  {}\n", r.file.display()));
            text.push_str(
                "      why:   passed, but listed in --expected-failures: take it off the list\n",
            );
        }
        if let Some(f) = &r.failure {
            if r.verdict == Verdict::ExpectedFail {
                text.push_str(&format!("      as expected: {}\n", terminal(&f.message)));
                return text;
            }
            text.push_str(&format!("      file:  {}\n", r.file.display()));
            let c = crate::report::clauses::of_scenario(r);
            if !c.failed.is_empty() {
                text.push_str(&format!(
                    "      breaks: {} (spec/SPEC.md; `reqkey explain CLAUSE`)\n",
                    c.failed.join(", ")
                ));
            }
            if !c.passed.is_empty() {
                text.push_str(&format!("      passes: {}\n", c.passed.join(", ")));
            }
            for (clause, why) in &c.not_judged {
                text.push_str(&format!("      not judged: {clause} ({})\n", terminal(why)));
            }
            // 1-based, as in every report (issue 41).
            text.push_str(&format!("      trial: {}\n", f.trial + 1));
            text.push_str(&format!("      step:  {}\n", terminal(&f.step)));
            text.push_str(&format!("      why:   {}\n", terminal(&f.message)));
            if let Some(e) = &f.expected {
                text.push_str(&format!("      expected: {}\n", terminal(&e.to_string())));
            }
            if let Some(a) = &f.actual {
                text.push_str(&format!("      actual:   {}\n", terminal(&a.to_string())));
            }
            if let Some(d) = &f.detail {
                for line in d.lines() {
                    text.push_str(&format!("      | {}\n", terminal(line)));
                }
            }
            for later in &r.later_failures {
                text.push_str(&format!(
                    "      also:  {} breaks {}: {}\n",
                    terminal(&later.step),
                    later.clauses.join(", "),
                    terminal(&later.message)
                ));
            }
            text.push_str(&format!(
                "      seed:  {0} (reproduce with --seed {0})\n",
                self.seed
            ));
        }
        text
    }

    fn start_bar(&mut self, scenarios: usize) {
        if !self.progress {
            return;
        }
        let bar = ProgressBar::with_draw_target(
            Some(scenarios as u64),
            ProgressDrawTarget::stdout_with_hz(10),
        );
        if let Ok(style) =
            ProgressStyle::with_template("{spinner} [{elapsed}] {bar:30} {pos}/{len} {msg}")
        {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        self.bar = Some(bar);
    }
}

/// The run's record as lines: the clause count, each FAIL clause with its
/// evidence, every violation of the fuzz pass with its reproduction's
/// fate, the declared fields nothing judged (the crash claim is printed by
/// the command after the run, from the same record). Quiet runs keep what
/// is not green.
fn record_lines(rec: &RunRecord<'_>, quiet: bool) -> String {
    use crate::run::event::ClauseStanding;
    let mut text = String::new();
    let failed = rec.clauses_with(ClauseStanding::Fail);
    if !rec.clauses.is_empty() && (!quiet || !failed.is_empty()) {
        text.push_str(&format!(
            "clauses: {} FAIL, {} pass, {} not judged\n",
            failed.len(),
            rec.clauses_with(ClauseStanding::Pass).len(),
            rec.clauses_with(ClauseStanding::NotJudged).len()
        ));
    }
    for row in rec
        .clauses
        .iter()
        .filter(|r| r.standing == ClauseStanding::Fail)
    {
        let mut ids: Vec<&str> = Vec::new();
        for f in &row.findings {
            for (id, _) in &f.scenarios {
                if !ids.contains(id) {
                    ids.push(id);
                }
            }
        }
        let mut evidence = Vec::new();
        if !ids.is_empty() {
            evidence.push(format!("in {}", ids.join(", ")));
        }
        if !row.fuzz.is_empty() {
            evidence.push(format!("the fuzz pass: {} violation(s)", row.fuzz.len()));
        }
        text.push_str(&format!(
            "  FAIL {}  ({})\n",
            row.clause,
            terminal(&evidence.join("; "))
        ));
    }
    for why in &rec.unclaused {
        text.push_str(&format!("  also red beyond its clauses: {why}\n"));
    }
    if !rec.violations.is_empty() {
        text.push_str("fuzz violations:\n");
        for v in rec.violations {
            text.push_str(&format!("  {}: {}\n", v.clause, terminal(&v.message)));
            let with = record::blamed_with(v);
            if !with.is_empty() {
                text.push_str(&format!(
                    "      blamed with {} (no single clause's relaxation explains the answers)\n",
                    with.join(", ")
                ));
            }
            text.push_str(&format!("      program: {}\n", terminal(&v.program)));
            text.push_str(&format!("      {}\n", record::reproduction(v, terminal)));
        }
    }
    let unjudged = rec.unjudged_fields();
    if !unjudged.is_empty() {
        text.push_str(&format!(
            "declared fields nothing judged: {}\n",
            terminal(&unjudged.join(", "))
        ));
    }
    for (f, ms) in rec.part_judged_fields() {
        text.push_str(&format!(
            "declared field judged only part way: {} (by the fuzz pass, up to {ms} ms)\n",
            terminal(&f)
        ));
    }
    text
}

impl<W: Write + Send> Reporter for TerminalReporter<W> {
    fn on_event(&mut self, event: &Event) {
        match event {
            Event::RunStarted {
                target,
                seed,
                scenarios,
            } => {
                self.seed = *seed;
                if !self.quiet {
                    self.write_lines(&format!(
                        "reqkey: {scenarios} scenarios against {target} (seed {seed})\n"
                    ));
                }
                self.start_bar(*scenarios);
            }
            Event::ScenarioStarted { id, .. } => {
                if let Some(bar) = &self.bar {
                    bar.set_message(id.clone());
                }
            }
            Event::ScenarioFinished { result, .. } => {
                let text = self.scenario(result);
                if !text.is_empty() {
                    self.write_lines(&text);
                }
                if let Some(bar) = &self.bar {
                    bar.inc(1);
                }
            }
            Event::RunFinished { summary } => {
                if let Some(bar) = self.bar.take() {
                    bar.finish_and_clear();
                }
                // On stderr: a warning about the target is not a result.
                for line in warning_lines(summary) {
                    eprintln!("reqkey: {line}");
                }
                let fallback;
                let ctx = match &self.ctx {
                    Some(ctx) => ctx,
                    None => {
                        fallback = ReportContext::dated("run", &summary.target, String::new());
                        &fallback
                    }
                };
                let rec = record::of(ctx, summary);
                let mut text = String::from("\n");
                text.push_str(&record_lines(&rec, self.quiet));
                for note in &rec.closing_notes {
                    text.push_str(&terminal(note));
                    text.push('\n');
                }
                text.push_str(&rec.closing_line);
                text.push('\n');
                self.write_lines(&text);
            }
        }
    }
}
