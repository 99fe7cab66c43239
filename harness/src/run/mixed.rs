//! Mixed-operation histories: random concurrent programs over every store
//! operation, checked for linearizability against the sequential spec.
//!
//! The race scenarios race chosen pairs of writes; this stage races what
//! nobody chose. It generates, from one seed, `programs` short programs over
//! the tiny domain of [`crate::run::fuzz::store`] (two sessions, two keys, three
//! run ids, every operation: commits with and without keys, reads,
//! `setRunStatus`, `deleteSession`), most of whose steps are concurrent
//! batches released behind a barrier, and runs them against the target,
//! `in_flight` programs at a time (each on sessions of its own, so programs
//! never see each other). Each program's history is checked after every
//! step by the same checker as the `linearizable: true` groups
//! ([`reqkey_check::lin`]) against [`reqkey_model::seq::SeqStore`].
//!
//! Unlike `reqkey fuzz` nothing is shrunk: this is a bounded stage of a
//! certification run (the scenario action `mixed_histories`), not a search.
//! The generated programs depend only on the seed; the interleavings are
//! the target's. Every call is bounded by the call timeout and every check
//! by its step budget, and the number of programs is fixed, so the stage
//! always ends.

use std::sync::Arc;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use tokio::task::JoinSet;

use crate::run::fuzz::store::{
    arb_op, run_program_recorded, seed_bytes, CaseFailure, FuzzStep, ProgramStats,
};
use crate::run::record::Clock;
use crate::targets::Target;
use reqkey_check::lin::Operation;

/// The most steps in one program of this stage, and ops in one batch.
pub const MAX_STEPS: usize = 8;
pub const MAX_BATCH: usize = 4;
/// Bounds on what a scenario may ask for.
pub const MAX_PROGRAMS: u32 = 10_000;
pub const MAX_IN_FLIGHT: u32 = 64;
/// The most operations of the stage's history kept for export (programs
/// past it are left out whole, a failing one never).
pub const MAX_KEPT_OPS: usize = 100_000;

/// Programs whose steps are mostly concurrent batches of 2 to 4 ops.
pub fn arb_concurrent_program() -> impl Strategy<Value = Vec<FuzzStep>> {
    let step = prop_oneof![
        1 => arb_op().prop_map(FuzzStep::Single),
        3 => prop::collection::vec(arb_op(), 2..=MAX_BATCH).prop_map(FuzzStep::Batch),
    ];
    prop::collection::vec(step, 2..=MAX_STEPS)
}

/// The programs of one seed (deterministic).
pub fn programs(seed: u64, n: u32) -> Result<Vec<Vec<FuzzStep>>, String> {
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed));
    let mut runner = TestRunner::new_with_rng(Config::default(), rng);
    let strategy = arb_concurrent_program();
    (0..n)
        .map(|_| {
            strategy
                .new_tree(&mut runner)
                .map(|t| t.current())
                .map_err(|e| format!("cannot generate a program: {e}"))
        })
        .collect()
}

/// The sessions program `index` runs on (two, under `namespace`).
pub fn program_sessions(namespace: &str, index: usize) -> Vec<String> {
    (0..2)
        .map(|s| format!("{namespace}.p{index}.s{s}"))
        .collect()
}

/// What to run.
#[derive(Debug, Clone)]
pub struct MixedOptions {
    pub seed: u64,
    pub programs: u32,
    /// Programs running at once (each on its own sessions).
    pub in_flight: u32,
    /// Prefix of every session id (unique per run).
    pub namespace: String,
    pub lin_budget_steps: u64,
    pub call_timeout_ms: u64,
    /// The clock every program's instants are read on (the trial's).
    pub clock: Clock,
}

/// What the stage did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MixedStats {
    pub seed: u64,
    /// Programs that ran to the end.
    pub programs: u32,
    pub totals: ProgramStats,
}

impl MixedStats {
    /// One line for reports: seed, programs, operations, overlap.
    pub fn describe(&self) -> String {
        format!(
            "mixed histories: seed {}, {} programs, {} operations, {} concurrent batches ({} overlapped)",
            self.seed,
            self.programs,
            self.totals.operations,
            self.totals.batches,
            self.totals.batches_overlapped
        )
    }
}

/// How the stage ended.
#[derive(Debug, Clone)]
pub enum MixedOutcome {
    Passed(MixedStats),
    /// A program's history is not the spec's; the first failing program
    /// (by index) is reported.
    Failed {
        stats: MixedStats,
        program: usize,
        steps: Vec<FuzzStep>,
        sessions: Vec<String>,
        reason: String,
    },
    /// The target could not be judged (unreachable, timeout, budget).
    Error(String),
}

/// Runs the stage. Every program is generated first, from `opts.seed`.
pub async fn run_mixed(target: &Arc<dyn Target>, opts: &MixedOptions) -> MixedOutcome {
    run_mixed_recorded(target, opts).await.0
}

