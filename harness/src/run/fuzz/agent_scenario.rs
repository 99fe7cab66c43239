//! A failing agent fuzz program written as a scenario (`reqkey fuzz`'s
//! output on agent targets, docs/fuzz.md). While the program is
//! sequential and settled each step carries the model's answer as
//! `expect` (new run ids bound as `$rN`, a `wait_run` after every new run,
//! as the fuzzer waits); a batch becomes a `parallel` group, and a step the
//! fuzzer did not wait after is followed by the pause it made; from either
//! on, steps are sent without `expect` (the file then reproduces the
//! requests, not the judgement: rerun `reqkey fuzz` with the seed). Every
//! request is written as it went on the wire: its headers, its body's
//! spelling, `wire: exact` or `chunked`. In issue 45's format, each step
//! with an expectation `judges:` the clause of its route (SPEC 7's route
//! table, or the refusal it must be), and `checks:` is their union.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use reqkey_model::agent::{answered_as_held, AgentModel, AgentOp, Observed};
use serde_json::{json, Value};

use crate::run::fuzz::agent_program::{
    build, named_run, pad, resolve, resolve_in_batch, After, AgentFuzzOptions, Domain, Op, Program,
    Step, BEFORE_MS, ID_MAX, PAST_MS, SESSIONS,
};
use crate::run::fuzz::scenario::yaml_safe;
use crate::targets::HttpRequest;
use reqkey_scenario::agent_step::Wire;

/// Session ids the model runs a program with when writing a scenario;
/// they become `$s0`, `$s1`, and run ids `fz-rN` become `$rN`.
const PLACEHOLDER_SESSIONS: [&str; SESSIONS] = ["fz-s0", "fz-s1"];

/// The longest body written whole into a scenario; a longer one (a body
/// at the 1 MiB limit) is shortened and padded with blanks to its size,
/// since the loader refuses a scenario file over 1 MiB.
const MAX_WRITTEN_BODY: usize = 16 * 1024;

/// Replaces placeholders by variables (`fz-s0` -> `${s0}`, a session id
/// padded to N characters -> `${s0:N}`, `fz-r3` -> `${r3}`).
fn templatize(text: &str) -> String {
    let mut out = text.to_owned();
    for (i, p) in PLACEHOLDER_SESSIONS.iter().enumerate() {
        for len in [ID_MAX + 1, ID_MAX] {
            out = out.replace(&pad(p, len), &format!("${{s{i}:{len}}}"));
        }
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
        Value::String(s) if s.starts_with("fz-") => {
            let t = templatize(s);
            if t.contains(':') {
                json!(t)
            } else {
                json!(t.replace(['{', '}'], ""))
            }
        }
        Value::Array(a) => Value::Array(a.iter().map(var).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), var(v))).collect()),
        other => other.clone(),
    }
}

