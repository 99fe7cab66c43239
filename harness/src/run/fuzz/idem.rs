//! Model-based fuzzing of an `Idempotency-Key` app: `reqkey fuzz` on idem
//! targets and the idem certification's fuzz pass.
//!
//! The idem corpus tests the cases its authors wrote down, each under the
//! profiles it requires. proptest generates short programs over every
//! route of `reqkey-idem/1` (`POST /orders`, `PUT /orders`, `POST
//! /payments`, the failing route, the slow route; the failing route slow
//! too), in a tiny domain so that collisions are the rule: two callers,
//! two keys and their bare, upper-case and empty spellings or no key,
//! payloads equal as JSON but not as bytes, texts of every kind. A step is
//! a request alone, a client's retry of one of the last three, a burst of
//! identical copies or a batch of different requests released together
//! (on a succeeding, a failing, a slow and a slow failing handler), a
//! duplicate sent after a declared `lockMs` while its handler still runs,
//! a pause (short, or past `expiryMs` and its margin), or a read of the
//! effects oracle.
//!
//! On an HTTP target every group without delays (a burst, a batch) goes
//! out with its last bytes released at once (`targets/together.rs`), and
//! every program's bodies are grown to a size drawn from the seed, tiny to
//! 256 KiB (`run/fuzz/body_size.rs`): a race that shows only when
//! duplicates arrive within microseconds, or only with large bodies, is
//! met (issue 56).
//!
//! The oracle is [`reqkey_model::idem_model::IdemModel`] under the
//! declared profile: each request's window (sent, reached the app by,
//! answered) on the program's clock; a request alone must get an answer
//! the model allows; requests that overlapped must be explained by some
//! order real time allows ([`reqkey_model::idem_batch::judge`],
//! linearizability); `/.reqkey/effects` must count exactly the runs the
//! answers showed. A failure names the clause it breaks and shrinks to a
//! YAML scenario (`run/fuzz/idem_scenario.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use reqkey_model::idem_batch::judge;
use reqkey_model::idem_model::{EffectKey, IdemAnswer, IdemModel, Judged, Window};
use reqkey_model::idem_profile::IdemProfile;
use serde_json::Value;
use tokio::sync::Barrier;

use crate::run::fuzz::body_size::{grown, grown_by, Stream};
pub use crate::run::fuzz::cases::CaseFailure;
use crate::run::fuzz::cases::{
    blamed_clauses, run_cases_all, same_set, AllOutcome, MAX_DISTINCT_VIOLATIONS,
};
use crate::run::fuzz::every::{one_per_set, violation, Proven};
use crate::run::fuzz::idem_battery::{
    add_judged, battery, generated_judges, power_line, JudgedField,
};
use crate::run::fuzz::idem_map::Fit;
use crate::run::fuzz::idem_program::{
    arb_program, case_tag, pause_ms, requests_of, Req, Sent, Step,
};
use crate::run::fuzz::idem_scenario::{scenario_yaml, RACE_REPEAT};
use crate::run::fuzz::replay::replay;
use crate::run::fuzz::violation::FuzzViolation;
use crate::targets::{HttpRequest, HttpResponse, Target};
use reqkey_scenario::agent_step::Wire;

pub use crate::run::fuzz::idem_program::ARRIVAL_SLACK_MS;
/// Model states kept at once; beyond it the case has no verdict.
const MAX_STATES: usize = 4_096;

/// The HTTP request of `s`: its key under the name as its spelling writes
/// it, written byte for byte unless that is the library's lower case (a
/// burst sent together is written byte for byte anyway).
fn http_request(s: &Sent) -> HttpRequest {
    let r = &s.request;
    let name = s.req.key_header_name();
    let mut headers = vec![
        ("Content-Type".to_owned(), b"application/json".to_vec()),
        ("X-Reqkey-Caller".to_owned(), r.caller.clone().into_bytes()),
    ];
    if let Some(k) = &r.key {
        headers.push((name.to_owned(), k.clone()));
    }
    HttpRequest {
        method: r.method.clone(),
        path: r.path.clone(),
        headers,
        body: Some(r.body.clone()),
        replica: None,
        wire: if r.key.is_some() && name != name.to_ascii_lowercase() {
            Wire::Exact
        } else {
            Wire::Library
        },
    }
}