/// [`run_mixed`], with the stage's history: every program's operations
/// (each client named `p<index>.`, the programs on sessions of their own),
/// in invoke order, up to [`MAX_KEPT_OPS`]. It is linearizable exactly
/// when every program's is, which is what the stage judged.
pub async fn run_mixed_recorded(
    target: &Arc<dyn Target>,
    opts: &MixedOptions,
) -> (MixedOutcome, Vec<Operation>) {
    let all = match programs(opts.seed, opts.programs.min(MAX_PROGRAMS)) {
        Ok(p) => Arc::new(p),
        Err(e) => return (MixedOutcome::Error(e), Vec::new()),
    };
    let mut stats = MixedStats {
        seed: opts.seed,
        ..MixedStats::default()
    };
    let in_flight = opts.in_flight.clamp(1, MAX_IN_FLIGHT) as usize;
    type Finished = (
        usize,
        Vec<String>,
        Result<ProgramStats, CaseFailure>,
        Vec<Operation>,
    );
    let mut tasks: JoinSet<Finished> = JoinSet::new();
    let mut next = 0usize;
    let mut failed: Option<(usize, Vec<String>, String)> = None;
    let mut error: Option<String> = None;
    let mut history: Vec<Operation> = Vec::new();
    let mut keep = |index: usize, ops: Vec<Operation>, failing: bool| {
        if failing || history.len() + ops.len() <= MAX_KEPT_OPS {
            history.extend(ops.into_iter().map(|mut o| {
                o.client = format!("p{index}.{}", o.client);
                o
            }));
        }
    };
    loop {
        while tasks.len() < in_flight && next < all.len() && failed.is_none() && error.is_none() {
            let index = next;
            next += 1;
            let sessions = program_sessions(&opts.namespace, index);
            let target = Arc::clone(target);
            let all = Arc::clone(&all);
            let limits = (opts.lin_budget_steps, opts.call_timeout_ms);
            let clock = opts.clock;
            tasks.spawn(async move {
                let (outcome, ops) =
                    run_program_recorded(&target, &all[index], &sessions, limits, clock).await;
                (index, sessions, outcome, ops)
            });
        }
        let Some(joined) = tasks.join_next().await else {
            break;
        };
        match joined {
            Ok((index, _, Ok(program), ops)) => {
                stats.programs += 1;
                stats.totals.operations += program.operations;
                stats.totals.batches += program.batches;
                stats.totals.batches_overlapped += program.batches_overlapped;
                keep(index, ops, false);
            }
            Ok((index, sessions, Err(CaseFailure::Nonconforming(reason)), ops)) => {
                keep(index, ops, true);
                if failed.as_ref().is_none_or(|(i, _, _)| index < *i) {
                    failed = Some((index, sessions, reason));
                }
            }
            Ok((_, _, Err(CaseFailure::Harness(reason)), _)) => {
                error.get_or_insert(reason);
            }
            Err(e) => {
                error.get_or_insert(format!("a program's task: {e}"));
            }
        }
    }
    history.sort_by_key(|o| o.invoke_ns);
    if let Some(e) = error {
        return (MixedOutcome::Error(e), history);
    }
    let outcome = match failed {
        Some((program, sessions, reason)) => MixedOutcome::Failed {
            stats,
            program,
            steps: all[program].clone(),
            sessions,
            reason,
        },
        None => MixedOutcome::Passed(stats),
    };
    (outcome, history)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::targets::spec::open_target;
    use crate::targets::TargetOptions;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn opts(seed: u64, programs: u32) -> MixedOptions {
        MixedOptions {
            seed,
            programs,
            in_flight: 8,
            namespace: format!("mx{seed}"),
            lin_budget_steps: reqkey_check::lin::DEFAULT_BUDGET_STEPS,
            call_timeout_ms: 10_000,
            clock: Clock::new(),
        }
    }

    fn run(spec: &str, o: &MixedOptions) -> MixedOutcome {
        let rt = rt();
        rt.block_on(async {
            let target = open_target(spec, TargetOptions::default()).await.unwrap();
            run_mixed(&target, o).await
        })
    }

    #[test]
    fn one_seed_generates_the_same_programs_and_they_are_mostly_concurrent() {
        let a = programs(5, 50).unwrap();
        assert_eq!(a, programs(5, 50).unwrap());
        assert_ne!(a, programs(6, 50).unwrap());
        let batches = a
            .iter()
            .flatten()
            .filter(|s| matches!(s, FuzzStep::Batch(ops) if ops.len() >= 2))
            .count();
        let steps = a.iter().map(Vec::len).sum::<usize>();
        assert!(batches * 2 > steps, "{batches} batches of {steps} steps");
    }

    #[test]
    fn the_memory_store_passes_and_the_stats_add_up() {
        match run("memory", &opts(3, 200)) {
            MixedOutcome::Passed(s) => {
                assert_eq!(s.programs, 200);
                assert_eq!(s.seed, 3);
                assert!(s.totals.batches >= 200, "{s:?}");
                assert!(s.totals.operations > s.totals.batches * 2, "{s:?}");
                assert!(s.describe().contains("seed 3"));
            }
            other => panic!("{other:#?}"),
        }
    }

    #[test]
    fn each_racy_store_fails_the_stage() {
        for defect in [
            "holder-read-outside-commit",
            "delete-in-two-steps",
            "status-check-then-write",
        ] {
            let spec = format!("broken-memory:{defect}");
            match run(&spec, &opts(3, 300)) {
                MixedOutcome::Failed { reason, steps, .. } => {
                    assert!(!reason.is_empty());
                    assert!(!steps.is_empty());
                }
                other => panic!("{spec}: {other:#?}"),
            }
        }
    }
}
