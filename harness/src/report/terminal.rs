//! The terminal reporter: one line per scenario, details on failure, and a
//! closing `N passed, N failed` line.
//!
//! A failure names the scenario, its file, the trial, the step, expected
//! against actual, and the seed that reproduces the run.

use std::io::Write;

use crate::event::{Event, Reporter, ScenarioResult, Verdict};

/// Writes human-readable progress to any writer (stdout in the CLI, a
/// buffer in snapshot tests).
pub struct TerminalReporter<W: Write + Send> {
    out: W,
    seed: u64,
    /// Print only failures and the closing line.
    quiet: bool,
}

impl<W: Write + Send> std::fmt::Debug for TerminalReporter<W> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalReporter")
            .field("quiet", &self.quiet)
            .finish()
    }
}

impl<W: Write + Send> TerminalReporter<W> {
    pub fn new(out: W, quiet: bool) -> Self {
        Self {
            out,
            seed: 0,
            quiet,
        }
    }

    pub fn into_inner(self) -> W {
        self.out
    }

    fn scenario(&mut self, r: &ScenarioResult) -> std::io::Result<()> {
        let tag = match r.verdict {
            Verdict::Pass => "PASS ",
            Verdict::Fail => "FAIL ",
            Verdict::Error => "ERROR",
        };
        if r.verdict == Verdict::Pass && self.quiet {
            return Ok(());
        }
        let trials = if r.trials_with_groups > 0 {
            format!(
                "{} trials, {} overlapped",
                r.trials_run, r.trials_overlapped
            )
        } else {
            format!("{} trials", r.trials_run)
        };
        writeln!(self.out, "{tag} {}  ({trials}, {} ms)", r.id, r.duration_ms)?;
        if let Some(f) = &r.failure {
            writeln!(self.out, "      file:  {}", r.file.display())?;
            writeln!(self.out, "      trial: {}", f.trial)?;
            writeln!(self.out, "      step:  {}", f.step)?;
            writeln!(self.out, "      why:   {}", f.message)?;
            if let Some(e) = &f.expected {
                writeln!(self.out, "      expected: {}", e)?;
            }
            if let Some(a) = &f.actual {
                writeln!(self.out, "      actual:   {}", a)?;
            }
            if let Some(d) = &f.detail {
                for line in d.lines() {
                    writeln!(self.out, "      | {line}")?;
                }
            }
            writeln!(
                self.out,
                "      seed:  {0} (reproduce with --seed {0})",
                self.seed
            )?;
        }
        Ok(())
    }
}

impl<W: Write + Send> Reporter for TerminalReporter<W> {
    fn on_event(&mut self, event: &Event) {
        // A reporter that cannot write (a closed pipe) must not stop the run.
        let _ = match event {
            Event::RunStarted {
                target,
                seed,
                scenarios,
            } => {
                self.seed = *seed;
                if self.quiet {
                    Ok(())
                } else {
                    writeln!(
                        self.out,
                        "reqkey: {scenarios} scenarios against {target} (seed {seed})"
                    )
                }
            }
            Event::ScenarioStarted { .. } => Ok(()),
            Event::ScenarioFinished { result, .. } => self.scenario(result),
            Event::RunFinished { summary } => {
                let errored = if summary.errored > 0 {
                    format!("\n{} could not be judged (exit 2)", summary.errored)
                } else {
                    String::new()
                };
                writeln!(
                    self.out,
                    "\n{} passed, {} failed{errored}",
                    summary.passed, summary.failed
                )
            }
        };
        let _ = self.out.flush();
    }
}
