//! Why a failing subset is not linearizable, named the way Elle names
//! anomalies: the first answer no order can give, what the spec answers
//! in its place, and the rule of SPEC 4 that forbids it, with its clause.
//!
//! # Why
//!
//! The search ([`super::search`]) finds that no order exists and the
//! shrinking ([`super::minimize`]) cuts the history to a small failing
//! subset, but "not linearizable" does not tell a store author which rule
//! their store broke; a store without the key holder rule was told
//! `[[store.commit.atomic]]`. This pass replays the subset through the
//! spec in every order real time allows, keeps the order that explains
//! the most answers, and names the answer that order cannot give and the
//! rule whose decision differs.
//!
//! # Bounded, on the typed operations
//!
//! It once replayed the subset's operations as JSON values, read again
//! from the file, cloning the whole spec state at every operation of an
//! order and recursing once per operation: a sequential history of
//! 10,000 commits (a failing subset of 10,000 writes, its one order)
//! took 22 GB and overflowed the stack. Now it walks the typed
//! operations the check already holds with the search's own in-place
//! evaluation and undo ([`super::search::evaluate`]): one state, an
//! explicit stack of a few words an operation, the operations left held
//! in two ordered sets. Its steps are bounded by [`MAX_EXPLAIN_STEPS`]
//! plus twice the subset (so the one order of a sequential subset is
//! always replayed whole), and it asks the caller's memory gauge every
//! [`MEMORY_CHECK_STEPS`]; past the bound, or when no single rule
//! decides, it says nothing and the caller names SPEC 4's atomicity
//! clauses ([`atomicity_clauses`]).

use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;
use std::ops::Bound;

use reqkey_model::seq::{answer_to_wire, SessionState, StoreOp, StoreReply};
use reqkey_model::{CommitOutcome, DeleteResult, RunStartRejection, StoreError};

use super::item::Item;
use super::prepare::{Observed, Prepared};
use super::search::{evaluate, undo, Undo, MEMORY_CHECK_STEPS};
use super::timeline::{listed, summarize_answer, truncate};

/// The most steps (operations tried at a configuration) one explanation
/// takes beyond replaying its subset twice: a minimal subset has a handful
/// of concurrent operations; this bounds a larger one.
pub const MAX_EXPLAIN_STEPS: u64 = 200_000;

/// The longest summary of a request or an answer an anomaly quotes (a
/// `listRuns` answer of a long session is cut there).
const MAX_SUMMARY_CHARS: usize = 300;

/// The operations an anomaly names before the one it explains, at most.
const MAX_BEFORE_SHOWN: usize = 12;

/// The first answer no order can give, and the rule that forbids it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Anomaly {
    /// Its index in the history.
    pub index: usize,
    /// The operations linearized before it, by index, in that order.
    pub before: Vec<usize>,
    /// The operation, summarized (`commitRunStart r2 exp=null key=k`).
    pub request: String,
    /// What it answered, summarized.
    pub observed: String,
    /// What the spec answers there instead, summarized.
    pub spec: String,
    /// The clause of the rule (`store.commit.key-holder`).
    pub clause: &'static str,
    /// The rule in words.
    pub rule: &'static str,
}

impl std::fmt::Display for Anomaly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let before = match self.before.len() {
            0 => "first, before any other".to_owned(),
            n if n <= MAX_BEFORE_SHOWN => format!("after {}", listed(&self.before, n)),
            n => {
                // The last ones are those next to it.
                let tail = &self.before[n - MAX_BEFORE_SHOWN / 2..];
                format!(
                    "after {n} operations (#{} first; the last {}: {})",
                    self.before[0],
                    tail.len(),
                    listed(tail, tail.len())
                )
            }
        };
        write!(
            f,
            "the first answer no order can give: #{} {} answered {}; placed {before} (the order that explains the most answers), the spec answers {} [[{}]]",
            self.index, self.request, self.observed, self.spec, self.clause
        )
    }
}

/// What [`explain`] found, before the operation's own text is read
/// (the caller reads it for [`DeadEnd::anomaly`]).
#[derive(Debug)]
pub(super) struct DeadEnd {
    /// The operation no order can answer as recorded (an index into the
    /// prepared operations given).
    pub(super) at: usize,
    pub(super) before: Vec<usize>,
    spec: String,
    clause: &'static str,
    rule: &'static str,
}

