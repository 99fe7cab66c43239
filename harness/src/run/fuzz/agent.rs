//! Model-based fuzzing of an agent server: `reqkey fuzz` on agent targets.
//!
//! The agent corpus tests what its authors wrote down; what slips through
//! are *sequences*: state carried across a session's life (a key index, a
//! digest, an input log or a current-run pointer that a delete or a later
//! run should have changed), routes interleaved in orders no scenario
//! uses, inputs of shapes no scenario sends. proptest generates short
//! programs over every route of SPEC 7 (start, resume, retry, chat send and
//! tool-result send, chat reconnect, snapshot, run read, delete and
//! re-create) in a tiny domain (two sessions, two keys and a malformed
//! one, inputs of every JSON shape and kinds of text), so collisions are
//! the common case. Runs use the test agent's markers and finish within
//! milliseconds; after every entry the harness waits (bounded) for the run
//! to leave `running`, so a sequential step meets settled runs.
//!
//! The oracle is [`reqkey_model::agent::AgentModel`]: a set of states a
//! conforming server may be in, pruned by each answer. A step of a
//! concurrent batch (released behind a barrier) is judged by every order
//! of the batch ([`next_batch`]): some order must explain all its answers.
//! A failure shrinks to a minimal program, printed with its seed and as a
//! YAML scenario for `reqkey run` (sequential steps carry the model's
//! answer as `expect`; see docs/fuzz.md for what a batch's file checks).

use std::fmt::Write as _;
use std::sync::Arc;

use proptest::prelude::*;
use reqkey_model::agent::{next_batch, AgentModel, AgentOp, KeyHeader, Observed, StreamSeen};
use reqkey_model::vocab::Profile;
use serde_json::{json, Value};
use tokio::sync::Barrier;

use crate::run::agent_steps::{answer, wait_run_step};
pub use crate::run::fuzz::cases::CaseFailure;
use crate::run::fuzz::cases::{case_sessions, run_cases, CasesOutcome};
use crate::run::fuzz::inputs;
use crate::targets::{HttpRequest, Target};
use reqkey_scenario::agent_step::Wire;

/// The tiny domain: two sessions; no key, two keys, a malformed one.
pub const SESSIONS: usize = 2;
const KEYS: [Option<&str>; 4] = [None, Some("k0"), Some("k1"), Some("k 0")];
/// The test agent's markers (plain, suspending, failing, slow texts),
/// before the texts of every kind the fuzzers share.
const MARKERS: [&str; 5] = ["a", "b", "[suspend] ask", "[fail] boom", "[sleep:80] slow"];
/// Texts: the markers, then every other kind of [`inputs::TEXTS`]
/// (its first two, plain `a` and `b`, are the markers' first two).
const TEXT_COUNT: usize = MARKERS.len() + inputs::TEXT_KINDS - 2;
fn text(i: usize) -> String {
    match MARKERS.get(i) {
        Some(m) => (*m).to_owned(),
        None => inputs::text(i - MARKERS.len() + 2),
    }
}
/// Inputs: the test agent's `{"text"}` with every text, then a value of
/// every JSON shape ([`inputs::shape`]).
fn input(i: usize) -> Value {
    if i < TEXT_COUNT {
        json!({ "text": text(i) })
    } else {
        inputs::shape(i - TEXT_COUNT)
    }
}
const INPUTS: usize = TEXT_COUNT + inputs::SHAPES.len();

/// The default budget of `reqkey fuzz` on an agent target: every broken
/// sequence variant of the reference is found within it on seeds 1, 2, 3
/// (harness/tests/agent_fuzz.rs).
pub const DEFAULT_CASES: u32 = 256;

/// The most steps in one program, and requests in one batch.
pub const MAX_STEPS: usize = 10;
pub const MAX_BATCH: usize = 3;
/// The longest the harness waits for one run to leave `running`.
const SETTLE_MS: u64 = 5_000;
/// Model states kept at once; beyond it the case has no verdict.
const MAX_STATES: usize = 4_096;

