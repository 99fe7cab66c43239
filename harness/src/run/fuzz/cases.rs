//! The loop both fuzzers share (`run::fuzz::store` on stores, `run::fuzz::agent`
//! on agent servers): proptest draws programs from one seed, runs each
//! against the target, and shrinks the first that fails; a case that could
//! not be judged (the target did not answer) stops the run with no verdict
//! and is never shrunk. Kept once so that both fuzzers seed, bound and
//! report alike.

use std::fmt::Debug;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};

/// Why a program failed on the target.
#[derive(Debug, Clone)]
pub enum CaseFailure {
    /// The target does not conform (this is what fuzzing looks for).
    Nonconforming(String),
    /// The target could not be reached or timed out: no verdict.
    Harness(String),
}

/// The outcome of a run of cases.
#[derive(Debug, Clone)]
pub enum CasesOutcome<P> {
    Passed,
    /// The first failing program, shrunk, and why it fails.
    Failed {
        program: P,
        reason: String,
        /// Which program (counted from 1) failed first, before shrinking:
        /// the budget that found it.
        found_at: u64,
    },
    /// The target could not be judged.
    Error(String),
}

/// Expands a u64 seed into proptest's 32-byte ChaCha seed.
pub fn seed_bytes(seed: u64) -> [u8; 32] {
    let mut out = [0u8; 32];
    let mut x = seed;
    for chunk in out.chunks_mut(8) {
        // splitmix64
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        chunk.copy_from_slice(&z.to_le_bytes());
    }
    out
}

/// The `count` session ids of program `case` under `namespace`: no two
/// programs of a run share a session.
pub fn case_sessions(namespace: &str, case: u64, count: usize) -> Vec<String> {
    (0..count)
        .map(|s| format!("{namespace}.{case}.s{s}"))
        .collect()
}

/// Runs `cases` programs of `strategy` (seeded by `seed`, shrinking bounded
/// by `max_shrink_iters`) through `one`, which gets the case's number (for
/// fresh session ids, [`case_sessions`]) and the program.
pub fn run_cases<S>(
    cases: u32,
    seed: u64,
    max_shrink_iters: u32,
    strategy: &S,
    one: impl Fn(u64, &S::Value) -> Result<(), CaseFailure>,
) -> CasesOutcome<S::Value>
where
    S: Strategy,
    S::Value: Clone + Debug,
{
    let mut runner = seeded_runner(cases, seed, max_shrink_iters);
    let counter = AtomicU64::new(0);
    let harness_error: Mutex<Option<String>> = Mutex::new(None);
    let last_reason: Mutex<String> = Mutex::new(String::new());
    let found_at: Mutex<Option<u64>> = Mutex::new(None);
    let result = runner.run(strategy, |program| {
        // After a harness error there is no verdict to look for: let
        // proptest wind down (shrinking included) without calling again.
        if harness_error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
        {
            return Ok(());
        }
        let case = counter.fetch_add(1, Ordering::Relaxed);
        match one(case, &program) {
            Ok(()) => Ok(()),
            Err(CaseFailure::Nonconforming(reason)) => {
                found_at
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(case + 1);
                *last_reason.lock().unwrap_or_else(|p| p.into_inner()) = reason.clone();
                Err(TestCaseError::fail(reason))
            }
            Err(CaseFailure::Harness(reason)) => {
                harness_error
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .get_or_insert(reason.clone());
                // Not a verdict: stop without shrinking on it.
                Err(TestCaseError::fail(format!("harness: {reason}")))
            }
        }
    });
    if let Some(e) = harness_error
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take()
    {
        return CasesOutcome::Error(e);
    }
    match result {
        Ok(()) => CasesOutcome::Passed,
        Err(TestError::Fail(reason, program)) => {
            let reason = if reason.message().is_empty() {
                last_reason
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone()
            } else {
                reason.message().to_owned()
            };
            let found_at = found_at
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .unwrap_or(0);
            CasesOutcome::Failed {
                program,
                reason,
                found_at,
            }
        }
        Err(TestError::Abort(reason)) => CasesOutcome::Error(reason.message().to_owned()),
    }
}