impl DeadEnd {
    /// The anomaly, its indices mapped by `index` (to the history's) and
    /// the operation's request and answer summarized from its text.
    pub(super) fn anomaly(
        self,
        index: impl Fn(usize) -> usize,
        request: &str,
        observed: &str,
    ) -> Anomaly {
        Anomaly {
            index: index(self.at),
            before: self.before.iter().map(|&b| index(b)).collect(),
            request: truncate(request, MAX_SUMMARY_CHARS),
            observed: truncate(observed, MAX_SUMMARY_CHARS),
            spec: self.spec,
            clause: self.clause,
            rule: self.rule,
        }
    }
}

/// One explicit frame of the walk: a configuration and where its
/// iteration over the callable operations is.
struct Frame {
    /// Only an operation invoked by the first return among those left
    /// may come next.
    first_end: u64,
    /// The last candidate tried, `(invoke_ns, position)`.
    last: Option<(u64, usize)>,
    /// The operation linearized to reach this configuration, and how to
    /// take it back.
    entered: Option<(usize, Undo)>,
    /// The first-returning candidate whose answer the spec does not give
    /// here, `(end_ns, position)`.
    blocked: Option<(u64, usize)>,
}

/// The first answer no order of `subset` (indices into `prepared`, all of
/// one session; `in_flight` counted unanswered) can give, or `None` when
/// an order explains every answer, the steps run out, or an operation
/// cannot be replayed (a commit the spec refuses to parse).
pub(super) fn explain(
    prepared: &[Prepared],
    subset: &[usize],
    in_flight: &[usize],
    over_memory: Option<fn() -> bool>,
) -> Option<DeadEnd> {
    let flying: HashSet<usize> = in_flight.iter().copied().collect();
    let items: Vec<Item<'_>> = subset
        .iter()
        .map(|&i| Item::of(prepared, i, flying.contains(&i)))
        .collect();
    drop(flying);
    let n = items.len();
    let mut by_call: BTreeSet<(u64, usize)> = (0..n).map(|k| (items[k].invoke_ns, k)).collect();
    let mut by_end: BTreeSet<(u64, usize)> = (0..n).map(|k| (items[k].end_ns, k)).collect();
    let first_end = |by_end: &BTreeSet<(u64, usize)>| by_end.first().map_or(u64::MAX, |e| e.0);
    let mut budget = MAX_EXPLAIN_STEPS.saturating_add(2 * n as u64);
    let mut state = SessionState::default();
    let mut fp: u128 = 0;
    let mut path: Vec<usize> = Vec::new();
    let mut best: Option<(Vec<usize>, usize)> = None;
    let mut stack = vec![Frame {
        first_end: first_end(&by_end),
        last: None,
        entered: None,
        blocked: None,
    }];
    if n == 0 {
        return None;
    }
    while let Some(top) = stack.last_mut() {
        let from = match top.last {
            None => Bound::Unbounded,
            Some(l) => Bound::Excluded(l),
        };
        let next = by_call
            .range((from, Bound::Unbounded))
            .next()
            .copied()
            .filter(|&(invoke, _)| invoke <= top.first_end);
        if let Some((invoke, k)) = next {
            top.last = Some((invoke, k));
            budget = budget.checked_sub(1)?;
            if budget % MEMORY_CHECK_STEPS == 0 && over_memory.is_some_and(|over| over()) {
                return None;
            }
            match evaluate(&mut state, &mut fp, &items[k]) {
                None => {
                    let candidate = (items[k].end_ns, k);
                    if top.blocked.is_none_or(|b| candidate < b) {
                        top.blocked = Some(candidate);
                    }
                }
                Some(taken) => {
                    by_call.remove(&(invoke, k));
                    by_end.remove(&(items[k].end_ns, k));
                    path.push(k);
                    if by_call.is_empty() {
                        // Every answer explained: linearizable after all.
                        return None;
                    }
                    stack.push(Frame {
                        first_end: first_end(&by_end),
                        last: None,
                        entered: Some((k, taken)),
                        blocked: None,
                    });
                }
            }
            continue;
        }
        // Every candidate of this configuration tried.
        let Some(frame) = stack.pop() else { break };
        if let Some(blocked) = frame.blocked {
            if best.as_ref().is_none_or(|(b, _)| path.len() > b.len()) {
                // Copying the order costs a step per 32 of its operations.
                budget = budget.checked_sub(path.len() as u64 / 32)?;
                best = Some((path.clone(), blocked.1));
            }
        }
        if let Some((k, taken)) = frame.entered {
            undo(&mut state, taken);
            path.pop();
            by_call.insert((items[k].invoke_ns, k));
            by_end.insert((items[k].end_ns, k));
        }
    }
    drop((by_call, by_end, path, stack, state));
    let (before, k) = best?;
    // The state the best order leaves, replayed once (answers not asked:
    // each was the spec's on that order), then the spec's answer there.
    let mut state = SessionState::default();
    for &b in &before {
        let mut forced = items[b];
        forced.in_flight = true;
        evaluate(&mut state, &mut fp, &forced)?;
    }
    let item = &items[k];
    let op = item.prepared.op.as_ref()?;
    let spec = spec_answer(&mut state, item.prepared)?;
    let observed = match item.observed() {
        Observed::Answer(Err(e)) => Some(e),
        _ => None,
    };
    let (clause, rule) = rule_of(op, &spec, observed);
    let mut summary = summarize_answer(&answer_to_wire(&spec));
    if summary.chars().count() > MAX_SUMMARY_CHARS {
        summary = truncate(&summary, MAX_SUMMARY_CHARS);
    }
    Some(DeadEnd {
        at: subset[k],
        before: before.iter().map(|&b| subset[b]).collect(),
        spec: summary,
        clause,
        rule,
    })
}

