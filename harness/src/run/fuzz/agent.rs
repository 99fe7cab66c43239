//! Model-based fuzzing of an agent server: `reqkey fuzz` on agent targets.
//!
//! The agent corpus tests what its authors wrote down; what slips through
//! are *sequences*: state carried across a session's life (a key index, a
//! digest, an input log or a current-run pointer that a delete or a later
//! run should have changed), routes interleaved in orders no scenario
//! uses, inputs of shapes no scenario sends, and every way of saying one
//! request that HTTP allows. proptest generates short programs from the
//! alphabet of `run::fuzz::agent_program` (every parameter SPEC 7 names;
//! `run::fuzz::alphabet` lists them with their clauses) over a tiny domain
//! (two sessions, two keys), so collisions are the common case. Most
//! steps are followed by a (bounded) wait for every run to leave
//! `running`; some are not, and the next request meets a run just before,
//! at or past its scripted end.
//!
//! The oracle is [`reqkey_model::agent::AgentModel`]: a set of states a
//! conforming server may be in, pruned by each answer, with each run's
//! earliest end (its entry's send time plus its `[sleep:N]`): no answer may
//! show a run ended before then. A step of a concurrent batch (released
//! behind a barrier) is judged by every order of the batch
//! ([`next_batch`]): some order must explain all its answers. Every answer
//! is also held to the invariants every agent answer keeps
//! ([`reqkey_check::answer`]: error shape, a stream's events in order,
//! one run, no echo of a malformed key). A failure shrinks to a minimal
//! program, printed with its seed and as a YAML scenario for `reqkey run`
//! (`run::fuzz::agent_scenario`; docs/fuzz.md says what a file of a
//! batch or an unsettled step checks).

use super::store::short;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reqkey_model::agent::{
    next_batch, sleep_ms, AgentModel, AgentOp, Observed, StreamSeen, Timing,
};
use reqkey_model::vocab::Profile;
use serde_json::Value;
use tokio::sync::Barrier;

use crate::run::agent_steps::{answer, wait_run_step};
use crate::run::fuzz::agent_program::BEFORE_MS;
pub use crate::run::fuzz::agent_program::{
    arb_program, build, named_run, resolve, resolve_in_batch, After, AgentFuzzOptions, Domain, Op,
    Program, Sent, Step, MAX_BATCH, MAX_STEPS, PAST_MS, SESSIONS,
};
use crate::run::fuzz::agent_scenario::{route_clause, scenario_yaml};
pub use crate::run::fuzz::cases::CaseFailure;
use crate::run::fuzz::cases::{blamed_clauses, case_sessions, run_cases, CasesOutcome};
use crate::run::fuzz::every::{every_violation, replayed_violation, Every, Proven};
use crate::run::fuzz::violation::FuzzViolation;
use crate::targets::{HttpRequest, Target};

/// The default budget of `reqkey fuzz` on an agent target: every broken
/// variant of the reference the fuzzer is meant to find is found within
/// it on seeds 1, 2, 3 (harness/tests/agent_fuzz.rs, docs/fuzz.md).
pub const DEFAULT_CASES: u32 = 256;

/// The longest the harness waits for one run to leave `running`.
const SETTLE_MS: u64 = 5_000;
/// Model states kept at once; beyond it the case has no verdict.
const MAX_STATES: usize = 4_096;

