//! Benchmarks of the race machinery, as library functions so that both
//! `reqkey bench` and `cargo bench` print the same figures.
//!
//! - [`checker_benchmark`]: records a real concurrent history (8 clients,
//!   4 sessions, 1,000 operations against the memory store by default) and
//!   times the linearizability check of it. Target: under 1 s.
//! - [`detection_benchmark`]: runs the race scenarios many independent
//!   times against a racy store and reports how often, and how fast, they
//!   catch it. Target: at least 99 of 100 runs at default settings.

use std::sync::Arc;
use std::time::Instant;

use crate::lin::{self, CheckOptions, Verdict};
use crate::record::{random_history, Workload};
use crate::target::{open_target, TargetError, TargetOptions};

/// What the checker benchmark measured.
#[derive(Debug, Clone)]
pub struct CheckerFigures {
    pub target: String,
    pub ops: usize,
    pub clients: usize,
    pub sessions: usize,
    pub seed: u64,
    /// Pairs of operations whose intervals overlap (how concurrent it was).
    pub overlapping_pairs: usize,
    pub record_ms: f64,
    /// The verdict alone.
    pub check_ms: f64,
    /// Verdict plus shrinking the counterexample (non-linearizable only).
    pub minimize_ms: Option<f64>,
    pub steps: u64,
    pub verdict: String,
}

impl std::fmt::Display for CheckerFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "linearizability check: {} ops, {} clients, {} sessions ({} overlapping pairs) on {} \
             checked in {:.1} ms ({} steps): {}{} [recorded in {:.1} ms, seed {}]",
            self.ops,
            self.clients,
            self.sessions,
            self.overlapping_pairs,
            self.target,
            self.check_ms,
            self.steps,
            self.verdict,
            self.minimize_ms.map_or(String::new(), |m| format!(
                "; with the counterexample shrunk: {m:.1} ms"
            )),
            self.record_ms,
            self.seed
        )
    }
}

/// Records a concurrent history on `target_spec` and times its check.
pub async fn checker_benchmark(
    target_spec: &str,
    workload: Workload,
) -> Result<CheckerFigures, TargetError> {
    let target = open_target(target_spec, TargetOptions::default()).await?;
    let started = Instant::now();
    let history = random_history(Arc::clone(&target), &workload).await?;
    let record_ms = started.elapsed().as_secs_f64() * 1e3;

    // The verdict alone, then again with the counterexample shrunk.
    let started = Instant::now();
    let report = lin::check_with(
        &history,
        CheckOptions {
            minimize: false,
            ..CheckOptions::default()
        },
    );
    let check_ms = started.elapsed().as_secs_f64() * 1e3;
    let (report, minimize_ms) = if report.verdict.is_linearizable() {
        (report, None)
    } else {
        let started = Instant::now();
        let report = lin::check_with(&history, CheckOptions::default());
        (report, Some(started.elapsed().as_secs_f64() * 1e3))
    };
    let verdict = match &report.verdict {
        Verdict::Linearizable => "linearizable".to_owned(),
        Verdict::NotLinearizable(c) => format!(
            "NOT linearizable (smallest subset found: {} of {} ops in session {})",
            c.minimal.len(),
            c.partition.len(),
            c.session.as_deref().unwrap_or("-")
        ),
        Verdict::Unknown { reason } => format!("unknown ({reason})"),
    };
    Ok(CheckerFigures {
        target: target.describe(),
        ops: history.len(),
        clients: workload.clients,
        sessions: workload.sessions,
        seed: workload.seed,
        overlapping_pairs: overlapping_pairs(&history),
        record_ms,
        check_ms,
        minimize_ms,
        steps: report.steps,
        verdict,
    })
}

/// Counts pairs of operations whose [invoke, return] intervals intersect.
pub fn overlapping_pairs(history: &[lin::Operation]) -> usize {
    let mut spans: Vec<(u64, u64)> = history
        .iter()
        .map(|o| {
            (
                o.invoke_ns,
                if o.answer.is_some() {
                    o.return_ns
                } else {
                    u64::MAX
                },
            )
        })
        .collect();
    spans.sort_unstable();
    let mut count = 0;
    for (i, &(_, end)) in spans.iter().enumerate() {
        count += spans[i + 1..]
            .iter()
            .take_while(|&&(start, _)| start <= end)
            .count();
    }
    count
}

/// The default workload of the checker benchmark.
pub fn default_workload(seed: u64) -> Workload {
    Workload {
        clients: 8,
        sessions: 4,
        ops_total: 1_000,
        seed,
        namespace: format!("bench-{seed}"),
    }
}

/// What the detection benchmark measured.
#[derive(Debug, Clone)]
pub struct DetectionFigures {
    pub target: String,
    pub runs: u32,
    pub detected: u32,
    /// Median, over the detecting runs, of the time from the start of the
    /// run to the end of its first failing scenario.
    pub median_ms_to_first_failure: Option<f64>,
    /// Runs in which the first failure was a linearizability counterexample.
    pub by_linearizability: u32,
    pub scenarios: Vec<String>,
    pub seed: u64,
}

impl std::fmt::Display for DetectionFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let median = self
            .median_ms_to_first_failure
            .map_or("n/a".to_owned(), |m| format!("{m:.1} ms"));
        write!(
            f,
            "race detection on {}: caught in {}/{} runs ({:.0}%), {} by a linearizability \
             counterexample; median time to first failure {median} [scenarios: {}; seeds {}..{}]",
            self.target,
            self.detected,
            self.runs,
            100.0 * f64::from(self.detected) / f64::from(self.runs.max(1)),
            self.by_linearizability,
            self.scenarios.join(", "),
            self.seed,
            self.seed + u64::from(self.runs)
        )
    }
}

/// Runs `scenarios` `runs` times, independently (fresh seed and namespace
/// each time, default trial counts, fail-fast), against `target_spec`, and
/// counts the runs that fail.
pub async fn detection_benchmark(
    target_spec: &str,
    scenarios: &[crate::scenario::Scenario],
    runs: u32,
    seed: u64,
) -> Result<DetectionFigures, TargetError> {
    let target = open_target(target_spec, TargetOptions::default()).await?;
    let mut times_ms = Vec::new();
    let mut by_linearizability = 0;
    for k in 0..runs {
        let mut cfg = crate::runner::RunConfig::new(seed + u64::from(k));
        cfg.fail_fast = true;
        let started = Instant::now();
        let summary = crate::runner::run(Arc::clone(&target), scenarios, &cfg, &mut []).await;
        let elapsed_ms = started.elapsed().as_secs_f64() * 1e3;
        if summary.errored > 0 {
            let why = summary
                .results
                .iter()
                .find_map(|r| r.failure.as_ref().map(|f| f.message.clone()))
                .unwrap_or_default();
            return Err(TargetError::Unreachable(format!(
                "run {k} could not be judged: {why}"
            )));
        }
        if summary.failed > 0 {
            times_ms.push(elapsed_ms);
            let first = summary.results.iter().find_map(|r| r.failure.as_ref());
            if first.is_some_and(|f| f.message.contains("not linearizable")) {
                by_linearizability += 1;
            }
        }
    }
    times_ms.sort_by(f64::total_cmp);
    Ok(DetectionFigures {
        target: target.describe(),
        runs,
        detected: times_ms.len() as u32,
        median_ms_to_first_failure: times_ms.get(times_ms.len() / 2).copied(),
        by_linearizability,
        scenarios: scenarios.iter().map(|s| s.id.clone()).collect(),
        seed,
    })
}
