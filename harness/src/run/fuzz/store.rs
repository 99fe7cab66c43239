//! Model-based property testing of a store: `reqkey fuzz`.
//!
//! Hand-written scenarios test the cases someone thought of; this module
//! tests the ones nobody did. proptest generates short programs of store
//! operations over a deliberately tiny domain (2 sessions, 2 keys, 3 run
//! ids, 2 inputs, a few statuses) so that collisions — a key taken twice, a
//! runId reused with another input, a stale CAS, a delete between two
//! commits — are the common case, not the rare one. Some steps are small
//! concurrent batches released behind a barrier.
//!
//! Each program runs against the target and against the sequential spec
//! ([`SeqStore`]): while the program is sequential every answer must be the
//! spec's; once a batch has run, the state is one of several, and the whole
//! recorded history must be linearizable ([`reqkey_check::lin`]). A failure is
//! shrunk by proptest to a minimal program and printed as a ready-to-commit
//! YAML scenario (docs/scenario-format.md) that fails the same way under
//! `reqkey run`.
//!
//! Every case uses fresh session ids under the run's namespace, so fuzzing
//! a shared backend never clobbers anything. One seed reproduces the
//! generated programs (and their shrinking); the interleavings of batches
//! are the target's.

use std::sync::Arc;

use reqkey_model::seq::{answer_to_wire, SeqStore, StoreOp};
use serde_json::Value;
use tokio::sync::Barrier;

use crate::run::fuzz::cases::{case_sessions, run_cases, CasesOutcome, Found};
pub use crate::run::fuzz::cases::{seed_bytes, CaseFailure};
use crate::run::fuzz::every::{self, replayed_violation, Every, Proven};
use crate::run::fuzz::scenario::{op_clause, scenario_yaml, CONCURRENT};
use crate::run::fuzz::violation::FuzzViolation;
use crate::run::record::{timed_store_call, Clock};
use crate::targets::Target;
use reqkey_check::lin::{self, CheckOptions, Operation, Verdict};

pub use crate::run::fuzz::program::{
    arb_fuzz_program, arb_op, arb_program, arb_program_with, expand, input, Expanded, FuzzOp,
    FuzzStep, StoreProgram, INPUTS, MAX_BATCH, MAX_STEPS, SESSIONS,
};

/// What one program did, for the reports of a run of many.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgramStats {
    /// Operations sent.
    pub operations: u64,
    /// Concurrent batches (of two or more operations).
    pub batches: u64,
    /// Batches in which some two operations overlapped in time.
    pub batches_overlapped: u64,
}

/// Whether some two of `ops` overlapped in time (each interval from invoke
/// to return).
pub fn any_overlap(ops: &[Operation]) -> bool {
    ops.iter().enumerate().any(|(i, a)| {
        ops[i + 1..]
            .iter()
            .any(|b| a.invoke_ns < b.return_ns && b.invoke_ns < a.return_ns)
    })
}

/// Runs one program against `target` with sessions named `sessions`.
pub async fn run_program(
    target: &Arc<dyn Target>,
    program: &[FuzzStep],
    sessions: &[String],
    lin_budget_steps: u64,
    call_timeout_ms: u64,
) -> Result<ProgramStats, CaseFailure> {
    let mut history = Vec::new();
    let limits = (lin_budget_steps, call_timeout_ms);
    drive_program(
        target,
        program,
        sessions,
        limits,
        Clock::new(),
        &mut history,
    )
    .await
}

/// [`run_program`] on `clock`, with the history it recorded (up to where
/// it stopped: what was judged) beside its outcome.
pub async fn run_program_recorded(
    target: &Arc<dyn Target>,
    program: &[FuzzStep],
    sessions: &[String],
    (lin_budget_steps, call_timeout_ms): (u64, u64),
    clock: Clock,
) -> (Result<ProgramStats, CaseFailure>, Vec<Operation>) {
    let mut history = Vec::new();
    let limits = (lin_budget_steps, call_timeout_ms);
    let outcome = drive_program(target, program, sessions, limits, clock, &mut history).await;
    (outcome, history)
}

