//! `reqkey bench fuzz`: how many programs the fuzz pass needs to find each
//! of the project's own broken variants, on several seeds, and the curve
//! certify's default budget is chosen from (docs/fuzz.md).
//!
//! Each built-in broken variant of a level (`broken-memory:DEFECT`,
//! `reqkey targets`) is fuzzed in process with up to `max_cases` programs
//! on each seed, without shrinking: the figure is the first failing
//! program's number. A variant whose every scenario of the falsification
//! record needs a started process (a crash, a replica) is listed but not
//! fuzzed: no request of the protocol shows its bug. The correct reference
//! of the level is fuzzed too, once per seed: it must pass (a failure there
//! is a false alarm, exit 1), and its time per program prices a budget.
//!
//! Why a count and not a time box: a count gives the same programs, so the
//! same verdict, on an idle machine and a loaded one; a time box would
//! find less on a loaded machine than on the machine it was chosen on.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use reqkey_check::coverage::FalsificationRecord;
use reqkey_model::vocab::Level;

use crate::run::fuzz::agent::{fuzz_agent, AgentFuzzOptions, AgentFuzzOutcome};
use crate::run::fuzz::store::{fuzz, FuzzOptions, FuzzOutcome};
use crate::targets::profile::resolve_profile;
use crate::targets::spec::{builtin_variants, open_target};
use crate::targets::TargetOptions;

/// What to measure.
#[derive(Debug, Clone)]
pub struct FuzzBenchConfig {
    pub levels: Vec<Level>,
    pub seeds: Vec<u64>,
    pub max_cases: u32,
    /// Variants fuzzed at once (each on a thread and runtime of its own).
    pub jobs: usize,
    /// Only variants whose name contains one of these (comma-separated).
    pub only: Option<String>,
    pub call_timeout_ms: u64,
}

/// One variant's figures.
#[derive(Debug, Clone)]
pub struct VariantRow {
    pub level: Level,
    pub variant: String,
    /// The suite fails it (the falsification record names scenarios).
    pub suite_finds: bool,
    /// Only a started process shows its bug: not fuzzed.
    pub needs_process: bool,
    /// Per seed: the first failing program's number, `None` (not found
    /// within the budget) or an error (no verdict).
    pub found: Vec<Result<Option<u64>, String>>,
    pub seconds: f64,
}

/// The correct reference of a level: its programs per second.
#[derive(Debug, Clone)]
pub struct ReferenceRow {
    pub level: Level,
    pub target: &'static str,
    pub programs: u64,
    pub seconds: f64,
    /// A failure on a correct server (a false alarm) or no verdict.
    pub problem: Option<String>,
}

#[derive(Debug, Clone)]
pub struct FuzzBenchReport {
    pub config: FuzzBenchConfig,
    pub rows: Vec<VariantRow>,
    pub references: Vec<ReferenceRow>,
}

/// Runs one fuzz with no shrinking: the first failing program's number.
fn first_failure(
    level: Level,
    target: &str,
    seed: u64,
    cases: u32,
    call_timeout_ms: u64,
) -> Result<Option<u64>, String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a runtime: {e}"))?;
    let opts = TargetOptions {
        call_timeout_ms,
        ..TargetOptions::default()
    };
    let opened = rt
        .block_on(open_target(target, opts))
        .map_err(|e| e.to_string())?;
    let namespace = format!(
        "{}.bench-fuzz",
        crate::run::config::RunConfig::new(seed).namespace
    );
    match level {
        Level::Store => match fuzz(
            &rt,
            opened,
            &FuzzOptions {
                cases,
                seed,
                namespace,
                target_name: target.to_owned(),
                lin_budget_steps: reqkey_check::lin::DEFAULT_BUDGET_STEPS,
                call_timeout_ms,
                max_shrink_iters: 0,
                batches: true,
                every: false,
            },
        ) {
            FuzzOutcome::Passed { .. } => Ok(None),
            FuzzOutcome::Failed(f) => Ok(Some(f.found_at)),
            FuzzOutcome::Error(e) => Err(e),
        },
        Level::Agent => {
            let profile = rt
                .block_on(resolve_profile(opened.as_ref(), None, call_timeout_ms))
                .map_err(|e| e.to_string())?
                .profile;
            match fuzz_agent(
                &rt,
                opened,
                &AgentFuzzOptions {
                    cases,
                    seed,
                    namespace,
                    target_name: target.to_owned(),
                    profile,
                    call_timeout_ms,
                    max_shrink_iters: 0,
                    every: false,
                },
            ) {
                AgentFuzzOutcome::Passed { .. } => Ok(None),
                AgentFuzzOutcome::Failed(f) => Ok(Some(f.found_at)),
                AgentFuzzOutcome::Error(e) => Err(e),
            }
        }
        Level::Idem => Err("the idem level has no fuzzer".into()),
    }
}