/// What the model reads of an HTTP answer.
pub fn observe(response: &HttpResponse, profile: &IdemProfile) -> IdemAnswer {
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
    };
    IdemAnswer {
        status: response.status,
        json: serde_json::from_slice::<Value>(&response.body).ok(),
        order_header: header("x-reqkey-order"),
        replayed: profile
            .replay_header
            .as_deref()
            .is_some_and(|h| header(h).is_some()),
    }
}

async fn exchange(
    target: &Arc<dyn Target>,
    request: HttpRequest,
    call_timeout_ms: u64,
) -> Result<HttpResponse, CaseFailure> {
    match tokio::time::timeout(Duration::from_millis(call_timeout_ms), target.http(request)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(CaseFailure::Harness(e.to_string())),
        Err(_) => Err(CaseFailure::Harness(format!(
            "no answer within {call_timeout_ms} ms"
        ))),
    }
}

/// The window of a request sent at `sent` and answered whole at
/// `answered` (ms on the program's clock).
fn window(sent: u64, answered: u64) -> Window {
    Window {
        sent_ms: sent,
        arrived_by_ms: (sent + ARRIVAL_SLACK_MS).min(answered),
        answered_ms: answered,
    }
}

/// Sends `group` together (behind a barrier, each after its delay; where
/// the target can, a group without delays with their last bytes released
/// at once, `targets/together.rs`) and answers each with its window on the
/// program's clock.
async fn send_group(
    target: &Arc<dyn Target>,
    group: &[Sent],
    start: Instant,
    profile: &IdemProfile,
    call_timeout_ms: u64,
) -> Result<Vec<(IdemAnswer, Window)>, CaseFailure> {
    if group.len() > 1 && target.sends_together() && group.iter().all(|s| s.delay_ms == 0) {
        let requests = group.iter().map(http_request).collect();
        let answers = tokio::time::timeout(
            Duration::from_millis(call_timeout_ms.saturating_mul(2)),
            target.http_together(requests),
        )
        .await
        .map_err(|_| CaseFailure::Harness(format!("no answer within {call_timeout_ms} ms")))?;
        let ms = |at: Instant| at.saturating_duration_since(start).as_millis() as u64;
        return answers
            .into_iter()
            .map(|a| {
                let t = a.map_err(|e| CaseFailure::Harness(e.to_string()))?;
                let w = window(ms(t.sent), ms(t.answered) + 1);
                Ok((observe(&t.response, profile), w))
            })
            .collect();
    }
    let barrier = Arc::new(Barrier::new(group.len()));
    let mut tasks = Vec::with_capacity(group.len());
    for s in group {
        let (target, barrier) = (Arc::clone(target), Arc::clone(&barrier));
        let (request, delay) = (http_request(s), s.delay_ms);
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            if delay > 0 {
                tokio::time::sleep(Duration::from_millis(delay)).await;
            }
            let sent = start.elapsed().as_millis() as u64;
            let answer = exchange(&target, request, call_timeout_ms).await?;
            let answered = start.elapsed().as_millis() as u64 + 1;
            Ok::<_, CaseFailure>((answer, sent, answered))
        }));
    }
    let mut out = Vec::with_capacity(tasks.len());
    for t in tasks {
        let (response, sent, answered) = t
            .await
            .map_err(|e| CaseFailure::Harness(format!("a request's task: {e}")))??;
        out.push((observe(&response, profile), window(sent, answered)));
    }
    Ok(out)
}

/// `/.reqkey/effects` as (entry, count), or why it is malformed.
pub fn parse_effects(v: &Value) -> Result<Vec<(EffectKey, u64)>, String> {
    let list = v
        .get("effects")
        .and_then(Value::as_array)
        .ok_or("no `effects` array")?;
    let text = |e: &Value, f: &str| e.get(f).and_then(Value::as_str).map(str::to_owned);
    list.iter()
        .map(|e| {
            let count = e
                .get("count")
                .and_then(Value::as_u64)
                .ok_or("an entry without a count")?;
            Ok((
                EffectKey {
                    method: text(e, "method").ok_or("an entry without a method")?,
                    path: text(e, "path").ok_or("an entry without a path")?,
                    caller: text(e, "caller").unwrap_or_default(),
                    key: text(e, "key"),
                    body_sha256: text(e, "bodySha256").ok_or("an entry without bodySha256")?,
                },
                count,
            ))
        })
        .collect()
}