/// The spec's answer to `p` on `state` (its one session), as
/// `SeqStore::apply` gives it; `None` for a commit that did not prepare.
fn spec_answer(state: &mut SessionState, p: &Prepared) -> Option<Result<StoreReply, StoreError>> {
    Some(match p.op.as_ref()? {
        StoreOp::CommitRunStart(_) => state
            .commit_prepared(p.commit.as_deref()?)
            .map(StoreReply::Commit),
        StoreOp::GetRun(a) => Ok(StoreReply::Run(state.run(&a.run_id).cloned())),
        StoreOp::GetCurrentRun(_) => Ok(StoreReply::Run(state.current_run().cloned())),
        StoreOp::GetRunByRequestKey(a) => Ok(StoreReply::Run(
            state.run_by_request_key(&a.request_key).cloned(),
        )),
        StoreOp::ListRuns(_) => Ok(StoreReply::Runs(state.runs().cloned().collect())),
        StoreOp::ListInputs(_) => Ok(StoreReply::Inputs(state.inputs())),
        StoreOp::SetRunStatus(a) if state.is_empty() => {
            Err(StoreError::NotFound(format!("no session {}", a.session_id)))
        }
        StoreOp::SetRunStatus(a) => state
            .set_run_status(&a.run_id, a.status)
            .map(|r| StoreReply::Run(Some(r))),
        StoreOp::DeleteSession(_) => Ok(StoreReply::Deleted(DeleteResult {
            deleted: !state.is_empty(),
        })),
    })
}