/// The `expect` pattern of a conforming answer.
/// A new run's id (`fresh`) is not known before its answer binds it.
fn expect_of(o: &Observed, fresh: &str) -> Value {
    let mut e = json!({ "status": o.status });
    if let Some(s) = &o.stream {
        let ids = if s.run_id.as_deref() == Some(fresh) {
            json!({"$length": 1})
        } else {
            json!([s.run_id])
        };
        e["sse"] = json!({"attached": s.attached, "runIds": ids, "status": s.finish});
        if let [text] = s.texts.as_slice() {
            if text.len() <= MAX_WRITTEN_BODY {
                e["sse"]["text"] = json!(text);
            }
        }
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

/// One request as an `http` step (JSON flow maps are YAML), as it went
/// on the wire; a note when its body is too long to write whole.
fn http_line(request: &HttpRequest) -> (String, Option<String>) {
    let mut step = json!({"method": request.method, "path": templatize(&request.path)});
    if !request.headers.is_empty() {
        let headers: Vec<Value> = request
            .headers
            .iter()
            .map(|(n, v)| json!([n, templatize(&String::from_utf8_lossy(v))]))
            .collect();
        step["headers"] = Value::Array(headers);
    }
    let mut note = None;
    if let Some(body) = &request.body {
        let text = String::from_utf8_lossy(body);
        if body.len() > MAX_WRITTEN_BODY {
            let shell: String = text.chars().take(48).collect();
            step["body"] = json!(format!("{shell}\"}}}}"));
            step["pad_to_bytes"] = json!(body.len());
            note = Some(format!(
                "a body of {} bytes ({} characters) was sent here: shortened, padded with blanks to its size",
                body.len(),
                text.chars().count()
            ));
        } else {
            match serde_json::from_str::<Value>(&text) {
                Ok(v) if v.to_string() == text => step["json"] = var(&v),
                _ => step["body"] = json!(templatize(&text)),
            }
        }
    }
    if request.wire != Wire::Library {
        step["wire"] = json!(request.wire.name());
    }
    (format!("http: {}", yaml_safe(&step)), note)
}

fn write_request(out: &mut String, indent: &str, request: &HttpRequest) {
    let (line, note) = http_line(request);
    if let Some(note) = note {
        let _ = writeln!(out, "{indent}# {note}");
    }
    let _ = writeln!(out, "{indent}- {line}");
}

/// The program as a scenario (module docs).
pub fn scenario_yaml(program: &Program, opts: &AgentFuzzOptions, reason: &str) -> String {
    let sessions: Vec<String> = PLACEHOLDER_SESSIONS
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let mut dom = Domain::new(&sessions, program.long_ids);
    dom.tag = String::new();
    let mut model = Some(AgentModel::new(&opts.profile));
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut sent: Vec<Op> = Vec::new();
    let no_wait = |_: &str, _: &str| 0;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Found by `reqkey fuzz --target {} --seed {}`, shrunk to {} steps.",
        opts.target_name,
        opts.seed,
        program.steps.len()
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
    let _ = writeln!(out, "steps:");
    let mut checks: BTreeSet<&'static str> = BTreeSet::new();
    for step in &program.steps {
        match step {
            Step::Single(op) | Step::Unsettled(op, _) => {
                let op = resolve(op, &sent);
                sent.push(op.clone());
                let built = build(&op, &dom, &seen, &no_wait);
                let state = model
                    .as_ref()
                    .and_then(|m| m.settle_all().into_iter().next());
                let fresh = format!("fz-r{}", seen.len());
                let answer = state
                    .as_ref()
                    .and_then(|s| s.conforming(&built.model, &fresh));
                write_request(&mut out, "  ", &built.request);
                let Some((state, answer)) = state.zip(answer) else {
                    model = None;
                    let _ = writeln!(out, "    expect: any");
                    continue;
                };
                let _ = writeln!(out, "    expect: {}", expect_of(&answer, &fresh));
                let clause = route_clause(&built.model);
                checks.insert(clause);
                let refusal = expectation_clauses(state.plans(&built.model), &answer);
                checks.extend(refusal.iter().copied());
                let mut wait = None;
                if let Some(run) = named_run(&answer) {
                    if run == fresh {
                        seen.push((built.model.session().to_owned(), fresh.clone()));
                        let path = if answer.stream.is_some() {
                            "sse.runIds.0"
                        } else {
                            "json.runId"
                        };
                        let _ = writeln!(out, "    bind: {{r{}: {path}}}", seen.len() - 1);
                        if matches!(step, Step::Single(_)) {
                            wait = Some(format!(
                                "  - wait_run: {{sessionId: \"{}\", runId: \"${{r{}}}\", status: [completed, failed, interrupted, suspended_input]}}",
                                templatize(built.model.session()),
                                seen.len() - 1
                            ));
                        }
                    }
                }
                let judged: Vec<&str> = std::iter::once(clause).chain(refusal).collect();
                let _ = writeln!(out, "    judges: [{}]", judged.join(", "));
                if let Some(wait) = wait {
                    checks.insert(READ_RUN);
                    let _ = writeln!(out, "{wait}\n    judges: [{READ_RUN}]");
                }
                model = state
                    .next(&built.model, &answer, true)
                    .ok()
                    .and_then(|n| n.into_iter().next());
                if let Step::Unsettled(_, after) = step {
                    // The runs' ends are the target's from here: no expect.
                    model = None;
                    let ms = match after {
                        After::Now => 0,
                        After::Before => 80u64.saturating_sub(BEFORE_MS),
                        After::At => 80,
                        After::Past => 80 + PAST_MS,
                    };
                    if ms > 0 {
                        let _ = writeln!(
                            out,
                            "  # the fuzzer placed the next step {after:?} the latest run's end"
                        );
                        let _ = writeln!(out, "  - sleep_ms: {ms}");
                    }
                }
            }
            Step::Batch(ops) => {
                model = None;
                let _ = writeln!(out, "  - parallel:");
                let ops: Vec<Op> = ops.iter().map(|o| resolve_in_batch(o, &sent)).collect();
                sent.extend(ops.iter().cloned());
                for op in &ops {
                    let built = build(op, &dom, &seen, &no_wait);
                    write_request(&mut out, "      ", &built.request);
                    let _ = writeln!(out, "        expect: any");
                }
            }
        }
    }
    // Every clause a step judges, as SPEC 8's scenario format asks (none
    // when no step carries an expectation).
    if !checks.is_empty() {
        let all: Vec<&str> = checks.into_iter().collect();
        let _ = writeln!(out, "checks: [{}]", all.join(", "));
    }
    out
}

/// The clauses an expected answer judges beside its route's, the ones
/// the agent model blames when the answer differs from it
/// (`reqkey_model::agent`): a keyed 409's plan row and the `runId` it
/// names (SPEC 5, SPEC 7), a 404's refusal, and for a keyed entry the
/// spec answers as one without a holder, the plan's first row.
fn expectation_clauses(plans: bool, answer: &Observed) -> Vec<&'static str> {
    let code = answer
        .json
        .as_ref()
        .and_then(|j| j.get("code"))
        .and_then(Value::as_str);
    let mut out = match (answer.status, code) {
        (409, Some("state_request_key_conflict")) => {
            vec!["plan.row.key-conflict", "agent.keys.conflict-run-id"]
        }
        (409, Some("state_request_already_completed")) => {
            vec!["plan.row.already-completed", "agent.keys.conflict-run-id"]
        }
        (404, Some("state_session_not_found" | "state_run_not_found")) => {
            vec!["agent.refusal.not-found"]
        }
        _ => Vec::new(),
    };
    if plans && !answered_as_held(answer) {
        out.push("plan.row.new");
    }
    out
}

/// The clause a run read (and a `wait_run`) judges.
const READ_RUN: &str = "agent.route.run";

/// The clause of SPEC 7's route table (or refusal) a request's answer is
/// judged by.
pub(super) fn route_clause(op: &AgentOp) -> &'static str {
    match op {
        AgentOp::Start { .. } => "agent.route.start",
        AgentOp::Resume { .. } => "agent.route.resume",
        AgentOp::Retry { .. } => "agent.route.retry",
        AgentOp::ChatSend { .. } => "agent.route.chat",
        AgentOp::Reconnect { .. } => "agent.route.chat-reconnect",
        AgentOp::Snapshot { .. } => "agent.route.snapshot",
        AgentOp::ReadRun { .. } | AgentOp::BadWait { .. } => READ_RUN,
        AgentOp::Delete { .. } => "agent.route.delete",
        AgentOp::Health => "agent.route.health",
        AgentOp::Refusal { status, .. } => match status {
            404 => "agent.refusal.unknown-route",
            405 => "agent.refusal.method",
            413 => "agent.refusal.too-large",
            _ => "agent.refusal.bad-body",
        },
    }
}