/// A proptest runner whose every draw flows from `seed`: `cases`
/// programs, shrinking bounded by `max_shrink_iters` (never by time), no
/// persisted failures.
fn seeded_runner(cases: u32, seed: u64, max_shrink_iters: u32) -> TestRunner {
    let config = Config {
        cases,
        failure_persistence: None,
        max_shrink_iters,
        max_shrink_time: 0,
        max_global_rejects: 0,
        ..Config::default()
    };
    TestRunner::new_with_rng(
        config,
        TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes(seed)),
    )
}

/// The most distinct violations (clause sets) a run shrinks and reports:
/// past it the run stops. Each costs a shrink (up to `max_shrink_iters`
/// programs) and a replay; sixteen is more than any variant of the project
/// shows and keeps a badly broken target's pass within minutes.
pub const MAX_DISTINCT_VIOLATIONS: usize = 16;

/// One distinct violation a run found: its program shrunk among the
/// programs failing on the same clauses, and why.
#[derive(Debug, Clone)]
pub struct Found<P> {
    pub program: P,
    pub reason: String,
    /// The clauses blamed ([`blamed_clauses`] of the reason): what makes
    /// this violation distinct from the others.
    pub clauses: Vec<String>,
    /// Which program (counted from 1) showed it first, before shrinking.
    pub found_at: u64,
}

/// The outcome of [`run_cases_all`].
#[derive(Debug, Clone)]
pub enum AllOutcome<P, R> {
    /// Every violation shrunk within the budget (none: passed), in the
    /// order found, each with what `prove` said of it.
    Done(Vec<(Found<P>, R)>),
    /// A program could not be judged after violations were proven: they
    /// stand (a proven violation is never turned into no verdict), and
    /// the run stopped there for the reason given.
    Stopped(Vec<(Found<P>, R)>, String),
    /// The target could not be judged, and nothing was proven before.
    Error(String),
}

/// Reproductions tried per set of clauses: a set whose shrunk program did
/// not replay red is shrunk again from the next program failing on it, at
/// most this many times in all.
pub const MAX_TRIES_PER_VIOLATION: u32 = 3;

/// Failing programs in a row that bring no new set of clauses after which
/// the run stops: a target failing most programs on the clauses already
/// found (a race in every burst) would otherwise have every one of its
/// failures blamed by counterfactual (up to 171 bounded searches each) for
/// nothing new. The report says how many programs were judged.
pub const MAX_FAILURES_WITHOUT_NEWS: u64 = 16;

/// Whether two sets of clauses blamed are the same set (in any order).
pub fn same_set(a: &[String], b: &[String]) -> bool {
    a.len() == b.len() && a.iter().all(|c| b.contains(c))
}

/// The clauses a failure's reason blames: the first bracketed list of
/// clause ids of spec/SPEC.md in it (`step 3: [idem.lock.held] ...`,
/// `[a, b]`; text in brackets that is not a clause is skipped), or, where
/// none is named, the reason's first 80 characters (so two unnamed
/// failures are told apart by what they say).
pub fn blamed_clauses(reason: &str) -> Vec<String> {
    let is_clause = |s: &str| reqkey_model::clauses::find(s).is_some();
    let mut rest = reason;
    while let Some(open) = rest.find('[') {
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else { break };
        // SPEC's own `[[id]]` spelling is read as `[id]`.
        let inside: Vec<String> = after[..close]
            .split([',', '+'])
            .map(|c| c.trim().trim_start_matches('['))
            .map(str::to_owned)
            .collect();
        if inside.iter().all(|c| is_clause(c)) {
            // As the model wrote them (its first is the one it names).
            let mut set: Vec<String> = Vec::new();
            for c in inside {
                if !set.contains(&c) {
                    set.push(c);
                }
            }
            return set;
        }
        rest = &after[close..];
    }
    vec![reason.chars().take(80).collect()]
}

