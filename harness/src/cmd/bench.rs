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

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;

use super::bench_lookup::{backend_lookup_benchmark, chase_ns, Backend, BackendLookupConfig};
use crate::check::lin::{self, CheckOptions, Verdict};
use crate::cmd::common::{filter_by_tags, harness_error, runtime};
use crate::run::record::{random_history, simulated_history, SimulatedStore, Workload};
use crate::scenario;
use crate::target::spec::open_target;
use crate::target::{TargetError, TargetOptions};

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
    /// Median over `repeats` checks of the verdict alone (no shrinking).
    pub check_ms: f64,
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
                "{} in {:.1} ms = {:.0} ops/s [median of {}; {} steps; {} cached ",
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
            self.repeats,
            self.steps,
            self.largest_cache,
            mib(self.history_rss_mib),
            mib(self.peak_rss_mib),
            self.seed
        )
    }
}

/// The histories of `reqkey bench lin`: 1k, 10k and 100k operations (1k
/// only when `quick`), 8 and 16 clients, all on one session (the case
/// partitioning cannot help), each from a correct store and from one that
/// skips the key rule once.
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
    out
}

/// Generates one fixed-seed history and times its check (the verdict
/// alone, as Porcupine gives it: median of `repeats` checks).
pub fn lin_benchmark(w: &Workload, store: SimulatedStore, repeats: usize) -> LinFigures {
    let history = simulated_history(w, store);
    let history_rss_mib = proc_status_mib("VmRSS:");
    let mut times = Vec::new();
    let mut report = None;
    for _ in 0..repeats.max(1) {
        let started = Instant::now();
        let r = lin::check_with(
            &history,
            CheckOptions {
                minimize: false,
                ..CheckOptions::default()
            },
        );
        times.push(started.elapsed().as_secs_f64() * 1e3);
        report = Some(r);
    }
    times.sort_by(f64::total_cmp);
    let (linearizable, steps, largest_cache) = match &report {
        Some(r) => (
            match r.verdict {
                Verdict::Linearizable => Some(true),
                Verdict::NotLinearizable(_) => Some(false),
                Verdict::Unknown { .. } => None,
            },
            r.steps,
            r.largest_cache,
        ),
        None => (None, 0, 0),
    };
    LinFigures {
        ops: history.len(),
        clients: w.clients,
        sessions: w.sessions,
        seed: w.seed,
        store,
        overlapping_pairs: overlapping_pairs(&history),
        check_ms: times.get(times.len() / 2).copied().unwrap_or(0.0),
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

/// `reqkey bench lin`: every history's figures; exit 1 when a verdict is
/// not the expected one, 2 when a budget ran out.
fn lin_bench(args: &BenchArgs) -> ExitCode {
    let mut mismatch = false;
    let mut unknown = false;
    for (w, store) in lin_workloads(args.quick, args.seed) {
        let repeats = if args.quick || w.ops_total > 10_000 {
            1
        } else {
            5
        };
        let f = lin_benchmark(&w, store, repeats);
        println!("{f}");
        match f.linearizable {
            None => unknown = true,
            Some(l) if l != f.expected_linearizable() => {
                println!("  ^ the verdict is not the expected one");
                mismatch = true;
            }
            Some(_) => {}
        }
    }
    if mismatch {
        return ExitCode::from(1);
    }
    if unknown {
        return harness_error("a history was not decided within the default budget");
    }
    ExitCode::SUCCESS
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

/// Sessions seeded (or deleted) at once: each is a chain of commits, so
/// this bounds the requests in flight.
const LOOKUP_SEED_CONCURRENCY: usize = 8;
/// Untimed lookups before each measured batch.
const LOOKUP_WARMUP: usize = 200;

/// The lookup benchmark's settings.
#[derive(Debug, Clone)]
pub struct LookupConfig {
    /// Runs in the small store (the base of the ratio).
    pub small_runs: u64,
    /// Runs in the large store.
    pub large_runs: u64,
    /// Keyed runs per seeded session (the last one may hold fewer). A scan
    /// within one session only shows when this grows with the store.
    pub runs_per_session: u64,
    /// Measured lookups in each store.
    pub samples: usize,
    pub seed: u64,
    pub call_timeout_ms: u64,
}

/// What the lookup benchmark measured.
#[derive(Debug, Clone)]
pub struct LookupFigures {
    pub target: String,
    pub small_runs: u64,
    pub large_runs: u64,
    pub samples: usize,
    pub seed: u64,
    pub seeded_in_s: f64,
    pub small_median_us: f64,
    pub small_p99_us: f64,
    pub large_median_us: f64,
    pub large_p99_us: f64,
}

impl LookupFigures {
    /// The large store's median over the small store's.
    pub fn ratio(&self) -> f64 {
        self.large_median_us / self.small_median_us.max(1e-9)
    }
}

impl std::fmt::Display for LookupFigures {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "getRunByRequestKey on {}: {} runs {:.1} µs median (p99 {:.1} µs), {} runs {:.1} µs \
             median (p99 {:.1} µs); ratio {:.2}x [{} lookups each, seeded in {:.1} s, seed {}]",
            self.target,
            self.small_runs,
            self.small_median_us,
            self.small_p99_us,
            self.large_runs,
            self.large_median_us,
            self.large_p99_us,
            self.ratio(),
            self.samples,
            self.seeded_in_s,
            self.seed
        )
    }
}

/// One seeded set of sessions: `{prefix}.{i}` with runs `r1..rN`, keys
/// `k1..kN`, N = `per_session` (the last session may hold fewer).
#[derive(Debug, Clone)]
struct Seeded {
    prefix: String,
    runs: u64,
    per_session: u64,
}

impl Seeded {
    fn sessions(&self) -> u64 {
        self.runs.div_ceil(self.per_session)
    }

    fn session(&self, i: u64) -> String {
        format!("{}.{i}", self.prefix)
    }

    fn runs_in(&self, i: u64) -> u64 {
        (self.runs - i * self.per_session).min(self.per_session)
    }
}

/// One store call under the timeout; `{"ok": v}` answers `v`.
async fn store_ok(
    target: &dyn crate::target::Target,
    request: serde_json::Value,
    timeout_ms: u64,
) -> Result<serde_json::Value, String> {
    let answer = tokio::time::timeout(
        std::time::Duration::from_millis(timeout_ms),
        target.store_call(&request),
    )
    .await
    .map_err(|_| TargetError::Timeout { timeout_ms }.to_string())?
    .map_err(|e| e.to_string())?;
    match answer.get("ok") {
        Some(v) => Ok(v.clone()),
        None => Err(format!("{} answered {answer} to {request}", request["op"])),
    }
}

/// Commits one session's chain of keyed runs.
async fn seed_session(
    target: Arc<dyn crate::target::Target>,
    session: String,
    runs: u64,
    timeout_ms: u64,
) -> Result<(), String> {
    for j in 1..=runs {
        let start = serde_json::json!({
            "sessionId": session,
            "runId": format!("r{j}"),
            "expectedCurrentRunId": (j > 1).then(|| format!("r{}", j - 1)),
            "input": null,
            "requestKey": format!("k{j}"),
            "requestDigest": format!("d{j}"),
        });
        let request = serde_json::json!({"op": "commitRunStart", "args": {"startRun": start}});
        let ok = store_ok(target.as_ref(), request, timeout_ms).await?;
        if ok["outcome"] != "started" {
            return Err(format!("seeding {session}/r{j}: the commit answered {ok}"));
        }
    }
    Ok(())
}

/// Runs `op(i)` for every session index, at most
/// [`LOOKUP_SEED_CONCURRENCY`] at once. After the first error nothing new
/// starts (a target that went away is not waited on once per session);
/// what is in flight finishes, and the first error is the answer.
async fn for_each_session<F, Fut>(sessions: u64, op: F) -> Result<(), String>
where
    F: Fn(u64) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let mut set = tokio::task::JoinSet::new();
    let mut first_error = None;
    for i in 0..sessions {
        if set.len() >= LOOKUP_SEED_CONCURRENCY {
            if let Some(done) = set.join_next().await {
                let r = done.unwrap_or_else(|e| Err(format!("a task failed: {e}")));
                first_error = first_error.or(r.err());
            }
        }
        if first_error.is_some() {
            break;
        }
        set.spawn(op(i));
    }
    while let Some(done) = set.join_next().await {
        let r = done.unwrap_or_else(|e| Err(format!("a task failed: {e}")));
        first_error = first_error.or(r.err());
    }
    first_error.map_or(Ok(()), Err)
}