/// One abstract request over the domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    Start {
        s: usize,
        key: usize,
        input: usize,
    },
    Resume {
        s: usize,
        key: usize,
        input: usize,
    },
    Retry {
        s: usize,
        key: usize,
    },
    Chat {
        s: usize,
        key: usize,
        text: usize,
        tool: bool,
    },
    Reconnect {
        s: usize,
        key: usize,
    },
    Snapshot {
        s: usize,
    },
    /// The `run`-th run id seen in the case (any session), or an unknown one.
    ReadRun {
        s: usize,
        run: usize,
    },
    Delete {
        s: usize,
    },
    /// The same request as one sent before (`back` requests back, modulo
    /// how many there were): a client's retry, the duplicate keys exist for.
    Again {
        back: usize,
    },
}

/// Resolves `Again` against the requests sent so far (`sent`, oldest
/// first); with none sent yet it is a snapshot of session 0.
fn resolve(op: &Op, sent: &[Op]) -> Op {
    match op {
        Op::Again { back } if !sent.is_empty() => sent[sent.len() - 1 - back % sent.len()].clone(),
        Op::Again { .. } => Op::Snapshot { s: 0 },
        other => other.clone(),
    }
}

/// Resolves `op` for a batch: as [`resolve`], but never a snapshot. A
/// snapshot is two reads (runs, then inputs), and SPEC 7
/// `[[agent.snapshot.not-one-read]]` does not make it one view beside
/// writes to its session in flight, so a batch holds none (an unknown
/// run's read of the same session stands in: it writes nothing either).
fn resolve_in_batch(op: &Op, sent: &[Op]) -> Op {
    match resolve(op, sent) {
        Op::Snapshot { s } => Op::ReadRun { s, run: usize::MAX },
        other => other,
    }
}

/// One step: a request alone, or a batch released together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    Single(Op),
    Batch(Vec<Op>),
}

/// The key header of index `k`; valid keys carry `tag` (a case's own
/// suffix, so that no state of an earlier case's keys leaks into a case:
/// each case is then a program that fails on its own).
fn key_header(k: usize, tag: &str) -> KeyHeader {
    match KEYS.get(k).copied().flatten() {
        None => KeyHeader::None,
        Some(v) if v.contains(' ') => KeyHeader::Malformed(v.to_owned()),
        Some(v) => KeyHeader::Valid(format!("{v}{tag}")),
    }
}

/// The key suffix of a case whose sessions are `sessions`: `.` and their
/// namespace (valid key characters, at most 100 of them).
fn key_tag(sessions: &[String]) -> String {
    let ns = sessions
        .first()
        .and_then(|s| s.rsplit_once('.'))
        .map_or("", |(ns, _)| ns);
    let ns: String = ns
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))
        .take(100)
        .collect();
    if ns.is_empty() {
        String::new()
    } else {
        format!(".{ns}")
    }
}

impl Op {
    fn session(&self) -> usize {
        match self {
            Op::Start { s, .. }
            | Op::Resume { s, .. }
            | Op::Retry { s, .. }
            | Op::Chat { s, .. }
            | Op::Reconnect { s, .. }
            | Op::Snapshot { s }
            | Op::ReadRun { s, .. }
            | Op::Delete { s } => *s,
            Op::Again { .. } => 0,
        }
    }

    fn run_id(run: usize, seen: &[String]) -> String {
        seen.get(run)
            .cloned()
            .unwrap_or_else(|| "no-such-run".into())
    }

    /// The model's request.
    pub fn model(&self, sessions: &[String], seen: &[String], tag: &str) -> AgentOp {
        let session = sessions.get(self.session()).cloned().unwrap_or_default();
        let key_header = |k: usize| key_header(k, tag);
        match self {
            Op::Start { key, input: i, .. } => AgentOp::Start {
                session,
                key: key_header(*key),
                input: input(*i),
            },
            Op::Resume { key, input: i, .. } => AgentOp::Resume {
                session,
                key: key_header(*key),
                input: input(*i),
            },
            Op::Retry { key, .. } => AgentOp::Retry {
                session,
                key: key_header(*key),
            },
            Op::Chat {
                key, text, tool, ..
            } => AgentOp::ChatSend {
                session,
                key: key_header(*key),
                content: self::text(*text % TEXT_COUNT),
                tool: *tool,
            },
            Op::Reconnect { key, .. } => AgentOp::Reconnect {
                session,
                key: key_header(*key),
            },
            Op::Snapshot { .. } => AgentOp::Snapshot { session },
            Op::ReadRun { run, .. } => AgentOp::ReadRun {
                session,
                run_id: Self::run_id(*run, seen),
            },
            Op::Delete { .. } | Op::Again { .. } => AgentOp::Delete { session },
        }
    }
}

