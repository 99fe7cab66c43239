//! `reqkey bench`: benchmarks of the race machinery, as library functions
//! so that both `reqkey bench` and `cargo bench` print the same figures.
//!
//! - [`checker_benchmark`]: records a real concurrent history (8 clients,
//!   4 sessions, 1,000 operations against the memory store by default) and
//!   times the linearizability check of it. Target: under 1 s.
//! - [`detection_benchmark`]: runs the race scenarios many independent
//!   times against a racy store and reports how often, and how fast, they
//!   catch it. Target: at least 99 of 100 runs at default settings.
//! - [`lookup_benchmark`]: `getRunByRequestKey` latency in a small and a
//!   large store, seeded through the protocol, so that any store in any
//!   language can show its key lookup is an index read (the ratio stays
//!   near 1) rather than a scan (it grows with the store).
//! - without `--target`, `reqkey bench lookup` measures the reference
//!   backends in process, beside each backend's own primitive
//!   ([`super::bench_lookup`]).

use std::sync::Arc;
use std::time::Instant;

use reqkey_check::history;
use reqkey_check::lin::{self, CheckOptions, Verdict};

use crate::run::record::{random_history, simulated_history, SimulatedStore, Workload};
use crate::targets::spec::open_target;
use crate::targets::{TargetError, TargetOptions};

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

/// One history of the `lin` benchmark, as it was checked.
#[derive(Debug, Clone)]
pub struct LinFigures {
    pub ops: usize,
    pub clients: usize,
    pub sessions: usize,
    pub seed: u64,
    pub store: SimulatedStore,
    /// Pairs of operations whose intervals overlap.
    pub overlapping_pairs: usize,
    /// Parsing the history into the checker's types, before the clock of
    /// the check starts (once).
    pub parse_ms: f64,
    /// Median over `repeats` checks of the verdict alone (no shrinking).
    pub check_ms: f64,
    /// Threads that checked partitions (`threads` asked; 0 = every core).
    pub threads: usize,
    pub repeats: usize,
    pub steps: u64,
    /// Configurations cached by the largest partition's search.
    pub largest_cache: usize,
    /// `Some(true)` linearizable, `Some(false)` not, `None` out of budget.
    pub linearizable: Option<bool>,
    /// Resident memory of this process once the history was generated and
    /// parsed (Linux), in MiB: the history itself, before the check.
    pub history_rss_mib: Option<f64>,
    /// Peak resident memory of this process so far (Linux), in MiB.
    pub peak_rss_mib: Option<f64>,
}

fn mib(m: Option<f64>) -> String {
    m.map_or("n/a".to_owned(), |m| format!("{m:.0} MiB"))
}

impl LinFigures {
    pub fn expected_linearizable(&self) -> bool {
        self.store == SimulatedStore::Correct
    }

    pub fn ops_per_s(&self) -> f64 {
        self.ops as f64 / (self.check_ms / 1e3).max(1e-9)
    }
}

impl std::fmt::Display for LinFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verdict = match self.linearizable {
            Some(true) => "linearizable",
            Some(false) => "NOT linearizable",
            None => "UNKNOWN (budget exhausted)",
        };
        let expected = if self.expected_linearizable() {
            "correct store"
        } else {
            "store skipping the key rule once"
        };
        write!(
            f,
            concat!(
                "lin: {:>6} ops, {:>2} clients, {} session{} ({}, {} overlapping pairs): ",
                "{} in {:.1} ms = {:.0} ops/s [{} thread{}; median of {}; parsed before in {:.1} ms; ",
                "{} steps; {} cached ",
                "configurations; RSS {} with the history, peak {} after checking; seed {}]"
            ),
            self.ops,
            self.clients,
            self.sessions,
            if self.sessions == 1 { "" } else { "s" },
            expected,
            self.overlapping_pairs,
            verdict,
            self.check_ms,
            self.ops_per_s(),
            self.threads,
            if self.threads == 1 { "" } else { "s" },
            self.repeats,
            self.parse_ms,
            self.steps,
            self.largest_cache,
            mib(self.history_rss_mib),
            mib(self.peak_rss_mib),
            self.seed
        )
    }
}

/// The histories of `reqkey bench lin`: 1k, 10k and 100k operations (1k
/// only when `quick`), 8 and 16 clients, on one session (the case
/// partitioning cannot help), each from a correct store and from one that
/// skips the key rule once; then (not when `quick`) 100k operations from
/// 16 clients over 256 sessions, the case partitions checked in parallel
/// serve.
pub fn lin_workloads(quick: bool, seed: u64) -> Vec<(Workload, SimulatedStore)> {
    let sizes: &[usize] = if quick {
        &[1_000]
    } else {
        &[1_000, 10_000, 100_000]
    };
    let mut out = Vec::new();
    for &ops_total in sizes {
        for clients in [8, 16] {
            for store in [SimulatedStore::Correct, SimulatedStore::SkipsKeyRuleOnce] {
                out.push((
                    Workload {
                        clients,
                        sessions: 1,
                        ops_total,
                        seed,
                        namespace: format!("lin-{seed}"),
                    },
                    store,
                ));
            }
        }
    }
    if !quick {
        for store in [SimulatedStore::Correct, SimulatedStore::SkipsKeyRuleOnce] {
            out.push((
                Workload {
                    clients: 16,
                    sessions: MANY_SESSIONS,
                    ops_total: 100_000,
                    seed,
                    namespace: format!("lin-{seed}"),
                },
                store,
            ));
        }
    }
    out
}

