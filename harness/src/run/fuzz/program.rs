//! The programs of the store fuzzer (`reqkey fuzz`, `run::fuzz::store`): the tiny
//! domain (two sessions, two keys, three run ids, four statuses, inputs of
//! every JSON shape and kind of text), the operations and steps proptest
//! draws over it, and the reads by other clients every write gets
//! ([`expand`]). Kept apart from the runner so that the runner and the
//! scenario writer (`run::fuzz::scenario`) both read it.

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::run::fuzz::inputs;

/// The tiny domain.
pub const SESSIONS: usize = 2;
const KEYS: [&str; 2] = ["k0", "k1"];
const RUNS: [&str; 3] = ["r0", "r1", "r2"];
/// Inputs: `{"text": "a"}` and `{"text": "b"}` (the common case, so that
/// the same input meets itself), `{"text"}` with every other kind of text,
/// then a value of every JSON shape (`run::fuzz::inputs`).
pub const INPUTS: usize = inputs::TEXT_KINDS + inputs::SHAPES.len();

/// The `i`-th input (modulo [`INPUTS`]).
pub fn input(i: usize) -> Value {
    let i = i % INPUTS;
    if i < inputs::TEXT_KINDS {
        json!({ "text": inputs::text(i) })
    } else {
        inputs::shape(i - inputs::TEXT_KINDS)
    }
}
const STATUSES: [&str; 4] = ["running", "suspended_input", "completed", "failed"];

/// The most steps in one program, and ops in one batch.
pub const MAX_STEPS: usize = 12;
pub const MAX_BATCH: usize = 4;

/// One abstract store operation over the domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuzzOp {
    Commit {
        session: usize,
        run: usize,
        /// `None`: expect no current run.
        expected: Option<usize>,
        input: usize,
        key: Option<usize>,
    },
    GetRun {
        session: usize,
        run: usize,
    },
    GetCurrentRun {
        session: usize,
    },
    ListRuns {
        session: usize,
    },
    GetRunByRequestKey {
        session: usize,
        key: usize,
    },
    ListInputs {
        session: usize,
    },
    SetRunStatus {
        session: usize,
        run: usize,
        status: usize,
    },
    DeleteSession {
        session: usize,
    },
}

impl FuzzOp {
    /// The wire request, with `sessions[i]` as session ids.
    pub fn request(&self, sessions: &[String]) -> Value {
        let sid = |s: &usize| sessions.get(*s).cloned().unwrap_or_default();
        match self {
            FuzzOp::Commit {
                session,
                run,
                expected,
                input,
                key,
            } => {
                let mut start = json!({
                    "sessionId": sid(session),
                    "runId": RUNS[*run],
                    "expectedCurrentRunId": expected.map(|e| RUNS[e]),
                    "input": self::input(*input),
                });
                if let Some(k) = key {
                    start["requestKey"] = json!(KEYS[*k]);
                    // Same key and input, same digest (SPEC 3).
                    start["requestDigest"] = json!(format!("d-{input}"));
                }
                json!({"op": "commitRunStart", "args": {"startRun": start}})
            }
            FuzzOp::GetRun { session, run } => {
                json!({"op": "getRun", "args": {"sessionId": sid(session), "runId": RUNS[*run]}})
            }
            FuzzOp::GetCurrentRun { session } => {
                json!({"op": "getCurrentRun", "args": {"sessionId": sid(session)}})
            }
            FuzzOp::ListRuns { session } => {
                json!({"op": "listRuns", "args": {"sessionId": sid(session)}})
            }
            FuzzOp::GetRunByRequestKey { session, key } => json!({
                "op": "getRunByRequestKey",
                "args": {"sessionId": sid(session), "requestKey": KEYS[*key]}
            }),
            FuzzOp::ListInputs { session } => {
                json!({"op": "listInputs", "args": {"sessionId": sid(session)}})
            }
            FuzzOp::SetRunStatus {
                session,
                run,
                status,
            } => json!({
                "op": "setRunStatus",
                "args": {"sessionId": sid(session), "runId": RUNS[*run], "status": STATUSES[*status]}
            }),
            FuzzOp::DeleteSession { session } => {
                json!({"op": "deleteSession", "args": {"sessionId": sid(session)}})
            }
        }
    }
}

/// One step of a program: an op alone, or a batch released together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FuzzStep {
    Single(FuzzOp),
    Batch(Vec<FuzzOp>),
}

/// An input index: `a` or `b` two times in three, any other text or shape
/// otherwise.
fn arb_input() -> impl Strategy<Value = usize> {
    prop_oneof![2 => 0..2usize, 1 => 2..INPUTS]
}