/// `v` as JSON, cut to about 600 bytes (a long input is in the scenario).
pub(super) fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 600 {
        let cut = (0..=600)
            .rev()
            .find(|i| s.is_char_boundary(*i))
            .unwrap_or(0);
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Sends `op` alone as `client`, and (while the program is sequential)
/// judges its answer against the spec's.
#[allow(clippy::too_many_arguments)]
async fn call_alone(
    target: &Arc<dyn Target>,
    op: &FuzzOp,
    sessions: &[String],
    client: String,
    clock: &Clock,
    call_timeout_ms: u64,
    spec: Option<&mut SeqStore>,
    history: &mut Vec<Operation>,
) -> Result<(), CaseFailure> {
    let request = op.request(sessions);
    let (recorded, result) = timed_store_call(
        target.as_ref(),
        clock,
        &client,
        request.clone(),
        call_timeout_ms,
    )
    .await;
    let answer = result.map_err(|e| CaseFailure::Harness(e.to_string()))?;
    // SPEC 6: a request over 1 MiB may be refused, writing nothing; it is
    // then as if never sent.
    if op.may_be_refused_for_size()
        && answer.pointer("/error/kind").and_then(Value::as_str) == Some("invalid_argument")
    {
        return Ok(());
    }
    history.push(recorded);
    if let Some(state) = spec {
        let expected = match StoreOp::from_wire(&request) {
            Ok(parsed) => state.apply(&parsed),
            Err(e) => Err(e),
        };
        if !lin::answer_conforms(&request, &expected, &answer) {
            return Err(CaseFailure::Nonconforming(format!(
                "{client}: [{}] {}\n  the spec answers  {}\n  the target answered {}",
                op_clause(&request),
                lin::summarize_request(&request),
                short(&answer_to_wire(&expected)),
                short(&answer)
            )));
        }
    }
    Ok(())
}

async fn drive_program(
    target: &Arc<dyn Target>,
    program: &[FuzzStep],
    sessions: &[String],
    (lin_budget_steps, call_timeout_ms): (u64, u64),
    clock: Clock,
    history: &mut Vec<Operation>,
) -> Result<ProgramStats, CaseFailure> {
    let mut stats = ProgramStats::default();
    // The spec's state while the program is still sequential.
    let mut spec = Some(SeqStore::new());
    for (k, step) in program.iter().enumerate() {
        let Expanded { together, after } = expand(step);
        if let [op] = together.as_slice() {
            let client = format!("step{k}");
            call_alone(
                target,
                op,
                sessions,
                client,
                &clock,
                call_timeout_ms,
                spec.as_mut(),
                history,
            )
            .await?;
            stats.operations += 1;
        } else {
            spec = None;
            let barrier = Arc::new(Barrier::new(together.len()));
            let mut tasks = Vec::with_capacity(together.len());
            for (j, op) in together.iter().enumerate() {
                let target = Arc::clone(target);
                let barrier = Arc::clone(&barrier);
                let request = op.request(sessions);
                let client = format!("step{k}.{j}");
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    timed_store_call(target.as_ref(), &clock, &client, request, call_timeout_ms)
                        .await
                }));
            }
            let first = history.len();
            for t in tasks {
                let (recorded, result) = t
                    .await
                    .map_err(|e| CaseFailure::Harness(format!("batch task: {e}")))?;
                result.map_err(|e| CaseFailure::Harness(e.to_string()))?;
                history.push(recorded);
            }
            stats.operations += together.len() as u64;
            stats.batches += 1;
            stats.batches_overlapped += u64::from(any_overlap(&history[first..]));
        }
        for (j, op) in after.iter().enumerate() {
            let client = format!("step{k}.read{j}");
            call_alone(
                target,
                op,
                sessions,
                client,
                &clock,
                call_timeout_ms,
                spec.as_mut(),
                history,
            )
            .await?;
            stats.operations += 1;
        }
        let report = lin::check_with(
            history,
            CheckOptions {
                budget_steps: lin_budget_steps,
                minimize: true,
                ..CheckOptions::default()
            },
        );
        match report.verdict {
            Verdict::Linearizable => {}
            Verdict::NotLinearizable(c) => {
                return Err(CaseFailure::Nonconforming(format!(
                    "after step {k}: [{CONCURRENT}] {c}"
                )))
            }
            Verdict::Unknown { reason } => return Err(CaseFailure::Harness(reason)),
        }
    }
    Ok(stats)
}