/// What [`over_set`] does to each session of a set.
#[derive(Debug, Clone, Copy)]
enum SetOp {
    /// Commit the session's chain of keyed runs.
    Seed,
    /// `deleteSession` it.
    Delete,
}

/// Seeds or deletes every session of a set, 8 at once; stops starting new
/// ones after the first failure (the caller then names the sessions that
/// may remain).
async fn over_set(
    target: &Arc<dyn crate::target::Target>,
    set: &Seeded,
    op: SetOp,
    timeout_ms: u64,
) -> Result<(), String> {
    let set = set.clone();
    let target = Arc::clone(target);
    for_each_session(set.sessions(), move |i| {
        let (target, session, runs) = (Arc::clone(&target), set.session(i), set.runs_in(i));
        async move {
            match op {
                SetOp::Seed => seed_session(target, session, runs, timeout_ms).await,
                SetOp::Delete => {
                    let request =
                        serde_json::json!({"op": "deleteSession", "args": {"sessionId": session}});
                    store_ok(target.as_ref(), request, timeout_ms)
                        .await
                        .map(drop)
                }
            }
        }
    })
    .await
}

/// One timed lookup of a random seeded key; checks the answer is its run.
async fn timed_lookup(
    target: &dyn crate::target::Target,
    set: &Seeded,
    rng: &mut rand::rngs::Xoshiro256PlusPlus,
    timeout_ms: u64,
) -> Result<f64, String> {
    use rand::RngExt;
    let i = rng.random_range(0..set.sessions());
    let j = 1 + rng.random_range(0..set.runs_in(i));
    let session = set.session(i);
    let request = serde_json::json!({
        "op": "getRunByRequestKey",
        "args": {"sessionId": session, "requestKey": format!("k{j}")},
    });
    let started = Instant::now();
    let ok = store_ok(target, request, timeout_ms).await?;
    let took_us = started.elapsed().as_secs_f64() * 1e6;
    if ok["runId"] != format!("r{j}") {
        return Err(format!(
            "getRunByRequestKey({session}, k{j}) answered {ok}, not run r{j}: the store lost a key"
        ));
    }
    Ok(took_us)
}