/// One operation over the tiny domain, every store op weighted so that
/// collisions are common.
pub fn arb_op() -> impl Strategy<Value = FuzzOp> {
    let s = 0..SESSIONS;
    prop_oneof![
        6 => (s.clone(), 0..RUNS.len(), prop::option::weighted(0.6, 0..RUNS.len()), arb_input(), prop::option::weighted(0.7, 0..KEYS.len()))
            .prop_map(|(session, run, expected, input, key)| FuzzOp::Commit { session, run, expected, input, key }),
        1 => (s.clone(), 0..RUNS.len()).prop_map(|(session, run)| FuzzOp::GetRun { session, run }),
        1 => s.clone().prop_map(|session| FuzzOp::GetCurrentRun { session }),
        1 => s.clone().prop_map(|session| FuzzOp::ListRuns { session }),
        2 => (s.clone(), 0..KEYS.len()).prop_map(|(session, key)| FuzzOp::GetRunByRequestKey { session, key }),
        1 => s.clone().prop_map(|session| FuzzOp::ListInputs { session }),
        2 => (s.clone(), 0..RUNS.len(), 0..STATUSES.len()).prop_map(|(session, run, status)| FuzzOp::SetRunStatus { session, run, status }),
        1 => s.prop_map(|session| FuzzOp::DeleteSession { session }),
    ]
}

/// Programs: mostly single ops, sometimes a batch of up to 4. A batch of
/// one runs as a single op: that is what lets shrinking turn a batch whose
/// other ops are irrelevant into a plain sequential step.
pub fn arb_program() -> impl Strategy<Value = Vec<FuzzStep>> {
    arb_program_with(true)
}

/// [`arb_program`], or (`batches` false) sequential programs only: what a
/// test of a sequential defect shrinks to a file that fails the same way
/// on every replay (a batch on an in-process store may never overlap, and
/// a race that did not run is no verdict).
pub fn arb_program_with(batches: bool) -> impl Strategy<Value = Vec<FuzzStep>> {
    let batch_weight = u32::from(batches);
    let step = prop_oneof![
        4 => arb_op().prop_map(FuzzStep::Single),
        batch_weight => prop::collection::vec(arb_op(), 1..=MAX_BATCH).prop_map(|mut ops| {
            if ops.len() == 1 {
                ops.pop().map_or(FuzzStep::Batch(ops), FuzzStep::Single)
            } else {
                FuzzStep::Batch(ops)
            }
        }),
    ];
    prop::collection::vec(step, 1..=MAX_STEPS)
}

impl FuzzOp {
    /// The session a write changes (`None` for a read).
    fn written_session(&self) -> Option<usize> {
        match self {
            FuzzOp::Commit { session, .. }
            | FuzzOp::SetRunStatus { session, .. }
            | FuzzOp::DeleteSession { session } => Some(*session),
            _ => None,
        }
    }

    /// The key a write names (a keyed commit's), if any.
    fn key(&self) -> Option<usize> {
        match self {
            FuzzOp::Commit { key, .. } => *key,
            _ => None,
        }
    }

    /// The run a write names, if any.
    fn run(&self) -> Option<usize> {
        match self {
            FuzzOp::Commit { run, .. } | FuzzOp::SetRunStatus { run, .. } => Some(*run),
            _ => None,
        }
    }
}

/// The reads another client makes of `session` after a write: every
/// read the store protocol has (the current run, the run written or the
/// first, both key holders, the runs and the input log), so a write whose
/// effect one read path misses (a cache, an index, a second copy) shows.
pub fn watch(session: usize, run: usize) -> Vec<FuzzOp> {
    let mut reads = vec![
        FuzzOp::GetCurrentRun { session },
        FuzzOp::GetRun { session, run },
    ];
    reads.extend((0..KEYS.len()).map(|key| FuzzOp::GetRunByRequestKey { session, key }));
    reads.push(FuzzOp::ListRuns { session });
    reads.push(FuzzOp::ListInputs { session });
    reads
}

/// What one step sends: `together` released behind one barrier (one op
/// alone is sent as is), then `after`, one read at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expanded {
    pub together: Vec<FuzzOp>,
    pub after: Vec<FuzzOp>,
}

/// A step with the reads other clients make around its writes (derived,
/// not generated: every write has them, and shrinking keeps them): after
/// a write, [`watch`] of its session; in a batch, beside the writes, one
/// reader per session written (of the key a commit names, else of the
/// current run), racing them.
pub fn expand(step: &FuzzStep) -> Expanded {
    let ops: &[FuzzOp] = match step {
        FuzzStep::Single(op) => std::slice::from_ref(op),
        FuzzStep::Batch(ops) => ops,
    };
    let mut written: Vec<(usize, Option<usize>, usize)> = Vec::new();
    for op in ops {
        if let Some(session) = op.written_session() {
            match written.iter_mut().find(|(s, _, _)| *s == session) {
                Some(w) => w.1 = w.1.or(op.key()),
                None => written.push((session, op.key(), op.run().unwrap_or(0))),
            }
        }
    }
    let mut together = ops.to_vec();
    if matches!(step, FuzzStep::Batch(_)) {
        together.extend(written.iter().map(|&(session, key, _)| match key {
            Some(key) => FuzzOp::GetRunByRequestKey { session, key },
            None => FuzzOp::GetCurrentRun { session },
        }));
    }
    let after = written
        .iter()
        .flat_map(|&(session, _, run)| watch(session, run))
        .collect();
    Expanded { together, after }
}
