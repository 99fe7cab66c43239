//! `reqkey bench model`: the model checker on the worlds the issue names
//! (the default, `--retries 2`, `--twins 1`) and the default without its
//! reductions, each in this process one after the other, with the figures
//! a model checker is judged by: unique and total states, depth, wall
//! clock, CPU time (user + system, all threads), unique states per second
//! of wall clock and per CPU second, and peak resident memory.
//!
//! Why CPU time beside the wall clock: the development machine is shared,
//! and under load the wall clock measures the neighbours. CPU seconds over
//! the thread count is what an idle machine would take, give or take the
//! threads' overlap.

use std::fmt;
use std::time::Duration;

use reqkey_model::check::{check, CheckOptions};
use reqkey_model::system::Config;

/// One world to check and how it is named on the command line.
#[derive(Debug, Clone)]
pub struct ModelCase {
    /// The `reqkey model check` arguments that give the same world.
    pub args: &'static str,
    pub config: Config,
    /// The wall-clock goal on two cores, when the issue sets one.
    pub goal_s: Option<f64>,
}

/// The worlds measured: `--quick` only the default one (seconds, what CI
/// runs); otherwise also the default unreduced (the "before" row) and the
/// issue's two larger worlds.
pub fn model_cases(quick: bool) -> Vec<ModelCase> {
    let default = ModelCase {
        args: "(default)",
        config: Config::default(),
        goal_s: None,
    };
    if quick {
        return vec![default];
    }
    vec![
        default,
        ModelCase {
            args: "--no-reduction",
            config: Config {
                reduction: false,
                ..Config::default()
            },
            goal_s: None,
        },
        ModelCase {
            args: "--retries 2",
            config: Config {
                retries: 2,
                ..Config::default()
            },
            goal_s: Some(20.0),
        },
        ModelCase {
            args: "--twins 1",
            config: Config {
                twins: 1,
                ..Config::default()
            },
            goal_s: Some(60.0),
        },
    ]
}

/// What one check measured.
#[derive(Debug, Clone)]
pub struct ModelFigures {
    pub args: &'static str,
    pub threads: usize,
    pub unique_states: usize,
    pub total_states: usize,
    pub max_depth: usize,
    pub wall: Duration,
    /// User + system time of the whole process during the check.
    pub cpu: Option<Duration>,
    /// The process's peak resident memory during the check (its peak is
    /// reset before the check where Linux allows it, else since start).
    pub peak_rss_mib: Option<f64>,
    pub peak_reset: bool,
    /// No property violated and every `sometimes` property reached.
    pub passed: bool,
    pub goal_s: Option<f64>,
}

impl ModelFigures {
    pub fn unique_per_wall_second(&self) -> f64 {
        per_second(self.unique_states, self.wall)
    }

    pub fn unique_per_cpu_second(&self) -> Option<f64> {
        self.cpu.map(|c| per_second(self.unique_states, c))
    }
}

fn per_second(n: usize, d: Duration) -> f64 {
    let s = d.as_secs_f64();
    if s > 0.0 {
        n as f64 / s
    } else {
        n as f64
    }
}

impl fmt::Display for ModelFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpu = self
            .cpu
            .map_or("n/a".to_owned(), |c| format!("{:.2} s", c.as_secs_f64()));
        let per_cpu = self
            .unique_per_cpu_second()
            .map_or("n/a".to_owned(), |r| format!("{r:.0}"));
        let rss = match (self.peak_rss_mib, self.peak_reset) {
            (Some(m), true) => format!("{m:.0} MiB"),
            (Some(m), false) => format!("{m:.0} MiB (since the process started)"),
            (None, _) => "n/a".to_owned(),
        };
        let goal = match self.goal_s {
            Some(g) if self.wall.as_secs_f64() <= g => format!(", goal <= {g:.0} s wall: met"),
            Some(g) => format!(", goal <= {g:.0} s wall: MISSED"),
            None => String::new(),
        };
        write!(
            f,
            "model check {}: {} unique states, {} total, depth {}, {} threads: {:.2} s wall, {cpu} CPU, \
             {:.0} unique states/s (wall), {per_cpu} per CPU second, peak RSS {rss}, {}{goal}",
            self.args,
            self.unique_states,
            self.total_states,
            self.max_depth,
            self.threads,
            self.wall.as_secs_f64(),
            self.unique_per_wall_second(),
            if self.passed { "PASS" } else { "FAIL" },
        )
    }
}

/// This process's user + system time so far (all threads, ended ones too).
fn process_cpu() -> Option<Duration> {
    use nix::sys::resource::{getrusage, UsageWho};
    let usage = getrusage(UsageWho::RUSAGE_SELF).ok()?;
    let micros = |t: nix::sys::time::TimeVal| -> Option<u64> {
        Some(u64::try_from(t.tv_sec()).ok()? * 1_000_000 + u64::try_from(t.tv_usec()).ok()?)
    };
    Some(Duration::from_micros(
        micros(usage.user_time())? + micros(usage.system_time())?,
    ))
}

/// Resets the process's peak resident set (Linux: `5` into
/// `/proc/self/clear_refs`); false where that is not possible.
fn reset_peak_rss() -> bool {
    std::fs::write("/proc/self/clear_refs", "5").is_ok()
}

/// `VmHWM` of this process in MiB (Linux); `None` elsewhere.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// Checks one world exhaustively with `threads` threads (symmetry on, as
/// `reqkey model check` does) and measures it.
pub fn model_benchmark(case: &ModelCase, threads: usize) -> ModelFigures {
    let peak_reset = reset_peak_rss();
    let cpu_before = process_cpu();
    let s = check(
        case.config.clone(),
        CheckOptions {
            threads: threads.max(1),
            ..CheckOptions::default()
        },
    );
    let cpu = match (cpu_before, process_cpu()) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    ModelFigures {
        args: case.args,
        threads: threads.max(1),
        unique_states: s.unique_states,
        total_states: s.total_states,
        max_depth: s.max_depth,
        wall: s.elapsed,
        cpu,
        peak_rss_mib: peak_rss_mib(),
        peak_reset,
        passed: s.passed(),
        goal_s: case.goal_s,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_quick_benchmark_checks_the_default_world_and_measures_it() {
        let cases = model_cases(true);
        assert_eq!(cases.len(), 1);
        let f = model_benchmark(&cases[0], 1);
        assert!(f.passed, "{f}");
        assert!(f.unique_states > 0 && f.total_states >= f.unique_states);
        let line = f.to_string();
        assert!(
            line.contains("unique states") && line.contains("PASS"),
            "{line}"
        );
    }

    #[test]
    fn the_full_benchmark_has_the_issue_worlds_and_the_unreduced_row() {
        let args: Vec<_> = model_cases(false).iter().map(|c| c.args).collect();
        assert_eq!(
            args,
            ["(default)", "--no-reduction", "--retries 2", "--twins 1"]
        );
    }
}
