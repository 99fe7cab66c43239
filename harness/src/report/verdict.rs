//! The one verdict of a run, computed by one function from everything that
//! can turn it red, and read by every reporter and by the exit code.
//!
//! Why one place: the suite's scenarios, the certification's fuzz pass, the
//! shards `certify merge` unites and a signal mid-run all bear on the
//! verdict. When each format computed its own from the suite's counts, a
//! failing fuzz pass exited 1 while `certificate.md` said CONFORMS,
//! `results.json` had `exit_code` 0 and JUnit no failure, and an
//! interrupted run exited 130 while every file said 2 and forgot the
//! failures it had proven (issue 51). Now every reporter and every
//! command's exit path call [`RunVerdict::of`] (through
//! [`crate::report::ReportContext::verdict`]) on the same summary and
//! context, and nothing else decides.
//!
//! Precedence (SPEC 8.1 `[[cert.judge.violation-outranks-indefinite]]`): a
//! proven violation (a failed scenario, a failing fuzz program) outranks
//! what could not be judged; a signal makes the exit code 130 whatever
//! was proven, and the outcome keeps the violation if one was proven.

use crate::run::event::RunSummary;
use crate::run::fuzz::pass::FuzzPass;

/// The typed reason of a run ended by SIGTERM or SIGINT.
pub const INTERRUPTED: &str = "interrupted";
/// The exit code of a run ended by a signal (128 + SIGINT).
pub const EXIT_INTERRUPTED: u8 = 130;

/// What a run showed, whatever its exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Every scenario passed (or failed as expected), and so did the fuzz
    /// pass when one ran.
    Pass,
    /// A violation was proven (or an expected failure passed).
    Fail,
    /// Nothing was proven and something could not be judged.
    NotJudged,
    /// A signal ended the run before anything was proven.
    Interrupted,
}

impl Outcome {
    /// The word of HTML's `data-verdict` and JSON's `verdict`.
    pub fn class(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Fail => "fail",
            Outcome::NotJudged => "error",
            Outcome::Interrupted => "interrupted",
        }
    }
}

/// The verdict of a run and the exit code every artifact states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunVerdict {
    pub outcome: Outcome,
    /// 0, 1, 2, or 130 after a signal.
    pub exit_code: u8,
    /// A violation was proven and something else could not be judged
    /// (reports say both).
    pub also_unjudged: bool,
    /// The fuzz pass found a failing program.
    pub fuzz_failed: bool,
    /// The fuzz pass could not judge the target.
    pub fuzz_unjudged: bool,
    /// A signal ended the run.
    pub interrupted: bool,
}

impl RunVerdict {
    /// The verdict of `summary` (the suite, or the scenarios that ran
    /// before a signal, or the merged shards) and `fuzz` (the fuzz pass,
    /// when one ran).
    pub fn of(summary: &RunSummary, fuzz: Option<&FuzzPass>) -> RunVerdict {
        let fuzz_failed = fuzz.is_some_and(|f| f.exit_code() == 1);
        let fuzz_unjudged = fuzz.is_some_and(|f| f.exit_code() == 2);
        let interrupted = summary
            .indefinite
            .as_ref()
            .is_some_and(|i| i.reason == INTERRUPTED);
        let proven = summary.failed > 0 || summary.unexpected_passes > 0 || fuzz_failed;
        let unjudged = summary.errored > 0
            || summary.indefinite_scenarios > 0
            || summary.indefinite.is_some()
            || fuzz_unjudged;
        let outcome = if proven {
            Outcome::Fail
        } else if interrupted {
            Outcome::Interrupted
        } else if unjudged {
            Outcome::NotJudged
        } else {
            Outcome::Pass
        };
        let exit_code = match outcome {
            _ if interrupted => EXIT_INTERRUPTED,
            Outcome::Pass => 0,
            Outcome::Fail => 1,
            Outcome::NotJudged | Outcome::Interrupted => 2,
        };
        RunVerdict {
            outcome,
            exit_code,
            also_unjudged: proven && unjudged,
            fuzz_failed,
            fuzz_unjudged,
            interrupted,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::event::Indefinite;

    fn summary(failed: usize, errored: usize, reason: Option<&'static str>) -> RunSummary {
        let mut s = RunSummary::not_judged(
            "t".into(),
            1,
            Indefinite {
                reason: "stopped_early",
                message: "m".into(),
            },
        );
        s.indefinite = reason.map(|reason| Indefinite {
            reason,
            message: "m".into(),
        });
        s.failed = failed;
        s.errored = errored;
        s
    }

    fn fuzz(verdict: &'static str) -> FuzzPass {
        FuzzPass {
            verdict,
            ..FuzzPass::skipped(reqkey_model::vocab::Level::Store, 1)
        }
    }

    #[test]
    fn the_fuzz_pass_and_a_signal_bear_on_every_verdict() {
        let table: [(RunSummary, Option<FuzzPass>, Outcome, u8); 12] = [
            (summary(0, 0, None), None, Outcome::Pass, 0),
            (summary(0, 0, None), Some(fuzz("passed")), Outcome::Pass, 0),
            (summary(0, 0, None), Some(fuzz("skipped")), Outcome::Pass, 0),
            (summary(0, 0, None), Some(fuzz("failed")), Outcome::Fail, 1),
            (
                summary(0, 0, None),
                Some(fuzz("error")),
                Outcome::NotJudged,
                2,
            ),
            (summary(0, 1, None), Some(fuzz("failed")), Outcome::Fail, 1),
            (summary(1, 0, None), Some(fuzz("error")), Outcome::Fail, 1),
            (summary(0, 1, None), None, Outcome::NotJudged, 2),
            (
                summary(0, 0, Some(INTERRUPTED)),
                None,
                Outcome::Interrupted,
                130,
            ),
            (summary(2, 0, Some(INTERRUPTED)), None, Outcome::Fail, 130),
            (
                summary(0, 0, Some(INTERRUPTED)),
                Some(fuzz("failed")),
                Outcome::Fail,
                130,
            ),
            (
                summary(0, 0, Some("stopped_early")),
                None,
                Outcome::NotJudged,
                2,
            ),
        ];
        for (s, f, outcome, code) in table {
            let v = RunVerdict::of(&s, f.as_ref());
            assert_eq!((v.outcome, v.exit_code), (outcome, code), "{s:?} {f:?}");
        }
        let v = RunVerdict::of(&summary(0, 1, None), Some(&fuzz("failed")));
        assert!(v.also_unjudged && v.fuzz_failed);
    }
}