/// `sessions` padded with `x` to SPEC 1's longest id when `long`.
pub fn long_ids(sessions: Vec<String>, long: bool) -> Vec<String> {
    if !long {
        return sessions;
    }
    sessions
        .into_iter()
        .map(|s| crate::run::fuzz::agent_program::pad(&s, crate::run::fuzz::agent_program::ID_MAX))
        .collect()
}

/// Options of a fuzz run.
#[derive(Debug, Clone)]
pub struct FuzzOptions {
    pub cases: u32,
    pub seed: u64,
    /// Prefix of every session id (unique per run).
    pub namespace: String,
    /// The target spec, for the scenario's summary.
    pub target_name: String,
    pub lin_budget_steps: u64,
    /// The bound on every single call.
    pub call_timeout_ms: u64,
    /// Bound on shrinking iterations.
    pub max_shrink_iters: u32,
    /// Concurrent batches in the programs (`reqkey fuzz` and certification:
    /// always; off only in tests of sequential defects).
    pub batches: bool,
    /// Go on after the first failing program: every distinct violation
    /// (one per clause blamed) shrunk, its reproduction replayed against
    /// the target (`run/fuzz/every.rs`). `reqkey fuzz` and certification:
    /// always; `reqkey bench fuzz` only asks when the first one comes.
    pub every: bool,
}

/// A shrunk failure, ready to print.
#[derive(Debug, Clone)]
pub struct FuzzFailure {
    pub seed: u64,
    /// The program (counted from 1) that failed first, before shrinking.
    pub found_at: u64,
    pub program: StoreProgram,
    /// Why the minimal program fails.
    pub reason: String,
    /// The minimal program as a scenario file.
    pub scenario_yaml: String,
    /// Every distinct violation (the first is the one above), each with its
    /// reproduction replayed against the target; empty when the run
    /// stopped at its first (`every: false`).
    pub violations: Vec<FuzzViolation>,
    /// Why the run stopped before its budget, when a program could not be
    /// judged after these violations were proven (they stand).
    pub stopped: Option<String>,
}

/// The outcome of a fuzz run.
#[derive(Debug, Clone)]
pub enum FuzzOutcome {
    Passed {
        cases: u32,
    },
    Failed(Box<FuzzFailure>),
    /// The target could not be judged (unreachable, timeout, budget).
    Error(String),
}