/// Reads the effects oracle and judges it against `states` for the case's callers.
async fn judge_effects(
    target: &Arc<dyn Target>,
    states: &[IdemModel],
    tag: &str,
    call_timeout_ms: u64,
    at: &str,
) -> Result<(), CaseFailure> {
    let request = HttpRequest {
        method: "GET".into(),
        path: "/.reqkey/effects".into(),
        headers: Vec::new(),
        body: None,
        replica: None,
        wire: Wire::Library,
    };
    let response = exchange(target, request, call_timeout_ms).await?;
    let listed = serde_json::from_slice::<Value>(&response.body)
        .map_err(|e| e.to_string())
        .and_then(|v| parse_effects(&v))
        .map_err(|e| {
            CaseFailure::Nonconforming(format!(
                "{at}: [idem.effects.recorded] GET /.reqkey/effects answered {} that is not the effects list: {e}",
                response.status
            ))
        })?;
    let suffix = format!("-{tag}");
    let mine = |caller: &str| caller.ends_with(&suffix);
    let mut why = None;
    for s in states {
        match s.check_effects(&listed, mine) {
            Ok(()) => return Ok(()),
            Err(v) => {
                why.get_or_insert(v);
            }
        }
    }
    Err(CaseFailure::Nonconforming(match why {
        Some(v) => format!("{at}: {v}"),
        None => format!("{at}: no model state to judge the effects by"),
    }))
}

fn short(s: &str) -> String {
    s.chars().take(2_000).collect()
}

/// Runs one program against `target` (the case's keys and callers carry
/// `tag`, every body is grown by `grow_by` bytes, `body_size.rs`) and
/// judges it under `profile`.
pub async fn run_program(
    target: &Arc<dyn Target>,
    program: &[Step],
    tag: &str,
    profile: &IdemProfile,
    call_timeout_ms: u64,
    grow_by: usize,
) -> Result<(), CaseFailure> {
    let ran = program_run(target, program, tag, profile, call_timeout_ms, grow_by).await;
    match ran {
        Err(CaseFailure::Nonconforming(why)) if grow_by > 0 => Err(CaseFailure::Nonconforming(
            format!("{why} (every body of the program {grow_by} bytes larger)"),
        )),
        other => other,
    }
}

async fn program_run(
    target: &Arc<dyn Target>,
    program: &[Step],
    tag: &str,
    profile: &IdemProfile,
    call_timeout_ms: u64,
    grow_by: usize,
) -> Result<(), CaseFailure> {
    let start = Instant::now();
    let mut states = vec![IdemModel::new(profile)];
    let mut sent: Vec<Req> = Vec::new();
    for (k, step) in program.iter().enumerate() {
        match step {
            Step::Pause(p) => {
                tokio::time::sleep(Duration::from_millis(pause_ms(*p, profile))).await;
                continue;
            }
            Step::Effects => {
                judge_effects(target, &states, tag, call_timeout_ms, &format!("step {k}")).await?;
                continue;
            }
            _ => {}
        }
        let group: Vec<Sent> = requests_of(step, &sent, profile, tag)
            .into_iter()
            .map(|s| Sent {
                request: grown(s.request, grow_by, profile),
                ..s
            })
            .collect();
        sent.extend(group.iter().map(|s| s.req.clone()));
        let answers = send_group(target, &group, start, profile, call_timeout_ms).await?;
        let items: Vec<_> = group
            .iter()
            .zip(answers)
            .map(|(s, (a, w))| (s.request.clone(), a, w))
            .collect();
        states = match judge(&states, &items) {
            Ok(next) => next,
            Err(Judged::Violation(v)) => {
                return Err(CaseFailure::Nonconforming(short(&format!("step {k}: {v}"))))
            }
            Err(Judged::NoVerdict(why)) => {
                return Err(CaseFailure::Harness(format!("step {k}: the model: {why}")))
            }
        };
        if states.len() > MAX_STATES {
            return Err(CaseFailure::Harness(format!(
                "the model's state set grew over {MAX_STATES}"
            )));
        }
    }
    judge_effects(target, &states, tag, call_timeout_ms, "after the program").await
}

/// Options of an idem fuzz run.
#[derive(Debug, Clone)]
pub struct IdemFuzzOptions {
    pub cases: u32,
    pub seed: u64,
    /// Fresh per run: keys and callers are tagged with it (and the case).
    pub namespace: String,
    pub target_name: String,
    pub profile: IdemProfile,
    pub call_timeout_ms: u64,
    pub max_shrink_iters: u32,
    /// The weight of pauses past expiry among the steps (0: none).
    pub long_pauses: u32,
    /// Whether the fixed programs of `run/fuzz/idem_battery.rs` run first
    /// (every certification and `reqkey fuzz` send them).
    pub battery: bool,
}