/// The rule whose decision differs between the spec's answer and the
/// observed one (`observed`: its error, if it was one), for `op`.
fn rule_of(
    op: &StoreOp,
    spec: &Result<StoreReply, StoreError>,
    observed: Option<&StoreError>,
) -> (&'static str, &'static str) {
    let rejected = |r: Option<&StoreError>| match r {
        Some(StoreError::RunStartRejected(why)) => Some(why.cause()),
        _ => None,
    };
    let either = |cause: &str| {
        rejected(spec.as_ref().err()) == Some(cause) || rejected(observed) == Some(cause)
    };
    let key_taken = RunStartRejection::RequestKeyTaken {
        existing_run_id: String::new(),
    }
    .cause();
    let cas = RunStartRejection::CasMismatch {
        current_run_id: None,
    }
    .cause();
    let conflict = RunStartRejection::RunIdConflict {
        existing_run_id: String::new(),
    }
    .cause();
    match op {
        StoreOp::CommitRunStart(_) if either(key_taken) => (
            "store.commit.key-holder",
            "the key holder rule: a commit whose key another run of the session holds is refused with request_key_taken, and one whose key no run holds is not",
        ),
        StoreOp::CommitRunStart(_) if either(conflict) => (
            "store.commit.run-id-conflict",
            "the same-runId rule: a commit under an existing run id with a different digest is refused with run_id_conflict",
        ),
        StoreOp::CommitRunStart(_) if either(cas) => (
            "store.commit.cas",
            "the compare-and-set rule: a commit whose expected current run is not the session's current run is refused with cas_mismatch",
        ),
        StoreOp::CommitRunStart(_)
            if matches!(spec, Ok(StoreReply::Commit(c)) if c.outcome == CommitOutcome::Replayed) =>
        {
            (
                "store.commit.replay",
                "the replay rule: a commit repeating an existing run's id and digest is replayed and writes nothing",
            )
        }
        StoreOp::CommitRunStart(_) => (
            "store.commit.atomic",
            "the commit is one atomic step: its answer reflects every commit before it",
        ),
        StoreOp::SetRunStatus(_) => (
            "store.write.status-finished-refuses",
            "a finished run refuses every status change, and a live one takes it",
        ),
        StoreOp::DeleteSession(_) => (
            "store.delete-session.once",
            "a session is deleted once: a second delete answers deleted: false",
        ),
        StoreOp::GetRun(_) => (
            "store.reads.get-run",
            "getRun reads the run as every write before it left it",
        ),
        StoreOp::GetCurrentRun(_) => (
            "store.reads.current-run",
            "getCurrentRun reads the run the last commit made current",
        ),
        StoreOp::ListRuns(_) => (
            "store.reads.list-runs-order",
            "listRuns reads every run of the session, in start order",
        ),
        StoreOp::GetRunByRequestKey(_) => (
            "store.reads.by-key",
            "getRunByRequestKey reads the one run that holds the key",
        ),
        StoreOp::ListInputs(_) => (
            "store.reads.list-inputs",
            "listInputs reads the input of every started run, in order",
        ),
    }
}

/// The clauses a failing subset breaks when no single rule explains it:
/// SPEC 4's "one atomic step" of each kind of write in it, or
/// `wire.store.concurrent` when it has none.
pub(super) fn atomicity_clauses(prepared: &[Prepared], subset: &[usize]) -> Vec<&'static str> {
    let mut clauses: Vec<&'static str> = Vec::new();
    for &i in subset {
        let clause = match prepared[i].op.as_ref() {
            Some(StoreOp::CommitRunStart(_)) => "store.commit.atomic",
            Some(StoreOp::SetRunStatus(_)) => "store.set-run-status.atomic",
            Some(StoreOp::DeleteSession(_)) => "store.delete-session.atomic",
            _ => continue,
        };
        if !clauses.contains(&clause) {
            clauses.push(clause);
        }
    }
    if clauses.is_empty() {
        clauses.push("wire.store.concurrent");
    }
    clauses
}