/// The scenario ids of `level` that need a started process.
fn process_scenarios(level: Level) -> BTreeSet<String> {
    crate::run::suite::embedded_suite(level)
        .map(|(_, scenarios)| {
            scenarios
                .into_iter()
                .filter(|s| s.requires.faults == Some(true) || s.requires.replicas.is_some())
                .map(|s| s.id)
                .collect()
        })
        .unwrap_or_default()
}

/// Measures every variant of the configured levels.
pub fn fuzz_benchmark(config: &FuzzBenchConfig, record: &FalsificationRecord) -> FuzzBenchReport {
    let mut rows = Vec::new();
    let mut jobs: Vec<(usize, usize, Level, String, u64)> = Vec::new();
    for &level in &config.levels {
        let needs = process_scenarios(level);
        for variant in builtin_variants(level) {
            if config
                .only
                .as_deref()
                .is_some_and(|o| !o.split(',').any(|one| variant.contains(one.trim())))
            {
                continue;
            }
            let recorded = record
                .level(level)
                .get(&variant)
                .cloned()
                .unwrap_or_default();
            let needs_process =
                !recorded.is_empty() && recorded.iter().all(|id| needs.contains(id));
            let row = rows.len();
            if !needs_process {
                for (i, seed) in config.seeds.iter().enumerate() {
                    jobs.push((row, i, level, variant.clone(), *seed));
                }
            }
            rows.push(VariantRow {
                level,
                variant,
                suite_finds: !recorded.is_empty(),
                needs_process,
                found: vec![Ok(None); config.seeds.len()],
                seconds: 0.0,
            });
        }
    }
    let rows = Arc::new(Mutex::new(rows));
    let queue = Arc::new(Mutex::new(jobs));
    let workers: Vec<_> = (0..config.jobs.max(1))
        .map(|_| {
            let (rows, queue) = (Arc::clone(&rows), Arc::clone(&queue));
            let (cases, timeout) = (config.max_cases, config.call_timeout_ms);
            std::thread::spawn(move || loop {
                let job = queue.lock().unwrap_or_else(|p| p.into_inner()).pop();
                let Some((row, i, level, variant, seed)) = job else {
                    return;
                };
                let started = Instant::now();
                let found = first_failure(level, &variant, seed, cases, timeout);
                let mut rows = rows.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(r) = rows.get_mut(row) {
                    r.found[i] = found;
                    r.seconds += started.elapsed().as_secs_f64();
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let rows = std::mem::take(&mut *rows.lock().unwrap_or_else(|p| p.into_inner()));
    let mut references = Vec::new();
    for &level in &config.levels {
        let target = match level {
            Level::Store => "memory",
            _ => "reference-agent",
        };
        for &seed in &config.seeds {
            let started = Instant::now();
            let outcome = first_failure(
                level,
                target,
                seed,
                config.max_cases,
                config.call_timeout_ms,
            );
            let problem = match outcome {
                Ok(None) => None,
                Ok(Some(n)) => Some(format!("program {n} failed on seed {seed}: a false alarm")),
                Err(e) => Some(format!("seed {seed}: no verdict: {e}")),
            };
            references.push(ReferenceRow {
                level,
                target,
                programs: u64::from(config.max_cases),
                seconds: started.elapsed().as_secs_f64(),
                problem,
            });
        }
    }
    FuzzBenchReport {
        config: config.clone(),
        rows,
        references,
    }
}

/// The budgets the curve is read at.
fn budgets(max: u32) -> Vec<u32> {
    let mut out: Vec<u32> = [8, 16, 32, 64, 96, 128, 192, 256, 384, 512, 1024, 2048]
        .into_iter()
        .filter(|b| *b < max)
        .collect();
    out.push(max);
    out
}

impl FuzzBenchReport {
    fn fuzzed(&self, level: Level) -> impl Iterator<Item = &VariantRow> {
        self.rows
            .iter()
            .filter(move |r| r.level == level && !r.needs_process)
    }

    /// The smallest budget of the curve at which every variant the suite
    /// passes is found on every seed, if any is.
    pub fn smallest_for_fuzz_only(&self, level: Level) -> Option<u32> {
        budgets(self.config.max_cases).into_iter().find(|&b| {
            self.fuzzed(level).filter(|r| !r.suite_finds).all(|r| {
                r.found
                    .iter()
                    .all(|f| matches!(f, Ok(Some(n)) if *n <= u64::from(b)))
            })
        })
    }

    /// The seconds a program of the correct reference of `level` takes.
    pub fn seconds_per_program(&self, level: Level) -> f64 {
        let (s, n) = self
            .references
            .iter()
            .filter(|r| r.level == level)
            .fold((0.0, 0u64), |(s, n), r| (s + r.seconds, n + r.programs));
        if n == 0 {
            0.0
        } else {
            s / n as f64
        }
    }

    /// Whether a correct reference was flagged or could not be judged.
    pub fn has_problem(&self) -> bool {
        self.references.iter().any(|r| r.problem.is_some())
    }

    /// The report as Markdown: the table of variants, then the curve.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let seeds: Vec<String> = self.config.seeds.iter().map(u64::to_string).collect();
        for &level in &self.config.levels {
            let _ = writeln!(
                out,
                "## {} level: programs to the first failure (seeds {}; at most {})\n",
                level.name(),
                seeds.join(", "),
                self.config.max_cases
            );
            let _ = writeln!(
                out,
                "| variant | the suite fails it | {} |",
                seeds
                    .iter()
                    .map(|s| format!("seed {s}"))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
            let _ = writeln!(out, "|---|---|{}", "---|".repeat(seeds.len()));
            for r in self.rows.iter().filter(|r| r.level == level) {
                let cells: Vec<String> = if r.needs_process {
                    vec!["(a started process)".into(); seeds.len()]
                } else {
                    r.found
                        .iter()
                        .map(|f| match f {
                            Ok(Some(n)) => n.to_string(),
                            Ok(None) => "-".into(),
                            Err(e) => {
                                format!("no verdict: {}", e.chars().take(60).collect::<String>())
                            }
                        })
                        .collect()
                };
                let suite = if r.suite_finds { "yes" } else { "**no**" };
                let _ = writeln!(out, "| `{}` | {suite} | {} |", r.variant, cells.join(" | "));
            }
            let per = self.seconds_per_program(level);
            let _ = writeln!(
                out,
                "\n| budget (programs) | (variant, seed) pairs found | variants found on every seed | of them the suite passes | seconds on the reference (at {:.0} ms a program) |",
                per * 1000.0
            );
            let _ = writeln!(out, "|---|---|---|---|---|");
            let fuzzed: Vec<&VariantRow> = self.fuzzed(level).collect();
            let pairs = fuzzed.len() * seeds.len();
            let fuzz_only = fuzzed.iter().filter(|r| !r.suite_finds).count();
            for b in budgets(self.config.max_cases) {
                let hit = |f: &Result<Option<u64>, String>| matches!(f, Ok(Some(n)) if *n <= u64::from(b));
                let found: usize = fuzzed
                    .iter()
                    .map(|r| r.found.iter().filter(|f| hit(f)).count())
                    .sum();
                let every: Vec<&&VariantRow> =
                    fuzzed.iter().filter(|r| r.found.iter().all(hit)).collect();
                let only = every.iter().filter(|r| !r.suite_finds).count();
                let _ = writeln!(
                    out,
                    "| {b} | {found} of {pairs} | {} of {} | {only} of {fuzz_only} | {:.1} |",
                    every.len(),
                    fuzzed.len(),
                    per * f64::from(b)
                );
            }
            match self.smallest_for_fuzz_only(level) {
                Some(b) => {
                    let _ = writeln!(
                        out,
                        "\nEvery variant the suite passes is found on every seed within {b} programs."
                    );
                }
                None => {
                    let _ = writeln!(
                        out,
                        "\nSome variant the suite passes is not found on every seed within {} programs.",
                        self.config.max_cases
                    );
                }
            }
            for r in self.references.iter().filter(|r| r.level == level) {
                let _ = writeln!(
                    out,
                    "\n`{}`: {} programs in {:.1} s{}",
                    r.target,
                    r.programs,
                    r.seconds,
                    r.problem
                        .as_deref()
                        .map(|p| format!(" - {p}"))
                        .unwrap_or_default()
                );
            }
            out.push('\n');
        }
        out
    }
}