/// A shrunk failure: the first violation's program, reason and scenario
/// (what a report of one finding shows), and every distinct violation.
#[derive(Debug, Clone)]
pub struct IdemFuzzFailure {
    pub seed: u64,
    pub program: Vec<Step>,
    pub reason: String,
    pub scenario_yaml: String,
    /// What the battery sent, when it ran.
    pub power: Option<String>,
    /// The declared fields the programs that reached a verdict judged.
    pub judged: Vec<JudgedField>,
    /// Every distinct violation (one per set of clauses blamed, at most
    /// [`MAX_DISTINCT_VIOLATIONS`]), the first one first, each with its
    /// reproduction replayed against the target.
    pub violations: Vec<FuzzViolation>,
    /// Why the pass stopped before its budget, when a program could not be
    /// judged after these violations were proven (they stand).
    pub stopped: Option<String>,
}

#[derive(Debug, Clone)]
pub enum IdemFuzzOutcome {
    /// `battery`: what the battery sent and the race rate it catches;
    /// `judged`: the declared fields its programs judged.
    Passed {
        cases: u32,
        battery: Option<String>,
        judged: Vec<JudgedField>,
    },
    Failed(Box<IdemFuzzFailure>),
    Error(String),
}

/// A violation found: its program and reproduction, replayed.
type Finding = Proven<Vec<Step>>;

/// Replays `scenario_yaml` against `target` and makes the violation.
fn proved(
    runtime: &tokio::runtime::Runtime,
    target: &Arc<dyn Target>,
    opts: &IdemFuzzOptions,
    (origin, found_at): (&str, u64),
    program: Vec<Step>,
    (reason, clauses): (String, Vec<String>),
    scenario_yaml: String,
) -> Finding {
    let replayed = replay(
        runtime,
        target,
        &scenario_yaml,
        &clauses,
        opts.seed,
        opts.call_timeout_ms,
    );
    Finding {
        violation: violation(
            &format!("{origin}: {program:?}"),
            clauses,
            reason,
            scenario_yaml,
            replayed,
        ),
        found_at,
        program,
    }
}