/// `count` timed lookups in `set`, after [`LOOKUP_WARMUP`] untimed ones.
async fn sample(
    target: &dyn crate::target::Target,
    set: &Seeded,
    count: usize,
    rng: &mut rand::rngs::Xoshiro256PlusPlus,
    timeout_ms: u64,
) -> Result<Vec<f64>, String> {
    let mut us = Vec::with_capacity(count);
    for i in 0..LOOKUP_WARMUP + count {
        let took = timed_lookup(target, set, rng, timeout_ms).await?;
        if i >= LOOKUP_WARMUP {
            us.push(took);
        }
    }
    Ok(us)
}

fn median_and_p99(mut us: Vec<f64>) -> (f64, f64) {
    us.sort_by(f64::total_cmp);
    let at = |q: usize| {
        us.get(q.min(us.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0.0)
    };
    (at(us.len() / 2), at(us.len() * 99 / 100))
}

/// Times `getRunByRequestKey` on random seeded keys of any store target
/// with a small and then a large number of runs in it, seeding through
/// `commitRunStart` (so it works on every store in any language). The
/// store is one, so the sets are not measured side by side: the small set
/// is seeded and measured (half its samples), the large set seeded beside
/// it and measured, removed, and the small set measured again (the other
/// half), so that load drifting on the machine does not favour either.
/// Every seeded session is deleted again, after a failure too. An index
/// read keeps the ratio near 1; a scan grows with the store.
pub async fn lookup_benchmark(
    target_spec: &str,
    cfg: &LookupConfig,
) -> Result<LookupFigures, String> {
    let target = open_target(target_spec, TargetOptions::default())
        .await
        .map_err(|e| e.to_string())?;
    if target.level() != crate::target::Level::Store {
        return Err(format!(
            "the lookup benchmark needs a store target; {} is an agent server",
            target.describe()
        ));
    }
    let namespace = crate::run::runner::RunConfig::new(cfg.seed).namespace;
    if cfg.small_runs == 0 || cfg.large_runs == 0 || cfg.runs_per_session == 0 || cfg.samples == 0 {
        return Err("the lookup benchmark needs at least one run, session and sample".into());
    }
    let small = Seeded {
        prefix: format!("{namespace}.lookup-small"),
        runs: cfg.small_runs,
        per_session: cfg.runs_per_session,
    };
    let large = Seeded {
        prefix: format!("{namespace}.lookup-large"),
        runs: cfg.large_runs,
        per_session: cfg.runs_per_session,
    };
    let timeout_ms = cfg.call_timeout_ms;
    let mut rng = <rand::rngs::Xoshiro256PlusPlus as rand::SeedableRng>::seed_from_u64(cfg.seed);
    let mut seeded_in_s = 0.0;
    let mut large_seeded = false;
    let measured: Result<(Vec<f64>, Vec<f64>), String> = async {
        let t = Instant::now();
        over_set(&target, &small, SetOp::Seed, timeout_ms).await?;
        seeded_in_s += t.elapsed().as_secs_f64();
        let first_half = cfg.samples / 2;
        let mut small_us =
            sample(target.as_ref(), &small, first_half, &mut rng, timeout_ms).await?;
        let t = Instant::now();
        large_seeded = true;
        over_set(&target, &large, SetOp::Seed, timeout_ms).await?;
        seeded_in_s += t.elapsed().as_secs_f64();
        let large_us = sample(target.as_ref(), &large, cfg.samples, &mut rng, timeout_ms).await?;
        over_set(&target, &large, SetOp::Delete, timeout_ms).await?;
        large_seeded = false;
        small_us.extend(
            sample(
                target.as_ref(),
                &small,
                cfg.samples - first_half,
                &mut rng,
                timeout_ms,
            )
            .await?,
        );
        Ok((small_us, large_us))
    }
    .await;
    let cleaned = async {
        if large_seeded {
            over_set(&target, &large, SetOp::Delete, timeout_ms).await?;
        }
        over_set(&target, &small, SetOp::Delete, timeout_ms).await
    }
    .await;
    let leftover = |e: String| {
        format!(
            "{e} (sessions under {} and {} may remain in the store)",
            small.prefix, large.prefix
        )
    };
    let (small_us, large_us) = match (measured, cleaned) {
        (Ok(m), Ok(())) => m,
        (Err(e), Ok(())) => return Err(e),
        (Ok(_), Err(e)) => return Err(leftover(format!("removing the seeded sessions: {e}"))),
        (Err(e), Err(c)) => return Err(leftover(format!("{e}; then removing them: {c}"))),
    };
    let (small_median_us, small_p99_us) = median_and_p99(small_us);
    let (large_median_us, large_p99_us) = median_and_p99(large_us);
    Ok(LookupFigures {
        target: target.describe(),
        small_runs: cfg.small_runs,
        large_runs: cfg.large_runs,
        samples: cfg.samples,
        seed: cfg.seed,
        seeded_in_s,
        small_median_us,
        small_p99_us,
        large_median_us,
        large_p99_us,
    })
}

/// Which benchmark to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchKind {
    /// The checker and race benchmarks (not lookup, which seeds a store,
    /// nor lin, which takes minutes).
    All,
    /// The linearizability checker on fixed-seed simulated histories (1k,
    /// 10k, 100k ops; 8 and 16 clients on one session; correct and not):
    /// ops/s and the verdict of each (--quick: the 1k ones only).
    Lin,
    /// Time the linearizability check of a recorded 1,000-op history.
    Checker,
    /// Detection rate of the race scenarios against the racy store.
    Race,
    /// getRunByRequestKey with --small vs --large runs (default 1,000 vs
    /// 1,000,000) on every reference backend (--backend), beside the
    /// backend's own primitive, and the ratio of their growths; with
    /// --target, on any store target through the protocol (default
    /// --large there: 100,000).
    Lookup,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[arg(value_enum, default_value_t = BenchKind::All)]
    pub kind: BenchKind,
    /// Independent runs of the race scenarios (race benchmark).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub runs: u32,
    /// The target: the racy store of the race benchmark (also a second
    /// checker workload; default broken-memory:holder-read-outside-commit),
    /// or the store of the lookup benchmark (any store target,
    /// store+http:// included; without it, the reference backends).
    #[arg(long)]
    pub target: Option<String>,
    /// lookup without --target: the reference backends to measure
    /// (repeatable; default all four). Postgres and Redis come from
    /// REQKEY_POSTGRES_URL and REQKEY_REDIS_URL (default: the local
    /// services).
    #[arg(long = "backend", value_enum)]
    pub backends: Vec<Backend>,
    /// Runs in the small store of the lookup benchmark (the ratio's base).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub small: u64,
    /// Runs in the large store of the lookup benchmark (default 1,000,000
    /// on the reference backends, seeded in bulk; 100,000 with --target,
    /// seeded through commitRunStart: over HTTP expect a few seconds per
    /// 10,000 runs).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub large: Option<u64>,
    /// Keyed runs per seeded session (lookup benchmark). A scan within one
    /// session only shows when this grows with --large.
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub runs_per_session: u64,
    /// Measured lookups in each store (lookup benchmark; on the reference
    /// backends, rounds of one read of each of the four series).
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub samples: u64,
    /// Exit 1 when the lookup ratio (large median / small median; on the
    /// reference backends the ratio of ratios) is above this: a gate.
    #[arg(long)]
    pub max_ratio: Option<f64>,
    /// Bound on every single call to the target in the lookup benchmark
    /// (on the reference backends: on opening a store and on each read;
    /// seeding and cleanup have 600 s), in milliseconds.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub timeout_ms: u64,
    /// Scenario files or directories of the race benchmark (those tagged
    /// `race`). Default: the embedded store suite.
    #[arg(long)]
    pub scenarios: Option<PathBuf>,
    /// First seed (run k uses seed + k).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// lin: only the 1,000-operation histories, each checked once; lookup
    /// on the reference backends: 100 vs 10,000 runs in sessions of 100,
    /// 200 samples (CI's check that the benchmarks work; seconds).
    #[arg(long)]
    pub quick: bool,
}