/// Runs `opts.cases` programs against `target`. Blocking: call it outside
/// any async context; it drives the calls on `runtime`.
pub fn fuzz(
    runtime: &tokio::runtime::Runtime,
    target: Arc<dyn Target>,
    opts: &FuzzOptions,
) -> FuzzOutcome {
    let strategy = arb_fuzz_program(opts.batches);
    let one = |case: u64, program: &StoreProgram| {
        let sessions = long_ids(
            case_sessions(&opts.namespace, case, SESSIONS),
            program.long_ids,
        );
        let outcome = runtime.block_on(run_program(
            &target,
            &program.steps,
            &sessions,
            opts.lin_budget_steps,
            opts.call_timeout_ms,
        ));
        // Best effort: leave nothing behind on a shared backend.
        runtime.block_on(async {
            for s in 0..SESSIONS {
                let request = FuzzOp::DeleteSession { session: s }.request(&sessions);
                let _ = tokio::time::timeout(
                    std::time::Duration::from_millis(opts.call_timeout_ms),
                    target.store_call(&request),
                )
                .await;
            }
        });
        outcome.map(|_| ())
    };
    if opts.every {
        return every_violation(opts, &strategy, one, |f| {
            let yaml = scenario_yaml(&f.program, &opts.target_name, opts.seed, &f.reason);
            Proven {
                program: f.program.clone(),
                found_at: f.found_at,
                violation: replayed_violation(
                    runtime,
                    &target,
                    (opts.seed, opts.call_timeout_ms),
                    (f.found_at, opts.cases, f.program.steps.len()),
                    f.clauses.clone(),
                    f.reason.clone(),
                    yaml,
                ),
            }
        });
    }
    match run_cases(opts.cases, opts.seed, opts.max_shrink_iters, &strategy, one) {
        CasesOutcome::Passed => FuzzOutcome::Passed { cases: opts.cases },
        CasesOutcome::Failed {
            program,
            reason,
            found_at,
        } => {
            let scenario_yaml = scenario_yaml(&program, &opts.target_name, opts.seed, &reason);
            FuzzOutcome::Failed(Box::new(FuzzFailure {
                seed: opts.seed,
                found_at,
                program,
                reason,
                scenario_yaml,
                violations: Vec::new(),
                stopped: None,
            }))
        }
        CasesOutcome::Error(e) => FuzzOutcome::Error(e),
    }
}