fn sorted(set: &[String]) -> Vec<String> {
    let mut s = set.to_vec();
    s.sort();
    s
}

/// Like [`run_cases`], but goes on after a failing program: `cases`
/// programs are judged (each once, the same programs `run_cases` draws from
/// the seed, in the same order). The first program failing on a new set of
/// clauses ([`blamed_clauses`]) is shrunk among the programs failing on the
/// same clauses and handed to `prove` (which replays it: `(true, _)` when
/// it reproduced). A set proved, or tried [`MAX_TRIES_PER_VIOLATION`]
/// times, is not shrunk again: later programs failing on it are counted
/// and go on. The run stops at [`MAX_DISTINCT_VIOLATIONS`] distinct sets,
/// or after [`MAX_FAILURES_WITHOUT_NEWS`] failing programs in a row that
/// brought no new set. The shrinking of all sets together runs at most
/// `cases` programs: the pass costs at most twice its budget in programs
/// (a candidate past that bound is not run, so the shrink keeps the
/// smallest program found so far).
/// `known` are sets found before (the battery's) with whether they were
/// proved.
pub fn run_cases_all<S, R>(
    cases: u32,
    seed: u64,
    max_shrink_iters: u32,
    strategy: &S,
    known: &[(Vec<String>, bool)],
    one: impl Fn(u64, &S::Value) -> Result<(), CaseFailure>,
    mut prove: impl FnMut(&Found<S::Value>) -> (bool, R),
) -> AllOutcome<S::Value, R>
where
    S: Strategy,
    S::Value: Clone + Debug,
{
    use std::cell::RefCell;
    use std::collections::BTreeMap;
    let mut runner = seeded_runner(cases, seed, max_shrink_iters);
    // Every call of `one` gets a fresh case number (fresh ids); `judged`
    // counts the generated programs (not the shrinking's).
    let calls = RefCell::new(0u64);
    let judged = RefCell::new(0u64);
    // Each set of clauses met: tries so far, and whether one reproduced.
    let sets: RefCell<BTreeMap<Vec<String>, (u32, bool)>> = RefCell::new(
        known
            .iter()
            .map(|(set, proved)| (sorted(set), (1, *proved)))
            .collect(),
    );
    let settled = |set: &Vec<String>, sets: &BTreeMap<Vec<String>, (u32, bool)>| {
        sets.get(set)
            .is_some_and(|(tries, proved)| *proved || *tries >= MAX_TRIES_PER_VIOLATION)
    };
    // While a program is shrunk: the clauses it fails on, its reason, and
    // the smallest program failing on them so far.
    type Shrinking<P> = Option<(Vec<String>, String, P)>;
    let shrinking: RefCell<Shrinking<S::Value>> = RefCell::new(None);
    let harness_error: RefCell<Option<String>> = RefCell::new(None);
    // Failing programs in a row with no new set; programs run to shrink.
    let stale = RefCell::new(0u64);
    let shrink_runs = RefCell::new(0u64);
    let done =
        || *judged.borrow() >= u64::from(cases) || *stale.borrow() >= MAX_FAILURES_WITHOUT_NEWS;
    let mut found = Vec::new();
    loop {
        let result = runner.run(strategy, |program| {
            if harness_error.borrow().is_some() {
                return Ok(());
            }
            let fresh = shrinking.borrow().is_none();
            if fresh && done() {
                return Ok(());
            }
            if !fresh {
                let mut runs = shrink_runs.borrow_mut();
                if *runs >= u64::from(cases) {
                    return Ok(());
                }
                *runs += 1;
            }
            let case = {
                let mut c = calls.borrow_mut();
                *c += 1;
                *c - 1
            };
            if fresh {
                *judged.borrow_mut() += 1;
            }
            match one(case, &program) {
                Ok(()) => Ok(()),
                Err(CaseFailure::Nonconforming(reason)) => {
                    let clauses = blamed_clauses(&reason);
                    let key = sorted(&clauses);
                    let mut shrinking = shrinking.borrow_mut();
                    match shrinking.as_mut() {
                        Some((set, last, smallest)) if same_set(set, &clauses) => {
                            *last = reason.clone();
                            *smallest = program.clone();
                            Err(TestCaseError::fail(reason))
                        }
                        // Shrinking another violation: this program is
                        // not one of its reproductions.
                        Some(_) => Ok(()),
                        None if settled(&key, &sets.borrow()) => {
                            *stale.borrow_mut() += 1;
                            Ok(())
                        }
                        None if !sets.borrow().contains_key(&key)
                            && sets.borrow().len() >= MAX_DISTINCT_VIOLATIONS =>
                        {
                            *stale.borrow_mut() += 1;
                            Ok(())
                        }
                        None => {
                            if !sets.borrow().contains_key(&key) {
                                *stale.borrow_mut() = 0;
                            }
                            sets.borrow_mut().entry(key.clone()).or_insert((0, false)).0 += 1;
                            *shrinking = Some((clauses, reason.clone(), program.clone()));
                            Err(TestCaseError::fail(reason))
                        }
                    }
                }
                Err(CaseFailure::Harness(reason)) => {
                    harness_error.borrow_mut().get_or_insert(reason.clone());
                    Err(TestCaseError::fail(format!("harness: {reason}")))
                }
            }
        });
        if let Some(e) = harness_error.borrow_mut().take() {
            // A violation being shrunk when the error came is proven by
            // the smallest program failing on it so far.
            if let Some((clauses, reason, program)) = shrinking.borrow_mut().take() {
                let f = Found {
                    program,
                    reason,
                    clauses,
                    found_at: *judged.borrow(),
                };
                let r = prove(&f).1;
                found.push((f, r));
            }
            return stopped(found, e);
        }
        let shrunk = shrinking.borrow_mut().take();
        match result {
            Ok(()) => break,
            Err(TestError::Fail(_, program)) => {
                if let Some((clauses, reason, _)) = shrunk {
                    let f = Found {
                        program,
                        reason,
                        clauses,
                        found_at: *judged.borrow(),
                    };
                    let (proved, r) = prove(&f);
                    if proved {
                        if let Some(entry) = sets.borrow_mut().get_mut(&sorted(&f.clauses)) {
                            entry.1 = true;
                        }
                    }
                    found.push((f, r));
                }
                if done() {
                    break;
                }
            }
            Err(TestError::Abort(reason)) => return stopped(found, reason.message().to_owned()),
        }
    }
    AllOutcome::Done(found)
}