/// `reqkey bench lookup`: prints the figures; exit 1 only when
/// `--max-ratio` is given and exceeded.
async fn lookup_bench(args: &BenchArgs) -> ExitCode {
    let Ok(samples) = usize::try_from(args.samples) else {
        return harness_error("--samples does not fit this machine");
    };
    if args.max_ratio.is_some_and(|r| !(r.is_finite() && r > 0.0)) {
        return harness_error("--max-ratio must be a positive number");
    }
    let Some(target) = args.target.as_deref() else {
        return backends_lookup_bench(args, samples).await;
    };
    let cfg = LookupConfig {
        small_runs: args.small,
        large_runs: args.large.unwrap_or(100_000),
        runs_per_session: args.runs_per_session,
        samples,
        seed: args.seed,
        call_timeout_ms: args.timeout_ms,
    };
    match lookup_benchmark(target, &cfg).await {
        Ok(f) => {
            println!("{f}");
            match args.max_ratio {
                Some(max) if f.ratio() > max => {
                    println!(
                        "the lookup grows with the store: ratio {:.2}x is above --max-ratio {max}",
                        f.ratio()
                    );
                    ExitCode::from(1)
                }
                _ => ExitCode::SUCCESS,
            }
        }
        Err(e) => harness_error(e),
    }
}