/// `[[a]], [[b]]`.
pub fn clause_list(clauses: &[&str]) -> String {
    let mut out = String::new();
    for (k, c) in clauses.iter().enumerate() {
        let sep = if k == 0 { "" } else { ", " };
        let _ = write!(out, "{sep}[[{c}]]");
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::super::prepare::prepare;
    use super::super::types::Operation;
    use super::*;
    use serde_json::{json, Value};

    fn commit(client: &str, run: &str, at: u64, answer: Value) -> Operation {
        Operation {
            client: client.into(),
            request: json!({"op": "commitRunStart", "args": {"startRun": {
                "sessionId": "s", "runId": run,
                "input": {"text": run}, "requestKey": "k", "requestDigest": "d"}}}),
            invoke_ns: at,
            return_ns: at + 10,
            answer: Some(answer),
        }
    }

    fn started(run: &str, seq: u64) -> Value {
        json!({"ok": {"outcome": "started", "run": {"sessionId": "s", "runId": run,
            "status": "running", "startSequence": seq, "requestKey": "k", "requestDigest": "d"}}})
    }

    fn explained(ops: &[Operation]) -> Option<DeadEnd> {
        let prepared: Vec<Prepared> = ops.iter().map(prepare).collect();
        let all: Vec<usize> = (0..ops.len()).collect();
        explain(&prepared, &all, &[], None)
    }

    #[test]
    fn two_winners_of_one_key_break_the_key_holder_rule() {
        // Sequential: r1 started, then r2 with the same key also started.
        let ops = [
            commit("a", "r1", 0, started("r1", 1)),
            commit("b", "r2", 100, started("r2", 2)),
        ];
        let found = explained(&ops).unwrap();
        assert_eq!((found.at, found.before.clone()), (1, vec![0]));
        assert_eq!(found.clause, "store.commit.key-holder");
        assert!(found.spec.contains("request_key_taken"), "{}", found.spec);
        let a = found.anomaly(|i| i + 4, "commitRunStart r2", "ok started");
        assert_eq!((a.index, a.before.clone()), (5, vec![4]));
        assert!(a.to_string().contains("[[store.commit.key-holder]]"));
    }

    #[test]
    fn two_keyless_starts_from_no_current_run_break_the_cas_rule() {
        let keyless = |client: &str, run: &str, at: u64| Operation {
            client: client.into(),
            request: json!({"op": "commitRunStart", "args": {"startRun": {
                "sessionId": "s", "runId": run, "input": {"text": run}}}}),
            invoke_ns: at,
            return_ns: at + 10,
            answer: Some(
                json!({"ok": {"outcome": "started", "run": {"sessionId": "s",
                "runId": run, "status": "running", "startSequence": 1}}}),
            ),
        };
        let found = explained(&[keyless("a", "r1", 0), keyless("b", "r2", 100)]).unwrap();
        assert_eq!((found.at, found.clause), (1, "store.commit.cas"));
        assert!(found.spec.contains("cas_mismatch"), "{}", found.spec);
    }

    #[test]
    fn a_linearizable_subset_has_no_anomaly() {
        let taken = json!({"error": {"kind": "run_start_rejected", "cause": "request_key_taken",
            "message": "m", "details": {"existingRunId": "r1"}}});
        let ops = [
            commit("a", "r1", 0, started("r1", 1)),
            commit("b", "r2", 100, taken),
        ];
        assert!(explained(&ops).is_none());
    }

    /// Issue 58: a sequential subset of 20,000 writes (one order) is
    /// explained by one replay: the last answer, after every other.
    /// (It once recursed once per operation, cloning the state each time.)
    #[test]
    fn a_long_sequential_subset_is_explained_in_one_replay() {
        let n = 20_000u64;
        let ops: Vec<Operation> = (0..n)
            .map(|i| {
                let run = format!("r{i}");
                let expected = if i == 0 {
                    Value::Null
                } else {
                    json!(format!("r{}", i - 1))
                };
                let seq = if i == n - 1 { i + 7 } else { i + 1 };
                Operation {
                    client: "c".into(),
                    request: json!({"op": "commitRunStart", "args": {"startRun": {
                        "sessionId": "s", "runId": run, "expectedCurrentRunId": expected,
                        "input": {"text": "x"}}}}),
                    invoke_ns: 10 * i,
                    return_ns: 10 * i + 5,
                    answer: Some(
                        json!({"ok": {"outcome": "started", "run": {"sessionId": "s",
                        "runId": run, "status": "running", "startSequence": seq}}}),
                    ),
                }
            })
            .collect();
        let found = explained(&ops).unwrap();
        assert_eq!(found.at, (n - 1) as usize);
        assert_eq!(found.before.len(), (n - 1) as usize);
        assert_eq!(found.clause, "store.commit.atomic");
        let a = found.anomaly(|i| i, "commitRunStart", "ok");
        let shown = a.to_string();
        assert!(shown.contains("after 19999 operations (#0 first; the last 6: #19993, #19994, #19995, #19996, #19997, #19998)"), "{shown}");
        assert!(shown.len() < 1_000, "{shown}");
    }
}