/// [`fuzz`] going on after its first failure: every violation proved.
fn every_violation<S: proptest::strategy::Strategy<Value = StoreProgram>>(
    opts: &FuzzOptions,
    strategy: &S,
    one: impl Fn(u64, &StoreProgram) -> Result<(), CaseFailure>,
    prove: impl FnMut(&Found<StoreProgram>) -> Proven<StoreProgram>,
) -> FuzzOutcome {
    match every::every_violation(
        opts.cases,
        opts.seed,
        opts.max_shrink_iters,
        strategy,
        one,
        prove,
    ) {
        Every::Passed => FuzzOutcome::Passed { cases: opts.cases },
        Every::Error(e) => FuzzOutcome::Error(e),
        Every::Failed { findings, stopped } => {
            let Some(first) = findings.first() else {
                return FuzzOutcome::Error("no violation was kept".into());
            };
            FuzzOutcome::Failed(Box::new(FuzzFailure {
                seed: opts.seed,
                found_at: first.found_at,
                program: first.program.clone(),
                reason: first.violation.message.clone(),
                scenario_yaml: first.violation.scenario_yaml.clone(),
                violations: findings.into_iter().map(|f| f.violation).collect(),
                stopped,
            }))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::run::event::Verdict as RunVerdict;
    use crate::run::fuzz::program::watch;
    use crate::run::runner::{self, RunConfig};
    use crate::targets::spec::open_target;
    use crate::targets::TargetOptions;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use reqkey_scenario::parse_scenario;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    }

    fn opts(target: &str, cases: u32, seed: u64) -> FuzzOptions {
        FuzzOptions {
            cases,
            seed,
            namespace: format!("fz{seed}"),
            target_name: target.to_owned(),
            lin_budget_steps: lin::DEFAULT_BUDGET_STEPS,
            call_timeout_ms: 10_000,
            max_shrink_iters: 2_000,
            batches: true,
            every: false,
        }
    }

    fn fuzz_target(rt: &tokio::runtime::Runtime, spec: &str, cases: u32, seed: u64) -> FuzzOutcome {
        let target = rt
            .block_on(open_target(spec, TargetOptions::default()))
            .unwrap();
        fuzz(rt, target, &opts(spec, cases, seed))
    }

    /// The scenario replays: fails on `bad`, passes on memory.
    fn replay(rt: &tokio::runtime::Runtime, yaml: &str, spec: &str) -> RunVerdict {
        let scenario = parse_scenario(std::path::Path::new("fuzz.yaml"), yaml).unwrap();
        let target = rt
            .block_on(open_target(spec, TargetOptions::default()))
            .unwrap();
        let summary = rt.block_on(runner::run(
            target,
            &[scenario],
            &RunConfig::new(1),
            &mut [],
        ));
        summary.results[0].verdict
    }

    #[test]
    fn the_memory_store_passes_a_few_hundred_programs() {
        let rt = rt();
        match fuzz_target(&rt, "memory", 300, 1) {
            FuzzOutcome::Passed { cases } => assert_eq!(cases, 300),
            other => panic!("{other:#?}"),
        }
    }

    /// A sequential defect is found by sequential programs, and the
    /// scenario of one replays the same way every time (a batch on the
    /// in-process store may never overlap, which is no verdict).
    fn assert_finds_and_shrinks(defect: &str) {
        let rt = rt();
        let spec = format!("broken-memory:{defect}");
        let target = rt
            .block_on(open_target(&spec, TargetOptions::default()))
            .unwrap();
        let sequential = FuzzOptions {
            batches: false,
            ..opts(&spec, 500, 7)
        };
        let FuzzOutcome::Failed(f) = fuzz(&rt, target, &sequential) else {
            panic!("fuzzing {spec} found nothing");
        };
        assert!(f.program.steps.len() <= 4, "not shrunk: {:#?}", f.program);
        assert!(
            f.scenario_yaml.contains("id: fuzz.seed-7"),
            "{}",
            f.scenario_yaml
        );
        assert_eq!(
            replay(&rt, &f.scenario_yaml, &spec),
            RunVerdict::Fail,
            "{}",
            f.scenario_yaml
        );
        assert!(!f.scenario_yaml.contains("parallel"), "{}", f.scenario_yaml);
        assert_eq!(
            replay(&rt, &f.scenario_yaml, "memory"),
            RunVerdict::Pass,
            "{}",
            f.scenario_yaml
        );
    }

    /// Issue 54 at the store level: the run goes on after its first
    /// violation, each distinct one names its clause, and a reproduction
    /// marked reproduced fails the broken store and passes memory.
    #[test]
    fn every_violation_of_a_broken_store_names_its_clause_and_replays() {
        let rt = rt();
        let spec = "broken-memory:no-key-rule";
        let target = rt
            .block_on(open_target(spec, TargetOptions::default()))
            .unwrap();
        let every = FuzzOptions {
            batches: false,
            every: true,
            ..opts(spec, 200, 7)
        };
        let FuzzOutcome::Failed(f) = fuzz(&rt, target, &every) else {
            panic!("fuzzing {spec} found nothing");
        };
        assert!(!f.violations.is_empty());
        assert!(
            f.violations.iter().any(|v| v.reproduced),
            "{:#?}",
            f.violations
        );
        for v in &f.violations {
            assert!(
                v.clauses
                    .iter()
                    .all(|c| reqkey_model::clauses::find(c).is_some()),
                "{v:#?}"
            );
            if v.reproduced {
                assert_eq!(replay(&rt, &v.scenario_yaml, spec), RunVerdict::Fail);
                assert_eq!(replay(&rt, &v.scenario_yaml, "memory"), RunVerdict::Pass);
            }
        }
        assert_eq!(f.scenario_yaml, f.violations[0].scenario_yaml);
    }

    #[test]
    fn a_store_without_the_key_rule_is_found_and_shrunk_to_a_scenario() {
        assert_finds_and_shrinks("no-key-rule");
    }

    #[test]
    fn a_store_whose_delete_keeps_keys_is_found_and_shrunk_to_a_scenario() {
        assert_finds_and_shrinks("delete-keeps-keys");
    }

    /// Only the inputs of every kind of text find it: `a` and `b` alone
    /// (the fuzzer before issue 40) never would.
    #[test]
    fn a_store_that_mangles_non_bmp_text_is_found_and_shrunk_to_a_scenario() {
        assert_finds_and_shrinks("text-as-utf8mb3");
    }

    /// Every write is followed by every read of its session by other
    /// clients, and a batch races one reader per session it writes.
    #[test]
    fn reads_by_other_clients_surround_every_write() {
        let commit = FuzzOp::Commit {
            session: 1,
            run: 2,
            expected: None,
            input: 0,
            key: Some(1),
        };
        let single = expand(&FuzzStep::Single(commit.clone()));
        assert_eq!(single.together, vec![commit.clone()]);
        assert_eq!(single.after, watch(1, 2));
        assert!(single
            .after
            .contains(&FuzzOp::GetRunByRequestKey { session: 1, key: 1 }));
        assert!(single.after.contains(&FuzzOp::ListInputs { session: 1 }));
        let read = FuzzOp::ListRuns { session: 0 };
        let alone = expand(&FuzzStep::Single(read.clone()));
        assert_eq!((alone.together, alone.after), (vec![read], vec![]));
        let delete = FuzzOp::DeleteSession { session: 0 };
        let batch = expand(&FuzzStep::Batch(vec![commit.clone(), delete.clone()]));
        assert_eq!(
            batch.together,
            vec![
                commit,
                delete,
                FuzzOp::GetRunByRequestKey { session: 1, key: 1 },
                FuzzOp::GetCurrentRun { session: 0 },
            ]
        );
        assert_eq!(batch.after.len(), 2 * watch(0, 0).len());
    }

    /// A scenario holding every input parses and replays green on the
    /// memory store: texts YAML cannot hold raw are escaped.
    #[test]
    fn a_scenario_of_every_input_parses_and_passes_on_memory() {
        // Each input committed, read back (listInputs), deleted.
        let program: Vec<FuzzStep> = (0..INPUTS)
            .flat_map(|input| {
                [
                    FuzzStep::Single(FuzzOp::Commit {
                        session: 0,
                        run: 0,
                        expected: None,
                        input,
                        key: Some(0),
                    }),
                    FuzzStep::Single(FuzzOp::DeleteSession { session: 0 }),
                ]
            })
            .collect();
        let program = StoreProgram {
            steps: program,
            long_ids: false,
        };
        let yaml = scenario_yaml(&program, "memory", 1, "");
        let rt = rt();
        assert_eq!(replay(&rt, &yaml, "memory"), RunVerdict::Pass, "{yaml}");
    }

    fn programs(seed: u64, n: usize) -> Vec<Vec<FuzzStep>> {
        use proptest::strategy::ValueTree;
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed));
        let mut runner = TestRunner::new_with_rng(Config::default(), rng);
        (0..n)
            .map(|_| arb_program().new_tree(&mut runner).unwrap().current())
            .collect()
    }

    #[test]
    fn one_seed_generates_the_same_programs() {
        assert_eq!(programs(11, 20), programs(11, 20));
        assert_ne!(programs(11, 20), programs(12, 20));
    }

    /// A store that never answers.
    #[derive(Debug)]
    struct Hanging;

    #[async_trait::async_trait]
    impl Target for Hanging {
        fn level(&self) -> crate::targets::Level {
            crate::targets::Level::Store
        }
        fn describe(&self) -> String {
            "hanging".into()
        }
        async fn health(&self) -> Result<Value, crate::targets::TargetError> {
            Ok(Value::Null)
        }
        async fn store_call(&self, _: &Value) -> Result<Value, crate::targets::TargetError> {
            tokio::time::sleep(std::time::Duration::from_secs(3_600)).await;
            Ok(Value::Null)
        }
    }

    #[test]
    fn a_target_that_times_out_is_a_harness_error_reported_at_once() {
        let rt = rt();
        let mut o = opts("hanging", 500, 1);
        o.call_timeout_ms = 20;
        let started = std::time::Instant::now();
        let outcome = fuzz(&rt, Arc::new(Hanging), &o);
        assert!(
            matches!(&outcome, FuzzOutcome::Error(e) if e.contains("20 ms")),
            "{outcome:?}"
        );
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn sessions_are_namespaced_per_case() {
        let sessions = vec!["ns.3.s0".to_owned(), "ns.3.s1".to_owned()];
        let op = FuzzOp::DeleteSession { session: 1 };
        assert_eq!(op.request(&sessions)["args"]["sessionId"], "ns.3.s1");
    }
}