/// One workload of `reqkey bench lin --lin-ops`: `ops` operations from
/// `clients` clients over `sessions` sessions, from a correct store and
/// from one that skips the key rule once.
pub fn lin_workload_of(
    ops: u64,
    sessions: u64,
    clients: u64,
    seed: u64,
) -> Vec<(Workload, SimulatedStore)> {
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    [SimulatedStore::Correct, SimulatedStore::SkipsKeyRuleOnce]
        .into_iter()
        .map(|store| {
            (
                Workload {
                    clients: as_usize(clients),
                    sessions: as_usize(sessions),
                    ops_total: as_usize(ops),
                    seed,
                    namespace: format!("lin-{seed}"),
                },
                store,
            )
        })
        .collect()
}

/// The file name of a `reqkey bench lin` history written by
/// `--export-histories`: its operations, clients, sessions, seed and the
/// store that produced it (`correct`, or `not` for the one that skips the
/// key rule once), e.g. `lin-ops10000-clients16-sessions1-seed1-not.json`.
pub fn lin_history_file_name(w: &Workload, store: SimulatedStore) -> String {
    format!(
        "lin-ops{}-clients{}-sessions{}-seed{}-{}.json",
        w.ops_total,
        w.clients,
        w.sessions,
        w.seed,
        match store {
            SimulatedStore::Correct => "correct",
            SimulatedStore::SkipsKeyRuleOnce => "not",
        }
    )
}

/// Writes the history `reqkey bench lin` checks for `(w, store)` into
/// `dir`, in reqkey's JSON history form (the one `reqkey check history`
/// reads, docs/race-safety.md), so that another checker can be run on the
/// very same operations. Returns the file's path.
pub fn export_lin_history(
    dir: &std::path::Path,
    w: &Workload,
    store: SimulatedStore,
) -> Result<std::path::PathBuf, String> {
    let history = simulated_history(w, store);
    let path = dir.join(lin_history_file_name(w, store));
    std::fs::write(
        &path,
        history::write_history(&history, history::HistoryFormat::Json),
    )
    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(path)
}

/// The sessions of the many-session history of `reqkey bench lin`.
pub const MANY_SESSIONS: usize = 256;

/// Generates one fixed-seed history, parses it into the checker's types
/// (timed apart) and times its check (the verdict alone, as Porcupine
/// gives it: median of `repeats` checks) on `threads` threads (0: one per
/// core).
pub fn lin_benchmark(
    w: &Workload,
    store: SimulatedStore,
    repeats: usize,
    threads: usize,
) -> LinFigures {
    let history = simulated_history(w, store);
    let ops = history.len();
    let overlapping = overlapping_pairs(&history);
    // Prepared one operation at a time and each dropped once prepared, as
    // `reqkey check history` reads a file: the history is not held as
    // JSON values while it is checked.
    let started = Instant::now();
    let mut builder = lin::PreparedHistoryBuilder::default();
    for (i, o) in history.into_iter().enumerate() {
        builder.set(i, &o);
    }
    let parsed = builder.finish();
    let parse_ms = started.elapsed().as_secs_f64() * 1e3;
    let history_rss_mib = proc_status_mib("VmRSS:");
    let mut times = Vec::new();
    let mut report = None;
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        let r = lin::check_prepared(
            &parsed,
            CheckOptions {
                minimize: false,
                threads,
                ..CheckOptions::default()
            },
        );
        times.push(started.elapsed().as_secs_f64() * 1e3);
        report = Some(r);
    }
    times.sort_by(f64::total_cmp);
    let (linearizable, steps, largest_cache, threads_used) = match &report {
        Some(r) => (
            match r.verdict {
                Verdict::Linearizable => Some(true),
                Verdict::NotLinearizable(_) => Some(false),
                Verdict::Unknown { .. } => None,
            },
            r.steps,
            r.largest_cache,
            r.threads,
        ),
        None => (None, 0, 0, 0),
    };
    LinFigures {
        ops,
        clients: w.clients,
        sessions: w.sessions,
        seed: w.seed,
        store,
        overlapping_pairs: overlapping,
        parse_ms,
        check_ms: times.get(times.len() / 2).copied().unwrap_or(0.0),
        threads: threads_used,
        repeats: times.len(),
        steps,
        largest_cache,
        linearizable,
        history_rss_mib,
        peak_rss_mib: proc_status_mib("VmHWM:"),
    }
}

/// A memory line (`VmRSS:`, `VmHWM:`) of this process from /proc (Linux);
/// `None` elsewhere.
fn proc_status_mib(field: &str) -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
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
    scenarios: &[reqkey_scenario::Scenario],
    runs: u32,
    seed: u64,
) -> Result<DetectionFigures, TargetError> {
    let target = open_target(target_spec, TargetOptions::default()).await?;
    let mut times_ms = Vec::new();
    let mut by_linearizability = 0;
    for k in 0..runs {
        let mut cfg = crate::run::runner::RunConfig::new(seed + u64::from(k));
        cfg.fail_fast = true;
        let started = Instant::now();
        let summary = crate::run::runner::run(Arc::clone(&target), scenarios, &cfg, &mut []).await;
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
