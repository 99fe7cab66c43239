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
    /// `op`'s request with the `how`-th of [`SPELLED`]: an argument of
    /// another JSON type or spelling.
    Spelled {
        op: Box<FuzzOp>,
        how: usize,
    },
    /// A commit whose input is of the `size`-th of [`SIZES`].
    Sized {
        session: usize,
        run: usize,
        expected: Option<usize>,
        key: Option<usize>,
        size: usize,
    },
}

/// One way of writing a request's arguments otherwise: another JSON type
/// or spelling of one argument, or an id past its limit. The spec's own
/// parser (`StoreOp::from_wire`) says what each is: most are
/// `invalid_argument` (SPEC 6), the input's numbers respelt are the same
/// input (SPEC 3).
#[derive(Debug, Clone, Copy)]
pub struct ArgSpelling {
    pub name: &'static str,
    apply: fn(&mut Value),
}

/// The argument at `path` (under `args` or `args.startRun`), if present.
fn arg<'a>(request: &'a mut Value, name: &str) -> Option<&'a mut Value> {
    let at = if request["args"].get("startRun").is_some() {
        format!("/args/startRun/{name}")
    } else {
        format!("/args/{name}")
    };
    request.pointer_mut(&at)
}

fn set(request: &mut Value, name: &str, to: Value) {
    if let Some(v) = arg(request, name) {
        *v = to;
    }
}

fn respell(request: &mut Value, name: &str, how: fn(&str) -> String) {
    if let Some(v) = arg(request, name) {
        if let Some(text) = v.as_str() {
            *v = Value::String(how(text));
        }
    }
}

fn capitalized(t: &str) -> String {
    let mut c = t.chars();
    c.next()
        .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
        .unwrap_or_default()
}

/// The SPEC 1 and 2 limits, one character past.
fn past_limit(t: &str, limit: usize) -> String {
    let mut out = t.to_owned();
    while out.len() <= limit {
        out.push('x');
    }
    out
}

pub const SPELLED: [ArgSpelling; 14] = [
    ArgSpelling {
        name: "status in another letter case (Completed)",
        apply: |r| respell(r, "status", capitalized),
    },
    ArgSpelling {
        name: "status in capitals (COMPLETED)",
        apply: |r| respell(r, "status", str::to_ascii_uppercase),
    },
    ArgSpelling {
        name: "status as a JSON number",
        apply: |r| set(r, "status", json!(3)),
    },
    ArgSpelling {
        name: "the op's name in another letter case",
        apply: |r| {
            if let Some(op) = r.get_mut("op") {
                *op = Value::String(capitalized(op.as_str().unwrap_or_default()));
            }
        },
    },
    ArgSpelling {
        name: "sessionId as a JSON number",
        apply: |r| set(r, "sessionId", json!(7)),
    },
    ArgSpelling {
        name: "runId as a JSON number",
        apply: |r| set(r, "runId", json!(1)),
    },
    ArgSpelling {
        name: "requestKey as a JSON number",
        apply: |r| set(r, "requestKey", json!(0)),
    },
    ArgSpelling {
        name: "requestDigest as a JSON array",
        apply: |r| set(r, "requestDigest", json!(["d"])),
    },
    ArgSpelling {
        name: "expectedCurrentRunId empty",
        apply: |r| set(r, "expectedCurrentRunId", json!("")),
    },
    ArgSpelling {
        name: "sessionId with a blank after it",
        apply: |r| respell(r, "sessionId", |t| format!("{t} ")),
    },
    ArgSpelling {
        name: "sessionId one character past 256",
        apply: |r| respell(r, "sessionId", |t| past_limit(t, 256)),
    },
    ArgSpelling {
        name: "runId and expectedCurrentRunId one character past 256",
        apply: |r| {
            respell(r, "runId", |t| past_limit(t, 256));
            respell(r, "expectedCurrentRunId", |t| past_limit(t, 256));
        },
    },
    ArgSpelling {
        name: "requestKey one character past 128",
        apply: |r| respell(r, "requestKey", |t| past_limit(t, 128)),
    },
    ArgSpelling {
        name: "input's numbers respelt (1 as 1.0; one input, SPEC 3)",
        apply: |r| {
            if let Some(input) = arg(r, "input") {
                let text = inputs::spell(input, inputs::Spelling::Numbers);
                if let Ok(v) = serde_json::from_str(&text) {
                    *input = v;
                }
            }
        },
    },
];

/// What a [`Size`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeOf {
    /// The input's text, in bytes (or, `multibyte` and `chars`, in characters).
    Text,
    /// The whole request, in bytes.
    Request,
}

/// A size a commit's input is made to have: at a common column's limit
/// and one past, or at SPEC 6's 1 MiB body limit and one byte past; in
/// ASCII or in multi-byte text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Size {
    pub of: SizeOf,
    pub bytes: usize,
    pub multibyte: bool,
    /// Counted in characters, not bytes (a `VARCHAR(N)` of MySQL).
    pub chars: bool,
}

const fn size(of: SizeOf, bytes: usize, multibyte: bool, chars: bool) -> Size {
    Size {
        of,
        bytes,
        multibyte,
        chars,
    }
}

/// SPEC 6: a store MAY refuse a request over this (`invalid_argument`).
pub const BODY_LIMIT: usize = 1024 * 1024;