/// The HTTP request of a model request: (method, path, key, JSON body).
pub fn http_parts(op: &AgentOp) -> (&'static str, String, Option<String>, Option<Value>) {
    let key = |k: &KeyHeader| match k {
        KeyHeader::None => None,
        KeyHeader::Valid(v) | KeyHeader::Malformed(v) => Some(v.clone()),
    };
    let s = op.session();
    match op {
        AgentOp::Start { key: k, input, .. } => (
            "POST",
            format!("/sessions/{s}/start"),
            key(k),
            Some(json!({ "input": input })),
        ),
        AgentOp::Resume { key: k, input, .. } => (
            "POST",
            format!("/sessions/{s}/resume"),
            key(k),
            Some(json!({ "input": input })),
        ),
        AgentOp::Retry { key: k, .. } => (
            "POST",
            format!("/sessions/{s}/retry"),
            key(k),
            Some(json!({})),
        ),
        AgentOp::ChatSend {
            key: k,
            content,
            tool,
            ..
        } => {
            let role = if *tool { "tool" } else { "user" };
            (
                "POST",
                format!("/sessions/{s}/chat"),
                key(k),
                Some(json!({"messages": [{"role": role, "content": content}]})),
            )
        }
        AgentOp::Reconnect { key: k, .. } => ("GET", format!("/sessions/{s}/chat"), key(k), None),
        AgentOp::Snapshot { .. } => ("GET", format!("/sessions/{s}"), None, None),
        AgentOp::ReadRun { run_id, .. } => (
            "GET",
            format!("/sessions/{s}/runs/{run_id}?waitMs=0"),
            None,
            None,
        ),
        AgentOp::Delete { .. } => ("DELETE", format!("/sessions/{s}"), None, None),
    }
}

fn request(op: &AgentOp) -> HttpRequest {
    let (method, path, key, body) = http_parts(op);
    HttpRequest {
        method: method.into(),
        path,
        headers: key
            .map(|k| vec![("X-Helix-Request-Key".to_owned(), k.into_bytes())])
            .unwrap_or_default(),
        body: body.map(|b| b.to_string().into_bytes()),
        replica: None,
        wire: Wire::Library,
    }
}

/// What the model reads of an answer.
pub fn observe(answer: &Value) -> Observed {
    let stream = answer.get("sse").map(|sse| {
        let start = sse
            .get("events")
            .and_then(Value::as_array)
            .and_then(|evs| evs.iter().find(|e| e["event"] == "run-start"))
            .map(|e| e["data"].clone())
            .unwrap_or(Value::Null);
        StreamSeen {
            run_id: start
                .get("runId")
                .and_then(Value::as_str)
                .map(str::to_owned),
            start_sequence: start.get("startSequence").and_then(Value::as_u64),
            attached: start.get("attached").and_then(Value::as_bool),
            finish: sse.get("status").and_then(Value::as_str).map(str::to_owned),
            runs: sse
                .get("runIds")
                .and_then(Value::as_array)
                .map_or(0, Vec::len),
        }
    });
    Observed {
        status: answer
            .get("status")
            .and_then(Value::as_u64)
            .and_then(|s| u16::try_from(s).ok())
            .unwrap_or(0),
        json: answer.get("json").cloned(),
        stream,
        body: answer
            .get("body")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned(),
    }
}

/// The run an answer named, if any.
fn named_run(o: &Observed) -> Option<String> {
    o.stream
        .as_ref()
        .and_then(|s| s.run_id.clone())
        .or_else(|| o.json.as_ref()?.get("runId")?.as_str().map(str::to_owned))
}

/// A text index: the plain and suspending ones most often (collisions and
/// live runs), every other kind now and then.
fn arb_text() -> impl Strategy<Value = usize> {
    prop_oneof![4 => 0..2usize, 3 => Just(2usize), 3 => 3..TEXT_COUNT]
}

/// An input index: the test agent's `{"text"}` mostly, other shapes too.
fn arb_input() -> impl Strategy<Value = usize> {
    prop_oneof![4 => arb_text(), 1 => TEXT_COUNT..INPUTS]
}