/// `reqkey bench lookup` without `--target`: the reference backends,
/// each beside its primitive; exit 1 only when `--max-ratio` is given and
/// a ratio of ratios is above it.
async fn backends_lookup_bench(args: &BenchArgs, samples: usize) -> ExitCode {
    let env_or = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.into());
    let (small, large, per, samples) = if args.quick {
        (100, 10_000, 100, 200)
    } else {
        (
            args.small,
            args.large.unwrap_or(1_000_000),
            args.runs_per_session,
            samples,
        )
    };
    let cfg = BackendLookupConfig {
        backends: if args.backends.is_empty() {
            Backend::ALL.to_vec()
        } else {
            args.backends.clone()
        },
        small_runs: small,
        large_runs: large,
        runs_per_session: per,
        samples,
        seed: args.seed,
        call_timeout_ms: args.timeout_ms,
        postgres_url: env_or(
            "REQKEY_POSTGRES_URL",
            "postgres://postgres@127.0.0.1:5432/test",
        ),
        redis_url: env_or("REQKEY_REDIS_URL", "redis://127.0.0.1:6379/"),
    };
    println!(
        "getRunByRequestKey with {small} and {large} runs beside each backend's own primitive \
         (seed {}): growth = large median / small median; ratio of ratios = the lookup's growth \
         / the primitive's",
        args.seed
    );
    let mut over = false;
    let result = backend_lookup_benchmark(&cfg, |f| {
        println!("{f}");
        if let Some(max) = args.max_ratio {
            if f.ratio_of_ratios() > max {
                println!(
                    "  ^ ratio of ratios {:.2}x is above --max-ratio {max}",
                    f.ratio_of_ratios()
                );
                over = true;
            }
        }
    })
    .await;
    if let Err(e) = result {
        return harness_error(e);
    }
    if !args.quick {
        println!(
            "floor    one dependent random read: {:.0} ns in 1 MiB (cache), {:.0} ns in 512 MiB (DRAM)",
            chase_ns(1 << 20, args.seed),
            chase_ns(512 << 20, args.seed)
        );
    }
    if over {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn bench_command(args: BenchArgs) -> ExitCode {
    let rt = match runtime() {
        Ok(rt) => rt,
        Err(e) => return harness_error(format!("cannot start the runtime: {e}")),
    };
    if args.kind == BenchKind::Lin {
        return lin_bench(&args);
    }
    rt.block_on(async move {
        if args.kind == BenchKind::Lookup {
            return lookup_bench(&args).await;
        }
        let racy = args
            .target
            .as_deref()
            .unwrap_or("broken-memory:holder-read-outside-commit");
        if matches!(args.kind, BenchKind::All | BenchKind::Checker) {
            // A linearizable history (memory), then one that is not.
            for target in ["memory", racy] {
                match checker_benchmark(target, default_workload(args.seed)).await {
                    Ok(f) => println!("{f}"),
                    Err(e) => return harness_error(e),
                }
            }
        }
        if matches!(args.kind, BenchKind::All | BenchKind::Race) {
            let loaded = match &args.scenarios {
                Some(path) => {
                    scenario::load_paths(std::slice::from_ref(path)).map_err(|e| e.to_string())
                }
                None => crate::run::suite::embedded_suite(crate::target::Level::Store)
                    .map(|(_, s)| s)
                    .map_err(|e| e.to_string()),
            };
            let scenarios = match loaded {
                Ok(s) => filter_by_tags(s, &["race".to_owned()], &[]),
                Err(e) => return harness_error(e),
            };
            if scenarios.is_empty() {
                return harness_error("no scenario tagged `race` to run");
            }
            match detection_benchmark(racy, &scenarios, args.runs, args.seed).await {
                Ok(f) => println!("{f}"),
                Err(e) => return harness_error(e),
            }
        }
        ExitCode::SUCCESS
    })
}