pub const SIZES: [Size; 9] = [
    size(SizeOf::Text, 256, true, true),
    size(SizeOf::Text, 65_535, false, false),
    size(SizeOf::Text, 65_536, false, false),
    size(SizeOf::Text, 65_536, true, false),
    size(SizeOf::Text, 65_536, true, true),
    size(SizeOf::Request, BODY_LIMIT, false, false),
    size(SizeOf::Request, BODY_LIMIT, true, false),
    size(SizeOf::Request, BODY_LIMIT + 1, false, false),
    size(SizeOf::Request, BODY_LIMIT + 1, true, false),
];

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
            FuzzOp::Spelled { op, how } => {
                let mut request = op.request(sessions);
                (SPELLED[how % SPELLED.len()].apply)(&mut request);
                request
            }
            FuzzOp::Sized {
                session,
                run,
                expected,
                key,
                size,
            } => {
                let size = SIZES[size % SIZES.len()];
                let commit = |text: String| {
                    let mut r = FuzzOp::Commit {
                        session: *session,
                        run: *run,
                        expected: *expected,
                        input: 0,
                        key: *key,
                    }
                    .request(sessions);
                    r["args"]["startRun"]["input"] = json!({ "text": text });
                    r
                };
                let text = match (size.of, size.chars) {
                    (SizeOf::Text, true) => inputs::text_of_chars(size.bytes),
                    (SizeOf::Text, false) => inputs::text_of_bytes(size.bytes, size.multibyte),
                    (SizeOf::Request, _) => {
                        let shell = commit(String::new()).to_string().len();
                        inputs::text_of_bytes(size.bytes.saturating_sub(shell), size.multibyte)
                    }
                };
                commit(text)
            }
        }
    }

    /// Whether the store may refuse it `invalid_argument` for its size
    /// alone (SPEC 6: a body over 1 MiB), writing nothing.
    pub fn may_be_refused_for_size(&self) -> bool {
        matches!(self, FuzzOp::Sized { size, .. }
            if SIZES[size % SIZES.len()].of == SizeOf::Request
                && SIZES[size % SIZES.len()].bytes > BODY_LIMIT)
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

/// An op of the fuzzer's whole alphabet, sent alone: [`arb_op`], or one of
/// its arguments of another type or spelling, or a commit of a sized
/// input (never in a batch: a refusal for size writes nothing, and is
/// judged alone).
pub fn arb_single_op() -> impl Strategy<Value = FuzzOp> {
    prop_oneof![
        24 => arb_op(),
        3 => (arb_op(), 0..SPELLED.len()).prop_map(|(op, how)| FuzzOp::Spelled { op: Box::new(op), how }),
        1 => (0..SESSIONS, 0..RUNS.len(), prop::option::weighted(0.5, 0..RUNS.len()), prop::option::weighted(0.5, 0..KEYS.len()), 0..SIZES.len())
            .prop_map(|(session, run, expected, key, size)| FuzzOp::Sized { session, run, expected, key, size }),
    ]
}

/// A program of the store fuzzer: its steps, and whether its session ids
/// are of the longest length (SPEC 1: 256 characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreProgram {
    pub steps: Vec<FuzzStep>,
    pub long_ids: bool,
}

/// The fuzzer's programs: [`arb_program_with`]'s steps over the whole
/// alphabet ([`arb_single_op`] alone), one in eight with session ids of
/// the longest length.
pub fn arb_fuzz_program(batches: bool) -> impl Strategy<Value = StoreProgram> {
    let batch_weight = u32::from(batches);
    let step = prop_oneof![
        4 => arb_single_op().prop_map(FuzzStep::Single),
        batch_weight => prop::collection::vec(arb_op(), 1..=MAX_BATCH).prop_map(|mut ops| {
            if ops.len() == 1 {
                ops.pop().map_or(FuzzStep::Batch(ops), FuzzStep::Single)
            } else {
                FuzzStep::Batch(ops)
            }
        }),
    ];
    (
        prop::collection::vec(step, 1..=MAX_STEPS),
        prop::bool::weighted(0.125),
    )
        .prop_map(|(steps, long_ids)| StoreProgram { steps, long_ids })
}

/// Programs of [`arb_op`] (the stage of `store.mixed-histories`): mostly
/// single ops, sometimes a batch of up to 4. A batch of one runs as a
/// single op: that is what lets shrinking turn a batch whose other ops are
/// irrelevant into a plain sequential step.
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
            | FuzzOp::Sized { session, .. }
            | FuzzOp::SetRunStatus { session, .. }
            | FuzzOp::DeleteSession { session } => Some(*session),
            FuzzOp::Spelled { op, .. } => op.written_session(),
            _ => None,
        }
    }

    /// The key a write names (a keyed commit's), if any.
    fn key(&self) -> Option<usize> {
        match self {
            FuzzOp::Commit { key, .. } | FuzzOp::Sized { key, .. } => *key,
            FuzzOp::Spelled { op, .. } => op.key(),
            _ => None,
        }
    }

    /// The run a write names, if any.
    fn run(&self) -> Option<usize> {
        match self {
            FuzzOp::Commit { run, .. }
            | FuzzOp::Sized { run, .. }
            | FuzzOp::SetRunStatus { run, .. } => Some(*run),
            FuzzOp::Spelled { op, .. } => op.run(),
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