/// One request per `op` strategy, weighted toward entries on few values.
pub fn arb_op() -> impl Strategy<Value = Op> {
    // Session 0 twice as often: a session's whole life is under test, and two sessions sharing keys are too.
    let s = prop_oneof![2 => Just(0usize), 1 => Just(1usize)];
    let k = prop_oneof![3 => Just(0usize), 3 => Just(1usize), 2 => Just(2usize), 1 => Just(3usize)];
    prop_oneof![
        5 => (s.clone(), k.clone(), arb_input()).prop_map(|(s, key, input)| Op::Start { s, key, input }),
        3 => (s.clone(), k.clone(), arb_input()).prop_map(|(s, key, input)| Op::Resume { s, key, input }),
        2 => (s.clone(), k.clone()).prop_map(|(s, key)| Op::Retry { s, key }),
        4 => (s.clone(), k.clone(), arb_text(), prop::bool::weighted(0.15))
            .prop_map(|(s, key, text, tool)| Op::Chat { s, key, text, tool }),
        1 => (s.clone(), k).prop_map(|(s, key)| Op::Reconnect { s, key }),
        3 => s.clone().prop_map(|s| Op::Snapshot { s }),
        2 => (s.clone(), 0..4usize).prop_map(|(s, run)| Op::ReadRun { s, run }),
        3 => s.prop_map(|s| Op::Delete { s }),
        4 => (0..3usize).prop_map(|back| Op::Again { back }),
    ]
}

/// Programs: mostly single requests, sometimes a batch (when `batches`).
pub fn arb_program(batches: bool) -> impl Strategy<Value = Vec<Step>> {
    let batch_weight = u32::from(batches);
    let step = prop_oneof![
        6 => arb_op().prop_map(Step::Single),
        batch_weight => prop::collection::vec(arb_op(), 1..=MAX_BATCH).prop_map(|mut ops| {
            if ops.len() == 1 {
                ops.pop().map_or(Step::Batch(ops), Step::Single)
            } else {
                Step::Batch(ops)
            }
        }),
    ];
    prop::collection::vec(step, 1..=MAX_STEPS)
}

async fn exchange(
    target: &Arc<dyn Target>,
    op: &AgentOp,
    call_timeout_ms: u64,
) -> Result<Value, CaseFailure> {
    let fut = target.http(request(op));
    match tokio::time::timeout(std::time::Duration::from_millis(call_timeout_ms), fut).await {
        Ok(Ok(response)) => Ok(answer(&response)),
        Ok(Err(e)) => Err(CaseFailure::Harness(e.to_string())),
        Err(_) => Err(CaseFailure::Harness(format!(
            "no answer within {call_timeout_ms} ms"
        ))),
    }
}

/// Waits (bounded) until `run` of `session` is no longer `running`.
async fn settle(target: &Arc<dyn Target>, session: &str, run: &str, call_timeout_ms: u64) {
    let wanted = ["completed", "failed", "interrupted", "suspended_input"].map(String::from);
    // An answer other than the run (a 404 after a delete) ends the wait too;
    // what it says is judged by the program's own reads, not here.
    let _ = wait_run_step(
        target.as_ref(),
        session,
        run,
        &wanted,
        SETTLE_MS,
        call_timeout_ms,
    )
    .await;
}