async fn exchange(
    target: &Arc<dyn Target>,
    request: &HttpRequest,
    call_timeout_ms: u64,
) -> Result<Value, CaseFailure> {
    let fut = target.http(request.clone());
    match tokio::time::timeout(Duration::from_millis(call_timeout_ms), fut).await {
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

/// What the model reads of an answer.
pub fn observe(answer: &Value) -> Observed {
    let stream = answer.get("sse").map(|sse| {
        let events = sse
            .get("events")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let start = events
            .iter()
            .find(|e| e["event"] == "run-start")
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
            texts: events
                .iter()
                .filter(|e| e["event"] == "text")
                .map(|e| {
                    e["data"]
                        .get("delta")
                        .and_then(Value::as_str)
                        .map_or_else(|| e["data"].to_string(), str::to_owned)
                })
                .collect(),
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
        timing: None,
    }
}

/// A request as the failure message shows it (bodies cut).
fn shown(request: &HttpRequest) -> String {
    let body = request.body.as_ref().map_or(String::new(), |b| {
        let text = String::from_utf8_lossy(b);
        let cut: String = text.chars().take(200).collect();
        if cut.len() < text.len() {
            format!(" {cut}… ({} bytes)", b.len())
        } else {
            format!(" {cut}")
        }
    });
    let headers: String = request
        .headers
        .iter()
        .map(|(n, v)| format!(" [{n}: {:?}]", String::from_utf8_lossy(v)))
        .collect();
    let wire = match request.wire {
        reqkey_scenario::agent_step::Wire::Library => String::new(),
        w => format!(" (wire: {})", w.name()),
    };
    format!("{} {}{headers}{wire}{body}", request.method, request.path)
}

/// The invariants every agent answer keeps (SPEC 8): a violation names
/// its clause.
fn invariants(
    k: usize,
    op: &AgentOp,
    request: &HttpRequest,
    answer: &Value,
    may_be_cut: bool,
) -> Result<(), CaseFailure> {
    match reqkey_check::answer::check_answer(Some(request), answer, may_be_cut) {
        None => Ok(()),
        Some(v) => Err(CaseFailure::Nonconforming(format!(
            "step {k}: [{}] {}\n  [[{}]] {}\n  the target answered {}",
            blamed(op, &format!("[{}]", v.clause)),
            shown(request),
            v.clause,
            v.message,
            short(answer)
        ))),
    }
}

/// The clauses a step's failure blames: the clauses the model named (its
/// first bracketed clauses in `why`, SPEC's `[[id]]` spelling included:
/// a refusal's plan row, the `runId` it names, an invariant of every
/// answer), else the clause of the step's route. The reproduction's step
/// judges both (`agent_scenario.rs`), so that one defect met on several
/// routes is one violation.
fn blamed(op: &AgentOp, why: &str) -> String {
    let named: Vec<String> = blamed_clauses(why)
        .into_iter()
        .filter(|c| reqkey_model::clauses::find(c).is_some())
        .collect();
    if named.is_empty() {
        route_clause(op).to_owned()
    } else {
        named.join(", ")
    }
}

/// The program's clock: milliseconds since it started.
#[derive(Debug, Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn ms(self) -> u64 {
        u64::try_from(self.0.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// Every run some state holds `running`, with the latest earliest end
/// any state gives it.
fn running(states: &[AgentModel]) -> Vec<((String, String), u64)> {
    let mut out: Vec<((String, String), u64)> = Vec::new();
    for s in states {
        for (run, life) in s.running() {
            match out.iter_mut().find(|(r, _)| r == run) {
                Some(o) => o.1 = o.1.max(life.not_before_ms),
                None => out.push((run.clone(), life.not_before_ms)),
            }
        }
    }
    out
}

/// Runs one program against `target`; sessions are named `sessions`.
pub async fn run_program(
    target: &Arc<dyn Target>,
    program: &Program,
    sessions: &[String],
    profile: &Profile,
    call_timeout_ms: u64,
) -> Result<(), CaseFailure> {
    let clock = Clock(Instant::now());
    let dom = Domain::new(sessions, program.long_ids);
    let mut states = vec![AgentModel::new(profile)];
    let mut seen: Vec<(String, String)> = Vec::new();
    // The earliest end of every run an answer named (deleted ones too):
    // the timers a step is placed against.
    let mut timers: Vec<u64> = Vec::new();
    let mut sent: Vec<Op> = Vec::new();
    // Whether the harness waited for every run after the last step.
    let mut settled = true;
    for (k, step) in program.steps.iter().enumerate() {
        let ops: Vec<Op> = match step {
            Step::Single(op) | Step::Unsettled(op, _) => vec![resolve(op, &sent)],
            Step::Batch(ops) => ops.iter().map(|o| resolve_in_batch(o, &sent)).collect(),
        };
        sent.extend(ops.iter().cloned());
        let now = clock.ms();
        let left = |session: &str, run: &str| {
            running(&states)
                .iter()
                .find(|((s, r), _)| s == session && r == run)
                .map_or(0, |(_, nb)| nb.saturating_sub(now))
        };
        let built: Vec<Sent> = ops.iter().map(|o| build(o, &dom, &seen, &left)).collect();
        let mut answers = Vec::with_capacity(built.len());
        let library = built
            .iter()
            .all(|b| b.request.wire == reqkey_scenario::agent_step::Wire::Library);
        if let [one] = built.as_slice() {
            let invoke_ms = clock.ms();
            let a = exchange(target, &one.request, call_timeout_ms).await?;
            answers.push((a, invoke_ms, clock.ms()));
        } else if library && target.sends_together() {
            // Keyed and keyless alike, the batch's last bytes leave at once
            // (`targets/together.rs`): a race of microseconds is met.
            let requests = built.iter().map(|b| b.request.clone()).collect();
            let sent = tokio::time::timeout(
                Duration::from_millis(call_timeout_ms.saturating_mul(2)),
                target.http_together(requests),
            )
            .await
            .map_err(|_| CaseFailure::Harness(format!("no answer within {call_timeout_ms} ms")))?;
            let ms = |at: Instant| {
                u64::try_from(at.saturating_duration_since(clock.0).as_millis()).unwrap_or(u64::MAX)
            };
            for t in sent {
                let t = t.map_err(|e| CaseFailure::Harness(e.to_string()))?;
                answers.push((answer(&t.response), ms(t.sent), ms(t.answered)));
            }
        } else {
            let barrier = Arc::new(Barrier::new(built.len()));
            let mut tasks = Vec::new();
            for b in &built {
                let (target, barrier) = (Arc::clone(target), Arc::clone(&barrier));
                let request = b.request.clone();
                tasks.push(tokio::spawn(async move {
                    barrier.wait().await;
                    let invoke_ms = clock.ms();
                    let a = exchange(&target, &request, call_timeout_ms).await;
                    a.map(|a| (a, invoke_ms, clock.ms()))
                }));
            }
            for t in tasks {
                answers.push(
                    t.await
                        .map_err(|e| CaseFailure::Harness(format!("batch task: {e}")))??,
                );
            }
        }
        // A stream in a batch with a delete of its session may be cut.
        let deletes: Vec<&str> = built
            .iter()
            .filter(|b| matches!(b.model, AgentOp::Delete { .. }))
            .map(|b| b.model.session())
            .collect();
        let mut observed = Vec::with_capacity(built.len());
        for (b, (a, invoke_ms, return_ms)) in built.iter().zip(&answers) {
            let cut = built.len() > 1 && deletes.contains(&b.model.session());
            invariants(k, &b.model, &b.request, a, cut)?;
            let mut o = observe(a);
            o.timing = Some(Timing {
                invoke_ms: *invoke_ms,
                return_ms: *return_ms,
            });
            if let Some(run) = named_run(&o) {
                let named = (b.model.session().to_owned(), run);
                if !seen.contains(&named) {
                    seen.push(named);
                    timers.push(invoke_ms.saturating_add(entry_sleep_ms(&b.model)));
                }
            }
            observed.push(o);
        }
        let next = if let [one] = built.as_slice() {
            let mut next = Vec::new();
            let mut why = String::new();
            for s in &states {
                for before in s.before(&observed[0], settled) {
                    match before.next(&one.model, &observed[0], true) {
                        Ok(n) => next.extend(n),
                        Err(e) => why = e,
                    }
                }
            }
            if next.is_empty() {
                return Err(CaseFailure::Nonconforming(format!(
                    "step {k}: [{}] {}\n  {why}\n  the target answered {}",
                    blamed(&one.model, &why),
                    shown(&one.request),
                    short(&answers[0].0)
                )));
            }
            reqkey_model::agent::dedup(next)
        } else {
            let first = observed
                .iter()
                .filter_map(|o| o.timing.map(|t| t.invoke_ms))
                .min()
                .unwrap_or(0);
            let before: Vec<AgentModel> = if settled {
                states.iter().flat_map(|s| s.settle_all_at(first)).collect()
            } else {
                states.clone()
            };
            let model_ops: Vec<AgentOp> = built.iter().map(|b| b.model.clone()).collect();
            let next = next_batch(&before, &model_ops, &observed);
            if next.is_empty() {
                let mut routes: Vec<String> =
                    reqkey_model::agent_blame::batch_blame(&before, &model_ops, &observed);
                if routes.is_empty() {
                    for b in &built {
                        let clause = route_clause(&b.model).to_owned();
                        if !routes.contains(&clause) {
                            routes.push(clause);
                        }
                    }
                }
                let mut lines = format!(
                    "step {k}: [{}] no order of the batch explains its answers",
                    routes.join(", ")
                );
                for (b, a) in built.iter().zip(&answers) {
                    let _ = write!(lines, "\n  {} answered {}", shown(&b.request), short(&a.0));
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
        match step {
            Step::Unsettled(_, after) => {
                pause(*after, &timers, clock).await;
                settled = false;
            }
            _ => {
                // Every run that may still run ends before the next step.
                for ((session, run), _) in running(&states) {
                    settle(target, &session, &run, call_timeout_ms).await;
                }
                settled = true;
            }
        }
    }
    Ok(())
}

/// How long the run an entry starts sleeps (its `[sleep:N]`).
fn entry_sleep_ms(op: &AgentOp) -> u64 {
    match op {
        AgentOp::Start { input, .. } | AgentOp::Resume { input, .. } => sleep_ms(input),
        AgentOp::ChatSend { content, .. } => sleep_ms(&serde_json::json!({ "text": content })),
        _ => 0,
    }
}

/// Places the next step after an unsettled one: at once, or just before,
/// at or past the latest timer that has not run out (a run's end; the
/// run may have been deleted since, and a server that kept it running
/// shows it then).
async fn pause(after: After, timers: &[u64], clock: Clock) {
    let now = clock.ms();
    let Some(end) = timers.iter().copied().filter(|t| *t > now).max() else {
        return;
    };
    let at = match after {
        After::Now => return,
        After::Before => end.saturating_sub(BEFORE_MS),
        After::At => end,
        After::Past => end + PAST_MS,
    };
    let wait = at.saturating_sub(clock.ms()).min(SETTLE_MS);
    tokio::time::sleep(Duration::from_millis(wait)).await;
}

/// A shrunk failure.
#[derive(Debug, Clone)]
pub struct AgentFuzzFailure {
    pub seed: u64,
    /// The program (counted from 1) that failed first, before shrinking.
    pub found_at: u64,
    pub program: Program,
    pub reason: String,
    pub scenario_yaml: String,
    /// Every distinct violation (the first is the one above), each with its
    /// reproduction replayed against the target; empty when the run
    /// stopped at its first (`every: false`).
    pub violations: Vec<FuzzViolation>,
    /// Why the run stopped before its budget, when a program could not be
    /// judged after these violations were proven (they stand).
    pub stopped: Option<String>,
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
    let one = |case: u64, p: &Program| one_case(runtime, &target, opts, case, p);
    if opts.every {
        return match every_violation(
            opts.cases,
            opts.seed,
            opts.max_shrink_iters,
            &strategy,
            one,
            |f| {
                let (program, reason) = settle_shrunk(f.program.clone(), f.reason.clone(), one);
                // Settling may leave the program failing on other clauses.
                let clauses = blamed_clauses(&reason);
                let yaml = scenario_yaml(&program, opts, &reason);
                Proven {
                    violation: replayed_violation(
                        runtime,
                        &target,
                        (opts.seed, opts.call_timeout_ms),
                        (f.found_at, opts.cases, program.steps.len()),
                        clauses,
                        reason,
                        yaml,
                    ),
                    found_at: f.found_at,
                    program,
                }
            },
        ) {
            Every::Passed => AgentFuzzOutcome::Passed { cases: opts.cases },
            Every::Error(e) => AgentFuzzOutcome::Error(e),
            Every::Failed { findings, stopped } => match findings.first() {
                None => AgentFuzzOutcome::Error("no violation was kept".into()),
                Some(first) => AgentFuzzOutcome::Failed(Box::new(AgentFuzzFailure {
                    seed: opts.seed,
                    found_at: first.found_at,
                    program: first.program.clone(),
                    reason: first.violation.message.clone(),
                    scenario_yaml: first.violation.scenario_yaml.clone(),
                    violations: findings.into_iter().map(|f| f.violation).collect(),
                    stopped,
                })),
            },
        };
    }
    let outcome = run_cases(opts.cases, opts.seed, opts.max_shrink_iters, &strategy, one);
    match outcome {
        CasesOutcome::Passed => AgentFuzzOutcome::Passed { cases: opts.cases },
        CasesOutcome::Failed {
            program,
            reason,
            found_at,
        } => {
            let (program, reason) = if opts.max_shrink_iters > 0 {
                settle_shrunk(program, reason, one)
            } else {
                (program, reason)
            };
            let scenario_yaml = scenario_yaml(&program, opts, &reason);
            AgentFuzzOutcome::Failed(Box::new(AgentFuzzFailure {
                seed: opts.seed,
                found_at,
                program,
                reason,
                scenario_yaml,
                violations: Vec::new(),
                stopped: None,
            }))
        }
        CasesOutcome::Error(e) => AgentFuzzOutcome::Error(e),
    }
}

/// Runs program `case` against `target` on sessions of its own, then
/// deletes them (best effort: leave nothing behind on a shared server).
fn one_case(
    runtime: &tokio::runtime::Runtime,
    target: &Arc<dyn Target>,
    opts: &AgentFuzzOptions,
    case: u64,
    program: &Program,
) -> Result<(), CaseFailure> {
    let sessions = case_sessions(&opts.namespace, case, SESSIONS);
    let outcome = runtime.block_on(run_program(
        target,
        program,
        &sessions,
        &opts.profile,
        opts.call_timeout_ms,
    ));
    let dom = Domain::new(&sessions, program.long_ids);
    runtime.block_on(async {
        for s in &dom.sessions {
            let delete = HttpRequest {
                method: "DELETE".into(),
                path: format!("/sessions/{s}"),
                ..HttpRequest::default()
            };
            let _ = exchange(target, &delete, opts.call_timeout_ms).await;
        }
    });
    outcome
}

/// The program numbers the settling pass runs under: past any budget, so
/// that no session of the fuzz run is met again.
const SETTLE_CASES_FROM: u64 = 1 << 40;

/// After proptest shrank a failure: each step the harness did not wait
/// after becomes one it waits after, and each batch its requests one by
/// one, wherever the program still fails so, then each step is dropped
/// where it still fails without it. proptest cannot make these moves (it
/// draws a fresh request when it tries a simpler kind of step), and a
/// settled, sequential step is one a scenario file can judge
/// (`run::fuzz::agent_scenario`): the file then fails the target under
/// `reqkey run` too. `run` runs a program as a case (its number first).
pub fn settle_shrunk(
    mut program: Program,
    mut reason: String,
    run: impl Fn(u64, &Program) -> Result<(), CaseFailure>,
) -> (Program, String) {
    // Each settling on cases of its own (a run of every violation settles
    // several).
    static SETTLINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut case =
        SETTLE_CASES_FROM + (SETTLINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) << 20);
    let mut still_fails = |p: &Program, reason: &mut String| {
        case += 1;
        match run(case, p) {
            Err(CaseFailure::Nonconforming(r)) => {
                *reason = r;
                true
            }
            _ => false,
        }
    };
    let mut i = 0;
    while i < program.steps.len() {
        let replacement: Option<Vec<Step>> = match &program.steps[i] {
            Step::Unsettled(op, _) => Some(vec![Step::Single(op.clone())]),
            Step::Batch(ops) => Some(ops.iter().cloned().map(Step::Single).collect()),
            Step::Single(_) => None,
        };
        if let Some(steps) = replacement {
            let mut candidate = program.clone();
            let n = steps.len();
            candidate.steps.splice(i..=i, steps);
            if still_fails(&candidate, &mut reason) {
                program = candidate;
                i += n;
                continue;
            }
        }
        i += 1;
    }
    let mut i = 0;
    while i < program.steps.len() && program.steps.len() > 1 {
        let mut candidate = program.clone();
        candidate.steps.remove(i);
        if still_fails(&candidate, &mut reason) {
            program = candidate;
        } else {
            i += 1;
        }
    }
    (program, reason)
}