/// The outcome of a run stopped by `error`: no verdict, unless violations
/// were proven before it.
fn stopped<P, R>(found: Vec<(Found<P>, R)>, error: String) -> AllOutcome<P, R> {
    if found.is_empty() {
        AllOutcome::Error(error)
    } else {
        AllOutcome::Stopped(found, error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// Fails every multiple of 7 on one clause and of 11 on another.
    fn verdict(x: u32) -> Result<(), CaseFailure> {
        match (x % 7, x % 11) {
            (0, _) => Err(CaseFailure::Nonconforming(format!("[idem.lock.held] {x}"))),
            (_, 0) => Err(CaseFailure::Nonconforming(format!(
                "[idem.replay.header] {x}"
            ))),
            _ => Ok(()),
        }
    }

    fn all(seed: u64, prove: bool) -> (Vec<(u32, Vec<String>)>, u64) {
        let fresh = Cell::new(0u64);
        let outcome = run_cases_all(
            64,
            seed,
            64,
            &(1u32..10_000),
            &[],
            |_, x| {
                fresh.set(fresh.get() + 1);
                verdict(*x)
            },
            |_| (prove, ()),
        );
        let AllOutcome::Done(found) = outcome else {
            panic!("no verdict: {outcome:?}")
        };
        let found = found
            .into_iter()
            .map(|(f, ())| (f.program, f.clauses))
            .collect();
        (found, fresh.get())
    }

    #[test]
    fn every_distinct_violation_is_shrunk_once_and_the_run_goes_on_deterministically() {
        let (found, _) = all(5, true);
        let sets: Vec<&Vec<String>> = found.iter().map(|(_, c)| c).collect();
        assert_eq!(sets.len(), 2, "{found:?}");
        assert!(sets.contains(&&vec!["idem.lock.held".to_owned()]));
        assert!(sets.contains(&&vec!["idem.replay.header".to_owned()]));
        // Each shrunk among the programs failing on its own clause.
        for (x, c) in &found {
            assert!(verdict(*x).is_err());
            assert_eq!(&blamed_clauses(&format!("{:?}", verdict(*x))), c);
        }
        assert_eq!(all(5, true).0, found, "one seed, one outcome");
    }

    #[test]
    fn a_program_not_judged_after_a_proven_violation_stops_the_run_and_keeps_it() {
        // Multiples of 7 fail; once one was found, the next program
        // cannot be judged: the violation stands, the reason is kept.
        let seen = Cell::new(false);
        let outcome = run_cases_all(
            64,
            5,
            64,
            &(1u32..10_000),
            &[],
            |_, x| {
                if seen.get() {
                    return Err(CaseFailure::Harness("the target hung".into()));
                }
                match verdict(*x) {
                    Err(CaseFailure::Nonconforming(r)) if r.contains("lock") => {
                        seen.set(true);
                        Err(CaseFailure::Nonconforming(r))
                    }
                    _ => Ok(()),
                }
            },
            |_| (true, ()),
        );
        match outcome {
            AllOutcome::Stopped(found, why) => {
                assert_eq!(found.len(), 1);
                assert_eq!(found[0].0.clauses, ["idem.lock.held"]);
                assert!(why.contains("the target hung"), "{why}");
            }
            other => panic!("expected the violation kept: {other:?}"),
        }
        // With nothing proven before it, the same error is no verdict.
        let outcome = run_cases_all(
            64,
            5,
            64,
            &(1u32..10_000),
            &[],
            |_, _| Err(CaseFailure::Harness("the target hung".into())),
            |_| (true, ()),
        );
        assert!(
            matches!(outcome, AllOutcome::Error(ref e) if e.contains("hung")),
            "{outcome:?}"
        );
    }

    #[test]
    fn a_violation_not_reproduced_is_tried_again_at_most_three_times() {
        let (found, _) = all(5, false);
        let tries = |set: &str| found.iter().filter(|(_, c)| c == &[set]).count();
        // Multiples of 7 are common enough to be tried the most times.
        assert_eq!(
            tries("idem.lock.held"),
            MAX_TRIES_PER_VIOLATION as usize,
            "{found:?}"
        );
        assert!(tries("idem.replay.header") <= MAX_TRIES_PER_VIOLATION as usize);
        assert!(tries("idem.replay.header") >= 1, "{found:?}");
    }

    #[test]
    fn the_clauses_blamed_are_the_first_bracketed_clause_ids() {
        assert_eq!(
            blamed_clauses("step 2: [idem.lock.held] a duplicate ran [1]"),
            vec!["idem.lock.held"]
        );
        assert_eq!(
            blamed_clauses("at [x] step: [idem.replay.header, idem.effect.at-most-once] m"),
            vec!["idem.replay.header", "idem.effect.at-most-once"]
        );
        // No clause named: told apart by what it says.
        assert_eq!(blamed_clauses("[not.a-clause] m"), vec!["[not.a-clause] m"]);
    }
}