fn short(v: &Value) -> String {
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

/// Runs one program against `target`; sessions are named `sessions`.
pub async fn run_program(
    target: &Arc<dyn Target>,
    program: &[Step],
    sessions: &[String],
    profile: &Profile,
    call_timeout_ms: u64,
) -> Result<(), CaseFailure> {
    let mut states = vec![AgentModel::new(profile)];
    let mut seen: Vec<String> = Vec::new();
    let tag = key_tag(sessions);
    let mut sent: Vec<Op> = Vec::new();
    for (k, step) in program.iter().enumerate() {
        let ops: Vec<Op> = match step {
            Step::Single(op) => vec![resolve(op, &sent)],
            Step::Batch(ops) => ops.iter().map(|o| resolve_in_batch(o, &sent)).collect(),
        };
        sent.extend(ops.iter().cloned());
        let model_ops: Vec<AgentOp> = ops.iter().map(|o| o.model(sessions, &seen, &tag)).collect();
        let mut answers = Vec::with_capacity(ops.len());
        if model_ops.len() == 1 {
            answers.push(exchange(target, &model_ops[0], call_timeout_ms).await?);
        } else {
            let barrier = Arc::new(Barrier::new(model_ops.len()));
            let mut tasks = Vec::new();
            for op in &model_ops {
                let (target, barrier, op) = (Arc::clone(target), Arc::clone(&barrier), op.clone());
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    exchange(&target, &op, call_timeout_ms).await
                }));
            }
            for t in tasks {
                let a = t
                    .await
                    .map_err(|e| CaseFailure::Harness(format!("batch task: {e}")))??;
                answers.push(a);
            }
        }
        let observed: Vec<Observed> = answers.iter().map(observe).collect();
        // Wait for every run an answer named, so the next step meets it settled.
        for (op, o) in model_ops.iter().zip(&observed) {
            if let Some(run) = named_run(o) {
                if !seen.contains(&run) {
                    seen.push(run.clone());
                }
                settle(target, op.session(), &run, call_timeout_ms).await;
            }
        }
        let next = if model_ops.len() == 1 {
            let mut next = Vec::new();
            let mut why = String::new();
            for s in &states {
                for settled in s.settle_all() {
                    match settled.next(&model_ops[0], &observed[0], true) {
                        Ok(n) => next.extend(n),
                        Err(e) => why = e,
                    }
                }
            }
            if next.is_empty() {
                let (method, path, key, body) = http_parts(&model_ops[0]);
                return Err(CaseFailure::Nonconforming(format!(
                    "step {k}: {method} {path}{}{}\n  {why}\n  the target answered {}",
                    key.map(|k| format!(" key {k:?}")).unwrap_or_default(),
                    body.map(|b| format!(" {b}")).unwrap_or_default(),
                    short(&answers[0])
                )));
            }
            reqkey_model::agent::dedup(next)
        } else {
            let settled: Vec<AgentModel> = states.iter().flat_map(AgentModel::settle_all).collect();
            let next = next_batch(&settled, &model_ops, &observed);
            if next.is_empty() {
                let mut lines = format!("step {k}: no order of the batch explains its answers");
                for (op, a) in model_ops.iter().zip(&answers) {
                    let (method, path, key, body) = http_parts(op);
                    let _ = write!(
                        lines,
                        "\n  {method} {path}{}{} answered {}",
                        key.map(|k| format!(" key {k:?}")).unwrap_or_default(),
                        body.map(|b| format!(" {b}")).unwrap_or_default(),
                        short(a)
                    );
                }
                return Err(CaseFailure::Nonconforming(lines));
            }
            next
        };
        if next.len() > MAX_STATES {
            return Err(CaseFailure::Harness(format!(
                "the model's state set grew over {MAX_STATES}"
            )));
        }
        states = next;
    }
    Ok(())
}

/// Options of an agent fuzz run.
#[derive(Debug, Clone)]
pub struct AgentFuzzOptions {
    pub cases: u32,
    pub seed: u64,
    pub namespace: String,
    pub target_name: String,
    pub profile: Profile,
    pub call_timeout_ms: u64,
    pub max_shrink_iters: u32,
}

/// A shrunk failure.
#[derive(Debug, Clone)]
pub struct AgentFuzzFailure {
    pub seed: u64,
    pub program: Vec<Step>,
    pub reason: String,
    pub scenario_yaml: String,
}

#[derive(Debug, Clone)]
pub enum AgentFuzzOutcome {
    Passed { cases: u32 },
    Failed(Box<AgentFuzzFailure>),
    Error(String),
}

/// Runs `opts.cases` programs against `target`. Blocking: call it outside
/// any async context.
pub fn fuzz_agent(
    runtime: &tokio::runtime::Runtime,
    target: Arc<dyn Target>,
    opts: &AgentFuzzOptions,
) -> AgentFuzzOutcome {
    // Batches only where concurrent answers are judged by an order: a
    // server that admits entries one at a time answers busy by timing.
    let batches = opts.profile.entry_wait_ms == 0;
    let strategy = arb_program(batches);
    let outcome = run_cases(
        opts.cases,
        opts.seed,
        opts.max_shrink_iters,
        &strategy,
        |case, program| {
            let sessions = case_sessions(&opts.namespace, case, SESSIONS);
            let outcome = runtime.block_on(run_program(
                &target,
                program,
                &sessions,
                &opts.profile,
                opts.call_timeout_ms,
            ));
            // Best effort: leave nothing behind on a shared server.
            runtime.block_on(async {
                for s in &sessions {
                    let _ = exchange(
                        &target,
                        &AgentOp::Delete { session: s.clone() },
                        opts.call_timeout_ms,
                    )
                    .await;
                }
            });
            outcome
        },
    );
    match outcome {
        CasesOutcome::Passed => AgentFuzzOutcome::Passed { cases: opts.cases },
        CasesOutcome::Failed { program, reason } => {
            let scenario_yaml = scenario_yaml(&program, opts, &reason);
            AgentFuzzOutcome::Failed(Box::new(AgentFuzzFailure {
                seed: opts.seed,
                program,
                reason,
                scenario_yaml,
            }))
        }
        CasesOutcome::Error(e) => AgentFuzzOutcome::Error(e),
    }
}

