//! A failing store fuzz program written as a scenario (`reqkey fuzz`'s
//! output, docs/scenario-format.md): the spec's answers as `expect` while
//! the program is sequential, batches as `parallel` groups checked for
//! linearizability, the reads around each write included, and every text
//! in a form YAML reads back as the same characters.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use reqkey_model::seq::{answer_to_wire, SeqStore, StoreOp};
use serde_json::{json, Value};

use crate::run::fuzz::agent_program::{pad, ID_MAX};
use crate::run::fuzz::program::{expand, Expanded, StoreProgram, SESSIONS};

/// Session ids the spec runs the program with when writing a scenario;
/// they become `$s0`, `$s1` in the file.
const PLACEHOLDER_SESSIONS: [&str; SESSIONS] = ["fuzz-placeholder-s0", "fuzz-placeholder-s1"];

/// Replaces placeholder session ids by `$sN` and drops free-text error
/// messages (patterns match by subset).
fn templatize(v: &Value) -> Value {
    match v {
        Value::String(s) => match PLACEHOLDER_SESSIONS.iter().position(|p| p == s) {
            Some(i) => json!(format!("$s{i}")),
            None => match PLACEHOLDER_SESSIONS
                .iter()
                .position(|p| pad(p, ID_MAX) == *s)
            {
                Some(i) => json!(format!("${{s{i}:{ID_MAX}}}")),
                None => v.clone(),
            },
        },
        Value::Array(items) => Value::Array(items.iter().map(templatize).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| k.as_str() != "message")
                .map(|(k, v)| (k.clone(), templatize(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// One store step as YAML (JSON flow maps are YAML).
fn step_line(request: &Value) -> String {
    let op = request["op"].as_str().unwrap_or("rpc");
    let args = if op == "commitRunStart" {
        &request["args"]["startRun"]
    } else {
        &request["args"]
    };
    format!("{op}: {}", yaml_safe(&templatize(args)))
}

/// The program as a scenario: sequential steps carry the spec's answer as
/// `expect`; a batch is a `parallel` group with `linearizable: true`; once
/// a batch has run, later single steps are groups of one, so that the
/// linearizability check covers them too.
pub fn scenario_yaml(program: &StoreProgram, target_name: &str, seed: u64, reason: &str) -> String {
    let sessions: Vec<String> = PLACEHOLDER_SESSIONS
        .iter()
        .map(|s| {
            if program.long_ids {
                pad(s, ID_MAX)
            } else {
                (*s).to_owned()
            }
        })
        .collect();
    let mut spec = Some(SeqStore::new());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "# Found by `reqkey fuzz --target {} --seed {}`, shrunk to {} steps.",
        target_name,
        seed,
        program.steps.len()
    );
    for line in reason.lines().take(1) {
        let _ = writeln!(out, "# {line}");
    }
    let _ = writeln!(out, "id: fuzz.seed-{}", seed);
    let _ = writeln!(out, "level: store");
    let _ = writeln!(out, "tags: [fuzz]");
    let _ = writeln!(
        out,
        "summary: A program found by reqkey fuzz (seed {}); every answer must be the spec's and the history linearizable.",
        seed
    );
    let _ = writeln!(out, "steps:");
    let mut checks: BTreeSet<&'static str> = BTreeSet::new();
    let mut judge = |out: &mut String, clauses: &[&'static str]| {
        checks.extend(clauses.iter().copied());
        let _ = writeln!(out, "    judges: [{}]", clauses.join(", "));
    };
    for step in &program.steps {
        let Expanded { together, after } = expand(step);
        if together.len() > 1 {
            spec = None;
            let _ = writeln!(out, "  - parallel:");
            for op in &together {
                let _ = writeln!(out, "      - {}", step_line(&op.request(&sessions)));
            }
            let _ = writeln!(out, "    linearizable: true");
            judge(&mut out, &[CONCURRENT]);
        }
        let alone = if together.len() == 1 {
            together.iter()
        } else {
            [].iter()
        };
        for op in alone.chain(&after) {
            let request = op.request(&sessions);
            match spec.as_mut() {
                Some(state) => {
                    let answer = match StoreOp::from_wire(&request) {
                        Ok(parsed) => state.apply(&parsed),
                        Err(e) => Err(e),
                    };
                    let _ = writeln!(out, "  - {}", step_line(&request));
                    let refused = matches!(
                        &answer,
                        Err(e) if e.kind() == "invalid_argument"
                    );
                    let _ = writeln!(
                        out,
                        "    expect: {}",
                        yaml_safe(&templatize(&answer_to_wire(&answer)))
                    );
                    let op = op_clause(&request);
                    if refused && op != INVALID {
                        judge(&mut out, &[op, INVALID]);
                    } else {
                        judge(&mut out, &[op]);
                    }
                }
                None => {
                    let _ = writeln!(out, "  - parallel:\n      - {}", step_line(&request));
                    let _ = writeln!(out, "    linearizable: true");
                    judge(&mut out, &[CONCURRENT]);
                }
            }
        }
    }
    // Every clause a step judges, as SPEC 8's scenario format asks.
    let all: Vec<&str> = checks.into_iter().collect();
    let _ = writeln!(out, "checks: [{}]", all.join(", "));
    out
}

/// The clause a history of batches is judged by.
pub(super) const CONCURRENT: &str = "wire.store.concurrent";
/// The clause an argument of another type or spelling is refused by.
const INVALID: &str = "wire.store.invalid-argument";

/// The clause of a request's op (SPEC 6 op table); an op the protocol
/// does not name (its name respelt) is an invalid argument.
pub(super) fn op_clause(request: &Value) -> &'static str {
    match request["op"].as_str().unwrap_or("") {
        "commitRunStart" => "wire.store.op.commit-run-start",
        "getRun" => "wire.store.op.get-run",
        "getCurrentRun" => "wire.store.op.get-current-run",
        "listRuns" => "wire.store.op.list-runs",
        "getRunByRequestKey" => "wire.store.op.get-run-by-request-key",
        "listInputs" => "wire.store.op.list-inputs",
        "setRunStatus" => "wire.store.op.set-run-status",
        "deleteSession" => "wire.store.op.delete-session",
        _ => INVALID,
    }
}

/// `v` as JSON text that is also a YAML flow value: the characters YAML
/// does not allow raw (DEL, the C1 controls, the byte-order mark,
/// non-characters, the line and paragraph separators) written as `\uXXXX`
/// escapes, which both read as the same character.
pub fn yaml_safe(v: &Value) -> String {
    let mut out = String::new();
    for c in v.to_string().chars() {
        let code = c as u32;
        if code == 0x7f
            || (0x80..=0x9f).contains(&code)
            || matches!(code, 0xfeff | 0xfffe | 0xffff | 0x2028 | 0x2029)
        {
            let _ = write!(out, "\\u{code:04x}");
        } else {
            out.push(c);
        }
    }
    out
}