/// Runs `opts.cases` programs against `target`, going on after a failing
/// one (every distinct violation is shrunk, replayed and reported).
/// Blocking: call it outside any async context.
pub fn fuzz_idem(
    runtime: &tokio::runtime::Runtime,
    target: Arc<dyn Target>,
    opts: &IdemFuzzOptions,
) -> IdemFuzzOutcome {
    let mut power = opts.battery.then(power_line);
    // Through an API map: the routes and callers the map has (`idem_map.rs`).
    let fit = Fit::of(target.api_map(), &opts.profile);
    if let Some(p) = power.as_mut().filter(|_| fit.failing_at_once) {
        *p = p.replace(
            "on a slow failing one",
            "on a failing one that answers at once, each burst sent together",
        );
    }
    if let (Some(p), Some(note)) = (&mut power, fit.note()) {
        p.push_str("; ");
        p.push_str(&note);
    }
    let mut judged: Vec<JudgedField> = Vec::new();
    let mut findings: Vec<Finding> = Vec::new();
    let mut stopped: Option<String> = None;
    if opts.battery {
        let namespace = format!("{}.battery", opts.namespace);
        // A kind of probe that failed once is not sent again: its repeats
        // are there to meet a rare race, and each failure of a burst is
        // blamed by counterfactual (bounded searches over its orders), so
        // a target racing in every burst would cost minutes for nothing new.
        let mut failed_kinds = Vec::new();
        for (i, probe) in battery(&opts.profile).iter().enumerate() {
            if !fit.sends(probe.kind) || failed_kinds.contains(&probe.kind) {
                continue;
            }
            let program = fit.probe(&probe.program);
            let tag = case_tag(&namespace, i as u64);
            let ran = runtime.block_on(run_program(
                &target,
                &program,
                &tag,
                &opts.profile,
                opts.call_timeout_ms,
                grown_by(opts.seed, Stream::Battery, i as u64),
            ));
            if !matches!(ran, Err(CaseFailure::Harness(_))) {
                add_judged(
                    &mut judged,
                    fit.probe_judged(probe.kind.judges(&opts.profile)),
                );
            }
            match ran {
                Ok(()) => {}
                Err(CaseFailure::Nonconforming(why)) => {
                    failed_kinds.push(probe.kind);
                    let clauses = blamed_clauses(&why);
                    if findings
                        .iter()
                        .any(|f| same_set(&f.violation.clauses, &clauses))
                        || findings.len() >= MAX_DISTINCT_VIOLATIONS
                    {
                        continue;
                    }
                    let reason = format!(
                        "the battery's program {} ({:?}, one of {} of its kind): {why}",
                        i + 1,
                        probe.kind,
                        probe.repeat
                    );
                    let scenario_yaml = scenario_yaml(
                        &program,
                        &opts.profile,
                        &opts.target_name,
                        opts.seed,
                        &reason,
                        probe.repeat.max(RACE_REPEAT),
                    )
                    .replacen(
                        &format!(", shrunk to {} steps.", probe.program.len()),
                        ", a program of its battery (fixed, not shrunk).",
                        1,
                    );
                    let origin =
                        format!("the battery's program {} ({:?}, fixed)", i + 1, probe.kind);
                    findings.push(proved(
                        runtime,
                        &target,
                        opts,
                        (&origin, 0),
                        program,
                        (reason, clauses),
                        scenario_yaml,
                    ));
                }
                Err(CaseFailure::Harness(e)) => {
                    if findings.is_empty() {
                        return IdemFuzzOutcome::Error(format!("the battery: {e}"));
                    }
                    stopped = Some(format!("the battery: {e}"));
                    break;
                }
            }
        }
    }
    let strategy = arb_program(opts.long_pauses);
    let known: Vec<(Vec<String>, bool)> = findings
        .iter()
        .map(|f| (f.violation.clauses.clone(), f.violation.reproduced))
        .collect();
    // A battery stopped after proving violations: no programs follow.
    let outcome = match &stopped {
        Some(e) => AllOutcome::Stopped(Vec::new(), e.clone()),
        None => run_cases_all(
            opts.cases,
            opts.seed,
            opts.max_shrink_iters,
            &strategy,
            &known,
            |case, program| {
                let tag = case_tag(&opts.namespace, case);
                let program = fit.program(program);
                runtime.block_on(run_program(
                    &target,
                    &program,
                    &tag,
                    &opts.profile,
                    opts.call_timeout_ms,
                    grown_by(opts.seed, Stream::Cases, case),
                ))
            },
            |f| {
                let program = fit.program(&f.program);
                let scenario_yaml = scenario_yaml(
                    &program,
                    &opts.profile,
                    &opts.target_name,
                    opts.seed,
                    &f.reason,
                    RACE_REPEAT,
                );
                let origin = format!(
                    "program {} of {} (shrunk to {} steps)",
                    f.found_at,
                    opts.cases,
                    program.len()
                );
                let finding = proved(
                    runtime,
                    &target,
                    opts,
                    (&origin, f.found_at),
                    program,
                    (f.reason.clone(), f.clauses.clone()),
                    scenario_yaml,
                );
                (finding.violation.reproduced, finding)
            },
        ),
    };
    if opts.cases > 0 && matches!(outcome, AllOutcome::Done(_)) {
        add_judged(
            &mut judged,
            fit.judged(generated_judges(&opts.profile, opts.long_pauses)),
        );
    }
    match outcome {
        AllOutcome::Done(found) => findings.extend(found.into_iter().map(|(_, f)| f)),
        AllOutcome::Stopped(found, e) => {
            findings.extend(found.into_iter().map(|(_, f)| f));
            stopped.get_or_insert(e);
        }
        AllOutcome::Error(e) if findings.is_empty() => return IdemFuzzOutcome::Error(e),
        AllOutcome::Error(e) => {
            stopped.get_or_insert(e);
        }
    }
    let findings = one_per_set(findings);
    let Some(first) = findings.first() else {
        // A stop with nothing proven is no verdict, never a pass.
        if let Some(e) = stopped {
            return IdemFuzzOutcome::Error(e);
        }
        return IdemFuzzOutcome::Passed {
            cases: opts.cases,
            battery: power,
            judged,
        };
    };
    let (program, reason, yaml) = (
        first.program.clone(),
        first.violation.message.clone(),
        first.violation.scenario_yaml.clone(),
    );
    let violations = findings.into_iter().map(|f| f.violation).collect();
    IdemFuzzOutcome::Failed(Box::new(IdemFuzzFailure {
        seed: opts.seed,
        program,
        reason,
        scenario_yaml: yaml,
        power,
        judged,
        violations,
        stopped,
    }))
}