/// Session ids the model runs a program with when writing a scenario;
/// they become `$s0`, `$s1`, and run ids `fz-rN` become `$rN`.
const PLACEHOLDER_SESSIONS: [&str; SESSIONS] = ["fz-s0", "fz-s1"];

/// Replaces placeholders by variables (`fz-s0` -> `$s0`, `fz-r3` -> `$r3`).
fn templatize(text: &str) -> String {
    let mut out = text.to_owned();
    for (i, p) in PLACEHOLDER_SESSIONS.iter().enumerate() {
        out = out.replace(p, &format!("${{s{i}}}"));
    }
    // Run ids, longest first so fz-r12 is not read as fz-r1.
    for n in (0..64).rev() {
        out = out.replace(&format!("fz-r{n}"), &format!("${{r{n}}}"));
    }
    out
}

fn var(v: &Value) -> Value {
    match v {
        Value::String(s) if s.starts_with("fz-") => json!(templatize(s).replace(['{', '}'], "")),
        Value::Array(a) => Value::Array(a.iter().map(var).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), var(v))).collect()),
        other => other.clone(),
    }
}

/// The `expect` pattern of a conforming answer.
/// A new run's id (`fresh`) is not known before its answer binds it.
fn expect_of(o: &reqkey_model::agent::Observed, fresh: &str) -> Value {
    let mut e = json!({ "status": o.status });
    if let Some(s) = &o.stream {
        let ids = if s.run_id.as_deref() == Some(fresh) {
            json!({"$length": 1})
        } else {
            json!([s.run_id])
        };
        e["sse"] = json!({"attached": s.attached, "runIds": ids, "status": s.finish});
    } else if let Some(j) = &o.json {
        let mut j = j.clone();
        if let Some(m) = j.as_object_mut() {
            m.remove("message");
            if m.get("runId").and_then(Value::as_str) == Some(fresh) {
                m.remove("runId");
            }
            if m.contains_key("code") && !m.contains_key("runId") {
                m.insert("runId".into(), json!("$absent"));
            }
            if let Some(runs) = m.get_mut("runs").and_then(Value::as_array_mut) {
                for r in runs {
                    if let Some(r) = r.as_object_mut() {
                        r.remove("requestDigest");
                        r.entry("requestKey").or_insert(json!("$absent"));
                    }
                }
            }
        }
        if j.get("requestKey").is_none()
            && j.get("startSequence").is_some()
            && o.status == 200
            && j.get("status").and_then(Value::as_str) != Some("attached")
        {
            j["requestKey"] = json!("$absent");
        }
        if let Some(m) = j.as_object_mut() {
            m.remove("requestDigest");
        }
        e["json"] = j;
    }
    var(&e)
}

/// One request as an `http` step (JSON flow maps are YAML).
fn http_line(op: &AgentOp) -> String {
    let (method, path, key, body) = http_parts(op);
    let mut step = json!({"method": method, "path": templatize(&path)});
    if let Some(k) = key {
        step["headers"] = json!([["X-Helix-Request-Key", k]]);
    }
    if let Some(b) = body {
        step["json"] = b;
    }
    format!("http: {step}")
}

/// The program as a scenario. While the program is sequential each step
/// carries the model's answer as `expect` (run ids bound as `$rN`, and a
/// `wait_run` after every new run, as the fuzzer waits); a batch becomes a
/// `parallel` group, and from there on steps are sent without `expect`
/// (the file then reproduces the requests, not the judgement).
pub fn scenario_yaml(program: &[Step], opts: &AgentFuzzOptions, reason: &str) -> String {
    let sessions: Vec<String> = PLACEHOLDER_SESSIONS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let mut model = Some(AgentModel::new(&opts.profile));
    let mut seen: Vec<String> = Vec::new();
    let mut sent: Vec<Op> = Vec::new();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Found by `reqkey fuzz --target {} --seed {}`, shrunk to {} steps.",
        opts.target_name,
        opts.seed,
        program.len()
    );
    for line in reason.lines().take(1) {
        let _ = writeln!(out, "# {line}");
    }
    let _ = writeln!(out, "id: agent.fuzz.seed-{}", opts.seed);
    let _ = writeln!(out, "level: agent");
    let _ = writeln!(out, "tags: [agent, fuzz]");
    let _ = writeln!(
        out,
        "requires: {{supportsRequestKey: {}, concurrentEntry: {}}}",
        opts.profile.supports_request_key,
        opts.profile.concurrent_entry.name()
    );
    let _ = writeln!(
        out,
        "summary: A program found by reqkey fuzz (seed {}); every answer must be the agent model's.",
        opts.seed
    );
    // Each judged step names its route's clause (SPEC 7: the route answers
    // as the model does); `checks:` is their union (issue 45).
    let mut clauses: Vec<&'static str> = Vec::new();
    let steps_start = out.len();
    let _ = writeln!(out, "steps:");
    for step in program {
        match step {
            Step::Single(op) => {
                let op = resolve(op, &sent);
                sent.push(op.clone());
                let op = op.model(&sessions, &seen, "");
                let line = http_line(&op);
                let Some(state) = model
                    .as_ref()
                    .and_then(|m| m.settle_all().into_iter().next())
                else {
                    let _ = writeln!(out, "  - {line}");
                    continue;
                };
                let fresh = format!("fz-r{}", seen.len());
                let Some(answer) = state.conforming(&op, &fresh) else {
                    model = None;
                    let _ = writeln!(out, "  - {line}");
                    continue;
                };
                let clause = route_clause(&op);
                if !clauses.contains(&clause) {
                    clauses.push(clause);
                }
                let _ = writeln!(out, "  - {line}");
                let _ = writeln!(out, "    expect: {}", expect_of(&answer, &fresh));
                let _ = writeln!(out, "    judges: [{clause}]");
                if let Some(run) = named_run(&answer) {
                    if run == fresh {
                        seen.push(fresh.clone());
                        let path = if answer.stream.is_some() {
                            "sse.runIds.0"
                        } else {
                            "json.runId"
                        };
                        let _ = writeln!(out, "    bind: {{r{}: {path}}}", seen.len() - 1);
                        let _ = writeln!(
                            out,
                            "  - wait_run: {{sessionId: \"{}\", runId: \"${{r{}}}\", status: [completed, failed, interrupted, suspended_input]}}\n    judges: [agent.route.run]",
                            templatize(op.session()),
                            seen.len() - 1
                        );
                        if !clauses.contains(&"agent.route.run") {
                            clauses.push("agent.route.run");
                        }
                    }
                }
                model = state
                    .next(&op, &answer, true)
                    .ok()
                    .and_then(|n| n.into_iter().next());
            }
            Step::Batch(ops) => {
                model = None;
                let _ = writeln!(out, "  - parallel:");
                let ops: Vec<Op> = ops.iter().map(|o| resolve_in_batch(o, &sent)).collect();
                sent.extend(ops.iter().cloned());
                for op in &ops {
                    let _ = writeln!(
                        out,
                        "      - {}",
                        http_line(&op.model(&sessions, &seen, ""))
                    );
                }
            }
        }
    }
    out.insert_str(steps_start, &format!("checks: [{}]\n", clauses.join(", ")));
    out
}

/// The clause of SPEC 7 a step's route is: what its expected answer judges.
fn route_clause(op: &AgentOp) -> &'static str {
    let (method, path, _, _) = http_parts(op);
    let last = path.rsplit('/').next().unwrap_or("");
    match (method, last) {
        ("POST", "start") => "agent.route.start",
        ("POST", "resume") => "agent.route.resume",
        ("POST", "retry") => "agent.route.retry",
        ("POST", "chat") => "agent.route.chat",
        ("GET", "chat") => "agent.route.chat-reconnect",
        ("DELETE", _) => "agent.route.delete",
        _ if path.contains("/runs/") => "agent.route.run",
        _ => "agent.route.snapshot",
    }
}
